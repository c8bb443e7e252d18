/* tmk_port_posix.c — the POSIX implementation of platforms/tmk_port.h (Linux, macOS, BSDs):
 * clock_gettime, pthreads (thread exit through a key destructor), BSD sockets in non-blocking
 * mode, stdio files. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE 1

#include "tmk_port.h"
#include "tmk_port_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>
#include <unistd.h>


/* ---- TLS ---------------------------------------------------------------------------------- */

#if TMK_NO_THREADS
void* tmk_port_posix_tls;
#else
__thread void* tmk_port_posix_tls __attribute__((tls_model("initial-exec")));
#endif

#if TMK_PORT_HAS_THREADS || !TMK_PORT_FAST_TICKS_NS
static void sleep_us(uint32_t us) {
  struct timespec ts;
  ts.tv_sec = (time_t)(us / 1000000u);
  ts.tv_nsec = (long)(us % 1000000u) * 1000;
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}
#endif

/* ---- Clock -------------------------------------------------------------------------------- */

uint64_t tmk_port_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t tmk_port_unix_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#if !TMK_PORT_FAST_TICKS_NS
uint64_t tmk_port_fast_ticks_calibrate(void) {
  /* Measure the counter against CLOCK_MONOTONIC over ~20 ms; take the best of 2 spans. */
  uint64_t best = 0;
  int i;
  for (i = 0; i < 2; i++) {
    uint64_t n0 = tmk_port_monotonic_ns(), t0 = tmk_port_fast_ticks(), n1, t1;
    sleep_us(10000);
    n1 = tmk_port_monotonic_ns();
    t1 = tmk_port_fast_ticks();
    if (n1 > n0 && t1 > t0) {
      double f = (double)(t1 - t0) * 1e9 / (double)(n1 - n0);
      if (best == 0 || (uint64_t)f < best) best = (uint64_t)f;
    }
  }
  return best ? best : 1000000000u;
}
#endif

/* ---- Threads ------------------------------------------------------------------------------ */

#if TMK_PORT_HAS_THREADS
static void* thread_main(void* p) {
  tmk_port_thread* t = (tmk_port_thread*)p;
  t->fn(t->arg);
  return NULL;
}

int tmk_port_thread_start(tmk_port_thread* t, void (*fn)(void*), void* arg) {
  t->fn = fn;
  t->arg = arg;
  return pthread_create(&t->handle, NULL, thread_main, t) == 0 ? 0 : TMK_ESTATE;
}

int tmk_port_thread_join(tmk_port_thread* t) {
  return pthread_join(t->handle, NULL) == 0 ? 0 : TMK_ESTATE;
}

#if TMK_PORT_HAS_THREAD_NAME
void tmk_port_thread_name(const char* name) { prctl(PR_SET_NAME, name, 0, 0, 0); }
#endif

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static void (*exit_fn)(void*);

static void exit_destructor(void* arg) {
  void (*fn)(void*) = __atomic_load_n(&exit_fn, __ATOMIC_ACQUIRE);
  if (fn && arg) fn(arg);
}
static void exit_key_create(void) { pthread_key_create(&exit_key, exit_destructor); }

int tmk_port_on_thread_exit(void (*fn)(void*), void* arg) {
  pthread_once(&exit_once, exit_key_create);
  __atomic_store_n(&exit_fn, fn, __ATOMIC_RELEASE);
  return pthread_setspecific(exit_key, arg) == 0 ? 0 : TMK_ESTATE;
}

void tmk_port_yield(void) { sched_yield(); }

void tmk_port_sleep_us(uint32_t us) { sleep_us(us); }
#endif

uint64_t tmk_port_random64(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd >= 0) {
    ssize_t n = read(fd, &v, sizeof v);
    close(fd);
    if (n == (ssize_t)sizeof v && v != 0) return v;
  }
  /* Fallback: mix time and pid through splitmix64. */
  v = tmk_port_monotonic_ns() ^ ((uint64_t)getpid() << 32) ^ tmk_port_unix_ns();
  v += 0x9E3779B97F4A7C15ull;
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

/* ---- Sockets ------------------------------------------------------------------------------ */

static int fail_udp;

void tmk_port_test_fail_udp(int on) { __atomic_store_n(&fail_udp, on, __ATOMIC_RELAXED); }

