/* tmk_agent_internal.h — the agent's shared internals: the per-thread ring layout, the agent
 * state, and the functions the hot path (tmk_agent.c), the flusher (tmk_flush.c) and the
 * transports (tmk_transport.c) call on each other. Not installed. */
#ifndef TMK_AGENT_INTERNAL_H
#define TMK_AGENT_INTERNAL_H

#include "telemark.h"
#include "tmk_port.h"
#include "tmk_proto.h"

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

enum { TMK__SLOT_FREE = 0, TMK__SLOT_CLAIMING = 1, TMK__SLOT_ACTIVE = 2, TMK__SLOT_DEAD = 3 };

typedef struct tmk__thread {
  /* written by the producing thread */
  uint32_t head;
  uint32_t cached_tail;
  uint32_t depth;
  uint32_t nmarkers;
  uint32_t drops[TMK_DROP_REASON_COUNT]; /* cumulative; read by the flusher */
  tmk_site* markers[TMK__MARKER_STACK];  /* NULL entry: a BEGIN that was filtered out */
  uint8_t pad0[64];
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
  uint32_t index;
} tmk__thread;

/* ---- Agent state --------------------------------------------------------------------------*/
typedef struct tmk__agent {
  /* read by the hot path: keep together */
  uint32_t gen;     /* bumped by init and shutdown; TLS thread pointers of older gens are stale */
  uint32_t running;
  uint32_t shift;   /* built-in timer: ticks = counter >> shift */
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
  uint8_t pad0[64];
  uint32_t waiters; /* producers blocked in wait mode */
  uint32_t no_thread_drops;

  /* flusher side */
  uint32_t flush_lock;
  uint32_t stop;
  tmk_port_thread flusher;
  tmk_agent_desc desc;
  const char* host;    /* -> host_buf: the caller's strings need not outlive init */
  const char* program; /* -> program_buf */
  char host_buf[256];
  char program_buf[128];
  char build_buf[65]; /* desc.build / desc.label, copied (HELLO §6.1 trailing fields) */
  char label_buf[65];
  const char* team_names[32];
  uint64_t freq;
  uint64_t session_id;
  uint64_t seq;
  uint32_t max_packet;
  uint32_t flush_interval_ms;
  uint32_t level;
  uint32_t mask;
  int lz4_on;
  void* lz4_state;
  tmk_proto_writer w;
  uint32_t w_thread;
  uint8_t* body;
  uint8_t* out; /* max_packet + 3: room for the stream length prefix */
  uint32_t out_cap;
  uint8_t* rx;
  uint32_t rx_cap;
  uint32_t rx_len;
  uint32_t rx_skip;
  tmk_proto_zone* batch;
  uint32_t batch_cap;
  uint32_t batch_len;
  tmk_site* sites;
  uint32_t next_site_id;
  uint64_t drops[TMK_DROP_REASON_COUNT];
  uint64_t drops_sent[TMK_DROP_REASON_COUNT];
  uint32_t no_thread_seen;
  uint64_t clk_ext; /* flusher's 64-bit view of a wrapping override clock */
  uint64_t packets_sent;
  uint64_t bytes_sent;
  uint64_t last_meta_ms;
  uint64_t last_hello_ms;
  uint64_t last_pump_ms;
  int force_meta;
  int welcomed;
  int rejected;
  int has_control;
  uint32_t control_seq;
  uint32_t control_applied;
  /* transport */
  tmk_transport transport;
  tmk_port_sock sock;
  int tcp_state; /* 0 down, 1 connecting, 2 up */
  uint64_t tcp_retry_ms;
  uint64_t tcp_connect_ms;
  void* file;
} tmk__agent;

extern tmk__agent tmk__g;

static inline tmk__thread* tmk__slot(uint32_t i) {
  return (tmk__thread*)(void*)((uint8_t*)tmk__g.threads + (size_t)i * tmk__g.slot_stride);
}

/* tmk_agent.c */
uint64_t tmk__now_ticks(void);
void tmk__apply_filter(uint32_t level, uint32_t mask);
void tmk__log(int level, const char* fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
uint64_t tmk__ms(void);
int tmk__lock(int wait);
void tmk__unlock(void);

/* tmk_flush.c: one flusher cycle (lock held). full = drain everything, meta = force metadata.
 * Returns DATA packets sent. */
int tmk__flush_cycle(int full);
void tmk__account_drops(void);
int tmk__send_bye(void);

/* tmk_transport.c */
int tmk__transport_open(void);
void tmk__transport_close(void);
void tmk__transport_tick(void);     /* connect / reconnect, read and apply incoming packets */
int tmk__transport_send(uint8_t* packet, size_t len); /* 0 or < 0; packet has 3 bytes of
                                                          headroom before it */
int tmk__send_hello(void);
const char* tmk__transport_name(void); /* "udp", "tcp", ... for logs */

#endif /* TMK_AGENT_INTERNAL_H */
