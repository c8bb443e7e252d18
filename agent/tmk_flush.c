/* tmk_flush.c — the flusher: drains every thread's ring, registers call sites, sorts zones into
 * depth-first order, encodes DATA packets with protocol/ (compressing when it can) and hands
 * them to the transport; re-sends descriptors, names, clock sync and cumulative drop counts
 * every 2 s (docs/PROTOCOL.md §5.1, §5.9); says HELLO and BYE and applies what the relay sends
 * back (WELCOME, REJECT, CONTROL: §6), which the transport hands over. Owns the run-time filter.
 * Runs on the flusher thread or in tmk_agent_pump(). */
#include <string.h>

#include "tmk_agent_internal.h"

#define META_INTERVAL_MS 2000u
/* A port with neither threads nor sockets has one timer, the metadata interval, and keeps it in
 * ticks: no tick-to-millisecond conversion (tmk__ms) in such an image. */
#define MS_TIMERS (TMK_PORT_HAS_THREADS || TMK_PORT_HAS_SOCKETS)
#define HELLO_INTERVAL_MS 2000u
/* desc.on_demand over UDP: HELLO this often while welcomed, and a relay that has not answered
 * one for ON_DEMAND_GONE_MS is gone (recording stops). */
#define ON_DEMAND_HELLO_MS 1000u
#define ON_DEMAND_GONE_MS 3000u
/* UDP pacing (desc.udp_rate): a token bucket of at most PACE_BURST bytes, refilled each ms. */
#define PACE_BURST (128u * 1024u)
#define PACE_DEFAULT_KB 32768u
#define PACE_MAX_WAITS 50 /* 0.5 ms each: a clock that stands still (desc.clock) cannot hang us */
#define NO_THREAD 0xFFFFFFFFu
/* How long a full socket may hold up a send: the flusher thread can wait; tmk_agent_pump() runs
 * on the game's thread and must not. */
#define SEND_WAIT_MS(g) ((g)->has_flusher_thread ? 1000u : 2u)

/* The flusher's state: one per process, owned by this file. */
typedef struct tmk__flusher {
  /* Scalars first: the first 128 bytes are what a small board's short loads and stores reach. */
  uint8_t* pkt;       /* c.out + 3: packets are written here (c.max_packet bytes at most), after
                         room for the stream length prefix */
  tmk_site* sites;
  uint32_t batch_len;
  uint32_t pkt_zones; /* zones in the packet being written */
  uint32_t next_site_id;
  int rejected;
  int force_meta;
  int welcomed;
  int lz4_on;
  uint32_t level; /* the filter tmk__filter[] holds */
  uint32_t mask;
  uint32_t ms_div, ms_rem;    /* ticks per ms (0: slower than 1 kHz), ticks not yet counted */
  uint32_t no_thread_seen;
  int pace_now;         /* this cycle may wait for tokens (flusher thread, flush, shutdown) */
#if !defined(__OPTIMIZE_SIZE__)
  uint32_t batch_unsorted; /* drain_thread could not place every zone of the batch: sort it
                              (here, in the padding before a 64-bit field: TMK_ARENA_MIN holds) */
#endif
  uint64_t ms, ms_ticks;      /* tmk__ms: the last result and the ticks it was taken at */
  uint64_t seq;
  uint64_t packets_sent;
  uint64_t zones_sent;
  uint64_t zones_unsent;
  uint64_t last_meta; /* when metadata last went out: in ms, in ticks without MS_TIMERS */
  uint64_t clk_ext; /* 64-bit view of a wrapping override clock (publishes tmk__g.clk_e) */
  uint64_t drops[TMK_DROP_REASON_COUNT];
  uint64_t drops_sent[TMK_DROP_REASON_COUNT];
  tmk__flush_config c; /* as tmk_agent_init gave it: buffers, session id, max_packet (its key
                          pointer is the caller's: see key) */
  uint64_t last_hello_ms;
  uint64_t last_welcome_ms;
  uint64_t pace_ms;     /* when pace_tokens was last refilled */
  uint64_t pace_tokens; /* bytes that may go out now */
  int has_control;
  uint32_t control_seq;
  uint32_t control_applied;
  uint32_t unauthenticated; /* relay packets ignored for a missing or wrong MAC */
#if !TMK_NO_KEY
  int keyed;
  uint8_t key[TMK_PROTO_KEY_LEN]; /* desc.key: packets out are sealed, packets in checked */
#endif
  char host[256]; /* copies: the caller's strings need not outlive init */
  char program[128];
  char build[TMK_PROTO_MAX_LABEL + 1]; /* HELLO §6.1 trailing fields, "" when not given */
  char label[TMK_PROTO_MAX_LABEL + 1];
  const char* team_names[32];
  tmk_proto_writer w;
  tmk__transport tr;
  /* scratch, here rather than on the stack (a board may have 1 KB of stack to spare) */
  uint8_t text[TMK_PROTO_MAX_STRING + 8]; /* a marker's or message's bytes out of the ring */
  tmk_proto_reader rd;                    /* reads what the relay sent */
} tmk__flusher;
/* tmk__send_hello sends the program name whole */
typedef char tmk__program_fits[sizeof((tmk__flusher*)0)->program <= TMK_PROTO_MAX_STRING + 1 ? 1 : -1];

/* Carved from the game's arena by tmk_agent_init (tmk__flush_open): nothing of it is static. */
static tmk__flusher* F;

size_t tmk__flush_state_size(void) { return sizeof(tmk__flusher); }
uint32_t tmk__filter[8];

