/* board_mps2_an386.c — the Arm MPS2+ AN386 board (Cortex-M4) as qemu-system-arm emulates it:
 * the vector table and reset code, CMSDK APB UART0 (output, and one byte of input at the end), SysTick as the clock (24-bit, at
 * the 25 MHz core clock; counted up here), semihosting SYS_EXIT to stop the emulator. */
#include <stdint.h>
#include <string.h>

#include "board.h"

#define UART0_DATA (*(volatile uint32_t*)0x40004000u)
#define UART0_STATE (*(volatile uint32_t*)0x40004004u) /* bit 0: TX full, bit 1: RX full */
#define UART0_CTRL (*(volatile uint32_t*)0x40004008u)  /* bit 0: TX enable, bit 1: RX enable */
#define UART0_BAUDDIV (*(volatile uint32_t*)0x40004010u)
#define SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018u)

int main(void);
extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;

void board_init(void) {
  UART0_BAUDDIV = 16;
  UART0_CTRL = 3u;
  SYST_RVR = 0x00FFFFFFu;
  SYST_CVR = 0;
  SYST_CSR = 5u; /* enable, core clock, no interrupt */
}

void board_uart_write(const void* data, size_t len) {
  const uint8_t* p = (const uint8_t*)data;
  while (len--) {
    while (UART0_STATE & 1u) {
    }
    UART0_DATA = *p++;
  }
}

int board_uart_poll(void) {
  if (!(UART0_STATE & 2u)) return 0;
  (void)UART0_DATA;
  return 1;
}

uint32_t board_clock(void) { return 0x00FFFFFFu - (SYST_CVR & 0x00FFFFFFu); }

void board_exit(int code) {
  /* semihosting SYS_EXIT (0x18) with ADP_Stopped_ApplicationExit or RunTimeErrorUnknown */
  register uint32_t r0 __asm__("r0") = 0x18u;
  register uint32_t r1 __asm__("r1") = code == 0 ? 0x20026u : 0x20023u;
  __asm__ volatile("bkpt 0xab" : : "r"(r0), "r"(r1) : "memory");
  for (;;) {
  }
}

void reset_handler(void);
void reset_handler(void) {
  memcpy(&_sdata, &_sidata, (size_t)((char*)&_edata - (char*)&_sdata));
  memset(&_sbss, 0, (size_t)((char*)&_ebss - (char*)&_sbss));
  board_exit(main());
}

static void fault_handler(void) { board_exit(2); }

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))(uintptr_t)&_estack, reset_handler, fault_handler, fault_handler,
    fault_handler, fault_handler, fault_handler};
