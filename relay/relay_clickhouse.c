/* relay_clickhouse.c — the ClickHouse history sink (docs/CLICKHOUSE.md): session taps stage rows
 * into a batch on the loop thread as RowBinary (zones as runs of the store's own records, which a
 * materialized view in ClickHouse expands into `zones` rows); sealed batches go to a bounded
 * memory queue; the sink thread sends every table with an HTTP POST, spilling to a bounded
 * directory when ClickHouse is down or slow (and resending from it, also after a restart). Rows
 * carry keys that make a resent batch collapse in ReplacingMergeTree tables. HTTP:
 * relay_clickhouse_http.c; the history queries: relay_history.c. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "relay_clickhouse.h"
#include "relay_clickhouse_http.h"
#include "relay_internal.h"

/* =============================================================================================
 * Tables (docs/CLICKHOUSE.md "Tables"). Every row starts with `day` (the session's UTC creation
 * date, the partition) and `session`. The ORDER BY of each table is its collapse key.
 * ============================================================================================= */
enum {
  T_SESSIONS, T_SITES, T_THREADS, T_ZONES, T_FRAMES, T_PLOTS, T_MESSAGES,
  T_ZONE_RUNS,   /* Null table: runs of wide (16-byte) records, from spill files of relays
                    before zone_runs12; expanded into `zones` by k_zone_view */
  T_ZONE_RUNS12, /* Null table: runs of narrow (12-byte) records, by k_zone_view12 */
  T_COUNT
};

static const char* const k_table[T_COUNT] = {"sessions", "sites",     "threads",
                                             "zones",    "frames",    "plots",
                                             "messages", "zone_runs", "zone_runs12"};

static const char* const k_ddl[T_COUNT] = {
    "(day Date, session UInt64, relay String, program String, build String, label String, "
    "platform String, arch String, agent_version String, transport String, source String, "
    "created_unix_ns UInt64, timer_freq UInt64, clock_ns UInt64, clock_unix_ns UInt64, "
    "first_ns UInt64, last_ns UInt64, zones UInt64, frames UInt64, plots UInt64, "
    "messages UInt64, lost UInt64, dropped_by_agent UInt64, live UInt8, version UInt64) "
    "ENGINE = ReplacingMergeTree(version) PARTITION BY day ORDER BY (program, build, session)",
    "(day Date, session UInt64, site UInt32, kind UInt8, severity UInt8, name String, "
    "file String, line UInt32, color UInt32) "
    "ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY (session, site)",
    "(day Date, session UInt64, thread UInt32, name String) "
    "ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY (session, thread)",
    "(day Date, session UInt64, n UInt64, thread UInt32, site UInt32, start_ns UInt64, "
    "dur_ns UInt64, depth UInt8, marker UInt8) "
    "ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY (session, site, n)",
    "(day Date, session UInt64, n UInt64, thread UInt32, site UInt32, time_ns UInt64, "
    "dur_ns UInt64) "
    "ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY (session, site, n)",
    "(day Date, session UInt64, n UInt64, thread UInt32, site UInt32, time_ns UInt64, "
    "value Float64) "
    "ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY (session, site, n)",
    "(day Date, session UInt64, n UInt64, thread UInt32, site UInt32, time_ns UInt64, "
    "severity UInt8, verbosity UInt32, text String) "
    "ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY (session, n)",
    /* recs: the store's wide zone records (relay_core.h tmk__tap_zrec, little-endian) of one
     * thread; the zone recs[i] (i from 1) is row n0 + i - 1, starting at base + start_off ns;
     * rank: the session's place among the INSERT's sessions in id order (zone_order) */
    "(day Date, session UInt64, rank UInt8, thread UInt32, n0 UInt64, base UInt64, "
    "recs Array(FixedString(16))) ENGINE = Null",
    /* the same with the store's narrow records (tmk__tap_nrec) */
    "(day Date, session UInt64, rank UInt8, thread UInt32, n0 UInt64, base UInt64, "
    "recs Array(FixedString(12))) ENGINE = Null",
};

/* Expands every zone_runs row into its zones rows, inside ClickHouse (ARRAY JOIN): the same
 * (session, site, n) keys and values the relay's own API gives, so resent runs collapse. Only
 * runs whose ticks are ns go this way; the relay converts other timers' zones itself.
 * A record is read as two little-endian UInt64 (lo: start_off, dur_lo; hi: site, dur_hi, depth,
 * flags): one substring a zone (ClickHouse computes each repeated expression once).
 * The ORDER BY hands `zones` its rows sorted by its key (session, site, n), so that MergeTree
 * skips its own sort, several times slower on 18.16 (a comparison per column per pair): one
 * UInt64 made of rank (8 bits), site (20) and n (36) sorts as that key when every session of
 * the INSERT has a rank of its own, sites are < 2^20 and n does not cross a multiple of 2^36;
 * otherwise the block is merely not sorted and MergeTree sorts it (docs/CLICKHOUSE.md). */
static const char k_zone_view[] =
    "CREATE MATERIALIZED VIEW IF NOT EXISTS zones_from_runs TO zones AS SELECT day, session, "
    "toUInt64(n0 + i - 1) AS n, thread, "
    "toUInt32(reinterpretAsUInt64(substring(r, 9, 8))) AS site, "
    "base + toUInt64(toInt32(reinterpretAsUInt64(r))) AS start_ns, "
    "bitOr(bitShiftRight(reinterpretAsUInt64(r), 32), "
    "bitAnd(reinterpretAsUInt64(substring(r, 9, 8)), 281470681743360)) AS dur_ns, "
    "toUInt8(bitShiftRight(reinterpretAsUInt64(substring(r, 9, 8)), 48)) AS depth, "
    "toUInt8(bitAnd(bitShiftRight(reinterpretAsUInt64(substring(r, 9, 8)), 56), 1)) AS marker "
    "FROM zone_runs ARRAY JOIN recs AS r, arrayEnumerate(recs) AS i "
    "ORDER BY bitOr(bitOr(bitShiftLeft(toUInt64(rank), 56), "
    "bitShiftLeft(bitAnd(toUInt64(site), 1048575), 36)), bitAnd(n, 68719476735))";

/* The same for zone_runs12: a narrow record is a little-endian UInt64 (start_off, dur) and a
 * UInt32 (site in bits 0-19, depth in 20-27, flags in 28-31). */
static const char k_zone_view12[] =
    "CREATE MATERIALIZED VIEW IF NOT EXISTS zones_from_runs12 TO zones AS SELECT day, session, "
    "toUInt64(n0 + i - 1) AS n, thread, "
    "bitAnd(reinterpretAsUInt32(substring(r, 9, 4)), 1048575) AS site, "
    "base + toUInt64(toInt32(reinterpretAsUInt64(r))) AS start_ns, "
    "bitShiftRight(reinterpretAsUInt64(r), 32) AS dur_ns, "
    "toUInt8(bitShiftRight(reinterpretAsUInt32(substring(r, 9, 4)), 20)) AS depth, "
    "toUInt8(bitAnd(bitShiftRight(reinterpretAsUInt32(substring(r, 9, 4)), 28), 1)) AS marker "
    "FROM zone_runs12 ARRAY JOIN recs AS r, arrayEnumerate(recs) AS i "
    "ORDER BY bitOr(bitOr(bitShiftLeft(toUInt64(rank), 56), "
    "bitShiftLeft(bitAnd(toUInt64(site), 1048575), 36)), bitAnd(n, 68719476735))";

/* =============================================================================================
 * Buffers and batches
 * ============================================================================================= */
typedef tmk__chbuf chbuf;

static inline int buf_room(chbuf* b, size_t n) { return tmk__chbuf_room(b, n); }
static void buf_free(chbuf* b) { tmk__chbuf_free(b); }
static inline void put(chbuf* b, const void* v, size_t n) { tmk__chbuf_put(b, v, n); }

/* The staging buffer of zone runs: reserved whole, its pages populated by the kernel a window at
 * a time ahead of the writes (MADV_POPULATE_WRITE: Linux 5.14, glibc 2.35; on older kernels the
 * call fails and elsewhere it is not made: pages then fault in as they are written) instead of
 * one page fault per 4 KiB on the loop thread (docs/SCALE.md). With a memory bound of HUGE_STAGING
 * or more the buffer is 2 MiB-aligned, for whichever kind of page has lately cost less
 * (relay_slab.c); on huge pages the window is one of them, on 4 KiB pages POPULATE_STEP, so that
 * a batch sealed part-way into a window has not populated up to 2 MiB it does not use (each
 * batch of a backlog is fresh memory the first time). Below HUGE_STAGING the buffer is on 4 KiB
 * pages: 2 MiB steps would be too coarse for the bound on kept memory. */
