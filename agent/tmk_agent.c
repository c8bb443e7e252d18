/* tmk_agent.c — the agent's public API and hot path: init (carving the arena), shutdown, the
 * run-time filter, thread slots, and the per-thread single-producer rings that zones, markers,
 * frames, plots and messages are pushed into without locks or syscalls. */
#include <string.h>

#include "tmk_agent_internal.h"

tmk__agent tmk__g;

/* ============================================================================================
 * Thread slots
 * ========================================================================================== */

/* A thread's TLS value (tmk_port_tls_get) names its slot and the agent generation it was taken
 * in: (tag << 16) | (index + 1), tag = tmk__g.tls_tag. A value from an earlier init carries an
 * older tag and is ignored, so a thread never writes into a previous run's arena. */
#define TLS_VALUE(tag, index) ((void*)(uintptr_t)(((uintptr_t)(tag) << 16) | ((index) + 1u)))

static uint32_t tls_tag_of(uint32_t gen) { return (gen & 0x7FFFu) | 0x8000u; /* never 0 */ }

/* The current thread's slot if it already has one in this generation (no attach). */
static inline tmk__thread* own_thread(void) {
  uintptr_t v = (uintptr_t)tmk_port_tls_get();
  if (TMK__LIKELY((uint32_t)(v >> 16) == tmk_port_load32_relaxed(&tmk__g.tls_tag)))
    return tmk__slot((uint32_t)(v & 0xFFFFu) - 1u);
  return NULL;
}

static void release_thread(tmk__thread* t) {
  tmk_port_tls_set(NULL);
  tmk_port_store32_release(&t->state, (uint32_t)TMK__SLOT_DEAD); /* the flusher frees it */
}

static void on_thread_exit(void* arg) {
  tmk__thread* t = (tmk__thread*)arg;
  if (own_thread() == t) release_thread(t);
}

void tmk_thread_exit(void) {
  tmk__thread* t = own_thread();
  if (t) release_thread(t);
}

static tmk__thread* attach_thread(void) {
  uint32_t tag = tmk_port_load32_acquire(&tmk__g.tls_tag);
  uint32_t i;
  if (!tmk_port_load32_acquire(&tmk__g.running)) return NULL;
  for (i = 0; i < TMK__NTHREADS; i++) {
    tmk__thread* t = tmk__slot(i);
    uint32_t expected = TMK__SLOT_FREE;
    if (tmk_port_load32_relaxed(&t->state) != TMK__SLOT_FREE) continue;
    if (!tmk_port_cas32(&t->state, &expected, (uint32_t)TMK__SLOT_CLAIMING)) continue;
    t->depth = 0;
    t->nmarkers = 0;
    t->held = 0;
    t->cut = TMK__NO_CUT;
    /* A thread id of its own, not the slot's: a later thread reusing this slot must not show up
     * in the relay as this thread renamed. */
    t->id = (tmk_port_add32(&tmk__g.thread_ids, 1u) - 1u) & 0x7FFFFFFFu; /* never NO_THREAD */
    if (TMK_PORT_HAS_THREADS) t->wake_mark = t->head + tmk__g.ring_words / 2u;
    tmk_port_store32_release(&t->state, (uint32_t)TMK__SLOT_ACTIVE);
    tmk_port_tls_set(TLS_VALUE(tag, i));
#if TMK_PORT_HAS_THREADS
    tmk_port_on_thread_exit(on_thread_exit, t); /* TMK_ENOTSUP: the game calls tmk_thread_exit */
#else
    (void)on_thread_exit;
#endif
    return t;
  }
  tmk_port_add32(&tmk__g.no_thread_drops, 1u);
  return NULL;
}

static inline tmk__thread* cur_thread(void) {
  tmk__thread* t = own_thread();
  if (TMK__LIKELY(t != NULL)) return t;
  return attach_thread();
}

static inline void count_drop(tmk__thread* t, int reason) {
  tmk_port_store32_relaxed(&t->drops[reason], t->drops[reason] + 1u);
}

