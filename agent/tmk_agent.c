/* tmk_agent.c — the agent's public API and hot path: init (carving the arena), shutdown, the
 * run-time filter, thread slots, and the per-thread single-producer rings that zones, markers,
 * frames, plots and messages are pushed into without locks or syscalls. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tmk_agent_internal.h"

tmk__agent tmk__g;
uint32_t tmk__filter[8];

/* ============================================================================================
 * Time
 * ========================================================================================== */

/* Extends a wrapping override clock with the flusher's published bits (see tmk_clock). */
static uint64_t extend_clock(uint64_t raw) {
  uint32_t bits = tmk__g.clk_bits;
  uint32_t e = tmk_port_load32_relaxed(&tmk__g.clk_e);
  uint64_t lo = raw & ((1ull << bits) - 1);
  uint64_t v = ((uint64_t)(e >> 1) << bits) | lo;
  if ((e & 1u) && !(lo >> (bits - 1))) v += 1ull << bits; /* wrapped since the flusher looked */
  return v;
}

static inline uint64_t now_ticks(void) {
  if (TMK__LIKELY(tmk__g.clk_fn == NULL)) return tmk_port_fast_ticks() >> tmk__g.shift;
  if (tmk__g.clk_bits == 0) return tmk__g.clk_fn(tmk__g.clk_user);
  return extend_clock(tmk__g.clk_fn(tmk__g.clk_user));
}

uint64_t tmk__now_ticks(void) { return now_ticks(); }

uint64_t tmk__ms(void) { return tmk_port_monotonic_ns() / 1000000u; }

/* ============================================================================================
 * Logging and the flush lock
 * ========================================================================================== */

void tmk__log(int level, const char* fmt, ...) {
  char line[256];
  va_list ap;
  if (!tmk__g.desc.logger.fn) return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  tmk__g.desc.logger.fn(tmk__g.desc.logger.user_data, level, line);
}

int tmk__lock(int wait) {
  for (;;) {
    uint32_t expected = 0;
    if (tmk_port_cas32(&tmk__g.flush_lock, &expected, 1u)) return 1;
    if (!wait) return 0;
    tmk_port_yield();
  }
}

void tmk__unlock(void) { tmk_port_store32_release(&tmk__g.flush_lock, 0u); }

/* ============================================================================================
 * Thread slots
 * ========================================================================================== */

static TMK_PORT_TLS tmk__thread* tls_thread;
static TMK_PORT_TLS uint32_t tls_gen;

static void on_thread_exit(void* arg) {
  tmk__thread* t = (tmk__thread*)arg;
  if (tls_thread == t && tls_gen == tmk_port_load32_acquire(&tmk__g.gen)) {
    tmk_port_store32_release(&t->state, (uint32_t)TMK__SLOT_DEAD);
    tls_thread = NULL;
  }
}

static tmk__thread* attach_thread(void) {
  uint32_t gen = tmk_port_load32_acquire(&tmk__g.gen);
  uint32_t i;
  if (!tmk_port_load32_acquire(&tmk__g.running)) return NULL;
  for (i = 0; i < tmk__g.nthreads; i++) {
    tmk__thread* t = tmk__slot(i);
    uint32_t expected = TMK__SLOT_FREE;
    if (tmk_port_load32_relaxed(&t->state) != TMK__SLOT_FREE) continue;
    if (!tmk_port_cas32(&t->state, &expected, (uint32_t)TMK__SLOT_CLAIMING)) continue;
    t->depth = 0;
    t->nmarkers = 0;
    tmk_port_store32_release(&t->state, (uint32_t)TMK__SLOT_ACTIVE);
    tls_thread = t;
    tls_gen = gen;
    tmk_port_on_thread_exit(on_thread_exit, t);
    return t;
  }
  tmk_port_add32(&tmk__g.no_thread_drops, 1u);
  return NULL;
}

static inline tmk__thread* cur_thread(void) {
  tmk__thread* t = tls_thread;
  if (TMK__LIKELY(t != NULL && tls_gen == tmk_port_load32_relaxed(&tmk__g.gen))) return t;
  return attach_thread();
}

/* The current thread's slot if it already has one in this generation (no attach). */
static inline tmk__thread* own_thread(void) {
  tmk__thread* t = tls_thread;
  return (t != NULL && tls_gen == tmk_port_load32_relaxed(&tmk__g.gen)) ? t : NULL;
}

