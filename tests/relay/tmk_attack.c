/* tmk_attack.c — a hostile peer for the relay's tests (issue 15): crafts the packets that broke
 * it (new threads after eviction, sparse zones, site floods, sequence jumps, contradicting
 * HELLOs, HELLOs of another version, DATA+BYE session churn) and a structured UDP fuzzer (valid
 * headers, mutated records, many sessions and threads) that runs for a bounded time.
 * Usage: tmk-relay-attack MODE --to HOST:PORT [options]; prints one summary line. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tmk_proto.h"

typedef struct opts {
  const char* mode;
  char host[64];
  int port;
  const char* bind_ip;
  uint64_t session;
  uint64_t seq;
  uint64_t count;
  uint32_t zones;
  double seconds;
  uint32_t seed;
  const char* program;
  uint64_t freq;
  uint32_t site_id;
  int tcp;
} opts;

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static int g_fd = -1;
static void* g_lz4;
static uint8_t g_body[TMK_PROTO_MAX_PACKET - TMK_PROTO_MAX_HEADER];
static uint8_t g_out[TMK_PROTO_MAX_PACKET];

static void die(const char* what) {
  fprintf(stderr, "tmk-relay-attack: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void open_socket(const opts* o) {
  g_fd = socket(AF_INET, o->tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
  if (g_fd < 0) die("socket");
  if (o->bind_ip) {
    struct sockaddr_in me;
    memset(&me, 0, sizeof me);
    me.sin_family = AF_INET;
    inet_pton(AF_INET, o->bind_ip, &me.sin_addr);
    if (bind(g_fd, (struct sockaddr*)&me, sizeof me) != 0) die("bind");
  }
  struct sockaddr_in to;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  to.sin_port = htons((uint16_t)o->port);
  inet_pton(AF_INET, o->host, &to.sin_addr);
  if (connect(g_fd, (struct sockaddr*)&to, sizeof to) != 0) die("connect");
  int big = 4 << 20;
  setsockopt(g_fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
}

static int g_tcp;
static void send_packet(const uint8_t* p, size_t len) {
  if (g_tcp) {
    uint8_t prefix[3];
    int n = tmk_proto_frame_prefix(prefix, len);
    if (n < 0 || send(g_fd, prefix, (size_t)n, MSG_NOSIGNAL) < 0 ||
        send(g_fd, p, len, MSG_NOSIGNAL) < 0)
      die("send tcp");
    return;
  }
  for (int tries = 0; tries < 1000; tries++) {
    if (send(g_fd, p, len, 0) >= 0) return;
    if (errno == ENOBUFS || errno == EAGAIN || errno == EINTR) {
      sleep_us(100);
      continue;
    }
    if (errno == ECONNREFUSED) return;
    die("send udp");
  }
}

/* Counts replies of type `type` waiting on the socket (UDP) within wait_ms. */
static uint64_t count_replies(int type, int wait_ms) {
  uint64_t n = 0;
  struct pollfd pfd = {g_fd, POLLIN, 0};
  while (poll(&pfd, 1, wait_ms) > 0) {
    uint8_t buf[2048];
    ssize_t k = recv(g_fd, buf, sizeof buf, 0);
    if (k <= 0) break;
    tmk_proto_header h;
    if (tmk_proto_parse_header(buf, (size_t)k, &h) >= 0 && h.type == type) n++;
  }
  return n;
}

static void hello(uint64_t sid, const char* program, uint64_t freq) {
  tmk_proto_hello h;
  memset(&h, 0, sizeof h);
  h.proto_version = TMK_PROTO_VERSION;
  h.agent_version.ptr = "synth-1";
  h.agent_version.len = 7;
  h.program.ptr = program;
  h.program.len = (uint32_t)strlen(program);
  h.platform.ptr = "linux";
  h.platform.len = 5;
  h.arch.ptr = "x86_64";
  h.arch.len = 6;
  h.pointer_size = 8;
  h.timer_freq = freq;
  h.caps = TMK_CAP_CONTROL;
  h.max_packet = 1200;
  uint8_t out[512];
  int n = tmk_proto_encode_hello(out, sizeof out, sid, &h);
  if (n > 0) send_packet(out, (size_t)n);
}

