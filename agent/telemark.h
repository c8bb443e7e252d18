/* telemark.h — the telemark agent, the part of the profiler linked into a game or embedded
 * program: scoped zones, markers, frames, plots and messages sent to telemark-relay.
 * C99, compiles as C++. Never calls malloc: tmk_agent_init() takes the memory it will use. */
#ifndef TELEMARK_H
#define TELEMARK_H

#include <stddef.h>
#include <stdint.h>

#include "tmk_proto.h" /* TMK_SEV_*, TMK_DROP_*, TMK_SITE_*, TMK_E* codes */

/* ---------------------------------------------------------------------------------------------
 * Compile-time configuration
 *   TMK_ENABLED       1 (default) instruments; 0 turns every macro into nothing and every API
 *                     function into an inline no-op, so the program references no agent symbol.
 *   TMK_MAX_SEVERITY  0..5 (default 5, TMK_SEV_TRACE): zones, plots and messages more verbose
 *                     than this are stripped at compile time.
 * ------------------------------------------------------------------------------------------- */
#ifndef TMK_ENABLED
#define TMK_ENABLED 1
#endif
#if TMK_ENABLED != 0 && TMK_ENABLED != 1
#error "TMK_ENABLED must be 0 or 1"
#endif
#ifndef TMK_MAX_SEVERITY
#define TMK_MAX_SEVERITY 5
#endif
#if TMK_MAX_SEVERITY < 0 || TMK_MAX_SEVERITY > 5
#error "TMK_MAX_SEVERITY must be between 0 (critical) and 5 (trace)"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Configuration: zero-initialise, set what you need; 0 always means "default".
 * ------------------------------------------------------------------------------------------- */

typedef enum tmk_transport {
  TMK_TRANSPORT_AUTO = 0, /* UDP; TCP when no UDP socket can be opened */
  TMK_TRANSPORT_UDP = 1,
  TMK_TRANSPORT_TCP = 2,      /* length-framed, reconnects by itself */
  TMK_TRANSPORT_CALLBACK = 3, /* framed bytes handed to desc.write (UART, custom link) */
  TMK_TRANSPORT_FILE = 4      /* "TMKFILE1" + framed packets into desc.file_path */
} tmk_transport;

typedef enum tmk_overflow {
  TMK_OVERFLOW_DROP = 0, /* a full ring drops the record and counts it (never blocks) */
  TMK_OVERFLOW_WAIT = 1  /* a full ring blocks the thread until the flusher drains it */
} tmk_overflow;

/* desc.level holds TMK_LEVEL(severity) so that 0 can mean the default (TMK_SEV_INFO). */
#define TMK_LEVEL(severity) ((severity) + 1)

/* Receives the agent's log lines; level is a TMK_SEV_* value. */
typedef struct tmk_logger {
  void (*fn)(void* user_data, int level, const char* message);
  void* user_data;
} tmk_logger;

/* Callback transport: receives framed bytes (varint length + packet); returns 0 or < 0. */
typedef struct tmk_write_callback {
  int (*fn)(void* user_data, const void* data, size_t len);
  void* user_data;
} tmk_write_callback;

/* Clock override: fn returns ticks at `frequency` ticks per second. With bits in 8..32 the
 * counter wraps at 2^bits and the agent extends it to 64 bits (the flusher or
 * tmk_agent_pump() must run at least once per half wrap period). */
typedef struct tmk_clock {
  uint64_t (*fn)(void* user_data);
  void* user_data;
  uint64_t frequency;
  uint32_t bits; /* 0 or 64: full 64-bit counter */
} tmk_clock;

