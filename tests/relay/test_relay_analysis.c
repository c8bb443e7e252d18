/* test_relay_analysis.c — the analysis endpoints' computations in-process (relay_analysis.c):
 * zones with known durations sent with protocol/'s writer over loopback UDP into a relay made
 * with tmk_relay_create, then …/stats and …/occurrences answered by the same functions the HTTP
 * routes call: percentiles within the documented 1/64, the slowest occurrences, and the bound on
 * call sites per request (a session with more than 4096 of them gets a 400, not unbounded memory). */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "relay_analysis.h"
#include "tmk_proto.h"
#include "tmk_relay.h"
#include "tmk_test.h"

#define SID 0x00000000a7a1c0deull
#define MANY_SITES 4100    /* one more call site than a request analyses is enough; some spare */
#define PER_PACKET 50
#define TIMED 1000         /* zones of site TIMED_SITE, durations 100 + 37 i ns */
#define TIMED_SITE 9000u
#define TIMED_T0 1000000000ull

static void* run_main(void* arg) {
  tmk_relay_run(arg);
  return NULL;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int fd_to(int port) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in to;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  to.sin_port = htons((uint16_t)port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr*)&to, sizeof to), 0);
  return fd;
}

static void send_hello(int fd) {
  tmk_proto_hello h;
  memset(&h, 0, sizeof h);
  h.proto_version = TMK_PROTO_VERSION;
  h.agent_version = (tmk_proto_str){"test", 4};
  h.program = (tmk_proto_str){"test_relay_analysis", 19};
  h.pointer_size = 8;
  h.timer_freq = 1000000000u; /* 1 tick = 1 ns */
  h.max_packet = 1200;
  uint8_t p[512];
  int n = tmk_proto_encode_hello(p, sizeof p, SID, &h);
  assert_true(n > 0);
  assert_int_equal(send(fd, p, (size_t)n, 0), n);
}

static void send_zones(int fd, uint64_t seq, const tmk_proto_zone* z, size_t n) {
  uint8_t body[1200 - TMK_PROTO_MAX_HEADER], p[1200];
  tmk_proto_writer w;
  assert_int_equal(tmk_proto_writer_init(&w, body, sizeof body), 0);
  assert_int_equal(tmk_proto_put_zones(&w, z, n), (int)n);
  int len = tmk_proto_finish(&w, SID, seq, p, sizeof p, NULL);
  assert_true(len > 0);
  assert_int_equal(send(fd, p, (size_t)len, 0), len);
  if (seq % 16 == 15) sleep_ms(2); /* let the loop keep up with the socket buffer */
}

/* Runs one analysis and parses its body. */
static json_t* ask(tmk_relay* r, int stats, const char* query, int want_status) {
  char id[32];
  snprintf(id, sizeof id, "%016" PRIx64, (uint64_t)SID);
  tmk__json j;
  tmk__json_init(&j);
  int st = stats ? tmk__analysis_stats_json(r, id, query, &j)
                 : tmk__analysis_occurrences_json(r, id, query, &j);
  if (st != want_status) fprintf(stderr, "%s?%s: %d %.*s\n", stats ? "stats" : "occurrences",
                                 query ? query : "", st, (int)j.len, j.buf);
  assert_int_equal(st, want_status);
  json_error_t err;
  json_t* v = json_loadb(j.buf, j.len, 0, &err);
  tmk__json_free(&j);
  assert_non_null(v);
  return v;
}

static uint64_t u(json_t* o, const char* key) { return (uint64_t)json_integer_value(json_object_get(o, key)); }

static void near(uint64_t got, uint64_t exact) {
  uint64_t d = got > exact ? got - exact : exact - got;
  if (d * 64 > exact) fprintf(stderr, "got %" PRIu64 ", exact %" PRIu64 "\n", got, exact);
  assert_true(d * 64 <= exact);
}

