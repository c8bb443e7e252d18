/* relay_stream.c — the dashboard's live stream: one WebSocket per browser at /api/stream, each
 * with its own sender thread, subscription and filters (session, threads, severity, team mask)
 * applied here before sending. Binary format: docs/API.md, "Live stream". A slow browser only
 * blocks its own thread; the relay's live ring skips for it and it gets a coalesced backfill. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <civetweb.h>
#include <dirent.h>
#include <jansson.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tmk_relay.h"
#include "relay_core.h" /* tmk__name_thread */
#include "relay_stream.h"
#include "tmk_proto.h"

/* ============================================================================================
 * Tunables
 * ============================================================================================ */
#define WS_BATCH_MIN_MS 10          /* at most one message per client per 10 ms */
#define WS_IDLE_WAIT_MS 100         /* wake at least this often (session end, stats) */
#define WS_LIVE_CHUNK 4096          /* live items copied per tmk_relay_live_read */
#define WS_MSG_SOFT_MAX (256 * 1024) /* a message is sent once it reaches this size */
#define WS_HISTORY_DEFAULT_S 30     /* live sessions: seconds of history sent on subscribe */
#define WS_HISTORY_MAX_ZONES 4000000 /* zones sent as history at most */
#define WS_QUERY_LIMIT 100000       /* items per query (bounds the session lock) */
#define WS_BACKFILL_PX 4000         /* a coalesced gap is backfilled at this many "pixels" */
#define WS_MAX_THREADS_FILTER 64
#define WS_IDLE_DEFAULT_MS 60000    /* a browser that sends nothing this long is closed */

enum { MSG_DATA = 1, MSG_RESET = 2 };
enum {
  REC_SITE = 0x01, REC_THREAD = 0x02, REC_TEAM = 0x03,
  REC_ZONES = 0x10, REC_ZONE_X = 0x11,
  REC_FRAME = 0x20, REC_PLOT = 0x21, REC_MESSAGE = 0x22, REC_MARKER = 0x23,
  REC_STATS = 0x30, REC_GAP = 0x31, REC_END = 0x32, REC_HISTORY_DONE = 0x33
};

/* ============================================================================================
 * Byte buffer with the stream's encodings
 * ============================================================================================ */
typedef struct buf {
  unsigned char* p;
  size_t n, cap;
  int oom;
} buf;

static void b_need(buf* b, size_t more) {
  if (b->n + more <= b->cap) return;
  size_t cap = b->cap ? b->cap * 2 : 4096;
  while (cap < b->n + more) cap *= 2;
  unsigned char* q = realloc(b->p, cap);
  if (!q) { b->oom = 1; return; }
  b->p = q;
  b->cap = cap;
}
static void b_u8(buf* b, unsigned v) {
  b_need(b, 1);
  if (b->oom) return;
  b->p[b->n++] = (unsigned char)v;
}
static void b_var(buf* b, uint64_t v) { /* LEB128, protocol/'s codec */
  b_need(b, 10);
  if (b->oom) return;
  b->n += (size_t)tmk_proto_varint_put(b->p + b->n, v);
}
static void b_svar(buf* b, int64_t v) { b_var(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }
static void b_bytes(buf* b, const void* s, size_t n) {
  if (!n) return; /* s may be NULL (an empty buffer): memcpy must not see it */
  b_need(b, n);
  if (b->oom) return;
  memcpy(b->p + b->n, s, n);
  b->n += n;
}
static void b_str(buf* b, const char* s, size_t n) { b_var(b, n); b_bytes(b, s, n); }
static void b_f64(buf* b, double d) {
  uint64_t u;
  unsigned char o[8];
  memcpy(&u, &d, 8);
  for (int i = 0; i < 8; i++) o[i] = (unsigned char)(u >> (8 * i));
  b_bytes(b, o, 8);
}

/* ============================================================================================
 * Per-client state
 * ============================================================================================ */
typedef struct sub {
  char session[TMK_RELAY_ID_MAX];
  int level;          /* 0..5: zones/messages/plots of a more verbose severity are not sent */
  uint32_t mask;      /* team bits: a call site with none of them is not sent */
  int nthreads;       /* 0 = all threads */
  uint32_t threads[WS_MAX_THREADS_FILTER];
  double history_s;   /* live sessions: seconds of history; recordings: everything */
  uint64_t window;    /* flow control: live data stops while more than this many bytes are
                         unacknowledged (0 = off, the browser never acks) */
  int has_seq;        /* the browser numbered this subscription: echo it before its RESET */
  uint64_t seq;
} sub;

typedef struct site_ent {
  uint8_t known, sent, severity, kind;
  uint32_t verbosity;
} site_ent;
typedef struct site_slot { /* open addressing by site id; id 0 = empty (SITE ids are > 0) */
  uint32_t id;
  site_ent e;
} site_slot;
#define WS_MAX_SITES 65536 /* the store keeps no more either */

typedef struct tmk__stream tmk__stream;

typedef struct client {
  struct mg_connection* conn;
  int fd;               /* the connection's socket (find_socket), -1 if not found */
  uint64_t last_rx_ms;  /* when the browser last sent a frame (guarded by mu) */
  int idle_closed;      /* the sender shut the socket down for idleness */
  tmk_relay* r;
  tmk__stream* st;
  pthread_t thread;
  int started;
  pthread_mutex_t mu;   /* guards stop, sub_next, has_sub_next */
  pthread_mutex_t wmu;  /* serialises writes (sender thread and error replies) */
  int stop;
  int has_sub_next;
  sub sub_next;
  int dead;             /* a write failed (guarded by wmu) */
  uint64_t sent;        /* binary bytes sent since the last RESET (guarded by wmu) */
  uint64_t acked;       /* bytes the browser says it has processed (guarded by mu) */
  struct client* next;
  /* sender-thread state */
  sub cur;
  int subscribed, attached;
  uint64_t cursor;
  int64_t origin;       /* ns subtracted from every time sent */
  int origin_set;
  site_slot* sites;    /* the session's call sites this browser knows: a hash table, so its */
  uint32_t nsites;     /* memory follows the number of sites, not the largest id (issue 15 */
  uint32_t sites_cap;  /* item 5: one site id of 4,194,304 cost every browser 64 MB) */
  uint32_t threads_seen, teams_seen_hash;
  int was_live;
  int64_t last_t;       /* latest time sent (relative) */
  buf out;              /* current message */
  tmk_relay_live_item* items; /* live_read buffer */
  char text[TMK_PROTO_MAX_STRING]; /* whole_text: a live message's whole text */
  tmk_relay_event text_event;
  int64_t out_base;
  int zones_open;       /* a REC_ZONES record is being filled */
  size_t zones_count_at; /* offset of the count placeholder */
  uint32_t zones_thread, zones_count;
  int64_t zones_prev;
} client;

/* The stream of one relay: its clients, the wake-up generation and the counters. */
struct tmk__stream {
  tmk_relay* r;
  tmk__stream_auth_fn authorize;
  void* auth_ud;
  pthread_mutex_t mu; /* guards clients, gen, stats */
  pthread_cond_t cv;
  uint64_t gen;
  client* clients;
  unsigned admitted;  /* connections ws_connect let in and ws_close has not seen go */
  uint32_t idle_ms;   /* immutable after tmk__stream_new */
  tmk_relay_stream_stats stats;
  char team_override[32][64]; /* immutable after tmk__stream_new */
};

int tmk__stream_full(tmk__stream* st) {
  pthread_mutex_lock(&st->mu);
  int full = st->admitted >= TMK__STREAM_MAX_CLIENTS;
  pthread_mutex_unlock(&st->mu);
  return full;
}

tmk__stream* tmk__stream_new(const char* const team_names[32], uint32_t idle_ms) {
  tmk__stream* st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->idle_ms = idle_ms ? idle_ms : WS_IDLE_DEFAULT_MS;
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->cv, NULL);
  for (int i = 0; i < 32; i++)
    snprintf(st->team_override[i], sizeof st->team_override[i], "%s",
             team_names && team_names[i] ? team_names[i] : "");
  return st;
}

