/* relay_rxq.c — the queue between the UDP receive thread (relay_udp_rx.c) and the loop: one
 * writer, one reader, blocks of records mapped as the backlog grows (relay_core.h). */
#define _POSIX_C_SOURCE 200809L /* munmap */
#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "relay_core.h"

/* A queued datagram: this header, then len bytes, padded to 8. The sender's address takes the
 * room of an IPv6 one, the largest a UDP socket gives (a sockaddr_storage, 128 bytes, made the
 * record of a 1,200-byte datagram 7 % longer: more of the queue's memory and cache a datagram). */
typedef struct rx_hdr {
  uint32_t len;
  union {
    struct sockaddr sa;
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;
    uint64_t align_[4]; /* 8-aligned, so that the datagram after it is too */
  } from;
} rx_hdr;
typedef char rx_hdr_check[sizeof(rx_hdr) == 40 ? 1 : -1];

/* ---------------------------------------------------------------------------------------------
 * The queue: one writer (the receive thread), one reader (the loop). Records never span blocks;
 * the writer links a new block when one is full, the reader gives a finished block back as the
 * spare (or, when there is one, unmaps it; a 2 MiB block goes to the process's pool of populated
 * regions instead, relay_slab.c, which the writer takes from first), so the memory the queue
 * holds follows the backlog.
 * ------------------------------------------------------------------------------------------- */
struct tmk__rxq_block {
  _Atomic size_t fill;                     /* bytes of records published by the writer */
  struct tmk__rxq_block* _Atomic next;     /* set once the writer has moved on */
};
#define BLOCK_DATA(b) ((uint8_t*)(b) + sizeof(tmk__rxq_block))

static size_t rec_size(size_t len) { return (sizeof(rx_hdr) + len + 7) & ~(size_t)7; }

static tmk__rxq_block* block_new(tmk__rxq* q) {
  tmk__rxq_block* b = atomic_exchange(&q->spare, NULL);
  if (!b) {
    if (atomic_load(&q->mapped) + q->block > q->cap) return NULL;
    /* faulted in by one call, not a page fault per 4 KiB on the receive thread */
    b = q->block == TMK__HUGE_PAGE ? tmk__pool_take() : tmk__map_pages(q->block, 0, 1, NULL);
    if (!b) return NULL;
    atomic_fetch_add(&q->mapped, q->block);
  }
  atomic_store_explicit(&b->fill, 0, memory_order_relaxed);
  atomic_store_explicit(&b->next, NULL, memory_order_relaxed);
  return b;
}

static void block_unmap(tmk__rxq* q, tmk__rxq_block* b) {
  if (!b) return;
  if (q->block == TMK__HUGE_PAGE) tmk__pool_give(b);
  else munmap(b, q->block);
  atomic_fetch_sub(&q->mapped, q->block);
}

int tmk__rxq_init(tmk__rxq* q, size_t cap) {
  memset(q, 0, sizeof *q);
  /* an eighth of the bound, between 256 KiB (room for three 64 KiB datagrams at least) and one
   * huge page (2 MiB, from a bound of 16 MiB) */
  size_t block = cap / 8 < ((size_t)256 << 10) ? (size_t)256 << 10
               : cap / 8 > TMK__HUGE_PAGE      ? TMK__HUGE_PAGE : cap / 8 & ~(size_t)4095;
  if (cap < 2 * block) return TMK_EINVAL;
  q->cap = cap;
  q->block = block;
  q->w = q->r = block_new(q);
  return q->w ? 0 : TMK_ENOMEM;
}

void tmk__rxq_free(tmk__rxq* q) {
  tmk__rxq_block* b = q->r;
  while (b) {
    tmk__rxq_block* next = atomic_load(&b->next);
    block_unmap(q, b);
    b = next;
  }
  block_unmap(q, atomic_exchange(&q->spare, NULL));
  q->r = q->w = NULL;
}

/* The order matters to the reader: the byte count first (so that tmk__rxq_bytes never sees more
 * popped than pushed), then the block's fill (which the reader goes by). */
