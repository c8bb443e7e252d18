/* test_agent_net.c — the agent over real sockets on 127.0.0.1 to a receiver that decodes every
 * packet: every zone accounted for over UDP and over TCP, TCP fallback when no UDP socket can be
 * opened, TCP reconnect, live level/mask changes by CONTROL packets (UDP reply and TCP),
 * bounded, non-blocking behaviour with no relay at all, and the flusher thread's name (Linux). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agent_test_util.h"
#include "tmk_port.h"
#include "tmk_port_posix.h"

#define ITER 1500
#define PRODUCERS 2

static void* producer(void* arg) {
  int i;
  char name[16];
  snprintf(name, sizeof name, "worker-%d", (int)(intptr_t)arg);
  tmk_thread_name(name);
  for (i = 0; i < ITER; i++) {
    TMK_ZONE("frame", TMK_SEV_INFO, 1);
    {
      TMK_ZONE("update", TMK_SEV_INFO, 1);
      {
        TMK_ZONE("leaf", TMK_SEV_INFO, 1);
      }
    }
    {
      TMK_ZONE("render", TMK_SEV_INFO, 2);
    }
  }
  return NULL;
}

static void run_producers(void) {
  pthread_t t[PRODUCERS];
  intptr_t i;
  for (i = 0; i < PRODUCERS; i++) pthread_create(&t[i], NULL, producer, (void*)i);
  for (i = 0; i < PRODUCERS; i++) pthread_join(t[i], NULL);
}

static int wait_connected(int ms) {
  int i;
  for (i = 0; i < ms; i += 5) {
    tmk_agent_stats s;
    if (tmk_agent_get_stats(&s) == 0 && s.connected) return 1;
    sleep_ms(5);
  }
  return 0;
}

static void check_all_zones(receiver* r) {
  uint64_t want = (uint64_t)PRODUCERS * ITER * 4;
  if (!recv_wait_at_least(r, &r->zones, want, 5000)) {
    fail_msg("receiver has %llu zones of %llu (seq gaps %llu)",
             (unsigned long long)recv_get(r, &r->zones), (unsigned long long)want,
             (unsigned long long)recv_get(r, &r->seq_gaps));
  }
  assert_int_equal(recv_zones_named(r, "frame"), PRODUCERS * ITER);
  assert_int_equal(recv_zones_named(r, "update"), PRODUCERS * ITER);
  assert_int_equal(recv_zones_named(r, "leaf"), PRODUCERS * ITER);
  assert_int_equal(recv_zones_named(r, "render"), PRODUCERS * ITER);
  assert_int_equal(recv_get(r, &r->zones), want);
  assert_int_equal(recv_get(r, &r->bad_packets), 0);
  assert_int_equal(recv_get(r, &r->zone_depth_errors), 0);
  assert_int_equal(recv_get(r, &r->max_depth), 2);
}

static void e2e(int tcp, int fail_udp) {
  static receiver r;
  tmk_agent_desc d;
  tmk_agent_stats s;
  r.auto_welcome = 1;
  assert_int_equal(recv_start(&r), 0);
  d = relay_desc(&r, tcp);
  if (fail_udp) d.transport = TMK_TRANSPORT_AUTO;
  d.program = "net-test";
  d.overflow = TMK_OVERFLOW_WAIT;
  d.team_names[1] = "render";
  tmk_port_test_fail_udp(fail_udp);
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  tmk_port_test_fail_udp(0);
  s = stats_now();
  assert_int_equal(s.transport, tcp ? TMK_TRANSPORT_TCP : TMK_TRANSPORT_UDP);
  if (tcp) assert_true(wait_connected(5000));
  assert_true(recv_wait_at_least(&r, &r.hellos, 1, 5000));
  run_producers();
  tmk_agent_flush();
  check_all_zones(&r);
  /* The WELCOME came back over the same transport. */
  {
    int i;
    for (i = 0; i < 400 && !stats_now().welcomed; i++) sleep_ms(5);
  }
  s = stats_now();
  assert_true(s.welcomed);
  assert_int_equal(s.drops[TMK_DROP_SEND_FAILED], 0);
  assert_int_equal(s.drops[TMK_DROP_RING_FULL], 0);
  assert_int_equal(s.zones_sent, (uint64_t)PRODUCERS * ITER * 4);
  assert_int_equal(s.zones_unsent, 0);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_true(recv_wait_at_least(&r, &r.byes, 1, 2000));
  assert_int_equal(recv_get(&r, &r.hello_caps) & TMK_CAP_TCP, tcp ? TMK_CAP_TCP : 0);
  assert_true(recv_get(&r, &r.timer_freq) > 0);
  assert_string_equal(r.program, "net-test");
  assert_string_equal(r.team_names[1], "render");
  assert_true(strncmp(r.thread_names[0], "worker-", 7) == 0);
  if (tcp) assert_int_equal(recv_get(&r, &r.udp_packets), 0);
  else assert_int_equal(recv_get(&r, &r.tcp_packets), 0);
  recv_stop(&r);
}