#define POPULATE_STEP ((size_t)256 << 10)
#define HUGE_STAGING ((uint64_t)64 << 20)

static int buf_map(chbuf* b, size_t cap, int huge) {
  size_t page = huge ? TMK__HUGE_PAGE : 4096;
  cap = (cap + page - 1) & ~(page - 1);
  int got_huge = 0;
  void* m = tmk__map_pages(cap, huge, 0, &got_huge);
  if (!m) return 0;
  b->p = m;
  b->cap = cap;
  b->len = 0;
  b->mapped = 1; /* nothing populated yet; 1 keeps it nonzero */
  b->step = got_huge ? TMK__HUGE_PAGE : POPULATE_STEP;
  return 1;
}

/* Populates b's pages up to len + n (a window ahead), if b is mapped. */
static inline void buf_populate(chbuf* b, size_t n) {
  if (!b->mapped || b->len + n <= b->mapped) return;
  size_t from = b->mapped & ~(size_t)4095;
  size_t to = (b->len + n + b->step) & ~(b->step - 1);
  if (to > b->cap) to = b->cap;
  if (to > from) tmk__populate(b->p + from, to - from);
  b->mapped = to;
}
/* RowBinary is little-endian; the relay runs on little-endian hosts (checked at start). */
static inline void put_u8(chbuf* b, uint8_t v) { put(b, &v, 1); }
static inline void put_u16(chbuf* b, uint16_t v) { put(b, &v, 2); }
static inline void put_u32(chbuf* b, uint32_t v) { put(b, &v, 4); }
static inline void put_u64(chbuf* b, uint64_t v) { put(b, &v, 8); }
static void put_str(chbuf* b, const char* s, size_t n) {
  uint8_t v[10];
  size_t k = 0;
  uint64_t x = n;
  do {
    v[k++] = (uint8_t)((x & 0x7f) | (x > 0x7f ? 0x80 : 0));
    x >>= 7;
  } while (x);
  put(b, v, k);
  put(b, s, n);
}
static void put_cstr(chbuf* b, const char* s) { put_str(b, s, strlen(s)); }

/* Zones whose ticks are ns (every run with freq 0 or 1 GHz) in the store's narrow records are
 * staged as `zone_runs12` rows: a header, then the records exactly as the tap hands them over
 * (one memcpy; ClickHouse decodes them, k_zone_view12). Zones of other timers, and runs of wide
 * records, are converted here into `zones` rows. `zone_runs` rows (wide records, k_zone_view)
 * come only from spill files of earlier relays. */
_Static_assert(sizeof(tmk__tap_zrec) == 16 && offsetof(tmk__tap_zrec, dur_lo) == 4 &&
                   offsetof(tmk__tap_zrec, site) == 8 && offsetof(tmk__tap_zrec, dur_hi) == 12 &&
                   offsetof(tmk__tap_zrec, depth) == 14 && offsetof(tmk__tap_zrec, flags) == 15,
               "k_zone_view reads tmk__tap_zrec at these offsets");
_Static_assert(TMK_RELAY_ZONE_MARKER == 1, "k_zone_view tests bit 0 of flags");
_Static_assert(sizeof(tmk__tap_nrec) == 12 && offsetof(tmk__tap_nrec, dur) == 4 &&
                   offsetof(tmk__tap_nrec, sdf) == 8,
               "k_zone_view12 reads tmk__tap_nrec at these offsets");

#define ZONE_ROW 44 /* bytes of one zones row in RowBinary; batches are sized in these */
#define RUN_FIXED 31 /* bytes of a zone runs row before its record count */
#define RUN_HEAD 36  /* most bytes of a zone runs row before its records (5-byte count) */

/* ticks are ns: no conversion */
static inline int run_exact(uint64_t freq) { return freq == 0 || freq == 1000000000ull; }

/* One zones row (ZONE_ROW bytes) at p, converting ticks to ns with freq. */
static void put_zone_row(uint8_t* p, uint16_t day, uint64_t sid, uint32_t thread, uint64_t base,
                         uint64_t freq, const tmk__tap_zone* z, uint64_t n) {
  uint64_t start = base + (uint64_t)(int64_t)z->start_off;
  uint64_t dur = z->dur;
  uint64_t start_ns = tmk_proto_ticks_to_ns(start, freq);
  uint64_t dur_ns = tmk_proto_ticks_to_ns(start + dur, freq) - start_ns;
  memcpy(p, &day, 2);
  memcpy(p + 2, &sid, 8);
  memcpy(p + 10, &n, 8);
  memcpy(p + 18, &thread, 4);
  memcpy(p + 22, &z->site, 4);
  memcpy(p + 26, &start_ns, 8);
  memcpy(p + 34, &dur_ns, 8);
  p[42] = z->depth;
  p[43] = (uint8_t)(z->flags & TMK_RELAY_ZONE_MARKER ? 1 : 0);
}

typedef struct batch {
  chbuf seg[T_COUNT]; /* RowBinary rows per table */
  uint32_t rows[T_COUNT]; /* rows each table gets (zone runs: the zones rows they make) */
  uint32_t done;       /* bit per table: already accepted by ClickHouse */
  uint64_t first_ms;   /* when its first row was staged */
  uint64_t total_rows;
  size_t bytes;
  size_t held;         /* memory it holds while kept for reuse (keep_bytes) */
  /* [loop, then sink] the sessions of its zone runs: first those of the batch before, in id
   * order (a guess that its sessions go on, which makes the indexes ranks already), then any
   * other in the order they first came. While staged from the taps (`by_arrival`), a run's rank
   * byte holds its session's index here (255 beyond 255 sessions), turned into the rank when
   * sent (zone_order); seen[k]: a run of session k was staged */
  uint64_t rsid[255];
  uint8_t seen[255];
  uint32_t nrs, last_rs;
  int by_arrival;
  /* [loop, then sink] where each staged zone_runs12 row's rank byte is, so that rewriting them
   * does not walk the rows (a miss a row, each waiting for the one before); roff_oom: the index
   * could not grow, walk instead */
  uint32_t* roff;
  uint32_t nroff, croff;
  int roff_oom;
  char path[600];      /* spill file, "" while only in memory */
  int lent;            /* a request that lent its staging pages failed: never reuse them */
  struct batch* next;
} batch;

static void batch_free(batch* b) {
  if (!b) return;
  for (int t = 0; t < T_COUNT; t++) buf_free(&b->seg[t]);
  free(b->roff);
  free(b);
}

/* Bytes the batch holds in memory. */
static size_t batch_bytes(const batch* b) {
  size_t n = 0;
  for (int t = 0; t < T_COUNT; t++) n += b->seg[t].len;
  return n;
}

/* Memory the batch's buffers hold: for the mapped zone runs the pages populated so far (those
 * not populated cost nothing), for the others their allocation. */
static size_t batch_held(const batch* b) {
  size_t n = 0;
  for (int t = 0; t < T_COUNT; t++) {
    const chbuf* c = &b->seg[t];
    n += c->mapped ? (c->mapped > 1 ? c->mapped : 0) : c->cap;
  }
  return n + (size_t)b->croff * sizeof b->roff[0];
}

/* The bytes of a record in zone runs table t, 0 when t is not one. */
static inline size_t run_rec(int t) {
  return t == T_ZONE_RUNS12 ? sizeof(tmk__tap_nrec) : t == T_ZONE_RUNS ? sizeof(tmk__tap_zrec) : 0;
}

/* Zones rows the batch makes, either way. */
static uint64_t batch_zones(const batch* b) {
  return (uint64_t)b->rows[T_ZONES] + b->rows[T_ZONE_RUNS] + b->rows[T_ZONE_RUNS12];
}

/* =============================================================================================
 * The sink
 * ============================================================================================= */
#define FRAME_SLOTS 64 /* (thread, site) pairs whose last frame time a session remembers */

struct tmk__ch_sess {
  tmk__ch* ch;
  uint64_t sid;
  uint16_t day;
  uint64_t zones, frames, plots, messages; /* rows staged so far = the row number n */
  struct {
    uint32_t thread, site;
    uint64_t last_ns;
    int used;
  } fr[FRAME_SLOTS];
  int emitted;              /* a sessions row was written ... */
  uint64_t last[12];        /* ... with these facts and counters */
};