void tmk__stream_free(tmk__stream* st) {
  if (!st) return;
  pthread_mutex_destroy(&st->mu);
  pthread_cond_destroy(&st->cv);
  free(st);
}

void tmk__stream_get_stats(tmk__stream* st, tmk_relay_stream_stats* out) {
  pthread_mutex_lock(&st->mu);
  *out = st->stats;
  pthread_mutex_unlock(&st->mu);
}

/* Called by the relay's loop after each decoded batch: wakes every sender. Never blocks long. */
static void on_data(void* ud) {
  tmk__stream* st = ud;
  pthread_mutex_lock(&st->mu);
  st->gen++;
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ============================================================================================
 * Sending
 * ============================================================================================ */
static int ws_send(client* c, int opcode, const void* p, size_t n) {
  pthread_mutex_lock(&c->wmu);
  int rc = c->dead ? -1 : mg_websocket_write(c->conn, opcode, (const char*)p, n);
  if (rc <= 0) c->dead = 1;
  else if (opcode == MG_WEBSOCKET_OPCODE_BINARY) c->sent += n;
  pthread_mutex_unlock(&c->wmu);
  if (rc <= 0) return -1;
  pthread_mutex_lock(&c->st->mu);
  c->st->stats.messages++;
  c->st->stats.bytes += n;
  pthread_mutex_unlock(&c->st->mu);
  return 0;
}
static void send_text(client* c, const char* json) {
  ws_send(c, MG_WEBSOCKET_OPCODE_TEXT, json, strlen(json));
}

static void msg_begin(client* c, int type, int64_t base) {
  buf* b = &c->out;
  b->n = 0;
  b->oom = 0;
  b_u8(b, 'T');
  b_u8(b, 'W');
  b_u8(b, 1);
  b_u8(b, (unsigned)type);
  b_str(b, c->cur.session, strlen(c->cur.session));
  if (type == MSG_DATA) b_svar(b, base);
  c->out_base = base;
  c->zones_open = 0;
}
static void zones_close(client* c) {
  if (!c->zones_open) return;
  /* patch the 5-byte padded varint count */
  uint32_t v = c->zones_count;
  for (int i = 0; i < 5; i++) {
    unsigned char byte = (unsigned char)(v & 0x7f);
    v >>= 7;
    if (i < 4) byte |= 0x80;
    if (!c->out.oom) c->out.p[c->zones_count_at + (size_t)i] = byte;
  }
  c->zones_open = 0;
}
/* Header length of an empty DATA message, to tell whether anything was added. */
static size_t msg_header_len(client* c) {
  size_t idl = strlen(c->cur.session);
  buf t = {0};
  b_var(&t, idl);
  b_svar(&t, c->out_base);
  size_t n = 4 + t.n + idl;
  free(t.p);
  return n;
}
static int msg_flush(client* c) {
  zones_close(c);
  if (c->out.oom) { c->out.n = 0; c->out.oom = 0; return -1; }
  if (c->out.n <= msg_header_len(c)) return 0;
  int rc = ws_send(c, MG_WEBSOCKET_OPCODE_BINARY, c->out.p, c->out.n);
  c->out.n = 0;
  return rc;
}
/* Starts a new DATA message when the current one is big enough to go. */
static void msg_room(client* c, int64_t t) {
  if (c->out.n >= WS_MSG_SOFT_MAX) {
    msg_flush(c);
    msg_begin(c, MSG_DATA, t);
  } else if (c->out.n == 0) {
    msg_begin(c, MSG_DATA, t);
  }
}

/* ============================================================================================
 * Call sites, threads, teams
 * ============================================================================================ */
typedef struct site_ctx {
  client* c;
  buf* b;
} site_ctx;

static uint32_t site_hash(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  return x;
}
static site_ent* site_find(const client* c, uint32_t id) {
  if (!c->sites_cap || !id) return NULL;
  for (uint32_t h = site_hash(id) & (c->sites_cap - 1);; h = (h + 1) & (c->sites_cap - 1)) {
    if (c->sites[h].id == id) return &c->sites[h].e;
    if (!c->sites[h].id) return NULL;
  }
}
/* Returns the entry for id, adding it; NULL when the table is full or out of memory. */
static site_ent* site_add(client* c, uint32_t id) {
  site_ent* e = site_find(c, id);
  if (e || !id) return e;
  if (c->nsites >= WS_MAX_SITES) return NULL;
  if ((c->nsites + 1) * 2 > c->sites_cap) {
    uint32_t ncap = c->sites_cap ? c->sites_cap * 2 : 256;
    site_slot* ns = calloc(ncap, sizeof *ns);
    if (!ns) return NULL;
    for (uint32_t i = 0; i < c->sites_cap; i++) {
      if (!c->sites[i].id) continue;
      uint32_t h = site_hash(c->sites[i].id) & (ncap - 1);
      while (ns[h].id) h = (h + 1) & (ncap - 1);
      ns[h] = c->sites[i];
    }
    free(c->sites);
    c->sites = ns;
    c->sites_cap = ncap;
  }
  uint32_t h = site_hash(id) & (c->sites_cap - 1);
  while (c->sites[h].id) h = (h + 1) & (c->sites_cap - 1);
  c->sites[h].id = id;
  c->nsites++;
  return &c->sites[h].e;
}
static int site_cb(void* ud, const tmk_relay_site* s) {
  site_ctx* x = ud;
  client* c = x->c;
  site_ent* e = s->known ? site_add(c, s->id) : NULL;
  if (!e) return 0;
  e->known = 1;
  e->severity = s->severity;
  e->verbosity = s->verbosity;
  e->kind = s->kind;
  if (e->sent) return 0;
  e->sent = 1;
  buf* b = x->b;
  b_u8(b, REC_SITE);
  b_var(b, s->id);
  b_var(b, s->kind);
  b_var(b, s->severity);
  b_var(b, s->verbosity);
  b_var(b, s->color);
  b_var(b, s->line);
  b_str(b, s->name ? s->name : "", s->name ? strlen(s->name) : 0);
  b_str(b, s->file ? s->file : "", s->file ? strlen(s->file) : 0);
  return 0;
}
static int thread_cb(void* ud, uint32_t thread, const char* name) {
  buf* b = ud;
  b_u8(b, REC_THREAD);
  b_var(b, thread);
  b_str(b, name ? name : "", name ? strlen(name) : 0);
  return 0;
}
typedef struct team_ctx {
  buf* b;
  uint32_t hash;
  const tmk__stream* st;
} team_ctx;

static int team_cb(void* ud, uint32_t bit, const char* name) {
  team_ctx* t = ud;
  if (bit < 32 && t->st->team_override[bit][0]) return 0; /* sent from the override table */
  b_u8(t->b, REC_TEAM);
  b_var(t->b, bit);
  size_t n = name ? strlen(name) : 0;
  b_str(t->b, name ? name : "", n);
  t->hash = t->hash * 31u + bit + 1u;
  for (size_t i = 0; i < n; i++) t->hash = t->hash * 131u + (unsigned char)name[i];
  return 0;
}
/* Sends new call sites, and threads/teams when they changed. */
static void send_meta(client* c, int force) {
  tmk_relay_session_info info;
  if (tmk_relay_session(c->r, c->cur.session, &info) != 0) return;
  msg_room(c, c->last_t);
  zones_close(c); /* the records below must not land inside an open REC_ZONES record */
  site_ctx sx = {c, &c->out};
  tmk_relay_query_sites(c->r, c->cur.session, site_cb, &sx);
  if (force || info.threads != c->threads_seen) {
    c->threads_seen = info.threads;
    tmk_relay_query_threads(c->r, c->cur.session, thread_cb, &c->out);
  }
  buf tb = {0};
  team_ctx tc = {&tb, 7, c->st};
  tmk_relay_query_teams(c->r, c->cur.session, team_cb, &tc);
  for (uint32_t bit = 0; bit < 32; bit++) {
    if (!c->st->team_override[bit][0]) continue;
    tc.hash = tc.hash * 31u + bit + 1u;
    b_u8(&tb, REC_TEAM);
    b_var(&tb, bit);
    b_str(&tb, c->st->team_override[bit], strlen(c->st->team_override[bit]));
  }
  if (force || tc.hash != c->teams_seen_hash) {
    c->teams_seen_hash = tc.hash;
    if (!tb.oom) b_bytes(&c->out, tb.p, tb.n);
  }
  free(tb.p);
}
static const site_ent* site_of(client* c, uint32_t id) {
  const site_ent* e = site_find(c, id);
  if (e && e->known) return e;
  return NULL;
}
/* Filters: severity level, team mask (by the call site) and thread list. Unknown sites pass. */
static int pass_thread(const client* c, uint32_t thread) {
  if (!c->cur.nthreads) return 1;
  for (int i = 0; i < c->cur.nthreads; i++)
    if (c->cur.threads[i] == thread) return 1;
  return 0;
}
static int pass_site(client* c, uint32_t site) {
  const site_ent* s = site_of(c, site);
  if (!s) return 1;
  return s->severity <= c->cur.level && (s->verbosity & c->cur.mask) != 0;
}

/* ============================================================================================
 * Records
 * ============================================================================================ */
static int64_t rel(client* c, uint64_t t) {
  if (!c->origin_set) { c->origin = (int64_t)t; c->origin_set = 1; }
  return (int64_t)(t - (uint64_t)c->origin);
}
/* Differences and sums of relative times wrap (times come from agents: any 64-bit value) rather
 * than overflow, which C leaves undefined for signed integers; the bits sent are the same. */
static int64_t dsub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t dadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static void put_zone(client* c, const tmk_relay_zone* z) {
  if (!pass_thread(c, z->thread) || !pass_site(c, z->site)) return;
  int64_t t = rel(c, z->start_ns);
  msg_room(c, t);
  buf* b = &c->out;
  if (!c->zones_open || c->zones_thread != z->thread) {
    zones_close(c);
    b_u8(b, REC_ZONES);
    b_var(b, z->thread);
    c->zones_count_at = b->n;
    b_bytes(b, "\x80\x80\x80\x80\x00", 5); /* count, patched by zones_close */
    c->zones_open = 1;
    c->zones_thread = z->thread;
    c->zones_count = 0;
    c->zones_prev = c->out_base;
  }
  b_var(b, z->site);
  b_var(b, z->depth);
  b_svar(b, dsub(t, c->zones_prev));
  b_var(b, z->dur_ns);
  c->zones_prev = t;
  c->zones_count++;
  int64_t end = dadd(t, (int64_t)z->dur_ns);
  if (end > c->last_t) c->last_t = end;
}
/* A live message or marker whose text the live ring cut short, with its whole text from the
 * store (the stored event of the same thread, type, site and time whose text begins the same),
 * else as it is. The text lives in c->text until the next call. */
typedef struct text_find {
  const tmk_relay_event* want;
  char* out;
  size_t cap;
  uint32_t len;
  int found;
} text_find;
static int text_cb(void* ud, const tmk_relay_event* e) {
  text_find* f = ud;
  const tmk_relay_event* w = f->want;
  if (e->type != w->type || e->site != w->site || e->time_ns != w->time_ns ||
      e->text_len <= w->text_len || memcmp(e->text, w->text, w->text_len) != 0)
    return 0;
  f->len = e->text_len < f->cap ? e->text_len : (uint32_t)f->cap;
  memcpy(f->out, e->text, f->len);
  f->found = 1;
  return 1;
}
static const tmk_relay_event* whole_text(client* c, const tmk_relay_event* e) {
  text_find f = {e, c->text, sizeof c->text, 0, 0};
  tmk_relay_query q = {e->time_ns, e->time_ns, (int64_t)e->thread, 0, 256, NULL};
  tmk_relay_query_events(c->r, c->cur.session, &q, 1u << e->type, text_cb, &f);
  if (!f.found) return e;
  c->text_event = *e;
  c->text_event.text = c->text;
  c->text_event.text_len = f.len;
  return &c->text_event;
}

/* text_cut: e is a live item's event whose text the ring cut short (whole_text, once the event
 * has passed the filters). */
static void put_event(client* c, const tmk_relay_event* e, int text_cut) {
  /* frames are never filtered (API.md): the frame-time graph keeps the main thread's frames
   * while that thread's zones are left out */
  if (e->type != TMK_RELAY_EV_FRAME && !pass_thread(c, e->thread)) return;
  if (e->type == TMK_RELAY_EV_MESSAGE) {
    if (e->severity > c->cur.level || (e->verbosity & c->cur.mask) == 0) return;
  } else if (e->type != TMK_RELAY_EV_FRAME && e->site && !pass_site(c, e->site)) {
    return;
  }
  if (text_cut) e = whole_text(c, e);
  int64_t t = rel(c, e->time_ns);
  msg_room(c, t);
  zones_close(c);
  buf* b = &c->out;
  switch (e->type) {
  case TMK_RELAY_EV_FRAME:
    b_u8(b, REC_FRAME);
    b_var(b, e->site);
    b_svar(b, dsub(t, c->out_base));
    break;
  case TMK_RELAY_EV_PLOT:
    b_u8(b, REC_PLOT);
    b_var(b, e->site);
    b_svar(b, dsub(t, c->out_base));
    b_f64(b, e->is_double ? e->d : (double)e->i);
    break;
  case TMK_RELAY_EV_MESSAGE:
    b_u8(b, REC_MESSAGE);
    b_var(b, e->thread);
    b_var(b, e->site);
    b_var(b, e->severity);
    b_var(b, e->verbosity);
    b_svar(b, dsub(t, c->out_base));
    b_str(b, e->text ? e->text : "", e->text ? e->text_len : 0);
    break;
  case TMK_RELAY_EV_MARKER_BEGIN:
  case TMK_RELAY_EV_MARKER_END:
    if (!e->text_len) return;
    b_u8(b, REC_MARKER);
    b_var(b, e->thread);
    b_var(b, e->site);
    b_var(b, e->type == TMK_RELAY_EV_MARKER_BEGIN ? 0u : 1u);
    b_svar(b, dsub(t, c->out_base));
    b_str(b, e->text ? e->text : "", e->text_len);
    break;
  default:
    return;
  }
  if (t > c->last_t) c->last_t = t;
}

/* ============================================================================================
 * History and backfill
 * ============================================================================================ */
typedef struct collect {
  tmk_relay_zone* z;
  size_t n, cap;
  int oom;
} collect;
static int collect_zone(void* ud, const tmk_relay_zone* z) {
  collect* k = ud;
  if (k->n == k->cap) {
    size_t cap = k->cap ? k->cap * 2 : 4096;
    tmk_relay_zone* p = realloc(k->z, cap * sizeof *p);
    if (!p) { k->oom = 1; return 1; }
    k->z = p;
    k->cap = cap;
  }
  k->z[k->n++] = *z;
  return 0;
}
/* Events are copied (text included) under the session lock and encoded after it. */
typedef struct ev_list {
  tmk_relay_event* e;
  size_t n, cap;
  buf text;
  int oom;
} ev_list;
static int event_cb(void* ud, const tmk_relay_event* e) {
  ev_list* l = ud;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 1024;
    tmk_relay_event* p = realloc(l->e, cap * sizeof *p);
    if (!p) { l->oom = 1; return 1; }
    l->e = p;
    l->cap = cap;
  }
  tmk_relay_event* d = &l->e[l->n++];
  *d = *e;
  d->text = (const char*)(uintptr_t)l->text.n; /* an offset until the copy is complete */
  if (e->text_len) b_bytes(&l->text, e->text, e->text_len);
  if (l->text.oom) { l->oom = 1; return 1; }
  return 0;
}
static int zone_order(const void* a, const void* b) {
  const tmk_relay_zone *x = a, *y = b;
  if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
  if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
  return x->depth < y->depth ? -1 : x->depth > y->depth;
}
/* Sends zones and events of [t0, t1] in windows small enough for one query each; zones shorter
 * than min_dur are left out (the coalesced form). Returns zones sent. */