static void udp_every_zone_accounted(void** state) {
  (void)state;
  e2e(0, 0);
}

static void tcp_every_zone_accounted(void** state) {
  (void)state;
  e2e(1, 0);
}

static void tcp_fallback_when_udp_unavailable(void** state) {
  (void)state;
  e2e(1, 1);
}

static void log_stderr(void* user, int level, const char* msg) {
  (void)user;
  fprintf(stderr, "[agent %s] %s\n", tmk_proto_severity_name((unsigned)level), msg);
}

static void tcp_reconnects(void** state) {
  static receiver r;
  tmk_agent_desc d;
  uint64_t hellos;
  int i;
  (void)state;
  assert_int_equal(recv_start(&r), 0);
  d = relay_desc(&r, 1);
  if (getenv("TMK_TEST_VERBOSE")) d.logger.fn = log_stderr;
  d.overflow = TMK_OVERFLOW_WAIT;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  assert_true(wait_connected(5000));
  assert_true(recv_wait_at_least(&r, &r.hellos, 1, 5000));
  sleep_ms(50);
  hellos = recv_get(&r, &r.hellos);
  assert_int_equal(hellos, 1); /* exactly one per connection */
  recv_kick_tcp(&r);
  /* The agent notices on its next read or send, and connects again with a new HELLO. */
  for (i = 0; i < 600 && recv_get(&r, &r.hellos) <= hellos; i++) {
    TMK_ZONE("tick", TMK_SEV_INFO, 1);
    sleep_ms(5);
  }
  assert_true(recv_get(&r, &r.hellos) > hellos);
  assert_true(wait_connected(5000));
  producer((void*)(intptr_t)0);
  tmk_agent_flush();
  if (!recv_wait_at_least(&r, &r.zones, ITER * 4, 5000))
    fail_msg("after reconnect: %llu zones, connected %d, send failures %llu, sent %llu, "
             "receiver: %llu data packets, %llu bad, %llu hellos",
             (unsigned long long)recv_get(&r, &r.zones), stats_now().connected,
             (unsigned long long)stats_now().drops[TMK_DROP_SEND_FAILED],
             (unsigned long long)stats_now().packets_sent,
             (unsigned long long)recv_get(&r, &r.data_packets),
             (unsigned long long)recv_get(&r, &r.bad_packets),
             (unsigned long long)recv_get(&r, &r.hellos));
  assert_int_equal(tmk_agent_shutdown(), 0);
  recv_stop(&r);
}

