/* tmk_agent_internal.h — the agent's shared internals: the per-thread ring layout, the agent
 * state, and what the API and hot path (tmk_agent.c) call in the flusher (tmk_flush.c). Calls
 * go one way: tmk_agent.c -> tmk_flush.c -> tmk_transport.c (tmk_transport.h). Not installed. */
#ifndef TMK_AGENT_INTERNAL_H
#define TMK_AGENT_INTERNAL_H

#include "telemark.h"
#include "tmk_port.h"

/* TMK_NO_KEY=1 leaves packet authentication (desc.key, SipHash-2-4) out of the agent: a desc
 * with a key is then TMK_ENOTSUP. CMake: -DTMK_AGENT_KEY=OFF. */
#ifndef TMK_NO_KEY
#define TMK_NO_KEY 0
#endif
#if TMK_NO_KEY != 0 && TMK_NO_KEY != 1
#error "TMK_NO_KEY must be 0 or 1"
#endif
#include "tmk_proto.h"
#include "tmk_transport.h"

/* ---- Ring entries -------------------------------------------------------------------------
 * A ring is a power-of-two array of 64-bit words with 32-bit free-running head/tail indices
 * (no 64-bit atomics needed). Every entry starts with a header word:
 *   bits 0-7 type, bits 8-15 aux, bits 16-31 payload bytes, bits 32-63 depth
 * then the site pointer, a time, and type-specific words (payload bytes are packed into
 * following words, wrapping like everything else). */
enum {
  TMK__E_ZONE = 1,     /* site, start, end; depth in header */
  TMK__E_FRAME = 2,    /* site (may be NULL), time */
  TMK__E_PLOT_I = 3,   /* site, time, value */
  TMK__E_PLOT_D = 4,   /* site, time, value bits */
  TMK__E_MARKER = 5,   /* site, time, payload; aux 1 = END */
  TMK__E_MESSAGE = 6,  /* site, time, text */
  TMK__E_THREAD_NAME = 7 /* -, -, name */
};
#define TMK__E_WORDS(payload_bytes) (3u + ((uint32_t)(payload_bytes) + 7u) / 8u)
#define TMK__MARKER_STACK 16
#define TMK__NAME_MAX 31
#define TMK__NO_CUT 0xFFFFFFFFu
/* Largest ring the arena is split into when desc.ring_bytes is 0: 10 ms of one thread recording
 * zones flat out (~20 ns and 32 bytes each) is 16 MB. */
#define TMK__RING_AUTO_MAX (16u << 20)
#if defined(__GNUC__) || defined(__clang__)
#define TMK__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TMK__NOINLINE __attribute__((noinline))
#else
#define TMK__UNLIKELY(x) (x)
#define TMK__NOINLINE
#endif

/* Keeps what the flusher writes off the cache line a recording thread writes. One thread of
 * execution shares no lines (TMK_PORT_ONE_THREAD): there it is 4 bytes, so the fields behind it
 * stay within reach of a small board's short loads and stores. */
#define TMK__PAD (TMK_PORT_ONE_THREAD ? 4 : 64)

enum { TMK__SLOT_FREE = 0, TMK__SLOT_CLAIMING = 1, TMK__SLOT_ACTIVE = 2, TMK__SLOT_DEAD = 3 };

typedef struct tmk__thread {
  /* written by the producing thread */
  uint32_t head;
  uint32_t cached_tail;
  uint32_t depth;
  uint32_t nmarkers;
  uint32_t held; /* ring words promised to open zones: a zone takes its room when it begins */
  uint32_t cut;  /* depth of the open zone whose subtree is being dropped, TMK__NO_CUT if none */
  uint32_t wake_mark; /* head at which to wake the flusher next: every half ring written */
  uint32_t drops[TMK_DROP_REASON_COUNT]; /* cumulative; read by the flusher */
  tmk_site* markers[TMK__MARKER_STACK];  /* NULL entry: a BEGIN that was filtered out */
  uint8_t pad0[TMK__PAD];
  /* written by the flusher */
  uint32_t tail;
  uint32_t state; /* TMK__SLOT_*: FREE->CLAIMING->ACTIVE by the thread, DEAD by its exit
                     hook, back to FREE by the flusher once drained */
  uint32_t seen[TMK_DROP_REASON_COUNT];
  uint32_t name_len;
  char name[TMK__NAME_MAX + 1];
  /* fixed after init */
  uint64_t* buf;
  uint32_t mask; /* words - 1 */
  /* set by the thread that claims the slot, before the ACTIVE release; read by the flusher */
  uint32_t id; /* the thread id on the wire: a new one for every thread that claims the slot */
} tmk__thread;

