/* relay_core.h — the relay's core modules that need no sockets or threads of their own: logging,
 * the reorder buffer, the per-session store (decode + index + budget), the recording format and
 * a JSON writer. They build as tmk_relay_core, which the fuzz sub-build can use without libuv. */
#ifndef TMK_RELAY_CORE_H
#define TMK_RELAY_CORE_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tmk_proto.h"
#include "tmk_relay.h"

/* A 32-bit integer hash (xorshift-multiply): ids to hash-table slots (the store's thread and
 * site tables, the analysis' per-site table). */
static inline uint32_t tmk__mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

/* =============================================================================================
 * Logging (relay_log.c)
 * ============================================================================================= */
/* Levels as in tmk_relay.h (TMK_RELAY_LOG_*). */
enum { TMK_LOG_ERROR = 1, TMK_LOG_WARN = 2, TMK_LOG_INFO = 3, TMK_LOG_DEBUG = 4 };

#define TMK__LOG_LIMIT_SLOTS 256

/* One relay's log: its sink (tmk_relay_desc.log; none = silent), level and the rate-limit
 * table of tmk_relay__log_limited. */
typedef struct tmk__logger {
  tmk_relay_log_fn fn;
  void* ud;
  int level;
  pthread_mutex_t mu; /* guards slots (the loop and HTTP threads both log) */
  struct tmk__log_slot {
    char key[64];
    uint64_t last_ms;
    uint64_t suppressed;
    int used;
  } slots[TMK__LOG_LIMIT_SLOTS];
} tmk__logger;

/* level 0 = TMK_LOG_INFO; fn NULL = silent. */
void tmk__logger_init(tmk__logger* lg, tmk_relay_log_fn fn, void* ud, int level);
void tmk__logger_free(tmk__logger* lg);
/* Parses "error", "warn", "info", "debug". Returns the level or -1. */
int tmk_relay__log_parse_level(const char* s);
#if defined(__GNUC__)
#define TMK__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TMK__PRINTF(a, b)
#endif
void tmk_relay__log(tmk__logger* lg, int level, const char* fmt, ...) TMK__PRINTF(3, 4);

/* Rate-limited log for bad input: at most one line per `key` (a source address, a session) per
 * interval; the next line that gets through says how many were suppressed. Bounded table. */
void tmk_relay__log_limited(tmk__logger* lg, int level, const char* key, uint64_t now_ms,
                            const char* fmt, ...) TMK__PRINTF(5, 6);
#define TMK__LOG_INTERVAL_MS 5000

/* Monotonic and wall clocks. */
uint64_t tmk__now_ms(void);
uint64_t tmk__unix_ns(void);
/* pthread_cond_timedwait for at most ms milliseconds from now (mu held). */
void tmk__cond_wait_ms(pthread_cond_t* cv, pthread_mutex_t* mu, uint64_t ms);

/* =============================================================================================
 * Reorder buffer (relay_reorder.c)
 * Per session: packets ordered by sequence number with a bounded window; duplicates dropped;
 * a gap is declared lost when the window passes it (by count or by age). Delivered packets are
 * handed to a callback in sequence order. Late packets (declared lost, then arrived) are still
 * delivered — they decode on their own — and move one count from `lost` to `late`.
 * ============================================================================================= */

#define TMK__REORDER_HISTORY 8192 /* seqs remembered behind `next` for dup/late detection */
/* A packet this far ahead of `next` (or further behind it than the history) would freeze the
 * session if it moved the window: it is refused and counted, unless it starts a new epoch —
 * TMK__REORDER_EPOCH_RUN such packets in sequence while nothing in range arrived for the
 * reorder window's time (an agent back from an outage, or a burst of kernel drops under
 * overload). A forward jump of up to TMK__REORDER_EPOCH_LOST then counts as lost packets.
 * Issue 15 item 3. */
#define TMK__REORDER_FAR (TMK__REORDER_HISTORY / 2)
#define TMK__REORDER_EPOCH_RUN 8
#define TMK__REORDER_EPOCH_LOST (1u << 24)

typedef void (*tmk__deliver_fn)(void* ud, const uint8_t* packet, size_t len, uint64_t seq);

