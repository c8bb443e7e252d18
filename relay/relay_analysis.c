/* relay_analysis.c — statistics and occurrence lists over a session's stored zones, for the
 * dashboard's statistics panel and find-zone (docs/API.md, "Analysis"). Zones are read through
 * tmk_relay_query_zones in time slices of at most SLICE_LIMIT zones, so each session lock is held
 * briefly; all work and memory are bounded by the request's caps (and MAX_RUNNING per relay). */
#define _POSIX_C_SOURCE 200809L
#include "relay_analysis.h"
#include "relay_internal.h"

#include <civetweb.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLICE_LIMIT 65536      /* zones one locked query may visit */
#define MAX_SITES 4096         /* call sites one statistics request accumulates */
#define MAX_RUNNING 4          /* analyses running at once (each holds a few MiB at most) */
#define WAIT_MS 3000           /* how long a request waits for one of them before a 503 */
#define MAX_NAME 128           /* name filter bytes */
#define MAX_THREADS_PARAM 256  /* thread ids in a threads= list */
#define EXACT 16               /* durations a site keeps exactly before using its histogram */
#define SUB 32                 /* histogram: linear sub-buckets per power of two */
#define NBUCKETS (2 * SUB + (64 - 6) * SUB)

/* ---------------------------------------------------------------------------------------------
 * Log-linear duration histogram: exact below 2·SUB ns, then SUB buckets per power of two, so a
 * percentile read from a bucket's middle is within 1/(2·SUB) of the exact value.
 * ------------------------------------------------------------------------------------------- */
static unsigned bucket_of(uint64_t v) {
  if (v < 2 * SUB) return (unsigned)v;
  unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 6 */
  return 2 * SUB + (e - 6) * SUB + (unsigned)((v >> (e - 5)) & (SUB - 1));
}
static uint64_t bucket_mid(unsigned b) {
  if (b < 2 * SUB) return b;
  unsigned e = (b - 2 * SUB) / SUB + 6, sub = (b - 2 * SUB) % SUB;
  uint64_t lo = ((uint64_t)(SUB + sub)) << (e - 5), w = (uint64_t)1 << (e - 5);
  return lo + w / 2;
}

/* ---------------------------------------------------------------------------------------------
 * Request parameters
 * ------------------------------------------------------------------------------------------- */
typedef struct params {
  uint64_t t0, t1; /* t0 absent: the session's first time; t1 = 0: to the end */
  int have_t0;
  int level;
  uint32_t mask;
  uint32_t threads[MAX_THREADS_PARAM];
  size_t nthreads; /* 0: all */
  char name[MAX_NAME + 1];
  uint64_t limit, site, bins;
  int by_time;
} params;

static int fail(tmk__json* j, int status, const char* code, const char* msg) {
  j->len = 0;
  j->need_comma = 0;
  tmk__json_begin_obj(j);
  tmk__json_key(j, "error");
  tmk__json_cstr(j, msg);
  tmk__json_key(j, "code");
  tmk__json_cstr(j, code);
  tmk__json_end_obj(j);
  return status;
}

/* 1 found (value in *out), 0 absent, -1 not a decimal number (or "0x…" hex) in 64 bits. */
static int get_u64(const char* qs, const char* key, uint64_t* out) {
  char buf[32];
  if (!qs) return 0;
  int n = mg_get_var(qs, strlen(qs), key, buf, sizeof buf);
  if (n == -1) return 0;
  if (n <= 0) return -1;
  int base = 10;
  const char* p = buf;
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) { base = 16; p += 2; }
  if (!*p) return -1;
  uint64_t v = 0;
  for (; *p; p++) {
    unsigned d;
    if (*p >= '0' && *p <= '9') d = (unsigned)(*p - '0');
    else if (base == 16 && *p >= 'a' && *p <= 'f') d = (unsigned)(*p - 'a' + 10);
    else if (base == 16 && *p >= 'A' && *p <= 'F') d = (unsigned)(*p - 'A' + 10);
    else return -1;
    if (v > (UINT64_MAX - d) / (uint64_t)base) return -1;
    v = v * (uint64_t)base + d;
  }
  *out = v;
  return 1;
}