static void control(int tcp) {
  static receiver r;
  tmk_agent_desc d;
  int i;
  assert_int_equal(recv_start(&r), 0);
  d = relay_desc(&r, tcp);
  d.level = TMK_LEVEL(TMK_SEV_INFO);
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  if (tcp) assert_true(wait_connected(5000));
  assert_true(recv_wait_at_least(&r, &r.hellos, 1, 5000)); /* UDP: now it knows our address */
  {
    TMK_ZONE("debug-zone", TMK_SEV_DEBUG, 0x10);
  }
  assert_int_equal(recv_send_control(&r, tcp, 5, TMK_SEV_DEBUG, 0x10), 0);
  for (i = 0; i < 1000 && stats_now().level != TMK_SEV_DEBUG; i++) sleep_ms(5);
  assert_int_equal(stats_now().level, TMK_SEV_DEBUG);
  assert_int_equal(stats_now().verbosity, 0x10);
  {
    TMK_ZONE("debug-zone", TMK_SEV_DEBUG, 0x10);
  }
  {
    TMK_ZONE("other-team", TMK_SEV_INFO, 0x01); /* mask now excludes team 0 */
  }
  /* Stale and repeated change numbers are ignored (§6.4); a newer one applies. */
  assert_int_equal(recv_send_control(&r, tcp, 5, TMK_SEV_ERROR, 0x1), 0);
  assert_int_equal(recv_send_control(&r, tcp, 3, TMK_SEV_ERROR, 0x1), 0);
  assert_int_equal(recv_send_control(&r, tcp, 6, TMK_SEV_TRACE, 0x11), 0);
  for (i = 0; i < 1000 && stats_now().level != TMK_SEV_TRACE; i++) sleep_ms(5);
  assert_int_equal(stats_now().level, TMK_SEV_TRACE);
  assert_int_equal(stats_now().control_applied, 2);
  tmk_agent_flush();
  assert_true(recv_wait_at_least(&r, &r.zones, 1, 3000));
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_true(recv_wait_at_least(&r, &r.byes, 1, 2000));
  assert_int_equal(recv_zones_named(&r, "debug-zone"), 1);
  assert_int_equal(recv_zones_named(&r, "other-team"), 0);
  recv_stop(&r);
}

static void control_over_udp(void** state) {
  (void)state;
  control(0);
}

static void control_over_tcp(void** state) {
  (void)state;
  control(1);
}

/* Keyed (§2.1): every packet the agent sends carries a valid MAC and all of it arrives; a
 * CONTROL without a MAC or with another key is ignored and counted, a keyed one applies. */
static const uint8_t test_key[16] = {0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87,
                                     0x98, 0xa9, 0xba, 0xcb, 0xdc, 0xed, 0xfe, 0x0f};
static void keyed(int tcp) {
  static receiver r;
  uint8_t other[16];
  tmk_agent_desc d;
  int i;
  memcpy(other, test_key, 16);
  other[0] ^= 0x80;
  memset(&r, 0, sizeof r);
  r.key = test_key;
  r.auto_welcome = 1;
  assert_int_equal(recv_start(&r), 0);
  d = relay_desc(&r, tcp);
  d.key = test_key;
  d.level = TMK_LEVEL(TMK_SEV_INFO);
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  assert_int_equal(stats_now().keyed, 1);
  if (tcp) assert_true(wait_connected(5000));
  assert_true(recv_wait_at_least(&r, &r.hellos, 1, 5000));
  for (i = 0; i < 1000 && !stats_now().welcomed; i++) sleep_ms(5);
  assert_int_equal(stats_now().welcomed, 1); /* the keyed WELCOME was obeyed */
  for (i = 0; i < 2000; i++) {
    TMK_ZONE("keyed-zone", TMK_SEV_INFO, 1);
  }
  /* forged: no MAC, then another key; neither may change the filter */
  assert_int_equal(recv_send_control_key(&r, tcp, 5, TMK_SEV_TRACE, 0x10, NULL), 0);
  assert_int_equal(recv_send_control_key(&r, tcp, 6, TMK_SEV_TRACE, 0x10, other), 0);
  for (i = 0; i < 1000 && stats_now().unauthenticated < 2; i++) sleep_ms(5);
  assert_int_equal(stats_now().unauthenticated, 2);
  assert_int_equal(stats_now().level, TMK_SEV_INFO);
  assert_int_equal(stats_now().control_applied, 0);
  assert_int_equal(recv_send_control(&r, tcp, 7, TMK_SEV_DEBUG, 0x10), 0);
  for (i = 0; i < 1000 && stats_now().level != TMK_SEV_DEBUG; i++) sleep_ms(5);
  assert_int_equal(stats_now().level, TMK_SEV_DEBUG);
  assert_int_equal(stats_now().control_applied, 1);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_true(recv_wait_at_least(&r, &r.byes, 1, 2000));
  assert_int_equal(recv_zones_named(&r, "keyed-zone"), 2000);
  assert_int_equal(recv_get(&r, &r.unkeyed_packets), 0);
  assert_int_equal(recv_get(&r, &r.bad_macs), 0);
  assert_int_equal(recv_get(&r, &r.bad_packets), 0);
  assert_true(recv_get(&r, &r.keyed_packets) >= 3); /* HELLO, DATA..., BYE */
  recv_stop(&r);
}