/* ============================================================================================
 * Milliseconds for the timers, with 32-bit division only
 * ========================================================================================== */

/* f / 1000 for f < 500 * 2^32 (f / 1000 < 2^31), by 16-bit digits: each step divides a value
 * below 1000 * 2^16 by 1000, so 32-bit divisions suffice. */
static uint32_t per_ms(uint64_t f) {
  uint32_t mid = (uint32_t)(f >> 16), lo = (uint32_t)f & 0xFFFFu;
  return (mid / 1000u << 16) + ((mid % 1000u) << 16 | lo) / 1000u;
}

static void ms_start(tmk__flusher* g) {
  uint64_t f = tmk__g.freq;
  /* ticks per ms, below 2^31 (a clock of 2.1 THz or more is counted as one of 2.1 THz) */
  g->ms_div = (f >> 32) >= 500u ? 0x7FFFFFFFu : per_ms(f);
  g->ms_ticks = tmk__now_ticks();
  g->ms = 0;
  g->ms_rem = 0;
}

/* (Without MS_TIMERS only code that never runs there calls it, and ms_start does not run.) */
uint64_t tmk__ms(void) {
  tmk__flusher* g = F;
  uint64_t t = tmk__now_ticks(), delta = t - g->ms_ticks, ms = g->ms;
  uint32_t steps = 0;
  if (delta >> 63) return g->ms; /* a clock that stepped back: wait for it */
  g->ms_ticks = t;
  /* 32-bit divisions only (a 64-bit one is a libgcc helper of ~700 bytes on a 32-bit board):
   * a pause of 2^31 ticks or more (8.6 s at 250 MHz, 86 s at 25 MHz) is counted 2^31 ticks at
   * a time, at most 2^16 times: what a clock jumps beyond 2^47 ticks (6.5 days at 250 MHz) is
   * not counted, and no timer notices (each waits seconds at most, so all are due either way).
   * ms_rem < ms_div < 2^31, so ms_rem + 2^31 fits. */
  for (;;) {
    uint32_t div = g->ms_div, sum = g->ms_rem + (delta >> 31 ? 0x80000000u : (uint32_t)delta);
    if (div == 0) { /* a clock slower than 1 kHz: whole ticks, scaled (ms_rem stays 0) */
      uint32_t f = (uint32_t)tmk__g.freq ? (uint32_t)tmk__g.freq : 1u;
      ms += (uint64_t)sum * (1000u / f);
    } else {
      ms += sum / div;
      g->ms_rem = sum % div;
    }
    if (!(delta >> 31) || ++steps == 0x10000u) return g->ms = ms;
    delta -= 0x80000000u;
  }
}

/* A constant 0 on a port without sockets, so what only a relay on a socket needs (reading its
 * packets, on-demand recording, UDP pacing) drops out of a board's image. */
static int is_socket(const tmk__flusher* g) {
  return TMK_PORT_HAS_SOCKETS &&
         (g->tr.kind == TMK_TRANSPORT_UDP || g->tr.kind == TMK_TRANSPORT_TCP);
}

/* Whether the relay refused this agent: only a relay on a socket can say so (REJECT), so a
 * constant 0 on a port without sockets. */
static int rejected(const tmk__flusher* g) { return TMK_PORT_HAS_SOCKETS && g->rejected; }

/* The time a send is stamped with: only a socket transport uses it (TCP connection timing,
 * HELLO repeats), so a port without sockets does not read the clock for it. */
static uint64_t send_ms(void) { return TMK_PORT_HAS_SOCKETS ? tmk__ms() : 0u; }

/* Whether records may be taken: always, but with desc.on_demand over a socket only while a
 * relay listens (it said WELCOME and is not gone). */
static int listening(const tmk__flusher* g) {
  return !tmk__g.desc.on_demand || !is_socket(g) || g->welcomed;
}

void tmk__apply_filter(uint32_t level, uint32_t mask) {
  uint32_t s, on = tmk__g.running && listening(F);
  F->level = level;
  F->mask = mask;
  for (s = 0; s < 8; s++) {
    uint32_t v = ((s < TMK_SEV_COUNT) & (s <= level) & on) ? mask : 0u; /* (no branches) */
    tmk_port_store32_relaxed(&tmk__filter[s], v);
  }
}

/* A relay answered (welcomed = 1) or went away (0): with desc.on_demand recording follows. */
static void set_welcomed(tmk__flusher* g, int welcomed) {
  if (g->welcomed == welcomed) return;
  g->welcomed = welcomed;
  if (!tmk__g.desc.on_demand || !is_socket(g)) return;
  tmk__apply_filter(g->level, g->mask);
  tmk__agent_log(&tmk__g.desc.logger, TMK_SEV_INFO,
                 welcomed ? "a relay listens: recording (on demand)"
                          : "the relay is gone: recording stops (on demand)");
}

/* ============================================================================================
 * Packets
 * ========================================================================================== */

/* Waits until `len` bytes may go out over UDP at desc.udp_rate. Only where waiting is allowed:
 * on the flusher thread, in tmk_agent_flush() and in shutdown, never in tmk_agent_pump(). */