typedef struct sender { /* what a sender thread is started with */
  struct tmk__ch* ch;
  int slot;
} sender;

struct tmk__ch {
  /* configuration (immutable) */
  tmk__ch_endpoint ep; /* host, port, URL parameters, database, timeout */
  char spill_dir[512];
  char relay_name[128];
  tmk__logger* log;
  uint64_t spill_max, queue_max;
  uint32_t batch_bytes, batch_ms;
  /* [loop] staging */
  batch* stage;
  uint64_t seed[255]; /* the sessions of the last batch sealed with zone runs, in id order */
  uint32_t nseed;
  uint64_t spill_seq;
  uint64_t last_rows_ms;
  /* shared, under mu */
  pthread_mutex_t mu;
  uint64_t hist_logged_ms; /* (mu) when a refused history query was last logged */
  pthread_cond_t cv;
  batch* q_head;
  batch* q_tail;
  uint64_t q_bytes, q_batches;
  uint32_t sending; /* [mu] batches from memory off the queue, not yet sent or spilled */
  uint64_t disk_bytes, disk_batches;
  int stop;
  uint64_t drain_deadline_ms;
  tmk__ch_stats st;
  batch* pool; /* sent batches kept for reuse: their pages stay populated (no page faults) */
  uint64_t keep_bytes; /* memory they hold (batch_held), at most queue_max */
  uint32_t backoff;      /* ms: 0 while ClickHouse answers, else 250 doubling to 5000 */
  uint64_t retry_ms;     /* no request before this time (tmk__now_ms) */
  int was_up;            /* -1 unknown, 0 down, 1 up: logs the changes */
  int tables, tables_busy; /* tables created; a sender is creating them */
  char claim[TMK__CH_SENDERS_MAX][64]; /* the spill file each sender holds, "" if none */
  uint32_t nclaimed;
  /* senders */
  uint32_t senders;
  sender sd[TMK__CH_SENDERS_MAX];
  pthread_t thread[TMK__CH_SENDERS_MAX];
  uint32_t threads_started;
};

static void set_error(tmk__ch* ch, const char* fmt, const char* a, const char* b) {
  pthread_mutex_lock(&ch->mu);
  snprintf(ch->st.last_error, sizeof ch->st.last_error, fmt, a, b);
  ch->st.errors++;
  ch->st.up = 0;
  pthread_mutex_unlock(&ch->mu);
}

/* Caller holds mu. Keeps a done batch's buffers for the next staging batch, or frees it.
 * Batches are only made when none is kept, so the kept ones are never more than were alive at
 * once (the largest backlog so far: a relay that had one burst meets the next one with its
 * pages ready); their memory is bounded by queue_max as well (docs/CLICKHOUSE.md). */
static void recycle_locked(tmk__ch* ch, batch* b) {
  size_t held = batch_held(b);
  if (ch->keep_bytes + held > ch->queue_max || b->lent) {
    pthread_mutex_unlock(&ch->mu); /* munmap takes a while: not under the loop's lock */
    batch_free(b);
    pthread_mutex_lock(&ch->mu);
    return;
  }
  for (int t = 0; t < T_COUNT; t++) {
    b->seg[t].len = 0;
    b->seg[t].oom = 0;
    b->rows[t] = 0;
  }
  b->done = 0;
  b->total_rows = 0;
  b->bytes = 0;
  b->path[0] = 0;
  b->held = held;
  b->nrs = b->last_rs = 0;
  b->by_arrival = 0;
  b->nroff = 0;
  b->roff_oom = 0;
  b->next = ch->pool;
  ch->pool = b;
  ch->keep_bytes += held;
}

/* ---------------------------------------------------------------------------------------------
 * Requests (relay_clickhouse_http.c)
 * ------------------------------------------------------------------------------------------- */

static int http_post(tmk__ch* ch, const char* sql, const uint8_t* body, size_t blen, int lend,
                     chbuf* resp, size_t rcap, char* err, size_t ecap) {
  return tmk__ch_post(&ch->ep, ch->ep.params, sql, body, blen, lend, resp, rcap, err, ecap);
}

const tmk__ch_endpoint* tmk__ch_endpoint_of(const tmk__ch* ch) { return &ch->ep; }

/* ---------------------------------------------------------------------------------------------
 * Spill files: "TMKCH003", then per table: u8 table (T_*), u32 rows, u32 bytes, RowBinary rows;
 * then a CRC-32C of everything before it. Written to NAME.tmp and renamed, so a file is whole or
 * absent. "TMKCH002" files (relays before zone_runs12: tables 0..7) and "TMKCH001" files (before
 * zone_runs: tables 0..6) are read the same way.
 * ------------------------------------------------------------------------------------------- */
#define SPILL_MAGIC "TMKCH003"
#define SPILL_MAGIC_V2 "TMKCH002"
#define SPILL_MAGIC_V1 "TMKCH001"

static int spill_write(tmk__ch* ch, batch* b, uint64_t seq, uint64_t* size, int sync) {
  char tmp[620];
  snprintf(b->path, sizeof b->path, "%s/%020llu-%06llu.tmkch", ch->spill_dir,
           (unsigned long long)tmk__unix_ns(), (unsigned long long)(seq % 1000000));
  snprintf(tmp, sizeof tmp, "%s.tmp", b->path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    b->path[0] = 0;
    return -1;
  }
  uint32_t crc = tmk__crc32c(0, SPILL_MAGIC, 8);
  int ok = write(fd, SPILL_MAGIC, 8) == 8;
  *size = 12;
  for (int t = 0; t < T_COUNT && ok; t++) {
    if (!b->rows[t] || (b->done & (1u << t))) continue;
    uint8_t hd[9];
    uint32_t n = (uint32_t)b->seg[t].len;
    hd[0] = (uint8_t)t;
    memcpy(hd + 1, &b->rows[t], 4);
    memcpy(hd + 5, &n, 4);
    crc = tmk__crc32c(crc, hd, 9);
    crc = tmk__crc32c(crc, b->seg[t].p, n);
    ok = write(fd, hd, 9) == 9 && write(fd, b->seg[t].p, n) == (ssize_t)n;
    *size += 9 + (uint64_t)n;
  }
  ok = ok && write(fd, &crc, 4) == 4 && (!sync || fdatasync(fd) == 0);
  if (close(fd) != 0) ok = 0;
  if (!ok || rename(tmp, b->path) != 0) {
    unlink(tmp);
    b->path[0] = 0;
    return -1;
  }
  return 0;
}

/* The batch in a spill file, or NULL with why ("" when the file cannot be read at all). */
static batch* spill_read(const char* path, const char** why) {
  *why = "";
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat sb;
  batch* b = NULL;
  uint8_t* d = NULL;
  if (fstat(fd, &sb) != 0 || sb.st_size < 12 || sb.st_size > (1 << 30)) goto out;
  d = malloc((size_t)sb.st_size);
  if (!d || read(fd, d, (size_t)sb.st_size) != sb.st_size) goto out;
  size_t n = (size_t)sb.st_size;
  uint32_t crc;
  memcpy(&crc, d + n - 4, 4);
  /* the tables a file of its version may hold */
  const int tables = memcmp(d, SPILL_MAGIC, 8) == 0      ? T_COUNT
                     : memcmp(d, SPILL_MAGIC_V2, 8) == 0 ? T_ZONE_RUNS12
                     : memcmp(d, SPILL_MAGIC_V1, 8) == 0 ? T_ZONE_RUNS
                                                         : 0;
  *why = "is not a spill file of a format this relay reads (TMKCH001, TMKCH002, TMKCH003)";
  if (!tables) goto out;
  *why = "is corrupt (checksum or framing)";
  if (tmk__crc32c(0, d, n - 4) != crc) goto out;
  b = calloc(1, sizeof *b);
  if (!b) goto out;
  size_t i = 8;
  while (i + 9 <= n - 4) {
    uint32_t rows, len;
    int t = d[i];
    memcpy(&rows, d + i + 1, 4);
    memcpy(&len, d + i + 5, 4);
    i += 9;
    if (t >= tables || len > n - 4 - i || b->rows[t]) {
      batch_free(b);
      b = NULL;
      goto out;
    }
    /* exactly len (put alone would round up to a power of two, and a batch read back would
     * then hold more than --clickhouse-memory lets recycle_locked keep) */
    if (len && (b->seg[t].p = malloc(len)) != NULL) b->seg[t].cap = len;
    put(&b->seg[t], d + i, len);
    b->rows[t] = rows;
    b->total_rows += rows;
    i += len;
  }
  b->bytes = batch_bytes(b);
  snprintf(b->path, sizeof b->path, "%s", path);
out:
  free(d);
  close(fd);
  return b;
}