static void finish_send(tmk_proto_writer* w, uint64_t sid, uint64_t seq) {
  int n = tmk_proto_finish(w, sid, seq, g_out, sizeof g_out, g_lz4);
  if (n < 0) {
    fprintf(stderr, "tmk-relay-attack: finish: %s\n", tmk_strerror(n));
    exit(1);
  }
  send_packet(g_out, (size_t)n);
}

/* `count` packets, packet i on a new thread i with `zones` dense zones (item 1). With gap =
 * 2^33 ticks, every zone needs a chunk of its own (item 4). */
static void zones_mode(const opts* o, uint64_t gap, int new_thread_each) {
  static tmk_proto_zone z[20000];
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, g_body, sizeof g_body);
  hello(o->session, "attack", 1000000000ull);
  uint32_t nz = o->zones > 20000 ? 20000 : o->zones;
  for (uint64_t i = 0; i < o->count; i++) {
    tmk_proto_writer_reset(&w);
    tmk_proto_put_thread(&w, new_thread_each ? (uint32_t)i : 0);
    uint64_t base = 1000000 + i * (uint64_t)nz * gap;
    for (uint32_t k = 0; k < nz; k++) {
      z[k].start = base + gap * k;
      z[k].duration = 50;
      z[k].site = 1;
      z[k].depth = 0;
    }
    int put = tmk_proto_put_zones(&w, z, nz);
    if (put != (int)nz) {
      fprintf(stderr, "tmk-relay-attack: only %d zones fit\n", put);
      exit(1);
    }
    finish_send(&w, o->session, o->seq + i);
    sleep_us(2000);
  }
  printf("ATTACK packets=%llu zones=%llu\n", (unsigned long long)o->count,
         (unsigned long long)(o->count * nz));
}

/* `count` packets full of SITE records with 1024-byte name and file (item 4). */
static void sites_mode(const opts* o) {
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, g_body, sizeof g_body);
  hello(o->session, "attack", 1000000000ull);
  static char name[TMK_PROTO_MAX_STRING];
  memset(name, 'n', sizeof name);
  uint32_t id = 1;
  uint64_t sites = 0;
  for (uint64_t i = 0; i < o->count; i++) {
    tmk_proto_writer_reset(&w);
    for (;;) {
      tmk_proto_site s;
      memset(&s, 0, sizeof s);
      s.id = id;
      s.name.ptr = name;
      s.name.len = sizeof name;
      s.file.ptr = name;
      s.file.len = sizeof name;
      if (tmk_proto_put_site(&w, &s) < 0) break;
      id++;
      sites++;
    }
    finish_send(&w, o->session, o->seq + i);
    if (i % 16 == 15) sleep_us(1000);
  }
  printf("ATTACK packets=%llu sites=%llu\n", (unsigned long long)o->count,
         (unsigned long long)sites);
}

/* One SITE with the given id and zones that use it (item 5). */
static void site_mode(const opts* o) {
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, g_body, sizeof g_body);
  hello(o->session, "attack", 1000000000ull);
  tmk_proto_site s;
  memset(&s, 0, sizeof s);
  s.id = o->site_id;
  s.name.ptr = "big-id";
  s.name.len = 6;
  tmk_proto_put_site(&w, &s);
  tmk_proto_zone z[10];
  for (int k = 0; k < 10; k++) {
    z[k].start = 1000000 + (uint64_t)k * 1000;
    z[k].duration = 500;
    z[k].site = o->site_id;
    z[k].depth = 0;
  }
  tmk_proto_put_zones(&w, z, 10);
  finish_send(&w, o->session, o->seq);
  printf("ATTACK site=%u\n", o->site_id);
}

/* One DATA packet (one zone) with the given seq (item 3). */
static void seq_mode(const opts* o) {
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, g_body, sizeof g_body);
  tmk_proto_zone z = {5000, 10, 1, 0};
  for (uint64_t i = 0; i < (o->count ? o->count : 1); i++) {
    tmk_proto_writer_reset(&w);
    tmk_proto_put_zones(&w, &z, 1);
    finish_send(&w, o->session, o->seq + i);
  }
  printf("ATTACK seq=%llu\n", (unsigned long long)o->seq);
}

