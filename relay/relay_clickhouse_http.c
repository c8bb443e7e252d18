/* relay_clickhouse_http.c — ClickHouse's HTTP interface as the history sink uses it: the byte
 * buffer requests and rows are built in, the --clickhouse URL, and one blocking POST per
 * connection with timeouts (docs/CLICKHOUSE.md). Used by relay_clickhouse.c and relay_history.c. */
#define _GNU_SOURCE /* vmsplice, splice, F_SETPIPE_SZ */
#define _DEFAULT_SOURCE /* munmap */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "relay_clickhouse.h"
#include "relay_clickhouse_http.h"
#include "relay_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Buffer
 * ------------------------------------------------------------------------------------------- */
void tmk__chbuf_free(tmk__chbuf* b) {
  if (b->mapped) munmap(b->p, b->cap);
  else free(b->p);
  memset(b, 0, sizeof *b);
}

int tmk__chbuf_grow(tmk__chbuf* b, size_t n) {
  if (b->len + n <= b->cap) return 1;
  if (b->oom) return 0;
  size_t ncap = b->cap ? b->cap * 2 : 65536;
  while (ncap < b->len + n) ncap *= 2;
  uint8_t* np = b->mapped ? malloc(ncap) : realloc(b->p, ncap);
  if (!np) {
    b->oom = 1;
    return 0;
  }
  if (b->mapped) { /* outgrown (one huge run): an ordinary buffer from here on */
    memcpy(np, b->p, b->len);
    munmap(b->p, b->cap);
    b->mapped = 0;
  }
  b->p = np;
  b->cap = ncap;
  return 1;
}

/* ---------------------------------------------------------------------------------------------
 * URL
 * ------------------------------------------------------------------------------------------- */
static int parse_url(const char* url, char* host, size_t hcap, char* port, size_t pcap,
                     char* params, size_t qcap, char* db, size_t dcap) {
  if (strncmp(url, "http://", 7) != 0) return -1;
  const char* h = url + 7;
  const char* end = h + strcspn(h, "/?");
  const char* colon = memchr(h, ':', (size_t)(end - h));
  const char* hend = colon ? colon : end;
  if (hend == h || (size_t)(hend - h) >= hcap) return -1;
  memcpy(host, h, (size_t)(hend - h));
  host[hend - h] = 0;
  if (colon) {
    size_t n = (size_t)(end - colon - 1);
    if (n == 0 || n >= pcap || strspn(colon + 1, "0123456789") < n) return -1;
    memcpy(port, colon + 1, n);
    port[n] = 0;
    long p = strtol(port, NULL, 10);
    if (p < 1 || p > 65535) return -1;
  } else {
    snprintf(port, pcap, "8123");
  }
  const char* q = strchr(end, '?');
  if (*end == '/' && end[1] && end[1] != '?') return -1; /* only "/" as a path */
  const char* qs = q ? q + 1 : "";
  if (strlen(qs) >= qcap) return -1;
  /* database=NAME: letters, digits, underscore (it is also used unquoted in DDL) */
  snprintf(db, dcap, "telemark");
  const char* d = strstr(qs, "database=");
  if (d && (d == qs || d[-1] == '&')) {
    d += 9;
    size_t n = strcspn(d, "&");
    if (n == 0 || n >= dcap) return -1;
    for (size_t i = 0; i < n; i++) {
      char c = d[i];
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_'))
        return -1;
    }
    memcpy(db, d, n);
    db[n] = 0;
    snprintf(params, qcap, "%s", qs);
  } else {
    snprintf(params, qcap, "database=%s%s%s", db, qs[0] ? "&" : "", qs);
  }
  for (const char* c = params; *c; c++)
    if ((unsigned char)*c <= 0x20 || *c == '#') return -1;
  return 0;
}

int tmk__ch_parse_url(const char* url, tmk__ch_endpoint* ep) {
  return parse_url(url, ep->host, sizeof ep->host, ep->port, sizeof ep->port, ep->params,
                   sizeof ep->params, ep->db, sizeof ep->db);
}