void tmk__rxq_publish(tmk__rxq* q) {
  if (q->put_bytes == atomic_load_explicit(&q->pushed, memory_order_relaxed)) return;
  atomic_store_explicit(&q->pushed, q->put_bytes, memory_order_release);
  atomic_store_explicit(&q->datagrams, q->put_n, memory_order_relaxed);
  atomic_store_explicit(&q->w->fill, q->wfill, memory_order_release);
  const uint64_t queued = q->put_bytes - atomic_load_explicit(&q->popped, memory_order_acquire);
  if (queued > atomic_load_explicit(&q->peak, memory_order_relaxed))
    atomic_store_explicit(&q->peak, queued, memory_order_relaxed);
}

int tmk__rxq_put(tmk__rxq* q, const void* p, size_t len, const struct sockaddr* from,
                 uint32_t alen) {
  const size_t need = rec_size(len);
  tmk__rxq_block* b = q->w;
  size_t f = q->wfill;
  if (len > TMK__RXQ_MAX_DGRAM || alen > sizeof(((rx_hdr*)0)->from)) goto drop;
  if (f + need > q->block - sizeof *b) {
    tmk__rxq_block* nb = block_new(q);
    if (!nb) goto drop;
    tmk__rxq_publish(q); /* b's fill is final before the reader can see that b is done */
    atomic_store_explicit(&b->next, nb, memory_order_release);
    q->w = b = nb;
    q->wfill = f = 0;
  }
  rx_hdr* h = (rx_hdr*)(void*)(BLOCK_DATA(b) + f);
  h->len = (uint32_t)len;
  memcpy(&h->from, from, alen);
  memcpy(h + 1, p, len);
  q->wfill = f + need;
  q->put_bytes += need;
  q->put_n++;
  return 0;
drop:
  atomic_fetch_add_explicit(&q->drops, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&q->drop_bytes, len, memory_order_relaxed);
  return -1;
}

int tmk__rxq_push(tmk__rxq* q, const void* p, size_t len, const struct sockaddr* from,
                  uint32_t alen) {
  const int rc = tmk__rxq_put(q, p, len, from, alen);
  tmk__rxq_publish(q);
  return rc;
}

const uint8_t* tmk__rxq_peek(tmk__rxq* q, size_t* len, const struct sockaddr** from) {
  for (;;) {
    tmk__rxq_block* b = q->r;
    if (q->roff < q->rfill) {
      const rx_hdr* h = (const rx_hdr*)(const void*)(BLOCK_DATA(b) + q->roff);
      *len = h->len;
      *from = &h->from.sa;
      return (const uint8_t*)(h + 1);
    }
    /* what was read of the writer's fill is used up: read it again, once for a whole batch */
    size_t f = atomic_load_explicit(&b->fill, memory_order_acquire);
    if (q->roff < f) {
      q->rfill = f;
      continue;
    }
    tmk__rxq_block* next = atomic_load_explicit(&b->next, memory_order_acquire);
    if (!next) return NULL;
    /* the writer published b's last records before it linked next: fill is final now */
    f = atomic_load_explicit(&b->fill, memory_order_acquire);
    if (q->roff < f) {
      q->rfill = f;
      continue;
    }
    q->r = next;
    q->roff = q->rfill = 0;
    block_unmap(q, atomic_exchange(&q->spare, b));
  }
}

void tmk__rxq_pop(tmk__rxq* q) {
  const rx_hdr* h = (const rx_hdr*)(const void*)(BLOCK_DATA(q->r) + q->roff);
  const size_t need = rec_size(h->len);
  q->roff += need;
  /* only this thread writes it: a plain add, published for tmk__rxq_bytes */
  atomic_store_explicit(&q->popped, atomic_load_explicit(&q->popped, memory_order_relaxed) + need,
                        memory_order_release);
}

int tmk__rxq_empty(tmk__rxq* q) {
  size_t len;
  const struct sockaddr* from;
  return tmk__rxq_peek(q, &len, &from) == NULL;
}

uint64_t tmk__rxq_bytes(tmk__rxq* q) {
  const uint64_t popped = atomic_load_explicit(&q->popped, memory_order_acquire);
  const uint64_t pushed = atomic_load_explicit(&q->pushed, memory_order_acquire);
  return pushed > popped ? pushed - popped : 0;
}