/* `count` HELLOs of protocol version 2 (the minimum 14 + a few bytes); counts REJECTs (item 11). */
static void old_hello_mode(const opts* o) {
  uint8_t p[16];
  memcpy(p, "TMK", 3);
  p[3] = TMK_PROTO_VERSION + 1;
  p[4] = 0;
  p[5] = TMK_PKT_HELLO;
  for (int b = 0; b < 8; b++) p[6 + b] = (uint8_t)(o->session >> (8 * b));
  uint64_t got = 0;
  for (uint64_t i = 0; i < o->count; i++) {
    send_packet(p, 14);
    if (i % 64 == 63) got += count_replies(TMK_PKT_REJECT, 0);
  }
  got += count_replies(TMK_PKT_REJECT, 300);
  printf("ATTACK sent=%llu rejects=%llu\n", (unsigned long long)o->count, (unsigned long long)got);
}

/* `count` fresh sessions, each one DATA packet and a BYE (item 8). */
static void churn_mode(const opts* o) {
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, g_body, sizeof g_body);
  tmk_proto_zone z = {5000, 10, 1, 0};
  for (uint64_t i = 0; i < o->count; i++) {
    uint64_t sid = rnd() | 1;
    tmk_proto_writer_reset(&w);
    tmk_proto_put_zones(&w, &z, 1);
    finish_send(&w, sid, 0);
    uint8_t bye[64];
    int n = tmk_proto_encode_bye(bye, sizeof bye, sid);
    if (n > 0) send_packet(bye, (size_t)n);
    sleep_us(300);
  }
  printf("ATTACK sessions=%llu\n", (unsigned long long)o->count);
}

/* ---------------------------------------------------------------------------------------------
 * Structured fuzzer: sessions with HELLOs, DATA built by the encoder (so headers and most
 * records are valid), then mutated: bytes flipped in the uncompressed body, records cut, seqs
 * jumped, replayed or reordered, thread ids, site ids and times taken from edge values.
 * ------------------------------------------------------------------------------------------- */
static uint64_t edge_u64(void) {
  static const uint64_t v[] = {0,          1,          2,          31,         32,
                               255,        256,        4095,       4096,       65535,
                               65536,      1ull << 31, 1ull << 32, 1ull << 33, 1ull << 40,
                               1ull << 62, 1ull << 63, UINT64_MAX, UINT64_MAX - 1};
  if (rnd() % 2) return rnd() % 64;
  return v[rnd() % (sizeof v / sizeof v[0])] + (rnd() % 3) - 1;
}

