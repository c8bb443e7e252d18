/* tmk_port_win32.c — the Windows implementation of platforms/tmk_port.h: QueryPerformanceCounter,
 * Win32 threads (CreateThread, not winpthreads) with thread exit seen through a fiber-local
 * storage callback, TlsGetValue TLS, Winsock 2 in non-blocking mode, stdio files. */
#ifndef _WIN32_WINNT
#define _WIN32_WINNT 0x0600 /* Vista: InitOnceExecuteOnce */
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>

#include <stdio.h>
#include <string.h>

#include "tmk_port.h"

#ifndef SIO_UDP_CONNRESET
#define SIO_UDP_CONNRESET _WSAIOW(IOC_VENDOR, 12)
#endif

/* ---- Clock -------------------------------------------------------------------------------- */

static uint64_t qpc_freq(void) {
  static volatile LONG64 freq; /* 0 until first asked; the value never changes */
  LARGE_INTEGER f;
  if (freq) return (uint64_t)freq;
  QueryPerformanceFrequency(&f);
  freq = f.QuadPart > 0 ? f.QuadPart : 1;
  return (uint64_t)freq;
}

uint64_t tmk_port_monotonic_ns(void) {
  LARGE_INTEGER c;
  uint64_t f = qpc_freq(), v;
  QueryPerformanceCounter(&c);
  v = (uint64_t)c.QuadPart;
  return (v / f) * 1000000000u + (v % f) * 1000000000u / f;
}

uint64_t tmk_port_unix_ns(void) {
  FILETIME ft;
  uint64_t t;
  GetSystemTimeAsFileTime(&ft);
  t = ((uint64_t)ft.dwHighDateTime << 32) | ft.dwLowDateTime; /* 100 ns since 1601 */
  return t < 116444736000000000ull ? 0 : (t - 116444736000000000ull) * 100u;
}

