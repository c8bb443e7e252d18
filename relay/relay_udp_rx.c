/* relay_udp_rx.c — the UDP receive thread: it takes datagrams off the socket as soon as they
 * arrive (recvmmsg) and appends them to a bounded queue in memory, which the loop decodes from.
 * A loop that falls behind (a burst, --ingest-nice on a machine the game shares) then loses
 * nothing to a full socket buffer; a full queue drops the datagram and counts it. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "relay_internal.h"

#define RX_BATCH 32            /* datagrams per recvmmsg call */
#define RX_DGRAM TMK__RXQ_MAX_DGRAM /* receive buffer per datagram */
/* The receive buffers lie RX_DGRAM and 33 cache lines apart: 64 KiB apart, the datagrams of a
 * batch would all start in the same cache sets, more of them than the caches have ways, and the
 * copy into the queue would read them back from memory. */
#define RX_STRIDE (RX_DGRAM + 33 * 64)
#define RX_SLICE 32            /* datagrams the loop decodes before it turns to its other work */
/* After a wake-up that found at least RX_BUSY datagrams the thread naps before it polls again,
 * so that a busy stream is read a batch at a time instead of a wake-up (a poll, a sleep, a task
 * switch) every few datagrams. The nap is as long as the socket's receive buffer allows: at most
 * a sixteenth of it filled meanwhile by RX_PEAK_BPUS bytes a microsecond (as the kernel counts a
 * datagram: ~2.3 KB for 1,200 bytes; 400 is ~170,000 such datagrams a second), between
 * RX_NAP_MIN_US and RX_NAP_MAX_US: 500 us with the relay's usual 8 MiB or more, 100 us with a
 * stock 208 KiB (docs/AGENT.md "Measured"). */
#define RX_BUSY 4
#define RX_PEAK_BPUS 400
#define RX_NAP_MIN_US 100
#define RX_NAP_MAX_US 500

struct tmk__udp_rx {
  tmk_relay* relay;
  int fd;                      /* the relay's UDP socket (libuv's handle sends on it) */
  int wake[2];                 /* a byte on wake[1] stops the thread */
  pthread_t th;
  int running;
  tmk__rxq q;
  uint8_t* batch;              /* [rx] RX_BATCH receive buffers */
  long nap_ns;                 /* the nap after a busy wake-up (RX_BUSY) */
  uv_async_t async;            /* rx -> loop: the queue has datagrams */
  int async_open;
  /* The thread's CPU time, read by whoever asks (tmk__udp_rx_counters) through the thread's
   * CPU clock while it runs: on a VM such a read is a system call of 1-2 us, too dear for
   * every wake-up of the thread itself. At its exit the thread stores the final figure. */
  clockid_t clock;
  _Atomic int has_clock; /* set by the thread once `clock` is its CPU clock */
  _Atomic int exited;
  _Atomic uint64_t cpu_ns;
};

/* ---------------------------------------------------------------------------------------------
 * The thread
 * ------------------------------------------------------------------------------------------- */
/* Reads what the socket holds, up to RX_BATCH datagrams a call. Returns how many it queued or
 * dropped; -1 when the socket failed for good. */
static int read_socket(tmk__udp_rx* rx) {
  int total = 0;
#ifdef __linux__
  struct mmsghdr m[RX_BATCH];
  struct iovec iov[RX_BATCH];
  struct sockaddr_storage from[RX_BATCH];
  for (;;) {
    memset(m, 0, sizeof m);
    for (int i = 0; i < RX_BATCH; i++) {
      iov[i].iov_base = rx->batch + (size_t)i * RX_STRIDE;
      iov[i].iov_len = RX_DGRAM;
      m[i].msg_hdr.msg_iov = &iov[i];
      m[i].msg_hdr.msg_iovlen = 1;
      m[i].msg_hdr.msg_name = &from[i];
      m[i].msg_hdr.msg_namelen = sizeof from[i];
    }
    int n = recvmmsg(rx->fd, m, RX_BATCH, MSG_DONTWAIT, NULL);
    if (n <= 0) return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                               errno != ECONNREFUSED && total == 0 ? -1 : total;
    for (int i = 0; i < n; i++) {
      if (m[i].msg_hdr.msg_flags & MSG_TRUNC) {
        atomic_fetch_add(&rx->relay->garbage, 1);
        continue;
      }
      tmk__rxq_put(&rx->q, iov[i].iov_base, m[i].msg_len, (const struct sockaddr*)&from[i],
                   m[i].msg_hdr.msg_namelen);
    }
    tmk__rxq_publish(&rx->q); /* the batch at once: one touch of the reader's lines */
    total += n;
    if (n < RX_BATCH) return total;
  }
#else
  for (;;) {
    struct sockaddr_storage from;
    socklen_t alen = sizeof from;
    ssize_t n = recvfrom(rx->fd, rx->batch, RX_DGRAM, MSG_DONTWAIT, (struct sockaddr*)&from,
                         &alen);
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && total == 0
                          ? -1 : total;
    tmk__rxq_push(&rx->q, rx->batch, (size_t)n, (const struct sockaddr*)&from, (uint32_t)alen);
    total++;
  }
#endif
}

