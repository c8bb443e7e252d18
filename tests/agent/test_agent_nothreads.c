/* test_agent_nothreads.c — the TMK_NO_THREADS flavour (PSP-style single-core targets): no
 * flusher thread exists, the game loop calls tmk_agent_pump() once per frame, and every zone
 * still arrives; in wait mode a full ring is drained on the recording thread itself. */
#include "agent_test_util.h"

static void frame_work(int entities) {
  int i;
  TMK_ZONE("update", TMK_SEV_INFO, 1);
  for (i = 0; i < entities; i++) {
    TMK_ZONE("entity", TMK_SEV_INFO, 1);
  }
}

static void pump_per_frame(void** state) {
  receiver r;
  tmk_agent_desc d;
  tmk_agent_stats s;
  int frame;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.ring_bytes = 64 * 1024;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  for (frame = 0; frame < 300; frame++) {
    frame_work(50);
    TMK_FRAME();
    TMK_PLOT_I("frame", frame);
    assert_true(tmk_agent_pump() >= 0);
  }
  s = stats_now();
  assert_int_equal(s.drops[TMK_DROP_RING_FULL], 0);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(r.bad_packets, 0);
  assert_int_equal(recv_zones_named(&r, "entity"), 300 * 50);
  assert_int_equal(recv_zones_named(&r, "update"), 300);
  assert_int_equal(r.frames, 300);
  assert_int_equal(r.plots, 300);
  assert_int_equal(r.last_plot_i, 299);
}

static void wait_mode_drains_inline(void** state) {
  receiver r;
  tmk_agent_desc d;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.ring_bytes = 1024; /* 32 zones */
  d.overflow = TMK_OVERFLOW_WAIT;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  frame_work(5000); /* never pumped, yet nothing may be lost */
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&r, "entity"), 5000);
  assert_int_equal(recv_zones_named(&r, "update"), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      AGENT_TEST(pump_per_frame),
      AGENT_TEST(wait_mode_drains_inline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
