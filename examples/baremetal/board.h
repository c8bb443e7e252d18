/* board.h — what the bare-metal example game needs from a board: a UART to write to, a 32-bit
 * counter that wraps (SysTick, mtime, DWT->CYCCNT) with its rate, and a way to stop. */
#ifndef BOARD_H
#define BOARD_H
#include <stddef.h>
#include <stdint.h>

void board_init(void);
/* Writes len bytes to the UART, waiting while it is busy. */
void board_uart_write(const void* data, size_t len);
/* Takes one byte from the UART if one has arrived: returns 1, else 0 (does not wait). */
int board_uart_poll(void);
/* Returns the free-running counter (wraps at 2^BOARD_CLOCK_BITS). */
uint32_t board_clock(void);
/* Ends the program (the emulator exits). */
void board_exit(int code);
#endif
