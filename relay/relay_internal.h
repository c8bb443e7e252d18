/* relay_internal.h — the relay's loop-side structures shared by its files: configuration, the
 * relay object, sessions, TCP connections and commands. Only the relay sources include this; the web side
 * uses tmk_relay.h. Fields marked [loop] are touched only on the loop thread, [mu] only under
 * the session's mutex, [reg] only under the registry mutex. */
#ifndef TMK_RELAY_INTERNAL_H
#define TMK_RELAY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "relay_clickhouse.h"
#include "relay_core.h"

#define TMK_RELAY_VERSION "0.1.0"
#define TMK__TICK_MS 10           /* reorder ticks, control resends, data listener */
#define TMK__MAX_CONNS 256        /* TCP connections overall */
#define TMK__CONN_HELLO_MS 3000   /* a connection that names no session by then is closed */
#define TMK__CONN_IDLE_MS 60000   /* a connection with no packet for this long is closed */
#define TMK__CONN_BUF (TMK_PROTO_MAX_PACKET + 16)
#define TMK__CONTROL_REPEATS 5    /* UDP CONTROL sends per change (§6.4) */
#define TMK__CONTROL_REPEAT_MS 200
#define TMK__TCP_TAKEOVER_MS 2000 /* a new connection replaces one quiet for this long */
#define TMK__REJECT_MS 1000       /* at most one REJECT per host per this long ... */
#define TMK__REJECTS_PER_S 50     /* ... and this many per second overall */
#define TMK__UDP_QUEUE_DEFAULT ((size_t)64 << 20) /* received datagrams waiting for the loop */
#define TMK__UDP_QUEUE_MIN ((size_t)1 << 20)
#define TMK__INGEST_NICE_DEFAULT 10 /* the loop thread's nice value (relay_loop.c) */
#define TMK__QUERY_SLOTS 2        /* zone/event queries that run at once; the others wait */

typedef struct tmk_relay_config {
  char listen_host[64];
  int listen_port;          /* 0 = any free port (logged) */
  char http_host[64];
  int http_port;            /* 0 = any free port (logged); -1 = no HTTP server */
  char data_dir[260];
  int record_all;
  uint32_t max_sessions;
  tmk_relay_http_hook hook_fn[TMK_RELAY_MAX_HOOKS];
  void* hook_ud[TMK_RELAY_MAX_HOOKS];
  size_t session_memory;
  uint32_t reorder_packets;
  uint32_t reorder_ms;
  uint32_t stats_interval_ms;
  uint32_t session_idle_ms;
  char clickhouse_url[512];      /* --clickhouse: history sink, "" = off (docs/CLICKHOUSE.md) */
  char clickhouse_spill_dir[260]; /* "" = DATA_DIR/clickhouse-spill */
  uint64_t clickhouse_spill_max;  /* bytes; 0 = 1 GiB */
  uint64_t clickhouse_memory_max; /* bytes; 0 = 128 MiB */
  uint32_t clickhouse_senders;    /* 0 = 2 */
  tmk_relay_key keys[TMK_RELAY_MAX_KEYS]; /* authenticated ingest (relay_auth.c) */
  uint32_t nkeys;
  size_t udp_queue_bytes;       /* received datagrams waiting for the loop, at most */
  int ingest_nice;              /* the loop thread's nice value; -1 = unchanged */
} tmk_relay_config;


typedef struct tmk__session tmk__session;

typedef struct tmk__conn {
  uv_tcp_t tcp;
  struct tmk_relay* relay;
  struct sockaddr_storage peer;
  char peer_str[64];
  uint8_t* buf;
  size_t len;
  tmk__session* session; /* bound by the first HELLO or DATA on this connection */
  uint64_t last_packet_ms;      /* accept time until the first packet */
  int closing;
  struct tmk__conn* next;
} tmk__conn;