/* ============================================================================================
 * Ring: single producer (the owning thread), single consumer (the flusher)
 * ========================================================================================== */

/* Room for `words` more at t->head, besides the words held for open zones. The sum never
 * wraps: used <= cap, held <= cap and words is small. */
static inline int ring_fits(const tmk__thread* t, uint32_t words) {
  return t->head - t->cached_tail + t->held + words <= tmk__g.ring_words;
}

/* Waits for room in wait mode. Returns 1 when `words` fit, 0 when the record must be dropped. */
static int ring_wait(tmk__thread* t, uint32_t words) {
  int ok = 0;
  tmk_port_add32(&tmk__g.waiters, 1u);
  for (;;) {
    t->cached_tail = tmk_port_load32_acquire(&t->tail);
    if (ring_fits(t, words)) {
      ok = 1;
      break;
    }
    if (!tmk_port_load32_acquire(&tmk__g.running)) break;
    /* no flusher thread (never one on a port without threads): drain here */
    if ((!TMK_PORT_HAS_THREADS || !tmk__g.has_flusher_thread) && tmk__lock(0)) {
      tmk__flush_cycle(1);
      tmk__unlock();
    } else {
      tmk_port_yield();
    }
  }
  tmk_port_add32(&tmk__g.waiters, (uint32_t)-1);
  return ok;
}

/* Returns 1 with room for `words` at t->head, or 0 after counting a drop. */
static inline int ring_reserve(tmk__thread* t, uint32_t words) {
  uint32_t cap = tmk__g.ring_words;
  if (TMK__LIKELY(ring_fits(t, words))) return 1;
  t->cached_tail = tmk_port_load32_acquire(&t->tail);
  if (ring_fits(t, words)) return 1;
  if (words > cap) {
    count_drop(t, TMK_DROP_TOO_BIG);
    return 0;
  }
  /* Waiting is only useful when the room held for open zones leaves enough: they cannot
   * close while this thread waits. */
  if (tmk__g.overflow == TMK_OVERFLOW_WAIT && t->held + words <= cap && ring_wait(t, words))
    return 1;
  count_drop(t, TMK_DROP_RING_FULL);
  return 0;
}

/* Slow path of a zone's begin: t->held already counts the new zone's 4 words. Returns 1 when
 * they fit, else gives them back and returns 0 (the zone and its subtree are dropped). */
static int zone_room(tmk__thread* t) {
  t->cached_tail = tmk_port_load32_acquire(&t->tail);
  if (ring_fits(t, 0)) return 1;
  if (tmk__g.overflow == TMK_OVERFLOW_WAIT && t->held <= tmk__g.ring_words && ring_wait(t, 0))
    return 1;
  t->held -= 4;
  return 0;
}

static inline void ring_put(tmk__thread* t, uint32_t at, uint64_t v) {
  t->buf[(t->head + at) & t->mask] = v;
}

static void ring_put_bytes(tmk__thread* t, uint32_t at, const void* data, size_t len) {
  const uint8_t* p = (const uint8_t*)data;
  while (len > 0) {
    uint64_t word = 0;
    size_t n = len < 8 ? len : 8;
    memcpy(&word, p, n);
    ring_put(t, at++, word);
    p += n;
    len -= n;
  }
}

/* Wakes a sleeping flusher; called once per half ring written. A wake-up lost to the race
 * with the flusher falling asleep costs at most its 1 ms poll. */
static void wake_flusher(tmk__thread* t) {
  t->wake_mark = t->head + tmk__g.ring_words / 2u;
#if TMK_PORT_HAS_WAKE
  if (tmk_port_load32_relaxed(&tmk__g.flusher_asleep)) {
    uint32_t one = 1u;
    if (tmk_port_cas32(&tmk__g.flusher_asleep, &one, 0u)) tmk_port_wake_signal(&tmk__g.wake);
  }
#endif
}