/* Zones and events in [t0, t1] (with cut: only those stored before it, tmk_relay_cut). */
static uint64_t send_range(client* c, uint64_t t0, uint64_t t1, uint64_t min_dur,
                           uint64_t max_zones, const tmk_relay_cut* cut) {
  uint64_t sent = 0;
  uint64_t win = t1 > t0 ? (t1 - t0) / 8 + 1 : 1;
  uint64_t t = t0;
  collect k = {0};
  while (t <= t1 && sent < max_zones && !c->dead) {
    uint64_t e = t + win - 1;
    if (e > t1 || e < t) e = t1;
    tmk_relay_query q = {t, e, -1, min_dur, WS_QUERY_LIMIT, cut};
    k.n = 0;
    k.oom = 0;
    int n = tmk_relay_query_zones(c->r, c->cur.session, &q, collect_zone, &k);
    if (n < 0 || k.oom) break;
    if ((size_t)n >= WS_QUERY_LIMIT && win > 1000000) { win /= 4; continue; }
    /* a zone overlapping two windows comes back twice: keep it only in the window of its start */
    if (k.n) qsort(k.z, k.n, sizeof *k.z, zone_order); /* k.z is NULL when nothing came */
    for (size_t i = 0; i < k.n; i++) {
      if (k.z[i].start_ns < t && t != t0) continue;
      put_zone(c, &k.z[i]);
      sent++;
      if (c->out.n >= WS_MSG_SOFT_MAX) { msg_flush(c); msg_begin(c, MSG_DATA, c->last_t); }
    }
    ev_list el = {0};
    tmk_relay_query eq = {t, e, -1, 0, WS_QUERY_LIMIT, cut};
    tmk_relay_query_events(c->r, c->cur.session, &eq, 0, event_cb, &el);
    if (!el.oom) {
      for (size_t i = 0; i < el.n; i++) {
        el.e[i].text = el.text.p ? (const char*)el.text.p + (uintptr_t)el.e[i].text : "";
        put_event(c, &el.e[i], 0);
      }
    }
    free(el.e);
    free(el.text.p);
    msg_flush(c);
    msg_begin(c, MSG_DATA, c->last_t);
    if (e == t1) break;
    t = e + 1;
  }
  free(k.z);
  return sent;
}