struct tmk__session {
  /* immutable after creation */
  char id[TMK_RELAY_ID_MAX];
  uint64_t sid;
  int replay;
  struct tmk_relay* relay;
  atomic_int refs;
  pthread_mutex_t mu;
  /* [mu] */
  tmk__store* store;
  tmk_relay_session_info info; /* facts; stats fields the store does not own */
  /* [loop] */
  tmk__reorder ro;
  struct sockaddr_storage addr; /* UDP source */
  int has_addr;
  tmk__conn* conn;              /* TCP connection, when the agent uses TCP */
  uint64_t last_packet_ms;
  int ended;                    /* BYE, connection closed */
  int rejected;
  int recording;
  tmk__rec_writer rec;
  uint32_t control_seq;
  uint8_t control_packet[64];
  size_t control_len;
  int control_left;
  uint64_t control_next_ms;
  uint64_t delivered;           /* packets delivered since the last data-listener call */
  uint8_t* hello;               /* last HELLO packet (written first into new recordings) */
  size_t hello_len;
  uint64_t spoofed;             /* copied into info by tmk__session_sync_stats */
  uint64_t facts;               /* hash of the first HELLO's target facts (has_facts) */
  int has_facts;
  int keyed;                    /* §2.1: every packet must carry a MAC by `key`, and what the
                                   relay sends it carries one */
  uint8_t key[16];
  /* Packets delivered while a reader held s->mu: the loop never waits for a session lock per
   * packet; it queues (in order) and applies them when the lock is free (next packet/tick). */
  struct tmk__pending* pending_head;
  struct tmk__pending* pending_tail;
  size_t pending_bytes;
  tmk__session* hnext;          /* loop-side hash chain by sid */
  tmk__ch_sess* ch;             /* history sink state (relay_clickhouse.c), NULL without */
};

typedef struct tmk__cmd tmk__cmd;

struct tmk_relay {
  tmk_relay_config cfg;
  tmk__logger log;              /* desc.log; thread-safe */
  uv_loop_t* loop;              /* = &loop_storage */
  uv_loop_t loop_storage;
  uv_async_t stop_async;        /* tmk_relay_stop -> the loop */
  uv_udp_t udp;
  uv_tcp_t tcp;
  uv_timer_t tick;
  uv_async_t cmd_async;
  int udp_open, tcp_open, stopping;
  _Atomic uint64_t loop_cpu_ns;  /* the loop thread's CPU time, as of its last tick */
  int bound_port;
  struct tmk__udp_rx* udp_rx;   /* the UDP receive thread and its queue (relay_udp_rx.c) */
  void* scratch;                /* TMK_PROTO_MAX_BODY, loop-only decode scratch */
  /* registry */
  pthread_mutex_t reg_mu;
  tmk__session** sessions;      /* [reg] in creation order */
  uint32_t nsessions, sessions_cap;
  tmk__session* by_sid[1024];   /* [loop] hash buckets of live (non-replay) sessions */
  /* TCP */
  tmk__conn* conns;             /* [loop] newest first */
  uint32_t nconns;
  uint64_t last_conn_check_ms;  /* [loop] TCP timeouts */
  /* [loop] REJECT rate limit: per host (hashed, direct-mapped) and overall per second */
  uint32_t reject_key[256];
  uint64_t reject_ms[256];
  uint64_t reject_sec_ms;
  uint32_t reject_sec_n;
  /* commands */
  pthread_mutex_t cmd_mu;
  tmk__cmd* cmd_head;
  tmk__cmd* cmd_tail;
  /* zone/event queries running at once (relay_session.c) */
  pthread_mutex_t query_mu;
  pthread_cond_t query_cv;
  uint32_t queries_running;
  /* data listener */
  tmk_relay_data_fn data_fn;
  void* data_ud;
  /* counters [loop] */
  _Atomic uint64_t garbage;           /* datagrams/frames that were not telemark packets */
  _Atomic uint64_t rejected_sessions; /* new sessions refused (max sessions / per source) */
  _Atomic uint64_t unauthenticated;   /* §2.1: no MAC where one is required (relay_auth.c) */
  _Atomic uint64_t bad_mac;           /* §2.1: a MAC no applicable key matches */
  uint64_t auth_at_last_stats;
  atomic_int lod_running;             /* relay_lod.c: level-of-detail requests computing now */
  struct tmk__serial* serial;   /* [loop] relay_serial.c's ports, NULL without --serial */
  uint64_t records_at_last_stats;
  uint64_t lost_at_last_stats, packets_at_last_stats, garbage_at_last_stats;
  uint64_t queue_drops_at_last_stats;
  uint64_t last_stats_ms;
  uint64_t last_second_ms, last_sync_ms; /* [loop] periodic session work */
  /* HTTP server (relay_api.c) */
  struct mg_context* http;
  int http_port_bound;
  char http_start_error[256];   /* civetweb's first message while starting */
  atomic_int analyses;          /* …/stats and …/occurrences running now (relay_analysis.c) */
  tmk__ch* ch;                  /* --clickhouse history sink, NULL without */
};

