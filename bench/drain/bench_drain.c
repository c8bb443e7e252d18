/* bench_drain.c — tmk-bench-drain: the drain side of tmk-bench-load without sockets or threads,
 * so that its work is the same from run to run and can be counted in instructions (callgrind).
 * The agent (manual pump, callback transport keeping packets in memory, 16 KB packets and LZ4 as
 * over loopback, a synthetic clock) records tmk-bench-load's tight loop and nested frames in
 * bursts, each drained by tmk_agent_flush(); then the relay library (not running its loop) ingests
 * those packets, and tmk-bench-relay's game-like packets, through tmk__ingest_packet: header,
 * session, reorder, decode, store. Prints RESULT flush_ns_per_zone (agent: drain + encode +
 * compress, per zone) and ingest_ns_per_zone_{tight,nested,game} (relay, per stored zone),
 * CPU time of the one thread. Optional arguments: zones per loop (default 2,000,000), and one
 * stream alone (tight, nested or game).
 * Instructions: valgrind --tool=callgrind, then the inclusive cost of tmk_agent_flush (less
 * capture) and of tmk__ingest_packet per zone (docs/SCALE.md). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "relay_internal.h"
#include "telemark.h"
#include "tmk_bench_loops.h"
#include "tmk_gamestream.h"
#include "tmk_proto.h"
#include "tmk_relay.h"

#define BURST 65536          /* zones recorded between two flushes: 2 MB of ring */
#define GAME_PACKETS 4000    /* tmk-bench-relay's packets of one target */
#define GAME_PACKET 1200

static uint64_t arena[(16u << 20) / 8];

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- packets kept in memory ------------------------------------------------------------------ */
typedef struct capture {
  uint8_t* data;
  size_t len, cap;
  size_t* ends; /* end offset of each packet */
  size_t n, ncap;
} capture;

static void cap_add(capture* c, const void* p, size_t len) {
  if (c->len + len > c->cap) {
    c->cap = (c->len + len) * 2;
    c->data = realloc(c->data, c->cap);
  }
  if (c->n == c->ncap) {
    c->ncap = c->ncap ? c->ncap * 2 : 1024;
    c->ends = realloc(c->ends, c->ncap * sizeof *c->ends);
  }
  if (!c->data || !c->ends) {
    fprintf(stderr, "tmk-bench-drain: out of memory\n");
    exit(1);
  }
  memcpy(c->data + c->len, p, len);
  c->len += len;
  c->ends[c->n++] = c->len;
}

/* The callback transport's framed packet (varint length + packet): the packet is kept. */
static int capture_packet(void* user, const void* data, size_t len) {
  uint32_t plen = 0;
  int pl = tmk_proto_frame_parse(data, len, &plen);
  if (pl <= 0 || (size_t)pl + plen != len) return -1;
  cap_add((capture*)user, (const uint8_t*)data + pl, plen);
  return 0;
}

/* ---- the agent side ---------------------------------------------------------------------------- */
/* A clock of 2.4 GHz that advances 30..37 ticks a reading (xorshift jitter): a zone of the tight
 * loop lasts what it does on this machine's TSC, give or take, and every run is the same. */
static uint64_t clk_now, clk_rng = 0x9E3779B97F4A7C15ull;
static uint64_t fake_clock(void* user) {
  (void)user;
  clk_rng ^= clk_rng << 13;
  clk_rng ^= clk_rng >> 7;
  clk_rng ^= clk_rng << 17;
  clk_now += 30 + (clk_rng >> 61);
  return clk_now;
}

/* tmk-bench-load's frames (without its frame marks). */
static void nested(uint64_t n) {
  uint64_t f;
  for (f = 0; f < n / 20; f++) tmk_bench_game_frame(f);
}

/* Records n zones of `loop` in bursts, each drained by tmk_agent_flush(); the packets land in
 * *out. Returns the flush CPU seconds, or -1. */