static void pace(tmk__flusher* g, size_t len) {
  uint32_t kb = tmk__g.desc.udp_rate ? tmk__g.desc.udp_rate : PACE_DEFAULT_KB;
  /* bytes per ms = kb * 1024 / 1000, with 32-bit divisions only (see tmk__ms) */
  uint64_t per_ms = (uint64_t)(kb / 1000u) * 1024u + (kb % 1000u) * 1024u / 1000u;
  int waits;
  if (!is_socket(g) || g->tr.kind != TMK_TRANSPORT_UDP || !g->pace_now) return;
  for (waits = 0; waits < PACE_MAX_WAITS; waits++) {
    uint64_t now = tmk__ms();
    if (now != g->pace_ms) {
      g->pace_tokens += (now - g->pace_ms) * per_ms;
      if (g->pace_tokens > PACE_BURST || now < g->pace_ms) g->pace_tokens = PACE_BURST;
      g->pace_ms = now;
    }
    if (g->pace_tokens >= len) break;
    tmk_port_sleep_us(500);
  }
  g->pace_tokens = g->pace_tokens >= len ? g->pace_tokens - len : 0;
}

/* Keys a finished packet of n bytes at g->pkt when the agent has a key (§2.1). Returns the
 * length to send, or n (< 0) unchanged. */
static int seal(tmk__flusher* g, int n) {
#if !TMK_NO_KEY
  if (g->keyed && n > 0) return tmk_proto_mac_seal(g->pkt, (size_t)n, g->c.max_packet, g->key);
#else
  (void)g;
#endif
  return n;
}

/* Finishes the current packet and sends it. Returns 1 if a DATA packet went out. */
static int send_packet(void) {
  tmk__flusher* g = F;
  uint32_t zones = g->pkt_zones;
  int n, rc;
  if (tmk_proto_writer_empty(&g->w)) return 0;
  n = seal(g, tmk_proto_finish(&g->w, g->c.session_id, g->seq, g->pkt, g->c.max_packet,
                               g->lz4_on ? g->c.lz4_state : NULL));
  tmk_proto_writer_reset(&g->w);
  g->pkt_zones = 0;
  if (n < 0) {
    /* the code (negative: the log has no signed form), not tmk_strerror's text: its table is
       1.2 KB on a board, and this cannot happen with the agent's own limits */
    tmk__agent_log(&tmk__g.desc.logger, TMK_SEV_ERROR, "packet encoding failed (-%u)",
                   (unsigned)-n);
    g->drops[TMK_DROP_SEND_FAILED]++;
    g->zones_unsent += zones;
    return 0;
  }
  g->seq++;
  if (rejected(g)) {
    g->zones_unsent += zones;
    return 0;
  }
  pace(g, (size_t)n);
  rc = tmk__transport_send(&g->tr, g->pkt, (size_t)n, send_ms());
  if (rc < 0) {
    g->drops[TMK_DROP_SEND_FAILED]++;
    g->zones_unsent += zones;
    return 0;
  }
  g->packets_sent++;
  g->zones_sent += zones;
  return 1;
}

/* ============================================================================================
 * Records: put with "packet full -> send, retry once on a fresh packet"
 * ========================================================================================== */

/* A record goes to the writer in its decoded form (tmk_proto_put_record): one call for every
 * type, so a board's image holds one record writer, not one per type. The writer reads only the
 * fields of r->type (tmk_proto.h), so the records here are filled, not cleared first. */
typedef tmk_proto_record rec;

/* Selects `thread` in the writer. Returns 0 or TMK_ENOSPC. */
static int select_thread(uint32_t thread) {
  return thread == NO_THREAD ? 0 : tmk_proto_put_thread(&F->w, thread); /* 0 if already so */
}

/* Writes one record r, or zones z[0..n) when r is NULL, for `thread` (NO_THREAD:
 * thread-independent); a packet too full for it is sent and the put tried once more on a fresh
 * one. Returns how many were written (a record: 1), or 0 after counting one as TMK_DROP_TOO_BIG
 * (it fits no packet). */
static int put(const rec* r, const tmk_proto_zone* z, size_t n, uint32_t thread) {
  int attempt;
  for (attempt = 0; attempt < 2; attempt++) {
    int rc = select_thread(thread);
    if (rc == 0) rc = r ? tmk_proto_put_record(&F->w, r) : tmk_proto_put_zones(&F->w, z, n);
    if (rc > 0) return rc;
    if (rc == 0 && r) return 1;
    if ((rc < 0 && rc != TMK_ENOSPC) || tmk_proto_writer_empty(&F->w)) break;
    send_packet();
  }
  F->drops[TMK_DROP_TOO_BIG]++;
  return 0;
}

static void emit(const rec* r, uint32_t thread) { put(r, NULL, 0, thread); }

/* Writes the SITE record describing s (its id already assigned by site_id). */
static void emit_site(tmk_site* s) {
  rec r;
  tmk_proto_site* ps = &r.u.site;
  const char *name = s->name ? s->name : "", *file = s->file ? s->file : "";
  size_t nl = strlen(name), fl = strlen(file);
  r.type = TMK_REC_SITE;
  ps->id = s->id;
  ps->kind = s->kind;
  ps->severity = s->severity;
  ps->verbosity = s->verbosity;
  ps->color = s->color;
  ps->line = s->line;
  ps->name.ptr = name;
  ps->name.len = (uint32_t)(nl > TMK_PROTO_MAX_STRING ? TMK_PROTO_MAX_STRING : nl);
  if (fl > TMK_PROTO_MAX_STRING) { /* keep the end of an over-long path */
    file += fl - TMK_PROTO_MAX_STRING;
    fl = TMK_PROTO_MAX_STRING;
  }
  ps->file.ptr = file;
  ps->file.len = (uint32_t)fl;
  emit(&r, NO_THREAD);
}

