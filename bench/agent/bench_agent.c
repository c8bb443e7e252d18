/* bench_agent.c — tmk-bench-agent: what a zone costs the game and the wire. Prints
 * `RESULT name=value` lines measured in one run: zone_ns (one thread), zone_ns_2threads,
 * floor_ns (two raw timer reads), zone_over_floor, filtered_ns (zone filtered out at run time),
 * bytes_per_zone (the demo game's stream as it would leave over UDP; also uncompressed).
 * Keyed (desc.key, PROTOCOL.md §2.1): zone_ns_keyed, the same bursts on an agent with a key, in
 * blocks alternating with unkeyed ones (zone_ns_unkeyed_paired); the MAC is the flusher's work,
 * so flush_ns_per_zone and flush_ns_per_zone_keyed time tmk_agent_flush() draining, encoding,
 * compressing, sealing and sending each burst, per zone.
 * Optional argument: seconds of demo stream per measurement (default 3).
 *
 * What it does not show: the timed bursts (16,384 zones) fit in the ring and the agent runs
 * with manual_pump = 1, draining between bursts, so no flusher competes with them and nothing
 * is dropped. It measures the hot path alone, not whether a sustained load is delivered, what
 * the flusher costs, or how often a loaded machine preempts the game: tmk-bench-load does. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "demo_sim.h"
#include "telemark.h"
#include "tmk_port.h"

#define BURST 16384 /* zones per timed burst: fits a 1 MB ring, so nothing is dropped */
#define ROUNDS 41   /* bursts per measurement; the median is reported */

static uint64_t arena[(8u << 20) / 8];
static volatile uint64_t sink;

static uint64_t ns_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* ---- loopback receiver that only drains ---------------------------------------------------- */
static int rx_fd;
static volatile int rx_stop;
static uint64_t rx_bytes;
static void* rx_main(void* arg) {
  static uint8_t buf[65536];
  (void)arg;
  while (!rx_stop) {
    ssize_t n = recv(rx_fd, buf, sizeof buf, 0);
    if (n > 0) rx_bytes += (uint64_t)n;
  }
  return NULL;
}

/* ---- the measured loops ---------------------------------------------------------------------- */
static double burst_floor(void) {
  uint64_t t0 = ns_now(), acc = 0;
  int i;
  for (i = 0; i < BURST; i++) {
    uint64_t a = tmk_port_fast_ticks();
    uint64_t b = tmk_port_fast_ticks();
    acc += b - a;
  }
  sink = acc;
  return (double)(ns_now() - t0) / BURST;
}

static double burst_zones(void) {
  uint64_t t0 = ns_now();
  int i;
  for (i = 0; i < BURST; i++) {
    TMK_ZONE("bench", TMK_SEV_INFO, 1);
  }
  return (double)(ns_now() - t0) / BURST;
}

static double burst_filtered(void) {
  uint64_t t0 = ns_now();
  int i;
  for (i = 0; i < BURST * 16; i++) {
    TMK_ZONE("bench-filtered", TMK_SEV_DEBUG, 1);
    __asm__ volatile("" ::: "memory"); /* keep the loop a loop */
  }
  return (double)(ns_now() - t0) / (BURST * 16);
}

typedef struct two {
  pthread_barrier_t* go;
  double per[ROUNDS];
} two;

static void* two_main(void* arg) {
  two* t = (two*)arg;
  int r;
  for (r = 0; r < ROUNDS; r++) {
    pthread_barrier_wait(t->go);
    t->per[r] = burst_zones();
    pthread_barrier_wait(t->go);
  }
  return NULL;
}

/* ---- keyed against unkeyed ---------------------------------------------------------------------- */
#define KEY_BLOCKS 6 /* alternating blocks, half of them keyed */
#define KEY_ROUNDS 12 /* bursts per block */
static const uint8_t bench_key[16] = {0x6b, 0x65, 0x79, 0x2d, 0x62, 0x65, 0x6e, 0x63,
                                      0x68, 0x2d, 0x61, 0x67, 0x65, 0x6e, 0x74, 0x31};