/* ---- relay_session.c ---------------------------------------------------------------------- */
tmk__session* tmk__session_new(tmk_relay* r, uint64_t sid, const char* id, int replay);
void tmk__session_ref(tmk__session* s);
void tmk__session_unref(tmk__session* s);
/* [loop] lookup by agent session id among non-replay sessions. */
tmk__session* tmk__session_find_sid(tmk_relay* r, uint64_t sid);
/* [loop] registers a session; when the registry is full, evicts one (tmk__session_evict).
 * Returns 0 or TMK_ENOSPC (full). */
int tmk__session_register(tmk_relay* r, tmk__session* s);
/* [loop] removes one session that is neither live, recording nor linked over TCP — ended ones
 * before idle ones, oldest first — among all, or among those from src's host when src is
 * given. Returns 0 or TMK_ENOSPC (none can go). */
int tmk__session_evict(tmk_relay* r, const struct sockaddr* src);
/* Registry lookup by string id; returns a referenced session or NULL. Any thread. */
tmk__session* tmk__session_get(tmk_relay* r, const char* id);
/* Applies one packet — HELLO facts or DATA records — to a session: the one path shared by live
 * delivery (after reordering) and replay. Locks s->mu. Records it when recording. */
void tmk__session_apply(tmk__session* s, const uint8_t* packet, size_t len, void* scratch);
/* [loop] copies the reorder counters into the session's info if its lock is free now. */
void tmk__session_sync_stats(tmk__session* s);
/* [loop] applies queued packets if the session's lock is free (force = wait for it). */
void tmk__session_flush_pending(tmk__session* s, int force);
/* [loop] recording control. Return 0 or TMK_E*; err gets a sentence. */
int tmk__session_record_start(tmk__session* s, char* path_out, size_t cap, char* err, size_t ecap);
int tmk__session_record_stop(tmk__session* s, char* err, size_t ecap);
/* [loop] periodic work: flush recordings, idle detection. */
void tmk__sessions_periodic(tmk_relay* r, uint64_t now_ms, int sync);
/* [loop] shutdown: flush reorder buffers, close recordings. */
void tmk__sessions_shutdown(tmk_relay* r);
/* Replays a file into a new unregistered session (any thread; no loop state touched). */
int tmk__session_replay_file(tmk_relay* r, const char* name, tmk__session** out, char* err,
                             size_t ecap);

/* ---- relay_auth.c ------------------------------------------------------------------------- */
/* The key a HELLO of `program` must carry: its own entry, else "*"; NULL when unkeyed. */
const uint8_t* tmk__auth_key_for(const tmk_relay* r, const char* program, size_t len);
/* The configured key whose MAC the packet carries, NULL when none matches (tries each distinct
 * key once: DATA for a session the relay has no HELLO for, e.g. after a relay restart). */
const uint8_t* tmk__auth_find_key(const tmk_relay* r, const uint8_t* p, size_t len);
/* 1 when "*" is configured: every program is keyed. */
int tmk__auth_all_keyed(const tmk_relay* r);
/* Seals a packet the relay sends to session s when s is keyed. Returns the length to send
 * (len + 8 when sealed) or a negative TMK_E* code (cap too small). */
int tmk__auth_seal(const tmk__session* s, uint8_t* p, size_t len, size_t cap);