static double record(void (*loop)(uint64_t), uint64_t n, capture* out, uint64_t* sent) {
  tmk_agent_desc d;
  tmk_agent_stats st;
  double flush_s = 0;
  uint64_t done;
  int rc;
  memset(&d, 0, sizeof d);
  d.transport = TMK_TRANSPORT_CALLBACK;
  d.write.fn = capture_packet;
  d.write.user_data = out;
  d.program = "tmk-bench-drain";
  d.max_packet = 16384; /* what the agent sends over loopback */
  d.ring_bytes = 4u << 20;
  d.max_threads = 2;
  d.manual_pump = 1;
  d.clock.fn = fake_clock;
  d.clock.frequency = 2400000000ull;
  rc = tmk_agent_init(&d, arena, sizeof arena);
  if (rc < 0) {
    fprintf(stderr, "tmk-bench-drain: agent init: %s\n", tmk_strerror(rc));
    return -1;
  }
  for (done = 0; done < n; done += BURST) {
    double t0;
    loop(n - done < BURST ? n - done : BURST);
    t0 = cpu_s();
    tmk_agent_flush();
    flush_s += cpu_s() - t0;
  }
  tmk_agent_get_stats(&st);
  tmk_agent_shutdown();
  if (st.drops[TMK_DROP_RING_FULL]) {
    fprintf(stderr, "tmk-bench-drain: %llu zones dropped\n",
            (unsigned long long)st.drops[TMK_DROP_RING_FULL]);
    return -1;
  }
  *sent = st.zones_sent;
  return flush_s;
}

/* ---- tmk-bench-relay's packets of one target --------------------------------------------------- */
static void game_packets(capture* out, uint64_t sid) {
  static uint8_t body[GAME_PACKET - TMK_PROTO_MAX_HEADER], pkt[GAME_PACKET];
  tmk_proto_writer w;
  tmk_gamestream* g = tmk_gs_create(1000);
  void* lz4 = malloc(tmk_proto_lz4_state_size() + 1);
  const tmk_gs_frame* fr;
  uint32_t t = 0;
  size_t zpos = 0, np, i, nsites;
  const tmk_proto_site* sites = tmk_gs_sites(&nsites);
  if (!g || !lz4) exit(1);
  fr = tmk_gs_next_frame(g);
  tmk_proto_writer_init(&w, body, sizeof body);
  for (np = 0; np < GAME_PACKETS; np++) {
    int n;
    tmk_proto_writer_reset(&w);
    if (np % 200 == 0)
      for (i = 0; i < nsites; i++) tmk_proto_put_site(&w, &sites[i]);
    for (;;) { /* the zones of each thread's batch, without its events */
      const tmk_gs_batch* b = &fr->batch[t];
      int put;
      if (tmk_proto_put_thread(&w, b->thread) < 0) break;
      put = tmk_proto_put_zones(&w, b->zones + zpos, b->nzones - zpos);
      if (put < 0) exit(1);
      zpos += (size_t)put;
      if (zpos < b->nzones) break;
      zpos = 0;
      if (++t == TMK_GS_THREADS) {
        t = 0;
        fr = tmk_gs_next_frame(g);
      }
    }
    n = tmk_proto_finish(&w, sid, np, pkt, sizeof pkt, lz4);
    if (n < 0) exit(1);
    cap_add(out, pkt, (size_t)n);
  }
  free(lz4);
  tmk_gs_destroy(g);
}

/* ---- the relay side ---------------------------------------------------------------------------- */
static uint64_t session_of(const capture* c) {
  tmk_proto_header h;
  if (c->n == 0 || tmk_proto_parse_header(c->data, c->ends[0], &h) < 0) return 0;
  return h.session_id;
}

/* Ingests the packets of c as if they came from 127.0.0.1:port; sets *zones to what the relay
 * stored. Returns the ingest CPU seconds, or -1. */