/* Runs one block on a fresh agent: bursts timed, then the flush after each timed too. */
static int key_block(const tmk_agent_desc* base, int keyed, double* zone, double* flush) {
  tmk_agent_desc d = *base;
  int r;
  d.key = keyed ? bench_key : NULL;
  if (tmk_agent_init(&d, arena, sizeof arena) < 0) return -1;
  burst_zones(); /* warm up */
  tmk_agent_flush();
  for (r = 0; r < KEY_ROUNDS; r++) {
    uint64_t t0;
    zone[r] = burst_zones();
    t0 = ns_now();
    tmk_agent_flush();
    flush[r] = (double)(ns_now() - t0) / BURST;
  }
  tmk_agent_shutdown();
  return 0;
}

/* ---- bytes per zone on the demo stream -------------------------------------------------------- */
static uint64_t demo_bytes, demo_zones, demo_packets, demo_bad;
static int count_packet(void* user, const void* data, size_t len) {
  static uint8_t scratch[TMK_PROTO_MAX_BODY];
  uint32_t plen = 0;
  int pl = tmk_proto_frame_parse(data, len, &plen);
  tmk_proto_reader rd;
  tmk_proto_record rec;
  (void)user;
  if (pl <= 0 || (size_t)pl + plen != len) return -1;
  demo_bytes += plen; /* what the same packet is as a UDP datagram: no length prefix */
  demo_packets++;
  if (tmk_proto_open(&rd, (const uint8_t*)data + pl, plen, scratch, sizeof scratch) < 0) {
    demo_bad++;
    return 0;
  }
  if (rd.hdr.type != TMK_PKT_DATA) return 0;
  while (tmk_proto_next(&rd, &rec) == 1)
    if (rec.type == TMK_REC_ZONE) demo_zones++;
  return 0;
}

/* Runs the demo game for `seconds` with a counting callback transport. Sets *bytes_per_zone.
 * Returns 0 or -1. */
static int demo_stream(double seconds, int no_compression, double* bytes_per_zone,
                       tmk_agent_stats* st_out) {
  tmk_agent_desc d;
  tmk_agent_stats st;
  int i, rc;
  demo_bytes = demo_zones = demo_packets = demo_bad = 0;
  memset(&d, 0, sizeof d);
  d.transport = TMK_TRANSPORT_CALLBACK;
  d.write.fn = count_packet;
  d.program = "telemark-demo";
  d.no_compression = no_compression;
  for (i = 0; i < 5; i++) d.team_names[i] = demo_team_names[i];
  rc = tmk_agent_init(&d, arena, sizeof arena);
  if (rc < 0) {
    fprintf(stderr, "tmk-bench-agent: agent init: %s\n", tmk_strerror(rc));
    return -1;
  }
  demo_run(seconds, NULL);
  tmk_agent_get_stats(&st);
  tmk_agent_shutdown();
  if (demo_bad || demo_zones == 0) {
    fprintf(stderr, "tmk-bench-agent: demo stream did not decode (%llu bad packets)\n",
            (unsigned long long)demo_bad);
    return -1;
  }
  *bytes_per_zone = (double)demo_bytes / (double)demo_zones;
  if (st_out) *st_out = st;
  return 0;
}