/* Parses the parameters both endpoints share; returns 0 or an HTTP status (body in j). */
static int parse_common(const char* qs, params* p, tmk__json* j) {
  memset(p, 0, sizeof *p);
  p->level = 5;
  p->mask = 0xffffffffu;
  uint64_t v;
  int rc;
  if ((rc = get_u64(qs, "t0", &v)) < 0) return fail(j, 400, "EINVAL", "t0 must be ns");
  if (rc) p->t0 = v;
  p->have_t0 = rc;
  if ((rc = get_u64(qs, "t1", &v)) < 0) return fail(j, 400, "EINVAL", "t1 must be ns");
  if (rc) p->t1 = v;
  if (p->t1 && p->t1 < p->t0) return fail(j, 400, "ERANGE", "t1 is before t0");
  if ((rc = get_u64(qs, "level", &v)) < 0 || (rc && v > 5))
    return fail(j, 400, "ERANGE", "level must be 0..5 (critical..trace)");
  if (rc) p->level = (int)v;
  if ((rc = get_u64(qs, "mask", &v)) < 0 || (rc && v > UINT32_MAX))
    return fail(j, 400, "ERANGE", "mask must be a 32-bit team mask");
  if (rc) p->mask = (uint32_t)v;
  char list[MAX_THREADS_PARAM * 11 + 1];
  int n = qs ? mg_get_var(qs, strlen(qs), "threads", list, sizeof list) : -1;
  if (n == -2) return fail(j, 400, "ERANGE", "threads lists at most 256 thread ids");
  if (n >= 0) {
    char* save = NULL;
    for (char* t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      char* end;
      if (*t < '0' || *t > '9') return fail(j, 400, "EINVAL", "threads must be a comma list of thread ids");
      unsigned long long x = strtoull(t, &end, 10);
      if (*end || x > UINT32_MAX) return fail(j, 400, "EINVAL", "threads must be a comma list of thread ids");
      if (p->nthreads >= MAX_THREADS_PARAM)
        return fail(j, 400, "ERANGE", "threads lists at most 256 thread ids");
      p->threads[p->nthreads++] = (uint32_t)x;
    }
    if (!p->nthreads) return fail(j, 400, "EINVAL", "threads must name at least one thread id");
  }
  n = qs ? mg_get_var(qs, strlen(qs), "name", p->name, sizeof p->name) : -1;
  if (n == -2) return fail(j, 400, "ERANGE", "name must be at most 128 bytes");
  if (n < 0) p->name[0] = 0;
  return 0;
}

static int parse_limit(const char* qs, const char* key, uint64_t max, uint64_t def, uint64_t* out,
                       tmk__json* j, const char* msg) {
  uint64_t v;
  int rc = get_u64(qs, key, &v);
  if (rc < 0 || (rc && (v == 0 || v > max))) return fail(j, 400, "ERANGE", msg);
  *out = rc ? v : def;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Sliced zone walk: every zone overlapping [t0, t1] on the wanted threads exactly once, per
 * thread in start order (ties: outer zones first).
 * ------------------------------------------------------------------------------------------- */
typedef int (*zone_visit)(void* ud, const tmk_relay_zone* z);

typedef struct slice {
  tmk_relay_zone* z;
  size_t n;
  uint64_t a;
  int first;
} slice;

static int slice_cb(void* ud, const tmk_relay_zone* z) {
  slice* s = ud;
  if (!s->first && z->start_ns < s->a) return 0; /* an earlier slice had it */
  if (s->n < SLICE_LIMIT) s->z[s->n++] = *z;
  return 0;
}

static int by_start(const void* a, const void* b) {
  const tmk_relay_zone *x = a, *y = b;
  if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
  if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
  return 0;
}

typedef struct walk {
  tmk_relay* r;
  const char* id;
  uint64_t t0, t1;
  const params* p;
  zone_visit visit;
  void (*thread_start)(void* ud);
  void* ud;
  int complete; /* 0 when more than SLICE_LIMIT zones overlap one ns of a thread */
  uint64_t zones;
} walk;

typedef struct tlist {
  uint32_t* ids;
  size_t n, cap;
} tlist;

static int thread_cb(void* ud, uint32_t t, const char* name) {
  (void)name;
  tlist* l = ud;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    uint32_t* ids = realloc(l->ids, cap * sizeof *ids);
    if (!ids) return 1;
    l->ids = ids;
    l->cap = cap;
  }
  l->ids[l->n++] = t;
  return 0;
}

