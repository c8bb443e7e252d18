/* relay_lod.c — level-of-detail summaries of a session's stored zones for the dashboard
 * (docs/API.md, "Level of detail"): per lane (thread × depth), zones shorter than one time bucket
 * are merged per bucket, longer ones are sent whole; with full=1 every zone is sent whole.
 * Work and memory are bounded whatever the parameters, and the session lock is held per slice. */
#define _POSIX_C_SOURCE 200809L
#include <civetweb.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_internal.h"

#define LOD_MAX_BUCKETS 16384
#define LOD_DEFAULT_BUCKETS 2048
#define LOD_MAX_LIMIT 1000000
#define LOD_DEFAULT_LIMIT 200000
#define LOD_MAX_CELLS (2u << 20)  /* lanes × buckets: 64 MiB of cells per request at most */
#define LOD_MAX_LANES 4096
#define LOD_SLICE_CHUNKS 64       /* 64 Ki zones per lock hold */
#define LOD_MAX_RUNNING 4         /* requests computing at once per relay (r->lod_running);
                                    more get 503, so clients cannot multiply the bound above */

typedef struct cell {
  uint64_t s, e, maxdur;
  uint32_t site, count;
} cell;

typedef struct lane {
  uint32_t thread, depth;
  cell* cells;
} lane;

typedef struct row {
  uint64_t start, dur;
  uint32_t thread, site, depth, count;
} row;

/* Call sites a level/mask filter hides: id -> hidden, open addressing (snapshot per request). */
typedef struct site_filter {
  uint32_t* ids; /* id + 1, 0 = empty */
  uint8_t* hide;
  uint32_t cap;  /* power of two, 0 = no filter */
  int level;
  uint32_t mask;
} site_filter;

typedef struct lod_ctx {
  site_filter sf;
  uint64_t t0, t1, res;
  uint32_t buckets;
  int full;
  size_t limit;
  lane* lanes;
  uint32_t nlanes;
  uint32_t* hash; /* lane index + 1, open addressing, 2 × LOD_MAX_LANES */
  row* rows;
  size_t nrows, rows_cap;
  uint64_t zones;  /* zones in range */
  int truncated;
  int err;         /* 0, or a TMK_E* that stops the scan */
  int too_many_lanes;
} lod_ctx;

static uint32_t lane_hash(uint32_t thread, uint32_t depth) {
  uint32_t x = thread * 2654435761u ^ (depth + 0x9e3779b9u) * 40503u;
  x ^= x >> 15;
  return x;
}

static lane* get_lane(lod_ctx* c, uint32_t thread, uint32_t depth) {
  uint32_t mask = 2 * LOD_MAX_LANES - 1;
  for (uint32_t h = lane_hash(thread, depth) & mask;; h = (h + 1) & mask) {
    uint32_t v = c->hash[h];
    if (!v) {
      if (c->nlanes == LOD_MAX_LANES ||
          (uint64_t)(c->nlanes + 1) * c->buckets > LOD_MAX_CELLS) {
        c->too_many_lanes = 1;
        return NULL;
      }
      lane* l = &c->lanes[c->nlanes];
      l->cells = calloc(c->buckets, sizeof(cell));
      if (!l->cells) return NULL;
      l->thread = thread;
      l->depth = depth;
      c->hash[h] = ++c->nlanes;
      return l;
    }
    lane* l = &c->lanes[v - 1];
    if (l->thread == thread && l->depth == depth) return l;
  }
}

static int add_row(lod_ctx* c, const row* r) {
  if (c->nrows == c->limit) {
    c->truncated = 1;
    return 1;
  }
  if (c->nrows == c->rows_cap) {
    size_t cap = c->rows_cap ? c->rows_cap * 2 : 4096;
    if (cap > c->limit) cap = c->limit;
    row* n = realloc(c->rows, cap * sizeof *n);
    if (!n) {
      c->err = TMK_ENOMEM;
      return 1;
    }
    c->rows = n;
    c->rows_cap = cap;
  }
  c->rows[c->nrows++] = *r;
  return 0;
}

static uint32_t site_slot(const site_filter* f, uint32_t id) {
  uint32_t h = (id * 2654435761u) & (f->cap - 1);
  while (f->ids[h] && f->ids[h] != id + 1) h = (h + 1) & (f->cap - 1);
  return h;
}

/* Filters as the live stream does (docs/API.md, "Subscribe"): severity above the level or no
 * team bit in the mask hides a zone; sites without a descriptor yet pass. */
static int site_cb(void* ud, const tmk_relay_site* s) {
  site_filter* f = ud;
  uint32_t h = site_slot(f, s->id);
  f->ids[h] = s->id + 1;
  f->hide[h] = (uint8_t)(s->known && (s->severity > f->level || !(s->verbosity & f->mask)));
  return 0;
}

static int hidden(const site_filter* f, uint32_t site) {
  if (!f->cap) return 0;
  uint32_t h = site_slot(f, site);
  return f->ids[h] ? f->hide[h] : 0;
}

