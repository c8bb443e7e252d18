/* bench_load.c — tmk-bench-load: the benchmark that cannot hide drops. Runs the relay library
 * in-process on loopback (its loop on a thread of its own, HTTP off, the default relay desc: a UDP
 * receive thread, decoding at nice 10), runs the agent with the default desc (every field 0) and
 * the arena docs/AGENT.md recommends for a desktop game (320 MB), and produces N zones (default
 * 10 M) as fast as one thread can, then N in game-like nested frames (20 zones a frame), and counts
 * what the relay stored. Prints RESULT delivered_ratio_tight / delivered_ratio_nested (zones in
 * the relay / zones recorded), zone_ns_loaded (CPU ns per zone of the instrumented thread, relay
 * connected, tight loop; zone_wall_ns_loaded is the same in wall time, which on a small shared
 * machine mostly says how often the thread was preempted by the flusher, the relay and everything
 * else), client_cpu_ns_per_zone (the whole process but the relay's two ingest threads: game loop,
 * flusher, sends), relay_cpu_ns_per_zone (the relay's receive and loop threads' CPU per stored
 * zone), nested_zone_ns_loaded (the instrumented thread's CPU ns per zone, nested loop),
 * flusher_cpu_ns_per_zone_tight / _nested (the agent's flusher thread, "tmk-flusher", from WELCOME
 * until every zone of the loop is sent or dropped, per zone recorded; Linux only: it is read from
 * /proc) and idle_zone_ns: what a zone adds to a loop iteration with desc.on_demand and nothing
 * listening (idle_reg_loop_ns, a loop of one register add with the zone, less no_zone_reg_loop_ns,
 * the same loop without it; idle_tight_loop_ns is the tight loop's iteration in that state,
 * volatile add included).
 * Optional argument: zones per mode. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "telemark.h"
#include "tmk_bench_loops.h"
#include "tmk_relay.h"

/* The arena docs/AGENT.md recommends for a desktop game that records in bursts: 16 rings of
 * 16 MB, each 10 ms of one thread recording flat out. Only the rings that fill are touched. */
static unsigned char arena[320u << 20];
static size_t arena_bytes = sizeof arena;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double self_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* CPU ns of the agent's flusher thread (the POSIX port names it "tmk-flusher" on Linux), from
 * /proc/self/task/TID/schedstat; -1 when there is no such thread. */
static double flusher_cpu_ns(void) {
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  double ns = -1;
  if (!d) return -1;
  while (ns < 0 && (e = readdir(d)) != NULL) {
    char path[300], comm[32] = "";
    FILE* f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    if (!(f = fopen(path, "r"))) continue;
    if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
    fclose(f);
    if (strcmp(comm, "tmk-flusher\n") != 0) continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
    if (!(f = fopen(path, "r"))) continue;
    unsigned long long run = 0;
    if (fscanf(f, "%llu", &run) == 1) ns = (double)run;
    fclose(f);
  }
  closedir(d);
  return ns;
}

/* ============================================================================================
 * The relay, in-process: the library on a thread of its own, read through its query API
 * ========================================================================================== */

typedef struct relay_thread {
  tmk_relay* relay;
  pthread_t th;
  int port;
} relay_thread;

static void* relay_main(void* arg) {
  tmk_relay_run(((relay_thread*)arg)->relay);
  return NULL;
}

/* The relay's ingest CPU: its UDP receive thread and its loop thread. */
static double relay_cpu_s(tmk_relay* r) {
  tmk_relay_totals t;
  tmk_relay_get_stats(r, &t);
  return (double)t.ingest_cpu_ns / 1e9;
}

static int relay_start(relay_thread* rt) {
  tmk_relay_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.listen_host = "127.0.0.1"; /* port 0: any free one; no HTTP server */
  desc.session_memory = (size_t)1 << 30;
  desc.log.fn = tmk_relay_log_to_file; /* warnings (a small receive buffer, say) on stderr */
  desc.log.level = TMK_RELAY_LOG_WARN;
  if (tmk_relay_create(&desc, &rt->relay) != 0) {
    fprintf(stderr, "tmk-bench-load: cannot start the relay\n");
    return -1;
  }
  rt->port = tmk_relay_listen_port(rt->relay);
  if (pthread_create(&rt->th, NULL, relay_main, rt) != 0) {
    tmk_relay_destroy(rt->relay);
    return -1;
  }
  return 0;
}

static void relay_end(relay_thread* rt) {
  tmk_relay_stop(rt->relay);
  pthread_join(rt->th, NULL);
  tmk_relay_destroy(rt->relay);
}

typedef struct sess {
  int found;
  uint64_t zones, packets, lost;
} sess;

static sess get_session(tmk_relay* r, uint64_t sid) {
  char id[32];
  tmk_relay_session_info info;
  sess out;
  memset(&out, 0, sizeof out);
  snprintf(id, sizeof id, "%016" PRIx64, sid);
  if (tmk_relay_session(r, id, &info) != 0) return out;
  out.found = 1;
  out.zones = info.stats.zones;
  out.packets = info.stats.packets;
  out.lost = info.stats.lost;
  return out;
}