typedef struct tmk__reorder_slot {
  uint64_t seq;
  uint64_t arrived_ms;
  uint8_t* data;
  uint32_t len;
  uint32_t cap;
  int used;
} tmk__reorder_slot;

typedef struct tmk__reorder {
  uint64_t next;       /* next sequence number expected */
  int started;
  uint32_t window;     /* max packets held (slots) */
  uint32_t window_ms;  /* max age of a held packet */
  tmk__reorder_slot* slots; /* ring indexed by seq % window */
  uint32_t held;
  uint64_t oldest_ms;  /* arrival time of the oldest held packet */
  uint8_t history[TMK__REORDER_HISTORY / 8]; /* bit per seq below next: 1 = delivered */
  uint64_t lost, duplicated, reordered, late, stale;
  uint64_t refused;    /* packets far out of range, dropped (see TMK__REORDER_FAR) */
  uint64_t epochs;     /* times the sequence restarted far away */
  uint64_t far_seq;    /* last far packet, and how many came in sequence */
  uint32_t far_run;
  uint64_t last_ok_ms; /* arrival of the last packet in range */
  int forward_only;    /* keyed session (PROTOCOL.md §2.1): its packets cannot be forged, only
                          replayed, so no new epoch behind `next` and none arrive late across
                          an epoch */
  size_t mem;          /* bytes held in slot buffers */
} tmk__reorder;

/* Returns 0 or TMK_ENOMEM. window >= 2. */
int tmk__reorder_init(tmk__reorder* ro, uint32_t window, uint32_t window_ms);
void tmk__reorder_free(tmk__reorder* ro);
/* Offers one packet (copied if it must wait). Delivers whatever became in order. Returns 1 if
 * it was delivered or held, 0 if it was a duplicate, too old or refused as far out of range,
 * TMK_ENOMEM. */
int tmk__reorder_push(tmk__reorder* ro, uint64_t seq, const uint8_t* packet, size_t len,
                      uint64_t now_ms, tmk__deliver_fn fn, void* ud);
/* Declares lost the gaps before packets held longer than window_ms and delivers what follows.
 * force = 1 flushes everything held (session end). */
void tmk__reorder_tick(tmk__reorder* ro, uint64_t now_ms, int force, tmk__deliver_fn fn,
                       void* ud);

/* =============================================================================================
 * Slabs (relay_slab.c): pre-faulted memory for the store's full zone chunks. Not thread-safe:
 * one owner (a store) that holds its session's lock.
 * ============================================================================================= */

#define TMK__HUGE_PAGE ((size_t)2 << 20)
/* `bytes` of zeroed memory (a multiple of 4096; with huge = 1 of TMK__HUGE_PAGE, at a
 * TMK__HUGE_PAGE boundary, on the kind of page chosen below), with populate = 1
 * faulted in by the kernel in one call where it can (MAP_POPULATE, MADV_POPULATE_WRITE); NULL
 * when it has no memory. Free it with munmap. got_huge (may be NULL): 1 when the memory was
 * meant for huge pages, 0 for 4 KiB pages. */
void* tmk__map_pages(size_t bytes, int huge, int populate, int* got_huge);
/* The kind of page for fresh TMK__HUGE_PAGE-aligned memory (relay_slab.c; thread-safe):
 * tmk__pages_pick_huge says which kind the next region gets (1: huge, 0: 4 KiB), from the
 * running averages of what each kind has cost to populate, which tmk__pages_note feeds (the CPU
 * time that populating `bytes` of that kind took); tmk__map_pages with huge = 1 and populate = 1
 * asks and notes, with populate = 0 takes the kind with the lower average (no trial: nothing
 * would be learnt from it). tmk__pages_stats reads the averages (ns per MiB; [0] 4 KiB, [1]
 * huge), their sample counts and the bytes populated on huge pages; tmk__pages_reset forgets all
 * (tests). */