/* (Without threads there is no flusher thread to wake: the game pumps.) */
static inline void ring_commit(tmk__thread* t, uint32_t words) {
  uint32_t head = t->head + words;
  tmk_port_store32_release(&t->head, head);
  if (TMK_PORT_HAS_THREADS && TMK__UNLIKELY((int32_t)(head - t->wake_mark) >= 0)) wake_flusher(t);
}

static inline uint64_t entry_header(uint32_t type, uint32_t aux, uint32_t bytes, uint32_t depth) {
  return (uint64_t)type | ((uint64_t)aux << 8) | ((uint64_t)bytes << 16) | ((uint64_t)depth << 32);
}

/* Pushes an event entry (site, time, payload). */
static void push_event(tmk__thread* t, uint32_t type, uint32_t aux, tmk_site* site, uint64_t time,
                       const void* data, size_t len) {
  uint32_t words = TMK__E_WORDS(len);
  if (!ring_reserve(t, words)) return;
  ring_put(t, 0, entry_header(type, aux, (uint32_t)len, 0));
  ring_put(t, 1, (uint64_t)(uintptr_t)site);
  ring_put(t, 2, time);
  if (len) ring_put_bytes(t, 3, data, len);
  ring_commit(t, words);
}

#if defined(__OPTIMIZE_SIZE__)
uint64_t tmk__now_ticks(void) { return tmk__now_ticks_inline(); }
#endif

/* ============================================================================================
 * Hot path entry points (called by the macros in telemark.h)
 * ========================================================================================== */

/* A thread without a slot (none free, agent stopped) gets a start time but no depth; its
 * tmk__zone_end finds no slot either, so the pair stays balanced and records nothing.
 *
 * Whole subtrees: a zone takes its ring room when it begins (t->held), so a zone whose begin
 * found room is always recorded at its end, after its children. A zone that finds no room is
 * dropped with everything nested in it (t->cut), so the relay never gets a child without its
 * parent, only parents without some of their children. */
uint64_t tmk__zone_begin(void) {
  tmk__thread* t = cur_thread();
  if (TMK__LIKELY(t != NULL)) {
    uint32_t depth = t->depth++;
    if (TMK__LIKELY(depth < t->cut)) {
      t->held += 4;
      if (TMK__UNLIKELY(!ring_fits(t, 0)) && !zone_room(t)) t->cut = depth;
    }
  }
  return tmk__now_ticks();
}

void tmk__zone_end(tmk_site* site, uint64_t start) {
  uint64_t end = tmk__now_ticks();
  tmk__thread* t = own_thread();
  if (!t) return;
  if (t->depth == 0) { /* begun before this thread had a slot: unpaired, counted */
    count_drop(t, TMK_DROP_MISMATCH);
    return;
  }
  t->depth--;
  if (TMK__UNLIKELY(t->depth >= t->cut)) { /* inside a dropped subtree */
    if (t->depth == t->cut) t->cut = TMK__NO_CUT;
    count_drop(t, TMK_DROP_RING_FULL);
    return;
  }
  t->held -= 4; /* the room this zone took at its begin */
  ring_put(t, 0, entry_header(TMK__E_ZONE, 0, 0, t->depth));
  ring_put(t, 1, (uint64_t)(uintptr_t)site);
  ring_put(t, 2, start);
  ring_put(t, 3, end);
  ring_commit(t, 4);
}

void tmk__marker_begin(tmk_site* site, int pass, const void* data, size_t len) {
  tmk__thread* t = cur_thread();
  if (!t) return;
  if (t->nmarkers >= TMK__MARKER_STACK) { /* too deep to pair: counted, not crashed on */
    count_drop(t, TMK_DROP_MISMATCH);
    return;
  }
  t->markers[t->nmarkers++] = pass ? site : NULL;
  if (!pass) return;
  if (len > TMK_PROTO_MAX_PAYLOAD) {
    count_drop(t, TMK_DROP_TOO_BIG); /* the marker still goes out, without its payload */
    len = 0;
  }
  push_event(t, TMK__E_MARKER, 0, site, tmk__now_ticks(), data, len);
}