/* Waits until the session's counters stop moving (BYE flushes the reorder window at once). */
static sess settle(tmk_relay* r, uint64_t sid) {
  sess prev, cur;
  int stable = 0, tries;
  memset(&prev, 0, sizeof prev);
  cur = prev;
  for (tries = 0; tries < 100 && stable < 3; tries++) {
    sleep_ms(100);
    cur = get_session(r, sid);
    stable = (cur.found && cur.zones == prev.zones && cur.lost == prev.lost) ? stable + 1 : 0;
    prev = cur;
  }
  return cur;
}

/* ============================================================================================
 * The instrumented loops
 * ========================================================================================== */

static void nested(uint64_t n) {
  uint64_t f;
  for (f = 0; f < n / 20; f++) {
    tmk_bench_game_frame(f);
    TMK_FRAME();
  }
}

typedef struct phase {
  const char* name;
  uint64_t recorded;
  double wall, thread_cpu, client_cpu, relay_cpu;
  double flusher_cpu; /* s, the flusher thread's from WELCOME until the loop's zones are all
                         accounted for (sent or dropped); < 0 when it was not found */
  tmk_agent_stats agent;
  sess relay;
} phase;

/* One agent session against the relay: init with the default desc, wait for WELCOME, run the
 * loop, shut down (which flushes and says BYE) and wait for the relay to settle. */
static int run_phase(relay_thread* rp, phase* ph, void (*loop)(uint64_t), uint64_t n) {
  tmk_agent_desc d;
  double c0, r0, t0, u0, f0, f1;
  int i, rc;
  memset(&d, 0, sizeof d);
  d.program = ph->name;
  d.relay_port = (uint16_t)rp->port;
  r0 = relay_cpu_s(rp->relay);
  c0 = self_cpu_s();
  rc = tmk_agent_init(&d, arena, arena_bytes);
  if (rc < 0) {
    fprintf(stderr, "tmk-bench-load: agent init: %s\n", tmk_strerror(rc));
    return -1;
  }
  for (i = 0; i < 300; i++) { /* measure with a receiver connected, not the first HELLO's trip */
    tmk_agent_get_stats(&ph->agent);
    if (ph->agent.welcomed) break;
    sleep_ms(10);
  }
  f0 = flusher_cpu_ns();
  u0 = thread_cpu_s();
  t0 = now_s();
  loop(n);
  ph->wall = now_s() - t0;
  ph->thread_cpu = thread_cpu_s() - u0;
  ph->recorded = loop == nested ? n / 20 * 20 : n;
  /* until the flusher has sent (or dropped) every zone the loop recorded: at most 10 s (the
     record drops; TMK_DROP_SEND_FAILED counts packets, whose zones are in zones_unsent) */
  for (i = 0; i < 1000; i++) {
    tmk_agent_get_stats(&ph->agent);
    if (ph->agent.zones_sent + ph->agent.zones_unsent + ph->agent.drops[TMK_DROP_RING_FULL] +
            ph->agent.drops[TMK_DROP_NO_THREAD] + ph->agent.drops[TMK_DROP_TOO_BIG] >=
        ph->recorded)
      break;
    sleep_ms(10);
  }
  f1 = flusher_cpu_ns();
  ph->flusher_cpu = f0 >= 0 && f1 >= f0 ? (f1 - f0) / 1e9 : -1;
  tmk_agent_shutdown();
  ph->relay = settle(rp->relay, ph->agent.session_id);
  ph->relay_cpu = relay_cpu_s(rp->relay) - r0;
  ph->client_cpu = self_cpu_s() - c0 - ph->relay_cpu; /* the process, less the relay's ingest */
  if (!ph->relay.found) {
    fprintf(stderr, "tmk-bench-load: the relay shows no session %016llx\n",
            (unsigned long long)ph->agent.session_id);
    return -1;
  }
  printf("bench-load: %-6s %llu zones in %.3f s (%.3f s on the thread's CPU, %.3f s on the "
         "flusher's): %llu stored "
         "(%.4f), agent dropped %llu (ring full), relay lost %llu of %llu packets; %u thread "
         "slots x %u-byte rings\n",
         ph->name, (unsigned long long)ph->recorded, ph->wall, ph->thread_cpu, ph->flusher_cpu,
         (unsigned long long)ph->relay.zones,
         (double)ph->relay.zones / (double)ph->recorded,
         (unsigned long long)ph->agent.drops[TMK_DROP_RING_FULL],
         (unsigned long long)ph->relay.lost,
         (unsigned long long)(ph->relay.packets + ph->relay.lost),
         (unsigned)ph->agent.max_threads, (unsigned)ph->agent.ring_bytes);
  return 0;
}

/* CPU ns per iteration of loop over n iterations, on this thread. */
static double loop_ns(void (*loop)(uint64_t), uint64_t n) {
  double t0 = thread_cpu_s();
  loop(n);
  return (thread_cpu_s() - t0) * 1e9 / (double)n;
}

