/* bench_load.c — tmk-bench-load: the benchmark that cannot hide drops. Starts
 * build/bin/telemark-relay on loopback, runs the agent with the default desc (every field 0) and
 * the arena docs/AGENT.md recommends for a desktop game (320 MB), and produces N zones (default 10 M) as fast as one thread can, then N in
 * game-like nested frames (20 zones a frame), and counts what the relay stored. Prints
 * RESULT delivered_ratio_tight / delivered_ratio_nested (zones in the relay / zones recorded),
 * zone_ns_loaded (CPU ns per zone of the instrumented thread, relay connected, tight loop;
 * zone_wall_ns_loaded is the same in wall time, which on a small shared machine mostly says
 * how often the thread was preempted by the flusher, the relay and everything else),
 * client_cpu_ns_per_zone (whole process: game loop, flusher, sends), relay_cpu_ns_per_zone (relay
 * process CPU per stored zone) and idle_zone_ns (desc.on_demand, nothing listening).
 * Optional argument: zones per mode. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "telemark.h"

extern char** environ;

/* The arena docs/AGENT.md recommends for a desktop game that records in bursts: 16 rings of
 * 16 MB, each 10 ms of one thread recording flat out. Only the rings that fill are touched. */
static unsigned char arena[320u << 20];
static size_t arena_bytes = sizeof arena;
static volatile uint64_t sink;

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

/* ============================================================================================
 * The relay process and its JSON API
 * ========================================================================================== */

static double proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  unsigned long ut = 0, st = 0;
  const char* p;
  size_t n;
  FILE* f;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  f = fopen(path, "r");
  if (!f) return 0;
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  p = strrchr(buf, ')');
  if (!p) return 0;
  /* fields after ")": state(3) ... utime(14) stime(15) */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return 0;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int http_get(int port, const char* path, char* out, size_t cap) {
  struct sockaddr_in to;
  char req[256];
  size_t len = 0;
  ssize_t r;
  int n, fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  to.sin_port = htons((uint16_t)port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr*)&to, sizeof to) != 0) {
    close(fd);
    return -1;
  }
  n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  while (len < cap - 1 && (r = read(fd, out + len, cap - 1 - len)) > 0) len += (size_t)r;
  out[len] = 0;
  close(fd);
  return strstr(out, " 200 ") ? 0 : -1;
}

static uint64_t json_num(const char* js, const char* key) {
  char k[64];
  const char* p;
  snprintf(k, sizeof k, "\"%s\":", key);
  p = strstr(js, k);
  if (!p) return 0;
  p += strlen(k);
  while (*p == ' ') p++;
  return strtoull(p, NULL, 10);
}

typedef struct sess {
  int found;
  uint64_t zones, packets, lost, dropped_by_agent, malformed, evicted;
} sess;

static sess get_session(int http, uint64_t sid) {
  char path[64], buf[16384];
  const char* s;
  sess out;
  memset(&out, 0, sizeof out);
  snprintf(path, sizeof path, "/api/sessions/%016llx", (unsigned long long)sid);
  if (http_get(http, path, buf, sizeof buf) != 0) return out;
  s = strstr(buf, "\"stats\":");
  if (!s) return out;
  out.found = 1;
  out.zones = json_num(s, "zones");
  out.packets = json_num(s, "packets");
  out.lost = json_num(s, "lost");
  out.dropped_by_agent = json_num(s, "dropped_by_agent");
  out.malformed = json_num(s, "malformed");
  out.evicted = json_num(s, "evicted");
  return out;
}

/* Waits until the session's counters stop moving (BYE flushes the reorder window at once). */
static sess settle(int http, uint64_t sid) {
  sess prev, cur;
  int stable = 0, tries;
  memset(&prev, 0, sizeof prev);
  cur = prev;
  for (tries = 0; tries < 100 && stable < 3; tries++) {
    sleep_ms(100);
    cur = get_session(http, sid);
    stable = (cur.found && cur.zones == prev.zones && cur.lost == prev.lost) ? stable + 1 : 0;
    prev = cur;
  }
  return cur;
}

typedef struct relay_proc {
  pid_t pid;
  int port, http;
  char dir[64];
  char log[128];
} relay_proc;