static void keyed_over_udp(void** state) {
  (void)state;
  keyed(0);
}

static void keyed_over_tcp(void** state) {
  (void)state;
  keyed(1);
}

/* The callback transport with the smallest packets: every packet keyed, MAC within max_packet. */
static void keyed_agent_small_packets(void** state) {
  receiver r;
  tmk_agent_desc d;
  int i;
  (void)state;
  recv_init_offline(&r);
  r.key = test_key;
  d = sink_desc(&r);
  d.key = test_key;
  d.max_packet = TMK_PROTO_MIN_PACKET; /* the MAC must fit under the limit too */
  d.no_compression = 1;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  for (i = 0; i < 3000; i++) {
    TMK_ZONE("small", TMK_SEV_INFO, 1);
  }
  tmk_agent_flush();
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&r, "small"), 3000);
  assert_int_equal(r.unkeyed_packets + r.bad_macs + r.bad_packets, 0);
  assert_true(r.keyed_packets > 10);
  assert_true(r.max_packet_len <= TMK_PROTO_MIN_PACKET);
  assert_true(r.max_packet_len > TMK_PROTO_MIN_PACKET - 64); /* packets were filled */
}

/* Default packets: 16 KB where nothing fragments (UDP to this machine, TCP), 1200 bytes on
 * other links (here the callback transport) and 512 for tiny arenas; every zone arrives. */
static void default_packet_by_link(void** state) {
  static receiver r;
  static uint64_t small_arena[(64u << 10) / 8];
  receiver sink;
  tmk_agent_desc d;
  int i, tcp;
  (void)state;
  for (tcp = 0; tcp < 2; tcp++) {
    memset(&r, 0, sizeof r);
    assert_int_equal(recv_start(&r), 0);
    d = relay_desc(&r, tcp);
    d.overflow = TMK_OVERFLOW_WAIT;
    assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
    assert_int_equal(stats_now().max_packet, 16384);
    if (tcp) assert_true(wait_connected(5000));
    for (i = 0; i < 60000; i++) {
      TMK_ZONE("packed", TMK_SEV_INFO, 1);
    }
    tmk_agent_flush();
    assert_true(recv_wait_at_least(&r, &r.zones, 60000, 5000));
    assert_int_equal(tmk_agent_shutdown(), 0);
    assert_int_equal(recv_zones_named(&r, "packed"), 60000);
    assert_int_equal(recv_get(&r, &r.bad_packets), 0);
    assert_true(recv_get(&r, &r.max_packet_len) > TMK_PROTO_DEFAULT_PACKET);
    assert_true(recv_get(&r, &r.max_packet_len) <= 16384);
    recv_stop(&r);
  }
  d = relay_desc(&r, 0); /* a small arena keeps small packets even on loopback */
  assert_int_equal(tmk_agent_init(&d, small_arena, sizeof small_arena), 0);
  assert_int_equal(stats_now().max_packet, TMK_PROTO_DEFAULT_PACKET);
  assert_int_equal(tmk_agent_shutdown(), 0);
  recv_init_offline(&sink);
  d = sink_desc(&sink);
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  assert_int_equal(stats_now().max_packet, TMK_PROTO_DEFAULT_PACKET);
  assert_int_equal(tmk_agent_shutdown(), 0);
}