static double ingest(tmk_relay* r, const capture* c, uint16_t port, uint64_t* zones) {
  struct sockaddr_in src;
  tmk_relay_session_info info;
  char id[32];
  double t0, t;
  size_t i, at = 0;
  memset(&src, 0, sizeof src);
  src.sin_family = AF_INET;
  src.sin_port = htons(port);
  src.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  t0 = cpu_s();
  for (i = 0; i < c->n; i++) {
    tmk__ingest_packet(r, c->data + at, c->ends[i] - at, (const struct sockaddr*)&src);
    at = c->ends[i];
  }
  t = cpu_s() - t0;
  snprintf(id, sizeof id, "%016" PRIx64, session_of(c));
  if (tmk_relay_session(r, id, &info) != 0) {
    fprintf(stderr, "tmk-bench-drain: the relay shows no session %s\n", id);
    return -1;
  }
  *zones = info.stats.zones;
  return t;
}

int main(int argc, char** argv) {
  uint64_t n = 2000000, sent_t = 0, sent_n = 0, z_t = 0, z_n = 0, z_g = 0;
  static capture ct, cn, cg;
  tmk_relay_desc desc;
  tmk_relay* r;
  double ft = 0, fn = 0, it = 0, in = 0, ig = 0;
  const char* only = argc > 2 ? argv[2] : "all"; /* tight, nested or game: that stream alone */
  int do_t = !strcmp(only, "all") || !strcmp(only, "tight");
  int do_n = !strcmp(only, "all") || !strcmp(only, "nested");
  int do_g = !strcmp(only, "all") || !strcmp(only, "game");
  if (argc > 1) n = strtoull(argv[1], NULL, 10);
  if (n < 20) n = 20;
  if (!do_t && !do_n && !do_g) {
    fprintf(stderr, "usage: %s [zones per loop] [all|tight|nested|game]\n", argv[0]);
    return 2;
  }
  if ((do_t && (ft = record(tmk_bench_tight, n, &ct, &sent_t)) < 0) ||
      (do_n && (fn = record(nested, n, &cn, &sent_n)) < 0))
    return 1;
  if (do_g) game_packets(&cg, 0xD200000000000001ull);

  memset(&desc, 0, sizeof desc);
  desc.listen_host = "127.0.0.1"; /* the socket is bound, never read: packets come by call */
  desc.session_memory = (size_t)1 << 30;
  if (tmk_relay_create(&desc, &r) != 0) {
    fprintf(stderr, "tmk-bench-drain: cannot create the relay\n");
    return 1;
  }
  if ((do_t && (it = ingest(r, &ct, 40001, &z_t)) < 0) ||
      (do_n && (in = ingest(r, &cn, 40002, &z_n)) < 0) ||
      (do_g && (ig = ingest(r, &cg, 40003, &z_g)) < 0)) {
    tmk_relay_destroy(r);
    return 1;
  }
  tmk_relay_destroy(r);
  printf("bench-drain: tight %llu zones sent in %zu packets, %llu stored; nested %llu sent in %zu "
         "packets, %llu stored; game %zu packets, %llu zones stored\n",
         (unsigned long long)sent_t, ct.n, (unsigned long long)z_t, (unsigned long long)sent_n,
         cn.n, (unsigned long long)z_n, cg.n, (unsigned long long)z_g);
  if (z_t != sent_t || z_n != sent_n || (do_g && z_g == 0)) {
    fprintf(stderr, "tmk-bench-drain: the relay stored other zones than were sent\n");
    return 1;
  }
  if (do_t || do_n)
    printf("RESULT flush_ns_per_zone=%.2f\n", (ft + fn) * 1e9 / (double)(sent_t + sent_n));
  if (do_t) printf("RESULT ingest_ns_per_zone_tight=%.2f\n", it * 1e9 / (double)z_t);
  if (do_n) printf("RESULT ingest_ns_per_zone_nested=%.2f\n", in * 1e9 / (double)z_n);
  if (do_g) printf("RESULT ingest_ns_per_zone_game=%.2f\n", ig * 1e9 / (double)z_g);
  if (do_t) printf("RESULT bytes_per_zone_tight=%.3f\n", (double)ct.len / (double)sent_t);
  if (do_n) printf("RESULT bytes_per_zone_nested=%.3f\n", (double)cn.len / (double)sent_n);
  return 0;
}