static int relay_start(relay_proc* rp) {
  char exe[1024], datadir[128], line[512];
  posix_spawn_file_actions_t fa;
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
  char* slash;
  int i;
  if (n <= 0) return -1;
  exe[n] = 0;
  slash = strrchr(exe, '/');
  strcpy(slash + 1, "telemark-relay");
  strcpy(rp->dir, "/tmp/tmk-bench-load-XXXXXX");
  if (!mkdtemp(rp->dir)) return -1;
  snprintf(rp->log, sizeof rp->log, "%s/relay.log", rp->dir);
  snprintf(datadir, sizeof datadir, "%s/data", rp->dir);
  {
    char* args[] = {exe, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir",
                    datadir, NULL};
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", 0x1 /* O_WRONLY */, 0);
    posix_spawn_file_actions_addopen(&fa, 2, rp->log, 0x241 /* O_WRONLY|O_CREAT|O_TRUNC */,
                                     0644);
    if (posix_spawn(&rp->pid, exe, &fa, NULL, args, environ) != 0) {
      fprintf(stderr, "tmk-bench-load: cannot start %s\n", exe);
      return -1;
    }
    posix_spawn_file_actions_destroy(&fa);
  }
  rp->port = rp->http = 0;
  for (i = 0; i < 100 && !rp->http; i++) {
    FILE* f;
    sleep_ms(50);
    f = fopen(rp->log, "r");
    if (!f) continue;
    while (fgets(line, sizeof line, f)) {
      const char* p = strstr(line, "listening on 127.0.0.1:");
      const char* h = strstr(line, "http://127.0.0.1:");
      if (p && h) {
        rp->port = atoi(p + 23);
        rp->http = atoi(h + 17);
      }
    }
    fclose(f);
  }
  if (!rp->http) {
    fprintf(stderr, "tmk-bench-load: relay did not start (see %s)\n", rp->log);
    kill(rp->pid, SIGKILL);
    waitpid(rp->pid, NULL, 0);
    return -1;
  }
  return 0;
}

static void relay_stop(relay_proc* rp, int keep_dir) {
  char cmd[160];
  kill(rp->pid, SIGTERM);
  waitpid(rp->pid, NULL, 0);
  if (keep_dir) return;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", rp->dir);
  if (system(cmd) != 0) fprintf(stderr, "tmk-bench-load: could not remove %s\n", rp->dir);
}

/* ============================================================================================
 * The instrumented loops
 * ========================================================================================== */

static void tight(uint64_t n) {
  uint64_t i;
  for (i = 0; i < n; i++) {
    TMK_ZONE("tight", TMK_SEV_INFO, 1);
    sink += i;
  }
}

/* Frame > { Update > { AI, Physics x 6 }, Render > { Draw x 10 } }: 20 zones, 3 deep. */
static void game_frame(uint64_t f) {
  int k;
  TMK_ZONE("Frame", TMK_SEV_INFO, 1);
  {
    TMK_ZONE("Update", TMK_SEV_INFO, 1);
    {
      TMK_ZONE("AI", TMK_SEV_INFO, 1);
      sink += f;
    }
    for (k = 0; k < 6; k++) {
      TMK_ZONE("Physics", TMK_SEV_INFO, 1);
      sink += (uint64_t)k;
    }
  }
  {
    TMK_ZONE("Render", TMK_SEV_INFO, 1);
    for (k = 0; k < 10; k++) {
      TMK_ZONE("Draw", TMK_SEV_INFO, 1);
      sink += (uint64_t)k;
    }
  }
}

static void nested(uint64_t n) {
  uint64_t f;
  for (f = 0; f < n / 20; f++) {
    game_frame(f);
    TMK_FRAME();
  }
}

typedef struct phase {
  const char* name;
  uint64_t recorded;
  double wall, thread_cpu, client_cpu, relay_cpu;
  tmk_agent_stats agent;
  sess relay;
} phase;

/* One agent session against the relay: init with the default desc, wait for WELCOME, run the
 * loop, shut down (which flushes and says BYE) and wait for the relay to settle. */
