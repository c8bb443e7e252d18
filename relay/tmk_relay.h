/* tmk_relay.h — telemark-relay as a library: create, run, stop and destroy a relay, read its
 * counters, list sessions, query a session's stored data, follow live data, post commands.
 * Apart from create/run/destroy, every function here is thread-safe (e.g. civetweb workers). */
#ifndef TMK_RELAY_H
#define TMK_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "tmk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* =============================================================================================
 * The threading boundary
 *
 * The relay runs ONE libuv loop thread (ingest, reorder, decode, store, recording, control
 * sockets). The HTTP / WebSocket threads never touch loop state. They use only the functions in
 * this header, which work in one of two ways:
 *
 *  1. Reads (tmk_relay_sessions, tmk_relay_session, tmk_relay_query_*, tmk_relay_live_read)
 *     take the session registry lock and then the one session's lock, copy what was asked and
 *     release. Callbacks given to the query functions run while that session's lock is held:
 *     they must only copy (no I/O, no other tmk_relay_* call). Every query has a `limit`, so a
 *     lock is held for a bounded time. The loop never waits for a session lock per packet: it
 *     try-locks, and while a reader holds the lock it queues that session's packets (in order,
 *     up to 8 MiB) and applies them on the next packet or 10 ms tick.
 *
 *  2. Commands (record start/stop, control, open recording, close) are queued under a mutex and
 *     the loop is woken with uv_async_send(); the loop executes them and posts the reply back
 *     through a condition variable. The calling thread waits (with a timeout) for the reply, the
 *     loop never waits for the caller.
 *
 * Sessions are named by a string id: 16 lowercase hex digits of the agent's session id for live
 * sessions, the file name without extension for opened recordings and agent files.
 * Times are nanoseconds of the agent's timer: floor(ticks * 1e9 / HELLO frequency), 1 tick = 1 ns
 * until a HELLO says otherwise; a duration is ns(start + duration) - ns(start) (docs/API.md).
 * ============================================================================================= */

typedef struct tmk_relay tmk_relay;

#define TMK_RELAY_ID_MAX 96

/* Per-session counters (docs/API.md lists them under "stats"). */
typedef struct tmk_relay_stats {
  uint64_t packets;          /* DATA packets delivered to the decoder */
  uint64_t records;          /* records decoded and accepted */
  uint64_t bytes;            /* bytes of DATA packets received */
  uint64_t zones;            /* zones stored (including paired markers) */
  uint64_t lost;             /* packets declared lost by the reorder window */
  uint64_t duplicated;       /* packets received more than once (dropped) */
  uint64_t reordered;        /* packets that arrived ahead of a missing one */
  uint64_t late;             /* packets that arrived after being declared lost (kept) */
  uint64_t malformed;        /* packets (or records) that failed to decode */
  uint64_t dropped_by_agent; /* records the agent reported dropped (sum over reasons) */
  uint64_t spoofed;          /* packets naming this session from a foreign address (dropped) */
  uint64_t evicted;          /* stored records evicted by the memory budget */
  uint64_t mem_bytes;        /* bytes the session's store currently holds */
  uint64_t unresolved_sites; /* site ids referenced but not described (yet) */
  uint64_t orphans;          /* zones dropped because their parent was in a lost packet */
} tmk_relay_stats;

typedef struct tmk_relay_session_info {
  char id[TMK_RELAY_ID_MAX];
  uint64_t session_id;
  int live;       /* 1 while the target is connected/sending; 0 after BYE, close, idle, or replay */
  int recorded;   /* 1 for sessions opened from a file */
  int recording;  /* 1 while being written to disk */
  int has_hello;  /* 0 until a HELLO arrived: the target facts below are unknown */
  char transport[8]; /* "udp", "tcp", "file" */
  char source[64];   /* "ip:port" of the target, or the file name */
  char program[128];
  char platform[32];
  char arch[32];
  char agent_version[32];
  char build[65]; /* HELLO build id (§6.1), "" when the agent sent none */
  char label[65];  /* HELLO free label, "" when none */
  char recording_path[512];
  int big_endian;
  int pointer_size;
  uint64_t timer_freq; /* ticks per second, 0 = unknown */
  uint32_t caps;       /* TMK_CAP_* */
  uint64_t first_ns, last_ns; /* time range of stored data (0,0 when empty) */
  uint64_t clock_ns, clock_unix_ns; /* latest CLOCK_SYNC: agent time clock_ns was this wall
                                       time (ns since 1970); both 0 until one arrives */
  uint64_t created_unix_ns;   /* when the relay saw it first */
  uint32_t threads, sites;
  int control_level;     /* last level sent with CONTROL, -1 if none */
  uint32_t control_mask; /* last mask sent */
  uint64_t dropped_by_reason[5]; /* TMK_DROP_*, cumulative as reported by the agent */
  tmk_relay_stats stats;
} tmk_relay_session_info;