static inline void count_drop(tmk__thread* t, int reason) {
  tmk_port_store32_relaxed(&t->drops[reason], t->drops[reason] + 1u);
}

/* ============================================================================================
 * Ring: single producer (the owning thread), single consumer (the flusher)
 * ========================================================================================== */

/* Waits for room in wait mode. Returns 1 when `words` fit, 0 when the record must be dropped. */
static int ring_wait(tmk__thread* t, uint32_t words) {
  uint32_t cap = tmk__g.ring_words;
  int ok = 0;
  tmk_port_add32(&tmk__g.waiters, 1u);
  for (;;) {
    t->cached_tail = tmk_port_load32_acquire(&t->tail);
    if (t->head - t->cached_tail <= cap - words) {
      ok = 1;
      break;
    }
    if (!tmk_port_load32_acquire(&tmk__g.running)) break;
    if (!tmk__g.has_flusher_thread && tmk__lock(0)) { /* no flusher thread: drain here */
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
  if (TMK__LIKELY(t->head - t->cached_tail <= cap - words)) return 1;
  t->cached_tail = tmk_port_load32_acquire(&t->tail);
  if (t->head - t->cached_tail <= cap - words) return 1;
  if (words > cap) {
    count_drop(t, TMK_DROP_TOO_BIG);
    return 0;
  }
  if (tmk__g.overflow == TMK_OVERFLOW_WAIT && ring_wait(t, words)) return 1;
  count_drop(t, TMK_DROP_RING_FULL);
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

static inline void ring_commit(tmk__thread* t, uint32_t words) {
  tmk_port_store32_release(&t->head, t->head + words);
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

/* ============================================================================================
 * Hot path entry points (called by the macros in telemark.h)
 * ========================================================================================== */

/* A thread without a slot (none free, agent stopped) gets a start time but no depth; its
 * tmk__zone_end finds no slot either, so the pair stays balanced and records nothing. */
uint64_t tmk__zone_begin(void) {
  tmk__thread* t = cur_thread();
  if (TMK__LIKELY(t != NULL)) t->depth++;
  return now_ticks();
}

void tmk__zone_end(tmk_site* site, uint64_t start) {
  uint64_t end = now_ticks();
  tmk__thread* t = own_thread();
  if (!t) return;
  if (t->depth == 0) { /* begun before this thread had a slot: unpaired, counted */
    count_drop(t, TMK_DROP_MISMATCH);
    return;
  }
  t->depth--;
  if (!ring_reserve(t, 4)) return;
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
  push_event(t, TMK__E_MARKER, 0, site, now_ticks(), data, len);
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
  push_event(t, TMK__E_MARKER, 1, site, now_ticks(), data, len);
}

void tmk__frame(tmk_site* site) {
  tmk__thread* t;
  if (!tmk_port_load32_relaxed(&tmk__g.running)) return;
  t = cur_thread();
  if (t) push_event(t, TMK__E_FRAME, 0, site, now_ticks(), NULL, 0);
}

void tmk__plot_i(tmk_site* site, int64_t value) {
  tmk__thread* t = cur_thread();
  if (!t || !ring_reserve(t, 4)) return;
  ring_put(t, 0, entry_header(TMK__E_PLOT_I, 0, 0, 0));
  ring_put(t, 1, (uint64_t)(uintptr_t)site);
  ring_put(t, 2, now_ticks());
  ring_put(t, 3, (uint64_t)value);
  ring_commit(t, 4);
}

void tmk__plot_d(tmk_site* site, double value) {
  tmk__thread* t = cur_thread();
  uint64_t bits;
  if (!t || !ring_reserve(t, 4)) return;
  memcpy(&bits, &value, sizeof bits);
  ring_put(t, 0, entry_header(TMK__E_PLOT_D, 0, 0, 0));
  ring_put(t, 1, (uint64_t)(uintptr_t)site);
  ring_put(t, 2, now_ticks());
  ring_put(t, 3, bits);
  ring_commit(t, 4);
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
  push_event(t, TMK__E_MESSAGE, site->severity, site, now_ticks(), text, len);
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

void tmk__apply_filter(uint32_t level, uint32_t mask) {
  uint32_t s;
  tmk__g.level = level;
  tmk__g.mask = mask;
  for (s = 0; s < 8; s++) {
    uint32_t v = (s < TMK_SEV_COUNT && s <= level && tmk__g.running) ? mask : 0u;
    tmk_port_store32_relaxed(&tmk__filter[s], v);
  }
}

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
  tmk_port_storeptr_release(&tmk__g.team_names[bit], name);
  if (tmk__g.running) {
    tmk__lock(1);
    tmk__g.force_meta = 1;
    tmk__unlock();
  }
  return 0;
}

uint64_t tmk_now(void) { return tmk__g.running ? now_ticks() : 0; }

uint64_t tmk_ticks_per_second(void) { return tmk__g.running ? tmk__g.freq : 0; }

/* ============================================================================================
 * Init / shutdown
 * ========================================================================================== */

static uint32_t pow2_floor(uint32_t v) {
  uint32_t p = 1;
  if (v == 0) return 0;
  while (p <= v / 2) p <<= 1;
  return p;
}

static uint8_t* carve(uint8_t** p, uint8_t* end, size_t n) {
  uintptr_t a = ((uintptr_t)*p + 63u) & ~(uintptr_t)63u;
  uint8_t* r = (uint8_t*)a;
  if (r > end || (size_t)(end - r) < n) return NULL;
  *p = r + n;
  return r;
}

static void flusher_main(void* arg) {
  (void)arg;
  while (!tmk_port_load32_acquire(&tmk__g.stop)) {
    int waiters = tmk_port_load32_relaxed(&tmk__g.waiters) != 0;
    if (tmk__lock(0)) {
      uint64_t now = tmk__ms();
      int due = waiters || now - tmk__g.last_pump_ms >= tmk__g.flush_interval_ms;
      uint32_t i;
      for (i = 0; i < tmk__g.nthreads && !due; i++) { /* a ring over half full drains early */
        tmk__thread* t = tmk__slot(i);
        due = tmk_port_load32_relaxed(&t->head) - t->tail > tmk__g.ring_words / 2;
      }
      if (due) {
        tmk__g.last_pump_ms = now;
        tmk__flush_cycle(waiters);
      }
      tmk__unlock();
    }
    if (!waiters) tmk_port_sleep_us(1000);
  }
}

int tmk_agent_init(const tmk_agent_desc* desc, void* arena, size_t bytes) {
  tmk_agent_desc d;
  uint8_t *p, *end;
  uint32_t max_packet, body_cap, i, threads, ring_bytes, slot_bytes;
  size_t lz4_size, remaining;
  uint32_t gen;
  int rc;

  if (tmk__g.running) return TMK_ESTATE;
  if (!arena || bytes < 1024) return arena ? TMK_ENOMEM : TMK_EINVAL;
  if (desc) d = *desc;
  else memset(&d, 0, sizeof d);
  if (d.level < 0 || d.level > TMK_LEVEL(TMK_SEV_TRACE)) return TMK_EINVAL;
  if (d.transport > TMK_TRANSPORT_FILE) return TMK_EINVAL;
  if (d.transport == TMK_TRANSPORT_CALLBACK && !d.write.fn) return TMK_EINVAL;
  if (d.clock.fn && (d.clock.frequency == 0 ||
                     (d.clock.bits != 0 && d.clock.bits != 64 &&
                      (d.clock.bits < 8 || d.clock.bits > 32))))
    return TMK_EINVAL;

  gen = tmk__g.gen;
  memset(&tmk__g, 0, sizeof tmk__g);
  tmk__g.gen = gen;
  tmk__g.desc = d;
  if (d.relay_host && strlen(d.relay_host) >= sizeof tmk__g.host_buf) return TMK_EINVAL;
  strcpy(tmk__g.host_buf, d.relay_host ? d.relay_host : "127.0.0.1");
  tmk__g.host = tmk__g.host_buf;
  if (!d.relay_port) tmk__g.desc.relay_port = TMK_PROTO_DEFAULT_PORT;
  strncpy(tmk__g.program_buf, d.program ? d.program : "telemark-app",
          sizeof tmk__g.program_buf - 1);
  tmk__g.program = tmk__g.program_buf;
  if ((d.build && strlen(d.build) >= sizeof tmk__g.build_buf) ||
      (d.label && strlen(d.label) >= sizeof tmk__g.label_buf))
    return TMK_EINVAL;
  strcpy(tmk__g.build_buf, d.build ? d.build : "");
  strcpy(tmk__g.label_buf, d.label ? d.label : "");
  if (!d.file_path) tmk__g.desc.file_path = "telemark.tmk";
  tmk__g.flush_interval_ms = d.flush_interval_ms ? d.flush_interval_ms : 10;
  tmk__g.overflow = (uint32_t)d.overflow;
  for (i = 0; i < 32; i++) tmk__g.team_names[i] = d.team_names[i];
  tmk__g.sock.fd = -1;

  /* ---- carve the arena ---- */
  max_packet = d.max_packet ? d.max_packet : (bytes < 32768 ? 512u : TMK_PROTO_DEFAULT_PACKET);
  if (max_packet < TMK_PROTO_MIN_PACKET || max_packet > TMK_PROTO_MAX_PACKET) return TMK_EINVAL;
  tmk__g.max_packet = max_packet;
  body_cap = max_packet - TMK_PROTO_MAX_HEADER;
  p = (uint8_t*)arena;
  end = p + bytes;
  tmk__g.body = carve(&p, end, body_cap);
  tmk__g.out_cap = max_packet + 3u;
  tmk__g.out = carve(&p, end, tmk__g.out_cap);
  tmk__g.rx_cap = 512;
  tmk__g.rx = carve(&p, end, tmk__g.rx_cap);
  tmk__g.batch_cap = bytes >= (256u << 10) ? 1024u : bytes >= (32u << 10) ? 256u : 16u;
  tmk__g.batch = (tmk_proto_zone*)(void*)carve(&p, end, tmk__g.batch_cap * sizeof(tmk_proto_zone));
  if (!tmk__g.body || !tmk__g.out || !tmk__g.rx || !tmk__g.batch) return TMK_ENOMEM;
  lz4_size = tmk_proto_lz4_state_size();
  if (lz4_size && !d.no_compression && bytes >= (128u << 10)) {
    tmk__g.lz4_state = carve(&p, end, lz4_size);
    tmk__g.lz4_on = tmk__g.lz4_state != NULL;
  }
  remaining = p < end ? (size_t)(end - p) : 0;
  slot_bytes = (uint32_t)((sizeof(tmk__thread) + 63u) & ~(size_t)63u) + 64u;
  threads = d.max_threads ? d.max_threads : 16u;
  if (d.ring_bytes) {
    ring_bytes = pow2_floor(d.ring_bytes);
    if (ring_bytes < 256) return TMK_EINVAL;
    if (!d.max_threads) {
      size_t fit = remaining / (ring_bytes + slot_bytes);
      threads = (uint32_t)(fit < threads ? fit : threads);
    }
  } else {
    for (;;) {
      size_t per = remaining / threads;
      ring_bytes = per > slot_bytes ? pow2_floor((uint32_t)(per - slot_bytes > (1u << 30) ? (1u << 30) : per - slot_bytes)) : 0;
      if (ring_bytes > (256u << 10)) ring_bytes = 256u << 10;
      if (ring_bytes >= 1024 || threads == 1 || d.max_threads) break;
      threads /= 2;
    }
    if (ring_bytes < 256) return TMK_ENOMEM;
  }
  if (threads == 0 || (size_t)threads * (ring_bytes + slot_bytes) > remaining) return TMK_ENOMEM;
  tmk__g.slot_stride = (uint32_t)((sizeof(tmk__thread) + 63u) & ~(size_t)63u);
  tmk__g.threads = (tmk__thread*)(void*)carve(&p, end, (size_t)threads * tmk__g.slot_stride);
  if (!tmk__g.threads) return TMK_ENOMEM;
  memset(tmk__g.threads, 0, (size_t)threads * tmk__g.slot_stride);
  for (i = 0; i < threads; i++) {
    tmk__thread* t = tmk__slot(i);
    t->buf = (uint64_t*)(void*)carve(&p, end, ring_bytes);
    if (!t->buf) {
      threads = i;
      break;
    }
    t->mask = ring_bytes / 8u - 1u;
    t->index = i;
  }
  if (threads == 0) return TMK_ENOMEM;
  tmk__g.nthreads = threads;
  tmk__g.ring_words = ring_bytes / 8u;
  tmk_proto_writer_init(&tmk__g.w, tmk__g.body, body_cap);

  /* ---- clock ---- */
  if (d.clock.fn) {
    tmk__g.freq = d.clock.frequency;
    tmk__g.clk_bits = (d.clock.bits == 64) ? 0u : d.clock.bits;
    tmk__g.clk_user = d.clock.user_data;
    tmk__g.clk_fn = d.clock.fn;
    if (tmk__g.clk_bits) { /* seed the extension from the first reading */
      uint64_t raw = d.clock.fn(d.clock.user_data) & ((1ull << tmk__g.clk_bits) - 1);
      tmk__g.clk_ext = raw;
      tmk__g.clk_e = (uint32_t)(raw >> (tmk__g.clk_bits - 1));
    }
  } else {
    /* Scale a fast counter down to at most ~250 MHz: finer ticks cost wire bytes, not insight. */
    uint64_t f = tmk_port_fast_ticks_calibrate();
    while ((f >> tmk__g.shift) > 250000000u) tmk__g.shift++;
    tmk__g.freq = f >> tmk__g.shift;
  }

  tmk__g.session_id = tmk_port_random64();
  tmk__g.force_meta = 1;
  rc = tmk__transport_open();
  if (rc < 0) return rc;

  tmk__g.running = 1;
  tmk_port_store32_release(&tmk__g.gen, gen + 1u);
  tmk__apply_filter(d.level ? (uint32_t)(d.level - 1) : (uint32_t)TMK_SEV_INFO,
                    d.verbosity ? d.verbosity : 0xFFFFFFFFu);
  tmk__log(TMK_SEV_INFO, "telemark: agent up, %u thread slot(s) x %u-byte rings, %s%s",
           (unsigned)threads, (unsigned)ring_bytes, tmk__g.lz4_on ? "lz4, " : "",
           tmk__transport_name());
  tmk__lock(1);
  tmk__send_hello();
  tmk__unlock();

  tmk__g.has_flusher_thread = 0;
  if (!d.manual_pump && TMK_PORT_HAS_THREADS) {
    tmk__g.has_flusher_thread = 1;
    if (tmk_port_thread_start(&tmk__g.flusher, flusher_main, NULL) != 0) {
      tmk__g.has_flusher_thread = 0;
      tmk__log(TMK_SEV_WARNING, "telemark: no flusher thread; call tmk_agent_pump() per frame");
    }
  }
  return 0;
}

int tmk_agent_shutdown(void) {
  if (!tmk__g.running) return TMK_ESTATE;
  tmk__apply_filter(0, 0); /* new zones stop here */
  tmk_port_store32_release(&tmk__g.running, 0u);
  tmk__apply_filter(0, 0);
  if (tmk__g.has_flusher_thread) {
    tmk_port_store32_release(&tmk__g.stop, 1u);
    tmk_port_thread_join(&tmk__g.flusher);
    tmk__g.has_flusher_thread = 0;
  }
  tmk__lock(1);
  tmk__flush_cycle(1);
  tmk__send_bye();
  tmk__transport_close();
  tmk__unlock();
  tmk_port_store32_release(&tmk__g.gen, tmk__g.gen + 1u);
  return 0;
}

int tmk_agent_pump(void) {
  int n;
  if (!tmk__g.running) return TMK_ESTATE;
  tmk__lock(1);
  tmk__g.last_pump_ms = tmk__ms();
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
  int i;
  if (!out) return TMK_EINVAL;
  memset(out, 0, sizeof *out);
  if (!tmk__g.running) return TMK_ESTATE;
  tmk__lock(1);
  tmk__account_drops();
  for (i = 0; i < TMK_DROP_REASON_COUNT; i++) out->drops[i] = tmk__g.drops[i];
  out->packets_sent = tmk__g.packets_sent;
  out->bytes_sent = tmk__g.bytes_sent;
  out->session_id = tmk__g.session_id;
  out->ticks_per_second = tmk__g.freq;
  out->max_threads = tmk__g.nthreads;
  out->ring_bytes = tmk__g.ring_words * 8u;
  out->max_packet = tmk__g.max_packet;
  out->level = tmk__g.level;
  out->verbosity = tmk__g.mask;
  out->control_applied = tmk__g.control_applied;
  out->transport = tmk__g.transport;
  out->connected = tmk__g.transport == TMK_TRANSPORT_TCP ? tmk__g.tcp_state == 2 : 1;
  out->welcomed = tmk__g.welcomed;
  out->rejected = tmk__g.rejected;
  out->lz4 = tmk__g.lz4_on;
  tmk__unlock();
  return 0;
}