/* Writes the THREAD_NAME record of slot t. */
static TMK__NOINLINE void emit_thread_name(const tmk__thread* t) {
  rec r;
  r.type = TMK_REC_THREAD_NAME;
  r.thread = t->id;
  r.u.thread_name.name.ptr = t->name;
  r.u.thread_name.name.len = t->name_len;
  emit(&r, NO_THREAD);
}

/* Gives s an id for this session and sends its SITE (site_id, on the site's first use). */
static TMK__NOINLINE uint32_t site_register(tmk_site* s) {
  s->id = ++F->next_site_id;
  s->gen = tmk__g.gen;
  s->next = F->sites;
  F->sites = s;
  emit_site(s);
  return s->id;
}

/* Returns the site's id for this session, registering it on first use. */
static inline uint32_t site_id(tmk_site* s) {
  if (!s) return 0;
  if (s->gen == tmk__g.gen && s->id) return s->id;
  return site_register(s);
}

/* ============================================================================================
 * Zones: sort a batch depth-first and encode it
 * ========================================================================================== */

static int zone_before(const tmk_proto_zone* a, const tmk_proto_zone* b) {
#if TMK_PROTO_TIME32
  /* The low 32 bits, modulo 2^32: the order of zones less than 2^31 ticks apart (every two a
   * packet can hold: tmk_proto.h), and any order is valid input to the encoder. */
  uint32_t d = (uint32_t)a->start - (uint32_t)b->start;
  if (d) return d >> 31;
#else
  if (a->start != b->start) return a->start < b->start;
#endif
  return a->depth < b->depth;
}

/* Depths drain_thread's placement tracks at once (a batch nested deeper is sorted instead). */
#define TMK__PLACE_DEPTHS 16u
#define TMK__NO_TOP 0xFFFFFFFFu

static void flush_batch(uint32_t thread) {
  tmk__flusher* g = F;
  tmk_proto_zone* z = g->c.batch;
  size_t n = g->batch_len, i, off = 0, sort = n;
  /* Insertion sort: zones arrive by end time, so only parents move (past their children). A
   * speed build's drain_thread places the zones as it copies them, and sorts here only a batch
   * it marked unsorted (it could not place every zone: see there). */
#if !defined(__OPTIMIZE_SIZE__)
  if (!g->batch_unsorted) sort = 0;
  g->batch_unsorted = 0;
  uint64_t last = sort ? z[0].start : 0; /* z[i - 1].start */
#endif
  for (i = 1; i < sort; i++) {
    size_t j = i;
#if defined(__OPTIMIZE_SIZE__) /* -Os: by swaps, the smaller loop */
    for (; j > 0 && zone_before(&z[j], &z[j - 1]); j--) {
      tmk_proto_zone v = z[j];
      z[j] = z[j - 1];
      z[j - 1] = v;
    }
#else
    tmk_proto_zone v;
    /* in place: most zones (a board skips the test). After a move z[i] is the zone that was
     * z[i - 1], so `last` holds on. */
    if (z[i].start > last || (z[i].start == last && z[i].depth >= z[i - 1].depth)) {
      last = z[i].start;
      continue;
    }
    v = z[i];
    while (j > 0 && zone_before(&v, &z[j - 1])) {
      z[j] = z[j - 1];
      j--;
    }
    z[j] = v;
#endif
  }
  while (off < n) { /* a zone that fits no packet is counted and skipped */
    int k = put(NULL, z + off, n - off, thread);
    g->pkt_zones += (uint32_t)k;
    off += k ? (size_t)k : 1u;
  }
  g->batch_len = 0;
}

/* ============================================================================================
 * Draining a ring
 * ========================================================================================== */

#if defined(__OPTIMIZE_SIZE__)
static TMK__NOINLINE /* -Os: one called copy for the entry's every word */
#else
static inline
#endif
uint64_t ring_word(const tmk__thread* t, uint32_t at) { return t->buf[at & t->mask]; }

static void ring_get_bytes(const tmk__thread* t, uint32_t at, void* out, size_t len) {
  uint8_t* p = (uint8_t*)out;
#if defined(__OPTIMIZE_SIZE__)
  size_t i; /* -Os: a byte at a time, the smaller loop */
  for (i = 0; i < len; i++) p[i] = ((const uint8_t*)&t->buf[(at + i / 8u) & t->mask])[i % 8u];
#else
  while (len > 0) {
    uint64_t word = ring_word(t, at++);
    size_t n = len < 8 ? len : 8;
    memcpy(p, &word, n);
    p += n;
    len -= n;
  }
#endif
}