typedef struct tmk_agent_desc {
  const char* relay_host;     /* 0: "127.0.0.1" (name or address; copied) */
  uint16_t relay_port;        /* 0: 7720 */
  tmk_transport transport;    /* 0: auto */
  const char* program;        /* 0: "telemark-app" (copied, at most 127 bytes) */
  const char* file_path;      /* file transport; 0: "telemark.tmk" */
  tmk_write_callback write;   /* callback transport */
  uint32_t ring_bytes;        /* per thread, rounded down to a power of two; 0: from arena */
  uint32_t max_threads;       /* 0: as many as the arena holds, up to 16 (1 on a one-thread port) */
  tmk_overflow overflow;      /* 0: drop */
  uint32_t flush_interval_ms; /* 0: 10 */
  uint32_t max_packet;        /* 0: 1200; 16 KB over TCP or UDP to 127.x/localhost/::1 with an
                                 arena >= 1 MB; 512 for arenas under 32 KB */
  int level;                  /* TMK_LEVEL(TMK_SEV_*); 0: TMK_LEVEL(TMK_SEV_INFO) */
  uint32_t verbosity;         /* team mask; 0: all teams */
  const char* team_names[32]; /* names of verbosity bits; strings must outlive the agent */
  tmk_clock clock;            /* fn 0: built-in timer (rdtsc on x86-64, monotonic elsewhere) */
  tmk_logger logger;          /* fn 0: silent */
  int manual_pump;            /* 1: no background thread, call tmk_agent_pump() (always so in
                                 TMK_NO_THREADS builds) */
  int no_compression;         /* 1: never LZ4, even when built with it */
  uint32_t udp_rate;          /* UDP sends are paced to this many KB/s in bursts of at most
                                 128 KB, so a relay's socket buffer does not overflow; 0: 32768
                                 (32 MB/s, what one relay core decodes). Not in tmk_agent_pump() */
  int on_demand;              /* 1 (UDP/TCP): record nothing (one filter test a zone) until a
                                 relay says WELCOME, and again once it is gone (TCP closed, or
                                 no WELCOME to the 1 s HELLOs over UDP for 3 s). Not for one-way
                                 links: they never hear WELCOME */
  const char* build;          /* 0: none. Build id sent in HELLO, e.g. "4121" (copied, at most
                                 64 bytes); the relay's history groups by it */
  const char* label;          /* 0: none. Free label sent in HELLO, e.g. "nightly" (copied,
                                 at most 64 bytes) */
  const uint8_t* key;         /* 0: unkeyed. 16 bytes (copied): every packet carries a
                                 SipHash-2-4 MAC with this key and only relay packets with a
                                 valid one are obeyed (docs/PROTOCOL.md §2.1, SECURITY.md). A
                                 build with TMK_NO_KEY answers TMK_ENOTSUP */
} tmk_agent_desc;

typedef struct tmk_agent_stats {
  uint64_t drops[TMK_DROP_REASON_COUNT]; /* cumulative, per TMK_DROP_* reason */
  uint64_t packets_sent;                 /* DATA packets handed to the transport */
  uint64_t bytes_sent;                   /* all bytes handed to the transport */
  uint64_t zones_sent;   /* zones in DATA packets the transport took */
  uint64_t zones_unsent; /* zones in DATA packets that failed to go (TMK_DROP_SEND_FAILED) or
                            were held back after a REJECT. Every zone recorded is in exactly one
                            of zones_sent, zones_unsent, drops[] */
  uint64_t session_id;
  uint64_t ticks_per_second;
  uint32_t max_threads;
  uint32_t ring_bytes;
  uint32_t max_packet;
  uint32_t level;           /* current TMK_SEV_* level */
  uint32_t verbosity;       /* current team mask */
  uint32_t control_applied; /* CONTROL packets applied */
  tmk_transport transport;  /* the transport in use (auto resolved) */
  int connected;            /* TCP: connection up; others: 1 */
  int welcomed;             /* relay answered WELCOME */
  int rejected;             /* relay answered REJECT; the agent stopped sending */
  int lz4;                  /* packets may be LZ4-compressed */
  int keyed;                /* packets carry a MAC (desc.key) */
  uint32_t unauthenticated; /* relay packets ignored: keyed agent, no MAC or a wrong one */
} tmk_agent_stats;

/* A call site: static attributes, declared by the macros below as a static variable. The
 * agent gives it an id the first time it is flushed and sends it as a SITE record. */
typedef struct tmk_site {
  const char* name;
  const char* file;
  uint32_t line;
  uint32_t color; /* 0xRRGGBB, 0: let the viewer choose */
  uint32_t verbosity;
  uint8_t kind; /* TMK_SITE_* */
  uint8_t severity;
  /* owned by the agent */
  uint32_t id;
  uint32_t gen;
  struct tmk_site* next;
} tmk_site;

