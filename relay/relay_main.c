/* relay_main.c — telemark-relay's command line and lifecycle: parses and checks the flags, starts
 * ingest, the HTTP server and the timers on one libuv loop, logs a stats line periodically, and
 * on SIGINT/SIGTERM stops accepting, flushes and closes recordings and exits 0. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "relay_internal.h"
#include "tmk_relay_web.h"

/* Exit codes (also in --help). */
enum { EXIT_USAGE = 2, EXIT_NET = 3, EXIT_DATA_DIR = 4, EXIT_OTHER = 1 };

void tmk__config_defaults(tmk_relay_config* c) {
  memset(c, 0, sizeof *c);
  snprintf(c->listen_host, sizeof c->listen_host, "0.0.0.0");
  c->listen_port = TMK_PROTO_DEFAULT_PORT;
  snprintf(c->http_host, sizeof c->http_host, "127.0.0.1");
  c->http_port = 7721;
  snprintf(c->data_dir, sizeof c->data_dir, "./telemark-data");
  c->max_sessions = 64;
  c->session_memory = (size_t)256 << 20;
  c->reorder_packets = 256;
  c->reorder_ms = 100;
  c->log_level = TMK_LOG_INFO;
  c->stats_interval_ms = 10000;
}

static void usage(FILE* out) {
  fprintf(out,
          "usage: telemark-relay [options]\n"
          "\n"
          "Receives profiling data from telemark agents over UDP and TCP, reorders, stores and\n"
          "records it, and serves the JSON API and dashboard over HTTP.\n"
          "\n"
          "options:\n"
          "  --listen HOST:PORT       where agents send, UDP and TCP on the same port\n"
          "                           (default 0.0.0.0:7720; port 0 picks a free one)\n"
          "  --http HOST:PORT         HTTP API and dashboard (default 127.0.0.1:7721;\n"
          "                           port 0 picks a free one; 'off' disables it)\n"
          "  --data-dir DIR           where recordings are written and opened from\n"
          "                           (default ./telemark-data; created if missing)\n"
          "  --record                 record every session from its first packet\n"
          "                           (otherwise start/stop per session over the API)\n"
          "  --max-sessions N         sessions held at once, live and opened (default 64);\n"
          "                           one source address may hold at most half of them\n"
          "  --session-memory SIZE    in-memory budget per session, e.g. 64M, 1G (default\n"
          "                           256M, min 1M); the oldest data is evicted and counted\n"
          "  --reorder-window SPEC    how long a gap waits for a late packet before it is\n"
          "                           declared lost: MSms and/or PACKETSp, e.g. 100ms,256p\n"
          "                           (default 100ms,256p; a bare number is milliseconds)\n"
          "  --log-level LEVEL        error, warn, info or debug (default info)\n"
          "  --token TOKEN            access token for /api and the dashboard's stream\n"
          "                           (required when --http is not loopback: generated and\n"
          "                           printed in the dashboard URL unless given)\n"
          "  --team BIT=NAME          name team verbosity bit BIT (0..31) in the dashboard,\n"
          "                           over the agent's name; repeatable\n"
          "  --clickhouse URL         stream every live session into ClickHouse for the\n"
          "                           history view, e.g. http://127.0.0.1:8123/?database=telemark\n"
          "                           (docs/CLICKHOUSE.md; tables are created if missing)\n"
          "  --clickhouse-spill SIZE  disk space for batches ClickHouse did not take yet\n"
          "                           (default 1G); beyond it batches are dropped and counted\n"
          "  --clickhouse-spill-dir DIR  where they wait (default DATA_DIR/clickhouse-spill);\n"
          "                           sent when ClickHouse is back, also after a restart\n"
          "  --help                   this text\n"
          "  --version                print the version\n"
          "\n"
          "exit codes: 0 clean shutdown (SIGINT/SIGTERM), 2 bad command line, 3 a port could\n"
          "not be bound, 4 data directory not usable, 1 other errors.\n");
}

static int bad_flag(const char* fmt, const char* a, const char* b) {
  fprintf(stderr, "telemark-relay: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n(see telemark-relay --help)\n");
  return EXIT_USAGE;
}