/* ============================================================================================
 * Subscription lifecycle
 * ============================================================================================ */
static void detach(client* c) {
  if (c->attached) tmk_relay_live_detach(c->r, c->cur.session);
  c->attached = 0;
}
static void start_subscription(client* c, const sub* s) {
  detach(c);
  c->cur = *s;
  c->subscribed = 0;
  free(c->sites);
  c->sites = NULL;
  c->nsites = c->sites_cap = 0;
  c->threads_seen = 0;
  c->teams_seen_hash = 0;
  c->origin_set = 0;
  c->last_t = 0;
  if (s->has_seq) {
    /* Subscriptions that arrive while one is being sent are coalesced, and the RESET names only
     * the session: this tells the browser which of its subscriptions the following data is for. */
    char m[96];
    snprintf(m, sizeof m, "{\"type\":\"subscribed\",\"seq\":%llu}", (unsigned long long)s->seq);
    send_text(c, m);
  }
  /* The follower is attached first, with a cut of what is stored at that moment: the history is
   * what came before it (queried through the cut, up to the session's time range read after it),
   * the live data what came after, so that no item is sent twice or missed (a parent is stored
   * after its children, and packets arrive late, so the split cannot be made by time). */
  tmk_relay_cut* cut = NULL;
  if (tmk_relay_live_attach_cut(c->r, s->session, &c->cursor, &cut) == 0) c->attached = 1;
  tmk_relay_session_info info;
  if (tmk_relay_session(c->r, s->session, &info) != 0) {
    char m[256];
    snprintf(m, sizeof m, "{\"type\":\"error\",\"error\":\"no session '%.96s'\"}", s->session);
    send_text(c, m);
    free(cut);
    detach(c);
    return;
  }
  c->origin = (int64_t)info.first_ns;
  c->origin_set = info.first_ns != 0 || info.last_ns != 0;
  c->was_live = info.live;
  pthread_mutex_lock(&c->wmu);
  c->sent = 0;
  pthread_mutex_unlock(&c->wmu);
  pthread_mutex_lock(&c->mu);
  c->acked = 0;
  pthread_mutex_unlock(&c->mu);
  msg_begin(c, MSG_RESET, 0);
  b_svar(&c->out, c->origin_set ? c->origin : 0);
  ws_send(c, MG_WEBSOCKET_OPCODE_BINARY, c->out.p, c->out.n);
  c->out.n = 0;
  msg_begin(c, MSG_DATA, 0);
  send_meta(c, 1);
  msg_flush(c);
  if (c->origin_set) {
    uint64_t t0 = info.first_ns, t1 = info.last_ns;
    if (info.live && s->history_s > 0) {
      uint64_t h = (uint64_t)(s->history_s * 1e9);
      if (t1 - t0 > h) t0 = t1 - h;
    }
    msg_begin(c, MSG_DATA, (int64_t)(t0 - (uint64_t)c->origin));
    send_range(c, t0, t1, 0, WS_HISTORY_MAX_ZONES, cut);
    send_meta(c, 0); /* sites first referenced by the history */
  }
  free(cut);
  msg_begin(c, MSG_DATA, c->last_t);
  b_u8(&c->out, REC_HISTORY_DONE);
  ws_send(c, MG_WEBSOCKET_OPCODE_BINARY, c->out.p, c->out.n);
  c->out.n = 0;
  c->subscribed = 1;
}