static void test_analysis(void** state) {
  (void)state;
  tmk_relay_desc d;
  memset(&d, 0, sizeof d);
  d.listen_host = "127.0.0.1";
  tmk_relay* r;
  assert_int_equal(tmk_relay_create(&d, &r), 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, run_main, r), 0);
  int fd = fd_to(tmk_relay_listen_port(r));
  send_hello(fd);
  uint64_t seq = 0;
  tmk_proto_zone z[PER_PACKET];
  /* MANY_SITES zones, one per call site (ids 10…), 1 µs apart, no descriptors */
  for (uint32_t s = 0; s < MANY_SITES; s += PER_PACKET, seq++) {
    for (uint32_t k = 0; k < PER_PACKET; k++)
      z[k] = (tmk_proto_zone){1000000 + 1000ull * (s + k), 500, 10 + s + k, 0};
    send_zones(fd, seq, z, PER_PACKET);
  }
  /* TIMED zones of one site, later, in shuffled order of duration */
  for (uint32_t i = 0; i < TIMED; i += PER_PACKET, seq++) {
    for (uint32_t k = 0; k < PER_PACKET; k++) {
      uint32_t v = ((i + k) * 577u) % TIMED; /* a permutation of 0..TIMED-1 */
      z[k] = (tmk_proto_zone){TIMED_T0 + 100000ull * (i + k), 100 + 37ull * v, TIMED_SITE, 0};
    }
    send_zones(fd, seq, z, PER_PACKET);
  }
  const uint64_t zones = MANY_SITES / PER_PACKET * PER_PACKET + TIMED;
  tmk_relay_totals t;
  for (int i = 0; i < 1000; i++) { /* a bound, not a timing assertion */
    tmk_relay_get_stats(r, &t);
    if (t.sum.zones >= zones) break;
    sleep_ms(10);
  }
  assert_int_equal(t.sum.zones, zones);

  /* the whole session: more call sites than one request analyses -> 400 ERANGE, bounded */
  json_t* v = ask(r, 1, NULL, 400);
  assert_string_equal(json_string_value(json_object_get(v, "code")), "ERANGE");
  assert_non_null(strstr(json_string_value(json_object_get(v, "error")), "4096 call sites"));
  json_decref(v);
  /* narrowed by name (the undescribed sites have none) or by range: answered */
  v = ask(r, 1, "name=nothing", 200);
  assert_int_equal(json_array_size(json_object_get(v, "sites")), 0);
  assert_int_equal(u(v, "zones"), zones);
  json_decref(v);

  char q[160];
  snprintf(q, sizeof q, "t0=%llu", (unsigned long long)TIMED_T0);
  v = ask(r, 1, q, 200);
  json_t* sites = json_object_get(v, "sites");
  assert_int_equal(json_array_size(sites), 1);
  json_t* s = json_array_get(sites, 0);
  assert_int_equal(u(s, "site"), TIMED_SITE);
  assert_int_equal(u(s, "count"), TIMED);
  uint64_t total = 0;
  for (uint64_t i = 0; i < TIMED; i++) total += 100 + 37 * i;
  assert_int_equal(u(s, "total_ns"), total);
  assert_int_equal(u(s, "self_ns"), total);
  assert_int_equal(u(s, "min_ns"), 100);
  assert_int_equal(u(s, "max_ns"), 100 + 37 * (TIMED - 1));
  near(u(s, "median_ns"), 100 + 37 * (TIMED / 2));      /* rank 500 of 0..999 */
  near(u(s, "p95_ns"), 100 + 37 * (TIMED * 95 / 100)); /* rank 950 */
  json_decref(v);

  snprintf(q, sizeof q, "site=%u&limit=3&bins=10", TIMED_SITE);
  v = ask(r, 0, q, 200);
  assert_int_equal(u(v, "total"), TIMED);
  json_t* occ = json_object_get(v, "occurrences");
  assert_int_equal(json_array_size(occ), 3);
  for (size_t i = 0; i < 3; i++)
    assert_int_equal(json_integer_value(json_array_get(json_array_get(occ, i), 1)),
                     100 + 37 * (TIMED - 1 - i));
  json_t* counts = json_object_get(json_object_get(v, "histogram"), "counts");
  assert_int_equal(json_array_size(counts), 10);
  uint64_t sum = 0;
  for (size_t i = 0; i < 10; i++) sum += (uint64_t)json_integer_value(json_array_get(counts, i));
  assert_int_equal(sum, TIMED);
  json_decref(v);

  /* the earliest first; an unknown session */
  snprintf(q, sizeof q, "site=%u&limit=2&sort=time", TIMED_SITE);
  v = ask(r, 0, q, 200);
  occ = json_object_get(v, "occurrences");
  assert_int_equal(json_integer_value(json_array_get(json_array_get(occ, 0), 0)), TIMED_T0);
  assert_int_equal(json_integer_value(json_array_get(json_array_get(occ, 1), 0)), TIMED_T0 + 100000);
  json_decref(v);
  tmk__json j;
  tmk__json_init(&j);
  assert_int_equal(tmk__analysis_stats_json(r, "ffffffffffffffff", NULL, &j), 404);
  tmk__json_free(&j);

  close(fd);
  tmk_relay_stop(r);
  assert_int_equal(pthread_join(th, NULL), 0);
  tmk_relay_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_analysis),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
