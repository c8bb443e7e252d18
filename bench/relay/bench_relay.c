/* bench_relay.c — tmk-bench-relay: runs the relay library in-process (tmk_relay_create on
 * loopback, HTTP off) and feeds it from 8 synthetic targets (threads sending pre-encoded packets
 * of bench/common's game-like stream over UDP); counters come from the relay's query API. Prints
 * RESULT zones_per_loop_cpu_s (zones decoded and stored per CPU second of the relay's loop
 * thread, saturated), zones_per_ingest_cpu_s (the same per CPU second of the loop and the UDP
 * receive thread together: all the relay spends on ingest), loss_ratio (packets lost at 5 M zones/s from 8
 * targets) and bytes_per_stored_zone (relay store memory). Then the saturated phase again on fresh
 * relays, alternating unkeyed and keyed (--key, PROTOCOL.md §2.1: every packet carries a MAC the
 * relay checks) three times each: zones_per_loop_cpu_s_keyed and, from the same alternation,
 * zones_per_loop_cpu_s_unkeyed_paired, keyed_over_unkeyed and zones_per_ingest_cpu_s_warm
 * (medians). "Warm": those relays are new, but the process's earlier relays have touched and
 * freed the memory they get, as a long-running relay's store reuses what it evicts; the first
 * phase's relay takes memory the process never touched, and on a VM whose host takes back the
 * guest's free memory (free page reporting) each first touch costs the host a fault too, unless
 * the kernel still has free memory it has not reported (the relay then gets 4 KiB pages from
 * it: docs/AGENT.md "Which pages"; the run prints how much fresh memory went on huge pages).
 * (Each of those relays is freed before the next is made, so the process's pool of freed memory
 * goes back to the kernel in between: docs/API.md "populated".)
 * zones_per_ingest_cpu_s_excl_page_population is the first phase's figure without the CPU time
 * its threads spent populating fresh memory (tmk_relay_totals.populate_cpu_ns): what the same
 * work costs where fresh pages are cheap. Last, zones_per_ingest_cpu_s_later_burst: one relay
 * takes the first phase's load, and then the same load again under new session ids, whose
 * sessions evict the first burst's idle ones; the second burst's zones per CPU second of the loop
 * and the receive thread: what a relay that has been running spends on a burst. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tmk_gamestream.h"
#include "tmk_proto.h"
#include "tmk_relay.h"

#define TARGETS 8
#define PACKET 1200
#define SLOT (PACKET + TMK_PROTO_MAC_LEN) /* room for a packet and its MAC */
#define ROUNDS 10 /* flat-out phase: each target replays its packets under ROUNDS session ids */
#define KEYED_PAIRS 3

static const uint8_t bench_key[16] = {0x6b, 0x65, 0x79, 0x2d, 0x62, 0x65, 0x6e, 0x63,
                                      0x68, 0x2d, 0x72, 0x65, 0x6c, 0x61, 0x79, 0x31};

typedef struct packets {
  uint8_t* data; /* SLOT bytes per slot */
  uint16_t* len;
  size_t n;
  uint64_t zones;
  int keyed; /* each packet ends with a MAC by bench_key */
} packets;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Puts one record; 1 when it went in, 0 when the packet is full, exits on any other error. */
static int fits(int rc) {
  if (rc == TMK_ENOSPC) return 0;
  if (rc < 0) {
    fprintf(stderr, "bench-relay: encoding failed: %s\n", tmk_strerror(rc));
    exit(1);
  }
  return 1;
}

static void put_descriptors(tmk_proto_writer* w) {
  size_t n;
  const tmk_proto_site* sites = tmk_gs_sites(&n);
  for (size_t i = 0; i < n; i++) fits(tmk_proto_put_site(w, &sites[i]));
  for (uint32_t t = 0; t < TMK_GS_THREADS; t++) {
    const char* name = tmk_gs_thread_name(t);
    fits(tmk_proto_put_thread_name(w, t, name, strlen(name)));
  }
  for (uint32_t b = 0; tmk_gs_team_name(b); b++)
    fits(tmk_proto_put_team(w, b, tmk_gs_team_name(b), strlen(tmk_gs_team_name(b))));
}

static int put_event(tmk_proto_writer* w, const tmk_gs_event* e) {
  switch (e->kind) {
    case TMK_GS_FRAME: return fits(tmk_proto_put_frame(w, e->site, e->time));
    case TMK_GS_PLOT_I: return fits(tmk_proto_put_plot_i(w, e->site, e->time, e->i));
    case TMK_GS_PLOT_D: return fits(tmk_proto_put_plot_d(w, e->site, e->time, e->d));
    default:
      return fits(tmk_proto_put_message(w, e->site, e->severity, e->verbosity, e->time, e->text,
                                        e->text_len));
  }
}