static void no_relay_never_blocks(void** state) {
  tmk_agent_desc d;
  tmk_agent_stats s;
  int i, t;
  (void)state;
  for (t = 0; t < 2; t++) {
    d = dead_relay_desc(t);
    d.ring_bytes = 4096;
    d.max_threads = 2;
    assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
    for (i = 0; i < 200000; i++) {
      TMK_ZONE("busy", TMK_SEV_INFO, 1);
    }
    tmk_agent_flush();
    s = stats_now();
    assert_int_equal(s.connected, t ? 0 : 1);
    /* Every zone is accounted for: sent, in a packet that failed to go, or dropped (counted). */
    assert_int_equal(s.zones_sent + s.zones_unsent + s.drops[TMK_DROP_RING_FULL] +
                         s.drops[TMK_DROP_TOO_BIG] + s.drops[TMK_DROP_NO_THREAD],
                     200000);
    assert_int_equal(s.drops[TMK_DROP_NO_THREAD], 0);
    if (t) assert_true(s.drops[TMK_DROP_SEND_FAILED] > 0);
    assert_int_equal(tmk_agent_shutdown(), 0);
  }
}

/* Threads of this process named name (/proc/self/task/TID/comm); -1 where there is no /proc. */
static int threads_named(const char* name) {
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL) {
    char path[300], comm[32] = "";
    FILE* f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    if (!(f = fopen(path, "r"))) continue;
    if (fgets(comm, sizeof comm, f)) {
      comm[strcspn(comm, "\n")] = 0;
      n += strcmp(comm, name) == 0;
    }
    fclose(f);
  }
  closedir(d);
  return n;
}

/* On Linux the flusher thread is named, so that top -H, perf and gdb show which it is. */
static void flusher_thread_is_named(void** state) {
  tmk_agent_desc d = dead_relay_desc(0);
  int i;
  (void)state;
#ifndef __linux__
  skip();
#endif
  assert_int_equal(threads_named("tmk-flusher"), 0);
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  /* the thread names itself as it starts */
  for (i = 0; i < 200 && threads_named("tmk-flusher") != 1; i++) sleep_ms(5);
  assert_int_equal(threads_named("tmk-flusher"), 1);
  assert_int_equal(tmk_agent_shutdown(), 0);
  /* shutdown joined it; the kernel may list its task a moment longer (under qemu-user, where
   * the guest's join returns as the thread clears its tid, before the host task has exited) */
  for (i = 0; i < 200 && threads_named("tmk-flusher") != 0; i++) sleep_ms(5);
  assert_int_equal(threads_named("tmk-flusher"), 0);
  d.manual_pump = 1; /* no thread then */
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  assert_int_equal(threads_named("tmk-flusher"), 0);
  assert_int_equal(tmk_agent_shutdown(), 0);
}

static void rejected_agent_stops_sending(void** state) {
  static receiver r;
  tmk_agent_desc d;
  uint64_t data;
  int i;
  (void)state;
  r.auto_reject = 1;
  assert_int_equal(recv_start(&r), 0);
  d = relay_desc(&r, 0);
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  for (i = 0; i < 1000 && !stats_now().rejected; i++) sleep_ms(5);
  assert_true(stats_now().rejected);
  sleep_ms(50);
  data = recv_get(&r, &r.data_packets);
  producer((void*)(intptr_t)0); /* the game keeps running; nothing more goes out */
  tmk_agent_flush();
  sleep_ms(100);
  assert_int_equal(recv_get(&r, &r.data_packets), data);
  assert_int_equal(tmk_agent_shutdown(), 0);
  sleep_ms(50);
  assert_int_equal(recv_get(&r, &r.byes), 0);
  assert_int_equal(recv_get(&r, &r.hellos), 1);
  recv_stop(&r);
}

static void wait_mode_without_relay_does_not_hang(void** state) {
  tmk_agent_desc d;
  tmk_agent_stats s;
  int i;
  (void)state;
  d = dead_relay_desc(1);
  d.overflow = TMK_OVERFLOW_WAIT;
  d.ring_bytes = 1024;
  d.max_threads = 2;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  for (i = 0; i < 20000; i++) {
    TMK_ZONE("waits", TMK_SEV_INFO, 1); /* the flusher keeps draining into failed sends */
  }
  tmk_agent_flush();
  s = stats_now();
  assert_int_equal(s.drops[TMK_DROP_RING_FULL], 0);
  assert_true(s.drops[TMK_DROP_SEND_FAILED] > 0);
  assert_int_equal(s.zones_sent + s.zones_unsent, 20000); /* none lost uncounted */
  assert_int_equal(tmk_agent_shutdown(), 0);
}

