/* test_relay_lib.c — the relay as a library, in-process: real packets made with protocol/'s
 * writer go over loopback UDP into a relay created with tmk_relay_create (127.0.0.1, port 0) and
 * come back through the query API and tmk_relay_get_stats (ingest -> reorder -> store); two
 * relays in one process keep their sessions, ports and HTTP servers apart. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "relay_clickhouse_http.h" /* tmk__ch_post against a stand-in server */
#include "relay_internal.h" /* the receive queue's unit test */
#include "tmk_proto.h"
#include "tmk_relay.h"
#include "tmk_relay_web.h"
#include "tmk_test.h"

/* ---------------------------------------------------------------------------------------------
 * A relay on its own thread
 * ------------------------------------------------------------------------------------------- */
typedef struct running {
  tmk_relay* r;
  pthread_t th;
} running;

static void* run_main(void* arg) {
  tmk_relay_run(arg);
  return NULL;
}

static void start(running* rr, const tmk_relay_desc* d) {
  assert_int_equal(tmk_relay_create(d, &rr->r), 0);
  assert_true(tmk_relay_listen_port(rr->r) > 0);
  assert_int_equal(pthread_create(&rr->th, NULL, run_main, rr->r), 0);
}

static void finish(running* rr) {
  tmk_relay_stop(rr->r); /* from another thread than the loop's */
  assert_int_equal(pthread_join(rr->th, NULL), 0);
  tmk_relay_destroy(rr->r);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits (up to 10 s: a bound, not a timing assertion) until pred holds for the totals. */
typedef int (*totals_pred)(const tmk_relay_totals* t, uint64_t arg);
static tmk_relay_totals wait_totals(tmk_relay* r, totals_pred pred, uint64_t arg) {
  tmk_relay_totals t;
  for (int i = 0; i < 1000; i++) {
    tmk_relay_get_stats(r, &t);
    if (pred(&t, arg)) break;
    sleep_ms(10);
  }
  return t;
}
static int packets_at_least(const tmk_relay_totals* t, uint64_t n) { return t->sum.packets >= n; }
static int lost_at_least(const tmk_relay_totals* t, uint64_t n) { return t->sum.lost >= n; }
static int zones_at_least(const tmk_relay_totals* t, uint64_t n) { return t->sum.zones >= n; }
/* Reorder counters reach the totals on the loop's next tick, after the packets themselves. */
static int packets_and_dup(const tmk_relay_totals* t, uint64_t n) {
  return t->sum.packets >= n && t->sum.duplicated >= 1 && t->sum.reordered >= 2;
}
static int garbage_at_least(const tmk_relay_totals* t, uint64_t n) { return t->garbage >= n; }

/* ---------------------------------------------------------------------------------------------
 * An agent made of protocol/'s writer and a UDP socket
 * ------------------------------------------------------------------------------------------- */
typedef struct agent {
  int fd;
  uint64_t sid;
  tmk_proto_writer w;
  uint8_t body[1200 - TMK_PROTO_MAX_HEADER];
} agent;

static void agent_open(agent* a, int port, uint64_t sid) {
  a->fd = socket(AF_INET, SOCK_DGRAM, 0);
  assert_true(a->fd >= 0);
  struct sockaddr_in to;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  to.sin_port = htons((uint16_t)port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(a->fd, (struct sockaddr*)&to, sizeof to), 0);
  a->sid = sid;
  assert_int_equal(tmk_proto_writer_init(&a->w, a->body, sizeof a->body), 0);
}

static void agent_send_raw(agent* a, const void* p, size_t n) {
  assert_int_equal(send(a->fd, p, n, 0), (ssize_t)n);
}

static void agent_hello(agent* a) {
  tmk_proto_hello h;
  memset(&h, 0, sizeof h);
  h.proto_version = TMK_PROTO_VERSION;
  h.agent_version = (tmk_proto_str){"test", 4};
  h.program = (tmk_proto_str){"test_relay_lib", 14};
  h.platform = (tmk_proto_str){"linux", 5};
  h.arch = (tmk_proto_str){"x86_64", 6};
  h.pointer_size = 8;
  h.timer_freq = 1000000000u; /* 1 tick = 1 ns: stored times equal the ticks sent */
  h.max_packet = 1200;
  uint8_t p[512];
  int n = tmk_proto_encode_hello(p, sizeof p, a->sid, &h);
  assert_true(n > 0);
  agent_send_raw(a, p, (size_t)n);
}

/* Zones of packet `seq`: a parent (site 1, depth 0) with `kids` children (site 2, depth 1). */
static size_t make_zones(tmk_proto_zone* z, uint64_t seq, size_t kids) {
  uint64_t t0 = 1000000 + seq * 100000;
  z[0] = (tmk_proto_zone){t0, 10 * kids + 5, 1, 0};
  for (size_t k = 0; k < kids; k++) z[1 + k] = (tmk_proto_zone){t0 + 1 + 10 * k, 7, 2, 1};
  return kids + 1;
}

/* Encodes DATA packet `seq` (sites described in packet 0) into out; returns its length. */
static size_t encode_data(agent* a, uint64_t seq, uint8_t* out, size_t cap) {
  tmk_proto_writer_reset(&a->w);
  if (seq == 0) {
    tmk_proto_site s1 = {1, TMK_SITE_ZONE, TMK_SEV_INFO, 1, 0, 10, {"frame", 5}, {"t.c", 3}};
    tmk_proto_site s2 = {2, TMK_SITE_ZONE, TMK_SEV_INFO, 1, 0, 20, {"work", 4}, {"t.c", 3}};
    assert_int_equal(tmk_proto_put_site(&a->w, &s1), 0);
    assert_int_equal(tmk_proto_put_site(&a->w, &s2), 0);
  }
  tmk_proto_zone z[9];
  size_t n = make_zones(z, seq, 8);
  assert_int_equal(tmk_proto_put_zones(&a->w, z, n), (int)n);
  int len = tmk_proto_finish(&a->w, a->sid, seq, out, cap, NULL);
  assert_true(len > 0);
  return (size_t)len;
}

static void agent_data(agent* a, uint64_t seq) {
  uint8_t p[1200];
  agent_send_raw(a, p, encode_data(a, seq, p, sizeof p));
}

/* ---------------------------------------------------------------------------------------------
 * Queries
 * ------------------------------------------------------------------------------------------- */
typedef struct zone_sum {
  size_t n;
  uint64_t start_sum, dur_sum;
  uint32_t max_depth;
  int bad_site;
} zone_sum;

static int sum_zone(void* ud, const tmk_relay_zone* z) {
  zone_sum* s = ud;
  s->n++;
  s->start_sum += z->start_ns;
  s->dur_sum += z->dur_ns;
  if (z->depth > s->max_depth) s->max_depth = z->depth;
  if (z->site != 1 && z->site != 2) s->bad_site = 1;
  return 0;
}

static int count_site(void* ud, const tmk_relay_site* s) {
  int* n = ud;
  if (s->known) (*n)++;
  return 0;
}

static void sid_str(uint64_t sid, char* out, size_t cap) {
  snprintf(out, cap, "%016" PRIx64, sid);
}

/* ---------------------------------------------------------------------------------------------
 * Tests
 * ------------------------------------------------------------------------------------------- */

/* Out-of-order and duplicated packets come back as every zone once, at the times sent. */
static void test_ingest_reorder_store(void** state) {
  (void)state;
  tmk_relay_desc d;
  memset(&d, 0, sizeof d);
  d.listen_host = "127.0.0.1";
  running rr;
  start(&rr, &d);
  agent a;
  agent_open(&a, tmk_relay_listen_port(rr.r), 0x1111222233334444ull);
  agent_hello(&a);
  static const uint64_t order[] = {0, 2, 1, 3, 5, 4, 4, 6, 7};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) agent_data(&a, order[i]);
  const uint64_t packets = 8;
  tmk_relay_totals t = wait_totals(rr.r, packets_and_dup, packets);
  assert_int_equal(t.sessions, 1);
  assert_int_equal(t.sum.packets, packets);
  assert_int_equal(t.sum.duplicated, 1);
  assert_true(t.sum.reordered >= 2); /* 2 before 1, 5 before 4 */
  assert_int_equal(t.sum.lost, 0);
  assert_int_equal(t.sum.malformed, 0);
  assert_int_equal(t.sum.zones, packets * 9);
  assert_int_equal(t.garbage, 0);

  /* The same zones through the query API: count, times and depths as sent. */
  char id[32];
  sid_str(a.sid, id, sizeof id);
  tmk_relay_session_info info;
  assert_int_equal(tmk_relay_session(rr.r, id, &info), 0);
  assert_true(info.has_hello);
  assert_string_equal(info.program, "test_relay_lib");
  assert_int_equal(info.timer_freq, 1000000000u);
  assert_int_equal(info.stats.zones, packets * 9);
  zone_sum want = {0, 0, 0, 0, 0};
  for (uint64_t seq = 0; seq < packets; seq++) {
    tmk_proto_zone z[9];
    size_t n = make_zones(z, seq, 8);
    for (size_t k = 0; k < n; k++) {
      want.n++;
      want.start_sum += z[k].start;
      want.dur_sum += z[k].duration;
    }
  }
  zone_sum got = {0, 0, 0, 0, 0};
  tmk_relay_query q;
  memset(&q, 0, sizeof q);
  q.thread = -1;
  assert_int_equal(tmk_relay_query_zones(rr.r, id, &q, sum_zone, &got), (int)want.n);
  assert_int_equal(got.n, want.n);
  assert_int_equal(got.start_sum, want.start_sum);
  assert_int_equal(got.dur_sum, want.dur_sum);
  assert_int_equal(got.max_depth, 1);
  assert_false(got.bad_site);
  int sites = 0;
  assert_true(tmk_relay_query_sites(rr.r, id, count_site, &sites) >= 0);
  assert_int_equal(sites, 2);
  assert_int_equal(tmk_relay_query_zones(rr.r, "0000000000000000", &q, sum_zone, &got),
                   TMK_ENOTFOUND);
  close(a.fd);
  finish(&rr);
}