static void* rx_main(void* arg) {
  tmk__udp_rx* rx = arg;
  tmk__name_thread("tmk-relay-rx");
#ifdef __linux__
  if (pthread_getcpuclockid(pthread_self(), &rx->clock) == 0) atomic_store(&rx->has_clock, 1);
#endif
  for (;;) {
    struct pollfd p[2] = {{rx->fd, POLLIN, 0}, {rx->wake[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    if (p[0].revents & POLLNVAL) break;
    int n = read_socket(rx);
    if (n > 0) uv_async_send(&rx->async);
    if (!atomic_load(&rx->has_clock)) atomic_store(&rx->cpu_ns, tmk__own_cpu_ns());
    if (n < 0) {
      tmk_relay__log(&rx->relay->log, TMK_LOG_ERROR, "udp receive failed: %s; UDP ingest stops",
                     strerror(errno));
      break;
    }
    if (n >= RX_BUSY) {
      struct timespec nap = {0, rx->nap_ns};
      nanosleep(&nap, NULL);
    }
  }
  atomic_store(&rx->cpu_ns, tmk__own_cpu_ns());
  atomic_store(&rx->exited, 1);
  return NULL;
}

/* [loop] decodes up to max queued datagrams (SIZE_MAX: all); 1 when more are waiting. */
static int decode_queued(tmk__udp_rx* rx, size_t max) {
  size_t len;
  const struct sockaddr* from;
  const uint8_t* p;
  for (size_t i = 0; i < max && (p = tmk__rxq_peek(&rx->q, &len, &from)); i++) {
    tmk__ingest_packet(rx->relay, p, len, from);
    tmk__rxq_pop(&rx->q);
  }
  return !tmk__rxq_empty(&rx->q);
}

/* [loop] decodes a slice of the queue, and comes back after the loop's other work if more is
 * waiting. */
static void rx_ready(uv_async_t* h) {
  tmk__udp_rx* rx = h->data;
  if (decode_queued(rx, RX_SLICE)) uv_async_send(&rx->async);
}

tmk__udp_rx* tmk__udp_rx_start(tmk_relay* r, int fd, size_t queue_bytes) {
  tmk__udp_rx* rx = calloc(1, sizeof *rx);
  if (!rx) return NULL;
  rx->relay = r;
  rx->fd = fd;
  rx->wake[0] = rx->wake[1] = -1;
  int rcvbuf = 0;
  socklen_t sl = sizeof rcvbuf;
  if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &sl) != 0) rcvbuf = 0;
  long nap_us = rcvbuf / 16 / RX_PEAK_BPUS;
  if (nap_us < RX_NAP_MIN_US) nap_us = RX_NAP_MIN_US;
  if (nap_us > RX_NAP_MAX_US) nap_us = RX_NAP_MAX_US;
  rx->nap_ns = nap_us * 1000L;
  rx->batch = malloc((size_t)RX_BATCH * RX_STRIDE);
  if (!rx->batch || tmk__rxq_init(&rx->q, queue_bytes) != 0 || pipe(rx->wake) != 0 ||
      uv_async_init(r->loop, &rx->async, rx_ready) != 0) {
    tmk__udp_rx_stop(rx);
    tmk__udp_rx_free(rx);
    return NULL;
  }
  rx->async_open = 1;
  rx->async.data = rx;
  if (pthread_create(&rx->th, NULL, rx_main, rx) != 0) {
    tmk__udp_rx_stop(rx);
    tmk__udp_rx_free(rx);
    return NULL;
  }
  rx->running = 1;
  return rx;
}

void tmk__udp_rx_stop(tmk__udp_rx* rx) {
  if (!rx) return;
  if (rx->running) {
    const char b = 1;
    while (write(rx->wake[1], &b, 1) < 0 && errno == EINTR) {
    }
    pthread_join(rx->th, NULL);
    rx->running = 0;
    /* What was received is decoded, not dropped: the loop's callback may not run again. */
    decode_queued(rx, SIZE_MAX);
  }
  if (rx->async_open) {
    uv_close((uv_handle_t*)&rx->async, NULL);
    rx->async_open = 0;
  }
}

void tmk__udp_rx_free(tmk__udp_rx* rx) {
  if (!rx) return;
  if (rx->wake[0] >= 0) close(rx->wake[0]);
  if (rx->wake[1] >= 0) close(rx->wake[1]);
  tmk__rxq_free(&rx->q);
  free(rx->batch);
  free(rx);
}

int tmk__udp_rx_backlog(tmk__udp_rx* rx) { return rx && !tmk__rxq_empty(&rx->q); }

void tmk__udp_rx_counters(tmk__udp_rx* rx, tmk__rxq_counters* out) {
  memset(out, 0, sizeof *out);
  if (!rx) return;
  out->capacity = rx->q.cap;
  out->memory = atomic_load(&rx->q.mapped);
  out->bytes = tmk__rxq_bytes(&rx->q);
  out->peak = atomic_load(&rx->q.peak);
  out->datagrams = atomic_load(&rx->q.datagrams);
  out->drops = atomic_load(&rx->q.drops);
  out->drop_bytes = atomic_load(&rx->q.drop_bytes);
  struct timespec ts;
  /* While the thread runs, its clock; once it has exited (or when the read fails because it
   * just did: it stores its figure before it exits), the figure it stored. */
  if (atomic_load(&rx->has_clock) && !atomic_load(&rx->exited) &&
      clock_gettime(rx->clock, &ts) == 0)
    out->cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  else
    out->cpu_ns = atomic_load(&rx->cpu_ns);
}