/* Runs with the session's lock held: only arithmetic and our own memory. */
static int zone_cb(void* ud, const tmk_relay_zone* z) {
  lod_ctx* c = ud;
  if (hidden(&c->sf, z->site)) return 0;
  c->zones++;
  if (c->full || z->dur_ns >= c->res) {
    row r = {z->start_ns, z->dur_ns, z->thread, z->site, z->depth, 1};
    return add_row(c, &r);
  }
  lane* l = get_lane(c, z->thread, z->depth);
  if (!l) {
    if (!c->too_many_lanes) c->err = TMK_ENOMEM;
    return 1;
  }
  uint64_t b = z->start_ns > c->t0 ? (z->start_ns - c->t0) / c->res : 0;
  if (b >= c->buckets) b = c->buckets - 1;
  cell* x = &l->cells[b];
  uint64_t e = z->start_ns + z->dur_ns;
  if (!x->count) {
    x->s = z->start_ns;
    x->e = e;
  } else {
    if (z->start_ns < x->s) x->s = z->start_ns;
    if (e > x->e) x->e = e;
  }
  if (!x->count || z->dur_ns > x->maxdur) {
    x->maxdur = z->dur_ns;
    x->site = z->site;
  }
  x->count++;
  return 0;
}

/* Parses a whole-string unsigned number; 1 present, 0 absent, -1 bad. */
static int qnum(const char* qs, const char* name, uint64_t* out) {
  if (!qs) return 0;
  char buf[64];
  int n = mg_get_var(qs, strlen(qs), name, buf, sizeof buf);
  if (n < 0) return n == -1 ? 0 : -1;
  if (!buf[0] || buf[0] == '-' || buf[0] == '+') return -1;
  char* end;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 10);
  if (errno || *end) return -1;
  *out = v;
  return 1;
}

static int fail(char* err, size_t ecap, int* code, int c, const char* msg, int status) {
  snprintf(err, ecap, "%s", msg);
  *code = c;
  return status;
}

static void free_ctx(lod_ctx* c) {
  free(c->sf.ids);
  free(c->sf.hide);
  for (uint32_t i = 0; i < c->nlanes; i++) free(c->lanes[i].cells);
  free(c->lanes);
  free(c->hash);
  free(c->rows);
}

static void put_row(tmk__json* j, const row* r) {
  tmk__json_begin_arr(j);
  tmk__json_u64(j, r->start);
  tmk__json_u64(j, r->dur);
  tmk__json_u64(j, r->thread);
  tmk__json_u64(j, r->site);
  tmk__json_u64(j, r->depth);
  tmk__json_u64(j, r->count);
  tmk__json_end_arr(j);
}

