/* tmk_synth.c — a synthetic telemark target for the relay's tests: encodes a deterministic
 * stream (sites, nested zones on several threads, frames, plots, messages) with the protocol
 * encoder and sends it over UDP or TCP, or writes an agent file; prints what it sent and what
 * the relay answered. Also floods garbage and fresh session ids for the bad-input tests. With
 * --key every packet carries a MAC (PROTOCOL.md §2.1) and each reply line says whether its MAC
 * was valid (mac=ok, mac=none, mac=bad). */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tmk_proto.h"

typedef struct opts {
  const char* host;
  int port;
  int tcp;
  uint64_t session;
  uint64_t packets;
  uint32_t zones; /* zones per thread per packet */
  uint32_t split; /* --split K: a tree's last K children go into the next packet (§5.3) */
  uint32_t threads;
  int hello_version;
  int hello_count;
  int no_hello, no_bye, sites_late, big_endian;
  double rate; /* packets per second, 0 = as fast as possible */
  const char* file;
  const char* message_text; /* --message-text: every message's text instead of "packet N" */
  uint64_t switch_tcp_at;
  int linger_ms;
  uint64_t garbage;
  uint64_t flood;
  uint32_t seed;
  uint64_t seq_start;
  int no_lz4;
  const char* bind_ip; /* source address (e.g. 127.0.0.2 to look like another host) */
  uint64_t corrupt_every; /* every Nth DATA packet is replaced by one whose body cannot decode */
  const char* program;    /* HELLO program, default tmk-relay-synth */
  uint64_t timer_freq;    /* HELLO timer frequency (ticks per second), default 10^9 */
  uint64_t long_every; /* every Nth packet, thread 0's root zone lasts 2^32 ticks or more */
} opts;

static int g_keyed;
static uint8_t g_key[16];

static uint32_t g_rng;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 17;
  g_rng ^= g_rng << 5;
  return g_rng;
}

static void die(const char* what) {
  fprintf(stderr, "tmk-relay-synth: %s: %s\n", what, strerror(errno));
  exit(1);
}

static int g_fd = -1;
static struct sockaddr_in g_to;
static int g_is_tcp;
static FILE* g_file;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void print_reply(const uint8_t* p, size_t len) {
  tmk_proto_reader rd;
  uint8_t scratch[TMK_PROTO_MAX_BODY];
  const char* mac = "";
  if (g_keyed) {
    int rc = tmk_proto_mac_check(p, len, g_key);
    mac = rc == 0 ? " mac=ok" : (len > 4 && (p[4] & TMK_PKT_F_MAC)) ? " mac=bad" : " mac=none";
  }
  if (tmk_proto_open(&rd, p, len, scratch, sizeof scratch) < 0) {
    printf("REPLY BAD\n");
    return;
  }
  if (rd.hdr.type == TMK_PKT_WELCOME) {
    tmk_proto_welcome w;
    if (tmk_proto_read_welcome(&rd, &w) == 0)
      printf("REPLY WELCOME version=%u%s\n", w.proto_version, mac);
  } else if (rd.hdr.type == TMK_PKT_REJECT) {
    tmk_proto_reject rj;
    if (tmk_proto_read_reject(&rd, &rj) == 0)
      printf("REPLY REJECT reason=%u text=%.*s%s\n", rj.reason, (int)rj.text.len, rj.text.ptr,
             mac);
  } else if (rd.hdr.type == TMK_PKT_CONTROL) {
    tmk_proto_control c;
    if (tmk_proto_read_control(&rd, &c) == 0)
      printf("REPLY CONTROL seq=%u level=%u mask=%u%s\n", c.seq, c.severity, c.verbosity, mac);
  } else {
    printf("REPLY TYPE %u\n", rd.hdr.type);
  }
  fflush(stdout);
}