/* Fills up to `cap` infos (sorted by creation time) and returns how many sessions exist. */
int tmk_relay_sessions(tmk_relay* r, tmk_relay_session_info* out, size_t cap);
/* Fills one session's info. Returns 0 or TMK_ENOTFOUND. */
int tmk_relay_session(tmk_relay* r, const char* id, tmk_relay_session_info* out);

/* ---- Stored data queries ------------------------------------------------------------------ */

typedef struct tmk_relay_cut tmk_relay_cut; /* tmk_relay_live_attach_cut */

typedef struct tmk_relay_query {
  uint64_t t0_ns, t1_ns; /* [t0, t1]; t1 = 0 means "to the end" */
  int64_t thread;        /* -1 = all threads */
  uint64_t min_dur_ns;   /* zones shorter than this are skipped (level of detail) */
  size_t limit;          /* stop after this many items; 0 = 100000 */
  const tmk_relay_cut* cut; /* NULL, or only what was stored before this cut */
} tmk_relay_query;

enum { TMK_RELAY_ZONE_MARKER = 1 }; /* the zone is a paired MARKER_BEGIN/END */

typedef struct tmk_relay_zone {
  uint64_t start_ns, dur_ns;
  uint32_t thread, site;
  uint32_t depth; /* capped at 255 by the store (the live stream carries the same) */
  uint32_t flags; /* TMK_RELAY_ZONE_* */
} tmk_relay_zone;

enum {
  TMK_RELAY_EV_FRAME = 1,
  TMK_RELAY_EV_PLOT = 2,
  TMK_RELAY_EV_MESSAGE = 3,
  TMK_RELAY_EV_MARKER_BEGIN = 4,
  TMK_RELAY_EV_MARKER_END = 5
};

typedef struct tmk_relay_event {
  uint8_t type; /* TMK_RELAY_EV_* */
  uint8_t severity;  /* messages */
  uint8_t is_double; /* plots */
  uint32_t thread, site;
  uint32_t verbosity; /* messages */
  uint64_t time_ns;
  int64_t i;
  double d;
  const char* text; /* messages and marker payloads; valid during the callback only */
  uint32_t text_len;
} tmk_relay_event;

typedef struct tmk_relay_site {
  uint32_t id;
  int known; /* 0: referenced by records but no descriptor seen yet */
  uint8_t kind, severity;
  uint32_t verbosity, color, line;
  const char* name; /* "" when unknown; valid during the callback only */
  const char* file;
} tmk_relay_site;

/* Each callback returns 0 to continue, non-zero to stop. */
typedef int (*tmk_relay_zone_fn)(void* ud, const tmk_relay_zone* z);
typedef int (*tmk_relay_event_fn)(void* ud, const tmk_relay_event* e);
typedef int (*tmk_relay_site_fn)(void* ud, const tmk_relay_site* s);
typedef int (*tmk_relay_thread_fn)(void* ud, uint32_t thread, const char* name);

/* Zones overlapping [t0, t1] on one or all threads. Within one thread zones come in storage
 * order (roughly by time; parents after their children). Returns the number passed to `fn`,
 * or TMK_ENOTFOUND. */
int tmk_relay_query_zones(tmk_relay* r, const char* id, const tmk_relay_query* q,
                          tmk_relay_zone_fn fn, void* ud);
/* Events of the given types (bit (1 << TMK_RELAY_EV_*), 0 = all) in [t0, t1]. */
int tmk_relay_query_events(tmk_relay* r, const char* id, const tmk_relay_query* q,
                           unsigned type_mask, tmk_relay_event_fn fn, void* ud);
/* Call-site descriptors, thread names, team (verbosity bit) names. */
int tmk_relay_query_sites(tmk_relay* r, const char* id, tmk_relay_site_fn fn, void* ud);
int tmk_relay_query_threads(tmk_relay* r, const char* id, tmk_relay_thread_fn fn, void* ud);
int tmk_relay_query_teams(tmk_relay* r, const char* id, tmk_relay_thread_fn fn, void* ud);

/* ---- Live data ------------------------------------------------------------------------------
 * Each session keeps a broadcast ring of the most recent items (zones and events, in the order
 * they were decoded) while at least one follower is attached. A follower keeps a cursor; a
 * follower that falls behind by more than the ring holds is told how many items it skipped
 * (coalescing: a slow reader never slows ingest or other readers). */