static void drain_thread(tmk__thread* t) {
  tmk__flusher* g = F;
  uint32_t head = tmk_port_load32_acquire(&t->head);
  uint32_t tail = t->tail;
  uint8_t* text = g->text;
  while (tail != head) {
    uint64_t h = ring_word(t, tail);
    uint32_t type, aux;
#if !defined(__OPTIMIZE_SIZE__)
    /* Zones, the bulk: straight into the batch, the site's id from the last zone's when it is
     * the same site, the ring's tail published once per batch (a board's -Os image keeps the
     * one loop below). */
    if ((h & 0xFFu) == TMK__E_ZONE) {
      uint32_t n = g->batch_len, cap = g->c.batch_cap, unsorted = g->batch_unsorted;
      tmk_proto_zone* b = g->c.batch;
      tmk_site* last = NULL;
      uint32_t last_id = 0;
      /* in locals: the batch stores could alias *t, which would reload them every zone */
      const uint64_t* buf = t->buf;
      const uint32_t mask = t->mask;
      /* Placement (instead of sorting the batch afterwards): zones arrive by end time, each
       * after everything nested in it, and go where a depth-first order by start puts them. A
       * zone's descendants are the batch's tail from where the last zone no deeper than it
       * ended. The last zone placed (depth `top`, its subtree ending at the batch's end) and,
       * under it, one mark a depth for the others whose subtrees may still get a parent
       * (mark_depth increasing, mark_end where each subtree ends) tell where: a zone as deep as
       * the last one follows it, a deeper one starts a new subtree (the last one becomes a
       * mark), and a shallower one is a parent, moved in front of its descendants (memmove).
       * Zones before `base` (put before this loop, or before a batch was sent) are not moved:
       * when a zone's descendants may reach past base, or there are more marks than fit, the
       * batch is marked unsorted and flush_batch sorts it. */
      uint32_t mark_depth[TMK__PLACE_DEPTHS], mark_end[TMK__PLACE_DEPTHS], marks = 0, base = n;
      uint32_t top = TMK__NO_TOP; /* no zone placed since base */
      for (;;) {
        tmk_site* site = (tmk_site*)(uintptr_t)buf[(tail + 1) & mask];
        uint64_t start = buf[(tail + 2) & mask];
        const uint32_t depth = (uint32_t)(h >> 32);
        tmk_proto_zone* z;
        if (site != last) {
          last = site;
          last_id = site_id(site); /* may emit a SITE record: the batch is not touched */
        }
        if (n == cap) { /* full: encode it (as the general loop below does) */
          g->batch_len = n;
          g->batch_unsorted = unsorted;
          flush_batch(t->id);
          n = 0;
          unsorted = 0;
          marks = 0;
          base = 0;
          top = TMK__NO_TOP;
          tmk_port_store32_release(&t->tail, tail);
        }
        z = b + n;
        if (TMK__UNLIKELY(depth != top)) {
          if (depth > top) { /* (top is a real depth here: TMK__NO_TOP is above every depth) */
            if (marks < TMK__PLACE_DEPTHS) {
              mark_depth[marks] = top;
              mark_end[marks] = n;
              marks++;
            } else {
              unsorted = 1;
            }
          } else { /* a parent: its descendants are b[at..n) */
            uint32_t at = base;
            while (marks && mark_depth[marks - 1] > depth) marks--;
            if (marks) {
              at = mark_end[marks - 1];
              if (mark_depth[marks - 1] == depth) marks--; /* a sibling: the new zone's mark */
            } else if (base && b[base - 1].depth > depth) {
              unsorted = 1; /* descendants before base, maybe */
            }
            if (at != n) {
              z = b + at;
              memmove(z + 1, z, (size_t)(n - at) * sizeof *z);
            }
          }
          top = depth;
        }
        z->start = start;
        z->duration = buf[(tail + 3) & mask] - start;
        z->site = last_id;
        z->depth = depth;
        n++;
        tail += 4u;
        if (tail == head) break;
        h = buf[tail & mask];
        if ((h & 0xFFu) != TMK__E_ZONE) break;
      }
      g->batch_len = n;
      g->batch_unsorted = unsorted;
      tmk_port_store32_release(&t->tail, tail); /* copied out: free them now */
      continue;
    }
#endif
    type = (uint32_t)(h & 0xFFu);
    aux = (uint32_t)((h >> 8) & 0xFFu);
    uint32_t len = (uint32_t)((h >> 16) & 0xFFFFu), depth = (uint32_t)(h >> 32);
    tmk_site* site = (tmk_site*)(uintptr_t)ring_word(t, tail + 1);
    uint64_t time = ring_word(t, tail + 2);
    uint32_t words = (type == TMK__E_ZONE || type == TMK__E_PLOT_I || type == TMK__E_PLOT_D)
                         ? 4u
                         : TMK__E_WORDS(len);
    /* entries of types 1..6 name a call site (registered on first use); thread names do not */
    uint32_t id = type >= TMK__E_ZONE && type <= TMK__E_MESSAGE ? site_id(site) : 0;
    rec r;
    /* Filled, not cleared (see emit). A frame, plot or marker record begins with this site and
     * time, a message with this site: the common initial sequence of the union's structs. */
    r.u.frame.site = id;
    r.u.frame.time = time;
    if (len > TMK_PROTO_MAX_STRING) len = TMK_PROTO_MAX_STRING;
    switch (type) {
      case TMK__E_ZONE: {
        tmk_proto_zone* z;
        if (g->batch_len == g->c.batch_cap) flush_batch(t->id);
#if !defined(__OPTIMIZE_SIZE__)
        g->batch_unsorted = 1; /* (not reached: the loop above takes every zone) */
#endif
        z = &g->c.batch[g->batch_len++];
        z->start = time;
        z->duration = ring_word(t, tail + 3) - time;
        z->site = id;
        z->depth = depth;
        break;
      }
      case TMK__E_FRAME:
        r.type = TMK_REC_FRAME;
        emit(&r, t->id);
        break;
      case TMK__E_PLOT_I:
      case TMK__E_PLOT_D: {
        uint64_t v = ring_word(t, tail + 3);
        r.type = TMK_REC_PLOT;
        r.u.plot.is_double = type == TMK__E_PLOT_D;
        r.u.plot.i = (int64_t)v;
        memcpy(&r.u.plot.d, &v, sizeof v);
        emit(&r, t->id);
        break;
      }
      case TMK__E_MARKER:
        ring_get_bytes(t, tail + 3, text, len);
        r.type = aux ? TMK_REC_MARKER_END : TMK_REC_MARKER_BEGIN;
        r.u.marker.payload.ptr = (const char*)text;
        r.u.marker.payload.len = len;
        emit(&r, t->id);
        break;
      case TMK__E_MESSAGE:
        ring_get_bytes(t, tail + 3, text, len);
        r.type = TMK_REC_MESSAGE;
        r.u.message.severity = (uint8_t)site->severity;
        r.u.message.verbosity = site->verbosity;
        r.u.message.time = time;
        r.u.message.text.ptr = (const char*)text;
        r.u.message.text.len = len;
        emit(&r, t->id);
        break;
      case TMK__E_THREAD_NAME:
        if (len > TMK__NAME_MAX) len = TMK__NAME_MAX;
        ring_get_bytes(t, tail + 3, t->name, len);
        t->name[len] = 0;
        t->name_len = len;
        emit_thread_name(t);
        break;
      default: /* cannot happen: only this file's producers write rings */
        words = head - tail;
        break;
    }
    tail += words;
    tmk_port_store32_release(&t->tail, tail); /* entries are copied out: free them now */
  }
  if (g->batch_len) flush_batch(t->id);
  tmk_port_store32_release(&t->tail, tail);
}