static int wanted_thread(const params* p, uint32_t t) {
  if (!p->nthreads) return 1;
  for (size_t i = 0; i < p->nthreads; i++)
    if (p->threads[i] == t) return 1;
  return 0;
}

/* Returns 0, TMK_ENOTFOUND or TMK_ENOMEM. */
static int walk_zones(walk* w) {
  tlist tl = {0};
  if (tmk_relay_query_threads(w->r, w->id, thread_cb, &tl) < 0) return TMK_ENOTFOUND;
  slice s = {malloc(SLICE_LIMIT * sizeof(tmk_relay_zone)), 0, 0, 0};
  if (!s.z) {
    free(tl.ids);
    return TMK_ENOMEM;
  }
  int rc = 0;
  w->complete = 1;
  for (size_t ti = 0; ti < tl.n && !rc; ti++) {
    if (!wanted_thread(w->p, tl.ids[ti])) continue;
    if (w->thread_start) w->thread_start(w->ud);
    uint64_t a = w->t0, step = w->t1 - w->t0; /* slice [a, a + step] */
    for (;;) {
      uint64_t b = (w->t1 - a < step) ? w->t1 : a + step;
      tmk_relay_query q = {a, b, (int64_t)tl.ids[ti], 0, SLICE_LIMIT, NULL};
      s.n = 0;
      s.a = a;
      s.first = a == w->t0;
      int n = tmk_relay_query_zones(w->r, w->id, &q, slice_cb, &s);
      if (n < 0) {
        rc = n;
        break;
      }
      if ((size_t)n >= SLICE_LIMIT && step > 0) { /* too many in one query: halve and retry */
        step /= 2;
        continue;
      }
      if ((size_t)n >= SLICE_LIMIT) w->complete = 0;
      qsort(s.z, s.n, sizeof *s.z, by_start);
      for (size_t i = 0; i < s.n; i++) w->visit(w->ud, &s.z[i]);
      w->zones += s.n;
      if (b >= w->t1) break;
      a = b + 1;
      if ((size_t)n < SLICE_LIMIT / 4 && step < UINT64_MAX / 2) step = step * 2 + 1;
    }
  }
  free(s.z);
  free(tl.ids);
  return rc;
}

/* Resolves the range: the session's stored time range unless t0 / t1 say otherwise. */
static int session_range(tmk_relay* r, const char* id, const params* p, uint64_t* t0,
                         uint64_t* t1) {
  tmk_relay_session_info* info = malloc(sizeof *info);
  if (!info) return TMK_ENOMEM;
  int rc = tmk_relay_session(r, id, info);
  if (rc == 0) {
    *t0 = p->have_t0 ? p->t0 : info->first_ns;
    *t1 = p->t1 ? p->t1 : info->last_ns;
    if (*t1 < *t0) *t1 = *t0;
  }
  free(info);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Call-site table: descriptors copied once, with the filter decided per site
 * ------------------------------------------------------------------------------------------- */
typedef struct acc {
  uint32_t site;
  int pass; /* passes the severity/team/name filter */
  uint8_t known, severity;
  uint32_t verbosity, line;
  char* name;
  char* file;
  uint64_t count, total, self, in_range, min, max;
  uint64_t exact[EXACT];
  uint32_t* hist; /* NBUCKETS counts, allocated past EXACT zones */
} acc;

typedef struct sites {
  acc* a;
  uint32_t n, cap;
  uint32_t* hash; /* index + 1, open addressing on site id */
  uint32_t hcap;
  const params* p;
  int oom;
} sites;

static int icontains(const char* hay, const char* needle) {
  size_t n = strlen(needle);
  if (!n) return 1;
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i]) {
      char a = hay[i], b = needle[i];
      if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
      if (b >= 'A' && b <= 'Z') b = (char)(b - 'A' + 'a');
      if (a != b) break;
      i++;
    }
    if (i == n) return 1;
  }
  return 0;
}