static int parse_hostport(const char* s, char* host, size_t cap, int* port) {
  const char* colon = strrchr(s, ':');
  if (!colon) return -1;
  size_t hlen = (size_t)(colon - s);
  const char* h = s;
  if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
    h = s + 1;
    hlen -= 2;
  }
  if (hlen == 0 || hlen >= cap) return -1;
  char* end;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || *end || colon[1] == 0 || p < 0 || p > 65535) return -1;
  memcpy(host, h, hlen);
  host[hlen] = 0;
  struct sockaddr_in6 a6;
  struct sockaddr_in a4;
  if (uv_ip4_addr(host, 0, &a4) != 0 && uv_ip6_addr(host, 0, &a6) != 0) return -1;
  *port = (int)p;
  return 0;
}

static int parse_size(const char* s, size_t* out) {
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || s[0] == '-') return -1;
  unsigned long long mul = 1;
  if (*end == 'k' || *end == 'K') mul = 1ull << 10, end++;
  else if (*end == 'm' || *end == 'M') mul = 1ull << 20, end++;
  else if (*end == 'g' || *end == 'G') mul = 1ull << 30, end++;
  if (*end == 'i' || *end == 'B' || *end == 'b') end++;
  if (*end == 'B') end++;
  if (*end || v > (unsigned long long)SIZE_MAX / mul) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

static int parse_window(const char* s, uint32_t* ms, uint32_t* packets) {
  char buf[64];
  if (strlen(s) >= sizeof buf) return -1;
  snprintf(buf, sizeof buf, "%s", s);
  char* save = NULL;
  int any = 0;
  for (char* t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char* end;
    errno = 0;
    unsigned long v = strtoul(t, &end, 10);
    if (errno || end == t || t[0] == '-') return -1;
    if (strcmp(end, "ms") == 0 || *end == 0) {
      if (v < 1 || v > 60000) return -1;
      *ms = (uint32_t)v;
    } else if (strcmp(end, "p") == 0 || strcmp(end, "packets") == 0) {
      if (v < 2 || v > 65536) return -1;
      *packets = (uint32_t)v;
    } else {
      return -1;
    }
    any = 1;
  }
  return any ? 0 : -1;
}

/* Dashboard options (tmk_relay_web.h): the access token and team names. */
static char g_token[80];
static char g_team_names[32][64];