int tmk__ch_check_url(const char* url, char* err, size_t ecap) {
  char host[128], port[8], params[512], db[64];
  if (parse_url(url, host, sizeof host, port, sizeof port, params, sizeof params, db, sizeof db)) {
    snprintf(err, ecap,
             "--clickhouse '%s': expected http://HOST[:PORT]/[?database=NAME], e.g. "
             "http://127.0.0.1:8123/?database=telemark (NAME: letters, digits, _)",
             url);
    return TMK_EINVAL;
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * HTTP: one request per connection (Connection: close), blocking with timeouts.
 * ------------------------------------------------------------------------------------------- */
static void url_encode(tmk__chbuf* b, const char* s) {
  static const char hex[] = "0123456789ABCDEF";
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
        c == '-' || c == '_' || c == '.' || c == '~') {
      tmk__chbuf_put(b, &c, 1);
    } else {
      uint8_t e[3] = {'%', (uint8_t)hex[c >> 4], (uint8_t)hex[c & 15]};
      tmk__chbuf_put(b, e, 3);
    }
  }
}

/* The slowest a request body may go (bytes a second) before the request is given up: far below
 * any LAN or WAN link to a ClickHouse, far above a server that is stuck reading. */
#define SEND_FLOOR_BPS ((uint64_t)1 << 20)

static int connect_to(const tmk__ch_endpoint* ep, char* err, size_t ecap) {
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(ep->host, ep->port, &hints, &ai);
  if (rc != 0 || !ai) {
    snprintf(err, ecap, "cannot resolve %s: %s", ep->host, gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (struct addrinfo* a = ai; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      struct pollfd p = {fd, POLLOUT, 0};
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      if (poll(&p, 1, (int)ep->timeout_ms) == 1 &&
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
        break;
      errno = soerr ? soerr : ETIMEDOUT;
    }
    close(fd);
    fd = -1;
  }
  int e = errno;
  freeaddrinfo(ai);
  if (fd < 0) {
    snprintf(err, ecap, "cannot connect to ClickHouse at %s:%s: %s", ep->host, ep->port,
             strerror(e));
    return -1;
  }
  return fd; /* still non-blocking: tmk__ch_post's waits are polls (send_clock) */
}

/* The socket is non-blocking: every wait is a poll, bounded by the request's deadline and, while
 * sending, by `stall_ms` without room (a splice into a blocking socket goes on for as long as the
 * peer takes a little now and then, whatever its send timeout). `sent` counts the bytes that
 * went out. */
typedef struct send_clock {
  uint64_t deadline;
  uint32_t stall_ms;
  size_t sent;
} send_clock;

/* Waits until fd is ready for `events`, at most until `deadline` (tmk__now_ms) and `most_ms`.
 * Returns 0, or -1 with errno ETIMEDOUT (the deadline passed), EAGAIN (most_ms passed first) or
 * poll's own. */
static int wait_ready(int fd, short events, uint64_t deadline, uint32_t most_ms) {
  for (;;) {
    const uint64_t now = tmk__now_ms();
    if (now >= deadline) {
      errno = ETIMEDOUT;
      return -1;
    }
    const int deadline_first = deadline - now <= most_ms;
    struct pollfd pf = {fd, events, 0};
    int k = poll(&pf, 1, (int)(deadline_first ? deadline - now : most_ms));
    if (k > 0) return 0;
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -1;
    if (!deadline_first) {
      errno = EAGAIN;
      return -1;
    }
  }
}

/* Waits for room to send more. A peer that reads slowly may give no room for a while (POLLOUT
 * needs a third of the send buffer free), so stall_ms without room is a stall only if the peer
 * also took less than STALL_BYTES of what is queued meanwhile (on Linux, TIOCOUTQ: bytes not yet
 * acknowledged; a peer that reads nothing still takes a few KiB as its kernel compacts its
 * receive queue). Elsewhere stall_ms without room is a stall. */
#define STALL_BYTES (64 << 10)
static int wait_room(int fd, const send_clock* sc) {
  int q0 = -1;
#if defined(__linux__) && defined(TIOCOUTQ)
  if (ioctl(fd, TIOCOUTQ, &q0) != 0) q0 = -1;
#endif
  for (;;) {
    if (wait_ready(fd, POLLOUT, sc->deadline, sc->stall_ms) == 0) return 0;
    if (errno != EAGAIN) return -1;
#if defined(__linux__) && defined(TIOCOUTQ)
    int q = -1;
    if (q0 >= 0 && ioctl(fd, TIOCOUTQ, &q) == 0 && q0 - q >= STALL_BYTES) { /* moving */
      q0 = q;
      continue;
    }
    errno = EAGAIN;
#endif
    return -1;
  }
}

static int send_all(int fd, const uint8_t* p, size_t n, send_clock* sc) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_room(fd, sc)) return -1;
      continue;
    }
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
    sc->sent += (size_t)k;
  }
  return 0;
}