/* One target: the game-like stream of bench/common (seeded per target), packed into npackets
 * DATA packets of at most PACKET bytes; descriptors are repeated every 200 packets. */
static int build_target(packets* pk, uint64_t sid, size_t npackets, uint64_t seed, int keyed) {
  pk->keyed = keyed;
  pk->data = malloc(npackets * SLOT);
  pk->len = malloc(npackets * sizeof *pk->len);
  tmk_gamestream* g = tmk_gs_create(seed);
  if (!pk->data || !pk->len || !g) return -1;
  void* lz4 = NULL;
  size_t ls = tmk_proto_lz4_state_size();
  if (ls && posix_memalign(&lz4, 16, ls) != 0) lz4 = NULL;
  static uint8_t body[PACKET - TMK_PROTO_MAX_HEADER];
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, body, sizeof body);
  const tmk_gs_frame* fr = tmk_gs_next_frame(g);
  uint32_t t = 0;              /* batch (thread) of fr being packed */
  size_t zpos = 0, epos = 0;   /* zones and events of that batch already packed */
  pk->n = 0;
  pk->zones = 0;
  while (pk->n < npackets) {
    tmk_proto_writer_reset(&w);
    if (pk->n % 200 == 0) put_descriptors(&w);
    int full = 0;
    while (!full) {
      const tmk_gs_batch* b = &fr->batch[t];
      if (!fits(tmk_proto_put_thread(&w, b->thread))) break;
      int put = tmk_proto_put_zones(&w, b->zones + zpos, b->nzones - zpos);
      if (put < 0) return -1;
      zpos += (size_t)put;
      pk->zones += (uint64_t)put;
      if (zpos < b->nzones) break; /* packet full */
      while (epos < b->nevents && put_event(&w, &b->events[epos])) epos++;
      if (epos < b->nevents) break;
      zpos = epos = 0;
      if (++t == TMK_GS_THREADS) {
        t = 0;
        fr = tmk_gs_next_frame(g);
      }
    }
    int n = tmk_proto_finish(&w, sid, pk->n, pk->data + pk->n * SLOT, PACKET, lz4);
    if (n > 0 && keyed) n = tmk_proto_mac_seal(pk->data + pk->n * SLOT, (size_t)n, SLOT, bench_key);
    if (n < 0) return -1;
    pk->len[pk->n] = (uint16_t)n;
    pk->n++;
  }
  free(lz4);
  tmk_gs_destroy(g);
  return 0;
}

typedef struct sender {
  pthread_t th;
  packets* pk;
  int port;
  double pps; /* 0 = flat out */
  int rounds;
  uint64_t sid0; /* round r sends as session sid0 + r * TARGETS */
  double elapsed;
} sender;

static void set_sid(uint8_t* packet, uint64_t sid) { /* header bytes 6..13, little-endian */
  for (int b = 0; b < 8; b++) packet[6 + b] = (uint8_t)(sid >> (8 * b));
}

/* A keyed packet whose session id changed needs its MAC again (the senders' cost, not the relay's). */
static void reseal(uint8_t* packet, size_t len) {
  uint64_t tag = tmk_proto_siphash(bench_key, packet, len - TMK_PROTO_MAC_LEN);
  for (int b = 0; b < TMK_PROTO_MAC_LEN; b++)
    packet[len - TMK_PROTO_MAC_LEN + (size_t)b] = (uint8_t)(tag >> (8 * b));
}

