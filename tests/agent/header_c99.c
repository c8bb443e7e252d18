/* header_c99.c — compile test: telemark.h in strict C99 with every macro used once (TMK_ZONE
 * only where the compiler has it: GCC/Clang; tests/agent also compiles this in MSVC mode). */
#include "telemark.h"

int main(void) {
  tmk_agent_desc d = {0};
  (void)d;
  {
#ifdef TMK_ZONE
    TMK_ZONE("c99", TMK_SEV_INFO, 1);
    TMK_ZONE_C("c99-colour", TMK_SEV_INFO, 1, 0x00FF00);
#endif
    TMK_ZONE_BEGIN("m", TMK_SEV_INFO, 1);
    TMK_ZONE_END_DATA("x", 1);
    TMK_FRAME();
    TMK_FRAME_NAMED("f");
    TMK_PLOT_I("i", 1);
    TMK_PLOT_D("d", 1.0);
    TMK_MESSAGE(TMK_SEV_INFO, 1, "hello");
    TMK_MESSAGE_TEXT(TMK_SEV_INFO, 1, "abc", 3);
    TMK_THREAD_NAME("main");
  }
  return tmk_ticks_per_second() == 0 ? 0 : 1;
}
