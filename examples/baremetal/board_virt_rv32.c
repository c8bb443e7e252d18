/* board_virt_rv32.c — qemu-system-riscv32's "virt" machine: reset code, the NS16550A UART at
 * 0x10000000 (output, and one byte of input at the end), the CLINT's mtime (10 MHz, its low 32 bits wrap) as the clock, and the
 * SiFive test device to stop the emulator. */
#include <stdint.h>
#include <string.h>

#include "board.h"

#define UART_THR (*(volatile uint8_t*)0x10000000u) /* written: transmit; read: receive */
#define UART_LSR (*(volatile uint8_t*)0x10000005u) /* bit 0: data ready, bit 5: THR empty */
#define MTIME_LO (*(volatile uint32_t*)0x0200BFF8u)
#define TEST_DEV (*(volatile uint32_t*)0x00100000u)

int main(void);
extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss;

void board_init(void) {}

void board_uart_write(const void* data, size_t len) {
  const uint8_t* p = (const uint8_t*)data;
  while (len--) {
    while (!(UART_LSR & 0x20u)) {
    }
    UART_THR = *p++;
  }
}

int board_uart_poll(void) {
  if (!(UART_LSR & 1u)) return 0;
  (void)UART_THR;
  return 1;
}

uint32_t board_clock(void) { return MTIME_LO; }

void board_exit(int code) {
  TEST_DEV = code == 0 ? 0x5555u : (((uint32_t)code << 16) | 0x3333u);
  for (;;) {
  }
}

void board_start(void);
void board_start(void) {
  memcpy(&_sdata, &_sidata, (size_t)((char*)&_edata - (char*)&_sdata));
  memset(&_sbss, 0, (size_t)((char*)&_ebss - (char*)&_sbss));
  board_exit(main());
}

__asm__(".section .text.start\n"
        ".global _start\n"
        "_start:\n"
        "  .option push\n"
        "  .option norelax\n"
        "  la gp, __global_pointer$\n"
        "  .option pop\n"
        "  la sp, _estack\n"
        "  j board_start\n");
