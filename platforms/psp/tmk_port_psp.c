/* tmk_port_psp.c — the PSP port (pspsdk): kernel threads, TLS by thread id, the system time as
 * the clock, UDP and TCP through sceNetInet* (the game brings the network up first:
 * sceNetInit, sceNetInetInit, an access point). No files, no thread-exit hook (the kernel calls
 * none): a game thread calls tmk_thread_exit() before it ends. */
#include <errno.h>
#include <string.h>

#include <netinet/in.h>
#include <pspkerneltypes.h>
#include <pspnet_inet.h>
#include <pspnet_resolver.h>
#include <pspthreadman.h>
#include <psputils.h>

#include "tmk_port.h"

#ifndef SO_NONBLOCK
#define SO_NONBLOCK 0x1009
#endif
#ifndef TCP_NODELAY
#define TCP_NODELAY 0x01
#endif
/* pspsdk's arpa/inet.h and netinet/tcp.h sit at different paths in different SDK layouts: the
 * one declaration and the one constant needed are repeated here (identical to pspsdk's). */
int sceNetInetInetAton(const char* ip, struct in_addr* in);

/* ---- Clock ------------------------------------------------------------------------------ */
uint64_t tmk_port_monotonic_ns(void) { return (uint64_t)sceKernelGetSystemTimeWide() * 1000u; }

uint64_t tmk_port_unix_ns(void) {
  time_t t = 0;
  sceKernelLibcTime(&t);
  return (uint64_t)t * 1000000000u;
}