/* ============================================================================================
 * Metadata and drops
 * ========================================================================================== */

static void account_drops(void) {
  tmk__flusher* g = F;
  uint32_t i, cur;
  int r;
  for (i = 0; i < TMK__NTHREADS; i++) {
    tmk__thread* t = tmk__slot(i);
    for (r = 0; r < TMK_DROP_REASON_COUNT; r++) {
      cur = tmk_port_load32_relaxed(&t->drops[r]);
      g->drops[r] += (uint32_t)(cur - t->seen[r]);
      t->seen[r] = cur;
    }
  }
  cur = tmk_port_load32_relaxed(&tmk__g.no_thread_drops);
  g->drops[TMK_DROP_NO_THREAD] += (uint32_t)(cur - g->no_thread_seen);
  g->no_thread_seen = cur;
}

/* Counts the rings' new drops, then writes the DROPS records of the reasons that changed (all
 * that are not 0 when `all`). */
static void emit_drops(int all) {
  int reason;
  rec r;
  account_drops();
  for (reason = 0; reason < TMK_DROP_REASON_COUNT; reason++) {
    if (F->drops[reason] == F->drops_sent[reason] && !(all && F->drops[reason]))
      continue;
    r.type = TMK_REC_DROPS;
    r.u.drops.reason = (uint32_t)reason;
    r.u.drops.count = F->drops[reason];
    F->drops_sent[reason] = F->drops[reason];
    emit(&r, NO_THREAD);
  }
}

static void emit_meta(void) {
  tmk__flusher* g = F;
  tmk_site* s;
  uint32_t i;
  rec r;
  for (s = g->sites; s; s = s->next) emit_site(s);
  for (i = 0; i < TMK__NTHREADS; i++) {
    tmk__thread* t = tmk__slot(i);
    if (t->name_len) emit_thread_name(t);
  }
  for (i = 0; i < 32; i++) {
    const char* name = g->team_names[i] /* set under the lock */;
    size_t len;
    if (!name) continue;
    len = strlen(name);
    r.type = TMK_REC_TEAM_NAME;
    r.u.team.bit = i;
    r.u.team.name.ptr = name;
    r.u.team.name.len = (uint32_t)(len > TMK_PROTO_MAX_STRING ? TMK_PROTO_MAX_STRING : len);
    emit(&r, NO_THREAD);
  }
  r.type = TMK_REC_CLOCK_SYNC;
  r.u.clock.ticks = tmk__now_ticks();
  r.u.clock.unix_ns = tmk_port_unix_ns();
  emit(&r, NO_THREAD);
  emit_drops(1);
}

/* Keeps the 64-bit view of a wrapping override clock and publishes its top bits. */
static void update_clock_extension(void) {
  tmk__flusher* g = F;
  uint32_t bits = tmk__g.clk_bits, m; /* 8..32: the counter's width */
  if (!tmk__g.clk_fn || !bits) return;
  m = 0xFFFFFFFFu >> (32u - bits);
  /* the ticks since the last look, modulo 2^bits: 32-bit arithmetic is enough */
  g->clk_ext += ((uint32_t)tmk__g.clk_fn(tmk__g.clk_user) - (uint32_t)g->clk_ext) & m;
  tmk_port_store32_relaxed(&tmk__g.clk_e, (uint32_t)tmk__shr64(g->clk_ext, bits - 1u));
}

/* ============================================================================================
 * Session: HELLO out, WELCOME / REJECT / CONTROL in (§6)
 * ========================================================================================== */