typedef struct tmk_relay_live_item {
  uint8_t is_zone;
  uint8_t text_cut;      /* the text is longer than `text` holds (whole: tmk_relay_query_events) */
  tmk_relay_zone zone;   /* when is_zone */
  tmk_relay_event event; /* otherwise; event.text points into `text` */
  char text[48];         /* first bytes of a message/payload, cut before a UTF-8 character */
} tmk_relay_live_item;

/* Attaches a follower; *cursor is set to "now" (only items decoded from now on are read).
 * Returns 0 or TMK_ENOTFOUND. Pair with tmk_relay_live_detach. */
int tmk_relay_live_attach(tmk_relay* r, const char* id, uint64_t* cursor);
/* tmk_relay_live_attach, and in the same moment a cut of what the session has stored: queries
 * given it (tmk_relay_query.cut) return only zones and events stored before the attach, and the
 * follower reads exactly those stored after it, so that history plus live holds each one once.
 * *cut is NULL when there was no memory for it (queries then see everything); free() it. */
int tmk_relay_live_attach_cut(tmk_relay* r, const char* id, uint64_t* cursor, tmk_relay_cut** cut);
void tmk_relay_live_detach(tmk_relay* r, const char* id);
/* Copies up to `cap` items after *cursor and advances it. *skipped gets how many items were
 * overwritten before this follower read them. Returns the number copied or TMK_ENOTFOUND. */
int tmk_relay_live_read(tmk_relay* r, const char* id, uint64_t* cursor, tmk_relay_live_item* out,
                        size_t cap, uint64_t* skipped);

/* Called on the loop thread after each batch of decoded packets (e.g. to wake WebSocket
 * threads with a condition variable). Must be quick and must not block or call tmk_relay_*. */
typedef void (*tmk_relay_data_fn)(void* ud);
void tmk_relay_set_data_listener(tmk_relay* r, tmk_relay_data_fn fn, void* ud);

/* ---- Commands (executed on the loop; these calls wait up to ~5 s for the reply) ---------- */

/* Starts (on=1) or stops (on=0) recording a live session to the data directory. On success
 * returns 0 and, when starting, writes the file path to path_out. TMK_ENOTFOUND, TMK_ESTATE
 * (recorded session, already in that state), TMK_EIO (file could not be created). `err` gets a
 * sentence for the user in every failure case. */
int tmk_relay_record(tmk_relay* r, const char* id, int on, char* path_out, size_t path_cap,
                     char* err, size_t err_cap);
/* Sends CONTROL (new severity level 0..5 and verbosity mask) to the session's agent: over its
 * TCP connection, or as UDP datagrams to its source address (repeated a few times, §6.4).
 * Returns 0, TMK_ENOTFOUND, TMK_ERANGE (level > 5), TMK_ESTATE (not live / no address). */
int tmk_relay_control(tmk_relay* r, const char* id, int level, uint32_t mask, char* err,
                      size_t err_cap);
/* Opens a recording or agent file from the data directory by file name (no path separators)
 * and replays it into a new, non-live session through the same decode path as live data.
 * Writes the new session's id to id_out. Returns 0, TMK_ENOTFOUND, TMK_ECORRUPT, TMK_EINVAL. */
int tmk_relay_open_recording(tmk_relay* r, const char* name, char* id_out, size_t id_cap,
                             char* err, size_t err_cap);

typedef struct tmk_relay_recording_info {
  char name[256];  /* file name inside the data directory */
  uint64_t size;   /* bytes */
  uint64_t mtime_unix_ns;
  int agent_file;  /* 1 for TMKFILE1 agent files, 0 for relay recordings */
  int open;        /* 1 when it is currently being written */
} tmk_relay_recording_info;
/* Lists recordings and agent files in the data directory (unsorted). Returns how many exist,
 * fills up to cap. Reads only directory entries and file headers. */
int tmk_relay_recordings(tmk_relay* r, tmk_relay_recording_info* out, size_t cap);

/* The relay's version string. */
const char* tmk_relay_version(void);

/* ---- Web server hooks ---------------------------------------------------------------------
 * The HTTP server (relay_api.c) calls every hook given in tmk_relay_desc.http_hooks right after
 * it has installed its own /api handlers, before answering any request; a hook installs more
 * handlers on the civetweb context (e.g. the dashboard, tmk_relay_web.h). */
