/* tmk_bench_loops.h — the instrumented loops tmk-bench-load records and tmk-bench-drain drains,
 * in one place so that both run the same zones: a tight loop of one zone, and a game-like frame
 * of 20 zones 3 deep. Header-only (static functions: each benchmark has its own call sites). */
#ifndef TMK_BENCH_LOOPS_H
#define TMK_BENCH_LOOPS_H

#include <stdint.h>

#include "telemark.h"

static volatile uint64_t tmk_bench_sink; /* what the loops compute, so that they are not removed */

/* n zones named "tight", one after the other. */
static void tmk_bench_tight(uint64_t n) {
  uint64_t i;
  for (i = 0; i < n; i++) {
    TMK_ZONE("tight", TMK_SEV_INFO, 1);
    tmk_bench_sink += i;
  }
}

/* For the cost of a filtered zone: a loop whose body is one add in a register (the empty asm
 * keeps the sum in a register and the loop a loop), with and without a zone. Unlike the tight
 * loop's volatile add, whose store-to-load chain hides a few cheap instructions beside it on some
 * machines, this body leaves the zone's own instructions in plain sight. (inline only so that a
 * benchmark that does not use them gets no unused-function warning: tmk-bench-load calls both
 * through a pointer.) */
static inline void tmk_bench_reg_zone(uint64_t n) {
  uint64_t i, acc = 0;
  for (i = 0; i < n; i++) {
    TMK_ZONE("reg", TMK_SEV_INFO, 1);
    acc += i;
    __asm__ volatile("" : "+r"(acc));
  }
  tmk_bench_sink = acc;
}
static inline void tmk_bench_reg_bare(uint64_t n) {
  uint64_t i, acc = 0;
  for (i = 0; i < n; i++) {
    acc += i;
    __asm__ volatile("" : "+r"(acc));
  }
  tmk_bench_sink = acc;
}

/* One frame: Frame > { Update > { AI, Physics x 6 }, Render > { Draw x 10 } }: 20 zones. */
static void tmk_bench_game_frame(uint64_t f) {
  int k;
  TMK_ZONE("Frame", TMK_SEV_INFO, 1);
  {
    TMK_ZONE("Update", TMK_SEV_INFO, 1);
    {
      TMK_ZONE("AI", TMK_SEV_INFO, 1);
      tmk_bench_sink += f;
    }
    for (k = 0; k < 6; k++) {
      TMK_ZONE("Physics", TMK_SEV_INFO, 1);
      tmk_bench_sink += (uint64_t)k;
    }
  }
  {
    TMK_ZONE("Render", TMK_SEV_INFO, 1);
    for (k = 0; k < 10; k++) {
      TMK_ZONE("Draw", TMK_SEV_INFO, 1);
      tmk_bench_sink += (uint64_t)k;
    }
  }
}

#endif