/* A logger (tmk_relay_desc.log) that counts the lines about garbage. */
typedef struct log_count {
  pthread_mutex_t mu;
  int garbage_lines;
} log_count;
static void count_log(void* ud, int level, const char* line) {
  log_count* lc = ud;
  pthread_mutex_lock(&lc->mu);
  if (level == TMK_RELAY_LOG_WARN && strstr(line, "not a telemark packet")) lc->garbage_lines++;
  pthread_mutex_unlock(&lc->mu);
}

/* A gap that the window passes is counted lost once; garbage and a corrupt packet are counted,
 * never stored; bad input is logged once per source per interval (rate-limited). */
static void test_loss_and_bad_input(void** state) {
  (void)state;
  tmk_relay_desc d;
  memset(&d, 0, sizeof d);
  d.listen_host = "127.0.0.1";
  d.reorder_ms = 20;
  log_count lc = {PTHREAD_MUTEX_INITIALIZER, 0};
  d.log.fn = count_log;
  d.log.ud = &lc;
  running rr;
  start(&rr, &d);
  agent a;
  agent_open(&a, tmk_relay_listen_port(rr.r), 0x5555666677778888ull);
  agent_hello(&a);
  agent_data(&a, 0);
  agent_data(&a, 1);
  agent_data(&a, 3); /* 2 never comes */
  tmk_relay_totals t = wait_totals(rr.r, lost_at_least, 1);
  assert_int_equal(t.sum.lost, 1);
  assert_int_equal(t.sum.packets, 3);
  assert_int_equal(t.sum.zones, 3 * 9);

  agent_send_raw(&a, "not a telemark packet", 21);
  agent_send_raw(&a, "not a telemark packet", 21);
  t = wait_totals(rr.r, garbage_at_least, 2);
  assert_int_equal(t.garbage, 2);

  /* packet 4 with its body bytes flipped: header valid, records not */
  uint8_t p[1200];
  size_t n = encode_data(&a, 4, p, sizeof p);
  for (size_t i = n / 2; i < n; i++) p[i] ^= 0x5a;
  agent_send_raw(&a, p, n);
  agent_data(&a, 5);
  t = wait_totals(rr.r, zones_at_least, 4 * 9); /* 5 waits out 4's gap in the window */
  assert_int_equal(t.sum.packets, 5);
  assert_int_equal(t.sum.zones, 4 * 9); /* 0, 1, 3, 5: nothing of the corrupt one */
  assert_true(t.sum.malformed + t.garbage >= 3);
  close(a.fd);
  finish(&rr);
  assert_int_equal(lc.garbage_lines, 1); /* the second garbage datagram was within the interval */
}

