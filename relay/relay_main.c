/* relay_main.c — telemark-relay's command line: parses and checks the flags into a tmk_relay_desc
 * and a tmk_relay_web_desc, installs SIGINT/SIGTERM (which stop the relay: it flushes and closes
 * recordings and exits 0), then creates, runs and destroys the relay (tmk_relay.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "relay_internal.h"
#include "tmk_relay_web.h"

/* Exit codes (also in --help). */
enum { EXIT_USAGE = 2, EXIT_NET = 3, EXIT_DATA_DIR = 4, EXIT_OTHER = 1 };

/* The flags, with the CLI's defaults (documented in --help). */
typedef struct cli_opts {
  char listen_host[64];
  int listen_port;
  char http_host[64];
  int http_port; /* -1 = off */
  char data_dir[260];
  int record_all;
  uint32_t max_sessions;
  size_t session_memory;
  uint32_t reorder_packets, reorder_ms;
  int log_level;
  char token[80];
  char team_names[32][64];
  const char* serial[TMK_RELAY_MAX_SERIAL]; /* --serial, as given (argv outlives the relay) */
  int nserial;
  char clickhouse_url[512];       /* --clickhouse, "" = off */
  char clickhouse_spill_dir[260]; /* "" = DATA_DIR/clickhouse-spill */
  uint64_t clickhouse_spill_max;
  uint64_t clickhouse_memory_max;
  uint32_t clickhouse_senders;
  tmk_relay_key keys[TMK_RELAY_MAX_KEYS]; /* --key files, parsed */
  uint32_t nkeys;
  uint32_t ws_idle_s; /* --ws-idle */
  size_t udp_queue;   /* --udp-queue */
  int ingest_nice;    /* --ingest-nice, -1 = leave */
} cli_opts;

