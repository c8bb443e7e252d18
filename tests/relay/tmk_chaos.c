/* tmk_chaos.c — a UDP chaos proxy for the relay's tests: forwards datagrams from agents to the
 * relay and, with a fixed seed, drops, duplicates and reorders DATA packets (reordering stays
 * within a few packets). Prints exactly what it did so a test can compare with the relay (with
 * --list 1, also the seq of each DATA packet it dropped). */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tmk_proto.h"

#define HOLD_MAX 8

static uint32_t g_rng = 1;
static double frand(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 17;
  g_rng ^= g_rng << 5;
  return (double)(g_rng % 1000000u) / 1000000.0;
}

typedef struct held {
  uint8_t data[2048];
  size_t len;
  int release_after; /* packets still to pass before this one goes */
} held;

static int g_out;
static struct sockaddr_in g_relay;
static unsigned long long g_forwarded;

static void forward(const uint8_t* p, size_t len) {
  sendto(g_out, p, len, 0, (struct sockaddr*)&g_relay, sizeof g_relay);
  g_forwarded++;
}

int main(int argc, char** argv) {
  const char* to = NULL;
  double p_drop = 0.05, p_dup = 0.03, p_reorder = 0.05;
  unsigned long long protect_from = ~0ull;
  int idle_ms = 1500, list = 0; /* list: print the seq of each packet dropped */
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--to") == 0) to = argv[i + 1];
    else if (strcmp(argv[i], "--seed") == 0) g_rng = (uint32_t)strtoul(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--drop") == 0) p_drop = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--dup") == 0) p_dup = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--reorder") == 0) p_reorder = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--protect-from") == 0) protect_from = strtoull(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--idle-ms") == 0) idle_ms = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--list") == 0) list = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "tmk-relay-chaos: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (!to || !g_rng) {
    fprintf(stderr, "usage: tmk-relay-chaos --to IP:PORT [--seed N(!=0)] [--drop P] [--dup P] "
                    "[--reorder P] [--protect-from SEQ] [--idle-ms MS] [--list 1]\n");
    return 2;
  }
  const char* colon = strrchr(to, ':');
  char host[64];
  if (!colon || (size_t)(colon - to) >= sizeof host) return 2;
  memcpy(host, to, (size_t)(colon - to));
  host[colon - to] = 0;
  memset(&g_relay, 0, sizeof g_relay);
  g_relay.sin_family = AF_INET;
  g_relay.sin_port = htons((uint16_t)atoi(colon + 1));
  inet_pton(AF_INET, host, &g_relay.sin_addr);

  int in = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in me;
  memset(&me, 0, sizeof me);
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(in, (struct sockaddr*)&me, sizeof me) != 0) return 1;
  socklen_t ml = sizeof me;
  getsockname(in, (struct sockaddr*)&me, &ml);
  int big = 4 << 20;
  setsockopt(in, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  g_out = socket(AF_INET, SOCK_DGRAM, 0);
  printf("CHAOS port=%d\n", ntohs(me.sin_port));
  fflush(stdout);

  static held hold[HOLD_MAX];
  int nheld = 0;
  unsigned long long received = 0, dropped = 0, duplicated = 0, reordered = 0;
  int got_any = 0;
  for (;;) {
    struct pollfd pfd = {in, POLLIN, 0};
    int pr = poll(&pfd, 1, got_any ? idle_ms : 30000);
    if (pr <= 0) break;
    uint8_t buf[2048];
    ssize_t n = recv(in, buf, sizeof buf, 0);
    if (n <= 0) continue;
    got_any = 1;
    received++;
    tmk_proto_header h;
    int is_data = tmk_proto_parse_header(buf, (size_t)n, &h) > 0 && h.type == TMK_PKT_DATA;
    if (!is_data) { /* HELLO / BYE: release everything held first, then pass through */
      for (int k = 0; k < nheld; k++) forward(hold[k].data, hold[k].len);
      nheld = 0;
      forward(buf, (size_t)n);
      continue;
    }
    double r1 = frand(), r2 = frand(), r3 = frand();
    if (h.seq < protect_from && r1 < p_drop) {
      dropped++;
      if (list) printf("CHAOS drop seq=%llu\n", (unsigned long long)h.seq);
      continue;
    }
    /* Release held packets whose turn has come (each counts the packets passing it). */
    int copies = r2 < p_dup ? 2 : 1;
    if (copies == 2) duplicated++;
    if (r3 < p_reorder && nheld < HOLD_MAX) {
      held* hp = &hold[nheld++];
      memcpy(hp->data, buf, (size_t)n);
      hp->len = (size_t)n;
      hp->release_after = 1 + (int)(frand() * 6);
      reordered++;
      if (copies == 2) forward(buf, (size_t)n); /* the duplicate goes now, the original later */
    } else {
      for (int c = 0; c < copies; c++) forward(buf, (size_t)n);
    }
    for (int k = 0; k < nheld;) {
      if (--hold[k].release_after <= 0) {
        forward(hold[k].data, hold[k].len);
        hold[k] = hold[--nheld];
      } else {
        k++;
      }
    }
  }
  for (int k = 0; k < nheld; k++) forward(hold[k].data, hold[k].len);
  printf("CHAOS received=%llu forwarded=%llu dropped=%llu duplicated=%llu reordered=%llu\n",
         received, g_forwarded, dropped, duplicated, reordered);
  return 0;
}