/* ---- two relays ---------------------------------------------------------------------------- */
static int http_get(int port, const char* path, char* out, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in to;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  to.sin_port = htons((uint16_t)port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr*)&to, sizeof to) != 0) {
    close(fd);
    return -1;
  }
  char req[256];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  size_t len = 0;
  ssize_t k;
  while (len < cap - 1 && (k = read(fd, out + len, cap - 1 - len)) > 0) len += (size_t)k;
  out[len] = 0;
  close(fd);
  return 0;
}

static void test_two_relays(void** state) {
  (void)state;
  tmk_relay_web* web[2];
  running rr[2];
  agent a[2];
  const uint64_t sids[2] = {0xAAAA000000000001ull, 0xBBBB000000000002ull};
  for (int i = 0; i < 2; i++) {
    tmk_relay_web_desc wd;
    memset(&wd, 0, sizeof wd);
    wd.token = i == 0 ? "" : "secret-token-1"; /* different guards on each */
    assert_int_equal(tmk_relay_web_create(&wd, &web[i]), 0);
    tmk_relay_desc d;
    memset(&d, 0, sizeof d);
    d.listen_host = "127.0.0.1";
    d.http_host = "127.0.0.1";
    d.http_hooks[0].fn = tmk_relay_web_hook;
    d.http_hooks[0].ud = web[i];
    start(&rr[i], &d);
    assert_true(tmk_relay_http_port(rr[i].r) > 0);
  }
  assert_int_not_equal(tmk_relay_listen_port(rr[0].r), tmk_relay_listen_port(rr[1].r));
  assert_int_not_equal(tmk_relay_http_port(rr[0].r), tmk_relay_http_port(rr[1].r));
  for (int i = 0; i < 2; i++) {
    agent_open(&a[i], tmk_relay_listen_port(rr[i].r), sids[i]);
    agent_hello(&a[i]);
    for (uint64_t s = 0; s < (uint64_t)(2 + i); s++) agent_data(&a[i], s);
  }
  for (int i = 0; i < 2; i++) {
    tmk_relay_totals t = wait_totals(rr[i].r, packets_at_least, (uint64_t)(2 + i));
    assert_int_equal(t.sessions, 1);
    assert_int_equal(t.sum.packets, 2 + i);
    assert_int_equal(t.sum.zones, (2 + i) * 9);
    char own[32], other[32];
    sid_str(sids[i], own, sizeof own);
    sid_str(sids[1 - i], other, sizeof other);
    tmk_relay_session_info info;
    assert_int_equal(tmk_relay_session(rr[i].r, own, &info), 0);
    assert_int_equal(tmk_relay_session(rr[i].r, other, &info), TMK_ENOTFOUND);
    /* each HTTP server answers for its own relay, behind its own token check */
    static char buf[65536];
    assert_int_equal(http_get(tmk_relay_http_port(rr[i].r), "/api/sessions", buf, sizeof buf), 0);
    if (i == 0) {
      assert_non_null(strstr(buf, " 200 "));
      assert_non_null(strstr(buf, own));
      assert_null(strstr(buf, other));
    } else {
      assert_non_null(strstr(buf, " 401 "));
      assert_int_equal(http_get(tmk_relay_http_port(rr[i].r),
                                "/api/sessions?token=secret-token-1", buf, sizeof buf), 0);
      assert_non_null(strstr(buf, " 200 "));
      assert_non_null(strstr(buf, own));
      assert_null(strstr(buf, other));
    }
  }
  for (int i = 0; i < 2; i++) tmk_relay_stop(rr[i].r); /* both HTTP servers wind down at once */
  for (int i = 0; i < 2; i++) {
    close(a[i].fd);
    finish(&rr[i]);
    tmk_relay_web_destroy(web[i]);
  }
}