void tmk__marker_end(const void* data, size_t len) {
  tmk__thread* t = cur_thread();
  tmk_site* site;
  if (!t) return;
  if (t->nmarkers == 0) {
    count_drop(t, TMK_DROP_MISMATCH);
    return;
  }
  site = t->markers[--t->nmarkers];
  if (!site) return; /* its BEGIN was filtered out */
  if (len > TMK_PROTO_MAX_PAYLOAD) {
    count_drop(t, TMK_DROP_TOO_BIG);
    len = 0;
  }
  push_event(t, TMK__E_MARKER, 1, site, tmk__now_ticks(), data, len);
}

void tmk__frame(tmk_site* site) {
  tmk__thread* t;
  if (!tmk_port_load32_relaxed(&tmk__g.running)) return;
  t = cur_thread();
  if (t) push_event(t, TMK__E_FRAME, 0, site, tmk__now_ticks(), NULL, 0);
}

void tmk__plot_i(tmk_site* site, int64_t value) {
  tmk__thread* t = cur_thread();
#if defined(__OPTIMIZE_SIZE__)
  /* -Os: the same four words through push_event, the value as an 8-byte payload (a plot's
   * entry is 4 words whatever its header's byte count says: tmk_flush.c) */
  if (t) push_event(t, TMK__E_PLOT_I, 0, site, tmk__now_ticks(), &value, sizeof value);
#else
  if (!t || !ring_reserve(t, 4)) return;
  ring_put(t, 0, entry_header(TMK__E_PLOT_I, 0, 0, 0));
  ring_put(t, 1, (uint64_t)(uintptr_t)site);
  ring_put(t, 2, tmk__now_ticks());
  ring_put(t, 3, (uint64_t)value);
  ring_commit(t, 4);
#endif
}

void tmk__plot_d(tmk_site* site, double value) {
  tmk__thread* t = cur_thread();
#if defined(__OPTIMIZE_SIZE__) /* -Os: as tmk__plot_i */
  if (t) push_event(t, TMK__E_PLOT_D, 0, site, tmk__now_ticks(), &value, sizeof value);
#else
  uint64_t bits;
  if (!t || !ring_reserve(t, 4)) return;
  memcpy(&bits, &value, sizeof bits);
  ring_put(t, 0, entry_header(TMK__E_PLOT_D, 0, 0, 0));
  ring_put(t, 1, (uint64_t)(uintptr_t)site);
  ring_put(t, 2, tmk__now_ticks());
  ring_put(t, 3, bits);
  ring_commit(t, 4);
#endif
}

void tmk__message(tmk_site* site, const char* text, size_t len) {
  tmk__thread* t = cur_thread();
  size_t limit;
  if (!t) return;
  if (text == NULL) len = 0;
  /* Long texts are cut to what a string field and half a ring can carry. */
  limit = ((size_t)tmk__g.ring_words / 2u - 3u) * 8u;
  if (limit > TMK_PROTO_MAX_STRING) limit = TMK_PROTO_MAX_STRING;
  if (len > limit) len = limit;
  push_event(t, TMK__E_MESSAGE, site->severity, site, tmk__now_ticks(), text, len);
}

void tmk_thread_name(const char* name) {
  tmk__thread* t = cur_thread();
  size_t len;
  if (!t || !name) return;
  len = strlen(name);
  if (len > TMK__NAME_MAX) len = TMK__NAME_MAX;
  push_event(t, TMK__E_THREAD_NAME, 0, NULL, 0, name, len);
}

/* ============================================================================================
 * Filter
 * ========================================================================================== */

int tmk_agent_set_filter(int level, uint32_t verbosity_mask) {
  if (level < 0 || level > TMK_SEV_TRACE) return TMK_EINVAL;
  if (!tmk__g.running) return TMK_ESTATE;
  tmk__lock(1);
  tmk__apply_filter((uint32_t)level, verbosity_mask);
  tmk__unlock();
  return 0;
}

int tmk_team_name(unsigned bit, const char* name) {
  if (bit >= 32) return TMK_EINVAL;
  if (!tmk__g.running) return TMK_ESTATE;
  tmk__lock(1);
  tmk__flush_set_team(bit, name);
  tmk__unlock();
  return 0;
}