/* Reads whatever replies are waiting (or arrive within wait_ms). */
static uint8_t g_tcp_in[70000];
static size_t g_tcp_len;
static void poll_replies(int wait_ms) {
  if (g_fd < 0) return;
  struct pollfd pfd = {g_fd, POLLIN, 0};
  while (poll(&pfd, 1, wait_ms) > 0) {
    if (!g_is_tcp) {
      uint8_t buf[2048];
      ssize_t n = recv(g_fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      print_reply(buf, (size_t)n);
    } else {
      ssize_t n = recv(g_fd, g_tcp_in + g_tcp_len, sizeof g_tcp_in - g_tcp_len, 0);
      if (n <= 0) return;
      g_tcp_len += (size_t)n;
      for (;;) {
        uint32_t plen;
        int k = tmk_proto_frame_parse(g_tcp_in, g_tcp_len, &plen);
        if (k <= 0 || g_tcp_len < (size_t)k + plen) break;
        print_reply(g_tcp_in + k, plen);
        memmove(g_tcp_in, g_tcp_in + k + plen, g_tcp_len - (size_t)k - plen);
        g_tcp_len -= (size_t)k + plen;
      }
    }
    wait_ms = 0;
  }
}

static void bind_source(const opts* o) {
  if (!o->bind_ip) return;
  struct sockaddr_in me;
  memset(&me, 0, sizeof me);
  me.sin_family = AF_INET;
  inet_pton(AF_INET, o->bind_ip, &me.sin_addr);
  if (bind(g_fd, (struct sockaddr*)&me, sizeof me) != 0) die("bind");
}

static void open_udp(const opts* o) {
  if (g_fd >= 0) close(g_fd);
  g_fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (g_fd < 0) die("socket");
  bind_source(o);
  g_is_tcp = 0;
  memset(&g_to, 0, sizeof g_to);
  g_to.sin_family = AF_INET;
  g_to.sin_port = htons((uint16_t)o->port);
  inet_pton(AF_INET, o->host, &g_to.sin_addr);
  if (connect(g_fd, (struct sockaddr*)&g_to, sizeof g_to) != 0) die("connect udp");
}

static void open_tcp(const opts* o) {
  if (g_fd >= 0) close(g_fd);
  g_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (g_fd < 0) die("socket");
  bind_source(o);
  g_is_tcp = 1;
  memset(&g_to, 0, sizeof g_to);
  g_to.sin_family = AF_INET;
  g_to.sin_port = htons((uint16_t)o->port);
  inet_pton(AF_INET, o->host, &g_to.sin_addr);
  if (connect(g_fd, (struct sockaddr*)&g_to, sizeof g_to) != 0) die("connect tcp");
  int one = 1;
  setsockopt(g_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void send_packet(const uint8_t* p, size_t len) {
  uint8_t prefix[3];
  static uint8_t sealed[TMK_PROTO_MAX_PACKET];
  if (g_keyed && len >= 14 && len + TMK_PROTO_MAC_LEN <= sizeof sealed) {
    memcpy(sealed, p, len);
    int n = tmk_proto_mac_seal(sealed, len, sizeof sealed, g_key);
    if (n > 0) {
      p = sealed;
      len = (size_t)n;
    }
  }
  if (g_file) {
    int n = tmk_proto_frame_prefix(prefix, len);
    fwrite(prefix, 1, (size_t)n, g_file);
    fwrite(p, 1, len, g_file);
    return;
  }
  if (g_is_tcp) {
    int n = tmk_proto_frame_prefix(prefix, len);
    uint8_t buf[TMK_PROTO_MAX_PACKET + 3];
    memcpy(buf, prefix, (size_t)n);
    memcpy(buf + n, p, len);
    size_t off = 0, total = (size_t)n + len;
    while (off < total) {
      ssize_t w = send(g_fd, buf + off, total - off, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EINTR) continue;
        die("send tcp");
      }
      off += (size_t)w;
    }
    return;
  }
  for (;;) {
    if (send(g_fd, p, len, 0) >= 0) return;
    if (errno == ENOBUFS || errno == EAGAIN || errno == EINTR) continue;
    if (errno == ECONNREFUSED) return; /* an ICMP from an earlier datagram; keep going */
    die("send udp");
  }
}

static void send_hello(const opts* o, int version) {
  tmk_proto_hello h;
  memset(&h, 0, sizeof h);
  h.proto_version = (uint32_t)version;
  h.agent_version.ptr = "synth-1";
  h.agent_version.len = 7;
  h.program.ptr = o->program ? o->program : "tmk-relay-synth";
  h.program.len = (uint32_t)strlen(h.program.ptr);
  h.platform.ptr = "linux";
  h.platform.len = 5;
  h.arch.ptr = o->big_endian ? "ppc" : "x86_64";
  h.arch.len = (uint32_t)strlen(h.arch.ptr);
  h.big_endian = (uint8_t)o->big_endian;
  h.pointer_size = 8;
  h.timer_freq = o->timer_freq ? o->timer_freq : 1000000000ull;
  h.caps = TMK_CAP_CONTROL | (g_is_tcp ? TMK_CAP_TCP : 0);
  h.max_packet = 1200;
  uint8_t out[512];
  int n = tmk_proto_encode_hello(out, sizeof out, o->session, &h);
  if (n < 0) {
    fprintf(stderr, "encode hello: %s\n", tmk_strerror(n));
    exit(1);
  }
  if (version != TMK_PROTO_VERSION) out[3] = (uint8_t)version; /* what a newer agent sends */
  send_packet(out, (size_t)n);
}

static const char* const k_site_names[] = {"", "Frame", "Update", "Physics", "Render", "Audio",
                                           "AI", "Net", "frame_ms", "log"};

static int put_sites(tmk_proto_writer* w) {
  for (uint32_t id = 1; id <= 9; id++) {
    tmk_proto_site s;
    memset(&s, 0, sizeof s);
    s.id = id;
    s.kind = id <= 7 ? TMK_SITE_ZONE : id == 8 ? TMK_SITE_PLOT : TMK_SITE_MESSAGE;
    s.severity = TMK_SEV_INFO;
    s.verbosity = 1u << (id % 4);
    s.color = 0x102030u * id;
    s.line = 100 + id;
    s.name.ptr = k_site_names[id];
    s.name.len = (uint32_t)strlen(k_site_names[id]);
    s.file.ptr = "synth.c";
    s.file.len = 7;
    if (tmk_proto_put_site(w, &s) < 0) return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  opts o;
  memset(&o, 0, sizeof o);
  o.host = "127.0.0.1";
  o.session = 0x5e55100000000001ull;
  o.packets = 100;
  o.zones = 20;
  o.threads = 2;
  o.hello_version = TMK_PROTO_VERSION;
  o.hello_count = 1;
  o.seed = 1;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
#define ARG(name) (strcmp(a, name) == 0 && (i++, 1))
    if (ARG("--to")) {
      static char host[64];
      const char* c = strrchr(v, ':');
      if (!c || (size_t)(c - v) >= sizeof host) return 2;
      memcpy(host, v, (size_t)(c - v));
      host[c - v] = 0;
      o.host = host;
      o.port = atoi(c + 1);
    } else if (strcmp(a, "--tcp") == 0) o.tcp = 1;
    else if (ARG("--session")) o.session = strtoull(v, NULL, 16);
    else if (ARG("--packets")) o.packets = strtoull(v, NULL, 10);
    else if (ARG("--zones")) o.zones = (uint32_t)atoi(v);
    else if (ARG("--split")) o.split = (uint32_t)atoi(v);
    else if (ARG("--threads")) o.threads = (uint32_t)atoi(v);
    else if (ARG("--hello-version")) o.hello_version = atoi(v);
    else if (ARG("--hello-count")) o.hello_count = atoi(v);
    else if (strcmp(a, "--no-hello") == 0) o.no_hello = 1;
    else if (strcmp(a, "--no-bye") == 0) o.no_bye = 1;
    else if (strcmp(a, "--sites-late") == 0) o.sites_late = 1;
    else if (strcmp(a, "--big-endian") == 0) o.big_endian = 1;
    else if (strcmp(a, "--no-lz4") == 0) o.no_lz4 = 1;
    else if (ARG("--rate")) o.rate = atof(v);
    else if (ARG("--file")) o.file = v;
    else if (ARG("--message-text")) o.message_text = v;
    else if (ARG("--switch-tcp-at")) o.switch_tcp_at = strtoull(v, NULL, 10);
    else if (ARG("--linger")) o.linger_ms = atoi(v);
    else if (ARG("--garbage")) o.garbage = strtoull(v, NULL, 10);
    else if (ARG("--flood-sessions")) o.flood = strtoull(v, NULL, 10);
    else if (ARG("--seed")) o.seed = (uint32_t)strtoul(v, NULL, 10);
    else if (ARG("--seq-start")) o.seq_start = strtoull(v, NULL, 10);
    else if (ARG("--bind")) o.bind_ip = v;
    else if (ARG("--corrupt-every")) o.corrupt_every = strtoull(v, NULL, 10);
    else if (ARG("--program")) o.program = v;
    else if (ARG("--timer-freq")) o.timer_freq = strtoull(v, NULL, 10);
    else if (ARG("--long-every")) o.long_every = strtoull(v, NULL, 10);
    else if (ARG("--key")) {
      if (strlen(v) != 32) return 2;
      for (int b = 0; b < 16; b++) {
        unsigned x;
        if (sscanf(v + 2 * b, "%2x", &x) != 1) return 2;
        g_key[b] = (uint8_t)x;
      }
      g_keyed = 1;
    }
    else {
      fprintf(stderr, "tmk-relay-synth: unknown option %s\n", a);
      return 2;
    }
  }
  g_rng = o.seed ? o.seed : 1;
  if (o.zones < 2 || o.zones > 200 || o.threads < 1 || o.split >= o.zones - 1) {
    fprintf(stderr, "tmk-relay-synth: --zones 2..200, --threads >= 1, --split below zones - 1\n");
    return 2;
  }

  if (o.file) {
    g_file = fopen(o.file, "wb");
    if (!g_file) die("open file");
    fwrite("TMKFILE1", 1, 8, g_file);
  } else if (o.tcp && !o.switch_tcp_at) {
    open_tcp(&o);
  } else {
    open_udp(&o);
  }

  /* Bad input modes. */
  if (o.garbage) {
    uint8_t buf[1500];
    for (uint64_t k = 0; k < o.garbage; k++) {
      size_t len = 1 + rnd() % sizeof buf;
      for (size_t b = 0; b < len; b++) buf[b] = (uint8_t)rnd();
      if (k % 3 == 0 && len > 20) memcpy(buf, "TMK\x01\x00\x01", 6); /* plausible header */
      send_packet(buf, len);
      if (k % 256 == 255) sleep_ms(1);
    }
    printf("SYNTH garbage=%llu\n", (unsigned long long)o.garbage);
    return 0;
  }

  size_t lz4_size = o.no_lz4 ? 0 : tmk_proto_lz4_state_size();
  void* lz4 = NULL;
  if (lz4_size && posix_memalign(&lz4, 16, lz4_size) != 0) lz4 = NULL;
  static uint8_t body[1200 - TMK_PROTO_MAX_HEADER];
  static uint8_t out[1300];
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, body, sizeof body);

  if (o.flood) {
    for (uint64_t k = 0; k < o.flood; k++) {
      uint64_t sid = ((uint64_t)rnd() << 32) | rnd();
      tmk_proto_writer_reset(&w);
      tmk_proto_zone z = {1000, 10, 1, 0};
      tmk_proto_put_zones(&w, &z, 1);
      int n = tmk_proto_finish(&w, sid, 0, out, sizeof out, NULL);
      if (n > 0) send_packet(out, (size_t)n);
      if (k % 256 == 255) sleep_ms(1);
    }
    printf("SYNTH flood=%llu\n", (unsigned long long)o.flood);
    free(lz4);
    return 0;
  }

  w.big_endian = o.big_endian;
  if (!o.no_hello)
    for (int k = 0; k < o.hello_count; k++) send_hello(&o, o.hello_version);
  if (o.hello_version != TMK_PROTO_VERSION) {
    poll_replies(o.linger_ms ? o.linger_ms : 1000);
    free(lz4);
    return 0;
  }

  uint64_t zones_sent = 0, frames = 0, plots = 0, messages = 0;
  tmk_proto_zone* zs = calloc((size_t)o.zones + o.split, sizeof *zs);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (uint64_t i = 0; i < o.packets; i++) {
    uint64_t seq = o.seq_start + i;
    if (o.switch_tcp_at && i == o.switch_tcp_at) {
      open_tcp(&o);
      send_hello(&o, TMK_PROTO_VERSION); /* §6: HELLO again after a TCP reconnect */
    }
    tmk_proto_writer_reset(&w);
    int with_sites = o.sites_late ? (i == 10 || (i + 1 == o.packets && o.packets < 10))
                                  : (i % 50 == 0);
    if (with_sites && put_sites(&w) < 0) {
      fprintf(stderr, "sites do not fit\n");
      return 1;
    }
    if (i == 0) {
      for (uint32_t t = 0; t < o.threads; t++) {
        char name[32];
        int n = snprintf(name, sizeof name, "thread-%u", t);
        tmk_proto_put_thread_name(&w, t, name, (size_t)n);
      }
      tmk_proto_put_team(&w, 1, "render", 6);
      tmk_proto_put_clock(&w, 1000000, 1700000000000000000ull); /* first zone's tick = wall */
    }
    for (uint32_t t = 0; t < o.threads; t++) {
      uint64_t base = 1000000ull + seq * 100000ull + t * 7ull;
      /* With --split K, the packet starts with the last K children of the previous packet's
       * tree (the writer continues them at depth 1, as the agent does when a tree does not fit
       * a packet) and holds its own tree without its last K children. */
      uint32_t nz = 0, keep = o.zones - o.split;
      if (o.split && i > 0)
        for (uint32_t j = keep; j < o.zones; j++, nz++) {
          zs[nz].start = base - 100000ull + 10 + (j - 1) * 400;
          zs[nz].duration = 300 + (j % 7);
          zs[nz].site = 2 + (j % 6);
          zs[nz].depth = 1;
        }
      zs[nz].start = base;
      zs[nz].duration = 90000;
      if (o.long_every && i % o.long_every == o.long_every - 1 && t == 0)
        zs[nz].duration = (1ull << 32) + 1000 + i; /* more than the relay's narrow record holds */
      zs[nz].site = 1;
      zs[nz].depth = 0;
      nz++;
      for (uint32_t j = 1; j < keep; j++, nz++) {
        zs[nz].start = base + 10 + (j - 1) * 400;
        zs[nz].duration = 300 + (j % 7);
        zs[nz].site = 2 + (j % 6);
        zs[nz].depth = 1;
      }
      if (tmk_proto_put_thread(&w, t) < 0) return 1;
      int n = tmk_proto_put_zones(&w, zs, nz);
      if (n != (int)nz) {
        fprintf(stderr, "tmk-relay-synth: only %d of %u zones fit a packet; use fewer\n", n,
                nz);
        return 1;
      }
      zones_sent += (uint64_t)n;
      if (t == 0) {
        if (tmk_proto_put_frame(&w, 0, base + 95000) < 0) return 1;
        frames++;
        int rc = o.big_endian ? tmk_proto_put_plot_d(&w, 8, base + 95001, (double)seq + 0.5)
                              : tmk_proto_put_plot_i(&w, 8, base + 95001, (int64_t)seq);
        if (rc < 0) return 1;
        plots++;
        if (seq % 10 == 0) {
          char buf[64];
          const char* text = o.message_text ? o.message_text : buf;
          int tl = o.message_text
                       ? (int)strlen(o.message_text)
                       : snprintf(buf, sizeof buf, "packet %llu", (unsigned long long)seq);
          if (tmk_proto_put_message(&w, 9, TMK_SEV_INFO, 1, base + 95002, text, (size_t)tl) < 0)
            return 1;
          messages++;
        }
      }
    }
    int n = tmk_proto_finish(&w, o.session, seq, out, sizeof out, lz4);
    if (n < 0) {
      fprintf(stderr, "finish: %s\n", tmk_strerror(n));
      return 1;
    }
    if (o.corrupt_every && i % o.corrupt_every == o.corrupt_every - 1) {
      /* A valid header (this session, this seq) and a body that is guaranteed not to decode:
       * A = 1, N = 0, a record stream of one reserved tag (PROTOCOL.md §5: 0x0E -> ERECORD). */
      uint8_t bad[32];
      size_t k = 0;
      memcpy(bad, "TMK", 3);
      bad[3] = TMK_PROTO_VERSION;
      bad[4] = o.big_endian ? TMK_PKT_F_BIG_ENDIAN : 0;
      bad[5] = TMK_PKT_DATA;
      for (int b = 0; b < 8; b++)
        bad[6 + b] = (uint8_t)(o.session >> (8 * (o.big_endian ? 7 - b : b)));
      k = 14;
      k += (size_t)tmk_proto_varint_put(bad + k, seq);
      k += (size_t)tmk_proto_varint_put(bad + k, 0);
      bad[k++] = 1;
      bad[k++] = 0;
      bad[k++] = 0x0E;
      send_packet(bad, k);
      zones_sent -= (uint64_t)o.zones * o.threads;
      frames--;
      plots--;
      if (seq % 10 == 0) messages--;
    } else {
      send_packet(out, (size_t)n);
    }
    if (o.rate > 0) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      double el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
      double due = (double)(i + 1) / o.rate;
      if (due > el) sleep_ms((int)((due - el) * 1000));
      poll_replies(0);
    } else if (!g_is_tcp && !g_file && i % 64 == 63) {
      sleep_ms(1); /* loopback UDP: let the relay keep up instead of overflowing its socket */
    }
  }
  poll_replies(50);
  if (o.linger_ms) poll_replies(o.linger_ms);
  if (!o.no_bye) {
    int n = tmk_proto_encode_bye(out, sizeof out, o.session);
    if (n > 0) send_packet(out, (size_t)n);
  }
  if (g_file) fclose(g_file);
  if (g_is_tcp) {
    shutdown(g_fd, SHUT_WR);
    poll_replies(200);
  }
  printf("SYNTH session=%016llx packets=%llu zones=%llu frames=%llu plots=%llu messages=%llu\n",
         (unsigned long long)o.session, (unsigned long long)o.packets,
         (unsigned long long)zones_sent, (unsigned long long)frames, (unsigned long long)plots,
         (unsigned long long)messages);
  free(zs);
  free(lz4);
  return 0;
}