/* Reads what the relay decoded since the last call and sends it. */
static void pump_live(client* c) {
  if (!c->items) c->items = malloc(WS_LIVE_CHUNK * sizeof *c->items);
  tmk_relay_live_item* items = c->items;
  if (!items) return;
  int need_meta = 0;
  for (int rounds = 0; rounds < 64 && !c->dead; rounds++) {
    uint64_t skipped = 0;
    int n = tmk_relay_live_read(c->r, c->cur.session, &c->cursor, items, WS_LIVE_CHUNK, &skipped);
    if (n < 0) return;
    if (skipped) {
      /* Coalesce: this browser fell behind the live ring. Tell it, and backfill the gap with
       * only the zones long enough to be seen at a full-gap zoom. */
      int64_t from = c->last_t;
      int64_t to = n > 0 ? rel(c, items[0].is_zone ? items[0].zone.start_ns : items[0].event.time_ns) : from;
      msg_room(c, from);
      zones_close(c);
      b_u8(&c->out, REC_GAP);
      b_svar(&c->out, dsub(from, c->out_base));
      b_svar(&c->out, dsub(to, c->out_base));
      b_var(&c->out, skipped);
      b_var(&c->out, 0);
      msg_flush(c);
      pthread_mutex_lock(&c->st->mu);
      c->st->stats.coalesced++;
      pthread_mutex_unlock(&c->st->mu);
      if (to > from) {
        uint64_t a = (uint64_t)from + (uint64_t)c->origin, z = (uint64_t)to + (uint64_t)c->origin;
        msg_begin(c, MSG_DATA, from);
        send_range(c, a, z, (z - a) / WS_BACKFILL_PX, WS_QUERY_LIMIT, NULL);
      }
    }
    for (int i = 0; i < n; i++) {
      const tmk_relay_live_item* it = &items[i];
      uint32_t site = it->is_zone ? it->zone.site : it->event.site;
      if (site && !site_of(c, site)) need_meta = 1;
    }
    if (need_meta) { send_meta(c, 0); need_meta = 0; }
    for (int i = 0; i < n; i++) {
      if (items[i].is_zone) put_zone(c, &items[i].zone);
      else put_event(c, &items[i].event, items[i].text_cut);
    }
    if (n < WS_LIVE_CHUNK) break;
  }
  msg_flush(c);
}

