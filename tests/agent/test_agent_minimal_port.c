/* test_agent_minimal_port.c — the agent built on tests/agent/port_minimal (clock and TLS only):
 * it links, records through the callback transport, refuses the socket and file transports
 * with TMK_ENOTSUP, keeps one thread slot (TMK_PORT_ONE_THREAD), and times its metadata with
 * the agent's clock. */
#include "agent_test_util.h"

static void socket_and_file_transports_say_enotsup(void** state) {
  receiver r;
  tmk_agent_desc d;
  (void)state;
  memset(&d, 0, sizeof d);
  d.transport = TMK_TRANSPORT_UDP;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), TMK_ENOTSUP);
  d.transport = TMK_TRANSPORT_TCP;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), TMK_ENOTSUP);
  d.transport = TMK_TRANSPORT_AUTO;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), TMK_ENOTSUP);
  d.transport = TMK_TRANSPORT_FILE;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), TMK_ENOTSUP);
  recv_init_offline(&r);
  d = sink_desc(&r);
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  assert_int_equal(tmk_agent_shutdown(), 0);
}

static void callback_transport_records(void** state) {
  receiver r;
  int i;
  (void)state;
  recv_init_offline(&r);
  {
    tmk_agent_desc d = sink_desc(&r);
    assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  }
  for (i = 0; i < 100; i++) {
    TMK_ZONE("outer", TMK_SEV_INFO, 1);
    {
      TMK_ZONE("inner", TMK_SEV_INFO, 1);
    }
  }
  assert_true(tmk_agent_pump() >= 1);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&r, "outer"), 100);
  assert_int_equal(recv_zones_named(&r, "inner"), 100);
  assert_string_equal(r.platform, "minimal");
  /* The port's clock moves 1 us per reading and the agent reads it once per zone edge: an
   * outer zone spans 3 readings. */
  assert_int_equal(r.max_duration, 3000u * r.timer_freq / 1000000000u);
}

/* TMK_PORT_ONE_THREAD: one slot whatever desc.max_threads says; after tmk_thread_exit() the
 * flusher frees it and the next zone takes it again. */
static void one_thread_port_keeps_one_slot(void** state) {
  receiver r;
  tmk_agent_stats s;
  (void)state;
  recv_init_offline(&r);
  {
    tmk_agent_desc d = sink_desc(&r);
    d.max_threads = 8;
    assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  }
  assert_int_equal(tmk_agent_get_stats(&s), 0);
  assert_int_equal(s.max_threads, 1);
  {
    TMK_ZONE("before", TMK_SEV_INFO, 1);
  }
  tmk_thread_exit();
  assert_true(tmk_agent_pump() >= 0); /* drains the slot and frees it */
  {
    TMK_ZONE("after", TMK_SEV_INFO, 1);
  }
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&r, "before"), 1);
  assert_int_equal(recv_zones_named(&r, "after"), 1);
}

/* Without threads and sockets the agent's one timer, the 2 s metadata interval, runs on the
 * agent's clock: metadata (a CLOCK_SYNC among it) goes out in the first cycle and then once 2 s
 * of desc.clock have passed, not before; a clock that steps back is waited for. */
static uint64_t fake_now;
static uint64_t fake_clock(void* user) {
  (void)user;
  return fake_now;
}

static void metadata_every_two_seconds_of_the_clock(void** state) {
  static const struct {
    int64_t step;
    uint64_t syncs;
  } steps[] = {{0, 1}, {19999, 1}, {1, 2}, {-500, 2}, {20499, 2}, {1, 3}, {1000000, 4}};
  receiver r;
  tmk_agent_desc d;
  size_t i;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.clock.fn = fake_clock;
  d.clock.frequency = 10000; /* 2 s: 20000 ticks */
  fake_now = 5000;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  for (i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    fake_now += (uint64_t)steps[i].step;
    assert_true(tmk_agent_pump() >= 0);
    assert_int_equal(r.clock_syncs, steps[i].syncs);
  }
  assert_int_equal(tmk_agent_shutdown(), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      AGENT_TEST(socket_and_file_transports_say_enotsup),
      AGENT_TEST(callback_transport_records),
      AGENT_TEST(one_thread_port_keeps_one_slot),
      AGENT_TEST(metadata_every_two_seconds_of_the_clock),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