static acc* sites_find(sites* t, uint32_t id) {
  if (!t->hcap) return NULL;
  for (uint32_t h = tmk__mix32(id) & (t->hcap - 1);; h = (h + 1) & (t->hcap - 1)) {
    uint32_t k = t->hash[h];
    if (!k) return NULL;
    if (t->a[k - 1].site == id) return &t->a[k - 1];
  }
}

/* Adds a site (a descriptor, or a bare id seen only in zones). NULL on allocation failure. */
static acc* sites_add(sites* t, uint32_t id, int known, uint8_t sev, uint32_t verb, uint32_t line,
                      const char* name, const char* file) {
  if (t->n == t->cap) {
    uint32_t cap = t->cap ? t->cap * 2 : 256;
    acc* a = realloc(t->a, cap * sizeof *a);
    if (!a) return NULL;
    t->a = a;
    t->cap = cap;
  }
  if ((t->n + 1) * 2 > t->hcap) {
    uint32_t hcap = t->hcap ? t->hcap * 2 : 1024;
    uint32_t* h = calloc(hcap, sizeof *h);
    if (!h) return NULL;
    free(t->hash);
    t->hash = h;
    t->hcap = hcap;
    for (uint32_t i = 0; i < t->n; i++) {
      uint32_t k = tmk__mix32(t->a[i].site) & (hcap - 1);
      while (h[k]) k = (k + 1) & (hcap - 1);
      h[k] = i + 1;
    }
  }
  acc* a = &t->a[t->n];
  memset(a, 0, sizeof *a);
  a->site = id;
  a->known = (uint8_t)known;
  a->severity = sev;
  a->verbosity = verb;
  a->line = line;
  a->name = strdup(name ? name : "");
  a->file = strdup(file ? file : "");
  a->min = UINT64_MAX;
  if (!a->name || !a->file) {
    free(a->name);
    free(a->file);
    return NULL;
  }
  /* unknown sites pass severity and team filters, as in the live stream */
  a->pass = (!known || (sev <= t->p->level && (verb & t->p->mask) != 0)) &&
            icontains(a->name, t->p->name);
  uint32_t k = tmk__mix32(id) & (t->hcap - 1);
  while (t->hash[k]) k = (k + 1) & (t->hcap - 1);
  t->hash[k] = t->n + 1;
  t->n++;
  return a;
}

static int site_copy_cb(void* ud, const tmk_relay_site* s) {
  sites* t = ud;
  if (sites_find(t, s->id)) return 0;
  if (!sites_add(t, s->id, s->known, s->severity, s->verbosity, s->line, s->name, s->file)) {
    t->oom = 1;
    return 1;
  }
  return 0;
}

static acc* sites_get(sites* t, uint32_t id) {
  acc* a = sites_find(t, id);
  if (!a) { /* a site that arrived after the table was copied */
    a = sites_add(t, id, 0, 0, 0, 0, "", "");
    if (!a) t->oom = 1;
  }
  return a;
}

static void sites_free(sites* t) {
  for (uint32_t i = 0; i < t->n; i++) {
    free(t->a[i].name);
    free(t->a[i].file);
    free(t->a[i].hist);
  }
  free(t->a);
  free(t->hash);
}

/* ---------------------------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------------------------- */
typedef struct stats_ctx {
  sites t;
  uint64_t t0, t1;
  uint32_t active;   /* sites with zones (bounded by MAX_SITES) */
  int too_many;
  /* self time: per depth, the enclosing zone's site (index + 1: the table may grow while
   * walking) and extent on the current thread */
  uint32_t stack[256];
  uint64_t s_start[256], s_end[256];
} stats_ctx;

static void stats_thread_start(void* ud) {
  stats_ctx* c = ud;
  memset(c->stack, 0, sizeof c->stack);
}

static uint64_t clip(uint64_t s, uint64_t d, uint64_t t0, uint64_t t1) {
  uint64_t e = s + d;
  if (e < s) e = UINT64_MAX;
  uint64_t a = s > t0 ? s : t0, b = e < t1 ? e : t1;
  return b > a ? b - a : 0;
}