/* Flow control: 1 while the browser has more unacknowledged bytes than its window. The live
 * ring then moves on without it, and it gets a GAP and coalesced data once it catches up. */
static int window_full(client* c) {
  if (!c->cur.window) return 0;
  pthread_mutex_lock(&c->wmu);
  uint64_t sent = c->sent;
  pthread_mutex_unlock(&c->wmu);
  pthread_mutex_lock(&c->mu);
  uint64_t acked = c->acked;
  pthread_mutex_unlock(&c->mu);
  return sent > acked && sent - acked > c->cur.window;
}

/* civetweb has no call that closes a WebSocket from the server side: its reader thread waits
 * for the client's next frame, for ever. The socket is found once (ws_ready) by its addresses
 * among the process's descriptors, and shut down when the browser has sent nothing for
 * idle_ms: civetweb's reader then sees the end of the stream and closes the connection. */
static int find_socket(const struct mg_connection* conn) {
  const struct mg_request_info* ri = mg_get_request_info(conn);
  if (!ri) return -1;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  struct dirent* e;
  while (found < 0 && (e = readdir(d)) != NULL) {
    char* end;
    long fd = strtol(e->d_name, &end, 10);
    if (*end || fd < 0 || fd == dirfd(d)) continue;
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof me, pl = sizeof peer;
    if (getsockname((int)fd, (struct sockaddr*)&me, &ml) != 0 ||
        getpeername((int)fd, (struct sockaddr*)&peer, &pl) != 0)
      continue;
    char host[INET6_ADDRSTRLEN] = "";
    int mport = 0, pport = 0;
    if (peer.ss_family == AF_INET && me.ss_family == AF_INET) {
      const struct sockaddr_in* p4 = (const struct sockaddr_in*)&peer;
      inet_ntop(AF_INET, &p4->sin_addr, host, sizeof host);
      pport = ntohs(p4->sin_port);
      mport = ntohs(((const struct sockaddr_in*)&me)->sin_port);
    } else if (peer.ss_family == AF_INET6 && me.ss_family == AF_INET6) {
      const struct sockaddr_in6* p6 = (const struct sockaddr_in6*)&peer;
      inet_ntop(AF_INET6, &p6->sin6_addr, host, sizeof host);
      pport = ntohs(p6->sin6_port);
      mport = ntohs(((const struct sockaddr_in6*)&me)->sin6_port);
    } else {
      continue;
    }
    if (pport == ri->remote_port && mport == ri->server_port && strcmp(host, ri->remote_addr) == 0)
      found = (int)fd;
  }
  closedir(d);
  return found;
}

