// header_cxx.cpp — compile test: telemark.h as C++ (RAII zones) with every macro used once.
#include "telemark.h"

static int scoped() {
  TMK_ZONE("cxx", TMK_SEV_INFO, 1);
  TMK_ZONE_C("cxx-colour", TMK_SEV_WARNING, 2, 0x0000FF);
  return 1;
}

int main() {
  tmk_agent_desc d = tmk_agent_desc();
  (void)d;
  TMK_ZONE_BEGIN_DATA("m", TMK_SEV_INFO, 1, "x", 1);
  TMK_ZONE_END();
  TMK_FRAME();
  TMK_FRAME_NAMED("f");
  TMK_PLOT_I("i", 1);
  TMK_PLOT_D("d", 1.0);
  TMK_MESSAGE(TMK_SEV_INFO, 1, "hello");
  TMK_MESSAGE_TEXT(TMK_SEV_INFO, 1, "abc", 3);
  TMK_THREAD_NAME("main");
  return scoped() == 1 && tmk_ticks_per_second() == 0 ? 0 : 1;
}
