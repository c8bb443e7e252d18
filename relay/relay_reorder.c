/* relay_reorder.c — per-session reorder buffer: restores sequence order within a bounded window
 * (packets and age), drops duplicates, declares gaps lost when the window passes them, and keeps
 * the counters the API shows (lost, duplicated, reordered, late). */
#include <stdlib.h>
#include <string.h>

#include "relay_core.h"

#define HELD_BYTES_MAX (1u << 20) /* bytes a session may hold waiting for a gap */

int tmk__reorder_init(tmk__reorder* ro, uint32_t window, uint32_t window_ms) {
  memset(ro, 0, sizeof *ro);
  if (window < 2) window = 2;
  ro->window = window;
  ro->window_ms = window_ms;
  ro->slots = calloc(window, sizeof *ro->slots);
  return ro->slots ? 0 : TMK_ENOMEM;
}

void tmk__reorder_free(tmk__reorder* ro) {
  if (ro->slots)
    for (uint32_t i = 0; i < ro->window; i++) free(ro->slots[i].data);
  free(ro->slots);
  ro->slots = NULL;
}

static void hist_set(tmk__reorder* ro, uint64_t seq, int delivered) {
  uint32_t i = (uint32_t)(seq % TMK__REORDER_HISTORY);
  if (delivered) ro->history[i / 8] |= (uint8_t)(1u << (i % 8));
  else ro->history[i / 8] &= (uint8_t)~(1u << (i % 8));
}

static int hist_get(const tmk__reorder* ro, uint64_t seq) {
  uint32_t i = (uint32_t)(seq % TMK__REORDER_HISTORY);
  return (ro->history[i / 8] >> (i % 8)) & 1;
}

static tmk__reorder_slot* slot_of(tmk__reorder* ro, uint64_t seq) {
  return &ro->slots[seq % ro->window];
}

static void release(tmk__reorder* ro, tmk__reorder_slot* s) {
  s->used = 0;
  ro->held--;
  if (s->cap > 2048) { /* keep small buffers for reuse, give big ones back */
    ro->mem -= s->cap;
    free(s->data);
    s->data = NULL;
    s->cap = 0;
  }
}

/* Moves `next` forward by one: delivers the held packet there, or declares the seq lost. */
static void step(tmk__reorder* ro, tmk__deliver_fn fn, void* ud) {
  tmk__reorder_slot* s = slot_of(ro, ro->next);
  if (s->used && s->seq == ro->next) {
    fn(ud, s->data, s->len, s->seq);
    release(ro, s);
    hist_set(ro, ro->next, 1);
  } else {
    ro->lost++;
    hist_set(ro, ro->next, 0);
  }
  ro->next++;
}

/* Delivers consecutive held packets starting at next. */
static void drain(tmk__reorder* ro, tmk__deliver_fn fn, void* ud) {
  while (ro->held) {
    tmk__reorder_slot* s = slot_of(ro, ro->next);
    if (!s->used || s->seq != ro->next) break;
    step(ro, fn, ud);
  }
}

static void recompute_oldest(tmk__reorder* ro) {
  uint64_t oldest = UINT64_MAX;
  if (ro->held)
    for (uint32_t i = 0; i < ro->window; i++)
      if (ro->slots[i].used && ro->slots[i].arrived_ms < oldest) oldest = ro->slots[i].arrived_ms;
  ro->oldest_ms = oldest;
}

/* Skips to the lowest held packet (declaring the gap before it lost) and drains. */
static void skip_gap(tmk__reorder* ro, tmk__deliver_fn fn, void* ud) {
  if (!ro->held) return;
  uint64_t lowest = UINT64_MAX;
  for (uint32_t i = 0; i < ro->window; i++)
    if (ro->slots[i].used && ro->slots[i].seq < lowest) lowest = ro->slots[i].seq;
  while (ro->next < lowest) step(ro, fn, ud);
  drain(ro, fn, ud);
}