static int stats_visit(void* ud, const tmk_relay_zone* z) {
  stats_ctx* c = ud;
  if (c->too_many || c->t.oom) return 0;
  acc* a = sites_get(&c->t, z->site);
  if (!a) return 0;
  if (!(z->flags & TMK_RELAY_ZONE_MARKER) && z->depth < 256) {
    uint32_t d = z->depth;
    if (d > 0 && c->stack[d - 1] && z->start_ns >= c->s_start[d - 1] &&
        z->start_ns + z->dur_ns <= c->s_end[d - 1]) {
      acc* parent = &c->t.a[c->stack[d - 1] - 1];
      if (parent->pass) parent->self -= z->dur_ns; /* parent added first; clamped when written */
    }
    c->stack[d] = (uint32_t)(a - c->t.a) + 1;
    c->s_start[d] = z->start_ns;
    c->s_end[d] = z->start_ns + z->dur_ns;
  }
  if (!a->pass) return 0;
  if (a->count == 0 && ++c->active > MAX_SITES) {
    c->too_many = 1;
    return 0;
  }
  uint64_t d = z->dur_ns;
  if (a->count < EXACT) a->exact[a->count] = d;
  else {
    if (!a->hist) {
      a->hist = calloc(NBUCKETS, sizeof *a->hist);
      if (!a->hist) {
        c->t.oom = 1;
        return 0;
      }
      for (int i = 0; i < EXACT; i++) a->hist[bucket_of(a->exact[i])]++;
    }
    a->hist[bucket_of(d)]++;
  }
  a->count++;
  a->total += d;
  a->self += d;
  a->in_range += clip(z->start_ns, d, c->t0, c->t1);
  if (d < a->min) a->min = d;
  if (d > a->max) a->max = d;
  return 0;
}

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

/* The k-th smallest duration (0-based), exact for up to EXACT zones, else from the histogram. */
static uint64_t kth(acc* a, uint64_t k) {
  if (a->count <= EXACT) {
    uint64_t v[EXACT];
    memcpy(v, a->exact, a->count * sizeof v[0]);
    qsort(v, a->count, sizeof v[0], cmp_u64);
    return v[k];
  }
  uint64_t seen = 0;
  for (unsigned b = 0; b < NBUCKETS; b++) {
    seen += a->hist[b];
    if (seen > k) {
      uint64_t m = bucket_mid(b);
      return m < a->min ? a->min : m > a->max ? a->max : m;
    }
  }
  return a->max;
}

static int by_total(const void* x, const void* y) {
  const acc *a = *(acc* const*)x, *b = *(acc* const*)y;
  if (a->total != b->total) return a->total > b->total ? -1 : 1;
  return a->site < b->site ? -1 : a->site > b->site;
}