static int resolve(const char* host, uint16_t port, int socktype, struct sockaddr_storage* out,
                   socklen_t* out_len) {
  struct addrinfo hints, *res = NULL, *ai, *pick;
  char service[8];
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  snprintf(service, sizeof service, "%u", (unsigned)port);
  if (getaddrinfo(host, service, &hints, &res) != 0 || !res) return TMK_ENOTFOUND;
  /* Prefer IPv4: "localhost" often lists ::1 first while relays listen on 0.0.0.0. */
  pick = res;
  for (ai = res; ai; ai = ai->ai_next)
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  memcpy(out, pick->ai_addr, pick->ai_addrlen);
  *out_len = (socklen_t)pick->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

static int set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int tmk_port_udp_open(tmk_port_sock* s, const char* host, uint16_t port) {
  struct sockaddr_storage sa;
  socklen_t sl = 0;
  int fd, rc;
  memset(s, 0, sizeof *s);
  if (__atomic_load_n(&fail_udp, __ATOMIC_RELAXED)) return TMK_ESOCKET;
  rc = resolve(host, port, SOCK_DGRAM, &sa, &sl);
  if (rc < 0) return rc;
  fd = socket(sa.ss_family, SOCK_DGRAM, 0);
  if (fd < 0) return TMK_ESOCKET;
  if (set_nonblocking(fd) < 0 || connect(fd, (struct sockaddr*)&sa, sl) < 0) {
    close(fd);
    return TMK_ESOCKET;
  }
  s->fd = fd;
  s->open = 1;
  return 0;
}

int tmk_port_tcp_connect(tmk_port_sock* s, const char* host, uint16_t port) {
  struct sockaddr_storage sa;
  socklen_t sl = 0;
  int fd, rc, one = 1;
  memset(s, 0, sizeof *s);
  rc = resolve(host, port, SOCK_STREAM, &sa, &sl);
  if (rc < 0) return rc;
  fd = socket(sa.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return TMK_ESOCKET;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (set_nonblocking(fd) < 0) {
    close(fd);
    return TMK_ESOCKET;
  }
  s->fd = fd;
  s->tcp = 1;
  s->open = 1;
  if (connect(fd, (struct sockaddr*)&sa, sl) == 0) return 0;
  if (errno == EINPROGRESS || errno == EINTR) return TMK_EAGAIN;
  close(fd);
  memset(s, 0, sizeof *s);
  return TMK_ESOCKET;
}

int tmk_port_tcp_poll_connect(tmk_port_sock* s) {
  struct pollfd p;
  int err = 0;
  socklen_t el = sizeof err;
  if (!s->open) return TMK_ESTATE;
  p.fd = s->fd;
  p.events = POLLOUT;
  p.revents = 0;
  if (poll(&p, 1, 0) <= 0) return TMK_EAGAIN;
  if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err != 0) return TMK_ESOCKET;
  return 0;
}

int tmk_port_send(tmk_port_sock* s, const void* data, size_t len) {
  ssize_t n;
  if (!s->open) return TMK_ESTATE;
  do {
    n = send(s->fd, data, len, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n >= 0) return (int)n;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return TMK_EAGAIN;
  if (errno == EPIPE || errno == ECONNRESET) return TMK_ECLOSED;
  return TMK_ESOCKET;
}

int tmk_port_recv(tmk_port_sock* s, void* buf, size_t cap) {
  ssize_t n;
  if (!s->open) return TMK_ESTATE;
  do {
    n = recv(s->fd, buf, cap, 0);
  } while (n < 0 && errno == EINTR);
  if (n > 0) return (int)n;
  if (n == 0) return s->tcp ? TMK_ECLOSED : 0;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return TMK_EAGAIN;
  if (errno == ECONNREFUSED && !s->tcp) return TMK_EAGAIN; /* ICMP from an absent relay */
  if (errno == ECONNRESET) return TMK_ECLOSED;
  return TMK_ESOCKET;
}

int tmk_port_wait_writable(tmk_port_sock* s, uint32_t timeout_ms) {
  struct pollfd p;
  int rc;
  if (!s->open) return TMK_ESTATE;
  p.fd = s->fd;
  p.events = POLLOUT;
  p.revents = 0;
  rc = poll(&p, 1, (int)timeout_ms);
  if (rc < 0) return errno == EINTR ? 0 : TMK_ESOCKET;
  if (rc == 0) return 0;
  if (p.revents & (POLLERR | POLLHUP)) return TMK_ECLOSED;
  return 1;
}

void tmk_port_close(tmk_port_sock* s) {
  if (s->open) close(s->fd);
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

/* ---- Wake-ups ----------------------------------------------------------------------------- */
#if TMK_PORT_HAS_WAKE
static int nonblocking_cloexec(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -1;
  return fcntl(fd, F_SETFD, FD_CLOEXEC);
}

int tmk_port_wake_open(tmk_port_wake* w) {
  int fds[2];
  w->rd = w->wr = -1;
  if (pipe(fds) != 0) return TMK_ESTATE;
  if (nonblocking_cloexec(fds[0]) < 0 || nonblocking_cloexec(fds[1]) < 0) {
    close(fds[0]);
    close(fds[1]);
    return TMK_ESTATE;
  }
  w->rd = fds[0];
  w->wr = fds[1];
  return 0;
}

void tmk_port_wake_signal(tmk_port_wake* w) {
  char c = 1;
  ssize_t n = write(w->wr, &c, 1); /* a full pipe already holds a wake-up */
  (void)n;
}

int tmk_port_wake_wait(tmk_port_wake* w, uint32_t timeout_us) {
  struct pollfd p;
  char buf[64];
  int got = 0;
  p.fd = w->rd;
  p.events = POLLIN;
  p.revents = 0;
  if (poll(&p, 1, (int)((timeout_us + 999u) / 1000u)) <= 0) return 0;
  while (read(w->rd, buf, sizeof buf) > 0) got = 1;
  return got;
}

void tmk_port_wake_close(tmk_port_wake* w) {
  if (w->rd >= 0) close(w->rd);
  if (w->wr >= 0) close(w->wr);
  w->rd = w->wr = -1;
}
#endif
