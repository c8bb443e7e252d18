/* game.c — a small instrumented "game loop" for bare-metal boards: the agent on the bare-metal
 * port, its clock a 32-bit (or narrower) wrapping board counter, its packets written to the UART
 * through the callback transport. Each frame: "frame" > "update" > "physics" (spins 2 ms of board
 * time) and "frame" > "render" (1 ms), a plot "entities" = frame number, a frame mark. The
 * tests (tests/baremetal) check these names, nesting and durations through the relay. */
#include "board.h"
#include "telemark.h"

#ifndef GAME_FRAMES
#define GAME_FRAMES 20
#endif

static uint64_t arena[10240 / 8]; /* TMK_ARENA_MIN (8,128 B) and a bigger ring */

static int uart_write(void* user, const void* data, size_t len) {
  (void)user;
  board_uart_write(data, len);
  return 0;
}

static uint64_t clock_read(void* user) {
  (void)user;
  return board_clock();
}

/* Spins until `us` microseconds of board time have passed (both boards' clocks run at a whole
 * number of MHz; 32-bit arithmetic, so no 64-bit division helper is linked). */
static void spin_us(uint32_t us) {
  uint32_t start = board_clock();
  uint32_t ticks = (uint32_t)(BOARD_CLOCK_HZ / 1000000u) * us;
  while (((board_clock() - start) & BOARD_CLOCK_MASK) < ticks) {
  }
}

/* Waits up to `ms` milliseconds of board time for a byte on the UART. */
static void wait_for_byte(uint32_t ms) {
  while (ms-- && !board_uart_poll()) spin_us(1000);
}

int main(void) {
  tmk_agent_desc d = {0};
  uint32_t f;
  board_init();
  d.transport = TMK_TRANSPORT_CALLBACK;
  d.write.fn = uart_write;
  d.program = "baremetal-game";
  d.clock.fn = clock_read;
  d.clock.frequency = BOARD_CLOCK_HZ;
  d.clock.bits = BOARD_CLOCK_BITS;
  d.max_threads = 1;
  if (tmk_agent_init(&d, arena, sizeof arena) != 0) board_exit(1);
  for (f = 0; f < GAME_FRAMES; f++) {
    {
      TMK_ZONE("frame", TMK_SEV_INFO, 1);
      {
        TMK_ZONE("update", TMK_SEV_INFO, 1);
        {
          TMK_ZONE("physics", TMK_SEV_INFO, 1);
          spin_us(2000);
        }
      }
      {
        TMK_ZONE("render", TMK_SEV_INFO, 1);
        spin_us(1000);
      }
    }
    TMK_PLOT_I("entities", f);
    TMK_FRAME();
    tmk_agent_pump();
  }
  tmk_agent_shutdown();
  /* An emulator that stops at once closes its end of the pty, and the host's tty layer then
   * throws away what the relay has not read yet: wait (at most 5 s of board time) for one byte
   * back on the serial line. The end-to-end test sends it once the relay holds the BYE. */
  wait_for_byte(5000);
  board_exit(0);
  return 0;
}