typedef struct tmk__pages_counters {
  uint64_t ns_per_mib[2];
  uint64_t samples[2];
  uint64_t huge_bytes;
} tmk__pages_counters;
int tmk__pages_pick_huge(void);
void tmk__pages_note(int huge, size_t bytes, uint64_t cpu_ns);
void tmk__pages_stats(tmk__pages_counters* out);
void tmk__pages_reset(void);
/* Faults in [p, p + bytes) (page-aligned) in one call where the kernel can (MADV_POPULATE_WRITE),
 * counted in tmk__populate_stats. */
void tmk__populate(void* p, size_t bytes);
/* What this process has populated so far through the two above: bytes, and the CPU time of the
 * threads that made the calls, in those calls (thread-safe). */
void tmk__populate_stats(uint64_t* bytes, uint64_t* cpu_ns);
/* The calling thread's CPU time, 0 when unknown. */
uint64_t tmk__own_cpu_ns(void);
/* Names the calling thread (Linux: what top -H, perf and gdb show; at most 15 characters). The
 * relay names the threads it starts: tmk-relay-rx (UDP receive), tmk-ch-send (ClickHouse
 * senders), tmk-ws-send (a dashboard stream's sender). */
void tmk__name_thread(const char* name);

/* The process's pool of populated TMK__HUGE_PAGE regions (relay_slab.c; thread-safe): slabs
 * and the UDP queue's 2 MiB blocks take from it (or map a new region: NULL when the kernel has no
 * memory) and give back to it; what would take it past its bound is unmapped. Each relay attaches
 * while it exists (tmk_relay_create: its UDP queue's bound plus one session's budget; the bound
 * is the largest attached with) and detaches when freed: when the last one detaches, the bound
 * is 0 and every region kept is unmapped. tmk__pool_limit sets the bound, lower too, and unmaps
 * what is kept beyond it. tmk__pool_stats: the bytes kept now, and the bytes taken from it so
 * far instead of mapped. */
void tmk__pool_attach(uint64_t bytes);
void tmk__pool_detach(void);
void tmk__pool_limit(uint64_t bytes);
void* tmk__pool_take(void);
void tmk__pool_give(void* region);
void tmk__pool_stats(uint64_t* kept, uint64_t* reused);

/* ---- relay_rxq.c --------------------------------------------------------------------------- */
struct sockaddr;
#define TMK__RXQ_MAX_DGRAM (64 * 1024) /* the longest datagram it takes: more than UDP carries */
/* The queue between the UDP receive thread and the loop: records of (sender, datagram) in
 * blocks mapped as the backlog grows and given back as the loop catches up, at most `cap` bytes
 * of blocks; one writer, one reader; a datagram that does not fit is dropped and counted. The
 * writer puts a batch of datagrams (a recvmmsg call's) and publishes them at once; what each
 * side writes for every datagram sits on cache lines of its own, so that the two threads touch
 * a shared line once a batch, not several times a datagram. relay_rxq.c; the thread is relay_udp_rx.c. */
typedef struct tmk__rxq_block tmk__rxq_block;
typedef struct tmk__rxq {
  size_t cap, block;            /* bytes of blocks at most; bytes a block */
  tmk__rxq_block* _Atomic spare; /* a finished block kept for the writer's next */
  _Atomic uint64_t mapped;      /* bytes of blocks held now (spare included) */
  char pad0_[64];
  /* [writer] */
  tmk__rxq_block* w;            /* the block it appends to */
  size_t wfill;                 /* bytes put in w, published or not */
  uint64_t put_bytes, put_n;    /* put since the start, published or not */
  _Atomic uint64_t pushed;      /* bytes of records published, ever */
  _Atomic uint64_t peak;        /* most bytes queued at once (seen when publishing) */
  _Atomic uint64_t datagrams;   /* published, ever */
  _Atomic uint64_t drops, drop_bytes; /* refused by a full queue */
  char pad1_[64];
  /* [reader] */
  tmk__rxq_block* r;            /* the block it reads, at roff */
  size_t roff, rfill;           /* rfill: r's fill as last read */
  _Atomic uint64_t popped;      /* bytes of records popped, ever */
  char pad2_[64];
} tmk__rxq;
/* cap: bytes, at least two blocks (a block is cap/8 between 256 KiB and 2 MiB, a 2 MiB one on a
 * transparent huge page). 0 or TMK_E*. */