/* A relay that never ran, and a stop asked before run: both end cleanly. */
/* Issue 15 item 8: a target stopped in a debugger (idle: not live, not ended) must not be
 * evicted by one host churning sessions (one DATA and a BYE each, from the target's own
 * address): ended sessions count toward their host's half of max_sessions and go first. */
static void test_paused_session_kept(void** state) {
  (void)state;
  tmk_relay_desc d;
  memset(&d, 0, sizeof d);
  d.max_sessions = 4;
  d.session_idle_ms = 200;
  running rr;
  start(&rr, &d);
  int port = tmk_relay_listen_port(rr.r);
  agent p;
  agent_open(&p, port, 0x9a05ed0000000001ull);
  agent_hello(&p);
  for (uint64_t s = 0; s < 5; s++) agent_data(&p, s);
  wait_totals(rr.r, packets_at_least, 5);
  char id[32];
  sid_str(p.sid, id, sizeof id);
  tmk_relay_session_info info;
  for (int i = 0; i < 300; i++) { /* idle detection runs once a second */
    assert_int_equal(tmk_relay_session(rr.r, id, &info), 0);
    if (!info.live) break;
    sleep_ms(10);
  }
  assert_false(info.live);
  for (uint64_t k = 0; k < 12; k++) {
    agent c;
    agent_open(&c, port, 0xc4c4000000000000ull + k);
    agent_data(&c, 0);
    uint8_t bye[64];
    int n = tmk_proto_encode_bye(bye, sizeof bye, c.sid);
    assert_true(n > 0);
    agent_send_raw(&c, bye, (size_t)n);
    close(c.fd);
    sleep_ms(5);
  }
  sleep_ms(300); /* the churned sessions evict each other, so no total to wait for */
  assert_int_equal(tmk_relay_session(rr.r, id, &info), 0); /* still there */
  assert_int_equal(info.stats.zones, 5 * 9);
  tmk_relay_totals t;
  tmk_relay_get_stats(rr.r, &t);
  assert_true(t.sessions <= 2); /* this host's half */
  close(p.fd);
  finish(&rr);
}

/* ---- the UDP receive queue ----------------------------------------------------------------- */
static struct sockaddr_in addr_port(uint16_t port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/* Freed 2 MiB regions go to the process's pool, up to its bound, and are taken from it before
 * fresh memory is mapped; beyond the bound they are unmapped (relay_slab.c). A queue with 2 MiB
 * blocks that fills and drains takes the blocks it gave back when it fills again. */
/* A stand-in for ClickHouse's HTTP interface: one connection, whose request head it reads, then
 * `take` bytes of the body (all of it when 0), checking them against body_byte; then it answers
 * 200 (500 when it took less than the whole body) and closes. */
typedef struct fake_ch {
  int lfd;
  size_t take;
  size_t got;  /* body bytes read */
  int bad;     /* a body byte that was not body_byte's */
  size_t clen; /* the request's Content-Length */
} fake_ch;

static uint8_t body_byte(size_t i) { return (uint8_t)(i * 7 + (i >> 12)); }

static void* fake_ch_main(void* arg) {
  fake_ch* f = arg;
  int fd = accept(f->lfd, NULL, NULL);
  if (fd < 0) return NULL;
  char head[4096];
  size_t hn = 0;
  uint8_t buf[65536];
  for (;;) { /* the head, a byte at a time: simple, and it is short */
    ssize_t k = recv(fd, head + hn, 1, 0);
    if (k <= 0 || ++hn == sizeof head - 1) break;
    if (hn >= 4 && memcmp(head + hn - 4, "\r\n\r\n", 4) == 0) break;
  }
  head[hn] = 0;
  const char* cl = strstr(head, "Content-Length: ");
  f->clen = cl ? (size_t)strtoull(cl + 16, NULL, 10) : 0;
  const size_t want = f->take ? f->take : f->clen;
  while (f->got < want) {
    size_t ask = want - f->got < sizeof buf ? want - f->got : sizeof buf;
    ssize_t k = recv(fd, buf, ask, 0);
    if (k <= 0) break;
    for (ssize_t i = 0; i < k; i++) f->bad |= buf[i] != body_byte(f->got + (size_t)i);
    f->got += (size_t)k;
  }
  const char* ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  const char* no = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nnope";
  const char* a = f->got == f->clen ? ok : no;
  (void)!send(fd, a, strlen(a), MSG_NOSIGNAL);
  close(fd);
  return NULL;
}

/* tmk__ch_post with the body's pages lent to the kernel (vmsplice + splice: the sink's staging)
 * and copied (send): ClickHouse gets the same bytes either way, 8 MiB through a 1 MiB pipe; and
 * a server that answers before it has read the body is an error, not a hang. */
static void test_clickhouse_post_lent_body(void** state) {
  (void)state;
  const size_t n = (size_t)8 << 20;
  uint8_t* body = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(body != MAP_FAILED);
  for (size_t i = 0; i < n; i++) body[i] = body_byte(i);
  for (int round = 0; round < 3; round++) { /* lent, copied, lent to a server that stops early */
    fake_ch f;
    memset(&f, 0, sizeof f);
    f.take = round == 2 ? (size_t)1 << 20 : 0;
    f.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = addr_port(0);
    socklen_t al = sizeof a;
    assert_int_equal(bind(f.lfd, (struct sockaddr*)&a, sizeof a), 0);
    assert_int_equal(listen(f.lfd, 1), 0);
    assert_int_equal(getsockname(f.lfd, (struct sockaddr*)&a, &al), 0);
    tmk__ch_endpoint ep;
    memset(&ep, 0, sizeof ep);
    snprintf(ep.host, sizeof ep.host, "127.0.0.1");
    snprintf(ep.port, sizeof ep.port, "%u", (unsigned)ntohs(a.sin_port));
    snprintf(ep.params, sizeof ep.params, "database=t");
    ep.timeout_ms = 10000;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fake_ch_main, &f), 0);
    tmk__chbuf resp = {0};
    char err[256] = "";
    int rc = tmk__ch_post(&ep, ep.params, "INSERT INTO x FORMAT RowBinary", body, n, round != 1,
                          &resp, 64, err, sizeof err);
    pthread_join(th, NULL);
    close(f.lfd);
    assert_int_equal(f.clen, n);
    assert_int_equal(f.bad, 0);
    if (round < 2) {
      assert_int_equal(rc, 0);
      assert_int_equal(f.got, n);
      assert_int_equal(resp.len, 2);
      assert_memory_equal(resp.p, "ok", 2);
    } else {
      assert_int_equal(rc, -1);
      assert_true(err[0] != 0);
    }
    free(resp.p);
  }
  munmap(body, n);
}