uint64_t tmk_now(void) { return tmk__g.running ? tmk__now_ticks() : 0; }

uint64_t tmk_ticks_per_second(void) { return tmk__g.running ? tmk__g.freq : 0; }

/* ============================================================================================
 * Init / shutdown
 * ========================================================================================== */

typedef char tmk__ring_cap_check[(TMK__RING_AUTO_MAX & (TMK__RING_AUTO_MAX - 1u)) == 0 ? 1 : -1];

/* The largest power of two <= v (0 for 0): v's top bit, by clearing the lowest until one is
 * left. */
static uint32_t pow2_floor(uint32_t v) {
  while (v & (v - 1u)) v &= v - 1u;
  return v;
}

/* The default packet size where no packet can fragment: TCP (a byte stream) and UDP to this
 * machine (the loopback MTU is 64 KB). A packet costs the flusher a send (on loopback the whole
 * delivery to the relay's socket, several microseconds), so 16 KB packets instead of 1200-byte
 * ones cut the flusher's cost per zone by a third (tmk-bench-load). Elsewhere 1200. */
#define TMK__LOCAL_PACKET 16384u
static uint32_t default_packet(const tmk_agent_desc* d, size_t arena_bytes) {
  if (arena_bytes < 32768u) return 512u;
#if TMK_PORT_HAS_SOCKETS
  if (arena_bytes >= (1u << 20)) {
    const char* h = d->relay_host;
    if (d->transport == TMK_TRANSPORT_TCP) return TMK__LOCAL_PACKET;
    if ((d->transport == TMK_TRANSPORT_AUTO || d->transport == TMK_TRANSPORT_UDP) &&
        (strncmp(h, "127.", 4) == 0 || strcmp(h, "localhost") == 0 || strcmp(h, "::1") == 0))
      return TMK__LOCAL_PACKET;
  }
#else
  (void)d;
#endif
  return TMK_PROTO_DEFAULT_PACKET;
}

/* Takes n bytes at *at, 64-byte aligned. *at may pass the arena's end (and wrap): the caller
 * checks what was used, at - arena, against the arena's size before it touches any of it. */
static void* carve(uintptr_t* at, size_t n) {
  uintptr_t a = (*at + 63u) & ~(uintptr_t)63u;
  *at = a + n;
  return (void*)a;
}

#if TMK_PORT_HAS_THREADS
/* Ring fill at which the flusher drains before its interval is up: an eighth of a ring, at most
 * 64 KB (two packets or so of zones), so a busy thread is drained while it records, in full
 * packets. */
static uint32_t early_words(void) {
  uint32_t w = tmk__g.ring_words / 8u;
  return w > 8192u ? 8192u : w;
}

/* Returns 1 when some ring holds more than `words` (read without the lock: a hint). */
static int rings_over(uint32_t words) {
  uint32_t i;
  for (i = 0; i < TMK__NTHREADS; i++) {
    tmk__thread* t = tmk__slot(i);
    if (tmk_port_load32_relaxed(&t->head) - tmk_port_load32_relaxed(&t->tail) > words) return 1;
  }
  return 0;
}

/* Waits up to 1 ms, or until a recording thread passes its wake mark (tmk_port.h wake-ups). */
static void flusher_sleep(uint32_t early) {
#if TMK_PORT_HAS_WAKE
  if (tmk__g.has_wake) {
    tmk_port_store32_release(&tmk__g.flusher_asleep, 1u);
    if (!rings_over(early)) tmk_port_wake_wait(&tmk__g.wake, 1000u);
    tmk_port_store32_release(&tmk__g.flusher_asleep, 0u);
    return;
  }
#endif
  (void)early;
  tmk_port_sleep_us(1000);
}

/* The background flusher: drains on its interval, early when a ring passes early_words(), and
 * back to back while cycles find work (a thread recording flat out is drained as fast as the
 * flusher can encode); sleeps 1 ms only when there was nothing to do. */