int main(int argc, char** argv) {
  tmk_agent_desc d;
  tmk_agent_stats st;
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  pthread_t rx;
  double fl[ROUNDS], zn[ROUNDS], fz[ROUNDS], z2[2 * ROUNDS];
  double floor_ns, zone_ns, zone2_ns, filtered_ns, bpz = 0, bpz_raw = 0, demo_seconds = 3.0;
  static double kz[2][KEY_BLOCKS / 2 * KEY_ROUNDS], kf[2][KEY_BLOCKS / 2 * KEY_ROUNDS];
  int r, i, rc;
  if (argc > 1) demo_seconds = atof(argv[1]);

  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  rx_fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (rx_fd < 0 || bind(rx_fd, (struct sockaddr*)&sa, sizeof sa) < 0) {
    perror("tmk-bench-agent: receiver socket");
    return 1;
  }
  {
    struct timeval tv = {0, 100000};
    setsockopt(rx_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  getsockname(rx_fd, (struct sockaddr*)&sa, &sl);
  pthread_create(&rx, NULL, rx_main, NULL);

  memset(&d, 0, sizeof d);
  d.transport = TMK_TRANSPORT_UDP;
  d.relay_port = ntohs(sa.sin_port);
  d.program = "tmk-bench-agent";
  d.ring_bytes = 1u << 20;
  d.max_threads = 4;
  d.manual_pump = 1; /* the timed bursts run alone; tmk_agent_flush() drains between them */
  rc = tmk_agent_init(&d, arena, sizeof arena);
  if (rc < 0) {
    fprintf(stderr, "tmk-bench-agent: agent init: %s\n", tmk_strerror(rc));
    return 1;
  }
  for (r = 0; r < 3; r++) burst_zones(), tmk_agent_flush(); /* warm up */
  /* Interleave floor and zone bursts so both see the same machine state. */
  for (r = 0; r < ROUNDS; r++) {
    fl[r] = burst_floor();
    zn[r] = burst_zones();
    tmk_agent_flush(); /* drain outside the timed part */
  }
  {
    pthread_barrier_t go;
    pthread_t t[2];
    static two tw[2];
    pthread_barrier_init(&go, NULL, 3);
    for (i = 0; i < 2; i++) {
      tw[i].go = &go;
      pthread_create(&t[i], NULL, two_main, &tw[i]);
    }
    for (r = 0; r < ROUNDS; r++) {
      pthread_barrier_wait(&go);
      pthread_barrier_wait(&go);
      tmk_agent_flush();
    }
    for (i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&go);
    for (r = 0; r < ROUNDS; r++) z2[r] = tw[0].per[r], z2[ROUNDS + r] = tw[1].per[r];
  }
  tmk_agent_set_filter(TMK_SEV_INFO, 0xFFFFFFFFu); /* the DEBUG zone is filtered out */
  for (r = 0; r < ROUNDS; r++) fz[r] = burst_filtered();
  tmk_agent_flush();
  tmk_agent_get_stats(&st);
  tmk_agent_shutdown();
  for (i = 0; i < KEY_BLOCKS; i++) { /* unkeyed, keyed, unkeyed, ... */
    int keyed = i & 1, at = i / 2 * KEY_ROUNDS;
    if (key_block(&d, keyed, &kz[keyed][at], &kf[keyed][at]) < 0) {
      fprintf(stderr, "tmk-bench-agent: keyed agent init failed\n");
      return 1;
    }
  }
  rx_stop = 1;
  pthread_join(rx, NULL);
  close(rx_fd);
  floor_ns = median(fl, ROUNDS);
  zone_ns = median(zn, ROUNDS);
  zone2_ns = median(z2, 2 * ROUNDS);
  filtered_ns = median(fz, ROUNDS);
  if (st.drops[TMK_DROP_RING_FULL] != 0)
    fprintf(stderr, "tmk-bench-agent: warning: %llu zones dropped during timing\n",
            (unsigned long long)st.drops[TMK_DROP_RING_FULL]);

  /* The demo game's stream, encoded exactly as the agent sends it (callback = same packets):
   * as built (LZ4 when available), then without compression as on targets without liblz4. */
  if (demo_stream(demo_seconds, 0, &bpz, &st) < 0 || demo_stream(demo_seconds, 1, &bpz_raw, NULL) < 0)
    return 1;

  printf("RESULT floor_ns=%.2f\n", floor_ns);
  printf("RESULT zone_ns=%.2f\n", zone_ns);
  printf("RESULT zone_ns_2threads=%.2f\n", zone2_ns);
  printf("RESULT zone_ns_unkeyed_paired=%.2f\n", median(kz[0], KEY_BLOCKS / 2 * KEY_ROUNDS));
  printf("RESULT zone_ns_keyed=%.2f\n", median(kz[1], KEY_BLOCKS / 2 * KEY_ROUNDS));
  printf("RESULT flush_ns_per_zone=%.2f\n", median(kf[0], KEY_BLOCKS / 2 * KEY_ROUNDS));
  printf("RESULT flush_ns_per_zone_keyed=%.2f\n", median(kf[1], KEY_BLOCKS / 2 * KEY_ROUNDS));
  printf("RESULT zone_over_floor=%.3f\n", zone_ns / floor_ns);
  printf("RESULT filtered_ns=%.3f\n", filtered_ns);
  printf("RESULT bytes_per_zone=%.3f\n", bpz);
  printf("RESULT bytes_per_zone_uncompressed=%.3f\n", bpz_raw);
  printf("RESULT demo_zones=%llu\n", (unsigned long long)demo_zones);
  printf("RESULT demo_packets=%llu\n", (unsigned long long)demo_packets);
  printf("RESULT lz4=%d\n", st.lz4);
  printf("RESULT ticks_per_second=%llu\n", (unsigned long long)st.ticks_per_second);
  return 0;
}
