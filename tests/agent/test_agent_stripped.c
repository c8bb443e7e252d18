/* test_agent_stripped.c — built with TMK_MAX_SEVERITY=2 (warning): a debug zone here must be
 * stripped at compile time even when the run-time level lets debug through. */
#include "telemark.h"

int stripped_debug_zone(void);

/* Records one debug zone (stripped) and one error zone (kept). Returns 1 if the debug zone's
 * filter test let it through in this file (it must not: the caller's filter would). */
int stripped_debug_zone(void) {
  {
    TMK_ZONE("stripped-debug", TMK_SEV_DEBUG, 0xFFFFFFFFu);
  }
  {
    TMK_ZONE("kept-error", TMK_SEV_ERROR, 0xFFFFFFFFu);
  }
  return TMK__PASS(TMK_SEV_DEBUG, 0xFFFFFFFFu) ? 1 : 0;
}