/* Fresh 2 MiB regions get the kind of page that has cost less to populate lately: huge pages
 * first, then 4 KiB ones, then the cheaper, with the other tried every 64th region (every 512th
 * while it costs more than four times as much); a kind that becomes the cheaper one takes over.
 * (The samples here are made up, in ns per 16 bytes, a stored zone: what a kind costs is the
 * host's business, docs/AGENT.md "Which pages".) */
static void test_fresh_page_kind(void** state) {
  (void)state;
  const size_t R = TMK__HUGE_PAGE;
  const uint64_t Z = R / 16; /* zones a region holds */
  tmk__pages_counters c;
  for (int far = 0; far < 2; far++) {
    tmk__pages_reset();
    assert_int_equal(tmk__pages_pick_huge(), 1); /* nothing known: huge first */
    tmk__pages_note(1, R, (far ? 40 : 8) * Z);   /* 10 or 2 times what 4 KiB pages cost */
    assert_int_equal(tmk__pages_pick_huge(), 0); /* then 4 KiB pages */
    tmk__pages_note(0, R, 4 * Z);
    int huge = 0, at[3] = {-1, -1, -1};
    for (int i = 0; i < 1024; i++) /* regions 2..1025: 4 KiB pages, huge ones as trials */
      if (tmk__pages_pick_huge()) {
        if (huge < 3) at[huge] = i + 2;
        huge++;
      }
    if (far) {
      assert_int_equal(huge, 2);
      assert_int_equal(at[0], 511);
      assert_int_equal(at[1], 1023);
    } else {
      assert_int_equal(huge, 16);
      assert_int_equal(at[0], 63);
      assert_int_equal(at[1], 127);
      assert_int_equal(at[2], 191);
      /* memory populated later (the sink's staging) gets the cheaper kind and is no trial: the
       * next trial is still the 1087th region */
      for (int i = 0; i < 5; i++) {
        int got = -1;
        void* m = tmk__map_pages(R, 1, 0, &got);
        assert_non_null(m);
        assert_int_equal(got, 0); /* the cheaper kind: 4 KiB pages here */
        munmap(m, R);
      }
      for (int i = 1026; i < 1087; i++) assert_int_equal(tmk__pages_pick_huge(), 0);
      assert_int_equal(tmk__pages_pick_huge(), 1);
      tmk__pages_stats(&c);
      assert_int_equal(c.samples[0] + c.samples[1], 2);
    }
  }
  /* huge pages turn cheap (memory the host backs again): a quarter of each sample moves the
   * average, so a few trials bring it below the 4 KiB pages' */
  tmk__pages_stats(&c);
  assert_int_equal(c.ns_per_mib[0], 4 * 65536);
  for (int i = 0; i < 8; i++) tmk__pages_note(1, R, 1 * Z);
  tmk__pages_stats(&c);
  assert_true(c.ns_per_mib[1] > c.ns_per_mib[0]); /* 40 * 0.75^8 + (1 - 0.75^8) = 4.9 > 4 */
  tmk__pages_note(1, R, 1 * Z);
  tmk__pages_stats(&c);
  assert_true(c.ns_per_mib[1] < c.ns_per_mib[0]); /* 40 * 0.75^9 + (1 - 0.75^9) = 3.9 */
  assert_int_equal(c.samples[1], 10);
  assert_int_equal(c.samples[0], 1);
  assert_int_equal(c.huge_bytes, 10 * R);
  int huge = 0;
  for (int i = 0; i < 64; i++) huge += tmk__pages_pick_huge();
  assert_int_equal(huge, 63); /* one 4 KiB trial in 64: they cost about the same */

  /* A real mapping asks and, populating, notes what it cost: where the kernel populates in one
   * call (Linux 5.14+: counted in tmk__populate_stats), each region is a sample of its kind;
   * elsewhere the pages fault in later and nothing is noted. */
  tmk__pages_reset();
  uint64_t pop0, pop1, ns;
  tmk__populate_stats(&pop0, &ns);
  uint8_t* m[2];
  for (int i = 0; i < 2; i++) {
    m[i] = tmk__map_pages(R, 1, 1, NULL);
    assert_non_null(m[i]);
    assert_int_equal((uintptr_t)m[i] & (R - 1), 0);
    assert_int_equal(m[i][0] | m[i][R - 1], 0); /* zeroed */
  }
  tmk__populate_stats(&pop1, &ns);
  tmk__pages_stats(&c);
  const int noted = pop1 - pop0 == 2 * R;
  assert_true(noted || pop1 == pop0);
  assert_int_equal(c.samples[1], noted);
  assert_int_equal(c.samples[0], noted);
  assert_int_equal(c.huge_bytes, noted ? R : 0);
  for (int i = 0; i < 2; i++) munmap(m[i], R);
  tmk__pages_reset();
}