struct mg_context;
typedef void (*tmk_relay_http_hook)(struct mg_context* ctx, tmk_relay* r, void* ud);

/* =============================================================================================
 * The relay object: create, run, stop, destroy
 * ============================================================================================= */

#define TMK_RELAY_MAX_HOOKS 4

/* Log levels; a logger gets every line at or below the desc's level. */
enum { TMK_RELAY_LOG_ERROR = 1, TMK_RELAY_LOG_WARN = 2, TMK_RELAY_LOG_INFO = 3, TMK_RELAY_LOG_DEBUG = 4 };
/* Receives one log line (no newline) from any relay thread; must be thread-safe. */
typedef void (*tmk_relay_log_fn)(void* ud, int level, const char* line);
/* The stock logger: "HH:MM:SS.mmm level line" on the FILE* `file` (NULL = stderr). */
void tmk_relay_log_to_file(void* file, int level, const char* line);

/* Authenticated ingest (docs/PROTOCOL.md §2.1, docs/SECURITY.md): the key a program's packets
 * must carry. program "*" stands for every program no other entry names. */
#define TMK_RELAY_MAX_KEYS 32
#define TMK_RELAY_KEY_PROGRAM_MAX 128 /* an agent's program name is at most 127 bytes */
typedef struct tmk_relay_key {
  char program[TMK_RELAY_KEY_PROGRAM_MAX]; /* NUL-terminated; "*" = any other program */
  uint8_t key[16];
} tmk_relay_key;

/* Parses a key file's text (docs/SECURITY.md §4): lines "PROGRAM HEX32", "*" for any program,
 * '#' starts a comment, blank lines are skipped. Appends to out[*n..cap). Returns 0, or
 * TMK_EINVAL with a sentence naming `name` and the line in err. */
int tmk_relay_keys_parse(const char* text, size_t len, const char* name, tmk_relay_key* out,
                         uint32_t cap, uint32_t* n, char* err, size_t ecap);
/* Reads and parses the key file at `path` (as tmk_relay_keys_parse). *world_readable is set to
 * 1 when others may read the file. Returns 0, TMK_EIO (cannot read) or TMK_EINVAL, with err. */
int tmk_relay_keys_load(const char* path, tmk_relay_key* out, uint32_t cap, uint32_t* n,
                        int* world_readable, char* err, size_t ecap);

/* Zero-initialise and set what differs from the default; 0 / NULL always means the default.
 * telemark-relay (relay_main.c) fills it from its flags, with the CLI's own defaults. */
#define TMK_RELAY_MAX_SERIAL 8

typedef struct tmk_relay_desc {
  const char* listen_host;   /* where agents send, UDP and TCP; NULL = "127.0.0.1" */
  int listen_port;           /* 0 = any free port (tmk_relay_listen_port tells which) */
  const char* http_host;     /* HTTP API; NULL = no HTTP server */
  int http_port;             /* 0 = any free port (tmk_relay_http_port tells which) */
  const char* data_dir;      /* recordings; NULL = "./telemark-data" (must exist to record) */
  int record_all;            /* 1: record every session from its first packet */
  uint32_t max_sessions;     /* 0 = 64 */
  size_t session_memory;     /* bytes per session store; 0 = 256 MiB (at least 1 MiB is used) */
  uint32_t reorder_packets;  /* reorder window in packets; 0 = 256 (2..65536) */
  uint32_t reorder_ms;       /* reorder window in ms; 0 = 100 (1..60000) */
  uint32_t stats_interval_ms;/* period of the "stats:" log line; 0 = 10000 */
  uint32_t session_idle_ms;  /* a UDP session silent this long is no longer live; 0 = 10000 */
  const char* serial[TMK_RELAY_MAX_SERIAL]; /* "DEVICE[:BAUD]" serial lines (UARTs) to read the
                             TCP framing from (docs/PROTOCOL.md §1); NULL = unused slot */
  struct {
    tmk_relay_log_fn fn;     /* NULL = silent */
    void* ud;
    int level;               /* TMK_RELAY_LOG_*; 0 = TMK_RELAY_LOG_INFO */
  } log;
  struct {                   /* history sink (docs/CLICKHOUSE.md) */
    const char* url;         /* http://HOST:PORT/?database=NAME; NULL = off */
    const char* spill_dir;   /* unsent batches; NULL = DATA_DIR/clickhouse-spill */
    uint64_t spill_max;      /* bytes on disk at most; 0 = 1 GiB */
    uint64_t memory_max;     /* bytes of batches waiting in memory at most, and of sent
                                batches' staging memory kept for reuse at most; 0 = 128 MiB */
    uint32_t senders;        /* batches sent at once, each on its own connection; 0 = 2,
                                1..8 */
  } clickhouse;
  struct {
    tmk_relay_http_hook fn;  /* NULL = unused slot */
    void* ud;
  } http_hooks[TMK_RELAY_MAX_HOOKS];
  const tmk_relay_key* keys; /* authenticated ingest (copied); NULL = every program unkeyed */
  uint32_t nkeys;            /* at most TMK_RELAY_MAX_KEYS, programs unique */
  size_t udp_queue_bytes;    /* UDP datagrams received but not yet decoded, at most: a thread
                                empties the socket into this queue; when it is full a datagram
                                is dropped and counted; 0 = 64 MiB, at least 1 MiB */
  int ingest_nice;           /* nice value of the thread that runs tmk_relay_run (Linux), so that
                                decoding gives way to a game on the same machine; 0 = 10,
                                -1 = leave it, 1..19; the thread keeps it after the run (an
                                unprivileged process cannot raise it again) */
} tmk_relay_desc;