static void cli_defaults(cli_opts* c) {
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
  c->ws_idle_s = 60;
  c->udp_queue = (size_t)64 << 20;
  c->ingest_nice = 10;
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
          "  --serial DEVICE[:BAUD]   also read agents from a serial line, e.g. a USB-UART\n"
          "                           adapter on a board: /dev/ttyUSB0:115200 (repeatable,\n"
          "                           up to 8; without BAUD the line keeps its settings)\n"
          "  --udp-queue SIZE         memory for UDP packets received but not yet decoded\n"
          "                           (default 64M, min 1M); beyond it they are dropped and\n"
          "                           counted (GET /api/relay, udp_queue)\n"
          "  --ingest-nice N          decode at nice N (0..19, default 10; 0 leaves the\n"
          "                           priority) so that a game on this machine keeps its\n"
          "                           cores; packets are still received at once\n"
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
          "  --clickhouse-memory SIZE memory for batches waiting for ClickHouse (default 128M);\n"
          "                           staging memory kept for reuse is bounded by it too\n"
          "  --clickhouse-spill-dir DIR  where they wait (default DATA_DIR/clickhouse-spill);\n"
          "                           sent when ClickHouse is back, also after a restart\n"
          "  --clickhouse-senders N   batches sent to ClickHouse at once, 1..8 (default 2)\n"
          "  --key FILE               authenticated ingest: lines 'PROGRAM KEY' (* for any\n"
          "                           program, KEY 32 hex digits); those programs' packets\n"
          "                           must carry its MAC, others are dropped and counted\n"
          "                           (docs/SECURITY.md; repeatable, up to 32 keys)\n"
          "  --ws-idle SECONDS        close a dashboard stream that sent nothing for this long\n"
          "                           (default 60; the page sends a keep-alive every 10 s)\n"
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

/* A whole decimal number from lo to hi in *out. Returns 0, or -1 for anything else. */
static int parse_int(const char* s, long lo, long hi, long* out) {
  char* end;
  errno = 0;
  long n = strtol(s, &end, 10);
  if (errno || end == s || *end || n < lo || n > hi) return -1;
  *out = n;
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

/* Returns 0 with cfg filled, -1 to exit 0 (help/version), or an exit code. */
static int parse_args(int argc, char** argv, cli_opts* cfg) {
  cli_defaults(cfg);
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
                                             "--team",           "--serial",
                                             "--clickhouse", "--clickhouse-spill", "--clickhouse-memory",
                                             "--clickhouse-spill-dir", "--clickhouse-senders", "--key",
                                             "--ws-idle", "--udp-queue", "--ingest-nice"};
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
      if (n < 8 || n >= sizeof cfg->token || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~") != n)
        return bad_flag("--token '%s': expected 8..79 characters from A-Z a-z 0-9 - _ . ~%s", v, "");
      memcpy(cfg->token, v, n + 1);
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
    if (strcmp(a, "--clickhouse-spill") == 0 || strcmp(a, "--clickhouse-memory") == 0) {
      const int spill = a[13] == 's';
      size_t sz;
      if (parse_size(v, &sz) || sz < ((size_t)1 << 20))
        return bad_flag("%s '%s': expected a size of at least 1M, e.g. 64M or 1G", a, v);
      *(spill ? &cfg->clickhouse_spill_max : &cfg->clickhouse_memory_max) = sz;
      continue;
    }
    if (strcmp(a, "--clickhouse-senders") == 0) {
      long n;
      if (parse_int(v, 1, TMK__CH_SENDERS_MAX, &n))
        return bad_flag("--clickhouse-senders '%s': expected a number from 1 to 8%s", v, "");
      cfg->clickhouse_senders = (uint32_t)n;
      continue;
    }
    if (strcmp(a, "--clickhouse-spill-dir") == 0) {
      if (!*v || strlen(v) >= sizeof cfg->clickhouse_spill_dir)
        return bad_flag("--clickhouse-spill-dir '%s': empty or too long%s", v, "");
      snprintf(cfg->clickhouse_spill_dir, sizeof cfg->clickhouse_spill_dir, "%s", v);
      continue;
    }
    if (strcmp(a, "--team") == 0) {
      char* end;
      errno = 0;
      long bit = strtol(v, &end, 10);
      if (errno || end == v || *end != '=' || bit < 0 || bit > 31 || !end[1] || strlen(end + 1) >= sizeof cfg->team_names[0])
        return bad_flag("--team '%s': expected BIT=NAME with BIT 0..31 and a name of 1..63 bytes%s", v, "");
      snprintf(cfg->team_names[bit], sizeof cfg->team_names[bit], "%s", end + 1);
      continue;
    }
    if (strcmp(a, "--key") == 0) {
      char err[512];
      int world = 0;
      if (tmk_relay_keys_load(v, cfg->keys, TMK_RELAY_MAX_KEYS, &cfg->nkeys, &world, err,
                              sizeof err) != 0) {
        fprintf(stderr, "telemark-relay: --key: %s\n", err);
        return EXIT_USAGE;
      }
      if (world)
        fprintf(stderr, "telemark-relay: warning: key file %s can be read by every user of this "
                        "machine (chmod 600 %s)\n", v, v);
      continue;
    }
    if (strcmp(a, "--udp-queue") == 0) {
      if (parse_size(v, &cfg->udp_queue) || cfg->udp_queue < ((size_t)1 << 20))
        return bad_flag("--udp-queue '%s': expected a size of at least 1M, e.g. 64M%s", v, "");
      continue;
    }
    if (strcmp(a, "--ingest-nice") == 0) {
      long n;
      if (parse_int(v, 0, 19, &n))
        return bad_flag("--ingest-nice '%s': expected a number from 0 to 19%s", v, "");
      cfg->ingest_nice = n ? (int)n : -1;
      continue;
    }
    if (strcmp(a, "--ws-idle") == 0) {
      long s;
      if (parse_int(v, 1, 86400, &s))
        return bad_flag("--ws-idle '%s': expected seconds from 1 to 86400%s", v, "");
      cfg->ws_idle_s = (uint32_t)s;
      continue;
    }
    if (strcmp(a, "--serial") == 0) {
      if (cfg->nserial >= TMK_RELAY_MAX_SERIAL || !*v)
        return bad_flag("--serial '%s': give a device (at most 8 --serial)%s", v, "");
      cfg->serial[cfg->nserial++] = v;
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
      long n;
      if (parse_int(v, 1, 4096, &n))
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
      int l = tmk_relay__log_parse_level(v);
      if (l < 0) return bad_flag("--log-level '%s': expected error, warn, info or debug%s", v, "");
      cfg->log_level = l;
    }
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Lifecycle
 * ------------------------------------------------------------------------------------------- */
static tmk_relay* g_relay; /* for the signal handler only */

/* main's own lines go to the same logger as the relay's. */
static void log_info(const cli_opts* cfg, const char* fmt, ...) TMK__PRINTF(2, 3);
static void log_info(const cli_opts* cfg, const char* fmt, ...) {
  if (cfg->log_level < TMK_LOG_INFO) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  tmk_relay_log_to_file(stderr, TMK_LOG_INFO, line);
}

static void on_signal(int signum) {
  (void)signum;
  tmk_relay_stop(g_relay); /* uv_async_send: async-signal-safe */
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
  cli_opts cfg;
  int rc = parse_args(argc, argv, &cfg);
  if (rc < 0) return 0;
  if (rc > 0) return rc;
  if ((rc = check_data_dir(cfg.data_dir)) != 0) return rc;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN); /* a file size limit fails the write (EFBIG), it must not kill us */

  tmk_relay_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.listen_host = cfg.listen_host;
  desc.listen_port = cfg.listen_port;
  desc.http_host = cfg.http_port >= 0 ? cfg.http_host : NULL;
  desc.http_port = cfg.http_port >= 0 ? cfg.http_port : 0;
  desc.data_dir = cfg.data_dir;
  desc.record_all = cfg.record_all;
  desc.max_sessions = cfg.max_sessions;
  desc.session_memory = cfg.session_memory;
  desc.reorder_packets = cfg.reorder_packets;
  desc.reorder_ms = cfg.reorder_ms;
  for (int i = 0; i < cfg.nserial; i++) desc.serial[i] = cfg.serial[i];
  desc.log.fn = tmk_relay_log_to_file;
  desc.log.ud = stderr;
  desc.log.level = cfg.log_level;
  desc.clickhouse.url = cfg.clickhouse_url[0] ? cfg.clickhouse_url : NULL;
  desc.clickhouse.spill_dir = cfg.clickhouse_spill_dir[0] ? cfg.clickhouse_spill_dir : NULL;
  desc.clickhouse.spill_max = cfg.clickhouse_spill_max;
  desc.clickhouse.memory_max = cfg.clickhouse_memory_max;
  desc.clickhouse.senders = cfg.clickhouse_senders;
  desc.keys = cfg.keys;
  desc.nkeys = cfg.nkeys;
  desc.udp_queue_bytes = cfg.udp_queue;
  desc.ingest_nice = cfg.ingest_nice;

  /* The dashboard: embedded page, live stream, token when --http is not loopback. */
  tmk_relay_web* web = NULL;
  if (cfg.http_port >= 0) {
    if (!cfg.token[0] && !tmk_relay_web_is_loopback(cfg.http_host) &&
        tmk_relay_web_make_token(cfg.token, sizeof cfg.token) != 0) {
      fprintf(stderr, "telemark-relay: cannot generate an access token (/dev/urandom); give one with --token\n");
      return EXIT_OTHER;
    }
    tmk_relay_web_desc wd;
    memset(&wd, 0, sizeof wd);
    wd.token = cfg.token;
    wd.check_origin = 1;
    wd.ws_idle_ms = cfg.ws_idle_s * 1000u;
    for (int b = 0; b < 32; b++) wd.team_names[b] = cfg.team_names[b][0] ? cfg.team_names[b] : NULL;
    if (tmk_relay_web_create(&wd, &web) != 0) {
      fprintf(stderr, "telemark-relay: out of memory\n");
      return EXIT_OTHER;
    }
    desc.http_hooks[0].fn = tmk_relay_web_hook;
    desc.http_hooks[0].ud = web;
  }

  tmk_relay* r = NULL;
  rc = tmk_relay_create(&desc, &r);
  if (rc != 0) {
    tmk_relay_web_destroy(web);
    if (rc == TMK_ENOMEM) fprintf(stderr, "telemark-relay: out of memory\n");
    return rc == TMK_ESOCKET ? EXIT_NET : EXIT_OTHER;
  }
  g_relay = r;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  int http_port = tmk_relay_http_port(r);
  if (cfg.http_port >= 0)
    log_info(&cfg, "telemark-relay %s: listening on %s:%d (udp+tcp), http://%s:%d/, "
             "data in %s%s", TMK_RELAY_VERSION, cfg.listen_host, tmk_relay_listen_port(r),
             cfg.http_host, http_port, cfg.data_dir,
             cfg.record_all ? ", recording all sessions" : "");
  else
    log_info(&cfg, "telemark-relay %s: listening on %s:%d (udp+tcp), http off, data in "
             "%s%s", TMK_RELAY_VERSION, cfg.listen_host, tmk_relay_listen_port(r), cfg.data_dir,
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
           http_port, cfg.token[0] ? "?token=" : "", cfg.token);
    fflush(stdout);
  }

  tmk_relay_run(r);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  g_relay = NULL;
  tmk_relay_destroy(r);
  tmk_relay_web_destroy(web);
  return 0;
}