static void test_freed_memory_pool(void** state) {
  (void)state;
  const uint64_t R = TMK__HUGE_PAGE;
  uint64_t kept, reused, reused0;
  void* g[6];
  tmk__pool_limit(4 * R); /* (no relay exists: nothing else takes or gives) */
  for (int i = 0; i < 6; i++) { /* from the pool while it has some, then fresh */
    g[i] = tmk__pool_take();
    assert_non_null(g[i]);
    memset(g[i], 0x5a, R);
  }
  tmk__pool_stats(&kept, &reused0);
  assert_int_equal(kept, 0);
  for (int i = 0; i < 6; i++) tmk__pool_give(g[i]);
  tmk__pool_stats(&kept, &reused);
  assert_int_equal(kept, 4 * R); /* two beyond the bound were unmapped */
  void* again[4];
  for (int i = 0; i < 4; i++) {
    int given = 0;
    again[i] = tmk__pool_take();
    for (int k = 0; k < 6; k++) given |= again[i] == g[k];
    assert_true(given); /* a region given back, not a new mapping */
    assert_int_equal(((uint8_t*)again[i])[R - 1], 0x5a);
  }
  tmk__pool_stats(&kept, &reused);
  assert_int_equal(kept, 0);
  assert_int_equal(reused - reused0, 4 * R);
  for (int i = 0; i < 4; i++) tmk__pool_give(again[i]);

  /* The queue: 16 MiB makes 2 MiB blocks. ~13 MB queued takes 7 of them; read back, all but the
   * one being written and the spare go to the pool; queued again, they come back from it. */
  tmk__pool_limit(16 * R);
  tmk__rxq q;
  assert_int_equal(tmk__rxq_init(&q, (size_t)16 << 20), 0);
  assert_int_equal(q.block, R);
  static uint8_t data[1000];
  struct sockaddr_in from = addr_port(9);
  for (int round = 0; round < 2; round++) {
    uint64_t kept_before;
    tmk__pool_stats(&kept_before, &reused0);
    for (int i = 0; i < 13000; i++) /* 1,040 bytes queued each: 13.5 MB */
      assert_int_equal(tmk__rxq_push(&q, data, sizeof data, (const struct sockaddr*)&from,
                                     sizeof from), 0);
    tmk__pool_stats(&kept, &reused);
    if (round == 1) {
      assert_true(kept_before >= 5 * R); /* what round 0 gave back */
      assert_int_equal(reused - reused0, kept_before); /* all of it taken again */
    }
    while (tmk__rxq_peek(&q, &(size_t){0}, &(const struct sockaddr*){NULL})) tmk__rxq_pop(&q);
  }
  tmk__rxq_free(&q);
  tmk__pool_limit(0); /* unmaps what it kept */
  tmk__pool_stats(&kept, &reused);
  assert_int_equal(kept, 0);

  /* Relays: while one exists, what another gives back is kept (a relay's first queue block is a
   * 2 MiB region with the default 64 MiB queue); when the last one is freed, nothing is. */
  tmk_relay_desc desc;
  tmk_relay *a, *b;
  memset(&desc, 0, sizeof desc);
  assert_int_equal(tmk_relay_create(&desc, &a), 0);
  assert_int_equal(tmk_relay_create(&desc, &b), 0);
  tmk_relay_destroy(a);
  tmk__pool_stats(&kept, &reused);
  assert_true(kept >= R);
  tmk_relay_destroy(b);
  tmk__pool_stats(&kept, &reused);
  assert_int_equal(kept, 0);
}

/* Datagrams come out whole, in order, with their sender, through many blocks; a full queue
 * refuses and counts, and never holds more than its bound; a queue that keeps up holds two
 * blocks (the one written and the spare). */