static void* send_main(void* arg) {
  sender* s = arg;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in to;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  to.sin_port = htons((uint16_t)s->port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect(fd, (struct sockaddr*)&to, sizeof to);
  double t0 = now_s();
  size_t sent = 0;
  for (int round = 0; round < s->rounds; round++)
  for (size_t i = 0; i < s->pk->n; i++, sent++) {
    if (s->rounds > 1) {
      set_sid(s->pk->data + i * SLOT, s->sid0 + (uint64_t)round * TARGETS);
      if (s->pk->keyed) reseal(s->pk->data + i * SLOT, s->pk->len[i]);
    }
    while (send(fd, s->pk->data + i * SLOT, s->pk->len[i], 0) < 0 &&
           (errno == ENOBUFS || errno == EAGAIN || errno == EINTR)) {
    }
    if (s->pps > 0 && (sent & 7) == 7) {
      double due = t0 + (double)(sent + 1) / s->pps;
      double now = now_s();
      if (due > now) {
        struct timespec ts = {0, (long)((due - now) * 1e9)};
        nanosleep(&ts, NULL);
      }
    }
  }
  s->elapsed = now_s() - t0;
  close(fd);
  return NULL;
}

/* ---- the relay's counters, through its query API -------------------------------------------- */
typedef struct sess_stats {
  uint64_t zones, packets, lost, mem, orphans;
} sess_stats;

static int get_stats(tmk_relay* r, uint64_t sid, sess_stats* st) {
  char id[32];
  snprintf(id, sizeof id, "%016" PRIx64, sid);
  tmk_relay_session_info info;
  if (tmk_relay_session(r, id, &info) != 0) return -1;
  st->zones = info.stats.zones;
  st->packets = info.stats.packets;
  st->lost = info.stats.lost;
  st->mem = info.stats.mem_bytes;
  st->orphans = info.stats.orphans;
  return 0;
}

/* CPU seconds of one thread (the relay's loop): what the relay itself spent, not the senders,
 * not this thread's polling. */
static double thread_cpu_s(pthread_t th) {
  clockid_t cid;
  struct timespec ts;
  if (pthread_getcpuclockid(th, &cid) != 0 || clock_gettime(cid, &ts) != 0) return 0;
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


/* Runs one phase: 8 senders, waits until the relay has accounted for every packet. */
/* CPU seconds of the relay's UDP receive thread. */
static double rx_cpu_s(tmk_relay* r) {
  tmk_relay_totals t;
  tmk_relay_get_stats(r, &t);
  return (double)t.rx_cpu_ns / 1e9;
}

static int run_phase(tmk_relay* r, pthread_t loop, packets* pk, const uint64_t* sids,
                     int rounds, double pps, double* cpu, double* rx_cpu, sess_stats* total,
                     double* wall) {
  int port = tmk_relay_listen_port(r);
  sender s[TARGETS];
  double c0 = thread_cpu_s(loop), x0 = rx_cpu_s(r), t0 = now_s();
  for (int i = 0; i < TARGETS; i++) {
    s[i].pk = &pk[i];
    s[i].port = port;
    s[i].pps = pps;
    s[i].rounds = rounds;
    s[i].sid0 = sids[i];
    pthread_create(&s[i].th, NULL, send_main, &s[i]);
  }
  for (int i = 0; i < TARGETS; i++) pthread_join(s[i].th, NULL);
  *wall = now_s() - t0;
  /* the relay is done when the counters stop moving (the last gaps need its 100 ms window) */
  sess_stats prev;
  memset(&prev, 0, sizeof prev);
  for (int stable = 0, tries = 0; stable < 3 && tries < 200; tries++) {
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    memset(total, 0, sizeof *total);
    for (int i = 0; i < TARGETS * rounds; i++) {
      sess_stats st;
      memset(&st, 0, sizeof st);
      get_stats(r, sids[i % TARGETS] + (uint64_t)(i / TARGETS) * TARGETS, &st);
      total->zones += st.zones;
      total->packets += st.packets;
      total->lost += st.lost;
      total->mem += st.mem;
      total->orphans += st.orphans;
    }
    stable = (total->zones == prev.zones && total->lost == prev.lost) ? stable + 1 : 0;
    prev = *total;
  }
  *cpu = thread_cpu_s(loop) - c0;
  if (rx_cpu) *rx_cpu = rx_cpu_s(r) - x0;
  return 0;
}

/* The bench itself, on its own thread: both phases, then stops the relay. */
typedef struct driver {
  tmk_relay* relay;
  pthread_t loop;
  packets *p1, *p2;
  const uint64_t *s1, *s2;
  double zones_per_packet, pps5m;
  double cpu1, rx1, wall1, cpu2, wall2;
  double pop1; /* CPU seconds of phase 1 spent faulting in fresh memory (in cpu1 + rx1) */
  sess_stats t1, t2;
} driver;

/* One saturated phase (as phase 1) on a relay of its own, keyed or not; the relay is freed
 * after it, so the alternation does not pile up stored zones. Returns zones per loop CPU s. */
typedef struct one_phase {
  tmk_relay* relay;
  pthread_t loop;
  packets* pk;
  const uint64_t* sids;
  double pps, cpu, rx, wall;
  sess_stats t;
} one_phase;

/* Creates a relay from desc into *slot and runs its loop on this thread while drive(arg) runs on
 * another (drive stops the relay when it is done). Returns the relay, stopped, not yet freed; NULL
 * when it could not start. */
static tmk_relay* run_relay(const tmk_relay_desc* desc, void* (*drive)(void*), void* arg,
                            tmk_relay** slot) {
  pthread_t th;
  if (tmk_relay_create(desc, slot) != 0) return NULL;
  if (pthread_create(&th, NULL, drive, arg) != 0) {
    tmk_relay_destroy(*slot);
    return NULL;
  }
  tmk_relay_run(*slot);
  pthread_join(th, NULL);
  return *slot;
}

static void* drive_one(void* arg) {
  one_phase* o = arg;
  run_phase(o->relay, o->loop, o->pk, o->sids, ROUNDS, o->pps, &o->cpu, &o->rx, &o->t, &o->wall);
  tmk_relay_stop(o->relay);
  return NULL;
}

static double saturated(packets* pk, const uint64_t* sids, double pps, int keyed,
                        double* per_ingest_cpu /* or NULL */) {
  tmk_relay_key key;
  tmk_relay_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.listen_host = "127.0.0.1";
  desc.session_memory = (size_t)1 << 30;
  desc.max_sessions = 256;
  if (keyed) { /* the packets carry no HELLO: their sessions are keyed by their first DATA */
    memset(&key, 0, sizeof key);
    snprintf(key.program, sizeof key.program, "tmk-bench-relay");
    memcpy(key.key, bench_key, 16);
    desc.keys = &key;
    desc.nkeys = 1;
  }
  one_phase o;
  memset(&o, 0, sizeof o);
  o.pk = pk, o.sids = sids, o.pps = pps, o.loop = pthread_self();
  if (!run_relay(&desc, drive_one, &o, &o.relay)) return 0;
  tmk_relay_totals tot;
  tmk_relay_get_stats(o.relay, &tot);
  if (tot.unauthenticated + tot.bad_mac)
    fprintf(stderr, "bench-relay: %llu packets refused in a %s phase\n",
            (unsigned long long)(tot.unauthenticated + tot.bad_mac), keyed ? "keyed" : "plain");
  tmk_relay_destroy(o.relay);
  if (per_ingest_cpu) *per_ingest_cpu = o.cpu + o.rx > 0 ? (double)o.t.zones / (o.cpu + o.rx) : 0.0;
  return o.cpu > 0 ? (double)o.t.zones / o.cpu : 0.0;
}

/* A running relay's later burst: one relay takes phase 1's load (ROUNDS sessions per target),
 * its sessions go idle (session_idle_ms 200), and the same load comes again under new session
 * ids. max_sessions is two bursts' worth, so that each source may hold one burst's sessions
 * (half of it): each new session evicts an idle one of the first burst, as a relay that has
 * been running a while makes room for new sessions, and the store of the evicted session gives
 * its memory back for the next (docs/API.md, "populated"). Returns the second burst's zones per
 * CPU second of the loop and the receive thread together; 0 on failure. */
typedef struct later {
  one_phase p;             /* the second burst's figures */
  const uint64_t* sids2;   /* its session ids */
} later;

static void* drive_later(void* arg) {
  later* l = arg;
  one_phase* o = &l->p;
  double cpu, rx, wall;
  sess_stats t;
  run_phase(o->relay, o->loop, o->pk, o->sids, ROUNDS, o->pps, &cpu, &rx, &t, &wall);
  struct timespec idle = {0, 300000000}; /* past session_idle_ms: the sessions are not live */
  nanosleep(&idle, NULL);
  run_phase(o->relay, o->loop, o->pk, l->sids2, ROUNDS, o->pps, &o->cpu, &o->rx, &o->t, &o->wall);
  tmk_relay_stop(o->relay);
  return NULL;
}

static double later_burst(packets* pk, const uint64_t* sids, const uint64_t* sids2, double pps) {
  tmk_relay_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.listen_host = "127.0.0.1";
  desc.session_memory = (size_t)1 << 30;
  desc.max_sessions = 2 * TARGETS * ROUNDS;
  desc.session_idle_ms = 200;
  later l;
  memset(&l, 0, sizeof l);
  one_phase* const o = &l.p;
  o->pk = pk, o->sids = sids, l.sids2 = sids2, o->pps = pps, o->loop = pthread_self();
  if (!run_relay(&desc, drive_later, &l, &o->relay)) return 0;
  tmk_relay_totals tot;
  tmk_relay_get_stats(o->relay, &tot);
  printf("bench-relay: a later burst on a running relay: %llu zones stored, loop cpu %.2f s, "
         "receive thread cpu %.2f s; %.0f MiB of freed memory reused so far, %llu sessions "
         "refused\n",
         (unsigned long long)o->t.zones, o->cpu, o->rx, (double)tot.pool_reused_bytes / 1048576.0,
         (unsigned long long)tot.rejected_sessions);
  tmk_relay_destroy(o->relay);
  return o->cpu + o->rx > 0 ? (double)o->t.zones / (o->cpu + o->rx) : 0.0;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* CPU seconds the process's relays have spent faulting in fresh memory ahead of use. */
static double populate_cpu_s(tmk_relay* r) {
  tmk_relay_totals t;
  tmk_relay_get_stats(r, &t);
  return (double)t.populate_cpu_ns / 1e9;
}

/* What the process has populated so far, and how much of it on 2 MiB pages (the relay picks the
 * kind that costs less to populate: docs/API.md "populated"). */
static void print_page_kinds(tmk_relay* r, const char* when) {
  tmk_relay_totals t;
  tmk_relay_get_stats(r, &t);
  printf("bench-relay: %s: %.0f MB of fresh memory populated in %.2f s of CPU, %.0f MB of it on "
         "huge pages\n",
         when, (double)t.populated_bytes / 1e6, (double)t.populate_cpu_ns / 1e9,
         (double)t.populated_huge_bytes / 1e6);
}

static void* drive(void* arg) {
  driver* d = arg;
  /* Phase 1 offers 40 M zones/s, beyond what one relay core can take, so the relay is busy all
   * the time; paced senders leave the relay a core of its own on a small machine, which
   * flat-out senders would not. zones_per_loop_cpu_s = zones stored / loop CPU seconds. */
  double pps40m = 40e6 / TARGETS / d->zones_per_packet;
  d->pop1 = populate_cpu_s(d->relay);
  run_phase(d->relay, d->loop, d->p1, d->s1, ROUNDS, pps40m, &d->cpu1, &d->rx1, &d->t1,
            &d->wall1);
  d->pop1 = populate_cpu_s(d->relay) - d->pop1;
  print_page_kinds(d->relay, "after the saturated phase");
  d->pps5m = 5e6 / TARGETS / d->zones_per_packet;
  run_phase(d->relay, d->loop, d->p2, d->s2, 1, d->pps5m, &d->cpu2, NULL, &d->t2, &d->wall2);
  tmk_relay_stop(d->relay);
  return NULL;
}

int main(int argc, char** argv) {
  (void)argc;
  /* pre-encode both phases before the relay starts */
  size_t np1 = 2500, np2 = 4000; /* phase 1 sends np1 * ROUNDS packets per target */
  static packets p1[TARGETS], p2[TARGETS], p3[TARGETS];
  uint64_t s1[TARGETS], s2[TARGETS], z1 = 0, z2 = 0, b2 = 0;
  for (int i = 0; i < TARGETS; i++) {
    s1[i] = 0xB100000000000000ull + (uint64_t)i;
    s2[i] = 0xB200000000000000ull + (uint64_t)i;
    if (build_target(&p1[i], s1[i], np1, 1000u + (uint64_t)i, 0) ||
        build_target(&p2[i], s2[i], np2, 2000u + (uint64_t)i, 0) ||
        build_target(&p3[i], s1[i], np1, 1000u + (uint64_t)i, 1)) {
      fprintf(stderr, "%s: encoding failed\n", argv[0]);
      return 1;
    }
    z1 += p1[i].zones * ROUNDS;
    z2 += p2[i].zones;
    for (size_t k = 0; k < p2[i].n; k++) b2 += p2[i].len[k];
  }
  double zones_per_packet = (double)z2 / (double)(TARGETS * np2);

  tmk_relay_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.listen_host = "127.0.0.1"; /* port 0: any free one */
  desc.session_memory = (size_t)1 << 30;
  desc.max_sessions = 256;
  driver d;
  memset(&d, 0, sizeof d);
  d.p1 = p1, d.p2 = p2, d.s1 = s1, d.s2 = s2, d.zones_per_packet = zones_per_packet;
  d.loop = pthread_self(); /* the relay's loop runs here, on the main thread, as in telemark-relay */
  if (!run_relay(&desc, drive, &d, &d.relay)) {
    fprintf(stderr, "%s: cannot start the relay\n", argv[0]);
    return 1;
  }
  tmk_relay_destroy(d.relay);

  printf("bench-relay: %d targets over loopback UDP, %.0f zones/packet, %.2f wire bytes/zone\n",
         TARGETS, zones_per_packet, (double)b2 / (double)z2);
  printf("bench-relay: offered 40 M zones/s: %llu of %llu zones stored (%llu packets lost, "
         "%llu zones dropped with a lost parent) in %.2f s wall, relay loop cpu %.2f s, "
         "receive thread cpu %.2f s (of both, %.2f s populating fresh memory)\n",
         (unsigned long long)d.t1.zones, (unsigned long long)z1, (unsigned long long)d.t1.lost,
         (unsigned long long)d.t1.orphans, d.wall1, d.cpu1, d.rx1, d.pop1);
  printf("bench-relay: paced at 5 M zones/s (%.0f packets/s per target): %llu of %llu zones in "
         "%.2f s (relay loop cpu %.2f s), %llu of %llu packets lost\n",
         d.pps5m, (unsigned long long)d.t2.zones, (unsigned long long)z2, d.wall2, d.cpu2,
         (unsigned long long)d.t2.lost, (unsigned long long)(TARGETS * np2));
  printf("RESULT zones_per_loop_cpu_s=%.0f\n", d.cpu1 > 0 ? (double)d.t1.zones / d.cpu1 : 0.0);
  printf("RESULT zones_per_ingest_cpu_s=%.0f\n",
         d.cpu1 + d.rx1 > 0 ? (double)d.t1.zones / (d.cpu1 + d.rx1) : 0.0);
  printf("RESULT zones_per_ingest_cpu_s_excl_page_population=%.0f\n",
         d.cpu1 + d.rx1 - d.pop1 > 0 ? (double)d.t1.zones / (d.cpu1 + d.rx1 - d.pop1) : 0.0);
  printf("RESULT loss_ratio=%.6f\n",
         (double)(TARGETS * np2 - d.t2.packets) / (double)(TARGETS * np2));
  printf("RESULT bytes_per_stored_zone=%.2f\n",
         d.t2.zones ? (double)d.t2.mem / (double)d.t2.zones : 0.0);
  fflush(stdout);

  /* keyed against unkeyed, alternating on fresh relays: the same packets, sealed or not */
  double plain[KEYED_PAIRS], keyed[KEYED_PAIRS], ratio[KEYED_PAIRS], warm[KEYED_PAIRS];
  for (int k = 0; k < KEYED_PAIRS; k++) {
    plain[k] = saturated(p1, s1, 40e6 / TARGETS / zones_per_packet, 0, &warm[k]);
    keyed[k] = saturated(p3, s1, 40e6 / TARGETS / zones_per_packet, 1, NULL);
    ratio[k] = plain[k] > 0 ? keyed[k] / plain[k] : 0;
    printf("bench-relay: saturated pair %d: unkeyed %.0f, keyed %.0f zones per loop cpu s\n", k,
           plain[k], keyed[k]);
  }
  qsort(plain, KEYED_PAIRS, sizeof plain[0], cmp_double);
  qsort(keyed, KEYED_PAIRS, sizeof keyed[0], cmp_double);
  qsort(ratio, KEYED_PAIRS, sizeof ratio[0], cmp_double);
  qsort(warm, KEYED_PAIRS, sizeof warm[0], cmp_double);
  printf("RESULT zones_per_ingest_cpu_s_warm=%.0f\n", warm[KEYED_PAIRS / 2]);
  printf("RESULT zones_per_loop_cpu_s_unkeyed_paired=%.0f\n", plain[KEYED_PAIRS / 2]);
  printf("RESULT zones_per_loop_cpu_s_keyed=%.0f\n", keyed[KEYED_PAIRS / 2]);
  printf("RESULT keyed_over_unkeyed=%.3f\n", ratio[KEYED_PAIRS / 2]);
  fflush(stdout);
  uint64_t s1b[TARGETS];
  for (int i = 0; i < TARGETS; i++) s1b[i] = s1[i] + 0x0001000000000000ull;
  printf("RESULT zones_per_ingest_cpu_s_later_burst=%.0f\n",
         later_burst(p1, s1, s1b, 40e6 / TARGETS / zones_per_packet));
  for (int i = 0; i < TARGETS; i++) {
    free(p1[i].data);
    free(p1[i].len);
    free(p2[i].data);
    free(p2[i].len);
    free(p3[i].data);
    free(p3[i].len);
  }
  return 0;
}