uint64_t tmk_port_random64(void) {
  uint64_t v = tmk_port_monotonic_ns() ^ ((uint64_t)GetCurrentProcessId() << 32) ^
               tmk_port_unix_ns() ^ ((uint64_t)GetCurrentThreadId() << 16);
  v += 0x9E3779B97F4A7C15ull; /* splitmix64 */
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

/* ---- TLS ---------------------------------------------------------------------------------- */

static INIT_ONCE tls_once = INIT_ONCE_STATIC_INIT;
static volatile DWORD tls_index_plus1; /* 0 until the index exists */

static BOOL CALLBACK tls_create(PINIT_ONCE once, PVOID param, PVOID* ctx) {
  DWORD i = TlsAlloc();
  (void)once, (void)param, (void)ctx;
  if (i != TLS_OUT_OF_INDEXES) tls_index_plus1 = i + 1;
  return TRUE;
}

void* tmk_port_tls_get(void) {
  DWORD i = tls_index_plus1;
  return i ? TlsGetValue(i - 1) : NULL;
}

void tmk_port_tls_set(void* v) {
  InitOnceExecuteOnce(&tls_once, tls_create, NULL, NULL);
  if (tls_index_plus1) TlsSetValue(tls_index_plus1 - 1, v);
}

/* ---- Threads ------------------------------------------------------------------------------ */

#if TMK_PORT_HAS_THREADS
static INIT_ONCE exit_once = INIT_ONCE_STATIC_INIT;
static DWORD exit_index = FLS_OUT_OF_INDEXES;
static void (*volatile exit_fn)(void*);

/* Windows calls this for every thread that exits holding a non-NULL value in the slot. */
static void WINAPI exit_callback(void* arg) {
  void (*fn)(void*) = exit_fn;
  if (fn && arg) fn(arg);
}

static BOOL CALLBACK exit_create(PINIT_ONCE once, PVOID param, PVOID* ctx) {
  (void)once, (void)param, (void)ctx;
  exit_index = FlsAlloc(exit_callback);
  return TRUE;
}

int tmk_port_on_thread_exit(void (*fn)(void*), void* arg) {
  InitOnceExecuteOnce(&exit_once, exit_create, NULL, NULL);
  if (exit_index == FLS_OUT_OF_INDEXES) return TMK_ENOTSUP;
  exit_fn = fn;
  return FlsSetValue(exit_index, arg) ? 0 : TMK_ESTATE;
}

static DWORD WINAPI thread_main(LPVOID p) {
  tmk_port_thread* t = (tmk_port_thread*)p;
  t->fn(t->arg);
  return 0;
}

int tmk_port_thread_start(tmk_port_thread* t, void (*fn)(void*), void* arg) {
  t->fn = fn;
  t->arg = arg;
  t->handle = CreateThread(NULL, 0, thread_main, t, 0, NULL);
  return t->handle ? 0 : TMK_ESTATE;
}

int tmk_port_thread_join(tmk_port_thread* t) {
  DWORD rc;
  if (!t->handle) return TMK_ESTATE;
  rc = WaitForSingleObject((HANDLE)t->handle, INFINITE);
  CloseHandle((HANDLE)t->handle);
  t->handle = NULL;
  return rc == WAIT_OBJECT_0 ? 0 : TMK_ESTATE;
}

void tmk_port_yield(void) { SwitchToThread(); }

void tmk_port_sleep_us(uint32_t us) { Sleep((us + 999u) / 1000u); }
#endif

/* ---- Sockets ------------------------------------------------------------------------------ */

static INIT_ONCE wsa_once = INIT_ONCE_STATIC_INIT;
static int wsa_ok;

static BOOL CALLBACK wsa_start(PINIT_ONCE once, PVOID param, PVOID* ctx) {
  WSADATA wd;
  (void)once, (void)param, (void)ctx;
  wsa_ok = WSAStartup(MAKEWORD(2, 2), &wd) == 0; /* once per process; never cleaned up */
  return TRUE;
}

static int resolve(const char* host, uint16_t port, int socktype, struct sockaddr_storage* out,
                   int* out_len) {
  struct addrinfo hints, *res = NULL, *ai, *pick;
  char service[8];
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  snprintf(service, sizeof service, "%u", (unsigned)port);
  if (getaddrinfo(host, service, &hints, &res) != 0 || !res) return TMK_ENOTFOUND;
  pick = res; /* prefer IPv4, as the POSIX port does */
  for (ai = res; ai; ai = ai->ai_next)
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  memcpy(out, pick->ai_addr, pick->ai_addrlen);
  *out_len = (int)pick->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

static int open_socket(tmk_port_sock* s, const char* host, uint16_t port, int tcp,
                       struct sockaddr_storage* sa, int* sl) {
  SOCKET fd;
  u_long on = 1;
  int rc;
  memset(s, 0, sizeof *s);
  InitOnceExecuteOnce(&wsa_once, wsa_start, NULL, NULL);
  if (!wsa_ok) return TMK_ESOCKET;
  rc = resolve(host, port, tcp ? SOCK_STREAM : SOCK_DGRAM, sa, sl);
  if (rc < 0) return rc;
  fd = socket(sa->ss_family, tcp ? SOCK_STREAM : SOCK_DGRAM, tcp ? IPPROTO_TCP : IPPROTO_UDP);
  if (fd == INVALID_SOCKET) return TMK_ESOCKET;
  if (ioctlsocket(fd, FIONBIO, &on) != 0) {
    closesocket(fd);
    return TMK_ESOCKET;
  }
  if (tcp) {
    BOOL nodelay = TRUE;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, (const char*)&nodelay, sizeof nodelay);
  } else {
    /* Do not report ICMP "port unreachable" as WSAECONNRESET on later calls (best effort: the
     * send/recv below treat it as "try again" anyway). */
    BOOL off = FALSE;
    DWORD got = 0;
    WSAIoctl(fd, SIO_UDP_CONNRESET, &off, sizeof off, NULL, 0, &got, NULL, NULL);
  }
  s->s = (uintptr_t)fd;
  s->tcp = tcp;
  s->open = 1;
  return 0;
}

int tmk_port_udp_open(tmk_port_sock* s, const char* host, uint16_t port) {
  struct sockaddr_storage sa;
  int sl = 0, rc = open_socket(s, host, port, 0, &sa, &sl);
  if (rc < 0) return rc;
  if (connect((SOCKET)s->s, (struct sockaddr*)&sa, sl) != 0) {
    tmk_port_close(s);
    return TMK_ESOCKET;
  }
  return 0;
}

int tmk_port_tcp_connect(tmk_port_sock* s, const char* host, uint16_t port) {
  struct sockaddr_storage sa;
  int sl = 0, rc = open_socket(s, host, port, 1, &sa, &sl), err;
  if (rc < 0) return rc;
  if (connect((SOCKET)s->s, (struct sockaddr*)&sa, sl) == 0) return 0;
  err = WSAGetLastError();
  if (err == WSAEWOULDBLOCK || err == WSAEINPROGRESS) return TMK_EAGAIN;
  tmk_port_close(s);
  return TMK_ESOCKET;
}

/* Returns 1 when the socket is writable within timeout_ms, 0 if not, -1 when it failed. */
static int select_writable(SOCKET fd, uint32_t timeout_ms) {
  fd_set w, e;
  struct timeval tv;
  int rc;
  FD_ZERO(&w);
  FD_ZERO(&e);
  FD_SET(fd, &w);
  FD_SET(fd, &e);
  tv.tv_sec = (long)(timeout_ms / 1000u);
  tv.tv_usec = (long)(timeout_ms % 1000u) * 1000;
  rc = select(0, NULL, &w, &e, &tv); /* the first argument is ignored on Windows */
  if (rc < 0) return -1;
  if (FD_ISSET(fd, &e)) return -1;
  return FD_ISSET(fd, &w) ? 1 : 0;
}

int tmk_port_tcp_poll_connect(tmk_port_sock* s) {
  int rc, err = 0, el = sizeof err;
  if (!s->open) return TMK_ESTATE;
  rc = select_writable((SOCKET)s->s, 0);
  if (rc == 0) return TMK_EAGAIN;
  if (rc < 0) return TMK_ESOCKET;
  if (getsockopt((SOCKET)s->s, SOL_SOCKET, SO_ERROR, (char*)&err, &el) != 0 || err != 0)
    return TMK_ESOCKET;
  return 0;
}

/* Maps a failed send/recv. WSAECONNRESET on UDP is the ICMP of an earlier datagram: again. */
static int sock_error(const tmk_port_sock* s) {
  int err = WSAGetLastError();
  if (err == WSAEWOULDBLOCK || err == WSAEINTR || err == WSAEINPROGRESS) return TMK_EAGAIN;
  if (!s->tcp && (err == WSAECONNRESET || err == WSAENETRESET || err == WSAEMSGSIZE))
    return TMK_EAGAIN;
  if (err == WSAECONNRESET || err == WSAECONNABORTED || err == WSAESHUTDOWN ||
      err == WSAENOTCONN)
    return TMK_ECLOSED;
  return TMK_ESOCKET;
}

int tmk_port_send(tmk_port_sock* s, const void* data, size_t len) {
  int n;
  if (!s->open) return TMK_ESTATE;
  if (len > 0x7FFFFFFFu) len = 0x7FFFFFFFu;
  n = send((SOCKET)s->s, (const char*)data, (int)len, 0); /* Windows raises no SIGPIPE */
  return n >= 0 ? n : sock_error(s);
}

int tmk_port_recv(tmk_port_sock* s, void* buf, size_t cap) {
  int n;
  if (!s->open) return TMK_ESTATE;
  if (cap > 0x7FFFFFFFu) cap = 0x7FFFFFFFu;
  n = recv((SOCKET)s->s, (char*)buf, (int)cap, 0);
  if (n > 0) return n;
  if (n == 0) return s->tcp ? TMK_ECLOSED : 0;
  return sock_error(s);
}

int tmk_port_wait_writable(tmk_port_sock* s, uint32_t timeout_ms) {
  int rc;
  if (!s->open) return TMK_ESTATE;
  rc = select_writable((SOCKET)s->s, timeout_ms);
  return rc < 0 ? TMK_ECLOSED : rc;
}

void tmk_port_close(tmk_port_sock* s) {
  if (s->open) closesocket((SOCKET)s->s);
  memset(s, 0, sizeof *s);
}

/* ---- Files -------------------------------------------------------------------------------- */

void* tmk_port_file_create(const char* path) { return fopen(path, "wb"); }

int tmk_port_file_write(void* f, const void* data, size_t len) {
  return fwrite(data, 1, len, (FILE*)f) == len ? 0 : TMK_EIO;
}

void tmk_port_file_close(void* f) {
  if (f) fclose((FILE*)f);
}