int tmk__rxq_init(tmk__rxq* q, size_t cap);
void tmk__rxq_free(tmk__rxq* q);
/* [writer] Appends a datagram that the reader sees once published: 0, or -1 when the queue is
 * full (counted at once; so is a sender address longer than an IPv6 one, which no UDP socket
 * gives). */
int tmk__rxq_put(tmk__rxq* q, const void* p, size_t len, const struct sockaddr* from,
                 uint32_t alen);
/* [writer] Makes every datagram put so far visible to the reader. */
void tmk__rxq_publish(tmk__rxq* q);
/* [writer] tmk__rxq_put, then tmk__rxq_publish. */
int tmk__rxq_push(tmk__rxq* q, const void* p, size_t len, const struct sockaddr* from,
                  uint32_t alen);
/* [reader] the oldest datagram (valid until tmk__rxq_pop), or NULL when empty. */
const uint8_t* tmk__rxq_peek(tmk__rxq* q, size_t* len, const struct sockaddr** from);
void tmk__rxq_pop(tmk__rxq* q);
/* [reader] 1 when nothing published is left to pop. */
int tmk__rxq_empty(tmk__rxq* q);
/* [any thread] bytes of records published and not yet popped. */
uint64_t tmk__rxq_bytes(tmk__rxq* q);

#define TMK__SLAB_BYTES (2048u << 10)
typedef char tmk__slab_is_a_region[TMK__SLAB_BYTES == TMK__HUGE_PAGE ? 1 : -1];
/* A full zone chunk, header included, so that 128 fill a slab (each block is rounded up to 64
 * bytes and the slab keeps 64 for its header). */
#define TMK__SLAB_BLOCK 16320u

typedef struct tmk__slab tmk__slab;
typedef struct tmk__slabs {
  tmk__slab* cur;   /* the slab blocks are handed out from */
  tmk__slab* all;   /* every slab still holding a block (or cur) */
  tmk__slab* spare; /* one emptied slab kept for the next, NULL if none */
  uint64_t maps;    /* slabs taken from the pool or the kernel so far */
} tmk__slabs;

/* Returns `size` bytes (64-byte aligned) and the slab they came from in *from, or NULL when the
 * kernel has no memory for a new slab (the caller then uses malloc). */
void* tmk__slab_alloc(tmk__slabs* sl, size_t size, tmk__slab** from);
/* A block of slab s is no longer used. An empty slab is kept as the spare (a store at its budget
 * evicts as fast as it fills, so the next slab it needs is that one, its pages already there);
 * an empty slab beyond the spare goes to the pool (above). */
void tmk__slab_free(tmk__slabs* sl, tmk__slab* s);
void tmk__slab_free_all(tmk__slabs* sl);

/* =============================================================================================
 * Session store (relay_store.c)
 * Decodes DATA packets (tmk_proto_open, tmk_proto_next_zones for runs of zones, tmk_proto_next
 * for the rest) into chunked per-thread series of zones and events (full zone chunks from slabs),
 * with site/thread/team tables, a memory budget (oldest chunks evicted first, counted) and the
 * live broadcast ring. Not thread-safe by itself: callers hold the session's lock.
 * ============================================================================================= */

typedef struct tmk__store tmk__store;

/* budget: bytes for stored data (>= 1 MiB is enforced). Returns NULL on allocation failure. */
tmk__store* tmk__store_new(size_t budget);
void tmk__store_free(tmk__store* st);
/* Sets the timer frequency used to convert ticks to ns for queries (0 = 1 tick per ns). */
void tmk__store_set_freq(tmk__store* st, uint64_t freq);
/* Decodes one DATA packet and stores its records: all of them, or none when any part of the
 * packet fails to decode (it then counts as malformed). Returns the number of records stored or
 * a negative TMK_E* code. `scratch` must hold TMK_PROTO_MAX_BODY bytes. */
int tmk__store_packet(tmk__store* st, const uint8_t* packet, size_t len, void* scratch);
/* Fills stats fields the store owns (records, zones, malformed, dropped_by_agent, evicted,
 * mem_bytes, unresolved_sites) and info fields (first_ns, last_ns, threads, sites,
 * dropped_by_reason). */