/* Takes one of MAX_RUNNING places, waiting up to WAIT_MS for one (this civetweb worker only). */
static int begin_running(tmk_relay* r, tmk__json* out) {
  for (int waited = 0;; waited += 10) {
    if (atomic_fetch_add(&r->analyses, 1) < MAX_RUNNING) return 0;
    atomic_fetch_sub(&r->analyses, 1);
    if (waited >= WAIT_MS) break;
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return fail(out, 503, "EAGAIN", "too many analyses are running: try again in a moment");
}

int tmk__analysis_stats_json(tmk_relay* r, const char* id, const char* qs, tmk__json* out) {
  params p;
  uint64_t limit;
  int st = parse_common(qs, &p, out);
  if (st) return st;
  if ((st = parse_limit(qs, "limit", 10000, 1000, &limit, out, "limit must be 1..10000 rows")))
    return st;
  stats_ctx* c = calloc(1, sizeof *c);
  if (!c) return fail(out, 500, "ENOMEM", "out of memory");
  c->t.p = &p;
  if ((st = begin_running(r, out))) {
    free(c);
    return st;
  }
  int rc = session_range(r, id, &p, &c->t0, &c->t1);
  if (rc == 0 && tmk_relay_query_sites(r, id, site_copy_cb, &c->t) < 0) rc = TMK_ENOTFOUND;
  walk w = {r, id, c->t0, c->t1, &p, stats_visit, stats_thread_start, c, 1, 0};
  if (rc == 0) rc = walk_zones(&w);
  atomic_fetch_sub(&r->analyses, 1);
  if (rc == 0 && c->t.oom) rc = TMK_ENOMEM;
  if (rc < 0 || c->too_many) {
    sites_free(&c->t);
    free(c);
    if (rc == TMK_ENOTFOUND) return fail(out, 404, "ENOTFOUND", "no such session");
    if (rc < 0) return fail(out, 500, "ENOMEM", "out of memory");
    return fail(out, 400, "ERANGE",
                "the range holds more than 4096 call sites: narrow it with name=, threads=, "
                "level= or mask=");
  }
  acc** rows = malloc((c->t.n ? c->t.n : 1) * sizeof *rows);
  if (!rows) {
    sites_free(&c->t);
    free(c);
    return fail(out, 500, "ENOMEM", "out of memory");
  }
  size_t nrows = 0;
  for (uint32_t i = 0; i < c->t.n; i++)
    if (c->t.a[i].pass && c->t.a[i].count) rows[nrows++] = &c->t.a[i];
  qsort(rows, nrows, sizeof *rows, by_total);
  uint64_t range = c->t1 - c->t0;
  tmk__json_begin_obj(out);
  tmk__json_key(out, "t0_ns");
  tmk__json_u64(out, c->t0);
  tmk__json_key(out, "t1_ns");
  tmk__json_u64(out, c->t1);
  tmk__json_key(out, "range_ns");
  tmk__json_u64(out, range);
  tmk__json_key(out, "zones");
  tmk__json_u64(out, w.zones);
  tmk__json_key(out, "complete");
  tmk__json_bool(out, w.complete);
  tmk__json_key(out, "sites");
  tmk__json_begin_arr(out);
  size_t shown = nrows < limit ? nrows : (size_t)limit;
  for (size_t i = 0; i < shown; i++) {
    acc* a = rows[i];
    tmk__json_begin_obj(out);
    tmk__json_key(out, "site");
    tmk__json_u64(out, a->site);
    tmk__json_key(out, "name");
    tmk__json_cstr(out, a->name);
    tmk__json_key(out, "file");
    tmk__json_cstr(out, a->file);
    tmk__json_key(out, "line");
    tmk__json_u64(out, a->line);
    tmk__json_key(out, "count");
    tmk__json_u64(out, a->count);
    tmk__json_key(out, "total_ns");
    tmk__json_u64(out, a->total);
    tmk__json_key(out, "self_ns");
    tmk__json_u64(out, a->self > a->total ? 0 : a->self);
    tmk__json_key(out, "mean_ns");
    tmk__json_f64(out, (double)a->total / (double)a->count);
    tmk__json_key(out, "median_ns");
    tmk__json_u64(out, kth(a, a->count / 2));
    tmk__json_key(out, "p95_ns");
    uint64_t k95 = (uint64_t)((double)a->count * 0.95);
    tmk__json_u64(out, kth(a, k95 < a->count ? k95 : a->count - 1));
    tmk__json_key(out, "min_ns");
    tmk__json_u64(out, a->min);
    tmk__json_key(out, "max_ns");
    tmk__json_u64(out, a->max);
    tmk__json_key(out, "range_pct");
    tmk__json_f64(out, range ? 100.0 * (double)a->in_range / (double)range : 0.0);
    tmk__json_end_obj(out);
  }
  tmk__json_end_arr(out);
  tmk__json_key(out, "count");
  tmk__json_u64(out, shown);
  tmk__json_key(out, "truncated");
  tmk__json_bool(out, shown < nrows);
  tmk__json_end_obj(out);
  free(rows);
  sites_free(&c->t);
  free(c);
  return out->oom ? fail(out, 500, "ENOMEM", "out of memory") : 200;
}

/* ---------------------------------------------------------------------------------------------
 * Occurrences of one site: the slowest (or earliest) `limit`, and a histogram of all of them
 * ------------------------------------------------------------------------------------------- */
typedef struct occ_ctx {
  uint32_t site;
  int pass2, by_time;
  uint64_t count, min, max, total;
  /* pass 2 */
  uint64_t bins;
  double lmin, lspan;  /* log2 of the histogram's lower edge, and of max/min */
  uint64_t* counts;
  tmk_relay_zone* rows; /* by_time: in order; else a min-heap on duration */
  size_t nrows, cap;
} occ_ctx;

static double log2_of(uint64_t v) { return v ? log2((double)v) : 0.0; }

static size_t bin_of(const occ_ctx* c, uint64_t d) {
  if (c->lspan <= 0) return 0;
  double x = (log2_of(d ? d : 1) - c->lmin) / c->lspan * (double)c->bins;
  if (x < 0) return 0;
  size_t b = (size_t)x;
  return b >= c->bins ? c->bins - 1 : b;
}

static void heap_push(occ_ctx* c, const tmk_relay_zone* z) {
  tmk_relay_zone* h = c->rows;
  if (c->nrows < c->cap) {
    size_t i = c->nrows++;
    h[i] = *z;
    while (i > 0) {
      size_t up = (i - 1) / 2;
      if (h[up].dur_ns <= h[i].dur_ns) break;
      tmk_relay_zone t = h[up];
      h[up] = h[i];
      h[i] = t;
      i = up;
    }
    return;
  }
  if (z->dur_ns <= h[0].dur_ns) return;
  h[0] = *z;
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < c->nrows && h[l].dur_ns < h[m].dur_ns) m = l;
    if (r < c->nrows && h[r].dur_ns < h[m].dur_ns) m = r;
    if (m == i) break;
    tmk_relay_zone t = h[m];
    h[m] = h[i];
    h[i] = t;
    i = m;
  }
}