int tmk__send_hello(void) {
  tmk__flusher* g = F;
  tmk_proto_hello h; /* every field is set below */
  int n;
  h.proto_version = TMK_PROTO_VERSION;
  h.agent_version.ptr = "0.1.0";
  h.agent_version.len = 5;
  h.program.ptr = g->program;
  h.program.len = (uint32_t)strlen(g->program); /* < sizeof g->program <= the string limit */
  h.platform.ptr = TMK_PORT_PLATFORM;
  h.platform.len = (uint32_t)strlen(TMK_PORT_PLATFORM);
  h.arch.ptr = TMK_PORT_ARCH;
  h.arch.len = (uint32_t)strlen(TMK_PORT_ARCH);
  h.big_endian = (uint8_t)g->w.big_endian; /* the host's (tmk_proto_writer_init) */
  h.pointer_size = (uint8_t)sizeof(void*);
  h.timer_freq = tmk__g.freq;
  h.caps = (g->lz4_on ? TMK_CAP_LZ4 : 0u) | (is_socket(g) ? TMK_CAP_CONTROL : 0u) |
           (is_socket(g) && g->tr.kind == TMK_TRANSPORT_TCP ? TMK_CAP_TCP : 0u);
  h.max_packet = g->c.max_packet;
  h.build.ptr = g->build;
  h.build.len = (uint32_t)strlen(g->build);
  h.label.ptr = g->label;
  h.label.len = (uint32_t)strlen(g->label);
  if (TMK_PORT_HAS_SOCKETS) g->last_hello_ms = send_ms(); /* only sockets repeat HELLO */
  if (rejected(g) || !tmk__transport_ready(&g->tr)) return 0;
  n = seal(g, tmk_proto_encode_hello(g->pkt, g->c.max_packet, g->c.session_id, &h));
  if (n < 0) return n;
  return tmk__transport_send(&g->tr, g->pkt, (size_t)n, g->last_hello_ms);
}

static void handle_packet(const uint8_t* p, size_t len) {
  tmk__flusher* g = F;
  tmk_proto_reader* r = &g->rd;
#if !TMK_NO_KEY
  if (g->keyed && tmk_proto_mac_check(p, len, g->key) != 0) { /* §2.1: obey only the relay */
    g->unauthenticated++;
    return;
  }
#endif
  if (tmk_proto_open(r, p, len, NULL, 0) < 0) return;
  if (r->hdr.session_id != g->c.session_id && r->hdr.session_id != 0) return; /* not for us */
  switch (r->hdr.type) {
    case TMK_PKT_WELCOME: {
      tmk_proto_welcome w;
      if (tmk_proto_read_welcome(r, &w) != 0) break;
      g->last_welcome_ms = tmk__ms();
      if (!g->welcomed) {
        set_welcomed(g, 1);
        tmk__agent_log(&tmk__g.desc.logger, TMK_SEV_INFO, "relay %.*s welcomed session %08x%08x",
                 (int)w.relay_version.len, w.relay_version.ptr,
                 (unsigned)(g->c.session_id >> 32), (unsigned)g->c.session_id);
      }
      break;
    }
    case TMK_PKT_REJECT: {
      tmk_proto_reject rj;
      if (tmk_proto_read_reject(r, &rj) == 0 && !g->rejected) {
        g->rejected = 1;
        tmk__agent_log(&tmk__g.desc.logger, TMK_SEV_ERROR,
                 "relay rejected this agent (reason %u): %.*s", (unsigned)rj.reason,
                 (int)rj.text.len, rj.text.ptr);
      }
      break;
    }
    case TMK_PKT_CONTROL: {
      tmk_proto_control c;
      if (tmk_proto_read_control(r, &c) != 0) break;
      if (g->has_control && c.seq <= g->control_seq) break; /* stale or repeated (§6.4) */
      g->has_control = 1;
      g->control_seq = c.seq;
      g->control_applied++;
      tmk__apply_filter(c.severity, c.verbosity);
      tmk__agent_log(&tmk__g.desc.logger, TMK_SEV_INFO,
               "relay set level %s, verbosity 0x%08x (change %u)",
               tmk_proto_severity_name(c.severity), (unsigned)c.verbosity, (unsigned)c.seq);
      break;
    }
    default: break;
  }
}

/* Connects the transport when due and applies what the relay sent. */
static void talk_to_relay(void) {
  tmk__flusher* g = F;
  const uint8_t* pkt = NULL;
  int i, n;
  /* a new TCP connection may be a new relay */
  if (is_socket(g) && tmk__transport_tick(&g->tr, tmk__ms())) {
    set_welcomed(g, 0);
    g->force_meta = 1;
    tmk__send_hello();
  }
  /* only sockets receive (tmk__transport_recv): the callback and file transports are one-way */
  for (i = 0; i < 64 && is_socket(g) && (n = tmk__transport_recv(&g->tr, &pkt, tmk__ms())) > 0;
       i++)
    handle_packet(pkt, (size_t)n);
}