/* A zone in progress (TMK_ZONE keeps one on the stack). site is NULL when filtered. */
typedef struct tmk_zone_ctx {
  tmk_site* site;
  uint64_t start;
} tmk_zone_ctx;

#if TMK_ENABLED
/* ---------------------------------------------------------------------------------------------
 * API
 * ------------------------------------------------------------------------------------------- */

/* The smallest arena tmk_agent_init accepts: the flusher's state, one thread slot with a 256-byte
 * ring and 512-byte packets, when the arena is 64-byte aligned (an unaligned one needs up to 63
 * bytes more). Exact on 64-bit targets; 32-bit ones need 192 bytes less but are held to it. */
#define TMK_ARENA_MIN 8128u

/* Starts the agent with `bytes` of caller memory at `arena` (TMK_ARENA_MIN at least, 8 KB or
 * more for a few threads; it must stay valid
 * until tmk_agent_shutdown). desc may be NULL for all defaults. Returns 0 or a negative TMK_E*
 * code: TMK_ENOMEM (arena too small), TMK_EINVAL, TMK_ESTATE (already running), TMK_EIO (file
 * transport cannot create its file), TMK_ESOCKET / TMK_ENOTFOUND (no socket / unknown host). */
int tmk_agent_init(const tmk_agent_desc* desc, void* arena, size_t bytes);
/* Flushes what the rings hold, says BYE and stops; the arena may be reused afterwards. Threads
 * must have stopped recording. Returns 0 or TMK_ESTATE when the agent was not running. */
int tmk_agent_shutdown(void);
/* Runs one flusher cycle on the calling thread: drains rings, sends, reads CONTROL packets.
 * For manual_pump / TMK_NO_THREADS builds, once per frame. Returns the number of DATA packets
 * sent, or TMK_ESTATE when the agent is not running. */
int tmk_agent_pump(void);
/* Like tmk_agent_pump(), but drains every ring completely even when the periodic flush is not
 * due yet. Returns the number of DATA packets sent, or TMK_ESTATE. */
int tmk_agent_flush(void);
/* Sets the run-time filter: records pass when severity <= level and (verbosity & mask) != 0.
 * Returns 0 or TMK_EINVAL for a level above TMK_SEV_TRACE. */
int tmk_agent_set_filter(int level, uint32_t verbosity_mask);
/* Fills *out with counters and state. Returns 0 or TMK_ESTATE when not running. */
int tmk_agent_get_stats(tmk_agent_stats* out);
/* Names the calling thread (sent as THREAD_NAME; at most 31 bytes kept). */
void tmk_thread_name(const char* name);
/* Gives the calling thread's slot back now; what it recorded is still sent. Ports that notice
 * thread exit do this by themselves (docs/PORTING.md); elsewhere call it before a thread ends. */
void tmk_thread_exit(void);
/* Names verbosity bit `bit` (0..31) while the agent runs (before init: desc.team_names); the
 * string must outlive the agent. Returns 0, TMK_EINVAL, or TMK_ESTATE when not running. */
int tmk_team_name(unsigned bit, const char* name);
/* Returns the agent's current time in its own ticks (what zones record), 0 when stopped. */
uint64_t tmk_now(void);
/* Returns the agent's tick rate in ticks per second, 0 when stopped. */
uint64_t tmk_ticks_per_second(void);

/* ---- Internal entry points used by the macros (do not call directly) ---------------------- */
extern uint32_t tmk__filter[8];
uint64_t tmk__zone_begin(void);
void tmk__zone_end(tmk_site* site, uint64_t start);
void tmk__marker_begin(tmk_site* site, int pass, const void* data, size_t len);
void tmk__marker_end(const void* data, size_t len);
void tmk__frame(tmk_site* site);
void tmk__plot_i(tmk_site* site, int64_t value);
void tmk__plot_d(tmk_site* site, double value);
void tmk__message(tmk_site* site, const char* text, size_t len);

#if defined(__GNUC__) || defined(__clang__)
#define TMK__FILTER(sev) __atomic_load_n(&tmk__filter[(sev) & 7], __ATOMIC_RELAXED)
#define TMK__LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define TMK__FILTER(sev) (*(volatile uint32_t*)&tmk__filter[(sev) & 7])
#define TMK__LIKELY(x) (x)
#endif