/* ---- Agent state: the hot path's, owned by tmk_agent.c ------------------------------------
 * The flusher (tmk_flush.c) owns its own state; from this one it drains the rings, reads the
 * clock and publishes clk_e. */
typedef struct tmk__agent {
  /* read by the hot path: keep together */
  uint32_t gen;     /* bumped by init and shutdown; TLS thread pointers of older gens are stale */
  uint32_t running;
  uint32_t shift;   /* built-in timer: ticks = counter >> shift (TMK__TICK_SHIFT) */
  uint32_t clk_bits;  /* clock override width when it wraps (8..32), else 0 */
  uint32_t clk_e;   /* extended clock bits (bits-1 .. bits+30), kept fresh by the flusher */
  uint32_t overflow;
  uint64_t (*clk_fn)(void*);
  void* clk_user;
  tmk__thread* threads;
  uint32_t nthreads;
  uint32_t ring_words;
  uint32_t has_flusher_thread;
  uint32_t slot_stride; /* bytes between slots: a multiple of 64, so no two threads share a
                           cache line */
  uint32_t tls_tag;     /* this generation's TLS tag, 0 when stopped (tmk_agent.c, Thread slots) */
  uint8_t pad0[TMK__PAD];
  uint32_t waiters; /* producers blocked in wait mode */
  uint32_t flusher_asleep; /* 1 while the flusher waits for a wake-up; cleared by who wakes it */
  uint32_t has_wake;       /* the port's wake-up is open (tmk_port.h, TMK_PORT_HAS_WAKE) */
#if TMK_PORT_HAS_WAKE
  tmk_port_wake wake;
#endif
  uint32_t no_thread_drops;
  uint32_t thread_ids; /* wire thread ids handed out so far (attach_thread) */

  /* flusher side */
  uint32_t flush_lock;
  uint32_t stop;
#if TMK_PORT_HAS_THREADS
  tmk_port_thread flusher;
#endif
  tmk_agent_desc desc; /* as given, defaults filled in; its strings are the caller's */
  uint64_t freq;       /* agent ticks per second */
  uint32_t flush_interval_ms;
  uint64_t last_pump_ms;
} tmk__agent;

extern tmk__agent tmk__g;

/* Thread slots in use: one, fixed, on a port with one thread of execution (TMK_PORT_ONE_THREAD). */
#define TMK__NTHREADS (TMK_PORT_ONE_THREAD ? 1u : tmk__g.nthreads)
static inline tmk__thread* tmk__slot(uint32_t i) {
  return (tmk__thread*)(void*)((uint8_t*)tmk__g.threads + (size_t)i * tmk__g.slot_stride);
}

/* ---- Time (inline: the hot path and the flusher both read it) ----------------------------- */

/* The hot path shifts 64-bit values only by constants: a variable 64-bit shift is a libgcc call
 * (__lshrdi3, __ashldi3) on 32-bit targets, so those are built from 32-bit shifts there. */

/* Returns v >> s for s < 32. */
static inline uint64_t tmk__shr64(uint64_t v, uint32_t s) {
#if UINTPTR_MAX > 0xFFFFFFFFu
  return v >> s;
#else
  uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
  if (s == 0) return v;
  return ((uint64_t)(hi >> s) << 32) | (lo >> s) | (hi << (32u - s));
#endif
}

/* Extends a wrapping override clock (8..32 bits) with the flusher's published bits (see
 * tmk_clock): clk_e holds bits [bits-1, bits+31) of the 64-bit time. */
static inline uint64_t tmk__extend_clock(uint64_t raw) {
  uint32_t bits = tmk__g.clk_bits;
  uint32_t e = tmk_port_load32_relaxed(&tmk__g.clk_e);
#if UINTPTR_MAX > 0xFFFFFFFFu /* 64-bit shifts are instructions here */
  uint64_t lo64 = raw & ((1ull << bits) - 1);
  uint64_t v = ((uint64_t)(e >> 1) << bits) | lo64;
  if ((e & 1u) && !(lo64 >> (bits - 1))) v += 1ull << bits; /* wrapped since the flusher looked */
  return v;
#else
  /* bits is 8..32; hi << bits is taken in two steps (a shift by 32 is undefined in C). A wrap
   * adds 2^bits: 1 to hi (below 2^31) before it is shifted, a 32-bit add. */
  uint32_t lo = (uint32_t)raw & (0xFFFFFFFFu >> (32u - bits));
  uint32_t hi = (e >> 1) + ((e & 1u) && !(lo >> (bits - 1u))); /* wrapped since it looked */
  return ((uint64_t)(hi >> (32u - bits)) << 32) | (hi << (bits - 1u) << 1) | lo;
#endif
}