uint64_t tmk_port_random64(void) {
  uint64_t z = (uint64_t)sceKernelGetSystemTimeWide() + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* ---- TLS -------------------------------------------------------------------------------- */
#define TLS_SLOTS 64
static struct {
  int id;
  void* value;
} tls[TLS_SLOTS];

void* tmk_port_tls_get(void) {
  int self = sceKernelGetThreadId(), i;
  for (i = 0; i < TLS_SLOTS; i++)
    if (tls[i].id == self && tls[i].value) return tls[i].value;
  return NULL;
}

void tmk_port_tls_set(void* v) {
  int self = sceKernelGetThreadId(), i, free_slot = -1;
  for (i = 0; i < TLS_SLOTS; i++) {
    if (tls[i].id == self && tls[i].value) {
      tls[i].value = v;
      return;
    }
    if (free_slot < 0 && !tls[i].value) free_slot = i;
  }
  if (v && free_slot >= 0) {
    tls[free_slot].id = self;
    tls[free_slot].value = v;
  }
}

/* ---- Threads ---------------------------------------------------------------------------- */
static int thread_entry(SceSize args, void* argp) {
  tmk_port_thread* t = *(tmk_port_thread**)argp;
  (void)args;
  t->fn(t->arg);
  return 0;
}

int tmk_port_thread_start(tmk_port_thread* t, void (*fn)(void*), void* arg) {
  t->fn = fn;
  t->arg = arg;
  /* priority 0x20: below a typical game thread (0x18..0x20 is the user range's middle) */
  t->handle = sceKernelCreateThread("telemark", thread_entry, 0x20, 16 * 1024, 0, NULL);
  if (t->handle < 0) return TMK_ESTATE;
  if (sceKernelStartThread(t->handle, sizeof t, &t) < 0) {
    sceKernelDeleteThread(t->handle);
    return TMK_ESTATE;
  }
  return 0;
}

int tmk_port_thread_join(tmk_port_thread* t) {
  int rc = sceKernelWaitThreadEnd(t->handle, NULL);
  sceKernelDeleteThread(t->handle);
  return rc < 0 ? TMK_ESTATE : 0;
}

int tmk_port_on_thread_exit(void (*fn)(void*), void* arg) {
  (void)fn;
  (void)arg;
  return TMK_ENOTSUP;
}

void tmk_port_yield(void) { sceKernelDelayThread(0); }

void tmk_port_sleep_us(uint32_t us) { sceKernelDelayThread(us); }

/* ---- Sockets ---------------------------------------------------------------------------- */
static int resolve(const char* host, uint16_t port, struct sockaddr_in* a) {
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_port = htons(port);
  if (sceNetInetInetAton(host, &a->sin_addr) == 0) {
    int rid;
    char buf[1024];
    if (sceNetResolverCreate(&rid, buf, sizeof buf) < 0) return TMK_ENOTFOUND;
    if (sceNetResolverStartNtoA(rid, host, &a->sin_addr, 2, 3) < 0) {
      sceNetResolverDelete(rid);
      return TMK_ENOTFOUND;
    }
    sceNetResolverDelete(rid);
  }
  return 0;
}

static int open_sock(tmk_port_sock* s, const char* host, uint16_t port, int tcp) {
  struct sockaddr_in a;
  int fd, rc, one = 1;
  memset(s, 0, sizeof *s);
  rc = resolve(host, port, &a);
  if (rc < 0) return rc;
  fd = sceNetInetSocket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
  if (fd < 0) return TMK_ESOCKET;
  sceNetInetSetsockopt(fd, SOL_SOCKET, SO_NONBLOCK, &one, sizeof one);
  if (tcp) sceNetInetSetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  s->open = 1;
  s->fd = fd;
  s->tcp = tcp;
  if (sceNetInetConnect(fd, (struct sockaddr*)&a, sizeof a) == 0) return 0;
  rc = sceNetInetGetErrno();
  if (tcp && (rc == EINPROGRESS || rc == EALREADY || rc == EAGAIN)) return TMK_EAGAIN;
  tmk_port_close(s);
  return TMK_ESOCKET;
}

int tmk_port_udp_open(tmk_port_sock* s, const char* host, uint16_t port) {
  return open_sock(s, host, port, 0);
}

int tmk_port_tcp_connect(tmk_port_sock* s, const char* host, uint16_t port) {
  return open_sock(s, host, port, 1);
}

int tmk_port_tcp_poll_connect(tmk_port_sock* s) {
  int rc = tmk_port_wait_writable(s, 0);
  return rc == 1 ? 0 : rc == 0 ? TMK_EAGAIN : TMK_ESOCKET;
}

static int sock_error(int tcp) {
  int e = sceNetInetGetErrno();
  if (e == EAGAIN || e == EWOULDBLOCK) return TMK_EAGAIN;
  if (!tcp && (e == ECONNREFUSED || e == EHOSTUNREACH)) return TMK_EAGAIN; /* earlier datagram */
  if (e == EPIPE || e == ECONNRESET || e == ENOTCONN) return TMK_ECLOSED;
  return TMK_ESOCKET;
}

int tmk_port_send(tmk_port_sock* s, const void* data, size_t len) {
  int n = (int)sceNetInetSend(s->fd, data, len, 0);
  return n >= 0 ? n : sock_error(s->tcp);
}

int tmk_port_recv(tmk_port_sock* s, void* buf, size_t cap) {
  int n = (int)sceNetInetRecv(s->fd, buf, cap, 0);
  if (n > 0) return n;
  if (n == 0) return s->tcp ? TMK_ECLOSED : TMK_EAGAIN;
  return sock_error(s->tcp);
}

int tmk_port_wait_writable(tmk_port_sock* s, uint32_t timeout_ms) {
  fd_set w;
  struct SceNetInetTimeval tv;
  int n;
  FD_ZERO(&w);
  FD_SET(s->fd, &w);
  tv.tv_sec = timeout_ms / 1000u;
  tv.tv_usec = (timeout_ms % 1000u) * 1000u;
  n = sceNetInetSelect(s->fd + 1, NULL, &w, NULL, &tv);
  if (n < 0) return TMK_ESOCKET;
  return n == 0 ? 0 : 1;
}

void tmk_port_close(tmk_port_sock* s) {
  if (s->open) sceNetInetClose(s->fd);
  memset(s, 0, sizeof *s);
}