/* The hot-path test: compile-time strip, then one load and one AND. */
#define TMK__PASS(sev, verb) \
  ((sev) <= TMK_MAX_SEVERITY && (TMK__FILTER(sev) & (uint32_t)(verb)) != 0)
#define TMK__CAT2(a, b) a##b
#define TMK__CAT(a, b) TMK__CAT2(a, b)
#define TMK__SITE(var, name, kind, sev, verb, color) \
  static tmk_site var = {(name), __FILE__, (uint32_t)__LINE__, (uint32_t)(color), \
                         (uint32_t)(verb), (uint8_t)(kind), (uint8_t)(sev), 0, 0, 0}

/* The zone context stays in registers: begin returns the start time, end gets both values. */
static inline tmk_zone_ctx tmk__zone_open(tmk_site* site, int pass) {
  tmk_zone_ctx z;
  z.site = 0;
  z.start = 0;
  if (pass) {
    z.site = site;
    z.start = tmk__zone_begin();
  }
  return z;
}
static inline void tmk__zone_close(tmk_zone_ctx* z) {
  if (z->site) tmk__zone_end(z->site, z->start);
}

#ifdef __cplusplus
} /* extern "C" */
/* C++: the zone closes in the destructor. */
struct tmk__zone_raii {
  tmk_zone_ctx z;
  tmk__zone_raii(tmk_site* site, bool pass) : z(tmk__zone_open(site, pass ? 1 : 0)) {}
  ~tmk__zone_raii() { tmk__zone_close(&z); }

 private:
  tmk__zone_raii(const tmk__zone_raii&);
  tmk__zone_raii& operator=(const tmk__zone_raii&);
};
#define TMK__ZONE(id, name, sev, verb, color)                                   \
  TMK__SITE(TMK__CAT(id, _site), name, TMK_SITE_ZONE, sev, verb, color);        \
  tmk__zone_raii TMK__CAT(id, _zone)(&TMK__CAT(id, _site), TMK__PASS(sev, verb))