static int run_phase(relay_proc* rp, phase* ph, void (*loop)(uint64_t), uint64_t n) {
  tmk_agent_desc d;
  double c0, r0, t0, u0;
  int i, rc;
  memset(&d, 0, sizeof d);
  d.program = ph->name;
  d.relay_port = (uint16_t)rp->port;
  r0 = proc_cpu_s(rp->pid);
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
  u0 = thread_cpu_s();
  t0 = now_s();
  loop(n);
  ph->wall = now_s() - t0;
  ph->thread_cpu = thread_cpu_s() - u0;
  ph->recorded = loop == nested ? n / 20 * 20 : n;
  tmk_agent_get_stats(&ph->agent);
  tmk_agent_shutdown();
  ph->client_cpu = self_cpu_s() - c0;
  ph->relay = settle(rp->http, ph->agent.session_id);
  ph->relay_cpu = proc_cpu_s(rp->pid) - r0;
  if (!ph->relay.found) {
    fprintf(stderr, "tmk-bench-load: the relay shows no session %016llx (see %s)\n",
            (unsigned long long)ph->agent.session_id, rp->log);
    return -1;
  }
  printf("bench-load: %-6s %llu zones in %.3f s (%.3f s on the thread's CPU): %llu stored "
         "(%.4f), agent dropped %llu (ring full), relay lost %llu of %llu packets; %u thread "
         "slots x %u-byte rings\n",
         ph->name, (unsigned long long)ph->recorded, ph->wall, ph->thread_cpu,
         (unsigned long long)ph->relay.zones,
         (double)ph->relay.zones / (double)ph->recorded,
         (unsigned long long)ph->agent.drops[TMK_DROP_RING_FULL],
         (unsigned long long)ph->relay.lost,
         (unsigned long long)(ph->relay.packets + ph->relay.lost),
         (unsigned)ph->agent.max_threads, (unsigned)ph->agent.ring_bytes);
  return 0;
}

/* ns per zone with nothing listening: on demand, the agent records nothing until WELCOME. */
static double idle_zone_ns(uint64_t n) {
  tmk_agent_desc d;
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  double t0, t;
  int fd = socket(AF_INET, SOCK_DGRAM, 0), rc;
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
  d.relay_port = ntohs(sa.sin_port);
  rc = tmk_agent_init(&d, arena, arena_bytes);
  if (rc < 0) {
    fprintf(stderr, "tmk-bench-load: agent init: %s\n", tmk_strerror(rc));
    return -1;
  }
  tight(n / 10); /* warm */
  t0 = thread_cpu_s();
  tight(n);
  t = thread_cpu_s() - t0;
  tmk_agent_shutdown();
  return t * 1e9 / (double)n;
}

int main(int argc, char** argv) {
  uint64_t n = 10000000;
  relay_proc rp;
  phase pt, pn;
  double idle, stored;
  int rc = 0;
  if (argc > 1) n = strtoull(argv[1], NULL, 10);
  if (n < 20) n = 20;
  if (relay_start(&rp) != 0) return 1;
  memset(&pt, 0, sizeof pt);
  memset(&pn, 0, sizeof pn);
  pt.name = "tight";
  pn.name = "nested";
  if (run_phase(&rp, &pt, tight, n) != 0 || run_phase(&rp, &pn, nested, n) != 0) rc = 1;
  relay_stop(&rp, rc != 0);
  if (rc) return rc;
  idle = idle_zone_ns(n);
  stored = (double)(pt.relay.zones + pn.relay.zones);
  printf("RESULT delivered_ratio_tight=%.4f\n", (double)pt.relay.zones / (double)pt.recorded);
  printf("RESULT delivered_ratio_nested=%.4f\n", (double)pn.relay.zones / (double)pn.recorded);
  printf("RESULT zone_ns_loaded=%.2f\n", pt.thread_cpu * 1e9 / (double)pt.recorded);
  printf("RESULT zone_wall_ns_loaded=%.2f\n", pt.wall * 1e9 / (double)pt.recorded);
  printf("RESULT client_cpu_ns_per_zone=%.2f\n",
         (pt.client_cpu + pn.client_cpu) * 1e9 / (double)(pt.recorded + pn.recorded));
  printf("RESULT relay_cpu_ns_per_zone=%.2f\n",
         stored > 0 ? (pt.relay_cpu + pn.relay_cpu) * 1e9 / stored : 0.0);
  printf("RESULT idle_zone_ns=%.2f\n", idle);
  return stored > 0 && idle >= 0 ? 0 : 1;
}