static int spill_filter(const struct dirent* e) {
  size_t n = strlen(e->d_name);
  return n > 6 && strcmp(e->d_name + n - 6, ".tmkch") == 0;
}

/* Counts what an earlier run left behind (and removes torn .tmp files). */
static void spill_scan(tmk__ch* ch) {
  DIR* dir = opendir(ch->spill_dir);
  if (!dir) return;
  struct dirent* e;
  while ((e = readdir(dir)) != NULL) {
    char p[1100];
    size_t n = strlen(e->d_name);
    snprintf(p, sizeof p, "%s/%s", ch->spill_dir, e->d_name);
    if (n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
      unlink(p);
      continue;
    }
    struct stat sb;
    if (spill_filter(e) && stat(p, &sb) == 0) {
      ch->disk_batches++;
      ch->disk_bytes += (uint64_t)sb.st_size;
    }
  }
  closedir(dir);
}

/* ---------------------------------------------------------------------------------------------
 * The sink thread
 * ------------------------------------------------------------------------------------------- */
static int ensure_tables(tmk__ch* ch, char* err, size_t ecap) {
  char sql[1024];
  /* CREATE DATABASE goes to the "default" database: the URL's may not exist yet. */
  snprintf(sql, sizeof sql, "CREATE DATABASE IF NOT EXISTS %s", ch->ep.db);
  if (tmk__ch_post(&ch->ep, "database=default", sql, NULL, 0, 0, NULL, 0, err, ecap)) return -1;
  for (int t = 0; t < T_COUNT; t++) {
    chbuf q = {0};
    put(&q, "CREATE TABLE IF NOT EXISTS ", 27);
    put(&q, k_table[t], strlen(k_table[t]));
    put(&q, " ", 1);
    put(&q, k_ddl[t], strlen(k_ddl[t]) + 1);
    int rc = q.oom ? -1 : http_post(ch, (const char*)q.p, NULL, 0, 0, NULL, 0, err, ecap);
    free(q.p);
    if (rc) return -1;
  }
  /* Tables made by the first version of the sink had zones.depth UInt16 (the store keeps 8 bits):
   * narrow it, or RowBinary rows would not line up. */
  snprintf(sql, sizeof sql,
           "SELECT type FROM system.columns WHERE database = '%s' AND table = 'zones' AND "
           "name = 'depth'",
           ch->ep.db);
  chbuf type = {0};
  int rc = http_post(ch, sql, NULL, 0, 0, &type, 256, err, ecap);
  if (rc == 0 && type.len >= 6 && memcmp(type.p, "UInt16", 6) == 0)
    rc = http_post(ch, "ALTER TABLE zones MODIFY COLUMN depth UInt8", NULL, 0, 0, NULL, 0, err,
                   ecap);
  free(type.p);
  /* the views that turn zone runs into zones rows; databases of earlier relays get them here */
  if (rc == 0) rc = http_post(ch, k_zone_view, NULL, 0, 0, NULL, 0, err, ecap);
  if (rc == 0) rc = http_post(ch, k_zone_view12, NULL, 0, 0, NULL, 0, err, ecap);
  return rc ? -1 : 0;
}

/* Walks the zone runs rows in p, records of `rec` bytes: calls fn on the session id and rank
 * byte of each. Returns -1 when the rows do not parse (then they are sent as they are;
 * ClickHouse judges them). */
static int each_run(uint8_t* p, size_t len, size_t rec, void (*fn)(void*, uint64_t, uint8_t*),
                    void* ud) {
  size_t i = 0;
  while (i < len) {
    if (len - i < RUN_FIXED + 1) return -1;
    uint64_t sid, count = 0;
    memcpy(&sid, p + i + 2, 8);
    uint8_t* rank = p + i + 10;
    size_t j = i + RUN_FIXED;
    for (int shift = 0;; shift += 7) {
      if (j >= len || shift > 28) return -1;
      count |= (uint64_t)(p[j] & 0x7f) << shift;
      if (!(p[j++] & 0x80)) break;
    }
    if (count > (len - j) / rec) return -1;
    fn(ud, sid, rank);
    i = j + (size_t)count * rec;
  }
  return 0;
}

typedef struct zorder {
  uint64_t sid[256]; /* the sessions of the INSERT, in id order once sorted (at most 256) */
  uint32_t n;        /* beyond 256 sessions the rest get rank 255: not sorted, still right */
} zorder;

static void zorder_add(void* ud, uint64_t sid, uint8_t* rank) {
  zorder* z = ud;
  (void)rank;
  if (z->n && z->sid[z->n - 1] == sid) return; /* runs of one session come in streaks */
  for (uint32_t k = 0; k < z->n; k++)
    if (z->sid[k] == sid) return;
  if (z->n < 256) z->sid[z->n++] = sid;
}