void tmk__store_fill_info(const tmk__store* st, tmk_relay_session_info* info);
/* Slabs the store has taken from the kernel so far (tests: a store at its budget reuses them). */
uint64_t tmk__store_slab_maps(const tmk__store* st);
/* Every zone q selects, one slice at a time (tmk__store_zones_slice), to fn until it returns
 * non-zero or q->limit (default 100,000) zones were given. Returns the number given. */
int tmk__store_zones(const tmk__store* st, const tmk_relay_query* q, tmk_relay_zone_fn fn,
                     void* ud);
/* The time range the store still holds (after evictions, later than the session's first time).
 * Returns 1 and sets both, or 0 when it holds nothing. */
int tmk__store_range(const tmk__store* st, uint64_t* first_ns, uint64_t* last_ns);
/* Position of a resumable zone scan: thread index and the serial of the last chunk visited. */
typedef struct tmk__zone_cursor {
  uint32_t thread;
  uint64_t serial;
} tmk__zone_cursor;
/* Visits the zones overlapping [q->t0_ns, q->t1_ns] on q->thread (or all), at most max_chunks
 * chunks per call, resuming at *cur (zero it to start). Chunks evicted between calls are skipped.
 * Returns 1 when the scan is complete, 0 when it stopped after max_chunks (call again, with the
 * lock released in between if you like), -1 when fn returned non-zero. */
int tmk__store_zone_scan(const tmk__store* st, tmk__zone_cursor* cur, const tmk_relay_query* q,
                         uint32_t max_chunks, tmk_relay_zone_fn fn, void* ud);
/* Where a sliced query goes on from; zero-initialise, then call until done. */
typedef struct tmk__store_cursor {
  uint32_t thread; /* index in the thread table */
  uint64_t serial; /* chunk */
  uint32_t pos;    /* record in the chunk */
  uint32_t off;    /* its byte offset (events) */
  int done;
} tmk__store_cursor;
/* One slice of tmk__store_zones: fills up to cap zones (looking at no more than 64 Ki records)
 * and advances the cursor; sets cur->done at the end. Returns the number filled. */
int tmk__store_zones_slice(const tmk__store* st, const tmk_relay_query* q,
                           tmk__store_cursor* cur, tmk_relay_zone* out, size_t cap);
/* The same for events; their texts are copied into `text` (text_cap >= 1024 makes progress). */
int tmk__store_events_slice(const tmk__store* st, const tmk_relay_query* q, unsigned type_mask,
                            tmk__store_cursor* cur, tmk_relay_event* out, size_t cap,
                            char* text, size_t text_cap);
int tmk__store_sites(const tmk__store* st, tmk_relay_site_fn fn, void* ud);
int tmk__store_threads(const tmk__store* st, tmk_relay_thread_fn fn, void* ud);
int tmk__store_teams(const tmk__store* st, tmk_relay_thread_fn fn, void* ud);
/* Live ring. attach/detach count followers; the ring exists while followers > 0. */
int tmk__store_live_attach(tmk__store* st, uint64_t* cursor);
/* A cut (tmk_relay.h) of what st holds now: the serial of its last chunk and the record count of
 * each series' tail chunk (records are only ever appended at a series' tail), sorted by serial;
 * NULL when out of memory. */
struct tmk_relay_cut {
  uint64_t serial;
  uint32_t n;
  struct tmk__cut_tail {
    uint64_t serial;
    uint32_t count;
  } tail[];
};
tmk_relay_cut* tmk__store_cut(const tmk__store* st);
void tmk__store_live_detach(tmk__store* st);
int tmk__store_live_read(tmk__store* st, uint64_t* cursor, tmk_relay_live_item* out, size_t cap,
                         uint64_t* skipped);
/* A tap sees every zone (paired markers included), frame, plot, message, site descriptor and
 * thread name as the store accepts it (the history sink, relay_clickhouse.c). Zones come as runs
 * of the store's own records, in ticks; events with times in ns. Pointers are valid during the
 * call only. Called with the caller's lock held: copy, never block. */
