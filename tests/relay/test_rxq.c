/* test_rxq.c — the UDP receive queue (relay_rxq.c) between two threads: what the writer puts is
 * seen only once published, whole and in order, across blocks that are reused; a full queue
 * refuses and counts; the byte count another thread reads never goes below zero or above the
 * bound. Built a second time under ThreadSanitizer (relay_rxq_tsan), which checks the queue's
 * memory ordering. */
#define _POSIX_C_SOURCE 200809L
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

#include "relay_core.h"
#include "tmk_test.h"

#ifndef RXQ_N
#define RXQ_N 200000 /* datagrams through the two-thread test */
#endif

static struct sockaddr_in addr(uint16_t port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(0x7f000001);
  return a;
}

/* Datagram i: its length and its bytes (i's low byte, then i in the first 4 bytes). */
static size_t dgram_len(uint32_t i) { return 5 + (size_t)(i * 2654435761u % 3000u); }

static void dgram_fill(uint8_t* p, uint32_t i) {
  size_t len = dgram_len(i);
  memset(p, (int)(i & 0xff), len);
  memcpy(p, &i, 4);
}

static void dgram_check(const uint8_t* p, size_t len, const struct sockaddr* from, uint32_t i) {
  uint32_t got;
  assert_int_equal(len, dgram_len(i));
  memcpy(&got, p, 4);
  assert_int_equal(got, i);
  assert_int_equal(p[len - 1], i & 0xff);
  assert_int_equal(from->sa_family, AF_INET);
  assert_int_equal(ntohs(((const struct sockaddr_in*)(const void*)from)->sin_port),
                   1000 + i % 5000);
}

/* Put is invisible until published; publish shows the whole batch, and the counters with it. */
static void test_rxq_publish(void** state) {
  (void)state;
  tmk__rxq q;
  assert_int_equal(tmk__rxq_init(&q, (size_t)1 << 20), 0);
  static uint8_t buf[4096];
  size_t bytes = 0;
  for (uint32_t i = 0; i < 10; i++) {
    struct sockaddr_in a = addr((uint16_t)(1000 + i));
    dgram_fill(buf, i);
    assert_int_equal(tmk__rxq_put(&q, buf, dgram_len(i), (const struct sockaddr*)&a, sizeof a),
                     0);
    bytes += dgram_len(i);
  }
  size_t len;
  const struct sockaddr* from;
  assert_null(tmk__rxq_peek(&q, &len, &from));
  assert_true(tmk__rxq_empty(&q));
  assert_int_equal(tmk__rxq_bytes(&q), 0);
  assert_int_equal(q.datagrams, 0);
  tmk__rxq_publish(&q);
  assert_false(tmk__rxq_empty(&q));
  assert_true(tmk__rxq_bytes(&q) >= bytes); /* records carry a header and padding */
  assert_int_equal(q.datagrams, 10);
  assert_true(q.peak >= tmk__rxq_bytes(&q));
  for (uint32_t i = 0; i < 10; i++) {
    const uint8_t* p = tmk__rxq_peek(&q, &len, &from);
    assert_non_null(p);
    dgram_check(p, len, from, i);
    tmk__rxq_pop(&q);
  }
  assert_true(tmk__rxq_empty(&q));
  assert_int_equal(tmk__rxq_bytes(&q), 0);
  tmk__rxq_publish(&q); /* nothing new: no change */
  assert_int_equal(q.datagrams, 10);

  /* A batch that fills a block: the full block is published as the writer moves on (the reader
   * may take it), the rest when the batch is published. */
  size_t per_block = 0, n = 0;
  for (uint32_t i = 0; i < 400; i++) {
    struct sockaddr_in a = addr((uint16_t)(1000 + i % 5000));
    dgram_fill(buf, i);
    assert_int_equal(tmk__rxq_put(&q, buf, dgram_len(i), (const struct sockaddr*)&a, sizeof a),
                     0);
  }
  while (tmk__rxq_peek(&q, &len, &from)) {
    dgram_check(tmk__rxq_peek(&q, &len, &from), len, from, (uint32_t)per_block);
    tmk__rxq_pop(&q);
    per_block++;
  }
  assert_true(per_block > 0 && per_block < 400);
  tmk__rxq_publish(&q);
  for (n = per_block; tmk__rxq_peek(&q, &len, &from); n++) {
    dgram_check(tmk__rxq_peek(&q, &len, &from), len, from, (uint32_t)n);
    tmk__rxq_pop(&q);
  }
  assert_int_equal(n, 400);
  assert_int_equal(q.datagrams, 410);
  tmk__rxq_free(&q);
}

typedef struct shared {
  tmk__rxq q;
  _Atomic int writer_done;
  _Atomic uint64_t refused; /* puts the full queue refused (each retried until it went in) */
  _Atomic uint64_t bad_bytes; /* a byte count the watcher saw out of bounds, else 0 */
} shared;

static void* writer(void* arg) {
  shared* s = arg;
  static uint8_t buf[4096];
  uint32_t i = 0;
  while (i < RXQ_N) {
    /* batches of 1..32, as recvmmsg returns them */
    uint32_t batch = 1 + i * 7u % 32u;
    for (uint32_t k = 0; k < batch && i < RXQ_N; k++) {
      struct sockaddr_in a = addr((uint16_t)(1000 + i % 5000));
      dgram_fill(buf, i);
      if (tmk__rxq_put(&s->q, buf, dgram_len(i), (const struct sockaddr*)&a, sizeof a) != 0) {
        atomic_fetch_add(&s->refused, 1);
        break; /* full: publish what went in, let the reader catch up, put i again */
      }
      i++;
    }
    tmk__rxq_publish(&s->q);
    if (i % 64 == 0) sched_yield();
  }
  atomic_store(&s->writer_done, 1);
  return NULL;
}

static void* watcher(void* arg) {
  shared* s = arg;
  while (!atomic_load(&s->writer_done)) {
    uint64_t b = tmk__rxq_bytes(&s->q);
    /* never negative (a wrapped count is huge), never past the bound */
    if (b > s->q.cap) atomic_store(&s->bad_bytes, b);
    sched_yield();
  }
  return NULL;
}

static void test_rxq_threads(void** state) {
  (void)state;
  static shared s;
  memset(&s, 0, sizeof s);
  /* 1 MiB: 256 KiB blocks, so the writer fills the queue and the blocks go round many times */
  assert_int_equal(tmk__rxq_init(&s.q, (size_t)1 << 20), 0);
  pthread_t w, v;
  assert_int_equal(pthread_create(&w, NULL, writer, &s), 0);
  assert_int_equal(pthread_create(&v, NULL, watcher, &s), 0);
  uint32_t next = 0;
  while (next < RXQ_N) {
    size_t len;
    const struct sockaddr* from;
    const uint8_t* p = tmk__rxq_peek(&s.q, &len, &from);
    if (!p) {
      sched_yield();
      continue;
    }
    dgram_check(p, len, from, next++);
    tmk__rxq_pop(&s.q);
  }
  pthread_join(w, NULL);
  pthread_join(v, NULL);
  assert_int_equal(atomic_load(&s.bad_bytes), 0);
  assert_true(tmk__rxq_empty(&s.q));
  assert_int_equal(tmk__rxq_bytes(&s.q), 0);
  assert_int_equal(s.q.datagrams, RXQ_N);
  assert_int_equal(s.q.drops, atomic_load(&s.refused));
  assert_true(s.q.peak <= s.q.cap);
  assert_true(s.q.mapped <= s.q.cap);
  tmk__rxq_free(&s.q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rxq_publish),
      cmocka_unit_test(test_rxq_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