/* 1 once the browser has been silent for idle_ms and its connection is being closed. */
static int idle_check(client* c) {
  pthread_mutex_lock(&c->mu);
  uint64_t last = c->last_rx_ms;
  pthread_mutex_unlock(&c->mu);
  if (c->fd < 0 || now_ms() - last < c->st->idle_ms) return 0;
  shutdown(c->fd, SHUT_RDWR); /* the socket stays open until civetweb closes it (ws_close) */
  c->idle_closed = 1;
  pthread_mutex_lock(&c->st->mu);
  c->st->stats.idle_closed++;
  pthread_mutex_unlock(&c->st->mu);
  return 1;
}

static void* sender_main(void* arg) {
  client* c = arg;
  uint64_t seen = 0, last_send = 0, last_meta = 0;
  tmk__name_thread("tmk-ws-send");
  for (;;) {
    pthread_mutex_lock(&c->mu);
    int stop = c->stop;
    int has = c->has_sub_next;
    sub s = c->sub_next;
    c->has_sub_next = 0;
    pthread_mutex_unlock(&c->mu);
    if (stop || c->dead) break;
    if (idle_check(c)) break;
    if (has) { start_subscription(c, &s); seen = 0; }
    if (c->subscribed) {
      uint64_t now = now_ms();
      if (now - last_send < WS_BATCH_MIN_MS) {
        struct timespec ts = {0, (long)(WS_BATCH_MIN_MS - (now - last_send)) * 1000000L};
        nanosleep(&ts, NULL);
      }
      if (c->attached && !window_full(c)) pump_live(c);
      last_send = now_ms();
      if (last_send - last_meta > 1000) {
        last_meta = last_send;
        tmk_relay_session_info info;
        msg_begin(c, MSG_DATA, c->last_t);
        send_meta(c, 0);
        if (tmk_relay_session(c->r, c->cur.session, &info) == 0) {
          if (c->was_live && !info.live) { zones_close(c); b_u8(&c->out, REC_END); }
          c->was_live = info.live;
          if (!c->attached && info.live && tmk_relay_live_attach(c->r, c->cur.session, &c->cursor) == 0)
            c->attached = 1;
        }
        msg_flush(c);
      }
    }
    /* wait for data, a new subscription, or the idle timeout */
    pthread_mutex_lock(&c->st->mu);
    if (c->st->gen == seen) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += WS_IDLE_WAIT_MS * 1000000L;
      if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
      pthread_cond_timedwait(&c->st->cv, &c->st->mu, &ts);
    }
    seen = c->st->gen;
    pthread_mutex_unlock(&c->st->mu);
  }
  detach(c);
  return NULL;
}

/* ============================================================================================
 * Subscription parsing (jansson)
 * ============================================================================================ */
/* Returns 1 with the number, 0 when absent, -1 when present but not a number. */
static int obj_num(const json_t* o, const char* key, double* out) {
  const json_t* v = json_object_get(o, key);
  if (!v) return 0;
  if (!json_is_number(v)) return -1;
  *out = json_number_value(v);
  return 1;
}
/* Parses {"op":"subscribe","session":"…","level":n,"mask":n,"threads":[…],"history_s":n,
 * "window":n,"seq":n}. Returns 0 or writes a reason into err. */
static int parse_sub(const json_t* o, sub* s, char* err, size_t errcap) {
  memset(s, 0, sizeof *s);
  s->level = 5;
  s->mask = 0xffffffffu;
  s->history_s = WS_HISTORY_DEFAULT_S;
  const char* op = json_string_value(json_object_get(o, "op"));
  if (!op || strcmp(op, "subscribe") != 0) { snprintf(err, errcap, "op must be \\\"subscribe\\\", \\\"ack\\\" or \\\"ping\\\""); return -1; }
  const json_t* sv = json_object_get(o, "session");
  if (!json_is_string(sv)) { snprintf(err, errcap, "session (a string) is required"); return -1; }
  const char* id = json_string_value(sv);
  size_t k = strlen(id);
  if (k == 0 || k >= sizeof s->session || k != json_string_length(sv)) { snprintf(err, errcap, "bad session id"); return -1; }
  for (size_t i = 0; i < k; i++)
    if ((unsigned char)id[i] < 0x20 || id[i] == '\\' || id[i] == '"') { snprintf(err, errcap, "bad session id"); return -1; }
  memcpy(s->session, id, k + 1);
  double v;
  int r;
  if ((r = obj_num(o, "level", &v)) != 0) {
    if (r < 0 || v < 0 || v > 5 || v != (int)v) { snprintf(err, errcap, "level must be 0..5"); return -1; }
    s->level = (int)v;
  }
  if ((r = obj_num(o, "mask", &v)) != 0) {
    if (r < 0 || v < 0 || v > 4294967295.0 || v != (double)(uint32_t)v) { snprintf(err, errcap, "mask must be a 32-bit unsigned integer"); return -1; }
    s->mask = (uint32_t)v;
  }
  if ((r = obj_num(o, "window", &v)) != 0) {
    if (r < 0 || v < 0 || v > 1e12 || v != (double)(uint64_t)v) { snprintf(err, errcap, "window must be a byte count"); return -1; }
    s->window = (uint64_t)v;
  }
  if ((r = obj_num(o, "seq", &v)) != 0) {
    if (r < 0 || v < 0 || v > 9007199254740991.0 || v != (double)(uint64_t)v) { snprintf(err, errcap, "seq must be a non-negative integer"); return -1; }
    s->has_seq = 1;
    s->seq = (uint64_t)v;
  }
  if ((r = obj_num(o, "history_s", &v)) != 0) {
    if (r < 0 || v < 0 || v > 86400) { snprintf(err, errcap, "history_s must be 0..86400"); return -1; }
    s->history_s = v;
  }
  const json_t* t = json_object_get(o, "threads");
  if (json_is_array(t)) {
    size_t i;
    const json_t* e;
    json_array_foreach(t, i, e) {
      if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > UINT32_MAX ||
          s->nthreads >= WS_MAX_THREADS_FILTER) { snprintf(err, errcap, "threads must be up to %d integers", WS_MAX_THREADS_FILTER); return -1; }
      s->threads[s->nthreads++] = (uint32_t)json_integer_value(e);
    }
  } else if (t && !json_is_null(t)) {
    snprintf(err, errcap, "threads must be an array or null");
    return -1;
  }
  return 0;
}