typedef struct tmk__tap_zrec { /* the store's wide (16-byte) zone record, as the tap gets it */
  int32_t start_off;           /* ticks after the run's base */
  uint32_t dur_lo;             /* duration in ticks: dur_lo | dur_hi << 32 */
  uint32_t site;
  uint16_t dur_hi;
  uint8_t depth;               /* clamped to 255 */
  uint8_t flags;               /* TMK_RELAY_ZONE_* */
} tmk__tap_zrec;
typedef struct tmk__tap_nrec { /* the store's narrow (12-byte) zone record, as the tap gets it */
  int32_t start_off;           /* ticks after the run's base */
  uint32_t dur;                /* duration in ticks */
  uint32_t sdf;                /* site (bits 0-19), depth (20-27, clamped to 255), flags (28-31) */
} tmk__tap_nrec;
/* A zone record of either kind (`bytes`: 12 or 16), read back field by field: the one reader of
 * both layouts (the store's queries, the ClickHouse sink's zones rows). */
typedef struct tmk__tap_zone {
  int32_t start_off; /* ticks after the run's base */
  uint64_t dur;      /* ticks */
  uint32_t site;
  uint8_t depth, flags;
} tmk__tap_zone;
static inline tmk__tap_zone tmk__tap_read(const void* rec, uint32_t bytes) {
  tmk__tap_zone z;
  if (bytes == sizeof(tmk__tap_nrec)) {
    tmk__tap_nrec n;
    memcpy(&n, rec, sizeof n);
    z.start_off = n.start_off;
    z.dur = n.dur;
    z.site = n.sdf & 0xFFFFFu;
    z.depth = (uint8_t)(n.sdf >> 20);
    z.flags = (uint8_t)(n.sdf >> 28);
  } else {
    tmk__tap_zrec w;
    memcpy(&w, rec, sizeof w);
    z.start_off = w.start_off;
    z.dur = (uint64_t)w.dur_lo | (uint64_t)w.dur_hi << 32;
    z.site = w.site;
    z.depth = w.depth;
    z.flags = w.flags;
  }
  return z;
}
typedef struct tmk__store_tap {
  /* n zones of one thread, in decode order: `recs` holds n records of `rec` bytes (12: narrow,
   * tmk__tap_nrec; 16: wide, tmk__tap_zrec; maybe unaligned: memcpy them); start = base +
   * start_off ticks; ns = tmk_proto_ticks_to_ns(ticks, freq), or ticks when freq is 0 (no HELLO
   * yet). */
  void (*zones)(void* ud, uint32_t thread, uint64_t base, uint64_t freq, const void* recs,
                uint32_t n, uint32_t rec);
  void (*event)(void* ud, const tmk_relay_event* e); /* FRAME, PLOT, MESSAGE only */
  void (*site)(void* ud, const tmk_relay_site* s);
  void (*thread)(void* ud, uint32_t thread, const char* name, uint32_t len);
  void* ud;
} tmk__store_tap;
void tmk__store_set_tap(tmk__store* st, const tmk__store_tap* tap);

/* =============================================================================================
 * Recording format (relay_recording.c) — docs/RECORDING.md
 * ============================================================================================= */

#define TMK__REC_MAGIC "TMKREC01"
#define TMK__AGENT_FILE_MAGIC "TMKFILE1"
#define TMK__REC_CHUNK_MAX (16u << 20) /* largest chunk payload a reader accepts */

enum {
  TMK__CHUNK_SESSION = 1, /* session facts: varints and strings (RECORDING.md §3.1) */
  TMK__CHUNK_PACKETS = 2, /* raw packets in delivery order (§3.2) */
  TMK__CHUNK_STATS = 3,   /* reception counters snapshot (§3.3) */
  TMK__CHUNK_END = 4      /* clean close (§3.4) */
};

typedef struct tmk__rec_writer {
  int fd;
  char path[512];
  uint8_t* buf; /* pending PACKETS payload */
  size_t len, cap;
  uint64_t packets, bytes_written, chunks;
  int failed;
} tmk__rec_writer;

/* Facts written in the SESSION chunk and read back. */
typedef struct tmk__rec_session {
  uint64_t session_id;
  uint64_t created_unix_ns;
  char transport[8];
  char source[64];
  char relay_version[32];
} tmk__rec_session;