extern "C" {
#elif defined(__GNUC__) || defined(__clang__)
/* C on GCC/Clang: the zone closes through __attribute__((cleanup)). Other C compilers have no
 * TMK_ZONE; use TMK_ZONE_BEGIN/TMK_ZONE_END there. */
#define TMK__ZONE(id, name, sev, verb, color)                                        \
  TMK__SITE(TMK__CAT(id, _site), name, TMK_SITE_ZONE, sev, verb, color);             \
  tmk_zone_ctx TMK__CAT(id, _zone) __attribute__((cleanup(tmk__zone_close), unused)) = \
      tmk__zone_open(&TMK__CAT(id, _site), TMK__PASS(sev, verb))
#endif

/* ---------------------------------------------------------------------------------------------
 * Macros
 * ------------------------------------------------------------------------------------------- */
#ifdef TMK__ZONE
/* A zone from here to the end of the enclosing scope. name: a string literal. */
#define TMK_ZONE(name, severity, verbosity) \
  TMK__ZONE(TMK__CAT(tmk__z, __LINE__), name, severity, verbosity, 0)
/* The same with a colour (0xRRGGBB). */
#define TMK_ZONE_C(name, severity, verbosity, color) \
  TMK__ZONE(TMK__CAT(tmk__z, __LINE__), name, severity, verbosity, color)
#endif

/* Explicit markers: BEGIN pushes on a per-thread stack, END closes the innermost one. An END
 * without BEGIN is counted (TMK_DROP_MISMATCH), never a crash. Extra data: at most 255 bytes. */
#define TMK_ZONE_BEGIN(name, severity, verbosity) \
  TMK_ZONE_BEGIN_DATA(name, severity, verbosity, NULL, 0)
#define TMK_ZONE_BEGIN_DATA(name, severity, verbosity, data, len)                         \
  do {                                                                                     \
    TMK__SITE(tmk__site, name, TMK_SITE_MARKER, severity, verbosity, 0);                   \
    tmk__marker_begin(&tmk__site, TMK__PASS(severity, verbosity), (data), (size_t)(len)); \
  } while (0)
#define TMK_ZONE_END() tmk__marker_end(NULL, 0)
#define TMK_ZONE_END_DATA(data, len) tmk__marker_end((data), (size_t)(len))

/* The main frame boundary (call once per frame), and named secondary frame sets. */
#define TMK_FRAME() tmk__frame(NULL)
#define TMK_FRAME_NAMED(name)                                           \
  do {                                                                  \
    TMK__SITE(tmk__site, name, TMK_SITE_FRAME, 0, 0xFFFFFFFFu, 0);      \
    tmk__frame(&tmk__site);                                             \
  } while (0)

/* Plot samples (severity info, all teams). */
#define TMK_PLOT_I(name, value)                                                           \
  do {                                                                                    \
    TMK__SITE(tmk__site, name, TMK_SITE_PLOT, TMK_SEV_INFO, 0xFFFFFFFFu, 0);              \
    if (TMK__PASS(TMK_SEV_INFO, 0xFFFFFFFFu)) tmk__plot_i(&tmk__site, (int64_t)(value));  \
  } while (0)
#define TMK_PLOT_D(name, value)                                                           \
  do {                                                                                    \
    TMK__SITE(tmk__site, name, TMK_SITE_PLOT, TMK_SEV_INFO, 0xFFFFFFFFu, 0);              \
    if (TMK__PASS(TMK_SEV_INFO, 0xFFFFFFFFu)) tmk__plot_d(&tmk__site, (double)(value));   \
  } while (0)

/* Messages: a literal (the text travels once, in the call site) or dynamic text (copied,
 * at most 1024 bytes). */
#define TMK_MESSAGE(severity, verbosity, literal)                                   \
  do {                                                                              \
    TMK__SITE(tmk__site, literal, TMK_SITE_MESSAGE, severity, verbosity, 0);        \
    if (TMK__PASS(severity, verbosity)) tmk__message(&tmk__site, NULL, 0);          \
  } while (0)
#define TMK_MESSAGE_TEXT(severity, verbosity, text, len)                                    \
  do {                                                                                      \
    TMK__SITE(tmk__site, "message", TMK_SITE_MESSAGE, severity, verbosity, 0);              \
    if (TMK__PASS(severity, verbosity)) tmk__message(&tmk__site, (text), (size_t)(len));    \
  } while (0)

#define TMK_THREAD_NAME(name) tmk_thread_name(name)

#else /* !TMK_ENABLED: nothing is compiled in; the API is inline no-ops. */

static inline int tmk_agent_init(const tmk_agent_desc* d, void* a, size_t b) {
  (void)d, (void)a, (void)b;
  return 0;
}
static inline int tmk_agent_shutdown(void) { return 0; }
static inline int tmk_agent_pump(void) { return 0; }
static inline int tmk_agent_flush(void) { return 0; }
static inline int tmk_agent_set_filter(int l, uint32_t m) {
  (void)l, (void)m;
  return 0;
}
static inline int tmk_agent_get_stats(tmk_agent_stats* s) {
  (void)s;
  return TMK_ESTATE;
}
static inline void tmk_thread_name(const char* n) { (void)n; }
static inline void tmk_thread_exit(void) {}
static inline int tmk_team_name(unsigned b, const char* n) {
  (void)b, (void)n;
  return 0;
}
static inline uint64_t tmk_now(void) { return 0; }
static inline uint64_t tmk_ticks_per_second(void) { return 0; }

#define TMK_ZONE(name, severity, verbosity)
#define TMK_ZONE_C(name, severity, verbosity, color)
#define TMK_ZONE_BEGIN(name, severity, verbosity) ((void)0)
#define TMK_ZONE_BEGIN_DATA(name, severity, verbosity, data, len) ((void)0)
#define TMK_ZONE_END() ((void)0)
#define TMK_ZONE_END_DATA(data, len) ((void)0)
#define TMK_FRAME() ((void)0)
#define TMK_FRAME_NAMED(name) ((void)0)
#define TMK_PLOT_I(name, value) ((void)0)
#define TMK_PLOT_D(name, value) ((void)0)
#define TMK_MESSAGE(severity, verbosity, literal) ((void)0)
#define TMK_MESSAGE_TEXT(severity, verbosity, text, len) ((void)0)
#define TMK_THREAD_NAME(name) ((void)0)
#endif /* TMK_ENABLED */

#ifdef __cplusplus
}
#endif
#endif /* TELEMARK_H */