/* Returns 0 with cfg filled, -1 to exit 0 (help/version), or an exit code. */
static int parse_args(int argc, char** argv, tmk_relay_config* cfg) {
  tmk__config_defaults(cfg);
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = NULL;
    char name[64];
    const char* eq = strchr(a, '=');
    if (strncmp(a, "--", 2) == 0 && eq && (size_t)(eq - a) < sizeof name) {
      memcpy(name, a, (size_t)(eq - a));
      name[eq - a] = 0;
      v = eq + 1;
      a = name;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return -1;
    }
    if (strcmp(a, "--version") == 0) {
      printf("telemark-relay %s (protocol %d)\n", TMK_RELAY_VERSION, TMK_PROTO_VERSION);
      return -1;
    }
    if (strcmp(a, "--record") == 0) {
      if (v) return bad_flag("--record takes no value (got '%s')%s", v, "");
      cfg->record_all = 1;
      continue;
    }
    static const char* const with_value[] = {"--listen",         "--http",
                                             "--data-dir",       "--max-sessions",
                                             "--session-memory", "--reorder-window",
                                             "--log-level",      "--token",
                                             "--team",           "--clickhouse",
                                             "--clickhouse-spill", "--clickhouse-spill-dir"};
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
      if (strcmp(a, with_value[k]) == 0) known = 1;
    if (!known) return bad_flag("unknown option '%s'%s", argv[i], "");
    if (!v) {
      if (i + 1 >= argc) return bad_flag("%s needs a value%s", a, "");
      v = argv[++i];
    }
    if (strcmp(a, "--token") == 0) {
      size_t n = strlen(v);
      if (n < 8 || n >= sizeof g_token || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~") != n)
        return bad_flag("--token '%s': expected 8..79 characters from A-Z a-z 0-9 - _ . ~%s", v, "");
      memcpy(g_token, v, n + 1);
      continue;
    }
    if (strcmp(a, "--team") == 0) {
      char* end;
      errno = 0;
      long bit = strtol(v, &end, 10);
      if (errno || end == v || *end != '=' || bit < 0 || bit > 31 || !end[1] || strlen(end + 1) >= sizeof g_team_names[0])
        return bad_flag("--team '%s': expected BIT=NAME with BIT 0..31 and a name of 1..63 bytes%s", v, "");
      snprintf(g_team_names[bit], sizeof g_team_names[bit], "%s", end + 1);
      continue;
    }
    if (strcmp(a, "--clickhouse") == 0) {
      char err[300];
      if (strlen(v) >= sizeof cfg->clickhouse_url || tmk__ch_check_url(v, err, sizeof err)) {
        fprintf(stderr, "telemark-relay: %s\n(see telemark-relay --help)\n",
                strlen(v) >= sizeof cfg->clickhouse_url ? "--clickhouse: URL too long" : err);
        return EXIT_USAGE;
      }
      snprintf(cfg->clickhouse_url, sizeof cfg->clickhouse_url, "%s", v);
      continue;
    }
    if (strcmp(a, "--clickhouse-spill") == 0) {
      size_t sz;
      if (parse_size(v, &sz) || sz < ((size_t)1 << 20))
        return bad_flag("--clickhouse-spill '%s': expected a size of at least 1M, e.g. 1G%s", v, "");
      cfg->clickhouse_spill_max = sz;
      continue;
    }
    if (strcmp(a, "--clickhouse-spill-dir") == 0) {
      if (!*v || strlen(v) >= sizeof cfg->clickhouse_spill_dir)
        return bad_flag("--clickhouse-spill-dir '%s': empty or too long%s", v, "");
      snprintf(cfg->clickhouse_spill_dir, sizeof cfg->clickhouse_spill_dir, "%s", v);
      continue;
    }
    if (strcmp(a, "--listen") == 0) {
      if (parse_hostport(v, cfg->listen_host, sizeof cfg->listen_host, &cfg->listen_port))
        return bad_flag("--listen '%s': expected IP:PORT, e.g. 0.0.0.0:7720%s", v, "");
    } else if (strcmp(a, "--http") == 0) {
      if (strcmp(v, "off") == 0) cfg->http_port = -1;
      else if (parse_hostport(v, cfg->http_host, sizeof cfg->http_host, &cfg->http_port))
        return bad_flag("--http '%s': expected IP:PORT, e.g. 127.0.0.1:7721, or off%s", v, "");
    } else if (strcmp(a, "--data-dir") == 0) {
      if (!*v || strlen(v) >= sizeof cfg->data_dir)
        return bad_flag("--data-dir '%s': empty or too long%s", v, "");
      snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", v);
    } else if (strcmp(a, "--max-sessions") == 0) {
      char* end;
      errno = 0;
      long n = strtol(v, &end, 10);
      if (errno || *end || n < 1 || n > 4096)
        return bad_flag("--max-sessions '%s': expected a number from 1 to 4096%s", v, "");
      cfg->max_sessions = (uint32_t)n;
    } else if (strcmp(a, "--session-memory") == 0) {
      if (parse_size(v, &cfg->session_memory) || cfg->session_memory < ((size_t)1 << 20))
        return bad_flag("--session-memory '%s': expected a size of at least 1M, e.g. 256M%s", v,
                        "");
    } else if (strcmp(a, "--reorder-window") == 0) {
      if (parse_window(v, &cfg->reorder_ms, &cfg->reorder_packets))
        return bad_flag("--reorder-window '%s': expected e.g. 100ms, 256p or 100ms,256p "
                        "(1..60000 ms, 2..65536 packets)%s", v, "");
    } else if (strcmp(a, "--log-level") == 0) {
      int l = tmk__log_parse_level(v);
      if (l < 0) return bad_flag("--log-level '%s': expected error, warn, info or debug%s", v, "");
      cfg->log_level = l;
    }
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Relay object and loop
 * ------------------------------------------------------------------------------------------- */
tmk_relay* tmk__relay_new(const tmk_relay_config* cfg) {
  tmk_relay* r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->cfg = *cfg;
  r->scratch = malloc(TMK_PROTO_MAX_BODY);
  if (!r->scratch) {
    free(r);
    return NULL;
  }
  pthread_mutex_init(&r->reg_mu, NULL);
  pthread_mutex_init(&r->cmd_mu, NULL);
  return r;
}

void tmk__relay_free(tmk_relay* r) {
  tmk__ch_free(r->ch); /* joins the sink thread (after tmk__ch_shutdown it has drained) */
  for (uint32_t i = 0; i < r->nsessions; i++) tmk__session_unref(r->sessions[i]);
  free(r->sessions);
  free(r->scratch);
  free(r->udp_buf);
  pthread_mutex_destroy(&r->reg_mu);
  pthread_mutex_destroy(&r->cmd_mu);
  free(r);
}

static void stats_line(tmk_relay* r, uint64_t now) {
  uint64_t records = 0, lost = 0, packets = 0;
  uint32_t live = 0;
  for (uint32_t i = 0; i < r->nsessions; i++) {
    tmk__session* s = r->sessions[i];
    if (s->replay) continue;
    pthread_mutex_lock(&s->mu);
    tmk_relay_session_info info = s->info;
    tmk__store_fill_info(s->store, &info);
    pthread_mutex_unlock(&s->mu);
    records += info.stats.records;
    lost += info.stats.lost;
    packets += info.stats.packets;
    live += info.live ? 1u : 0u;
  }
  double secs = (double)(now - r->last_stats_ms) / 1000.0;
  if (secs <= 0) secs = 1;
  uint64_t d_rec = records - r->records_at_last_stats, d_lost = lost - r->lost_at_last_stats;
  uint64_t d_pk = packets - r->packets_at_last_stats;
  uint64_t garbage = atomic_load(&r->garbage);
  tmk__log(TMK_LOG_INFO,
           "stats: %u sessions (%u live), %.0f records/s, %.0f packets/s, lost %llu of %llu "
           "packets (%.3f%%), %llu bad packets",
           r->nsessions, live, (double)d_rec / secs, (double)d_pk / secs,
           (unsigned long long)d_lost, (unsigned long long)(d_pk + d_lost),
           d_pk + d_lost ? 100.0 * (double)d_lost / (double)(d_pk + d_lost) : 0.0,
           (unsigned long long)(garbage - r->garbage_at_last_stats));
  r->records_at_last_stats = records;
  r->lost_at_last_stats = lost;
  r->packets_at_last_stats = packets;
  r->garbage_at_last_stats = garbage;
  r->last_stats_ms = now;
}

static uint64_t g_last_second, g_last_sync;

static void on_tick(uv_timer_t* t) {
  tmk_relay* r = t->data;
  uint64_t now = uv_now(r->loop);
  tmk__ingest_tick(r, now);
  tmk__control_tick(r, now);
  if (r->ch) tmk__ch_tick(r->ch, r, now);
  if (now - g_last_second >= 1000) {
    int sync = now - g_last_sync >= 5000;
    if (sync) g_last_sync = now;
    tmk__sessions_periodic(r, now, sync);
    g_last_second = now;
  }
  if (r->cfg.stats_interval_ms && now - r->last_stats_ms >= r->cfg.stats_interval_ms)
    stats_line(r, now);
}

static void shutdown_relay(tmk_relay* r, const char* why) {
  if (r->stopping) return;
  tmk__log(TMK_LOG_INFO, "%s: stopping (flushing recordings)", why);
  tmk__ingest_stop(r);
  tmk__control_drain(r);
  tmk__sessions_shutdown(r);
  if (r->ch) tmk__ch_shutdown(r->ch, r, 3000); /* send for up to 3 s, spill the rest */
  tmk__http_stop(r);
  uv_timer_stop(&r->tick);
  uv_close((uv_handle_t*)&r->tick, NULL);
  tmk__control_close(r);
  uv_close((uv_handle_t*)&r->sigint, NULL);
  uv_close((uv_handle_t*)&r->sigterm, NULL);
}

static void on_signal(uv_signal_t* h, int signum) {
  tmk_relay* r = h->data;
  shutdown_relay(r, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

static int check_data_dir(const char* dir) {
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno != ENOENT || mkdir(dir, 0755) != 0) {
      fprintf(stderr,
              "telemark-relay: data directory %s cannot be created: %s\n"
              "(choose a writable place with --data-dir)\n",
              dir, strerror(errno));
      return EXIT_DATA_DIR;
    }
    return 0;
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "telemark-relay: --data-dir %s exists but is not a directory\n", dir);
    return EXIT_DATA_DIR;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    fprintf(stderr,
            "telemark-relay: data directory %s is not writable: %s\n"
            "(choose a writable place with --data-dir)\n",
            dir, strerror(errno));
    return EXIT_DATA_DIR;
  }
  return 0;
}

int main(int argc, char** argv) {
  tmk_relay_config cfg;
  int rc = parse_args(argc, argv, &cfg);
  if (rc < 0) return 0;
  if (rc > 0) return rc;
  tmk__log_setup(cfg.log_level, stderr);
  if ((rc = check_data_dir(cfg.data_dir)) != 0) return rc;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN); /* a file size limit fails the write (EFBIG), it must not kill us */

  tmk_relay* r = tmk__relay_new(&cfg);
  if (!r) {
    fprintf(stderr, "telemark-relay: out of memory\n");
    return EXIT_OTHER;
  }
  if (cfg.clickhouse_url[0]) { /* the history sink (docs/CLICKHOUSE.md) */
    char spill[600], err[300];
    if (cfg.clickhouse_spill_dir[0]) snprintf(spill, sizeof spill, "%s", cfg.clickhouse_spill_dir);
    else snprintf(spill, sizeof spill, "%s/clickhouse-spill", cfg.data_dir);
    tmk__ch_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.url = cfg.clickhouse_url;
    cd.spill_dir = spill;
    cd.spill_max = cfg.clickhouse_spill_max;
    r->ch = tmk__ch_new(&cd, err, sizeof err);
    if (!r->ch) {
      fprintf(stderr, "telemark-relay: %s\n", err);
      tmk__relay_free(r);
      return EXIT_DATA_DIR;
    }
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  r->loop = &loop;
  /* The dashboard: embedded page, live stream, token when --http is not loopback. */
  tmk_relay_web_desc web;
  memset(&web, 0, sizeof web);
  if (!g_token[0] && cfg.http_port >= 0 && !tmk_relay_web_is_loopback(cfg.http_host) &&
      tmk_relay_web_make_token(g_token, sizeof g_token) != 0) {
    fprintf(stderr, "telemark-relay: cannot generate an access token (/dev/urandom); give one with --token\n");
    return EXIT_OTHER;
  }
  web.token = g_token;
  web.check_origin = 1;
  for (int b = 0; b < 32; b++) web.team_names[b] = g_team_names[b][0] ? g_team_names[b] : NULL;
  if (cfg.http_port >= 0) tmk_relay_web_install(r, &web);
  int exit_code = 0;
  if (tmk__ingest_start(r) != 0) {
    exit_code = EXIT_NET;
  } else if (tmk__http_start(r) != 0) {
    exit_code = EXIT_NET;
  }
  if (exit_code) {
    tmk__ingest_stop(r);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    tmk__relay_free(r);
    return exit_code;
  }
  tmk__control_init(r);
  uv_timer_init(&loop, &r->tick);
  r->tick.data = r;
  uv_timer_start(&r->tick, on_tick, TMK__TICK_MS, TMK__TICK_MS);
  uv_signal_init(&loop, &r->sigint);
  uv_signal_init(&loop, &r->sigterm);
  r->sigint.data = r->sigterm.data = r;
  uv_signal_start(&r->sigint, on_signal, SIGINT);
  uv_signal_start(&r->sigterm, on_signal, SIGTERM);
  r->last_stats_ms = g_last_second = g_last_sync = uv_now(&loop);

  if (cfg.http_port >= 0)
    tmk__log(TMK_LOG_INFO, "telemark-relay %s: listening on %s:%d (udp+tcp), http://%s:%d/, "
             "data in %s%s", TMK_RELAY_VERSION, cfg.listen_host, r->bound_port, cfg.http_host,
             r->http_port_bound, cfg.data_dir, cfg.record_all ? ", recording all sessions" : "");
  else
    tmk__log(TMK_LOG_INFO, "telemark-relay %s: listening on %s:%d (udp+tcp), http off, data in "
             "%s%s", TMK_RELAY_VERSION, cfg.listen_host, r->bound_port, cfg.data_dir,
             cfg.record_all ? ", recording all sessions" : "");

  if (cfg.http_port >= 0) {
    /* The one line a user needs: where the dashboard is (with the token when there is one). */
    char host[256];
    snprintf(host, sizeof host, "%s", cfg.http_host);
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) {
      if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
      host[sizeof host - 1] = 0;
    }
    int v6 = strchr(host, ':') != NULL;
    printf("telemark-relay: dashboard at http://%s%s%s:%d/%s%s\n", v6 ? "[" : "", host, v6 ? "]" : "",
           r->http_port_bound, g_token[0] ? "?token=" : "", g_token);
    fflush(stdout);
  }

  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  tmk__log(TMK_LOG_INFO, "stopped");
  tmk__relay_free(r);
  return 0;
}