/* Reception counters that only the live relay knows (loss is not visible in the packets). */
typedef struct tmk__rec_stats {
  uint64_t lost, duplicated, reordered, late, spoofed, malformed_unparsed;
} tmk__rec_stats;

/* Creates the file exclusively and writes magic + SESSION chunk. Returns 0 or TMK_EIO. */
int tmk__rec_create(tmk__rec_writer* w, const char* path, const tmk__rec_session* s);
/* Appends one raw packet (HELLO or DATA, as delivered). Flushes a chunk when the buffer passes
 * 64 KiB. Returns 0 or TMK_EIO. */
int tmk__rec_packet(tmk__rec_writer* w, const uint8_t* packet, size_t len);
/* Writes the pending packets as one chunk (write(2); fdatasync when sync). */
int tmk__rec_flush(tmk__rec_writer* w, int sync);
int tmk__rec_write_stats(tmk__rec_writer* w, const tmk__rec_stats* s);
/* Flushes, writes END, fsyncs and closes. Returns 0 or TMK_EIO. */
int tmk__rec_close(tmk__rec_writer* w);

/* Reading. Works on a memory image of the file (the relay reads it whole, the fuzzer hands
 * bytes). Handles both relay recordings and agent files (TMKFILE1 + varint-framed packets).
 * For each packet, calls packet_fn; a torn or corrupt tail stops the walk cleanly. */
typedef struct tmk__rec_read_result {
  int agent_file;
  int clean_end;         /* END chunk seen */
  int have_session;
  tmk__rec_session session;
  int have_stats;
  tmk__rec_stats stats;  /* the last STATS chunk */
  uint64_t chunks, packets;
  uint64_t valid_bytes;  /* bytes up to the end of the last good chunk/frame */
  uint64_t torn_bytes;   /* bytes after it that were skipped */
  int tail_error;        /* 0, or why reading stopped early (TMK_ETRUNC / TMK_ECORRUPT ...) */
} tmk__rec_read_result;
typedef int (*tmk__rec_packet_fn)(void* ud, const uint8_t* packet, size_t len);
/* Returns 0 when the file was recognised (even with a torn tail), TMK_EMAGIC otherwise. */
int tmk__rec_read(const uint8_t* data, size_t len, tmk__rec_packet_fn fn, void* ud,
                  tmk__rec_read_result* res);
/* CRC-32C (Castagnoli) used by chunk headers. */
uint32_t tmk__crc32c(uint32_t crc, const void* data, size_t len);
/* The same without the CPU's instruction: the tables every machine uses where it has none. */
uint32_t tmk__crc32c_tables(uint32_t crc, const void* data, size_t len);

/* =============================================================================================
 * JSON writer (relay_json.c): a growable buffer with escaping, for the HTTP API.
 * ============================================================================================= */
typedef struct tmk__json {
  char* buf;
  size_t len, cap;
  int oom;
  int need_comma;
} tmk__json;

void tmk__json_init(tmk__json* j);
void tmk__json_free(tmk__json* j);
void tmk__json_raw(tmk__json* j, const char* s, size_t n);
void tmk__json_begin_obj(tmk__json* j);
void tmk__json_end_obj(tmk__json* j);
void tmk__json_begin_arr(tmk__json* j);
void tmk__json_end_arr(tmk__json* j);
void tmk__json_key(tmk__json* j, const char* key);
void tmk__json_str(tmk__json* j, const char* s, size_t n);
void tmk__json_cstr(tmk__json* j, const char* s);
void tmk__json_u64(tmk__json* j, uint64_t v);
void tmk__json_i64(tmk__json* j, int64_t v);
void tmk__json_f64(tmk__json* j, double v);
void tmk__json_bool(tmk__json* j, int v);
void tmk__json_null(tmk__json* j);
/* 1 when s[0..n) is one JSON value (RFC 8259 syntax; whitespace around it allowed; arrays and
 * objects nested at most 64 deep), else 0: a check on text the relay passes on as it is. */
int tmk__json_valid(const char* s, size_t n);

#endif /* TMK_RELAY_CORE_H */