static size_t fuzz_packet(uint64_t sid, uint64_t seq, uint32_t nthreads) {
  tmk_proto_writer w;
  size_t cap = 200 + rnd() % 4000;
  tmk_proto_writer_init(&w, g_body, cap);
  w.big_endian = (rnd() % 8) == 0;
  int nrec = 1 + (int)(rnd() % 40);
  tmk_proto_zone z[16];
  char text[300];
  for (size_t k = 0; k < sizeof text; k++) text[k] = (char)('a' + rnd() % 26);
  for (int i = 0; i < nrec; i++) {
    switch (rnd() % 12) {
      case 0: {
        tmk_proto_site s;
        memset(&s, 0, sizeof s);
        s.id = (uint32_t)(rnd() % 4 ? 1 + rnd() % 300 : edge_u64() | 1);
        s.kind = (uint8_t)(rnd() % 5);
        s.severity = (uint8_t)(rnd() % 6);
        s.verbosity = (uint32_t)rnd();
        s.name.ptr = text;
        s.name.len = (uint32_t)(rnd() % 64);
        s.file.ptr = text;
        s.file.len = (uint32_t)(rnd() % 32);
        tmk_proto_put_site(&w, &s);
        break;
      }
      case 1:
        tmk_proto_put_thread(&w, (uint32_t)(rnd() % 4 ? rnd() % nthreads : edge_u64()));
        break;
      case 2:
      case 3:
      case 4: {
        size_t n = 1 + rnd() % 16;
        uint64_t t = rnd() % 3 ? 1000000 + rnd() % 100000000 : edge_u64();
        for (size_t k = 0; k < n; k++) {
          z[k].start = t + (rnd() % 4 ? k * 100 : edge_u64());
          z[k].duration = rnd() % 4 ? 50 : edge_u64();
          z[k].site = (uint32_t)(rnd() % 4 ? 1 + rnd() % 300 : edge_u64());
          z[k].depth = (uint32_t)(rnd() % 4 ? 0 : rnd() % 40);
        }
        tmk_proto_put_zones(&w, z, n);
        break;
      }
      case 5:
        tmk_proto_put_marker(&w, (int)(rnd() % 2), (uint32_t)(rnd() % 8), edge_u64(), text,
                             rnd() % 256);
        break;
      case 6:
        tmk_proto_put_frame(&w, (uint32_t)(rnd() % 3), rnd() % 2 ? edge_u64() : 2000000);
        break;
      case 7:
        if (rnd() % 2) tmk_proto_put_plot_i(&w, 1, edge_u64(), (int64_t)rnd());
        else tmk_proto_put_plot_d(&w, 2, edge_u64(), (double)(int64_t)rnd() / 7.0);
        break;
      case 8:
        tmk_proto_put_message(&w, (uint32_t)(rnd() % 4), (uint8_t)(rnd() % 6), (uint32_t)rnd(),
                              edge_u64(), text, rnd() % 300);
        break;
      case 9:
        tmk_proto_put_thread_name(&w, (uint32_t)(rnd() % 4 ? rnd() % nthreads : edge_u64()),
                                  text, rnd() % 100);
        break;
      case 10:
        tmk_proto_put_drops(&w, (uint32_t)(rnd() % 10), edge_u64());
        break;
      default:
        if (rnd() % 2) tmk_proto_put_clock(&w, edge_u64(), edge_u64());
        else tmk_proto_put_team(&w, (uint32_t)(rnd() % 32), text, rnd() % 40);
        break;
    }
  }
  /* Mutate the body before it is finished (so a compressed packet carries the mutation). */
  int mutate = rnd() % 3 == 0;
  int n = tmk_proto_finish(&w, sid, seq, g_out, sizeof g_out, mutate ? NULL : g_lz4);
  if (n < 0) return 0;
  if (mutate) {
    int flips = 1 + (int)(rnd() % 4);
    for (int k = 0; k < flips; k++) {
      size_t at = 14 + rnd() % ((size_t)n - 14);
      switch (rnd() % 3) {
        case 0: g_out[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 1: g_out[at] = (uint8_t)rnd(); break;
        default: n = (int)at + 1; break; /* cut */
      }
    }
  }
  return (size_t)n;
}

static void fuzz_mode(const opts* o) {
  enum { MAXS = 64 };
  uint64_t sids[MAXS], seqs[MAXS];
  uint32_t nsess = o->count ? (uint32_t)(o->count > MAXS ? MAXS : o->count) : 16;
  for (uint32_t i = 0; i < nsess; i++) {
    sids[i] = rnd() | 1;
    seqs[i] = rnd() % 2 ? 0 : rnd() % 100000;
  }
  double end = now_s() + o->seconds;
  uint64_t sent = 0;
  static uint8_t saved[TMK_PROTO_MAX_PACKET];
  size_t saved_len = 0;
  while (now_s() < end) {
    uint32_t k = (uint32_t)(rnd() % nsess);
    uint32_t roll = (uint32_t)(rnd() % 100);
    if (roll < 3) {
      hello(sids[k], rnd() % 2 ? "fuzz" : "fuzz-other", rnd() % 4 ? 1000000000ull : edge_u64());
    } else if (roll < 4) {
      uint8_t bye[64];
      int n = tmk_proto_encode_bye(bye, sizeof bye, sids[k]);
      if (n > 0) send_packet(bye, (size_t)n);
    } else if (roll < 5) {
      sids[k] = rnd() | 1; /* a new session in this slot */
      seqs[k] = 0;
    } else if (roll < 7 && saved_len) {
      send_packet(saved, saved_len); /* replay */
    } else {
      uint64_t seq = seqs[k]++;
      uint32_t r2 = (uint32_t)(rnd() % 50);
      if (r2 == 0) seq = edge_u64();
      else if (r2 == 1) seq += rnd() % 600;
      else if (r2 == 2 && seq > 10) seq -= rnd() % 10;
      size_t n = fuzz_packet(sids[k], seq, 1 + (uint32_t)(rnd() % 12));
      if (!n) continue;
      send_packet(g_out, n);
      if (rnd() % 16 == 0) {
        memcpy(saved, g_out, n);
        saved_len = n;
      }
    }
    sent++;
    if (sent % 256 == 0) sleep_us(2000); /* a fuzzer, not a flood: the relay must decode it */
  }
  printf("ATTACK fuzz packets=%llu sessions=%u\n", (unsigned long long)sent, nsess);
}

int main(int argc, char** argv) {
  opts o;
  memset(&o, 0, sizeof o);
  snprintf(o.host, sizeof o.host, "127.0.0.1");
  o.session = 0xa77ac4000000001ull;
  o.count = 1;
  o.zones = 1000;
  o.seconds = 5;
  o.program = "attack";
  o.freq = 1000000000ull;
  if (argc < 2) {
    fprintf(stderr, "usage: tmk-relay-attack MODE --to HOST:PORT [options]\n");
    return 2;
  }
  o.mode = argv[1];
  for (int i = 2; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
#define ARG(name) (strcmp(a, name) == 0 && (i++, 1))
    if (ARG("--to")) {
      const char* c = strrchr(v, ':');
      if (!c || (size_t)(c - v) >= sizeof o.host) return 2;
      memcpy(o.host, v, (size_t)(c - v));
      o.host[c - v] = 0;
      o.port = atoi(c + 1);
    } else if (ARG("--bind")) o.bind_ip = v;
    else if (ARG("--session")) o.session = strtoull(v, NULL, 16);
    else if (ARG("--seq")) o.seq = strtoull(v, NULL, 0);
    else if (ARG("--count")) o.count = strtoull(v, NULL, 10);
    else if (ARG("--zones")) o.zones = (uint32_t)atoi(v);
    else if (ARG("--seconds")) o.seconds = atof(v);
    else if (ARG("--seed")) o.seed = (uint32_t)strtoul(v, NULL, 10);
    else if (ARG("--program")) o.program = v;
    else if (ARG("--freq")) o.freq = strtoull(v, NULL, 10);
    else if (ARG("--site-id")) o.site_id = (uint32_t)strtoul(v, NULL, 10);
    else if (strcmp(a, "--tcp") == 0) o.tcp = 1;
    else {
      fprintf(stderr, "tmk-relay-attack: unknown option %s\n", a);
      return 2;
    }
  }
  if (o.seed) g_rng ^= (uint64_t)o.seed * 0x9e3779b97f4a7c15ull;
  size_t lz = tmk_proto_lz4_state_size();
  if (lz && posix_memalign(&g_lz4, 16, lz) != 0) g_lz4 = NULL;
  g_tcp = o.tcp;
  open_socket(&o);
  if (strcmp(o.mode, "threads") == 0) zones_mode(&o, 100, 1);
  else if (strcmp(o.mode, "sparse") == 0) zones_mode(&o, 1ull << 33, 0);
  else if (strcmp(o.mode, "sites") == 0) sites_mode(&o);
  else if (strcmp(o.mode, "site") == 0) site_mode(&o);
  else if (strcmp(o.mode, "seq") == 0) seq_mode(&o);
  else if (strcmp(o.mode, "hello") == 0) {
    hello(o.session, o.program, o.freq);
    printf("ATTACK hello program=%s freq=%llu\n", o.program, (unsigned long long)o.freq);
  } else if (strcmp(o.mode, "old-hello") == 0) old_hello_mode(&o);
  else if (strcmp(o.mode, "churn") == 0) churn_mode(&o);
  else if (strcmp(o.mode, "fuzz") == 0) fuzz_mode(&o);
  else {
    fprintf(stderr, "tmk-relay-attack: unknown mode %s\n", o.mode);
    return 2;
  }
  if (o.tcp) {
    shutdown(g_fd, SHUT_WR);
    sleep_us(100000);
  }
  close(g_fd);
  free(g_lz4);
  return 0;
}