/* ============================================================================================
 * civetweb handlers
 * ============================================================================================ */
static int ws_connect(const struct mg_connection* conn, void* ud) {
  tmk__stream* st = ud;
  if (!st->authorize(st->auth_ud, conn)) return 1;
  /* Each stream holds an HTTP worker thread for its life: past the cap they would take the
   * API down (issue 15 item 6). relay_web.c answers 429 before this; this is the exact count. */
  pthread_mutex_lock(&st->mu);
  int ok = st->admitted < TMK__STREAM_MAX_CLIENTS;
  if (ok) st->admitted++;
  pthread_mutex_unlock(&st->mu);
  return ok ? 0 : 1;
}
static void ws_ready(struct mg_connection* conn, void* ud) {
  client* c = calloc(1, sizeof *c);
  if (!c) return;
  tmk__stream* st = ud;
  c->conn = conn;
  c->st = st;
  c->r = st->r;
  c->fd = find_socket(conn);
  c->last_rx_ms = now_ms();
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->wmu, NULL);
  mg_set_user_connection_data(conn, c);
  if (pthread_create(&c->thread, NULL, sender_main, c) == 0) c->started = 1;
  pthread_mutex_lock(&st->mu);
  c->next = st->clients;
  st->clients = c;
  st->stats.clients++;
  pthread_mutex_unlock(&st->mu);
}
static int ws_data(struct mg_connection* conn, int bits, char* data, size_t len, void* ud) {
  (void)ud;
  client* c = mg_get_user_connection_data(conn);
  int op = bits & 0x0f;
  if (!c) return 0;
  if (op == MG_WEBSOCKET_OPCODE_CONNECTION_CLOSE) return 0;
  pthread_mutex_lock(&c->mu);
  c->last_rx_ms = now_ms(); /* any frame, a ping too, shows the browser is there */
  pthread_mutex_unlock(&c->mu);
  if (op != MG_WEBSOCKET_OPCODE_TEXT) return 1; /* pings are answered by civetweb; binary ignored */
  sub s;
  char err[160], reply[256];
  json_t* msg = len <= 8192 ? json_loadb(data, len, 0, NULL) : NULL;
  const char* cmd = json_string_value(json_object_get(msg, "op"));
  if (cmd && strcmp(cmd, "ping") == 0) {
    /* the page's keep-alive (every 10 s): nothing to do but having received it */
  } else if (cmd && strcmp(cmd, "ack") == 0) {
    double v;
    if (obj_num(msg, "bytes", &v) == 1 && v >= 0) {
      pthread_mutex_lock(&c->mu);
      c->acked = (uint64_t)v;
      pthread_mutex_unlock(&c->mu);
      on_data(c->st);
    } else {
      send_text(c, "{\"type\":\"error\",\"error\":\"ack needs bytes (a count)\"}");
    }
  } else if (len > 8192) {
    send_text(c, "{\"type\":\"error\",\"error\":\"message too long\"}");
  } else if (!json_is_object(msg)) {
    send_text(c, "{\"type\":\"error\",\"error\":\"not a JSON object\"}");
  } else if (parse_sub(msg, &s, err, sizeof err) == 0) {
    pthread_mutex_lock(&c->mu);
    c->sub_next = s;
    c->has_sub_next = 1;
    pthread_mutex_unlock(&c->mu);
    on_data(c->st); /* wake the sender */
  } else {
    snprintf(reply, sizeof reply, "{\"type\":\"error\",\"error\":\"%s\"}", err);
    send_text(c, reply);
  }
  json_decref(msg);
  return 1;
}
static void ws_close(const struct mg_connection* conn, void* ud) {
  tmk__stream* st = ud;
  pthread_mutex_lock(&st->mu);
  if (st->admitted) st->admitted--;
  pthread_mutex_unlock(&st->mu);
  client* c = mg_get_user_connection_data(conn);
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_mutex_unlock(&c->mu);
  on_data(c->st);
  if (c->started) pthread_join(c->thread, NULL);
  pthread_mutex_lock(&st->mu);
  for (client** p = &st->clients; *p; p = &(*p)->next)
    if (*p == c) { *p = c->next; break; }
  st->stats.clients--;
  pthread_mutex_unlock(&st->mu);
  mg_set_user_connection_data(conn, NULL);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->wmu);
  free(c->sites);
  free(c->out.p);
  free(c->items);
  free(c);
}

void tmk__stream_register(tmk__stream* st, struct mg_context* ctx, tmk_relay* r,
                          tmk__stream_auth_fn authorize, void* auth_ud) {
  st->r = r;
  st->authorize = authorize;
  st->auth_ud = auth_ud;
  tmk_relay_set_data_listener(r, on_data, st);
  mg_set_websocket_handler(ctx, "/api/stream", ws_connect, ws_ready, ws_data, ws_close, st);
}