/* Zones the agent has accounted for: sent, failed to send, or dropped for any reason. */
static uint64_t accounted(void) {
  tmk_agent_stats s = stats_now();
  uint64_t n = s.zones_sent + s.zones_unsent;
  int k;
  for (k = 0; k < TMK_DROP_REASON_COUNT; k++) n += s.drops[k];
  return n;
}

static int wait_welcomed(int want, int ms) {
  int i;
  for (i = 0; i < ms; i += 5) {
    if (stats_now().welcomed == want) return 1;
    sleep_ms(5);
  }
  return 0;
}

static void zones(const char* which, int n) {
  int i;
  for (i = 0; i < n; i++) {
    if (which[0] == 'b') {
      TMK_ZONE("before", TMK_SEV_INFO, 1);
    } else if (which[0] == 'a') {
      TMK_ZONE("after", TMK_SEV_INFO, 1);
    } else {
      TMK_ZONE("gone", TMK_SEV_INFO, 1);
    }
  }
}

/* desc.on_demand: nothing is recorded (not sent, not dropped: filtered) until a relay says
 * WELCOME; then everything is; and once the relay is gone (TCP closed; over UDP, no WELCOME
 * to the agent's HELLOs for 3 s) nothing again. */
static void on_demand(int tcp) {
  static receiver r;
  tmk_agent_desc d;
  uint64_t before;
  memset(&r, 0, sizeof r);
  assert_int_equal(recv_start(&r), 0);
  d = relay_desc(&r, tcp);
  d.on_demand = 1;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  assert_true(recv_wait_at_least(&r, &r.hellos, 1, 5000));
  zones("before", 1000);
  tmk_agent_flush();
  assert_int_equal(accounted(), 0); /* not recorded at all */
  pthread_mutex_lock(&r.mu);
  r.auto_welcome = 1; /* the next HELLO (TCP: the agent's retry, 2 s) is answered */
  pthread_mutex_unlock(&r.mu);
  if (tcp) recv_kick_tcp(&r); /* TCP says HELLO once per connection: make it say it again */
  assert_true(wait_welcomed(1, 5000));
  zones("after", 1000);
  tmk_agent_flush();
  assert_true(recv_wait_at_least(&r, &r.zones, 1000, 5000));
  assert_int_equal(recv_zones_named(&r, "after"), 1000);
  assert_int_equal(recv_zones_named(&r, "before"), 0);
  recv_stop(&r); /* the relay goes away */
  assert_true(wait_welcomed(0, 6000));
  before = accounted();
  zones("gone", 1000);
  tmk_agent_flush();
  assert_int_equal(accounted(), before); /* nothing recorded again */
  assert_int_equal(tmk_agent_shutdown(), 0);
}

static void on_demand_over_udp(void** state) {
  (void)state;
  on_demand(0);
}

static void on_demand_over_tcp(void** state) {
  (void)state;
  on_demand(1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      AGENT_TEST(udp_every_zone_accounted),
      AGENT_TEST(tcp_every_zone_accounted),
      AGENT_TEST(tcp_fallback_when_udp_unavailable),
      AGENT_TEST(tcp_reconnects),
      AGENT_TEST(control_over_udp),
      AGENT_TEST(control_over_tcp),
      AGENT_TEST(keyed_over_udp),
      AGENT_TEST(keyed_over_tcp),
      AGENT_TEST(keyed_agent_small_packets),
      AGENT_TEST(default_packet_by_link),
      AGENT_TEST(no_relay_never_blocks),
      AGENT_TEST(flusher_thread_is_named),
      AGENT_TEST(rejected_agent_stops_sending),
      AGENT_TEST(wait_mode_without_relay_does_not_hang),
      AGENT_TEST(on_demand_over_udp),
      AGENT_TEST(on_demand_over_tcp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