int tmk__reorder_push(tmk__reorder* ro, uint64_t seq, const uint8_t* packet, size_t len,
                      uint64_t now_ms, tmk__deliver_fn fn, void* ud) {
  if (!ro->started) {
    ro->started = 1;
    /* A relay that joins a running session starts at the first seq it sees; earlier packets
     * were never meant for it. From seq 0 (or close) every gap counts. */
    ro->next = seq >= ro->window ? seq : 0;
  }
  int far = seq >= ro->next ? seq - ro->next >= TMK__REORDER_FAR
                             : ro->next - seq > TMK__REORDER_HISTORY;
  if (far && ro->forward_only && seq < ro->next) { /* an old packet replayed */
    ro->refused++;
    return 0;
  }
  if (far) {
    /* One packet must not move the window by an unbounded amount: a spoofed seq of next+2^40
     * would declare a trillion packets lost and make every real one stale. */
    if (ro->far_run && seq > ro->far_seq && seq - ro->far_seq <= ro->window) ro->far_run++;
    else ro->far_run = 1;
    ro->far_seq = seq;
    if (ro->far_run < TMK__REORDER_EPOCH_RUN || now_ms - ro->last_ok_ms < ro->window_ms) {
      ro->refused++;
      return 0;
    }
    /* A new epoch: what is held is delivered, the sequence goes on from here; a plausible
     * forward gap is loss (the run's first packets, refused above, were counted there). */
    tmk__reorder_tick(ro, now_ms, 1, fn, ud);
    /* keyed: everything before the epoch counts as delivered, so a replay of it is a duplicate */
    memset(ro->history, ro->forward_only ? 0xFF : 0, sizeof ro->history);
    if (seq > ro->next && seq - ro->next < TMK__REORDER_EPOCH_LOST)
      ro->lost += seq - ro->next - (TMK__REORDER_EPOCH_RUN - 1);
    ro->next = seq;
    ro->far_run = 0;
    ro->epochs++;
  }
  ro->last_ok_ms = now_ms;
  if (seq < ro->next) {
    if (hist_get(ro, seq)) {
      ro->duplicated++;
      return 0;
    }
    /* Declared lost earlier, arrived after all: still decodes on its own (PROTOCOL.md §2). */
    hist_set(ro, seq, 1);
    if (ro->lost) ro->lost--;
    ro->late++;
    fn(ud, packet, len, seq);
    return 1;
  }
  /* Too far ahead: move the window so that seq fits, declaring what it passes lost. */
  while (seq - ro->next >= ro->window) {
    if (!ro->held) {
      uint64_t jump = seq - ro->next - (ro->window - 1);
      if (jump >= TMK__REORDER_HISTORY) memset(ro->history, 0, sizeof ro->history);
      else
        for (uint64_t k = 0; k < jump; k++) hist_set(ro, ro->next + k, 0);
      ro->lost += jump;
      ro->next += jump;
      break;
    }
    step(ro, fn, ud);
  }
  drain(ro, fn, ud); /* the window moved: what waited behind the gap may be in order now */
  if (seq == ro->next) {
    fn(ud, packet, len, seq);
    hist_set(ro, seq, 1);
    ro->next++;
    drain(ro, fn, ud);
    recompute_oldest(ro);
    return 1;
  }
  tmk__reorder_slot* s = slot_of(ro, seq);
  if (s->used && s->seq == seq) {
    ro->duplicated++;
    return 0;
  }
  if (s->cap < len) {
    size_t cap = len < 1536 ? 1536 : len;
    uint8_t* nb = malloc(cap);
    if (!nb) return TMK_ENOMEM;
    ro->mem -= s->cap;
    free(s->data);
    s->data = nb;
    s->cap = (uint32_t)cap;
    ro->mem += cap;
  }
  memcpy(s->data, packet, len);
  s->len = (uint32_t)len;
  s->seq = seq;
  s->used = 1;
  s->arrived_ms = now_ms;
  if (ro->held == 0 || now_ms < ro->oldest_ms) ro->oldest_ms = now_ms;
  ro->held++;
  ro->reordered++;
  /* Byte bound: a flood of far-ahead packets cannot pin more than HELD_BYTES_MAX. */
  if (ro->mem > HELD_BYTES_MAX) {
    while (ro->mem > HELD_BYTES_MAX && ro->held) skip_gap(ro, fn, ud);
    recompute_oldest(ro);
  }
  return 1;
}

void tmk__reorder_tick(tmk__reorder* ro, uint64_t now_ms, int force, tmk__deliver_fn fn,
                       void* ud) {
  while (ro->held && (force || now_ms - ro->oldest_ms >= ro->window_ms)) {
    skip_gap(ro, fn, ud);
    recompute_oldest(ro);
  }
  if (!ro->held) ro->oldest_ms = UINT64_MAX;
}