static void flusher_main(void* arg) {
  (void)arg;
#if TMK_PORT_HAS_THREAD_NAME
  tmk_port_thread_name("tmk-flusher"); /* top -H, perf and gdb show which thread it is */
#endif
  while (!tmk_port_load32_acquire(&tmk__g.stop)) {
    int waiters = tmk_port_load32_relaxed(&tmk__g.waiters) != 0, busy = 0;
    uint32_t early = early_words();
    if (tmk__lock(0)) {
      uint64_t now = tmk__ms();
      int due = waiters || now - tmk__g.last_pump_ms >= tmk__g.flush_interval_ms ||
                rings_over(early);
      if (due) {
        tmk__g.last_pump_ms = now;
        busy = tmk__flush_cycle(waiters) > 0;
      }
      tmk__unlock();
    }
    if (!waiters && !busy) flusher_sleep(early);
  }
}
#endif

int tmk_agent_init(const tmk_agent_desc* desc, void* arena, size_t bytes) {
  tmk_agent_desc* d = &tmk__g.desc; /* checked and defaulted in place: no copy on the stack */
  uintptr_t at = (uintptr_t)arena; /* where carve takes the next piece */
  uint32_t max_packet, body_cap, i, threads, ring_bytes, slot_bytes;
  tmk__flush_config fc;
  size_t lz4_size, remaining;
  uint32_t gen;
  int rc;

  if (tmk__g.running) return TMK_ESTATE;
  if (!arena || bytes < TMK_ARENA_MIN) return arena ? TMK_ENOMEM : TMK_EINVAL;
  /* Stopped, nothing reads tmk__g but gen and tls_tag (0 either way): clear it first, so the
   * desc is checked where it is kept. */
  gen = tmk__g.gen;
  memset(&tmk__g, 0, sizeof tmk__g);
  tmk__g.gen = gen;
  if (desc) *d = *desc;
  if (d->level < 0 || d->level > TMK_LEVEL(TMK_SEV_TRACE)) return TMK_EINVAL;
  if (d->transport > TMK_TRANSPORT_FILE) return TMK_EINVAL;
  if (d->transport == TMK_TRANSPORT_CALLBACK && !d->write.fn) return TMK_EINVAL;
  if (d->clock.fn && (d->clock.frequency == 0 ||
                      (d->clock.bits != 0 && d->clock.bits != 64 &&
                       (d->clock.bits < 8 || d->clock.bits > 32))))
    return TMK_EINVAL;

#if TMK_NO_KEY
  if (d->key) return TMK_ENOTSUP; /* built without packet authentication */
#endif
  if ((d->build && strlen(d->build) > TMK_PROTO_MAX_LABEL) ||
      (d->label && strlen(d->label) > TMK_PROTO_MAX_LABEL))
    return TMK_EINVAL;

  if (!d->relay_host && TMK_PORT_HAS_SOCKETS) d->relay_host = "127.0.0.1";
  if (!d->relay_port) d->relay_port = TMK_PROTO_DEFAULT_PORT;
  if (!d->program) d->program = "telemark-app";
  if (!d->file_path && TMK_PORT_HAS_FILES) d->file_path = "telemark.tmk";
  if (TMK_PORT_HAS_THREADS) /* the flusher thread's interval */
    tmk__g.flush_interval_ms = d->flush_interval_ms ? d->flush_interval_ms : 10;
  tmk__g.overflow = (uint32_t)d->overflow;
  memset(&fc, 0, sizeof fc);

  /* ---- carve the arena ---- */
  max_packet = d->max_packet ? d->max_packet : default_packet(d, bytes);
  if (max_packet < TMK_PROTO_MIN_PACKET || max_packet > TMK_PROTO_MAX_PACKET) return TMK_EINVAL;
  fc.max_packet = max_packet;
  body_cap = max_packet - TMK_PROTO_MAX_HEADER - (d->key ? TMK_PROTO_MAC_LEN : 0u);
  fc.key = d->key;
  fc.state = carve(&at, tmk__flush_state_size());
  fc.body = (uint8_t*)carve(&at, body_cap);
  fc.out = (uint8_t*)carve(&at, max_packet + 3u);
  if (TMK_PORT_HAS_SOCKETS) { /* only a socket receives (tmk__transport_recv) */
    fc.rx_cap = 512;
    fc.rx = (uint8_t*)carve(&at, fc.rx_cap);
  }
  fc.batch_cap = bytes >= (256u << 10) ? 1024u : bytes >= (32u << 10) ? 256u : 16u;
  fc.batch = (tmk_proto_zone*)carve(&at, fc.batch_cap * sizeof(tmk_proto_zone));
  if (at - (uintptr_t)arena > bytes) return TMK_ENOMEM; /* (the pieces are far below 2^31) */
  remaining = bytes - (size_t)(at - (uintptr_t)arena);
  lz4_size = tmk_proto_lz4_state_size();
  if (lz4_size && !d->no_compression && bytes >= (128u << 10) &&
      remaining >= lz4_size + ((0u - at) & 63u)) { /* (with its alignment) */
    fc.lz4_state = carve(&at, lz4_size);
    remaining = bytes - (size_t)(at - (uintptr_t)arena);
  }
  slot_bytes = (uint32_t)((sizeof(tmk__thread) + 63u) & ~(size_t)63u) + 64u;
  threads = TMK_PORT_ONE_THREAD ? 1u : d->max_threads ? d->max_threads : 16u;
  if (threads > 0xFFFFu) return TMK_EINVAL; /* slot indices are 16-bit in the TLS value */
  if (d->ring_bytes) {
    ring_bytes = pow2_floor(d->ring_bytes);
    if (ring_bytes < 256) return TMK_EINVAL;
    if (!d->max_threads && !TMK_PORT_ONE_THREAD) { /* (one slot: the room test below) */
      size_t fit = remaining / (ring_bytes + slot_bytes);
      threads = (uint32_t)(fit < threads ? fit : threads);
    }
  } else {
    for (;;) {
      size_t per = remaining / threads, room = per > slot_bytes ? per - slot_bytes : 0;
      /* (capped before rounding down: the cap is a power of two, tmk__ring_cap_check) */
      ring_bytes = pow2_floor((uint32_t)(room > TMK__RING_AUTO_MAX ? TMK__RING_AUTO_MAX : room));
      if (ring_bytes >= 1024 || threads == 1 || d->max_threads) break;
      threads /= 2;
    }
    if (ring_bytes < 256) return TMK_ENOMEM;
  }
  if (threads == 0 || (size_t)threads * (ring_bytes + slot_bytes) > remaining) return TMK_ENOMEM;
  tmk__g.slot_stride = (uint32_t)((sizeof(tmk__thread) + 63u) & ~(size_t)63u);
  /* (they fit: slot_bytes holds 64 bytes for each piece's alignment) */
  tmk__g.threads = (tmk__thread*)carve(&at, (size_t)threads * tmk__g.slot_stride);
  memset(tmk__g.threads, 0, (size_t)threads * tmk__g.slot_stride);
  for (i = 0; i < threads; i++) {
    tmk__thread* t = tmk__slot(i);
    t->buf = (uint64_t*)carve(&at, ring_bytes);
    t->mask = ring_bytes / 8u - 1u;
  }
  tmk__g.nthreads = threads;
  tmk__g.ring_words = ring_bytes / 8u;

  /* ---- clock ---- */
  if (d->clock.fn) {
    tmk__g.freq = d->clock.frequency;
    tmk__g.clk_bits = (d->clock.bits == 64) ? 0u : d->clock.bits;
    tmk__g.clk_user = d->clock.user_data;
    tmk__g.clk_fn = d->clock.fn; /* tmk__flush_open seeds the extension of a wrapping one */
  } else {
#if TMK_PORT_FAST_TICKS_NS
    tmk__g.freq = 1000000000u >> TMK__TICK_SHIFT; /* 250 MHz */
#else
    /* Scale a fast counter down to at most ~250 MHz (TMK__TICK_SHIFT). */
    uint64_t f = tmk_port_fast_ticks_calibrate();
    uint32_t shift = 0;
    while ((f >> shift) > 250000000u) shift++;
    tmk__g.shift = shift;
    tmk__g.freq = f >> shift;
#endif
  }

  fc.session_id = tmk_port_random64();
  rc = tmk__flush_open(&fc);
  if (rc < 0) return rc;

  tmk__g.running = 1;
  tmk_port_store32_release(&tmk__g.gen, gen + 1u);
  tmk_port_store32_release(&tmk__g.tls_tag, tls_tag_of(gen + 1u));
  tmk__apply_filter(d->level ? (uint32_t)(d->level - 1) : (uint32_t)TMK_SEV_INFO,
                    d->verbosity ? d->verbosity : 0xFFFFFFFFu);
  tmk__agent_log(&tmk__g.desc.logger, TMK_SEV_INFO, "agent up, %u thread slot(s) x %u-byte rings",
           (unsigned)threads, (unsigned)ring_bytes);
  tmk__lock(1);
  tmk__send_hello();
  tmk__unlock();

#if TMK_PORT_HAS_THREADS
  if (!d->manual_pump) {
#if TMK_PORT_HAS_WAKE
    tmk__g.has_wake = tmk_port_wake_open(&tmk__g.wake) == 0;
#endif
    tmk__g.has_flusher_thread = 1;
    if (tmk_port_thread_start(&tmk__g.flusher, flusher_main, NULL) != 0) {
      tmk__g.has_flusher_thread = 0;
      tmk__agent_log(&tmk__g.desc.logger, TMK_SEV_WARNING,
               "no flusher thread; call tmk_agent_pump() per frame");
    }
  }
#endif
  return 0;
}

