/* agent_test_util.h — shared helpers for the agent tests: a static arena, a callback transport
 * that decodes straight into an offline receiver, and small waits. */
#ifndef AGENT_TEST_UTIL_H
#define AGENT_TEST_UTIL_H
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "telemark.h"
#include "tmk_test.h"
#include "tmk_test_receiver.h"

#define ARENA_BYTES (4u << 20)
static uint64_t test_arena[ARENA_BYTES / 8];

static inline int sink_write(void* user, const void* data, size_t len) {
  return recv_feed_stream((receiver*)user, (const uint8_t*)data, len) == 1 ? 0 : -1;
}

static inline void sleep_ms(int ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (long)(ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

/* A desc whose packets are decoded into *r (callback transport). */
static inline tmk_agent_desc sink_desc(receiver* r) {
  tmk_agent_desc d;
  memset(&d, 0, sizeof d);
  d.transport = TMK_TRANSPORT_CALLBACK;
  d.write.fn = sink_write;
  d.write.user_data = r;
  d.program = "agent-test";
  return d;
}

/* A desc that sends to the socket receiver *r (started with recv_start) over UDP or TCP. */
static inline tmk_agent_desc relay_desc(const receiver* r, int tcp) {
  tmk_agent_desc d;
  memset(&d, 0, sizeof d);
  d.relay_host = "127.0.0.1";
  d.relay_port = tcp ? r->tcp_port : r->udp_port;
  d.transport = tcp ? TMK_TRANSPORT_TCP : TMK_TRANSPORT_UDP;
  return d;
}

/* A desc aimed at a loopback port nobody listens on (a receiver started and stopped). */
static inline tmk_agent_desc dead_relay_desc(int tcp) {
  receiver r;
  tmk_agent_desc d;
  memset(&r, 0, sizeof r);
  if (recv_start(&r) != 0) fail_msg("receiver did not start");
  recv_stop(&r);
  d = relay_desc(&r, tcp);
  return d;
}

/* Per-test setup: a failed test may have left the agent running. */
static inline int agent_reset(void** state) {
  (void)state;
  tmk_agent_shutdown();
  return 0;
}
#define AGENT_TEST(f) cmocka_unit_test_setup_teardown(f, agent_reset, agent_reset)

static inline tmk_agent_stats stats_now(void) {
  tmk_agent_stats s;
  assert_int_equal(tmk_agent_get_stats(&s), 0);
  return s;
}
#endif