/* The built-in timer is scaled down to at most ~250 MHz (finer ticks cost wire bytes, not
 * insight): a nanosecond counter by the constant 2, a calibrated one by what tmk_agent_init
 * measured. */
#if TMK_PORT_FAST_TICKS_NS
#define TMK__TICK_SHIFT 2u
typedef char tmk__tick_shift_check[1000000000u >> TMK__TICK_SHIFT == 250000000u ? 1 : -1];
#else
#define TMK__TICK_SHIFT tmk__g.shift
#endif

/* Returns the agent's time in ticks (what zones record). */
static inline uint64_t tmk__now_ticks_inline(void) {
  if (TMK__LIKELY(tmk__g.clk_fn == NULL)) return tmk__shr64(tmk_port_fast_ticks(), TMK__TICK_SHIFT);
  if (tmk__g.clk_bits == 0) return tmk__g.clk_fn(tmk__g.clk_user);
  return tmk__extend_clock(tmk__g.clk_fn(tmk__g.clk_user));
}
#if defined(__OPTIMIZE_SIZE__)
uint64_t tmk__now_ticks(void); /* -Os (a small board): one copy, in tmk_agent.c */
#else
static inline uint64_t tmk__now_ticks(void) { return tmk__now_ticks_inline(); }
#endif

/* Returns milliseconds for the flusher's timers, from the agent's clock (tmk_flush.c). Call with
 * the flush lock held (or before the flusher runs): it converts incrementally. Only on a port
 * with threads or sockets: without both the one timer counts ticks (tmk_flush.c, MS_TIMERS). */
uint64_t tmk__ms(void);

/* ---- The flush lock (a spin lock: the flusher thread, tmk_agent_pump and API calls) ------- */
static inline int tmk__lock(int wait) {
  for (;;) {
    uint32_t expected = 0;
    if (tmk_port_cas32(&tmk__g.flush_lock, &expected, 1u)) return 1;
    if (!wait) return 0;
    tmk_port_yield();
  }
}

static inline void tmk__unlock(void) { tmk_port_store32_release(&tmk__g.flush_lock, 0u); }

/* ---- tmk_flush.c (called with the lock held) ----------------------------------------------- */
/* What tmk_agent_init hands the flusher: buffers carved from the arena and the session facts. */
typedef struct tmk__flush_config {
  uint64_t session_id;
  void* state; /* tmk__flush_state_size() bytes, 64-byte aligned: the flusher's whole state */
  uint8_t* body; /* max_packet - TMK_PROTO_MAX_HEADER bytes */
  uint8_t* out;  /* max_packet + 3 bytes: room for a stream length prefix */
  uint8_t* rx;
  tmk_proto_zone* batch;
  void* lz4_state; /* NULL: no compression */
  const uint8_t* key; /* NULL: unkeyed; else 16 bytes, copied (never set when TMK_NO_KEY) */
  uint32_t max_packet;
  uint32_t rx_cap;
  uint32_t batch_cap;
} tmk__flush_config;

/* Returns the bytes of arena the flusher's state takes (tmk__flush_config.state). */
size_t tmk__flush_state_size(void);
/* Starts a session: takes the buffers, copies host and program, opens the transport desc
 * names. Returns 0 or a negative TMK_E* code. */
int tmk__flush_open(const tmk__flush_config* c);
/* Fills the flusher's part of *out (drops, packets, session, filter, transport). */
void tmk__flush_stats(tmk_agent_stats* out);
/* Names verbosity bit `bit` (0..31) and resends metadata. */
void tmk__flush_set_team(unsigned bit, const char* name);
/* One flusher cycle: reads the relay's packets (applying WELCOME, REJECT, CONTROL), drains the
 * rings (every entry when full != 0), sends metadata when due. Returns DATA packets sent. */
int tmk__flush_cycle(int full);
/* Says HELLO (§6.1). Returns 0 or a negative TMK_E* code from the transport. */
int tmk__send_hello(void);
/* Says BYE and closes the transport. */
void tmk__flush_close(void);
/* Sets the run-time filter tmk__filter[] (the flusher owns it: CONTROL packets set it too). */
void tmk__apply_filter(uint32_t level, uint32_t mask);

#endif /* TMK_AGENT_INTERNAL_H */