/* ---- relay_ingest.c ----------------------------------------------------------------------- */
/* 1 if both addresses have the same IP (ports ignored). */
int tmk__same_ip(const struct sockaddr* a, const struct sockaddr* b);
/* Binds UDP and TCP on cfg.listen_* and starts reading. Returns 0 or a libuv error (logged). */
int tmk__ingest_start(tmk_relay* r);
void tmk__ingest_stop(tmk_relay* r);
/* Sends a packet to a session's agent: over its TCP connection if it has one, else to its UDP
 * source address. Returns 0 or TMK_ESTATE / TMK_ESOCKET. */
int tmk__ingest_send(tmk_relay* r, tmk__session* s, const uint8_t* packet, size_t len);
/* [loop] every tick: ages reorder windows, applies queued packets, syncs counters, wakes the
 * data listener when packets were decoded since the last tick. */
void tmk__ingest_tick(tmk_relay* r, uint64_t now_ms);
/* [loop] one whole packet that did not come over UDP or TCP (a serial line): src is an AF_UNIX
 * address naming its device, so its sessions are bound to that device and answer nothing. */
void tmk__ingest_packet(tmk_relay* r, const uint8_t* p, size_t len, const struct sockaddr* src);

/* ---- relay_udp_rx.c ----------------------------------------------------------------------- */
typedef struct tmk__rxq_counters {
  uint64_t capacity, memory, bytes, peak, datagrams, drops, drop_bytes;
  uint64_t cpu_ns;              /* the receive thread's CPU time so far */
} tmk__rxq_counters;
typedef struct tmk__udp_rx tmk__udp_rx;
/* Starts the thread that reads fd (the bound UDP socket) into a queue of queue_bytes, which
 * the loop decodes through tmk__ingest_packet. NULL when out of memory or threads. */
tmk__udp_rx* tmk__udp_rx_start(tmk_relay* r, int fd, size_t queue_bytes);
/* [loop] stops and joins the thread, then decodes what it had queued; closes the loop handle
 * (tmk__udp_rx_free after the loop has run the close). */
void tmk__udp_rx_stop(tmk__udp_rx* rx);
void tmk__udp_rx_free(tmk__udp_rx* rx);
/* 1 while datagrams wait in the queue (the loop is behind). */
int tmk__udp_rx_backlog(tmk__udp_rx* rx);
/* Any thread; zeros without UDP. */
void tmk__udp_rx_counters(tmk__udp_rx* rx, tmk__rxq_counters* out);

/* ---- relay_serial.c ----------------------------------------------------------------------- */
/* Opens desc.serial's devices and starts reading them. Returns 0 or TMK_EINVAL / TMK_EIO (logged). */
int tmk__serial_start(tmk_relay* r, const char* const* specs, int n);
/* Closes them (idempotent); tmk__serial_free frees them once the loop has run the closes. */
void tmk__serial_stop(tmk_relay* r);
void tmk__serial_free(tmk_relay* r);

/* ---- relay_control.c ---------------------------------------------------------------------- */
int tmk__control_init(tmk_relay* r);
void tmk__control_close(tmk_relay* r);
/* [loop] resends pending UDP CONTROL packets. */
void tmk__control_tick(tmk_relay* r, uint64_t now_ms);
/* [loop] fails every queued command (shutdown). */
void tmk__control_drain(tmk_relay* r);

/* ---- relay_api.c ------------------------------------------------------------------------- */
/* Starts civetweb on cfg.http_*; returns 0 or TMK_ESOCKET (message logged). */
int tmk__http_start(tmk_relay* r);
void tmk__http_stop(tmk_relay* r);

/* ---- relay_lod.c -------------------------------------------------------------------------- */
/* GET /api/sessions/{id}/lod with query string qs (may be NULL): fills j with the answer and
 * returns 200, or returns the HTTP status of an error with its sentence in err and its TMK_E*
 * code in *code. Any thread; holds the session's lock only per slice of its store. */
int tmk__lod_request(tmk_relay* r, const char* id, const char* qs, tmk__json* j, char* err,
                     size_t ecap, int* code);

#endif /* TMK_RELAY_INTERNAL_H */
