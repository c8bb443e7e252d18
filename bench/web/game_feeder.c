/* game_feeder.c — tmk-web-game-feeder: feeds a relay over TCP with N seconds of the game-like
 * stream (bench/common/tmk_gamestream) as fast as the relay takes it (TCP back-pressure), so the
 * dashboard benchmark can hold a long live session without waiting for it in real time.
 * Usage: tmk-web-game-feeder PORT SECONDS [SESSION_HEX]. Prints "FEED zones=… frames=…". */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tmk_gamestream.h"
#include "tmk_proto.h"

#define PACKET 8192

static int g_fd = -1;
static uint64_t g_sid, g_seq;
static tmk_proto_writer g_w;
static uint8_t g_body[PACKET - TMK_PROTO_MAX_HEADER];
static uint8_t g_out[PACKET + 16];
static void* g_lz4;
static uint32_t g_thread = UINT32_MAX;

static void die(const char* what) {
  fprintf(stderr, "tmk-web-game-feeder: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void send_packet(const uint8_t* p, size_t len) {
  uint8_t buf[PACKET + 32];
  int n = tmk_proto_frame_prefix(buf, len);
  if (n < 0) die("frame prefix");
  memcpy(buf + n, p, len);
  size_t off = 0, total = (size_t)n + len;
  while (off < total) {
    ssize_t w = send(g_fd, buf + off, total - off, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      die("send");
    }
    off += (size_t)w;
  }
}

static void flush(void) {
  if (tmk_proto_writer_empty(&g_w)) return;
  int n = tmk_proto_finish(&g_w, g_sid, g_seq++, g_out, sizeof g_out, g_lz4);
  if (n < 0) {
    fprintf(stderr, "tmk-web-game-feeder: finish: %s\n", tmk_strerror(n));
    exit(1);
  }
  send_packet(g_out, (size_t)n);
  tmk_proto_writer_reset(&g_w);
  g_thread = UINT32_MAX;
}

static void use_thread(uint32_t t) {
  if (g_thread == t) return;
  if (tmk_proto_put_thread(&g_w, t) < 0) {
    flush();
    tmk_proto_put_thread(&g_w, t);
  }
  g_thread = t;
}

static int put_event(const tmk_gs_event* e) {
  switch (e->kind) {
    case TMK_GS_FRAME: return tmk_proto_put_frame(&g_w, e->site, e->time);
    case TMK_GS_PLOT_I: return tmk_proto_put_plot_i(&g_w, e->site, e->time, e->i);
    case TMK_GS_PLOT_D: return tmk_proto_put_plot_d(&g_w, e->site, e->time, e->d);
    default:
      return tmk_proto_put_message(&g_w, e->site, e->severity, e->verbosity, e->time, e->text,
                                   e->text_len);
  }
}

static void put_descriptors(void) {
  size_t ns;
  const tmk_proto_site* sites = tmk_gs_sites(&ns);
  for (size_t i = 0; i < ns; i++)
    if (tmk_proto_put_site(&g_w, &sites[i]) < 0) {
      flush();
      tmk_proto_put_site(&g_w, &sites[i]);
    }
  for (uint32_t t = 0; t < TMK_GS_THREADS; t++) {
    const char* n = tmk_gs_thread_name(t);
    if (tmk_proto_put_thread_name(&g_w, t, n, strlen(n)) < 0) {
      flush();
      tmk_proto_put_thread_name(&g_w, t, n, strlen(n));
    }
  }
  for (uint32_t b = 0; b < 32; b++) {
    const char* n = tmk_gs_team_name(b);
    if (n && tmk_proto_put_team(&g_w, b, n, strlen(n)) < 0) {
      flush();
      tmk_proto_put_team(&g_w, b, n, strlen(n));
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: tmk-web-game-feeder PORT SECONDS [SESSION_HEX]\n");
    return 2;
  }
  int port = atoi(argv[1]);
  double seconds = atof(argv[2]);
  g_sid = argc > 3 ? strtoull(argv[3], NULL, 16) : 0x6a3e000000000001ull;
  g_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (g_fd < 0) die("socket");
  struct sockaddr_in to;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  to.sin_port = htons((uint16_t)port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(g_fd, (struct sockaddr*)&to, sizeof to) != 0) die("connect");

  tmk_proto_hello h;
  memset(&h, 0, sizeof h);
  h.proto_version = TMK_PROTO_VERSION;
  h.agent_version = (tmk_proto_str){"feeder-1", 8};
  h.program = (tmk_proto_str){"tmk-web-game-feeder", 19};
  h.platform = (tmk_proto_str){"linux", 5};
  h.arch = (tmk_proto_str){"x86_64", 6};
  h.pointer_size = 8;
  h.timer_freq = TMK_GS_TICKS_PER_S;
  h.caps = TMK_CAP_TCP;
  h.max_packet = PACKET;
  uint8_t hello[512];
  int n = tmk_proto_encode_hello(hello, sizeof hello, g_sid, &h);
  if (n < 0) return 1;
  send_packet(hello, (size_t)n);

  size_t ls = tmk_proto_lz4_state_size();
  if (ls && posix_memalign(&g_lz4, 16, ls) != 0) g_lz4 = NULL;
  tmk_proto_writer_init(&g_w, g_body, sizeof g_body);
  tmk_gamestream* gs = tmk_gs_create(42);
  if (!gs) return 1;
  put_descriptors();
  uint64_t frames = (uint64_t)(seconds * 60.0), zones = 0;
  for (uint64_t f = 0; f < frames; f++) {
    const tmk_gs_frame* fr = tmk_gs_next_frame(gs);
    for (int b = 0; b < TMK_GS_THREADS; b++) {
      const tmk_gs_batch* bt = &fr->batch[b];
      use_thread(bt->thread);
      size_t done = 0;
      while (done < bt->nzones) {
        int put = tmk_proto_put_zones(&g_w, bt->zones + done, bt->nzones - done);
        if (put < 0) die("put zones");
        done += (size_t)put;
        if (done < bt->nzones) {
          flush();
          use_thread(bt->thread);
        }
      }
      zones += bt->nzones;
      for (size_t e = 0; e < bt->nevents; e++)
        if (put_event(&bt->events[e]) < 0) {
          flush();
          use_thread(bt->thread);
          if (put_event(&bt->events[e]) < 0) die("put event");
        }
    }
    if (f % 600 == 599) { /* descriptors again now and then, like an agent */
      flush();
      put_descriptors();
    }
  }
  flush();
  if (getenv("TMK_FEEDER_BYE")) {
    int bn = tmk_proto_encode_bye(g_out, sizeof g_out, g_sid);
    if (bn > 0) send_packet(g_out, (size_t)bn);
  }
  /* Half-close, then read what the relay said (WELCOME) until it closes: closing with unread
   * input would reset the connection and make the relay drop what it has not read yet. */
  shutdown(g_fd, SHUT_WR);
  char sink[512];
  struct pollfd pfd = {g_fd, POLLIN, 0};
  while (poll(&pfd, 1, 30000) > 0 && read(g_fd, sink, sizeof sink) > 0) {
  }
  close(g_fd);
  printf("FEED zones=%llu frames=%llu packets=%llu\n", (unsigned long long)zones,
         (unsigned long long)frames, (unsigned long long)g_seq);
  tmk_gs_destroy(gs);
  free(g_lz4);
  return 0;
}