/* Sends n bytes at p by lending their pages to the kernel (tmk__ch_post's lend): vmsplice into
 * a pipe, up to its size at a time, then splice from the pipe into the socket, which then holds
 * references to the pages, not copies. Each splice waits as a send would (send_all). Where the
 * kernel has neither call for this pair (nothing sent yet), the bytes are sent with send. Returns
 * 0, or -1 with errno. */
static int send_lent(int fd, const uint8_t* p, size_t n, send_clock* sc) {
#if defined(__linux__) && defined(SPLICE_F_MOVE)
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) return send_all(fd, p, n, sc);
  /* splice has no MSG_NOSIGNAL: a connection ClickHouse has closed would raise SIGPIPE, which
   * kills a process that embeds the relay and does not ignore it. So SIGPIPE is blocked in this
   * thread meanwhile, and one that this send raised is taken off before it is unblocked. */
  sigset_t pipe_set, old_mask, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  const int was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
  /* 1 MiB: 256 pages a vmsplice (the usual most for a user's pipe); else the default 64 KiB */
  int cap = fcntl(pfd[1], F_SETPIPE_SZ, 1 << 20);
  if (cap <= 0) cap = fcntl(pfd[1], F_GETPIPE_SZ);
  if (cap <= 0) cap = 65536;
  int rc = 0, sent = 0;
  while (n) {
    struct iovec iov = {(void*)p, n < (size_t)cap ? n : (size_t)cap};
    ssize_t k = vmsplice(pfd[1], &iov, 1, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      rc = -1;
      break;
    }
    size_t left = (size_t)k;
    while (left) {
      ssize_t m = splice(pfd[0], NULL, fd, NULL, left, SPLICE_F_MOVE | SPLICE_F_MORE);
      if (m < 0 && errno == EINTR) continue;
      if (m < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (wait_room(fd, sc)) {
          rc = -1;
          break;
        }
        continue;
      }
      if (m <= 0) {
        if (m == 0) errno = EPIPE;
        rc = -1;
        break;
      }
      left -= (size_t)m;
      sc->sent += (size_t)m;
      sent = 1;
    }
    if (rc) break;
    p += k;
    n -= (size_t)k;
  }
  int e = errno;
  close(pfd[0]);
  close(pfd[1]);
  if (!was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
    const struct timespec now = {0, 0};
    while (sigtimedwait(&pipe_set, NULL, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  if (rc && !sent && (e == EINVAL || e == ENOSYS || e == EOPNOTSUPP || e == EPERM))
    return send_all(fd, p, n, sc); /* nothing went out (the pipe's lent pages are dropped above) */
  errno = e;
  return rc;
#else
  return send_all(fd, p, n, sc);
#endif
}

size_t tmk__ch_quote(char* dst, size_t cap, const uint8_t* p, size_t n) {
  size_t k = 0;
  for (; k < n && k + 1 < cap; k++) dst[k] = p[k] < 0x20 ? ' ' : (char)p[k];
  dst[k] = 0;
  return k;
}

/* POSTs `sql` (in the URL) with `body`. Returns 0 on HTTP 200 (the response body, up to rcap,
 * in resp when given), -1 with a sentence in err. */
int tmk__ch_post(const tmk__ch_endpoint* ep, const char* params, const char* sql,
                 const uint8_t* body, size_t blen, int lend, tmk__chbuf* resp, size_t rcap,
                 char* err, size_t ecap) {
  tmk__chbuf req = {0};
  char head[256];
  tmk__chbuf_put(&req, "POST /?", 7);
  tmk__chbuf_put(&req, params, strlen(params));
  tmk__chbuf_put(&req, "&query=", 7);
  url_encode(&req, sql);
  int hn = snprintf(head, sizeof head,
                    " HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/octet-stream\r\n"
                    "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                    ep->host, ep->port, blen);
  tmk__chbuf_put(&req, head, (size_t)hn);
  if (req.oom) {
    free(req.p);
    snprintf(err, ecap, "out of memory");
    return -1;
  }
  int fd = connect_to(ep, err, ecap);
  if (fd < 0) {
    free(req.p);
    return -1;
  }
  /* The whole request within timeout_ms plus a second per MiB of body (SEND_FLOOR_BPS), and no
   * send waiting more than timeout_ms: a server that reads the body slowly would otherwise hold
   * this thread for as long as it likes, each send making a little progress. */
  const size_t total = req.len + blen;
  const uint64_t limit_ms = ep->timeout_ms + (uint64_t)total * 1000 / SEND_FLOOR_BPS;
  send_clock sc = {tmk__now_ms() + limit_ms, ep->timeout_ms, 0};
  int rc = send_all(fd, req.p, req.len, &sc);
  free(req.p);
  if (rc == 0 && blen) rc = lend ? send_lent(fd, body, blen, &sc) : send_all(fd, body, blen, &sc);
  if (rc) {
    if (errno == ETIMEDOUT)
      snprintf(err, ecap, "ClickHouse did not take the request within %llu ms (%zu of %zu bytes)",
               (unsigned long long)limit_ms, sc.sent, total);
    else if (errno == EAGAIN || errno == EWOULDBLOCK)
      snprintf(err, ecap,
               "ClickHouse took less than %d KiB of the request in %u ms (%zu of %zu bytes)",
               STALL_BYTES >> 10, ep->timeout_ms, sc.sent, total);
    else
      snprintf(err, ecap, "sending to ClickHouse: %s", strerror(errno));
    close(fd);
    return -1;
  }
  /* The whole answer within timeout_ms, not each read: a server that trickles its answer a
   * byte at a time would otherwise hold this thread for as long as it likes. */
  tmk__chbuf in = {0};
  const uint64_t deadline = tmk__now_ms() + ep->timeout_ms;
  for (;;) {
    if (!tmk__chbuf_room(&in, 65536)) break;
    ssize_t k = recv(fd, in.p + in.len, in.cap - in.len, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        wait_ready(fd, POLLIN, deadline, ep->timeout_ms) == 0)
      continue;
    if (k < 0) {
      if (in.len)
        snprintf(err, ecap, "ClickHouse's answer did not end within %u ms (%zu bytes came)",
                 ep->timeout_ms, in.len);
      else
        snprintf(err, ecap, "no answer from ClickHouse within %u ms (%s)", ep->timeout_ms,
                 strerror(errno));
      close(fd);
      free(in.p);
      return -1;
    }
    if (k == 0) break;
    in.len += (size_t)k;
    if (in.len > rcap + 65536) break; /* more than the caller wants: stop reading */
  }
  close(fd);
  if (in.oom || in.len < 12 || memcmp(in.p, "HTTP/1.", 7) != 0) {
    snprintf(err, ecap, "ClickHouse closed the connection without an HTTP answer");
    free(in.p);
    return -1;
  }
  int status = atoi((const char*)in.p + 9);
  size_t hdr_end = 0;
  for (size_t i = 0; i + 3 < in.len; i++)
    if (memcmp(in.p + i, "\r\n\r\n", 4) == 0) {
      hdr_end = i + 4;
      break;
    }
  if (!hdr_end && status == 200) { /* a 200 whose headers never ended says nothing: it failed */
    snprintf(err, ecap, "ClickHouse's answer was cut short (%zu bytes, its headers unfinished)",
             in.len);
    free(in.p);
    return -1;
  }
  const uint8_t* bodyp = in.p + hdr_end;
  size_t bodyn = hdr_end ? in.len - hdr_end : 0;
  /* ClickHouse answers with chunked encoding to HTTP/1.1: undo it. */
  int chunked = 0;
  for (size_t i = 0; hdr_end && i + 26 < hdr_end; i++)
    if (strncasecmp((const char*)in.p + i, "Transfer-Encoding: chunked", 26) == 0) chunked = 1;
  tmk__chbuf plain = {0};
  if (chunked) {
    size_t i = 0;
    while (i < bodyn) {
      char* endp;
      unsigned long n = strtoul((const char*)bodyp + i, &endp, 16);
      size_t hl = (size_t)((const uint8_t*)endp - (bodyp + i));
      const uint8_t* crlf = memchr(bodyp + i, '\n', bodyn - i);
      if (!crlf || n == 0 || hl == 0) break;
      i = (size_t)(crlf - bodyp) + 1;
      if (n > bodyn - i) n = bodyn - i;
      tmk__chbuf_put(&plain, bodyp + i, n);
      i += n + 2;
    }
    bodyp = plain.p ? plain.p : (const uint8_t*)"";
    bodyn = plain.len;
  }
  if (status != 200) {
    char msg[200];
    tmk__ch_quote(msg, sizeof msg, bodyp, bodyn);
    snprintf(err, ecap, "ClickHouse answered %d: %s", status, msg);
    free(in.p);
    free(plain.p);
    return -1;
  }
  if (resp) {
    if (bodyn > rcap) {
      snprintf(err, ecap, "ClickHouse's answer is larger than %zu bytes", rcap);
      free(in.p);
      free(plain.p);
      return -1;
    }
    tmk__chbuf_put(resp, bodyp, bodyn);
  }
  free(in.p);
  free(plain.p);
  return 0;
}