int tmk_agent_shutdown(void) {
  if (!tmk__g.running) return TMK_ESTATE;
  tmk__apply_filter(0, 0); /* new zones stop here */
  tmk_port_store32_release(&tmk__g.running, 0u);
#if TMK_PORT_HAS_THREADS
  if (tmk__g.has_flusher_thread) {
    tmk_port_store32_release(&tmk__g.stop, 1u);
    tmk_port_thread_join(&tmk__g.flusher);
    tmk__g.has_flusher_thread = 0;
  }
#if TMK_PORT_HAS_WAKE
  if (tmk__g.has_wake) {
    tmk__g.has_wake = 0;
    tmk_port_wake_close(&tmk__g.wake);
  }
#endif
#endif
  tmk__lock(1);
  tmk__flush_cycle(1);
  tmk__flush_close();
  tmk__unlock();
  tmk_port_store32_release(&tmk__g.tls_tag, 0u); /* every thread's TLS value is stale now */
  tmk_port_store32_release(&tmk__g.gen, tmk__g.gen + 1u);
  return 0;
}

int tmk_agent_pump(void) {
  int n;
  if (!tmk__g.running) return TMK_ESTATE;
  tmk__lock(1);
  /* only the flusher thread reads it (a pump makes its next cycle wait) */
  if (TMK_PORT_HAS_THREADS) tmk__g.last_pump_ms = tmk__ms();
  n = tmk__flush_cycle(0);
  tmk__unlock();
  return n;
}

int tmk_agent_flush(void) {
  int n;
  if (!tmk__g.running) return TMK_ESTATE;
  tmk__lock(1);
  n = tmk__flush_cycle(1);
  tmk__unlock();
  return n;
}

int tmk_agent_get_stats(tmk_agent_stats* out) {
  if (!out) return TMK_EINVAL;
  memset(out, 0, sizeof *out);
  if (!tmk__g.running) return TMK_ESTATE;
  tmk__lock(1);
  tmk__flush_stats(out);
  out->ticks_per_second = tmk__g.freq;
  out->max_threads = tmk__g.nthreads;
  out->ring_bytes = tmk__g.ring_words * 8u;
  tmk__unlock();
  return 0;
}
