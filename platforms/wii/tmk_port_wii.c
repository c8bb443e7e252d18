/* tmk_port_wii.c — the Wii port (libogc): LWP threads, TLS by thread id, the time base as the
 * clock, TCP through the IOS network stack (net_*; call net_init() before tmk_agent_init). No
 * UDP (IOS opens none: the automatic transport falls back to TCP), no files, and no thread-exit
 * hook (libogc has none): a game thread calls tmk_thread_exit() before it ends. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <network.h>
#include <ogc/lwp.h>
#include <ogc/lwp_watchdog.h>
#include <ogcsys.h>

#include "tmk_port.h"

#ifndef F_GETFL
#define F_GETFL 3
#endif
#ifndef F_SETFL
#define F_SETFL 4
#endif
#ifndef POLLOUT
#define POLLOUT 0x0004
#endif

/* ---- Clock ------------------------------------------------------------------------------ */
uint64_t tmk_port_monotonic_ns(void) { return ticks_to_nanosecs(gettime()); }

uint64_t tmk_port_unix_ns(void) { return 0; /* the RTC is seconds since 2000; not needed */ }

uint64_t tmk_port_random64(void) {
  uint64_t z = gettime() + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t tmk_port_fast_ticks_calibrate(void) { return TB_TIMER_CLOCK * 1000u; }

/* ---- TLS: one entry per thread that recorded, found by LWP id ------------------------------ */
#define TLS_SLOTS 64
static struct {
  lwp_t id;
  void* value;
} tls[TLS_SLOTS];

void* tmk_port_tls_get(void) {
  lwp_t self = LWP_GetSelf();
  int i;
  for (i = 0; i < TLS_SLOTS; i++)
    if (tls[i].id == self && tls[i].value) return tls[i].value;
  return NULL;
}

void tmk_port_tls_set(void* v) {
  lwp_t self = LWP_GetSelf();
  int i, free_slot = -1;
  for (i = 0; i < TLS_SLOTS; i++) {
    if (tls[i].id == self && tls[i].value) {
      tls[i].value = v; /* NULL frees the entry */
      return;
    }
    if (free_slot < 0 && !tls[i].value) free_slot = i;
  }
  if (v && free_slot >= 0) { /* full: the thread gets no slot, counted as TMK_DROP_NO_THREAD */
    tls[free_slot].id = self;
    tls[free_slot].value = v;
  }
}

/* ---- Threads ---------------------------------------------------------------------------- */
static void* thread_entry(void* arg) {
  tmk_port_thread* t = (tmk_port_thread*)arg;
  t->fn(t->arg);
  return NULL;
}

int tmk_port_thread_start(tmk_port_thread* t, void (*fn)(void*), void* arg) {
  t->fn = fn;
  t->arg = arg;
  /* libogc allocates the 16 KB stack; priority 40 is below a game's main thread (64) */
  return LWP_CreateThread(&t->handle, thread_entry, t, NULL, 16 * 1024, 40) == 0 ? 0 : TMK_ESTATE;
}

int tmk_port_thread_join(tmk_port_thread* t) {
  return LWP_JoinThread(t->handle, NULL) == 0 ? 0 : TMK_ESTATE;
}

int tmk_port_on_thread_exit(void (*fn)(void*), void* arg) {
  (void)fn;
  (void)arg;
  return TMK_ENOTSUP;
}

void tmk_port_yield(void) { LWP_YieldThread(); }

void tmk_port_sleep_us(uint32_t us) { usleep(us); }

/* ---- Sockets: TCP over IOS -------------------------------------------------------------- */
static int resolve(const char* host, uint16_t port, struct sockaddr_in* a) {
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_port = htons(port);
  a->sin_addr.s_addr = inet_addr(host);
  if (a->sin_addr.s_addr == 0xFFFFFFFFu) {
    struct hostent* h = net_gethostbyname(host);
    if (!h || !h->h_addr_list[0]) return TMK_ENOTFOUND;
    memcpy(&a->sin_addr, h->h_addr_list[0], 4);
  }
  return 0;
}

int tmk_port_udp_open(tmk_port_sock* s, const char* host, uint16_t port) {
  (void)s;
  (void)host;
  (void)port;
  return TMK_ESOCKET; /* IOS has no UDP sockets for applications */
}

int tmk_port_tcp_connect(tmk_port_sock* s, const char* host, uint16_t port) {
  struct sockaddr_in a;
  int32_t fd, rc;
  u32 one = 1;
  memset(s, 0, sizeof *s);
  rc = resolve(host, port, &a);
  if (rc < 0) return rc;
  fd = net_socket(AF_INET, SOCK_STREAM, IPPROTO_IP);
  if (fd < 0) return TMK_ESOCKET;
  net_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  net_fcntl(fd, F_SETFL, (u32)net_fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
  s->open = 1;
  s->fd = fd;
  rc = net_connect(fd, (struct sockaddr*)&a, sizeof a);
  if (rc == 0 || rc == -EISCONN) return 0;
  if (rc == -EINPROGRESS || rc == -EALREADY || rc == -EAGAIN) return TMK_EAGAIN;
  tmk_port_close(s);
  return TMK_ESOCKET;
}

int tmk_port_tcp_poll_connect(tmk_port_sock* s) {
  int rc = tmk_port_wait_writable(s, 0);
  return rc == 1 ? 0 : rc == 0 ? TMK_EAGAIN : TMK_ESOCKET;
}

int tmk_port_send(tmk_port_sock* s, const void* data, size_t len) {
  int32_t n = net_send(s->fd, data, (s32)len, 0);
  if (n >= 0) return (int)n;
  if (n == -EAGAIN || n == -EWOULDBLOCK) return TMK_EAGAIN;
  if (n == -EPIPE || n == -ECONNRESET || n == -ENOTCONN) return TMK_ECLOSED;
  return TMK_ESOCKET;
}

int tmk_port_recv(tmk_port_sock* s, void* buf, size_t cap) {
  int32_t n = net_recv(s->fd, buf, (s32)cap, 0);
  if (n > 0) return (int)n;
  if (n == 0) return TMK_ECLOSED;
  if (n == -EAGAIN || n == -EWOULDBLOCK) return TMK_EAGAIN;
  if (n == -ECONNRESET || n == -ENOTCONN) return TMK_ECLOSED;
  return TMK_ESOCKET;
}

int tmk_port_wait_writable(tmk_port_sock* s, uint32_t timeout_ms) {
  struct pollsd p;
  s32 n;
  p.socket = s->fd;
  p.events = POLLOUT;
  p.revents = 0;
  n = net_poll(&p, 1, (s32)timeout_ms);
  if (n < 0) return TMK_ESOCKET;
  if (n == 0) return 0;
  return (p.revents & POLLOUT) ? 1 : TMK_ECLOSED;
}

void tmk_port_close(tmk_port_sock* s) {
  if (s->open) net_close(s->fd);
  memset(s, 0, sizeof *s);
}