static int occ_visit(void* ud, const tmk_relay_zone* z) {
  occ_ctx* c = ud;
  if (z->site != c->site) return 0;
  if (!c->pass2) {
    c->count++;
    c->total += z->dur_ns;
    if (z->dur_ns < c->min) c->min = z->dur_ns;
    if (z->dur_ns > c->max) c->max = z->dur_ns;
    return 0;
  }
  c->counts[bin_of(c, z->dur_ns)]++;
  if (c->by_time) {
    if (c->nrows < c->cap) c->rows[c->nrows++] = *z;
  } else {
    heap_push(c, z);
  }
  return 0;
}

static int by_dur_desc(const void* x, const void* y) {
  const tmk_relay_zone *a = x, *b = y;
  if (a->dur_ns != b->dur_ns) return a->dur_ns > b->dur_ns ? -1 : 1;
  return a->start_ns < b->start_ns ? -1 : a->start_ns > b->start_ns;
}

int tmk__analysis_occurrences_json(tmk_relay* r, const char* id, const char* qs,
                                   tmk__json* out) {
  params p;
  int st = parse_common(qs, &p, out);
  if (st) return st;
  uint64_t v;
  int rc = get_u64(qs, "site", &v);
  if (rc <= 0 || v > UINT32_MAX)
    return fail(out, 400, "EINVAL", "site must be a call-site id (from …/sites or …/stats)");
  p.site = v;
  if ((st = parse_limit(qs, "limit", 100000, 1000, &p.limit, out, "limit must be 1..100000 rows")))
    return st;
  if ((st = parse_limit(qs, "bins", 1000, 64, &p.bins, out, "bins must be 1..1000")))
    return st;
  char sort[16] = "";
  int ns = qs ? mg_get_var(qs, strlen(qs), "sort", sort, sizeof sort) : -1;
  if (ns == -2) return fail(out, 400, "EINVAL", "sort must be duration or time");
  if (ns >= 0) {
    if (strcmp(sort, "time") == 0) p.by_time = 1;
    else if (strcmp(sort, "duration") != 0)
      return fail(out, 400, "EINVAL", "sort must be duration or time");
  }
  occ_ctx c;
  memset(&c, 0, sizeof c);
  c.site = (uint32_t)p.site;
  c.by_time = p.by_time;
  c.min = UINT64_MAX;
  uint64_t t0 = 0, t1 = 0;
  if ((st = begin_running(r, out))) return st;
  rc = session_range(r, id, &p, &t0, &t1);
  walk w = {r, id, t0, t1, &p, occ_visit, NULL, &c, 1, 0};
  if (rc == 0) rc = walk_zones(&w);
  if (rc == 0) {
    c.pass2 = 1;
    c.bins = c.count ? p.bins : 0;
    c.lmin = log2_of(c.min ? c.min : 1);
    c.lspan = log2_of(c.max ? c.max : 1) - c.lmin;
    if (c.lspan <= 0) c.bins = c.count ? 1 : 0;
    c.cap = (size_t)p.limit;
    c.counts = calloc(c.bins ? c.bins : 1, sizeof *c.counts);
    c.rows = malloc(c.cap * sizeof *c.rows);
    if (!c.counts || !c.rows) rc = TMK_ENOMEM;
    else if (c.count) {
      walk w2 = {r, id, t0, t1, &p, occ_visit, NULL, &c, 1, 0};
      rc = walk_zones(&w2);
      if (!w2.complete) w.complete = 0;
    }
  }
  atomic_fetch_sub(&r->analyses, 1);
  if (rc < 0) {
    free(c.counts);
    free(c.rows);
    if (rc == TMK_ENOTFOUND) return fail(out, 404, "ENOTFOUND", "no such session");
    return fail(out, 500, "ENOMEM", "out of memory");
  }
  if (!c.by_time) qsort(c.rows, c.nrows, sizeof *c.rows, by_dur_desc);
  tmk__json_begin_obj(out);
  tmk__json_key(out, "site");
  tmk__json_u64(out, c.site);
  tmk__json_key(out, "t0_ns");
  tmk__json_u64(out, t0);
  tmk__json_key(out, "t1_ns");
  tmk__json_u64(out, t1);
  tmk__json_key(out, "total");
  tmk__json_u64(out, c.count);
  tmk__json_key(out, "total_ns");
  tmk__json_u64(out, c.total);
  tmk__json_key(out, "min_ns");
  tmk__json_u64(out, c.count ? c.min : 0);
  tmk__json_key(out, "max_ns");
  tmk__json_u64(out, c.max);
  tmk__json_key(out, "complete");
  tmk__json_bool(out, w.complete);
  tmk__json_key(out, "histogram");
  tmk__json_begin_obj(out);
  tmk__json_key(out, "edges_ns");
  tmk__json_begin_arr(out);
  for (uint64_t i = 0; c.bins && i <= c.bins; i++) {
    double e = c.lspan > 0 ? exp2(c.lmin + c.lspan * (double)i / (double)c.bins)
                           : (double)(i ? c.max + 1 : c.min);
    tmk__json_f64(out, i == 0 ? (double)c.min : i == c.bins ? (double)c.max : e);
  }
  tmk__json_end_arr(out);
  tmk__json_key(out, "counts");
  tmk__json_begin_arr(out);
  for (uint64_t i = 0; i < c.bins; i++) tmk__json_u64(out, c.counts[i]);
  tmk__json_end_arr(out);
  tmk__json_end_obj(out);
  tmk__json_key(out, "columns");
  static const char cols[] = "[\"start_ns\",\"dur_ns\",\"thread\",\"depth\"]";
  tmk__json_raw(out, cols, sizeof cols - 1);
  out->need_comma = 1;
  tmk__json_key(out, "occurrences");
  tmk__json_begin_arr(out);
  for (size_t i = 0; i < c.nrows; i++) {
    tmk__json_begin_arr(out);
    tmk__json_u64(out, c.rows[i].start_ns);
    tmk__json_u64(out, c.rows[i].dur_ns);
    tmk__json_u64(out, c.rows[i].thread);
    tmk__json_u64(out, c.rows[i].depth);
    tmk__json_end_arr(out);
  }
  tmk__json_end_arr(out);
  tmk__json_key(out, "count");
  tmk__json_u64(out, c.nrows);
  tmk__json_key(out, "truncated");
  tmk__json_bool(out, c.nrows < c.count);
  tmk__json_end_obj(out);
  free(c.counts);
  free(c.rows);
  return out->oom ? fail(out, 500, "ENOMEM", "out of memory") : 200;
}
