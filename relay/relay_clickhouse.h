/* relay_clickhouse.h — the ClickHouse history sink (docs/CLICKHOUSE.md): the relay streams every
 * live session's facts, sites, threads, zones, frames, plots and messages into ClickHouse tables
 * in RowBinary batches, from its own thread; batches that cannot be sent spill to disk and are
 * resent later, also after a restart. Also runs the relay's fixed history queries. */
#ifndef TMK_RELAY_CLICKHOUSE_H
#define TMK_RELAY_CLICKHOUSE_H

#include <stddef.h>
#include <stdint.h>

#include "relay_core.h"

#define TMK__CH_SENDERS_DEFAULT 2
#define TMK__CH_SENDERS_MAX 8

typedef struct tmk__ch tmk__ch;           /* the sink: owned by the relay object */
typedef struct tmk__ch_sess tmk__ch_sess; /* per-session sink state: owned by the session */
struct tmk_relay;
struct tmk__session;

typedef struct tmk__ch_desc {
  const char* url;        /* http://HOST:PORT/[?database=NAME[&...]]; database default telemark */
  const char* spill_dir;  /* where unsent batches wait; created if missing */
  uint64_t spill_max;     /* bytes on disk at most; 0 = 1 GiB */
  uint64_t queue_max;     /* bytes of batches waiting in memory at most, and of sent batches'
                             memory kept for reuse at most; 0 = 128 MiB */
  uint32_t batch_bytes;   /* a table of a batch is sealed at this size; 0 = 16 MiB */
  uint32_t batch_ms;      /* ... or this long after its first row; 0 = 500 */
  uint32_t timeout_ms;    /* per HTTP request to ClickHouse; 0 = 10000 */
  uint32_t senders;       /* threads sending batches at once; 0 = TMK__CH_SENDERS_DEFAULT, at most
                             TMK__CH_SENDERS_MAX */
  const char* relay_name; /* written into sessions.relay; 0 = host name */
  tmk__logger* log;       /* the relay's log (thread-safe) */
} tmk__ch_desc;

/* Checks a --clickhouse URL. Returns 0 or TMK_EINVAL with a sentence in err. */
int tmk__ch_check_url(const char* url, char* err, size_t ecap);
/* Creates the sink and starts its thread (tables are created by the thread, spilled batches from
 * an earlier run are queued). Returns NULL with a sentence in err. */
tmk__ch* tmk__ch_new(const tmk__ch_desc* d, char* err, size_t ecap);
/* [loop] Seals what is staged, writes final session rows, then lets the thread send for up to
 * drain_ms and spill the rest. Call once, at shutdown, before tmk__ch_free. */
void tmk__ch_shutdown(tmk__ch* ch, struct tmk_relay* r, uint32_t drain_ms);
/* Joins the thread and frees everything (after tmk__ch_shutdown). */
void tmk__ch_free(tmk__ch* ch);
/* [loop] Seals batches by age and writes changed session rows (call every tick). */
void tmk__ch_tick(tmk__ch* ch, struct tmk_relay* r, uint64_t now_ms);

/* [loop] Attaches the sink to a new live session (sets its store's tap). 0 or TMK_ENOMEM. */
int tmk__ch_session_attach(tmk__ch* ch, struct tmk__session* s);
/* [loop] Writes the session's final row (before the registry drops it). */
void tmk__ch_session_final(tmk__ch* ch, struct tmk__session* s);
/* Frees a session's sink state (any thread; the loop no longer taps it). */
void tmk__ch_sess_free(tmk__ch_sess* cs);

/* The sink's ClickHouse endpoint (relay_clickhouse_http.h), immutable: any thread. */
struct tmk__ch_endpoint;
const struct tmk__ch_endpoint* tmk__ch_endpoint_of(const tmk__ch* ch);

/* Counters for GET /api/relay (any thread). */
typedef struct tmk__ch_stats {
  uint64_t rows_sent, batches_sent, bytes_sent;
  uint64_t batches_queued;  /* in memory, waiting or being sent */
  uint64_t batches_spilled; /* on disk now, waiting */
  uint64_t spill_bytes;
  uint64_t spilled_total;   /* batches ever written to disk */
  uint64_t errors;          /* failed requests */
  uint64_t rows_dropped;    /* rows lost because memory and disk bounds were both full */
  uint64_t staging_kept_bytes; /* memory of sent batches kept for the next ones */
  uint64_t staging_kept_max;   /* its bound (queue_max) */
  uint64_t history_running;    /* history queries waiting for ClickHouse now */
  uint64_t history_refused;    /* history queries answered 503: TMK__CH_HISTORY_MAX were running */
  int up;                   /* the last request succeeded */
  char last_error[768];
} tmk__ch_stats;
void tmk__ch_get_stats(tmk__ch* ch, tmk__ch_stats* out);
/* Writes the "clickhouse" object of GET /api/relay. */
void tmk__ch_json_stats(tmk__ch* ch, tmk__json* j);

/* History queries (docs/CLICKHOUSE.md "Queries"): a fixed set, parameters checked and quoted
 * here, never SQL from the caller. `name` is one of "programs", "builds", "sites", "trend",
 * "diff"; `get(ud, key)` returns a query-string parameter or NULL. On success returns 0 and
 * appends the JSON answer to `out`; otherwise a negative TMK_E* with a sentence in err
 * (TMK_EINVAL bad parameter, TMK_ENOTFOUND unknown query, TMK_ESOCKET ClickHouse unreachable or
 * its answer not JSON rows, TMK_EAGAIN too many at once), and `out` may hold a part to drop.
 * Any thread; blocks for the ClickHouse round trip. */
typedef const char* (*tmk__ch_param_fn)(void* ud, const char* key);
/* (relay_history.c; the endpoint it queries is the sink's: tmk__ch_endpoint_of). At most
 * TMK__CH_HISTORY_MAX run at once: each holds an HTTP worker thread for as long as ClickHouse
 * takes (up to 35 s), and the workers also serve the dashboard's other requests and its live
 * WebSockets. One more is refused at once with TMK_EAGAIN (503). */
#define TMK__CH_HISTORY_MAX 4
int tmk__ch_history(tmk__ch* ch, const char* name, tmk__ch_param_fn get, void* ud, tmk__json* out,
                    char* err, size_t ecap);
/* A place among the TMK__CH_HISTORY_MAX history queries: 0, or -1 (counted in history_refused
 * and logged, at most once every 10 s) when they are all taken. Give it back with _end. */
int tmk__ch_history_begin(tmk__ch* ch);
void tmk__ch_history_end(tmk__ch* ch);

#endif /* TMK_RELAY_CLICKHOUSE_H */