static int dbl_cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* With nothing listening (desc.on_demand, a port nobody listens on): CPU ns per iteration of
 * the register-add loop with a zone (*zone_loop) and without one (*bare_loop), medians of 5 runs
 * of each, alternated, and of the tight loop (*tight_loop, one run: the figure earlier versions
 * of this benchmark printed as idle_zone_ns, mostly the tight loop's own volatile add). The
 * loops are called through volatile pointers, so that none is inlined here. */
static int idle_ns(uint64_t n, double* zone_loop, double* bare_loop, double* tight_loop) {
  static void (*volatile with_zone)(uint64_t) = tmk_bench_reg_zone;
  static void (*volatile without)(uint64_t) = tmk_bench_reg_bare;
  static void (*volatile tight)(uint64_t) = tmk_bench_tight;
  tmk_agent_desc d;
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  double a[5], b[5];
  int fd = socket(AF_INET, SOCK_DGRAM, 0), rc, i;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  /* a port nobody listens on: bind one, note it, close it */
  if (fd < 0 || bind(fd, (struct sockaddr*)&sa, sizeof sa) != 0 ||
      getsockname(fd, (struct sockaddr*)&sa, &sl) != 0)
    return -1;
  close(fd);
  memset(&d, 0, sizeof d);
  d.program = "idle";
  d.on_demand = 1;
  d.relay_port = ntohs(sa.sin_port);
  rc = tmk_agent_init(&d, arena, arena_bytes);
  if (rc < 0) {
    fprintf(stderr, "tmk-bench-load: agent init: %s\n", tmk_strerror(rc));
    return -1;
  }
  with_zone(n / 10); /* warm */
  without(n / 10);
  for (i = 0; i < 5; i++) {
    a[i] = loop_ns(with_zone, n / 5);
    b[i] = loop_ns(without, n / 5);
  }
  tight(n / 10);
  *tight_loop = loop_ns(tight, n);
  tmk_agent_shutdown();
  qsort(a, 5, sizeof a[0], dbl_cmp);
  qsort(b, 5, sizeof b[0], dbl_cmp);
  *zone_loop = a[2];
  *bare_loop = b[2];
  return 0;
}

int main(int argc, char** argv) {
  uint64_t n = 10000000;
  relay_thread rp;
  phase pt, pn;
  double idle_loop = 0, bare_loop = 0, idle_tight = 0, stored;
  int rc = 0;
  if (argc > 1) n = strtoull(argv[1], NULL, 10);
  if (n < 20) n = 20;
  if (relay_start(&rp) != 0) return 1;
  memset(&pt, 0, sizeof pt);
  memset(&pn, 0, sizeof pn);
  pt.name = "tight";
  pn.name = "nested";
  if (run_phase(&rp, &pt, tmk_bench_tight, n) != 0 || run_phase(&rp, &pn, nested, n) != 0) rc = 1;
  {
    tmk_relay_totals t;
    tmk_relay_get_stats(rp.relay, &t);
    printf("bench-load: the relay's UDP receive queue held at most %.1f MiB; %llu datagrams "
           "dropped by it\n", (double)t.udp_queue_peak / 1048576.0,
           (unsigned long long)t.udp_queue_drops);
  }
  relay_end(&rp);
  if (rc) return rc;
  if (idle_ns(n, &idle_loop, &bare_loop, &idle_tight) != 0) return 1;
  stored = (double)(pt.relay.zones + pn.relay.zones);
  printf("RESULT delivered_ratio_tight=%.4f\n", (double)pt.relay.zones / (double)pt.recorded);
  printf("RESULT delivered_ratio_nested=%.4f\n", (double)pn.relay.zones / (double)pn.recorded);
  printf("RESULT zone_ns_loaded=%.2f\n", pt.thread_cpu * 1e9 / (double)pt.recorded);
  printf("RESULT zone_wall_ns_loaded=%.2f\n", pt.wall * 1e9 / (double)pt.recorded);
  if (pt.flusher_cpu >= 0 && pn.flusher_cpu >= 0) {
    printf("RESULT nested_zone_ns_loaded=%.2f\n", pn.thread_cpu * 1e9 / (double)pn.recorded);
    printf("RESULT flusher_cpu_ns_per_zone_tight=%.2f\n",
           pt.flusher_cpu * 1e9 / (double)pt.recorded);
    printf("RESULT flusher_cpu_ns_per_zone_nested=%.2f\n",
           pn.flusher_cpu * 1e9 / (double)pn.recorded);
  }
  printf("RESULT client_cpu_ns_per_zone=%.2f\n",
         (pt.client_cpu + pn.client_cpu) * 1e9 / (double)(pt.recorded + pn.recorded));
  printf("RESULT relay_cpu_ns_per_zone=%.2f\n",
         stored > 0 ? (pt.relay_cpu + pn.relay_cpu) * 1e9 / stored : 0.0);
  printf("RESULT idle_zone_ns=%.2f\n", idle_loop - bare_loop);
  printf("RESULT idle_reg_loop_ns=%.2f\n", idle_loop);
  printf("RESULT no_zone_reg_loop_ns=%.2f\n", bare_loop);
  printf("RESULT idle_tight_loop_ns=%.2f\n", idle_tight);
  return stored > 0 ? 0 : 1;
}