/* Creates a relay: binds UDP and TCP on listen_host:listen_port and starts the HTTP server
 * (its worker threads answer at once; the ingest loop starts with tmk_relay_run). On success
 * sets *out and returns 0; otherwise returns TMK_EINVAL (bad desc), TMK_ENOMEM or TMK_ESOCKET (a
 * port could not be bound; the reason is logged). */
int tmk_relay_create(const tmk_relay_desc* desc, tmk_relay** out);
/* Runs the ingest loop on the calling thread until tmk_relay_stop: then stops accepting,
 * flushes reorder buffers, closes recordings, stops the HTTP server and returns 0. Once only. */
int tmk_relay_run(tmk_relay* r);
/* Asks a running (or about to run) relay to stop. Safe from any thread and from a signal
 * handler (uv_async_send); returns at once. */
void tmk_relay_stop(tmk_relay* r);
/* Frees a relay that is not running (tmk_relay_run returned, or never called). The last relay
 * of the process also gives back the freed memory the relays kept for reuse (docs/API.md). */
void tmk_relay_destroy(tmk_relay* r);

/* The bound ports (useful when the desc asked for port 0); http is 0 without HTTP server. */
int tmk_relay_listen_port(const tmk_relay* r);
int tmk_relay_http_port(const tmk_relay* r);

/* Relay-wide counters: every session's stats summed, plus what belongs to no session. */
typedef struct tmk_relay_totals {
  uint32_t sessions;          /* sessions held (live and opened) */
  uint32_t live_sessions;
  uint64_t garbage;           /* datagrams/frames that were not telemark packets */
  uint64_t rejected_sessions; /* new sessions refused (max sessions / per source) */
  uint64_t unauthenticated;   /* packets without a MAC for a keyed program or session (§2.1) */
  uint64_t bad_mac;           /* packets whose MAC matched no key that applies (§2.1) */
  uint64_t udp_queue_drops;   /* datagrams dropped because the receive queue was full */
  uint64_t udp_queue_peak;    /* most bytes the receive queue held at once */
  uint64_t rx_cpu_ns;         /* CPU time of the UDP receive thread so far */
  uint64_t ingest_cpu_ns;     /* CPU time of the UDP receive thread (so far) and of the thread
                                 in tmk_relay_run (the loop: decode, store, TCP, control; as of
                                 its last 10 ms tick) */
  uint64_t populated_bytes;   /* fresh memory faulted in ahead of use (the store's slabs, the UDP
                                 queue's blocks, the ClickHouse sink's staging), and ... */
  uint64_t populate_cpu_ns;   /* ... the CPU time the relay's threads spent doing so; both for
                                 the whole process (every relay in it), since it started */
  uint64_t populated_huge_bytes; /* of populated_bytes, those on 2 MiB pages (the relay picks the
                                   kind that costs less to populate: docs/API.md) */
  uint64_t pool_bytes;        /* freed 2 MiB regions (queue blocks, slabs) kept for reuse now,
                                 and ... */
  uint64_t pool_reused_bytes; /* ... the bytes taken from them instead of fresh memory so far;
                                 both for the whole process (docs/API.md) */
  tmk_relay_stats sum;        /* sum over sessions held now (evicted sessions are gone) */
} tmk_relay_totals;
/* Fills *out. Thread-safe; takes each session's lock briefly. */
void tmk_relay_get_stats(tmk_relay* r, tmk_relay_totals* out);

#ifdef __cplusplus
}
#endif
#endif /* TMK_RELAY_H */
