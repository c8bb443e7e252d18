/* test_agent_disabled.c — built with TMK_ENABLED=0 and linked WITHOUT the agent library: every
 * macro and API call must vanish (arguments unevaluated), so this links at all only if nothing
 * references the agent; CTest also runs nm on the binary to make sure. */
#include <stdio.h>

#include "telemark.h"

#if TMK_ENABLED
#error "this test must be built with TMK_ENABLED=0"
#endif

static int side_effects;
static int touch(void) { return ++side_effects; }
static int (*volatile keep_touch)(void) = touch; /* used only by disabled macros */

static int work(int n) {
  int i, sum = 0;
  TMK_ZONE("disabled", TMK_SEV_INFO, 1);
  for (i = 0; i < n; i++) {
    TMK_ZONE_C("inner", TMK_SEV_CRITICAL, 1, 0xFF0000);
    sum += i;
  }
  return sum;
}

int main(void) {
  static unsigned char arena[8192];
  tmk_agent_desc d = {0};
  tmk_agent_stats s;
  int failures = 0;
  (void)keep_touch;
  if (tmk_agent_init(&d, arena, sizeof arena) != 0) failures++;
  TMK_THREAD_NAME("main");
  TMK_FRAME();
  TMK_FRAME_NAMED("x");
  TMK_PLOT_I("p", touch());
  TMK_PLOT_D("q", touch());
  TMK_MESSAGE(TMK_SEV_ERROR, 1, "m");
  TMK_MESSAGE_TEXT(TMK_SEV_ERROR, 1, "m", touch());
  TMK_ZONE_BEGIN_DATA("b", TMK_SEV_INFO, 1, "x", touch());
  TMK_ZONE_END();
  if (work(10) != 45) failures++;
  if (side_effects != 0) failures++; /* macro arguments must not be evaluated */
  if (tmk_agent_get_stats(&s) != TMK_ESTATE) failures++;
  if (tmk_now() != 0 || tmk_agent_pump() != 0 || tmk_agent_shutdown() != 0) failures++;
  printf("TMK_ENABLED=0: %s\n", failures ? "FAILED" : "ok");
  return failures;
}