int tmk__flush_open(const tmk__flush_config* c) {
  tmk__flusher* g = F = (tmk__flusher*)c->state;
  const tmk_agent_desc* d = &tmk__g.desc;
  const uint8_t* key = TMK_NO_KEY ? NULL : c->key; /* (never set when TMK_NO_KEY) */
  int rc;
  memset(g, 0, sizeof *g);
  if (TMK_PORT_HAS_SOCKETS) { /* only a socket transport has a relay host */
    if (strlen(d->relay_host) >= sizeof g->host) return TMK_EINVAL;
    strcpy(g->host, d->relay_host);
  }
  strncpy(g->program, d->program, sizeof g->program - 1);
  /* length checked at init; "" (zeroed above) when not given */
  if (d->build) strncpy(g->build, d->build, sizeof g->build - 1);
  if (d->label) strncpy(g->label, d->label, sizeof g->label - 1);
  memcpy(g->team_names, d->team_names, sizeof g->team_names);
  g->c = *c;
  g->pkt = c->out + 3;
  g->lz4_on = c->lz4_state != NULL;
#if !TMK_NO_KEY
  g->keyed = key != NULL;
  if (key) memcpy(g->key, key, TMK_PROTO_KEY_LEN);
#endif
  tmk_proto_writer_init(&g->w, c->body,
                        c->max_packet - TMK_PROTO_MAX_HEADER - (key ? TMK_PROTO_MAC_LEN : 0u));
  g->force_meta = 1;
  update_clock_extension(); /* from clk_ext 0: seeds the extension with the first reading */
  if (MS_TIMERS) ms_start(g);
  /* the flusher thread does not run yet: tmk__flush_cycle raises the send wait once it does */
  rc = tmk__transport_open(&g->tr, d, g->host, g->c.rx, g->c.rx_cap,
                           TMK_PORT_HAS_SOCKETS ? SEND_WAIT_MS(&tmk__g) : 0u);
  if (rc == 0)
    tmk__agent_log(&d->logger, TMK_SEV_INFO, "session %08x%08x over %s%s%s",
             (unsigned)(g->c.session_id >> 32), (unsigned)g->c.session_id, tmk__transport_name(&g->tr),
             g->lz4_on ? ", lz4" : "", key ? ", keyed" : "");
  return rc;
}

void tmk__flush_stats(tmk_agent_stats* out) {
  tmk__flusher* g = F;
  int i;
  account_drops();
  for (i = 0; i < TMK_DROP_REASON_COUNT; i++) out->drops[i] = g->drops[i];
  out->packets_sent = g->packets_sent;
  out->bytes_sent = g->tr.bytes_sent;
  out->zones_sent = g->zones_sent;
  out->zones_unsent = g->zones_unsent;
  out->session_id = g->c.session_id;
  out->max_packet = g->c.max_packet;
  out->level = g->level;
  out->verbosity = g->mask;
  out->control_applied = g->control_applied;
  out->transport = g->tr.kind;
  out->connected = tmk__transport_ready(&g->tr);
  out->welcomed = g->welcomed;
  out->rejected = g->rejected;
  out->lz4 = g->lz4_on;
#if !TMK_NO_KEY
  out->keyed = g->keyed;
#endif
  out->unauthenticated = g->unauthenticated;
}

void tmk__flush_set_team(unsigned bit, const char* name) {
  F->team_names[bit & 31u] = name;
  F->force_meta = 1;
}

void tmk__flush_close(void) {
  tmk__flusher* g = F;
  int n;
  if (!rejected(g)) {
    n = seal(g, tmk_proto_encode_bye(g->pkt, g->c.max_packet, g->c.session_id));
    if (n > 0) tmk__transport_send(&g->tr, g->pkt, (size_t)n, send_ms());
  }
  tmk__transport_close(&g->tr);
}

/* ============================================================================================
 * One cycle
 * ========================================================================================== */

int tmk__flush_cycle(int full) {
  tmk__flusher* g = F;
  uint64_t before = g->packets_sent, now;
  uint32_t i;
  if (TMK_PORT_HAS_SOCKETS) { /* only sockets wait (a full socket, UDP pacing) */
    g->tr.send_wait_ms = SEND_WAIT_MS(&tmk__g); /* may wait only on the flusher thread */
    g->pace_now = tmk__g.has_flusher_thread || full;
  }
  update_clock_extension();
  talk_to_relay(); /* may (re)connect and send a HELLO: read the time after it */
#if MS_TIMERS
  now = tmk__ms();
#else
  now = tmk__now_ticks(); /* the metadata interval in ticks; a clock that steps back waits */
#endif
  if (g->welcomed && tmk__g.desc.on_demand && is_socket(g) &&
      (!tmk__transport_ready(&g->tr) ||
       (g->tr.kind == TMK_TRANSPORT_UDP && now - g->last_welcome_ms > ON_DEMAND_GONE_MS)))
    set_welcomed(g, 0); /* TCP closed, or no WELCOME to our HELLOs: nobody listens */
  if (!g->rejected && is_socket(g) &&
      now - g->last_hello_ms >= (g->welcomed ? ON_DEMAND_HELLO_MS : HELLO_INTERVAL_MS) &&
      (!g->welcomed || (tmk__g.desc.on_demand && g->tr.kind == TMK_TRANSPORT_UDP)))
    tmk__send_hello();
  if (g->force_meta || (MS_TIMERS ? now - g->last_meta >= META_INTERVAL_MS
                                   : (int64_t)(now - g->last_meta) >=
                                         (int64_t)(tmk__g.freq * (META_INTERVAL_MS / 1000u)))) {
    g->force_meta = 0;
    g->last_meta = now;
    emit_meta();
  }
  for (i = 0; i < TMK__NTHREADS; i++) {
    tmk__thread* t = tmk__slot(i);
    uint32_t state = tmk_port_load32_acquire(&t->state);
    if (state == TMK__SLOT_FREE || state == TMK__SLOT_CLAIMING) continue;
    drain_thread(t);
    if (full && tmk_port_load32_acquire(&t->head) != t->tail) drain_thread(t);
    if (state == TMK__SLOT_DEAD && tmk_port_load32_acquire(&t->head) == t->tail) {
      t->name_len = 0; /* the next owner is another thread */
      tmk_port_store32_release(&t->state, (uint32_t)TMK__SLOT_FREE);
    }
  }
  emit_drops(0);
  send_packet();
  return (int)(g->packets_sent - before);
}
