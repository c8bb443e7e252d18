/* demo_game.c — telemark-demo: runs the simulated game (demo_sim.c) with the telemark agent
 * sending to a relay. `make run` starts it next to telemark-relay.
 *   telemark-demo [--seconds N] [--relay HOST:PORT] [--transport udp|tcp|file] [--file PATH] */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_sim.h"
#include "telemark.h"

static volatile int stop_flag;
static void on_signal(int sig) {
  (void)sig;
  stop_flag = 1;
}

static void log_line(void* user, int level, const char* msg) {
  (void)user;
  fprintf(stderr, "[%s] %s\n", tmk_proto_severity_name((unsigned)level), msg);
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: telemark-demo [options]\n"
          "  --seconds N           run N seconds, then exit (default: until Ctrl-C)\n"
          "  --relay HOST:PORT     where telemark-relay listens (default 127.0.0.1:7720)\n"
          "  --transport T         udp (default, TCP if UDP is unavailable), tcp, or file\n"
          "  --file PATH           file transport output (default telemark-demo.tmk)\n"
          "  --build ID            build id sent in HELLO (history groups by it)\n"
          "  --label TEXT          free label sent in HELLO\n"
          "  --help                this text\n");
}

int main(int argc, char** argv) {
  static uint64_t arena[(4u << 20) / 8];
  static char host[256] = "127.0.0.1";
  tmk_agent_desc d;
  tmk_agent_stats st;
  double seconds = 0;
  long frames;
  int i, rc;
  memset(&d, 0, sizeof d);
  d.relay_host = host;
  d.relay_port = 7720;
  d.program = "telemark-demo";
  d.file_path = "telemark-demo.tmk";
  d.level = TMK_LEVEL(TMK_SEV_INFO);
  d.logger.fn = log_line;
  for (i = 0; i < 5; i++) d.team_names[i] = demo_team_names[i];
  for (i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--seconds") == 0 && v) {
      seconds = atof(v), i++;
      if (seconds <= 0) {
        fprintf(stderr, "telemark-demo: --seconds wants a positive number, got '%s'\n", v);
        return 2;
      }
    } else if (strcmp(a, "--relay") == 0 && v) {
      const char* colon = strrchr(v, ':');
      long port;
      if (!colon || colon == v || (size_t)(colon - v) >= sizeof host ||
          (port = strtol(colon + 1, NULL, 10)) <= 0 || port > 65535) {
        fprintf(stderr, "telemark-demo: --relay wants HOST:PORT, e.g. 127.0.0.1:7720, got '%s'\n", v);
        return 2;
      }
      memcpy(host, v, (size_t)(colon - v));
      host[colon - v] = 0;
      d.relay_port = (uint16_t)port;
      i++;
    } else if (strcmp(a, "--transport") == 0 && v) {
      if (strcmp(v, "udp") == 0) d.transport = TMK_TRANSPORT_AUTO;
      else if (strcmp(v, "tcp") == 0) d.transport = TMK_TRANSPORT_TCP;
      else if (strcmp(v, "file") == 0) d.transport = TMK_TRANSPORT_FILE;
      else {
        fprintf(stderr, "telemark-demo: --transport wants udp, tcp or file, got '%s'\n", v);
        return 2;
      }
      i++;
    } else if (strcmp(a, "--file") == 0 && v) {
      d.file_path = v, i++;
    } else if (strcmp(a, "--build") == 0 && v) {
      d.build = v, i++;
    } else if (strcmp(a, "--label") == 0 && v) {
      d.label = v, i++;
    } else {
      fprintf(stderr, "telemark-demo: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  rc = tmk_agent_init(&d, arena, sizeof arena);
  if (rc < 0) {
    fprintf(stderr, "telemark-demo: the agent did not start: %s\n", tmk_strerror(rc));
    return 1;
  }
  printf("telemark-demo: sending to %s:%u; %s\n", host, (unsigned)d.relay_port,
         seconds > 0 ? "running" : "Ctrl-C stops");
  fflush(stdout);
  frames = demo_run(seconds, &stop_flag);
  tmk_agent_get_stats(&st);
  tmk_agent_shutdown();
  printf("telemark-demo: %ld frames, %llu packets, %llu bytes sent; dropped: ring full %llu, "
         "no thread slot %llu, send failed %llu\n",
         frames, (unsigned long long)st.packets_sent, (unsigned long long)st.bytes_sent,
         (unsigned long long)st.drops[TMK_DROP_RING_FULL],
         (unsigned long long)st.drops[TMK_DROP_NO_THREAD],
         (unsigned long long)st.drops[TMK_DROP_SEND_FAILED]);
  return 0;
}