static void test_udp_queue_ring(void** state) {
  (void)state;
  tmk__rxq q;
  assert_int_equal(tmk__rxq_init(&q, 1000), TMK_EINVAL); /* less than two blocks */
  assert_int_equal(tmk__rxq_init(&q, (size_t)1 << 20), 0);
  static uint8_t data[65536];
  uint32_t pushed = 0, popped = 0;
  uint64_t refused = 0, through = 0;
  /* sizes vary so that blocks end anywhere; the writer runs ahead until the queue is full */
  for (int round = 0; round < 4000; round++) {
    for (int k = 0; k < 3; k++) {
      size_t len = 1 + (size_t)(pushed * 7919u % 50000u);
      memset(data, (int)(pushed & 0xff), len);
      struct sockaddr_in from = addr_port((uint16_t)(1000 + pushed % 5000));
      if (tmk__rxq_push(&q, data, len, (const struct sockaddr*)&from, sizeof from) == 0) {
        pushed++;
        through += len;
      } else {
        refused++;
      }
      assert_true(q.mapped <= q.cap);
      assert_true(tmk__rxq_bytes(&q) <= q.mapped);
    }
    for (int k = 0; k < 2 + (round & 1); k++) {
      size_t len;
      const struct sockaddr* from;
      const uint8_t* p = tmk__rxq_peek(&q, &len, &from);
      if (!p) break;
      assert_int_equal(len, 1 + (size_t)(popped * 7919u % 50000u));
      assert_int_equal(p[0], popped & 0xff);
      assert_int_equal(p[len - 1], popped & 0xff);
      assert_int_equal(from->sa_family, AF_INET);
      assert_int_equal(ntohs(((const struct sockaddr_in*)(const void*)from)->sin_port),
                       1000 + popped % 5000);
      tmk__rxq_pop(&q);
      popped++;
    }
  }
  assert_true(refused > 0);          /* the writer outran the reader */
  assert_true(through > 20 * q.cap); /* and the blocks were reused many times over */
  assert_int_equal(q.drops, refused);
  assert_int_equal(q.datagrams, pushed);
  assert_true(q.peak <= q.cap);
  while (tmk__rxq_peek(&q, &(size_t){0}, &(const struct sockaddr*){NULL})) {
    tmk__rxq_pop(&q);
    popped++;
  }
  assert_int_equal(popped, pushed);
  assert_true(tmk__rxq_empty(&q));
  for (int i = 0; i < 3000; i++) { /* 3 MB through a reader that keeps up */
    struct sockaddr_in from = addr_port(7);
    assert_int_equal(tmk__rxq_push(&q, data, 1000, (const struct sockaddr*)&from, sizeof from), 0);
    size_t len;
    const struct sockaddr* f;
    assert_non_null(tmk__rxq_peek(&q, &len, &f));
    assert_int_equal(len, 1000);
    tmk__rxq_pop(&q);
    assert_true(q.mapped <= 2 * q.block);
  }
  struct sockaddr_in from = addr_port(1);
  assert_int_equal(tmk__rxq_push(&q, data, 65537, (const struct sockaddr*)&from, sizeof from), -1);
  /* an IPv6 sender comes out whole; an address longer than that (no UDP socket gives one) is
   * refused and counted */
  struct sockaddr_in6 six;
  memset(&six, 0, sizeof six);
  six.sin6_family = AF_INET6;
  six.sin6_port = htons(4242);
  six.sin6_scope_id = 0x01020304;
  for (int i = 0; i < 16; i++) six.sin6_addr.s6_addr[i] = (uint8_t)(0xA0 + i);
  assert_int_equal(tmk__rxq_push(&q, data, 3, (const struct sockaddr*)&six, sizeof six), 0);
  {
    size_t len;
    const struct sockaddr* f;
    assert_non_null(tmk__rxq_peek(&q, &len, &f));
    assert_int_equal(len, 3);
    assert_memory_equal(f, &six, sizeof six);
    tmk__rxq_pop(&q);
  }
  struct sockaddr_storage big;
  memset(&big, 0, sizeof big);
  big.ss_family = AF_INET6;
  const uint64_t drops0 = q.drops;
  assert_int_equal(tmk__rxq_push(&q, data, 3, (const struct sockaddr*)&big, sizeof big), -1);
  assert_int_equal(q.drops, drops0 + 1);
  assert_true(tmk__rxq_empty(&q));
  tmk__rxq_free(&q);
  assert_int_equal(q.mapped, 0);
}

/* One writer thread, one reader: every datagram arrives once, whole and in order, whether the
 * reader keeps up (the queue restarts at its front) or falls behind (it fills and wraps). */
typedef struct rxq_writer {
  tmk__rxq* q;
  uint32_t n, sent;
} rxq_writer;

static void* rxq_write(void* arg) {
  rxq_writer* w = arg;
  static uint8_t buf[65536];
  struct sockaddr_in from = addr_port(9);
  for (uint32_t i = 0; i < w->n;) {
    size_t len = 5 + (size_t)(i * 2654435761u % (i % 64 == 0 ? 60000u : 700u));
    memcpy(buf, &i, 4);
    buf[len - 1] = (uint8_t)i;
    if (tmk__rxq_push(w->q, buf, len, (const struct sockaddr*)&from, sizeof from) == 0) i++;
    else sched_yield(); /* full: try again, as a sender's retransmission would */
  }
  w->sent = w->n;
  return NULL;
}

static void test_udp_queue_threads(void** state) {
  (void)state;
  tmk__rxq q;
  assert_int_equal(tmk__rxq_init(&q, (size_t)1 << 20), 0);
  rxq_writer w = {&q, 200000, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, rxq_write, &w), 0);
  uint32_t next = 0;
  while (next < w.n) {
    size_t len;
    const struct sockaddr* from;
    const uint8_t* p = tmk__rxq_peek(&q, &len, &from);
    if (!p) {
      if (next % 3 == 0) sched_yield();
      continue;
    }
    uint32_t got;
    memcpy(&got, p, 4);
    assert_int_equal(got, next);
    assert_int_equal(len, 5 + (size_t)(next * 2654435761u % (next % 64 == 0 ? 60000u : 700u)));
    assert_int_equal(p[len - 1], (uint8_t)next);
    tmk__rxq_pop(&q);
    next++;
    if (next % 5000 == 0) { /* fall behind now and then */
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
    }
  }
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_true(tmk__rxq_empty(&q));
  tmk__rxq_free(&q);
}

/* A relay whose loop is not running yet (created, not run): its receive thread still takes
 * every datagram off the socket into a 1 MiB queue, refuses and counts what does not fit, and
 * the loop decodes what was queued once it runs: nothing accepted is lost. */