static int u64_cmp(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

static void zorder_set(void* ud, uint64_t sid, uint8_t* rank) {
  const zorder* z = ud;
  uint32_t lo = 0, hi = z->n;
  while (lo < hi) { /* binary search: sid[] is sorted */
    uint32_t mid = (lo + hi) / 2;
    if (z->sid[mid] < sid) lo = mid + 1;
    else hi = mid;
  }
  *rank = (uint8_t)(lo < z->n && z->sid[lo] == sid ? lo : 255);
}

static void rank_map(void* ud, uint64_t sid, uint8_t* rank) {
  (void)sid;
  *rank = ((const uint8_t*)ud)[*rank];
}

/* Gives every row of zone runs table t its session's rank in id order (the views' ORDER BY),
 * nothing per zone. A batch staged here (its runs all in zone_runs12) knows its sessions
 * (b->rsid, rank bytes = their indexes): when they came in id order the bytes already are the
 * ranks, else one walk over the run headers maps them; a batch read from a spill file takes two
 * walks (collect, sort, set). Then the rank bytes are ranks: sending again recomputes them from
 * the ids. [sink thread, owns the batch] */
static void zone_order(batch* b, int t) {
  chbuf* runs = &b->seg[t];
  const size_t rec = run_rec(t);
  if (b->by_arrival && t == T_ZONE_RUNS12) {
    b->by_arrival = 0;
    uint8_t map[256];
    int same = 1;
    for (uint32_t k = 0; k < b->nrs; k++) { /* rank of index k: sessions with a lower id */
      uint32_t r = 0;
      for (uint32_t j = 0; j < b->nrs; j++) r += b->rsid[j] < b->rsid[k];
      map[k] = (uint8_t)r;
      same &= r == k;
    }
    for (uint32_t k = b->nrs; k < 256; k++) map[k] = 255;
    if (same) return;
    if (b->roff_oom) {
      each_run(runs->p, runs->len, rec, rank_map, map);
      return;
    }
    uint8_t* p = runs->p;
    for (uint32_t k = 0; k < b->nroff; k++) p[b->roff[k]] = map[p[b->roff[k]]];
    return;
  }
  zorder z;
  z.n = 0;
  if (each_run(runs->p, runs->len, rec, zorder_add, &z)) return;
  qsort(z.sid, z.n, sizeof z.sid[0], u64_cmp);
  each_run(runs->p, runs->len, rec, zorder_set, &z);
}

/* Sends every table of the batch not yet accepted. Returns 0 when all are in. */
static int send_batch(tmk__ch* ch, batch* b, char* err, size_t ecap) {
  for (int t = 0; t < T_COUNT; t++) {
    if (!b->rows[t] || (b->done & (1u << t))) continue;
    char sql[96];
    snprintf(sql, sizeof sql, "INSERT INTO %s FORMAT RowBinary", k_table[t]);
    size_t len = b->seg[t].len;
    if (run_rec(t)) zone_order(b, t);
    /* a staging buffer (mapped: its own pages) is lent to the kernel, not copied into the
     * socket; after a failure its pages may still be on their way, so it is never reused */
    const int lend = b->seg[t].mapped != 0;
    if (http_post(ch, sql, b->seg[t].p, len, lend, NULL, 0, err, ecap)) {
      if (lend) b->lent = 1;
      return -1;
    }
    b->done |= 1u << t;
    pthread_mutex_lock(&ch->mu);
    ch->st.rows_sent += b->rows[t];
    ch->st.bytes_sent += len;
    pthread_mutex_unlock(&ch->mu);
  }
  return 0;
}

/* Caller holds mu. Moves a memory batch to disk or, when the disk bound is reached, drops it.
 * sync: fdatasync the file (the sink thread); the loop thread only writes to the page cache
 * (a process crash keeps it, a power loss may not) so that ingest never waits for the disk. */
static void spill_or_drop_locked(tmk__ch* ch, batch* b, int sync) {
  uint64_t seq = ++ch->spill_seq;
  size_t sz = b->bytes + 12 + 9 * T_COUNT; /* the file: magic, table headers, CRC */
  if (ch->disk_bytes + sz <= ch->spill_max) {
    pthread_mutex_unlock(&ch->mu);
    uint64_t written = 0;
    int rc = spill_write(ch, b, seq, &written, sync);
    pthread_mutex_lock(&ch->mu);
    if (rc == 0) {
      ch->disk_batches++;
      ch->disk_bytes += written;
      ch->st.spilled_total++;
      recycle_locked(ch, b);
      return;
    }
    snprintf(ch->st.last_error, sizeof ch->st.last_error,
             "cannot write spill file in %s: %s (batch dropped)", ch->spill_dir, strerror(errno));
    ch->st.errors++;
  } else {
    snprintf(ch->st.last_error, sizeof ch->st.last_error,
             "spill directory %s is full (--clickhouse-spill): batch of %llu rows dropped",
             ch->spill_dir, (unsigned long long)b->total_rows);
  }
  ch->st.rows_dropped += b->total_rows;
  tmk_relay__log(ch->log, TMK_LOG_WARN, "clickhouse: %s", ch->st.last_error);
  batch_free(b);
}

/* Caller holds mu. Takes the memory queue's head (not NULL). */
static batch* queue_pop_locked(tmk__ch* ch) {
  batch* b = ch->q_head;
  ch->q_head = b->next;
  if (!ch->q_head) ch->q_tail = NULL;
  ch->q_bytes -= b->bytes;
  ch->q_batches--;
  return b;
}

/* Caller holds mu. Sender `slot` lets go of its spill file (sent, kept for later, or gone). */
static void spill_unclaim_locked(tmk__ch* ch, int slot) {
  if (!ch->claim[slot][0]) return;
  ch->claim[slot][0] = 0;
  ch->nclaimed--;
}

static uint64_t file_size(const char* path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* Caller holds mu. Sender `slot`'s spill file, of sz bytes, no longer waits (sent, or .bad). */
static void spill_forget_locked(tmk__ch* ch, int slot, uint64_t sz) {
  spill_unclaim_locked(ch, slot);
  ch->disk_batches--;
  ch->disk_bytes -= sz < ch->disk_bytes ? sz : ch->disk_bytes;
}

/* Sender `slot` claims the oldest spill file no other sender has claimed: its path in `path`.
 * Returns 0 when there is none. The directory is listed without the lock (the loop takes it). */
static int spill_claim(tmk__ch* ch, int slot, char* path, size_t cap) {
  struct dirent** list = NULL;
  int n = scandir(ch->spill_dir, &list, spill_filter, alphasort), got = 0;
  path[0] = 0;
  pthread_mutex_lock(&ch->mu);
  for (int i = 0; i < n && !got; i++) {
    int taken = 0;
    for (uint32_t k = 0; k < ch->senders; k++)
      if ((int)k != slot && strcmp(ch->claim[k], list[i]->d_name) == 0) taken = 1;
    size_t len = strlen(list[i]->d_name);
    if (taken || len >= sizeof ch->claim[slot]) continue;
    snprintf(path, cap, "%s/%s", ch->spill_dir, list[i]->d_name);
    /* another sender may have sent and deleted it since the listing (it deletes under mu) */
    if (access(path, F_OK) != 0) continue;
    memcpy(ch->claim[slot], list[i]->d_name, len + 1);
    ch->nclaimed++;
    got = 1;
  }
  pthread_mutex_unlock(&ch->mu);
  for (int i = 0; i < n; i++) free(list[i]);
  free(list);
  return got;
}

/* Caller holds mu. A request failed: ClickHouse is away, every sender backs off. */
static void went_down_locked(tmk__ch* ch, const char* err) {
  snprintf(ch->st.last_error, sizeof ch->st.last_error, "%s", err);
  ch->st.errors++;
  ch->st.up = 0;
  if (ch->was_up != 0)
    tmk_relay__log(ch->log, TMK_LOG_WARN, "clickhouse: %s; spilling to %s and retrying", err,
                   ch->spill_dir);
  ch->was_up = 0;
  ch->backoff = ch->backoff ? (ch->backoff * 2 > 5000 ? 5000 : ch->backoff * 2) : 250;
  ch->retry_ms = tmk__now_ms() + ch->backoff;
}

/* One of ch->senders threads. Each takes the next batch (a spill file no other sender holds,
 * oldest first, else the memory queue's head) and sends it, so up to `senders` INSERTs run at
 * once: a single INSERT keeps one of ClickHouse's cores busy (docs/SCALE.md). */
static void* sink_main(void* arg) {
  tmk__ch* ch = ((sender*)arg)->ch;
  const int slot = ((sender*)arg)->slot;
  char err[256];
  tmk__name_thread("tmk-ch-send");
  pthread_mutex_lock(&ch->mu);
  for (;;) {
    int stopping = ch->stop;
    uint64_t now = tmk__now_ms();
    if (stopping && now >= ch->drain_deadline_ms) break;
    int on_disk = ch->disk_batches > ch->nclaimed;
    if (!ch->q_head && !on_disk) {
      if (stopping) break;
      tmk__cond_wait_ms(&ch->cv, &ch->mu, 200);
      continue;
    }
    if (now < ch->retry_ms) {
      /* ClickHouse is away: keep memory small and everything durable while waiting. */
      while (ch->q_head) spill_or_drop_locked(ch, queue_pop_locked(ch), 1);
      if (stopping) break;
      tmk__cond_wait_ms(&ch->cv, &ch->mu, ch->retry_ms - now);
      continue;
    }
    if (!ch->tables) {
      /* one sender creates the tables; the others wait for it */
      if (ch->tables_busy) {
        tmk__cond_wait_ms(&ch->cv, &ch->mu, 50);
        continue;
      }
      ch->tables_busy = 1;
      pthread_mutex_unlock(&ch->mu);
      int ok = ensure_tables(ch, err, sizeof err) == 0;
      pthread_mutex_lock(&ch->mu);
      ch->tables_busy = 0;
      ch->tables = ok;
      if (!ok) went_down_locked(ch, err);
      pthread_cond_broadcast(&ch->cv);
      continue;
    }
    batch* b = NULL;
    int from_disk = 0;
    char path[1100];
    if (on_disk) { /* spilled batches first (oldest first), then memory */
      pthread_mutex_unlock(&ch->mu);
      from_disk = spill_claim(ch, slot, path, sizeof path);
      pthread_mutex_lock(&ch->mu);
      if (!from_disk) {
        if (ch->nclaimed == 0) { /* the count was off (files removed by hand): trust the dir */
          ch->disk_batches = 0;
          ch->disk_bytes = 0;
        } else if (!ch->q_head) {
          tmk__cond_wait_ms(&ch->cv, &ch->mu, 50);
        }
        if (!ch->q_head) continue;
      }
    }
    if (!from_disk) {
      b = queue_pop_locked(ch);
      ch->sending++; /* still pending for GET /api/relay until sent or spilled */
    }
    pthread_mutex_unlock(&ch->mu);
    if (from_disk) {
      const char* why;
      b = spill_read(path, &why);
      if (!b) {
        uint64_t sz = file_size(path);
        char bad[1200];
        snprintf(bad, sizeof bad, "%s.bad", path);
        rename(path, bad);
        set_error(ch, "spill file %s %s; renamed to .bad", path,
                  why[0] ? why : "cannot be read");
        pthread_mutex_lock(&ch->mu);
        tmk_relay__log(ch->log, TMK_LOG_WARN, "clickhouse: %s", ch->st.last_error);
        spill_forget_locked(ch, slot, sz);
        continue;
      }
    }
    int ok = send_batch(ch, b, err, sizeof err) == 0;
    pthread_mutex_lock(&ch->mu);
    if (!from_disk) ch->sending--;
    if (ok) {
      ch->st.batches_sent++;
      if (from_disk) {
        uint64_t sz = file_size(b->path);
        unlink(b->path);
        spill_forget_locked(ch, slot, sz);
      }
      recycle_locked(ch, b);
      ch->st.up = 1;
      if (ch->was_up != 1)
        tmk_relay__log(ch->log, TMK_LOG_INFO, "clickhouse: connected to %s:%s", ch->ep.host,
                       ch->ep.port);
      ch->was_up = 1;
      ch->backoff = 0;
      ch->retry_ms = 0;
    } else {
      went_down_locked(ch, err);
      if (!from_disk) {
        /* Tables already accepted are not in the spill file (send_batch marked them done). */
        spill_or_drop_locked(ch, b, 1);
      } else {
        /* Keep the file; tables accepted before the failure will be resent and collapse. */
        spill_unclaim_locked(ch, slot);
        batch_free(b);
      }
    }
  }
  /* Whatever is still in memory goes to disk for the next run. */
  while (ch->q_head) spill_or_drop_locked(ch, queue_pop_locked(ch), 1);
  pthread_cond_broadcast(&ch->cv); /* the others may be waiting for a queue this one emptied */
  pthread_mutex_unlock(&ch->mu);
  return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Loop side: staging and sealing
 * ------------------------------------------------------------------------------------------- */
static batch* stage(tmk__ch* ch) {
  if (!ch->stage) {
    pthread_mutex_lock(&ch->mu);
    batch* b = ch->pool;
    if (b) {
      ch->pool = b->next;
      ch->keep_bytes -= b->held;
      b->next = NULL;
    }
    pthread_mutex_unlock(&ch->mu);
    ch->stage = b ? b : calloc(1, sizeof *ch->stage);
    if (!ch->stage) return NULL;
    ch->stage->first_ms = tmk__now_ms();
    /* the sessions of the batch before, in id order: while the same sessions go on, the rank
     * bytes the taps write are the ranks, and the sender need not rewrite them (zone_order) */
    memcpy(ch->stage->rsid, ch->seed, ch->nseed * sizeof ch->seed[0]);
    memset(ch->stage->seen, 0, sizeof ch->stage->seen);
    ch->stage->nrs = ch->nseed;
    ch->stage->last_rs = 0;
    /* room for a full batch of zone runs up front: no reallocs (untouched pages cost nothing) */
    if (!ch->stage->seg[T_ZONE_RUNS12].cap)
      buf_map(&ch->stage->seg[T_ZONE_RUNS12], ch->batch_bytes + 65536,
              ch->queue_max >= HUGE_STAGING);
  }
  return ch->stage;
}

/* [loop] The sessions that had zone runs in b, in id order, for the next batch (stage). */
static void note_sessions(tmk__ch* ch, const batch* b) {
  if (!b->by_arrival) return;
  uint32_t n = 0;
  for (uint32_t k = 0; k < b->nrs; k++)
    if (b->seen[k]) ch->seed[n++] = b->rsid[k];
  qsort(ch->seed, n, sizeof ch->seed[0], u64_cmp);
  ch->nseed = n;
}

/* [loop] Hands a sealed batch (no longer ch->stage) to the senders' queue, or to disk. */
static void hand_over(tmk__ch* ch, batch* b) {
  b->bytes = batch_bytes(b);
  int oom = 0;
  for (int t = 0; t < T_COUNT; t++) oom |= b->seg[t].oom;
  pthread_mutex_lock(&ch->mu);
  if (oom) {
    ch->st.rows_dropped += b->total_rows;
    snprintf(ch->st.last_error, sizeof ch->st.last_error, "out of memory staging a batch");
    batch_free(b);
  } else if (b->total_rows == 0) {
    recycle_locked(ch, b); /* staged and left empty (a batch begun just as a burst ended) */
  } else if (ch->q_bytes + b->bytes <= ch->queue_max) {
    if (ch->q_tail) ch->q_tail->next = b;
    else ch->q_head = b;
    ch->q_tail = b;
    ch->q_bytes += b->bytes;
    ch->q_batches++;
    pthread_cond_signal(&ch->cv);
  } else {
    /* The thread is behind (ClickHouse slow): this batch waits on disk instead. */
    spill_or_drop_locked(ch, b, 0);
    pthread_cond_signal(&ch->cv);
  }
  pthread_mutex_unlock(&ch->mu);
}

static void seal(tmk__ch* ch) {
  batch* b = ch->stage;
  if (!b) return;
  note_sessions(ch, b);
  ch->stage = NULL;
  hand_over(ch, b);
}

/* [loop] Seals a batch whose zones are full. Rows of the other tables younger than batch_ms
 * move on to the next batch instead: each INSERT makes a part in its table (files to create,
 * parts to merge: most of ClickHouse's work per batch for tables this small), so they go at
 * most every batch_ms, as zones would without the size bound, not with every zone batch. */
static void seal_zones(tmk__ch* ch) {
  batch* b = ch->stage;
  if (!b) return;
  uint64_t first = b->first_ms;
  if (tmk__now_ms() - first >= ch->batch_ms) {
    seal(ch);
    return;
  }
  note_sessions(ch, b); /* before the next batch is staged, which starts from them */
  ch->stage = NULL;
  batch* nb = stage(ch);
  if (!nb) {
    hand_over(ch, b);
    return;
  }
  for (int t = 0; t < T_COUNT; t++) {
    if (t == T_ZONES || run_rec(t) || !b->rows[t]) continue;
    chbuf tmp = nb->seg[t];
    nb->seg[t] = b->seg[t];
    b->seg[t] = tmp;
    nb->rows[t] = b->rows[t];
    nb->total_rows += b->rows[t];
    b->total_rows -= b->rows[t];
    b->rows[t] = 0;
  }
  nb->first_ms = first;
  hand_over(ch, b); /* nb stays staged (stage set it) */
}

static inline batch* row(tmk__ch* ch, int table) {
  batch* b = stage(ch);
  if (!b) return NULL;
  b->rows[table]++;
  b->total_rows++;
  return b;
}

static inline void after_row(tmk__ch* ch, batch* b, int table) {
  if (b->seg[table].len >= ch->batch_bytes) seal(ch);
}

/* [loop] The index of session sid among the batch's sessions in the order they came; 255 when
 * 255 others came first (such runs are sent with rank 255: not sorted, still right). */
static inline uint8_t arrival_index(batch* b, uint64_t sid) {
  b->by_arrival = 1;
  if (b->nrs && b->rsid[b->last_rs] == sid) { /* runs come in streaks */
    b->seen[b->last_rs] = 1;
    return (uint8_t)b->last_rs;
  }
  for (uint32_t k = 0; k < b->nrs; k++)
    if (b->rsid[k] == sid) {
      b->seen[k] = 1;
      return (uint8_t)(b->last_rs = k);
    }
  if (b->nrs == 255) return 255;
  b->rsid[b->nrs] = sid;
  b->seen[b->nrs] = 1;
  return (uint8_t)(b->last_rs = b->nrs++);
}

/* [loop] Notes where a staged run's rank byte is (zone_order). */
static inline void note_run(batch* b, size_t off) {
  if (b->nroff == b->croff || off > UINT32_MAX) {
    if (b->roff_oom) return;
    uint32_t nc = b->croff ? b->croff * 2 : 1024;
    uint32_t* n = off > UINT32_MAX ? NULL : realloc(b->roff, nc * sizeof *n);
    if (!n) {
      b->roff_oom = 1;
      return;
    }
    b->roff = n;
    b->croff = nc;
  }
  b->roff[b->nroff++] = (uint32_t)off;
}

/* [loop] A run of zones of one thread: a zone_runs12 row (header + the store's narrow records,
 * one memcpy) when its ticks are ns, else (another timer, or the store's rare wide records)
 * zones rows converted here. */
static void tap_zones(void* ud, uint32_t thread, uint64_t base, uint64_t freq, const void* recs,
                      uint32_t n, uint32_t rec) {
  tmk__ch_sess* cs = ud;
  tmk__ch* ch = cs->ch;
  batch* b = stage(ch);
  if (!b || n == 0) return;
  uint64_t n0 = cs->zones;
  cs->zones += n;
  b->total_rows += n;
  if (run_exact(freq) && rec == sizeof(tmk__tap_nrec)) {
    b->rows[T_ZONE_RUNS12] += n;
    chbuf* o = &b->seg[T_ZONE_RUNS12];
    size_t rec_bytes = (size_t)n * rec;
    buf_populate(o, RUN_HEAD + rec_bytes);
    if (buf_room(o, RUN_HEAD + rec_bytes)) { /* else counted as dropped when sealed */
      uint8_t* p = o->p + o->len;
      memcpy(p, &cs->day, 2);
      memcpy(p + 2, &cs->sid, 8);
      p[10] = arrival_index(b, cs->sid); /* made the rank when sent (zone_order) */
      note_run(b, o->len + 10);
      memcpy(p + 11, &thread, 4);
      memcpy(p + 15, &n0, 8);
      memcpy(p + 23, &base, 8);
      p += RUN_FIXED;
      uint32_t x = n;
      for (; x > 0x7f; x >>= 7) *p++ = (uint8_t)(x | 0x80);
      *p++ = (uint8_t)x;
      memcpy(p, recs, rec_bytes);
      o->len = (size_t)(p + rec_bytes - o->p);
    }
  } else {
    b->rows[T_ZONES] += n;
    chbuf* o = &b->seg[T_ZONES];
    if (buf_room(o, (size_t)n * ZONE_ROW)) {
      const uint8_t* r = recs;
      for (uint32_t k = 0; k < n; k++, r += rec, o->len += ZONE_ROW) {
        const tmk__tap_zone z = tmk__tap_read(r, rec);
        put_zone_row(o->p + o->len, cs->day, cs->sid, thread, base, freq, &z, n0 + k);
      }
    }
  }
  if (batch_zones(b) * ZONE_ROW >= ch->batch_bytes ||
      b->seg[T_ZONE_RUNS12].len >= ch->batch_bytes || b->seg[T_ZONES].len >= ch->batch_bytes)
    seal_zones(ch);
}

static uint64_t frame_dur(tmk__ch_sess* cs, uint32_t thread, uint32_t site, uint64_t t) {
  uint32_t h = (thread * 31u + site) % FRAME_SLOTS;
  for (uint32_t k = 0; k < FRAME_SLOTS; k++) {
    uint32_t i = (h + k) % FRAME_SLOTS;
    if (!cs->fr[i].used) {
      cs->fr[i].used = 1;
      cs->fr[i].thread = thread;
      cs->fr[i].site = site;
      cs->fr[i].last_ns = t;
      return 0;
    }
    if (cs->fr[i].thread == thread && cs->fr[i].site == site) {
      uint64_t d = t > cs->fr[i].last_ns ? t - cs->fr[i].last_ns : 0;
      cs->fr[i].last_ns = t;
      return d;
    }
  }
  return 0; /* more frame sequences than slots: no duration */
}

/* [loop] A frames, plots or messages row: its size known up front, one room check, then the
 * fields written through a local pointer (a put per field reloaded the buffer's fields from
 * memory after every store into it). */
static void tap_event(void* ud, const tmk_relay_event* e) {
  tmk__ch_sess* cs = ud;
  tmk__ch* ch = cs->ch;
  int t = e->type == TMK_RELAY_EV_FRAME ? T_FRAMES
          : e->type == TMK_RELAY_EV_PLOT  ? T_PLOTS
          : e->type == TMK_RELAY_EV_MESSAGE ? T_MESSAGES
                                            : -1;
  if (t < 0) return;
  batch* b = row(ch, t);
  if (!b) return;
  chbuf* o = &b->seg[t];
  const size_t text_len = t == T_MESSAGES && e->text ? e->text_len : 0;
  /* day, session, n, thread, site, time_ns; then dur_ns, value, or severity, verbosity, text */
  const uint64_t n = t == T_FRAMES ? cs->frames++ : t == T_PLOTS ? cs->plots++ : cs->messages++;
  const uint64_t dur = t == T_FRAMES ? frame_dur(cs, e->thread, e->site, e->time_ns) : 0;
  if (buf_room(o, 34 + (t == T_MESSAGES ? 5 + 10 + text_len : 8))) { /* else oom: dropped */
    uint8_t* q = o->p + o->len;
    memcpy(q, &cs->day, 2);
    memcpy(q + 2, &cs->sid, 8);
    memcpy(q + 10, &n, 8);
    memcpy(q + 18, &e->thread, 4);
    memcpy(q + 22, &e->site, 4);
    memcpy(q + 26, &e->time_ns, 8);
    q += 34;
    if (t == T_FRAMES) {
      memcpy(q, &dur, 8);
      q += 8;
    } else if (t == T_PLOTS) {
      const double v = e->is_double ? e->d : (double)e->i;
      memcpy(q, &v, 8);
      q += 8;
    } else {
      *q++ = e->severity;
      memcpy(q, &e->verbosity, 4);
      q += 4;
      uint64_t x = text_len; /* String: LEB128 length, then the bytes */
      for (; x > 0x7f; x >>= 7) *q++ = (uint8_t)(x | 0x80);
      *q++ = (uint8_t)x;
      if (text_len) memcpy(q, e->text, text_len);
      q += text_len;
    }
    o->len = (size_t)(q - o->p);
  }
  after_row(ch, b, t);
}

static void tap_site(void* ud, const tmk_relay_site* s) {
  tmk__ch_sess* cs = ud;
  batch* b = row(cs->ch, T_SITES);
  if (!b) return;
  chbuf* o = &b->seg[T_SITES];
  put_u16(o, cs->day);
  put_u64(o, cs->sid);
  put_u32(o, s->id);
  put_u8(o, s->kind);
  put_u8(o, s->severity);
  put_cstr(o, s->name);
  put_cstr(o, s->file);
  put_u32(o, s->line);
  put_u32(o, s->color);
  after_row(cs->ch, b, T_SITES);
}

static void tap_thread(void* ud, uint32_t thread, const char* name, uint32_t len) {
  tmk__ch_sess* cs = ud;
  batch* b = row(cs->ch, T_THREADS);
  if (!b) return;
  chbuf* o = &b->seg[T_THREADS];
  put_u16(o, cs->day);
  put_u64(o, cs->sid);
  put_u32(o, thread);
  put_str(o, name, len);
  after_row(cs->ch, b, T_THREADS);
}

int tmk__ch_session_attach(tmk__ch* ch, tmk__session* s) {
  tmk__ch_sess* cs = calloc(1, sizeof *cs);
  if (!cs) return TMK_ENOMEM;
  cs->ch = ch;
  cs->sid = s->sid;
  cs->day = (uint16_t)(s->info.created_unix_ns / 1000000000ull / 86400ull);
  tmk__store_tap tap = {tap_zones, tap_event, tap_site, tap_thread, cs};
  pthread_mutex_lock(&s->mu);
  s->ch = cs;
  tmk__store_set_tap(s->store, &tap);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

void tmk__ch_sess_free(tmk__ch_sess* cs) { free(cs); }

/* [loop] Writes a sessions row when the session's facts or counters changed since the last. */
static void session_row(tmk__ch* ch, tmk__session* s, int force) {
  tmk__ch_sess* cs = s->ch;
  if (!cs) return;
  pthread_mutex_lock(&s->mu);
  tmk_relay_session_info in = s->info;
  tmk__store_fill_info(s->store, &in);
  pthread_mutex_unlock(&s->mu);
  if (!in.has_hello) return; /* the sort key (program, build) is known only from HELLO */
  uint64_t now[12] = {cs->zones,        cs->frames,        cs->plots,
                      cs->messages,     in.stats.lost,     in.stats.dropped_by_agent,
                      in.first_ns,      in.last_ns,        (uint64_t)in.live,
                      in.clock_unix_ns, in.timer_freq,     (uint64_t)in.caps};
  if (cs->emitted && memcmp(now, cs->last, sizeof now) == 0 && !force) return;
  cs->emitted = 1;
  memcpy(cs->last, now, sizeof now);
  batch* b = row(ch, T_SESSIONS);
  if (!b) return;
  chbuf* o = &b->seg[T_SESSIONS];
  put_u16(o, cs->day);
  put_u64(o, cs->sid);
  put_cstr(o, ch->relay_name);
  put_cstr(o, in.program);
  put_cstr(o, in.build);
  put_cstr(o, in.label);
  put_cstr(o, in.platform);
  put_cstr(o, in.arch);
  put_cstr(o, in.agent_version);
  put_cstr(o, in.transport);
  put_cstr(o, in.source);
  put_u64(o, in.created_unix_ns);
  put_u64(o, in.timer_freq);
  put_u64(o, in.clock_ns);
  put_u64(o, in.clock_unix_ns);
  put_u64(o, in.first_ns);
  put_u64(o, in.last_ns);
  put_u64(o, cs->zones);
  put_u64(o, cs->frames);
  put_u64(o, cs->plots);
  put_u64(o, cs->messages);
  put_u64(o, in.stats.lost);
  put_u64(o, in.stats.dropped_by_agent);
  put_u8(o, (uint8_t)(in.live ? 1 : 0));
  put_u64(o, tmk__unix_ns()); /* version: the newest row wins */
  after_row(ch, b, T_SESSIONS);
}

void tmk__ch_session_final(tmk__ch* ch, tmk__session* s) { session_row(ch, s, 0); }

void tmk__ch_tick(tmk__ch* ch, tmk_relay* r, uint64_t now_ms) {
  if (now_ms - ch->last_rows_ms >= 1000) {
    ch->last_rows_ms = now_ms;
    for (uint32_t i = 0; i < r->nsessions; i++) session_row(ch, r->sessions[i], 0);
  }
  if (ch->stage && tmk__now_ms() - ch->stage->first_ms >= ch->batch_ms) seal(ch);
}

void tmk__ch_shutdown(tmk__ch* ch, tmk_relay* r, uint32_t drain_ms) {
  for (uint32_t i = 0; i < r->nsessions; i++) session_row(ch, r->sessions[i], 0);
  seal(ch);
  pthread_mutex_lock(&ch->mu);
  ch->stop = 1;
  ch->drain_deadline_ms = tmk__now_ms() + drain_ms;
  pthread_cond_broadcast(&ch->cv);
  pthread_mutex_unlock(&ch->mu);
}

/* ---------------------------------------------------------------------------------------------
 * Lifecycle and counters
 * ------------------------------------------------------------------------------------------- */
static int mkdir_p(const char* path) {
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char* p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

tmk__ch* tmk__ch_new(const tmk__ch_desc* d, char* err, size_t ecap) {
  const uint16_t one = 1;
  if (*(const uint8_t*)&one != 1) {
    snprintf(err, ecap, "the ClickHouse sink needs a little-endian relay host");
    return NULL;
  }
  if (tmk__ch_check_url(d->url, err, ecap)) return NULL;
  tmk__ch* ch = calloc(1, sizeof *ch);
  if (!ch) {
    snprintf(err, ecap, "out of memory");
    return NULL;
  }
  tmk__ch_parse_url(d->url, &ch->ep);
  snprintf(ch->spill_dir, sizeof ch->spill_dir, "%s", d->spill_dir);
  ch->log = d->log;
  ch->spill_max = d->spill_max ? d->spill_max : (1ull << 30);
  ch->queue_max = d->queue_max ? d->queue_max : (128ull << 20);
  ch->batch_bytes = d->batch_bytes ? d->batch_bytes : (16u << 20);
  ch->batch_ms = d->batch_ms ? d->batch_ms : 500;
  ch->senders = d->senders ? d->senders : TMK__CH_SENDERS_DEFAULT;
  if (ch->senders > TMK__CH_SENDERS_MAX) ch->senders = TMK__CH_SENDERS_MAX;
  ch->ep.timeout_ms = d->timeout_ms ? d->timeout_ms : 10000;
  if (d->relay_name) snprintf(ch->relay_name, sizeof ch->relay_name, "%s", d->relay_name);
  else if (gethostname(ch->relay_name, sizeof ch->relay_name) != 0)
    snprintf(ch->relay_name, sizeof ch->relay_name, "relay");
  ch->relay_name[sizeof ch->relay_name - 1] = 0;
  if (mkdir_p(ch->spill_dir) != 0) {
    snprintf(err, ecap, "cannot create the ClickHouse spill directory %s: %s", ch->spill_dir,
             strerror(errno));
    free(ch);
    return NULL;
  }
  pthread_mutex_init(&ch->mu, NULL);
  pthread_cond_init(&ch->cv, NULL);
  spill_scan(ch);
  if (ch->disk_batches)
    tmk_relay__log(ch->log, TMK_LOG_INFO, "clickhouse: %llu spilled batches from an earlier run will be sent",
             (unsigned long long)ch->disk_batches);
  ch->was_up = -1;
  for (uint32_t i = 0; i < ch->senders; i++) {
    ch->sd[i].ch = ch;
    ch->sd[i].slot = (int)i;
    if (pthread_create(&ch->thread[i], NULL, sink_main, &ch->sd[i]) != 0) {
      snprintf(err, ecap, "cannot start the ClickHouse sink's threads");
      tmk__ch_free(ch);
      return NULL;
    }
    ch->threads_started++;
  }
  return ch;
}

void tmk__ch_free(tmk__ch* ch) {
  if (!ch) return;
  if (ch->threads_started) {
    pthread_mutex_lock(&ch->mu);
    if (!ch->stop) {
      ch->stop = 1;
      ch->drain_deadline_ms = tmk__now_ms();
    }
    pthread_cond_broadcast(&ch->cv);
    pthread_mutex_unlock(&ch->mu);
    for (uint32_t i = 0; i < ch->threads_started; i++) pthread_join(ch->thread[i], NULL);
  }
  batch_free(ch->stage);
  while (ch->pool) {
    batch* b = ch->pool;
    ch->pool = b->next;
    batch_free(b);
  }
  pthread_mutex_destroy(&ch->mu);
  pthread_cond_destroy(&ch->cv);
  free(ch);
}

void tmk__ch_get_stats(tmk__ch* ch, tmk__ch_stats* out) {
  pthread_mutex_lock(&ch->mu);
  *out = ch->st;
  out->batches_queued = ch->q_batches + (uint64_t)ch->sending;
  out->batches_spilled = ch->disk_batches;
  out->spill_bytes = ch->disk_bytes;
  out->staging_kept_bytes = ch->keep_bytes;
  out->staging_kept_max = ch->queue_max;
  pthread_mutex_unlock(&ch->mu);
}

void tmk__ch_json_stats(tmk__ch* ch, tmk__json* j) {
  tmk__ch_stats s;
  tmk__ch_get_stats(ch, &s);
  tmk__json_begin_obj(j);
  tmk__json_key(j, "host");
  char hp[160];
  snprintf(hp, sizeof hp, "%s:%s", ch->ep.host, ch->ep.port);
  tmk__json_cstr(j, hp);
  tmk__json_key(j, "database");
  tmk__json_cstr(j, ch->ep.db);
  tmk__json_key(j, "up");
  tmk__json_bool(j, s.up);
  tmk__json_key(j, "rows_sent");
  tmk__json_u64(j, s.rows_sent);
  tmk__json_key(j, "batches_sent");
  tmk__json_u64(j, s.batches_sent);
  tmk__json_key(j, "bytes_sent");
  tmk__json_u64(j, s.bytes_sent);
  tmk__json_key(j, "batches_pending");
  tmk__json_u64(j, s.batches_queued + s.batches_spilled);
  tmk__json_key(j, "batches_spilled");
  tmk__json_u64(j, s.batches_spilled);
  tmk__json_key(j, "spill_bytes");
  tmk__json_u64(j, s.spill_bytes);
  tmk__json_key(j, "spilled_total");
  tmk__json_u64(j, s.spilled_total);
  tmk__json_key(j, "errors");
  tmk__json_u64(j, s.errors);
  tmk__json_key(j, "rows_dropped");
  tmk__json_u64(j, s.rows_dropped);
  tmk__json_key(j, "staging_kept_bytes");
  tmk__json_u64(j, s.staging_kept_bytes);
  tmk__json_key(j, "staging_kept_max");
  tmk__json_u64(j, s.staging_kept_max);
  tmk__json_key(j, "history_running");
  tmk__json_u64(j, s.history_running);
  tmk__json_key(j, "history_refused");
  tmk__json_u64(j, s.history_refused);
  tmk__json_key(j, "last_error");
  tmk__json_cstr(j, s.last_error);
  tmk__json_end_obj(j);
}

int tmk__ch_history_begin(tmk__ch* ch) {
  pthread_mutex_lock(&ch->mu);
  const int ok = ch->st.history_running < TMK__CH_HISTORY_MAX;
  if (ok) {
    ch->st.history_running++;
  } else {
    ch->st.history_refused++;
    const uint64_t now = tmk__now_ms();
    if (ch->hist_logged_ms == 0 || now - ch->hist_logged_ms >= 10000) {
      ch->hist_logged_ms = now;
      tmk_relay__log(ch->log, TMK_LOG_WARN,
                     "history: a query refused (503): %d, the most at once, are waiting for "
                     "ClickHouse (%llu refused so far)",
                     TMK__CH_HISTORY_MAX, (unsigned long long)ch->st.history_refused);
    }
  }
  pthread_mutex_unlock(&ch->mu);
  return ok ? 0 : -1;
}

void tmk__ch_history_end(tmk__ch* ch) {
  pthread_mutex_lock(&ch->mu);
  ch->st.history_running--;
  pthread_mutex_unlock(&ch->mu);
}
