/* agent_recvcheck.c — tmk-agent-recvcheck [--tcp] [--big-endian 0|1] -- COMMAND... : starts the
 * test receiver on 127.0.0.1, runs COMMAND (a tmk-agent-sendtest, possibly under qemu-user) with
 * "%PORT%" replaced by the receiver's port, and checks that every record of the sendtest
 * workload arrived and decoded exactly. Exit status 0 = all accounted for. */
#define _POSIX_C_SOURCE 200809L
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tmk_test_receiver.h"

extern char** environ;

static int failures;
#define CHECK(cond, ...)                      \
  do {                                        \
    if (!(cond)) {                            \
      fprintf(stderr, "recvcheck: FAIL: ");   \
      fprintf(stderr, __VA_ARGS__);           \
      fprintf(stderr, "\n");                  \
      failures++;                             \
    }                                         \
  } while (0)

int main(int argc, char** argv) {
  static receiver r;
  int tcp = 0, big = -1, i, first = -1, status = 0;
  char port[16];
  char* args[64];
  pid_t pid;
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tcp") == 0) tcp = 1;
    else if (strcmp(argv[i], "--big-endian") == 0 && i + 1 < argc) big = atoi(argv[++i]);
    else if (strcmp(argv[i], "--") == 0) {
      first = i + 1;
      break;
    }
  }
  if (first < 0 || first >= argc || argc - first >= 63) {
    fprintf(stderr, "usage: tmk-agent-recvcheck [--tcp] [--big-endian 0|1] -- COMMAND...\n");
    return 2;
  }
  r.auto_welcome = 1;
  if (recv_start(&r) != 0) {
    perror("recvcheck: receiver");
    return 1;
  }
  snprintf(port, sizeof port, "%u", (unsigned)(tcp ? r.tcp_port : r.udp_port));
  for (i = first; i < argc; i++) args[i - first] = strcmp(argv[i], "%PORT%") == 0 ? port : argv[i];
  args[argc - first] = NULL;
  if (posix_spawnp(&pid, args[0], NULL, NULL, args, environ) != 0) {
    perror("recvcheck: spawn");
    return 1;
  }
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sender exited with status %d", status);
  recv_wait_at_least(&r, &r.byes, 1, 3000);
  recv_stop(&r);

  CHECK(r.bad_packets == 0, "%llu packets did not decode", (unsigned long long)r.bad_packets);
  CHECK(r.hellos >= 1, "no HELLO");
  CHECK(r.byes == 1, "no BYE");
  CHECK(r.zones == 8000, "%llu zones, want 8000", (unsigned long long)r.zones);
  CHECK(recv_zones_named(&r, "frame") == 2000, "frame zones");
  CHECK(recv_zones_named(&r, "leaf") == 2000, "leaf zones");
  CHECK(r.max_depth == 2, "max depth %llu", (unsigned long long)r.max_depth);
  CHECK(r.last_plot_d == -16.5e300, "double plot %g", r.last_plot_d);
  CHECK(r.last_plot_i == -1234567890123LL, "int plot %lld", (long long)r.last_plot_i);
  CHECK(strcmp(r.last_message, "dynamic \xc3\xa9t\xc3\xa9") == 0, "message '%s'", r.last_message);
  CHECK(r.last_marker_payload_len == 11 &&
            memcmp(r.last_marker_payload, "payload-\x01\x02\xff", 11) == 0,
        "marker payload");
  CHECK(r.frames == 1, "frames %llu", (unsigned long long)r.frames);
  CHECK(strcmp(r.team_names[1], "render") == 0, "team name '%s'", r.team_names[1]);
  CHECK(strcmp(r.program, "sendtest") == 0, "program '%s'", r.program);
  CHECK(r.drops[0] == 0 && r.drops[3] == 0, "drops reported");
  CHECK(((r.hello_caps & 4) != 0) == tcp, "HELLO caps 0x%llx", (unsigned long long)r.hello_caps);
  if (big >= 0) {
    CHECK((int)r.hello_big_endian == big, "HELLO byte order %llu",
          (unsigned long long)r.hello_big_endian);
    CHECK((int)r.hello_header_big_endian == big, "header BIG_ENDIAN flag");
  }
  printf("recvcheck: %s agent (%s, %llu-byte pointers) over %s: %llu zones, %llu packets, %s\n",
         r.hello_big_endian ? "big-endian" : "little-endian", r.arch,
         (unsigned long long)r.hello_pointer_size, tcp ? "TCP" : "UDP",
         (unsigned long long)r.zones, (unsigned long long)r.data_packets,
         failures ? "FAILED" : "all accounted for");
  return failures ? 1 : 0;
}