int tmk__lod_request(tmk_relay* r, const char* id, const char* qs, tmk__json* j, char* err,
                     size_t ecap, int* code) {
  uint64_t t0 = 0, t1 = 0, buckets = LOD_DEFAULT_BUCKETS, thread = 0, limit = LOD_DEFAULT_LIMIT,
           full = 0, level = 5, mask = 0xffffffffu;
  int has_level, has_mask;
  int has_t0, has_t1, has_thread, rc;
  if ((has_t0 = qnum(qs, "t0", &t0)) < 0)
    return fail(err, ecap, code, TMK_EINVAL, "t0 must be a time in ns", 400);
  if ((has_t1 = qnum(qs, "t1", &t1)) < 0)
    return fail(err, ecap, code, TMK_EINVAL, "t1 must be a time in ns", 400);
  if ((rc = qnum(qs, "buckets", &buckets)) < 0 || (rc && (buckets < 1 || buckets > LOD_MAX_BUCKETS)))
    return fail(err, ecap, code, TMK_ERANGE, "buckets must be 1..16384", 400);
  if ((has_thread = qnum(qs, "thread", &thread)) < 0 || (has_thread && thread > UINT32_MAX))
    return fail(err, ecap, code, TMK_EINVAL, "thread must be a thread index", 400);
  if ((rc = qnum(qs, "limit", &limit)) < 0 || (rc && (limit < 1 || limit > LOD_MAX_LIMIT)))
    return fail(err, ecap, code, TMK_ERANGE, "limit must be 1..1000000", 400);
  if ((rc = qnum(qs, "full", &full)) < 0 || full > 1)
    return fail(err, ecap, code, TMK_EINVAL, "full must be 0 or 1", 400);
  if ((has_level = qnum(qs, "level", &level)) < 0 || level > 5)
    return fail(err, ecap, code, TMK_EINVAL, "level must be 0..5", 400);
  if ((has_mask = qnum(qs, "mask", &mask)) < 0 || mask > UINT32_MAX)
    return fail(err, ecap, code, TMK_EINVAL, "mask must be a 32-bit unsigned integer", 400);

  if (!has_t0 || !has_t1) { /* default: what the store still holds */
    tmk__session* s = tmk__session_get(r, id);
    if (!s) return fail(err, ecap, code, TMK_ENOTFOUND, "no such session", 404);
    uint64_t a = 0, b = 0;
    pthread_mutex_lock(&s->mu);
    tmk__store_range(s->store, &a, &b);
    pthread_mutex_unlock(&s->mu);
    tmk__session_unref(s);
    if (!has_t0) t0 = a;
    if (!has_t1) t1 = b;
  }
  if (t1 < t0) return fail(err, ecap, code, TMK_EINVAL, "t1 is before t0", 400);

  if (atomic_fetch_add(&r->lod_running, 1) >= LOD_MAX_RUNNING) {
    atomic_fetch_sub(&r->lod_running, 1);
    return fail(err, ecap, code, TMK_EAGAIN, "too many level-of-detail requests at once; retry", 503);
  }
  lod_ctx c;
  memset(&c, 0, sizeof c);
  c.t0 = t0;
  c.t1 = t1;
  c.buckets = (uint32_t)buckets;
  c.res = (t1 - t0) / buckets + 1; /* ceil((t1 - t0 + 1) / buckets) without overflow */
  c.full = (int)full;
  c.limit = (size_t)limit;
  c.lanes = calloc(LOD_MAX_LANES, sizeof(lane));
  c.hash = calloc(2 * LOD_MAX_LANES, sizeof(uint32_t));
  if (!c.lanes || !c.hash) c.err = TMK_ENOMEM;
  if (!c.err && ((has_level && level < 5) || (has_mask && mask != 0xffffffffu))) {
    c.sf.level = (int)level;
    c.sf.mask = (uint32_t)mask;
    c.sf.cap = 2u * 65536u; /* the store holds at most 65536 sites */
    c.sf.ids = calloc(c.sf.cap, sizeof(uint32_t));
    c.sf.hide = calloc(c.sf.cap, 1);
    if (!c.sf.ids || !c.sf.hide) c.err = TMK_ENOMEM;
    else if (tmk_relay_query_sites(r, id, site_cb, &c.sf) < 0) c.err = TMK_ENOTFOUND;
  }

  tmk__session* s = c.err ? NULL : tmk__session_get(r, id);
  if (!s && !c.err) c.err = TMK_ENOTFOUND;
  if (s) {
    tmk_relay_query q;
    memset(&q, 0, sizeof q);
    q.t0_ns = t0;
    q.t1_ns = t1 ? t1 : 1; /* 0 would mean "to the end" */
    q.thread = has_thread ? (int64_t)thread : -1;
    tmk__zone_cursor cur = {0, 0};
    for (;;) {
      pthread_mutex_lock(&s->mu);
      int done = tmk__store_zone_scan(s->store, &cur, &q, LOD_SLICE_CHUNKS, zone_cb, &c);
      pthread_mutex_unlock(&s->mu);
      if (done) break; /* complete, or stopped by the limit or an error */
    }
    tmk__session_unref(s);
  }
  atomic_fetch_sub(&r->lod_running, 1);

  if (c.too_many_lanes) {
    free_ctx(&c);
    return fail(err, ecap, code, TMK_ERANGE,
                "too many lanes (threads × depths) for this many buckets: ask for fewer buckets "
                "or one thread",
                422);
  }
  if (c.err) {
    free_ctx(&c);
    if (c.err == TMK_ENOTFOUND) return fail(err, ecap, code, TMK_ENOTFOUND, "no such session", 404);
    return fail(err, ecap, code, TMK_ENOMEM, "out of memory", 500);
  }

  tmk__json_begin_obj(j);
  tmk__json_key(j, "t0");
  tmk__json_u64(j, t0);
  tmk__json_key(j, "t1");
  tmk__json_u64(j, t1);
  tmk__json_key(j, "res_ns");
  tmk__json_u64(j, c.full ? 0 : c.res);
  tmk__json_key(j, "buckets");
  tmk__json_u64(j, c.buckets);
  tmk__json_key(j, "columns");
  static const char cols[] = "[\"start_ns\",\"dur_ns\",\"thread\",\"site\",\"depth\",\"count\"]";
  tmk__json_raw(j, cols, sizeof cols - 1);
  j->need_comma = 1;
  tmk__json_key(j, "rows");
  tmk__json_begin_arr(j);
  size_t out = 0;
  for (size_t i = 0; i < c.nrows; i++, out++) put_row(j, &c.rows[i]);
  for (uint32_t li = 0; li < c.nlanes; li++) {
    const lane* l = &c.lanes[li];
    for (uint32_t b = 0; b < c.buckets; b++) {
      const cell* x = &l->cells[b];
      if (!x->count) continue;
      if (out == c.limit) {
        c.truncated = 1;
        break;
      }
      row rw = {x->s, x->e - x->s, l->thread, x->site, l->depth, x->count};
      put_row(j, &rw);
      out++;
    }
  }
  tmk__json_end_arr(j);
  tmk__json_key(j, "count");
  tmk__json_u64(j, out);
  tmk__json_key(j, "zones");
  tmk__json_u64(j, c.zones);
  tmk__json_key(j, "truncated");
  tmk__json_bool(j, c.truncated);
  tmk__json_end_obj(j);
  free_ctx(&c);
  return 200;
}