static int queue_seen(const tmk_relay* r, uint64_t n) {
  tmk__rxq_counters c;
  tmk__udp_rx_counters(r->udp_rx, &c);
  return c.datagrams + c.drops >= n;
}

static void test_udp_queue_full_loop_behind(void** state) {
  (void)state;
  tmk_relay_desc d;
  memset(&d, 0, sizeof d);
  d.listen_host = "127.0.0.1";
  d.udp_queue_bytes = (size_t)1 << 20;
  d.ingest_nice = -1;
  running rr;
  assert_int_equal(tmk_relay_create(&d, &rr.r), 0);
  agent a;
  agent_open(&a, tmk_relay_listen_port(rr.r), 0x9999aaaabbbbccccull);
  agent_hello(&a);
  for (uint64_t seq = 0; seq < 4; seq++) agent_data(&a, seq);
  for (int i = 0; i < 1000 && !queue_seen(rr.r, 5); i++) sleep_ms(10);
  /* 60,000-byte junk datagrams: a queued one takes 60,136 bytes, so four fit in each of the
   * four 256 KiB blocks of a 1 MiB queue (the first beside the five small packets): 16 of them;
   * sent one at a time so that the socket buffer never overflows */
  static uint8_t junk[60000];
  memset(junk, 0xee, sizeof junk);
  for (int i = 0; i < 40; i++) {
    agent_send_raw(&a, junk, sizeof junk);
    for (int w = 0; w < 1000 && !queue_seen(rr.r, 6 + (uint64_t)i); w++) sleep_ms(1);
  }
  tmk__rxq_counters c;
  tmk__udp_rx_counters(rr.r->udp_rx, &c);
  assert_int_equal(c.datagrams + c.drops, 45);
  assert_int_equal(c.datagrams, 5 + 16);
  assert_int_equal(c.drops, 40 - 16);
  assert_int_equal(c.memory, (size_t)1 << 20);
  assert_true(c.peak <= c.capacity);
  tmk_relay_totals t;
  tmk_relay_get_stats(rr.r, &t);
  assert_int_equal(t.udp_queue_drops, 24);
  assert_int_equal(t.sessions, 0); /* nothing decoded yet */

  assert_int_equal(pthread_create(&rr.th, NULL, run_main, rr.r), 0);
  t = wait_totals(rr.r, garbage_at_least, 16);
  assert_int_equal(t.garbage, 16);
  t = wait_totals(rr.r, packets_at_least, 4);
  assert_int_equal(t.sessions, 1);
  assert_int_equal(t.sum.packets, 4);
  assert_int_equal(t.sum.zones, 4 * 9);
  tmk__udp_rx_counters(rr.r->udp_rx, &c);
  assert_int_equal(c.bytes, 0);
  assert_true(c.memory <= 2 * ((size_t)256 << 10)); /* caught up: the blocks went back */
  /* The receive thread's CPU time: read through its clock while it runs (it took 45
   * datagrams), the figure it stored at its exit once it has stopped; never going back. */
  const uint64_t running_ns = c.cpu_ns;
  assert_true(running_ns > 0);
  tmk_relay_get_stats(rr.r, &t);
  assert_true(t.rx_cpu_ns >= running_ns);
  assert_true(t.ingest_cpu_ns >= t.rx_cpu_ns);
  close(a.fd);
  tmk_relay_stop(rr.r);
  assert_int_equal(pthread_join(rr.th, NULL), 0);
  tmk__udp_rx_counters(rr.r->udp_rx, &c);
  assert_true(c.cpu_ns >= t.rx_cpu_ns);
  tmk_relay_get_stats(rr.r, &t);
  assert_int_equal(t.rx_cpu_ns, c.cpu_ns); /* stored: the same at every read */
  tmk_relay_destroy(rr.r);
}

static void test_lifecycle_edges(void** state) {
  (void)state;
  tmk_relay* r = NULL;
  tmk_relay_desc d;
  memset(&d, 0, sizeof d);
  d.listen_host = "127.0.0.1";
  assert_int_equal(tmk_relay_create(&d, &r), 0);
  tmk_relay_destroy(r);
  assert_int_equal(tmk_relay_create(&d, &r), 0);
  tmk_relay_stop(r);
  assert_int_equal(tmk_relay_run(r), 0);
  tmk_relay_destroy(r);
  d.reorder_packets = 1; /* out of range */
  assert_int_equal(tmk_relay_create(&d, &r), TMK_EINVAL);
  assert_null(r);
  d.reorder_packets = 0;
  d.udp_queue_bytes = 4096; /* less than 1 MiB */
  assert_int_equal(tmk_relay_create(&d, &r), TMK_EINVAL);
  d.udp_queue_bytes = 0;
  d.ingest_nice = 20;
  assert_int_equal(tmk_relay_create(&d, &r), TMK_EINVAL);
  d.ingest_nice = -2;
  assert_int_equal(tmk_relay_create(&d, &r), TMK_EINVAL);
  assert_null(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ingest_reorder_store),
      cmocka_unit_test(test_loss_and_bad_input),
      cmocka_unit_test(test_two_relays),
      cmocka_unit_test(test_paused_session_kept),
      cmocka_unit_test(test_udp_queue_ring),
      cmocka_unit_test(test_fresh_page_kind),
      cmocka_unit_test(test_clickhouse_post_lent_body),
      cmocka_unit_test(test_freed_memory_pool),
      cmocka_unit_test(test_udp_queue_threads),
      cmocka_unit_test(test_udp_queue_full_loop_behind),
      cmocka_unit_test(test_lifecycle_edges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
