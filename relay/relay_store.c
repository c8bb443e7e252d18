/* relay_store.c — the per-session store: decodes DATA packets with protocol/ and keeps zones and
 * events in per-thread chunk series indexed by time, plus site, thread and team tables, a memory
 * budget (oldest chunks evicted first, counted) and the live broadcast ring for followers. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "relay_core.h"

/* ---------------------------------------------------------------------------------------------
 * Layout
 * ------------------------------------------------------------------------------------------- */
/* A series' zone chunks grow from MIN_ZONE_CHUNK_BYTES by doubling up to ZONE_CHUNK_CAP bytes
 * of zones (1352 narrow or 1014 wide records), which with the chunk header is a slab block
 * (relay_slab.c). Both are multiples of 48, so that either kind of record fills them exactly. */
#define ZONE_CHUNK_CAP (((TMK__SLAB_BLOCK - (uint32_t)sizeof(chunk)) / 48u) * 48u)
#define MIN_ZONE_CHUNK_BYTES 192u /* 16 narrow zones (sparse zones, 2^33 ticks apart, each need
                                     a chunk) */
/* Stores with at least this budget that already hold SLAB_AFTER bytes take their full zone
 * chunks from slabs. What the slabs hold beyond the chunks (not counted in the budget: the
 * current slab's unused rest, < 2 MiB, and one emptied spare slab, 2 MiB) is then at most 4 MiB,
 * small beside the budget (>= 64 MiB) and a busy store. */
#define SLAB_MIN_BUDGET ((size_t)64 << 20)
#define SLAB_AFTER ((size_t)1 << 20)
#define EVENT_CHUNK_BYTES 8192
#define MIN_EVENT_CHUNK_BYTES 1536 /* holds the largest event (a 1024-byte message) */
#define MAX_THREADS 4096
#define MAX_SITES 65536
#define MAX_MARKER_DEPTH 64
#define LIVE_RING 16384
#define MIN_BUDGET (1u << 20)
/* A drop of an orphaned subtree goes on into the next packet only while fewer zones than this
 * were dropped (PROTOCOL.md §5.3.1: the reference agent splits trees from batches of at most
 * 1024 zones; a zone that never ends must not hide its children for good). */
#define ORPHAN_CHAIN_MAX 4096
/* How far back (zones) the store looks for the parent of a tree that follows a lost packet. */
#define ORPHAN_PARENT_SCAN 64

/* A stored zone is a record of 12 bytes (narrow, tmk__tap_nrec) or 16 (wide, tmk__tap_zrec),
 * the same kind throughout a chunk (relay_core.h; the history tap receives runs of them as they
 * are). Start is relative to the chunk's base tick (a chunk ends when a zone does not fit in 32
 * signed bits). A narrow record holds a duration below 2^32 ticks, a site below 2^20 and 4 bits
 * of flags: nearly every zone. A zone that does not fit goes into a wide chunk (48 bits of
 * duration, 32 of site, 8 of flags), and the zones after it too until that chunk is full. */
typedef tmk__tap_zrec zrec;
typedef tmk__tap_nrec nrec;
#define ZN ((uint32_t)sizeof(nrec))
#define ZW ((uint32_t)sizeof(zrec))

/* A stored event: this header, then an 8-byte value for plots, then text; padded to 4 bytes. */
typedef struct erec {
  uint8_t type;
  uint8_t severity;
  uint8_t is_double;
  uint8_t pad;
  uint32_t site;
  uint32_t verbosity;
  uint32_t text_len;
  int32_t t_off;
} erec;

enum { CK_ZONES = 1, CK_EVENTS = 2 };

typedef struct chunk chunk;
typedef struct series {
  chunk* head;
  chunk* tail;
} series;

struct chunk {
  chunk* gnext;  /* global allocation order, for eviction */
  chunk* snext;  /* next in its series */
  uint32_t owner; /* index of its thread in st->threads (an index: that array moves as it grows) */
  uint64_t serial; /* allocation number: increases along a series, so query cursors and
                      resumable scans (tmk__store_zone_scan) resume by it */
  uint64_t base; /* ticks */
  uint64_t tmin, tmax;
  uint32_t count, used, cap;
  uint16_t kind;
  uint16_t rec; /* zones: bytes a record (ZN or ZW) */
  tmk__slab* slab; /* the slab holding it, NULL when malloc'd */
  _Alignas(8) uint8_t data[];
};

typedef struct marker_open {
  uint32_t site;
  uint64_t time;
} marker_open;

typedef struct thread {
  uint32_t id;
  char* name;
  series zones, events;
  chunk* zprev; /* the zone chunk before zones.tail (NULL when none or evicted) */
  marker_open markers[MAX_MARKER_DEPTH];
  uint32_t nmarkers;
  /* Orphaned subtree being dropped (orphan_depth > 0): trees at depth >= orphan_depth are not
   * stored until one at a lower depth arrives (check_run). */
  uint32_t orphan_depth;
  uint64_t orphan_seq;     /* the DATA packet the drop was last active in */
  uint64_t orphan_dropped; /* zones dropped since it began */
  uint64_t pkt_seq1;       /* seq + 1 of the last packet with zones of this thread (0: none) */
} thread;

typedef struct site {
  uint32_t id;
  int known;
  uint8_t kind, severity;
  uint32_t verbosity, color, line;
  char* name;
  char* file;
} site;

struct tmk__store {
  size_t budget, mem;
  tmk__slabs slabs;
  uint64_t freq;
  chunk* ghead;
  chunk* gtail;
  thread* threads;
  uint32_t nthreads, threads_cap;
  uint32_t* thread_hash; /* index+1, open addressing */
  uint32_t thread_hash_cap;
  uint32_t last_thread;  /* cache */
  site* sites;
  uint32_t nsites, sites_cap;
  uint32_t* site_hash;
  uint32_t site_hash_cap;
  uint32_t unresolved;
  uint32_t site_cache[256]; /* ids known to be in the site table, direct-mapped */
  char* teams[TMK_PROTO_MAX_TEAMS];
  uint64_t drops[8];
  uint64_t records, zones, malformed, evicted, packets, orphans;
  uint64_t next_seq; /* DATA seq expected next (one past the highest stored) */
  uint64_t tmin, tmax;
  int have_time;
  uint64_t clock_ticks, clock_unix_ns;
  uint64_t next_serial;   /* serial of the last chunk allocated */
  tmk__store_tap tap;     /* history sink (fn 0: none) */
  /* one decoded packet, before it is stored (decode_all): its records in order as items, a run
   * of zones of one thread being one item */
  struct dec_item* items;
  size_t items_cap;
  tmk_proto_record* recs; /* the records that are not zones */
  size_t recs_cap;
  tmk_proto_zone* zbuf; /* the zones */
  size_t zbuf_cap;
  uint8_t* roots; /* check_run: 1 for a zone whose parent is not in its run */
  size_t roots_cap;
  /* live ring */
  tmk_relay_live_item* ring;
  uint64_t ring_w;
  uint32_t followers;
};


tmk__store* tmk__store_new(size_t budget) {
  tmk__store* st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->budget = budget < MIN_BUDGET ? MIN_BUDGET : budget;
  st->mem = sizeof *st;
  return st;
}

static void free_chunks(tmk__store* st) {
  chunk* c = st->ghead;
  while (c) {
    chunk* n = c->gnext;
    if (!c->slab) free(c);
    c = n;
  }
  st->ghead = st->gtail = NULL;
  tmk__slab_free_all(&st->slabs);
}

void tmk__store_free(tmk__store* st) {
  if (!st) return;
  free_chunks(st);
  for (uint32_t i = 0; i < st->nthreads; i++) free(st->threads[i].name);
  for (uint32_t i = 0; i < st->nsites; i++) {
    free(st->sites[i].name);
    free(st->sites[i].file);
  }
  for (int i = 0; i < TMK_PROTO_MAX_TEAMS; i++) free(st->teams[i]);
  free(st->threads);
  free(st->thread_hash);
  free(st->sites);
  free(st->site_hash);
  free(st->ring);
  free(st->items);
  free(st->recs);
  free(st->zbuf);
  free(st->roots);
  free(st);
}

void tmk__store_set_freq(tmk__store* st, uint64_t freq) { st->freq = freq; }

void tmk__store_set_tap(tmk__store* st, const tmk__store_tap* tap) {
  if (tap) st->tap = *tap;
  else memset(&st->tap, 0, sizeof st->tap);
}

static uint64_t to_ns(const tmk__store* st, uint64_t ticks) {
  return st->freq ? tmk_proto_ticks_to_ns(ticks, st->freq) : ticks;
}

/* ns -> ticks, approximately (only used to prune chunks; exact checks are done in ns). */
static uint64_t to_ticks_approx(const tmk__store* st, uint64_t ns, int up) {
  if (!st->freq) return ns;
  long double t = (long double)ns * (long double)st->freq / 1e9L;
  if (up) {
    t = t * (1.0L + 1e-9L) + 2.0L;
    if (t >= 18446744073709551615.0L) return UINT64_MAX;
    return (uint64_t)t;
  }
  t = t * (1.0L - 1e-9L) - 2.0L;
  return t <= 0 ? 0 : (uint64_t)t;
}

static int make_room(tmk__store* st, size_t need);

static char* dup_str(tmk__store* st, const char* p, size_t n) {
  if (make_room(st, n + 1) != 0) return NULL;
  char* s = malloc(n + 1);
  if (!s) return NULL;
  if (n) memcpy(s, p, n);
  s[n] = 0;
  st->mem += n + 1;
  return s;
}

/* ---------------------------------------------------------------------------------------------
 * Hash tables (id -> index + 1), linear probing, power-of-two capacity
 * ------------------------------------------------------------------------------------------- */
static void hash_put(uint32_t* tab, uint32_t cap, uint32_t id, uint32_t index1) {
  uint32_t h = tmk__mix32(id) & (cap - 1);
  while (tab[h]) h = (h + 1) & (cap - 1);
  tab[h] = index1;
}

static int hash_grow(tmk__store* st, uint32_t** tab, uint32_t* cap, uint32_t n,
                     uint32_t (*key_of)(const tmk__store*, uint32_t)) {
  uint32_t ncap = *cap ? *cap * 2 : 64;
  if (make_room(st, (size_t)(ncap - *cap) * sizeof **tab) != 0) return TMK_ENOSPC;
  uint32_t* nt = calloc(ncap, sizeof *nt);
  if (!nt) return TMK_ENOMEM;
  for (uint32_t i = 0; i < n; i++) hash_put(nt, ncap, key_of(st, i), i + 1);
  st->mem += (size_t)(ncap - *cap) * sizeof *nt;
  free(*tab);
  *tab = nt;
  *cap = ncap;
  return 0;
}

/* Makes room for entry n of an array indexed by a hash table (threads, sites): grows the array
 * (doubling from `first`) and the table (kept at most half full). Returns 0 or TMK_ENOMEM. */
static int table_room(tmk__store* st, void** arr, uint32_t* arr_cap, size_t elem, uint32_t first,
                      uint32_t n, uint32_t** tab, uint32_t* tab_cap,
                      uint32_t (*key_of)(const tmk__store*, uint32_t)) {
  if (n == *arr_cap) {
    uint32_t ncap = *arr_cap ? *arr_cap * 2 : first;
    if (make_room(st, (size_t)(ncap - *arr_cap) * elem) != 0) return TMK_ENOSPC;
    void* na = realloc(*arr, ncap * elem);
    if (!na) return TMK_ENOMEM;
    st->mem += (size_t)(ncap - *arr_cap) * elem;
    *arr = na;
    *arr_cap = ncap;
  }
  if ((n + 1) * 2 > *tab_cap) return hash_grow(st, tab, tab_cap, n, key_of);
  return 0;
}

static uint32_t thread_key(const tmk__store* st, uint32_t i) { return st->threads[i].id; }
static uint32_t site_key(const tmk__store* st, uint32_t i) { return st->sites[i].id; }

/* The one lookup of both tables: index + 1 of the entry with `id`, 0 when absent. */
static inline uint32_t hash_find(const tmk__store* st, const uint32_t* tab, uint32_t cap,
                                 uint32_t id, uint32_t (*key_of)(const tmk__store*, uint32_t)) {
  if (!cap) return 0;
  uint32_t h = tmk__mix32(id) & (cap - 1);
  while (tab[h]) {
    if (key_of(st, tab[h] - 1) == id) return tab[h];
    h = (h + 1) & (cap - 1);
  }
  return 0;
}

static thread* find_thread(const tmk__store* st, uint32_t id) {
  uint32_t i = hash_find(st, st->thread_hash, st->thread_hash_cap, id, thread_key);
  return i ? &st->threads[i - 1] : NULL;
}

static thread* get_thread(tmk__store* st, uint32_t id) {
  if (st->last_thread < st->nthreads && st->threads[st->last_thread].id == id)
    return &st->threads[st->last_thread];
  thread* t = find_thread(st, id);
  if (t) {
    st->last_thread = (uint32_t)(t - st->threads);
    return t;
  }
  if (st->nthreads >= MAX_THREADS ||
      table_room(st, (void**)&st->threads, &st->threads_cap, sizeof *t, 8, st->nthreads,
                 &st->thread_hash, &st->thread_hash_cap, thread_key))
    return NULL;
  t = &st->threads[st->nthreads];
  memset(t, 0, sizeof *t);
  t->id = id;
  hash_put(st->thread_hash, st->thread_hash_cap, id, ++st->nthreads);
  st->last_thread = st->nthreads - 1;
  return t;
}

static site* find_site(const tmk__store* st, uint32_t id) {
  uint32_t i = hash_find(st, st->site_hash, st->site_hash_cap, id, site_key);
  return i ? &st->sites[i - 1] : NULL;
}

/* Returns the site entry, creating an unresolved one; NULL when the table is full. */
static site* get_site(tmk__store* st, uint32_t id) {
  site* s = find_site(st, id);
  if (s) return s;
  if (st->nsites >= MAX_SITES ||
      table_room(st, (void**)&st->sites, &st->sites_cap, sizeof *s, 64, st->nsites,
                 &st->site_hash, &st->site_hash_cap, site_key))
    return NULL;
  s = &st->sites[st->nsites];
  memset(s, 0, sizeof *s);
  s->id = id;
  hash_put(st->site_hash, st->site_hash_cap, id, ++st->nsites);
  st->unresolved++;
  return s;
}

static inline void reference_site(tmk__store* st, uint32_t id) {
  if (!id || st->site_cache[id & 255] == id) return;
  if (get_site(st, id)) st->site_cache[id & 255] = id;
}

/* ---------------------------------------------------------------------------------------------
 * Chunks and the memory budget
 * ------------------------------------------------------------------------------------------- */
static size_t chunk_size(const chunk* c) { return sizeof *c + c->cap; }

/* Evicts the oldest chunk of the session. Returns 0 when there is nothing left to evict. */
static int evict_one(tmk__store* st) {
  chunk* c = st->ghead;
  if (!c) return 0;
  st->ghead = c->gnext;
  if (!st->ghead) st->gtail = NULL;
  thread* t = &st->threads[c->owner];
  series* s = c->kind == CK_ZONES ? &t->zones : &t->events;
  /* Chunks of one series are allocated in order, so the globally oldest is its series' head. */
  if (s->head == c) {
    s->head = c->snext;
    if (!s->head) s->tail = NULL;
  }
  if (t->zprev == c) t->zprev = NULL;
  st->evicted += c->count;
  st->mem -= chunk_size(c);
  if (c->slab) tmk__slab_free(&st->slabs, c->slab);
  else free(c);
  return 1;
}

/* Evicts the oldest chunks until `need` more bytes fit the budget. Returns 0, or TMK_ENOSPC
 * when they do not fit even with every chunk gone (the tables and strings fill the budget:
 * what needed the room is refused and counted). */
static int make_room(tmk__store* st, size_t need) {
  while (st->mem + need > st->budget && evict_one(st)) {
  }
  return st->mem + need > st->budget ? TMK_ENOSPC : 0;
}

static chunk* new_chunk(tmk__store* st, thread* t, uint32_t kind, uint32_t cap, uint64_t base,
                        uint32_t rec) {
  size_t need = sizeof(chunk) + cap;
  make_room(st, need); /* a chunk is always allowed: it is what eviction frees next */
  tmk__slab* from = NULL;
  chunk* c = NULL;
  if (kind == CK_ZONES && cap == ZONE_CHUNK_CAP && st->budget >= SLAB_MIN_BUDGET &&
      st->mem >= SLAB_AFTER)
    c = tmk__slab_alloc(&st->slabs, need, &from);
  if (!c) c = malloc(need);
  if (!c) return NULL;
  memset(c, 0, sizeof *c);
  c->slab = from;
  series* s = kind == CK_ZONES ? &t->zones : &t->events;
  c->owner = (uint32_t)(t - st->threads);
  c->serial = ++st->next_serial;
  c->kind = (uint16_t)kind;
  c->rec = (uint16_t)rec;
  c->cap = cap;
  c->base = base;
  c->tmin = UINT64_MAX;
  c->tmax = 0;
  if (s->tail) s->tail->snext = c;
  else s->head = c;
  if (kind == CK_ZONES) t->zprev = s->tail;
  s->tail = c;
  if (st->gtail) st->gtail->gnext = c;
  else st->ghead = c;
  st->gtail = c;
  st->mem += need;
  return c;
}

static int fits_off(uint64_t t, uint64_t base) {
  int64_t d = (int64_t)(t - base);
  return d >= INT32_MIN && d <= INT32_MAX;
}

static void note_time(tmk__store* st, uint64_t t0, uint64_t t1) {
  if (!st->have_time) {
    st->tmin = t0;
    st->tmax = t1;
    st->have_time = 1;
    return;
  }
  if (t0 < st->tmin) st->tmin = t0;
  if (t1 > st->tmax) st->tmax = t1;
}

/* ---------------------------------------------------------------------------------------------
 * Live ring
 * ------------------------------------------------------------------------------------------- */
static tmk_relay_live_item* live_slot(tmk__store* st) {
  tmk_relay_live_item* it = &st->ring[st->ring_w % LIVE_RING];
  st->ring_w++;
  return it;
}

static void live_zone(tmk__store* st, uint32_t tid, uint64_t start, uint64_t dur, uint32_t site_id,
                      uint32_t depth, uint32_t flags) {
  tmk_relay_live_item* it = live_slot(st);
  memset(it, 0, sizeof *it);
  it->is_zone = 1;
  it->zone.start_ns = to_ns(st, start);
  it->zone.dur_ns = to_ns(st, start + dur) - it->zone.start_ns;
  it->zone.thread = tid;
  it->zone.site = site_id;
  it->zone.depth = depth > 255 ? 255 : depth; /* as stored: live and stored views agree */
  it->zone.flags = flags;
}

static void live_event(tmk__store* st, const tmk_relay_event* e) {
  tmk_relay_live_item* it = live_slot(st);
  memset(it, 0, sizeof *it);
  it->event = *e;
  size_t n = e->text_len < sizeof it->text - 1 ? e->text_len : sizeof it->text - 1;
  /* a text cut short ends before a character, not inside one (a UTF-8 continuation byte after
   * the cut belongs to the character the cut would split) */
  if (n < e->text_len)
    while (n > 0 && ((unsigned char)e->text[n] & 0xC0) == 0x80) n--;
  if (n) memcpy(it->text, e->text, n);
  it->text[n] = 0;
  it->text_cut = n < e->text_len;
  it->event.text = NULL; /* readers point it at their copy's text */
  it->event.text_len = (uint32_t)n;
}

int tmk__store_live_attach(tmk__store* st, uint64_t* cursor) {
  if (!st->ring) {
    st->ring = malloc(LIVE_RING * sizeof *st->ring);
    if (!st->ring) return TMK_ENOMEM;
    st->mem += LIVE_RING * sizeof *st->ring;
  }
  st->followers++;
  *cursor = st->ring_w;
  return 0;
}

static int cut_order(const void* a, const void* b) {
  const struct tmk__cut_tail *x = a, *y = b;
  return x->serial < y->serial ? -1 : x->serial > y->serial;
}

tmk_relay_cut* tmk__store_cut(const tmk__store* st) {
  tmk_relay_cut* k = malloc(sizeof *k + 2 * (size_t)st->nthreads * sizeof k->tail[0]);
  if (!k) return NULL;
  k->serial = st->next_serial;
  k->n = 0;
  for (uint32_t i = 0; i < st->nthreads; i++) {
    const chunk* tails[2] = {st->threads[i].zones.tail, st->threads[i].events.tail};
    for (int j = 0; j < 2; j++)
      if (tails[j]) k->tail[k->n++] = (struct tmk__cut_tail){tails[j]->serial, tails[j]->count};
  }
  qsort(k->tail, k->n, sizeof k->tail[0], cut_order);
  return k;
}

/* How many of c's records were stored before the cut k (all of them without one). */
static uint32_t cut_count(const tmk_relay_cut* k, const chunk* c) {
  if (!k) return c->count;
  if (c->serial > k->serial) return 0;
  uint32_t lo = 0, hi = k->n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (k->tail[mid].serial < c->serial) lo = mid + 1;
    else hi = mid;
  }
  return lo < k->n && k->tail[lo].serial == c->serial && k->tail[lo].count < c->count
             ? k->tail[lo].count : c->count;
}

void tmk__store_live_detach(tmk__store* st) {
  if (st->followers && --st->followers == 0) {
    free(st->ring);
    st->ring = NULL;
    st->mem -= LIVE_RING * sizeof *st->ring;
  }
}

int tmk__store_live_read(tmk__store* st, uint64_t* cursor, tmk_relay_live_item* out, size_t cap,
                         uint64_t* skipped) {
  *skipped = 0;
  if (!st->ring) return 0;
  uint64_t c = *cursor;
  if (c > st->ring_w) c = st->ring_w;
  if (st->ring_w - c > LIVE_RING) {
    *skipped = st->ring_w - LIVE_RING - c;
    c = st->ring_w - LIVE_RING;
  }
  size_t n = 0;
  while (c < st->ring_w && n < cap) {
    out[n] = st->ring[c % LIVE_RING];
    if (!out[n].is_zone) out[n].event.text = out[n].text;
    n++;
    c++;
  }
  *cursor = c;
  return (int)n;
}

/* ---------------------------------------------------------------------------------------------
 * Appending
 * ------------------------------------------------------------------------------------------- */
/* Starts t's next zone chunk at time `start`, of records of `rec` bytes. A series that fills its
 * chunks gets bigger ones (doubling up to ZONE_CHUNK_CAP bytes); one that starts chunks because
 * its zones are far apart in time keeps them small (MIN_ZONE_CHUNK_BYTES). Returns NULL when out
 * of memory. */
static chunk* next_zone_chunk(tmk__store* st, thread* t, uint64_t start, uint32_t rec) {
  chunk* c = t->zones.tail;
  uint32_t cap = MIN_ZONE_CHUNK_BYTES;
  if (c && c->count * c->rec == c->cap)
    cap = c->cap * 2 > ZONE_CHUNK_CAP ? ZONE_CHUNK_CAP : c->cap * 2;
  return new_chunk(st, t, CK_ZONES, cap, start, rec);
}

/* A duration as a wide record holds it: 48 bits (78 h at 1 GHz). */
static inline uint64_t dur48(uint64_t dur) {
  return dur > 0xFFFFFFFFFFFFull ? 0xFFFFFFFFFFFFull : dur;
}

/* 1 when a narrow record holds the zone (depth clamped to 255 when written). */
static inline int narrow_fits(uint64_t dur, uint32_t sid, uint32_t flags) {
  return !(dur >> 32) && sid < (1u << 20) && flags < 16;
}

/* The chunk t's next zone goes into: the tail while it has room, `start` fits its base and, for
 * a zone only a wide record holds (`wide`), its records are wide; else a new chunk (wide ones
 * for such a zone). Returns NULL when out of memory. */
static chunk* zone_chunk(tmk__store* st, thread* t, uint64_t start, int wide) {
  chunk* c = t->zones.tail;
  if (c && c->count * c->rec < c->cap && fits_off(start, c->base) && (c->rec == ZW || !wide))
    return c;
  return next_zone_chunk(st, t, start, wide ? ZW : ZN);
}

/* Writes one wide record (dur already clamped to 48 bits, depth to 255): on a little-endian
 * host as two 8-byte words (start_off | dur_lo, site | dur_hi | depth | flags), which is its
 * layout (relay_clickhouse.c checks the offsets), else field by field. */
static inline void put_zrec(zrec* z, uint64_t off, uint64_t dur, uint32_t sid, uint32_t depth8,
                            uint32_t flags) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint64_t w[2];
  w[0] = (uint32_t)off | dur << 32;
  w[1] = sid | (dur & 0xFFFF00000000ull) | (uint64_t)depth8 << 48 | (uint64_t)flags << 56;
  memcpy(z, w, sizeof w);
#else
  zrec r;
  r.start_off = (int32_t)(int64_t)off;
  r.dur_lo = (uint32_t)dur;
  r.dur_hi = (uint16_t)(dur >> 32);
  r.site = sid;
  r.depth = (uint8_t)depth8;
  r.flags = (uint8_t)flags;
  *z = r;
#endif
}

/* Writes one narrow record (narrow_fits): on a little-endian host as an 8-byte word (start_off |
 * dur) and a 4-byte one, else field by field. */
static inline void put_nrec(void* z, uint64_t off, uint64_t dur, uint32_t sid, uint32_t depth8,
                            uint32_t flags) {
  const uint32_t sdf = sid | depth8 << 20 | flags << 28;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  const uint64_t w = (uint32_t)off | dur << 32;
  memcpy(z, &w, 8);
  memcpy((uint8_t*)z + 8, &sdf, 4);
#else
  nrec r;
  r.start_off = (int32_t)(int64_t)off;
  r.dur = (uint32_t)dur;
  r.sdf = sdf;
  memcpy(z, &r, sizeof r);
#endif
}

#if defined(__GNUC__) || defined(__clang__)
#define STORE_INLINE static inline __attribute__((always_inline))
#else
#define STORE_INLINE static inline
#endif

/* Writes one zone as a record of `rec` bytes (a narrow one: narrow_fits); dur is clamped to the
 * 48 bits of a wide record, depth to 255. Returns the duration stored. */
STORE_INLINE uint64_t put_rec(uint8_t* z, const uint32_t rec, uint64_t off, uint64_t dur,
                              uint32_t sid, uint32_t depth, uint32_t flags) {
  if (rec == ZN) {
    put_nrec(z, off, dur, sid, depth > 255 ? 255 : depth, flags);
  } else {
    dur = dur48(dur);
    put_zrec((zrec*)(void*)z, off, dur, sid, depth > 255 ? 255 : depth, flags);
  }
  return dur;
}

/* A stored zone, read back from record i of chunk c: start in ticks. */
typedef struct zget {
  uint64_t start, dur;
  uint32_t site;
  uint8_t depth, flags;
} zget;

static inline zget get_zone(const chunk* c, uint32_t i) {
  const tmk__tap_zone r = tmk__tap_read(c->data + (size_t)i * c->rec, c->rec);
  const zget g = {c->base + (uint64_t)(int64_t)r.start_off, r.dur, r.site, r.depth, r.flags};
  return g;
}

static inline int add_zone(tmk__store* st, thread* t, uint64_t start, uint64_t dur,
                           uint32_t site_id, uint32_t depth, uint32_t flags) {
  flags &= 0xFFu;
  chunk* c = zone_chunk(st, t, start, !narrow_fits(dur, site_id, flags));
  if (!c) return TMK_ENOMEM;
  uint8_t* z = c->data + (size_t)c->count++ * c->rec;
  dur = put_rec(z, c->rec, start - c->base, dur, site_id, depth, flags); /* as stored */
  if (start < c->tmin) c->tmin = start;
  if (start + dur > c->tmax) c->tmax = start + dur;
  note_time(st, start, start + dur);
  st->zones++;
  if (st->ring) live_zone(st, t->id, start, dur, site_id, depth, flags);
  if (st->tap.zones) st->tap.zones(st->tap.ud, t->id, c->base, st->freq, z, 1, c->rec);
  return 0;
}

/* Writes the zones q[0..lim) into chunk c from record c->count on, records of `rec` bytes (a
 * constant where it is inlined, so that each kind gets a loop of its own): q[0] in any case (it
 * fits the chunk), the later ones while their start fits the chunk's base, their site is cached
 * (or 0) and, in a narrow chunk, a narrow record holds them. Widens [*lo, *hi] to their times.
 * Returns how many it wrote. */
STORE_INLINE uint32_t put_run(const chunk* c, const uint32_t rec, const uint32_t* cache,
                              const tmk_proto_zone* q, uint32_t lim, uint64_t* lo, uint64_t* hi) {
  /* In locals: the stores below may alias anything, which would reload these from memory
   * every zone. */
  const uint64_t base = c->base;
  uint8_t* zp = (uint8_t*)c->data + (size_t)c->count * rec;
  uint64_t l = *lo, h = *hi;
  const uint64_t start0 = q[0].start;
  const uint64_t dur0 = put_rec(zp, rec, start0 - base, q[0].duration, q[0].site, q[0].depth, 0);
  if (start0 < l) l = start0;
  if (start0 + dur0 > h) h = start0 + dur0;
  const tmk_proto_zone* zq = q + 1;
  /* the first zone's site is in the table (reference_site), and so is every later one that the
   * cache holds; else the site table is full, and the first zone goes in alone */
  if (cache[q[0].site & 255] == q[0].site || !q[0].site) {
    const tmk_proto_zone* const zend = q + lim;
    for (zp += rec; zq < zend; zq++, zp += rec) {
      const uint64_t start = zq->start, off = start - base;
      uint64_t dur = zq->duration;
      const uint32_t sid = zq->site;
      if ((int64_t)(int32_t)off != (int64_t)off) break;    /* fits_off: else a new chunk */
      if (cache[sid & 255] != sid && sid) break;           /* reference_site first */
      if (rec == ZN && ((dur >> 32) | (sid >> 20))) break; /* only a wide record holds it */
      dur = put_rec(zp, rec, off, dur, sid, zq->depth, 0);
      if (start < l) l = start;
      if (start + dur > h) h = start + dur;
    }
  }
  *lo = l;
  *hi = h;
  return (uint32_t)(zq - q);
}

/* Stores n decoded zones of thread t a run at a time: the chunk's bookkeeping (count, time
 * range, the store's time range and zone count) is updated once per run, not once per zone.
 * Returns 0 or TMK_ENOMEM. */
static int add_zones(tmk__store* st, thread* t, const tmk_proto_zone* zs, size_t n) {
  size_t i = 0;
  while (i < n) {
    /* The site of the zone at i first (its cache entry, or the table): a site table that grows
     * makes room by evicting chunks, which may be the chunk about to be filled. The run stops
     * at a zone whose site is not cached, so that it comes back here. */
    reference_site(st, zs[i].site);
    const tmk_proto_zone* q = zs + i;
    chunk* c = zone_chunk(st, t, q[0].start, !narrow_fits(q[0].duration, q[0].site, 0));
    if (!c) return TMK_ENOMEM;
    uint64_t lo = c->tmin, hi = c->tmax;
    const uint32_t room = c->cap / c->rec - c->count;
    const uint32_t lim = n - i < room ? (uint32_t)(n - i) : room;
    const uint32_t k = c->rec == ZN ? put_run(c, ZN, st->site_cache, q, lim, &lo, &hi)
                                    : put_run(c, ZW, st->site_cache, q, lim, &lo, &hi);
    i += k;
    if (st->ring) /* followers: the live ring gets the same zones, as stored */
      for (uint32_t j = 0; j < k; j++)
        live_zone(st, t->id, q[j].start, dur48(q[j].duration), q[j].site, q[j].depth, 0);
    /* history sink: the zones as stored, one call per run */
    if (st->tap.zones)
      st->tap.zones(st->tap.ud, t->id, c->base, st->freq,
                    c->data + (size_t)c->count * c->rec, k, c->rec);
    c->count += k;
    c->tmin = lo;
    c->tmax = hi;
    note_time(st, lo, hi);
    st->zones += k;
  }
  return 0;
}

/* e: the caller's own, filled but for time_ns, which is set here for the live ring and the tap.
 * The record's header is written into the chunk field by field: built on the stack and copied,
 * its 16-byte load waited for the byte stores before it (a store-forwarding stall, most of this
 * function's time in a profile). */
static int add_event(tmk__store* st, thread* t, tmk_relay_event* e, uint64_t ticks) {
  size_t need = sizeof(erec) + (e->type == TMK_RELAY_EV_PLOT ? 8 : 0) + e->text_len;
  need = (need + 3) & ~(size_t)3;
  chunk* c = t->events.tail;
  if (!c || c->used + need > c->cap || !fits_off(ticks, c->base)) {
    uint32_t cap = MIN_EVENT_CHUNK_BYTES;
    if (c && c->used + need > c->cap)
      cap = c->cap * 2 > EVENT_CHUNK_BYTES ? EVENT_CHUNK_BYTES : c->cap * 2;
    c = new_chunk(st, t, CK_EVENTS, cap, ticks, 0);
    if (!c) return TMK_ENOMEM;
  }
  uint8_t* p = c->data + c->used;
  const int32_t t_off = (int32_t)(int64_t)(ticks - c->base);
  p[offsetof(erec, type)] = e->type;
  p[offsetof(erec, severity)] = e->severity;
  p[offsetof(erec, is_double)] = e->is_double;
  p[offsetof(erec, pad)] = 0;
  memcpy(p + offsetof(erec, site), &e->site, 4);
  memcpy(p + offsetof(erec, verbosity), &e->verbosity, 4);
  memcpy(p + offsetof(erec, text_len), &e->text_len, 4);
  memcpy(p + offsetof(erec, t_off), &t_off, 4);
  size_t off = sizeof(erec);
  if (e->type == TMK_RELAY_EV_PLOT) {
    if (e->is_double) memcpy(p + off, &e->d, 8);
    else memcpy(p + off, &e->i, 8);
    off += 8;
  }
  if (e->text_len) memcpy(p + off, e->text, e->text_len);
  c->used += (uint32_t)need;
  c->count++;
  if (ticks < c->tmin) c->tmin = ticks;
  if (ticks > c->tmax) c->tmax = ticks;
  note_time(st, ticks, ticks);
  if (st->ring || (st->tap.event && e->type <= TMK_RELAY_EV_MESSAGE)) {
    e->time_ns = to_ns(st, ticks);
    if (st->ring) live_event(st, e);
    if (st->tap.event && e->type <= TMK_RELAY_EV_MESSAGE) st->tap.event(st->tap.ud, e);
  }
  return 0;
}

/* Returns 0, or TMK_ENOSPC when the string does not fit the budget (the old one is gone). */
static int set_string(tmk__store* st, char** dst, const tmk_proto_str* s) {
  if (*dst) {
    st->mem -= strlen(*dst) + 1;
    free(*dst);
  }
  *dst = dup_str(st, s->ptr, s->len);
  return *dst ? 0 : TMK_ENOSPC;
}

static int store_record(tmk__store* st, const tmk_proto_record* rec) {
  thread* t;
  tmk_relay_event e;
  memset(&e, 0, sizeof e);
  switch (rec->type) {
    case TMK_REC_SITE: {
      site* s = get_site(st, rec->u.site.id);
      if (!s) return TMK_ERANGE;
      if (!s->known) {
        s->known = 1;
        st->unresolved--;
      }
      s->kind = rec->u.site.kind;
      s->severity = rec->u.site.severity;
      s->verbosity = rec->u.site.verbosity;
      s->color = rec->u.site.color;
      s->line = rec->u.site.line;
      if ((!s->name || strlen(s->name) != rec->u.site.name.len ||
           memcmp(s->name, rec->u.site.name.ptr, rec->u.site.name.len) != 0) &&
          set_string(st, &s->name, &rec->u.site.name) != 0)
        return TMK_ENOSPC;
      if ((!s->file || strlen(s->file) != rec->u.site.file.len ||
           memcmp(s->file, rec->u.site.file.ptr, rec->u.site.file.len) != 0) &&
          set_string(st, &s->file, &rec->u.site.file) != 0)
        return TMK_ENOSPC;
      if (st->tap.site) {
        tmk_relay_site ts = {s->id, 1, s->kind, s->severity, s->verbosity, s->color, s->line,
                             s->name ? s->name : "", s->file ? s->file : ""};
        st->tap.site(st->tap.ud, &ts);
      }
      return 0;
    }
    case TMK_REC_ZONE:
      t = get_thread(st, rec->thread);
      if (!t) return TMK_ERANGE;
      reference_site(st, rec->u.zone.site);
      return add_zone(st, t, rec->u.zone.start, rec->u.zone.duration, rec->u.zone.site,
                      rec->u.zone.depth, 0);
    case TMK_REC_MARKER_BEGIN:
    case TMK_REC_MARKER_END: {
      t = get_thread(st, rec->thread);
      if (!t) return TMK_ERANGE;
      reference_site(st, rec->u.marker.site);
      int is_end = rec->type == TMK_REC_MARKER_END;
      e.type = is_end ? TMK_RELAY_EV_MARKER_END : TMK_RELAY_EV_MARKER_BEGIN;
      e.thread = t->id;
      e.site = rec->u.marker.site;
      e.text = rec->u.marker.payload.ptr;
      e.text_len = rec->u.marker.payload.len;
      int rc = add_event(st, t, &e, rec->u.marker.time);
      if (rc) return rc;
      if (!is_end) {
        if (t->nmarkers < MAX_MARKER_DEPTH) {
          t->markers[t->nmarkers].site = rec->u.marker.site;
          t->markers[t->nmarkers].time = rec->u.marker.time;
          t->nmarkers++;
        }
        return 0;
      }
      /* Pair with the innermost open BEGIN of the same site (§5.4). */
      for (uint32_t k = t->nmarkers; k-- > 0;) {
        if (t->markers[k].site != rec->u.marker.site) continue;
        uint64_t start = t->markers[k].time;
        memmove(&t->markers[k], &t->markers[k + 1], (t->nmarkers - k - 1) * sizeof t->markers[0]);
        t->nmarkers--;
        return add_zone(st, t, start, rec->u.marker.time - start, rec->u.marker.site, k,
                        TMK_RELAY_ZONE_MARKER);
      }
      return 0; /* END without BEGIN (e.g. lost packet): kept as an event only */
    }
    case TMK_REC_FRAME:
      t = get_thread(st, rec->thread);
      if (!t) return TMK_ERANGE;
      reference_site(st, rec->u.frame.site);
      e.type = TMK_RELAY_EV_FRAME;
      e.thread = t->id;
      e.site = rec->u.frame.site;
      return add_event(st, t, &e, rec->u.frame.time);
    case TMK_REC_PLOT:
      t = get_thread(st, rec->thread);
      if (!t) return TMK_ERANGE;
      reference_site(st, rec->u.plot.site);
      e.type = TMK_RELAY_EV_PLOT;
      e.thread = t->id;
      e.site = rec->u.plot.site;
      e.is_double = rec->u.plot.is_double;
      e.i = rec->u.plot.i;
      e.d = rec->u.plot.d;
      return add_event(st, t, &e, rec->u.plot.time);
    case TMK_REC_MESSAGE:
      t = get_thread(st, rec->thread);
      if (!t) return TMK_ERANGE;
      reference_site(st, rec->u.message.site);
      e.type = TMK_RELAY_EV_MESSAGE;
      e.thread = t->id;
      e.site = rec->u.message.site;
      e.severity = rec->u.message.severity;
      e.verbosity = rec->u.message.verbosity;
      e.text = rec->u.message.text.ptr;
      e.text_len = rec->u.message.text.len;
      return add_event(st, t, &e, rec->u.message.time);
    case TMK_REC_THREAD_NAME: {
      t = get_thread(st, rec->thread);
      if (!t) return TMK_ERANGE;
      const tmk_proto_str* n = &rec->u.thread_name.name;
      if (!t->name || strlen(t->name) != n->len || memcmp(t->name, n->ptr, n->len) != 0)
        if (set_string(st, &t->name, n) != 0) return TMK_ENOSPC;
      if (st->tap.thread) st->tap.thread(st->tap.ud, t->id, n->ptr, n->len);
      return 0;
    }
    case TMK_REC_DROPS:
      if (rec->u.drops.reason < 8 && rec->u.drops.count > st->drops[rec->u.drops.reason])
        st->drops[rec->u.drops.reason] = rec->u.drops.count; /* cumulative (§5.9) */
      return 0;
    case TMK_REC_CLOCK_SYNC:
      st->clock_ticks = rec->u.clock.ticks;
      st->clock_unix_ns = rec->u.clock.unix_ns;
      return 0;
    case TMK_REC_TEAM_NAME:
      if (rec->u.team.bit >= TMK_PROTO_MAX_TEAMS) return TMK_ERANGE;
      if (!st->teams[rec->u.team.bit] ||
          strlen(st->teams[rec->u.team.bit]) != rec->u.team.name.len ||
          memcmp(st->teams[rec->u.team.bit], rec->u.team.name.ptr, rec->u.team.name.len) != 0)
        return set_string(st, &st->teams[rec->u.team.bit], &rec->u.team.name);
      return 0;
    default:
      return TMK_ERECORD;
  }
}

/* An item of a decoded packet: a run of `zones` zones of `thread` at st->zbuf[index], or when
 * zones is 0 the record st->recs[index]. */
typedef struct dec_item {
  uint32_t zones;
  uint32_t index;
  uint32_t thread;
} dec_item;

/* Makes room for `need` elements in a decode buffer (doubling from 256). Returns 0 or
 * TMK_ENOMEM. */
static int dec_room(tmk__store* st, void** arr, size_t* cap, size_t elem, size_t need) {
  if (need <= *cap) return 0;
  size_t ncap = *cap ? *cap : 256;
  while (ncap < need) ncap *= 2;
  void* na = realloc(*arr, ncap * elem);
  if (!na) return TMK_ENOMEM;
  st->mem += (ncap - *cap) * elem;
  *arr = na;
  *cap = ncap;
  return 0;
}

/* Decodes the whole packet first: a packet is stored completely or, when any part of it fails
 * to decode, not at all (a corrupt packet must not leave half-read records). Zones come a run
 * at a time from the batched decoder straight into st->zbuf, other records one at a time. */
static int decode_all(tmk__store* st, tmk_proto_reader* rd, size_t* nitems) {
  size_t ni = 0, nz = 0, nr = 0;
  for (;;) {
    uint32_t th = 0;
    int got;
    if (dec_room(st, (void**)&st->zbuf, &st->zbuf_cap, sizeof *st->zbuf, nz + 256) ||
        dec_room(st, (void**)&st->items, &st->items_cap, sizeof *st->items, ni + 1))
      return TMK_ENOMEM;
    got = tmk_proto_next_zones(rd, st->zbuf + nz, st->zbuf_cap - nz, &th);
    if (got < 0) return got;
    if (got == 0) { /* not a zone event next: a record, or a THREAD then maybe a zone */
      if (dec_room(st, (void**)&st->recs, &st->recs_cap, sizeof *st->recs, nr + 1))
        return TMK_ENOMEM;
      tmk_proto_record* rec = &st->recs[nr];
      int rc = tmk_proto_next(rd, rec);
      if (rc == 0) break;
      if (rc < 0) return rc;
      if (rec->type != TMK_REC_ZONE) {
        st->items[ni++] = (dec_item){0, (uint32_t)nr++, rec->thread};
        continue;
      }
      st->zbuf[nz] = rec->u.zone;
      th = rec->thread;
      got = 1;
    }
    dec_item* last = ni ? &st->items[ni - 1] : NULL;
    if (last && last->zones && last->thread == th && last->index + last->zones == nz)
      last->zones += (uint32_t)got;
    else
      st->items[ni++] = (dec_item){(uint32_t)got, (uint32_t)nz, th};
    nz += (size_t)got;
  }
  *nitems = ni;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Orphans (PROTOCOL.md §5.3.1, lost packets and orphaned zones)
 * ------------------------------------------------------------------------------------------- */
/* The latest zone stored on t at `depth` (paired markers aside), looked for among its last
 * ORPHAN_PARENT_SCAN zones: 1 with its [*s, *e], or 0 when there is none. */
static int stored_latest_at(const thread* t, uint32_t depth, uint64_t* s, uint64_t* e) {
  const uint8_t d8 = (uint8_t)(depth > 255 ? 255 : depth);
  const chunk* cs[2] = {t->zones.tail, t->zprev};
  uint32_t left = ORPHAN_PARENT_SCAN;
  for (int k = 0; k < 2 && cs[k] && left; k++) {
    const chunk* c = cs[k];
    for (uint32_t i = c->count; i-- > 0 && left; left--) {
      const zget z = get_zone(c, i);
      if (z.depth != d8 || (z.flags & TMK_RELAY_ZONE_MARKER)) continue;
      *s = z.start;
      *e = z.start + z.dur;
      return 1;
    }
  }
  return 0;
}

/* Returns 1 when the latest zone stored on t at `depth` covers [start, end]. */
static int stored_parent_covers(const thread* t, uint32_t depth, uint64_t start, uint64_t end) {
  uint64_t s0, e0;
  return stored_latest_at(t, depth, &s0, &e0) && s0 <= start && end <= e0;
}

/* Returns 1 when the latest zone stored on t at `depth` has no stored parent covering it: the
 * thread has been storing children of a zone at depth - 1 that had not ended (a frame still
 * running, or an outermost zone that never ends). */
static int stored_sibling_unparented(const thread* t, uint32_t depth) {
  uint64_t s0, e0;
  return stored_latest_at(t, depth, &s0, &e0) && !stored_parent_covers(t, depth - 1, s0, e0);
}

/* add_zones for a run that needs the orphan check: thread t's zones zs[0..n) from DATA packet
 * `seq`, which follows a gap (`gap`: packet seq - 1 was never stored) or continues a drop.
 * `first`: no zones of t came earlier in this packet. A run is a sequence of whole trees in
 * decode order (a parent after its children); a tree whose root has no parent in the packet and
 * sits at depth R > 0 is the continuation of a tree split across packets (§5.3) or the children
 * of a zone that has not ended yet. Right after a gap, the first such tree of the thread is
 * dropped unless the parent it continues is stored (it would have been in the packet before)
 * or the thread's latest stored zone at depth R had no stored parent either (the thread was
 * already storing children of a zone that had not ended: this tree is taken for one more);
 * the trees that follow at depth >= R (in this packet, and at the start of the next ones) go
 * with it. Returns the number of zones stored or TMK_ENOMEM. */
static int check_run(tmk__store* st, thread* t, const tmk_proto_zone* zs, size_t n, int gap,
                     int first, uint64_t seq) {
  if (t->orphan_depth && t->orphan_seq != seq &&
      !(first && t->orphan_seq + 1 == seq && t->orphan_dropped < ORPHAN_CHAIN_MAX))
    t->orphan_depth = 0; /* the drop does not go on into this packet */
  if (!t->orphan_depth) {
    if (!gap || !first) return add_zones(st, t, zs, n) == TMK_ENOMEM ? TMK_ENOMEM : (int)n;
    /* The first tree's root: the first zone that the next zone above it does not cover. */
    size_t r = 0;
    for (size_t j = 1; j < n && zs[r].depth > 0; j++) {
      if (zs[j].depth >= zs[r].depth) continue; /* a later sibling's subtree, or a later tree */
      if (zs[j].depth + 1 != zs[r].depth || zs[j].start > zs[r].start ||
          zs[r].start + zs[r].duration > zs[j].start + zs[j].duration)
        break;
      r = j;
    }
    if (zs[r].depth == 0 ||
        stored_parent_covers(t, zs[r].depth - 1, zs[r].start, zs[r].start + zs[r].duration) ||
        stored_sibling_unparented(t, zs[r].depth))
      return add_zones(st, t, zs, n) == TMK_ENOMEM ? TMK_ENOMEM : (int)n;
    t->orphan_depth = zs[r].depth; /* dropped below, with what follows it at that depth */
    t->orphan_seq = seq;
    t->orphan_dropped = 0;
  }
  /* Dropping: tree by tree. Backwards first: the next zone at depth d - 1 after a zone at depth
   * d is its parent if it covers it; a zone without one is a root. nxt holds the next zone seen
   * at each depth (mod 256, with the depth to tell them apart). */
  if (dec_room(st, (void**)&st->roots, &st->roots_cap, 1, n)) return TMK_ENOMEM;
  struct { uint32_t depth; uint64_t start, end; } nxt[256];
  for (int k = 0; k < 256; k++) nxt[k].depth = UINT32_MAX;
  for (size_t i = n; i-- > 0;) {
    const tmk_proto_zone* z = &zs[i];
    uint64_t end = z->start + z->duration;
    int root = 1;
    if (z->depth > 0) {
      const uint32_t pd = z->depth - 1;
      root = !(nxt[pd & 255].depth == pd && nxt[pd & 255].start <= z->start &&
               end <= nxt[pd & 255].end);
    }
    st->roots[i] = (uint8_t)root;
    nxt[z->depth & 255].depth = z->depth;
    nxt[z->depth & 255].start = z->start;
    nxt[z->depth & 255].end = end;
  }
  /* Forwards, a tree at a time: zs[b..i] with its root at i, dropped while at depth >=
   * orphan_depth; kept trees are stored in runs. */
  size_t b = 0, kb = 0;
  int stored = 0;
  for (size_t i = 0; i < n; i++) {
    if (!st->roots[i]) continue;
    if (t->orphan_depth && zs[i].depth >= t->orphan_depth) {
      if (b > kb) {
        if (add_zones(st, t, zs + kb, b - kb) == TMK_ENOMEM) return TMK_ENOMEM;
        stored += (int)(b - kb);
      }
      st->orphans += i + 1 - b;
      t->orphan_dropped += i + 1 - b;
      t->orphan_seq = seq;
      kb = i + 1;
    } else {
      t->orphan_depth = 0; /* a tree above the dropped one: the drop is over */
    }
    b = i + 1;
  }
  if (n > kb) {
    if (add_zones(st, t, zs + kb, n - kb) == TMK_ENOMEM) return TMK_ENOMEM;
    stored += (int)(n - kb);
  }
  return stored;
}

int tmk__store_packet(tmk__store* st, const uint8_t* packet, size_t len, void* scratch) {
  tmk_proto_reader rd;
  int rc = tmk_proto_open(&rd, packet, len, scratch, TMK_PROTO_MAX_BODY);
  if (rc < 0) {
    st->malformed++;
    return rc;
  }
  if (rd.hdr.type != TMK_PKT_DATA) {
    st->malformed++;
    return TMK_ETYPE;
  }
  size_t count = 0;
  rc = decode_all(st, &rd, &count);
  if (rc < 0) {
    if (rc != TMK_ENOMEM) st->malformed++;
    return rc;
  }
  st->packets++;
  /* A packet that does not follow the last one stored (one was lost, the relay joined late, or
   * this one is late) gets the orphan check (check_run). A packet further behind than a late one
   * can be (the reorder stage's history) starts a new epoch there. */
  const uint64_t seq = rd.hdr.seq;
  const int gap = seq != st->next_seq;
  if (seq >= st->next_seq || st->next_seq - seq > TMK__REORDER_HISTORY) st->next_seq = seq + 1;
  int n = 0;
  for (size_t i = 0; i < count; i++) {
    const dec_item* it = &st->items[i];
    if (it->zones) { /* a run of zones: the thread is looked up once */
      thread* t = get_thread(st, it->thread);
      if (!t) {
        st->malformed += it->zones; /* thread table full: these records are refused */
        continue;
      }
      int first = t->pkt_seq1 != seq + 1, got = (int)it->zones;
      t->pkt_seq1 = seq + 1;
      if (gap || t->orphan_depth)
        got = check_run(st, t, st->zbuf + it->index, it->zones, gap, first, seq);
      else if (add_zones(st, t, st->zbuf + it->index, it->zones) == TMK_ENOMEM)
        got = TMK_ENOMEM;
      if (got == TMK_ENOMEM) return TMK_ENOMEM;
      st->records += (uint64_t)got;
      n += got;
      continue;
    }
    int src = store_record(st, &st->recs[it->index]);
    if (src == TMK_ENOMEM) return src;
    if (src < 0) {
      st->malformed++; /* a table is full or a value is out of range: this record is refused */
      continue;
    }
    st->records++;
    n++;
  }
  return n;
}

/* ---------------------------------------------------------------------------------------------
 * Queries
 * ------------------------------------------------------------------------------------------- */
uint64_t tmk__store_slab_maps(const tmk__store* st) { return st->slabs.maps; }

void tmk__store_fill_info(const tmk__store* st, tmk_relay_session_info* info) {
  info->stats.records = st->records;
  info->stats.zones = st->zones;
  info->stats.malformed += st->malformed;
  uint64_t dropped = 0;
  for (int i = 0; i < 8; i++)
    if (i != TMK_DROP_SEND_FAILED) dropped += st->drops[i]; /* reason 3 counts packets */
  info->stats.dropped_by_agent = dropped;
  for (int i = 0; i < 5; i++) info->dropped_by_reason[i] = st->drops[i];
  info->stats.evicted = st->evicted;
  info->stats.orphans = st->orphans;
  info->stats.mem_bytes = st->mem;
  info->stats.unresolved_sites = st->unresolved;
  info->first_ns = st->have_time ? to_ns(st, st->tmin) : 0;
  info->last_ns = st->have_time ? to_ns(st, st->tmax) : 0;
  info->threads = st->nthreads;
  info->sites = st->nsites;
  info->clock_ns = st->clock_unix_ns ? to_ns(st, st->clock_ticks) : 0;
  info->clock_unix_ns = st->clock_unix_ns;
}

/* A stored zone as the API gives it: times in ns. */
static inline tmk_relay_zone stored_zone(const tmk__store* st, const thread* t, const chunk* c,
                                         uint32_t i) {
  const zget z = get_zone(c, i);
  uint64_t s_ns = to_ns(st, z.start), e_ns = to_ns(st, z.start + z.dur);
  tmk_relay_zone o = {s_ns, e_ns - s_ns, t->id, z.site, z.depth, z.flags};
  return o;
}

int tmk__store_range(const tmk__store* st, uint64_t* first_ns, uint64_t* last_ns) {
  if (!st->have_time) return 0;
  uint64_t lo = UINT64_MAX;
  for (uint32_t ti = 0; ti < st->nthreads; ti++) {
    const thread* t = &st->threads[ti];
    /* the head of a series is its oldest chunk; a few later ones may start earlier */
    const chunk* c = t->zones.head;
    for (int k = 0; c && k < 4; c = c->snext, k++)
      if (c->count && c->tmin < lo) lo = c->tmin;
    c = t->events.head;
    for (int k = 0; c && k < 4; c = c->snext, k++)
      if (c->count && c->tmin < lo) lo = c->tmin;
  }
  if (lo == UINT64_MAX) return 0;
  *first_ns = to_ns(st, lo < st->tmin ? st->tmin : lo);
  *last_ns = to_ns(st, st->tmax);
  return 1;
}

int tmk__store_zone_scan(const tmk__store* st, tmk__zone_cursor* cur, const tmk_relay_query* q,
                         uint32_t max_chunks, tmk_relay_zone_fn fn, void* ud) {
  uint64_t t1 = q->t1_ns ? q->t1_ns : UINT64_MAX;
  uint64_t k0 = to_ticks_approx(st, q->t0_ns, 0), k1 = to_ticks_approx(st, t1, 1);
  uint32_t visited = 0;
  for (; cur->thread < st->nthreads; cur->thread++, cur->serial = 0) {
    const thread* t = &st->threads[cur->thread];
    if (q->thread >= 0 && (uint64_t)q->thread != t->id) continue;
    const chunk* c = t->zones.head;
    while (c && c->serial <= cur->serial) c = c->snext; /* evicted chunks are simply gone */
    for (; c; c = c->snext) {
      if (visited == max_chunks) return 0;
      visited++;
      cur->serial = c->serial;
      if (c->tmax < k0 || c->tmin > k1) continue;
      const uint32_t lim = cut_count(q->cut, c);
      for (uint32_t i = 0; i < lim; i++) {
        tmk_relay_zone out = stored_zone(st, t, c, i);
        if (out.start_ns + out.dur_ns < q->t0_ns || out.start_ns > t1) continue;
        if (fn(ud, &out)) return -1;
      }
    }
  }
  return 1;
}

/* ---------------------------------------------------------------------------------------------
 * Queries in slices: the caller holds the session lock for one slice at a time, so a query for
 * a million zones never keeps the loop (which needs the lock to apply packets) waiting for long.
 * The cursor names a chunk by its serial, which stays valid when chunks are evicted meanwhile:
 * the walk goes on from the next chunk that still exists.
 * ------------------------------------------------------------------------------------------- */
#define SLICE_SCAN_MAX 65536 /* records looked at per slice, matching or not */

int tmk__store_zones_slice(const tmk__store* st, const tmk_relay_query* q,
                           tmk__store_cursor* cur, tmk_relay_zone* out, size_t cap) {
  uint64_t t1 = q->t1_ns ? q->t1_ns : UINT64_MAX;
  uint64_t k0 = to_ticks_approx(st, q->t0_ns, 0), k1 = to_ticks_approx(st, t1, 1);
  size_t n = 0, scanned = 0;
  for (; cur->thread < st->nthreads; cur->thread++, cur->serial = 0, cur->pos = 0) {
    const thread* t = &st->threads[cur->thread];
    if (q->thread >= 0 && (uint64_t)q->thread != t->id) continue;
    for (const chunk* c = t->zones.head; c; c = c->snext) {
      if (c->serial < cur->serial) continue;
      if (c->serial > cur->serial) cur->pos = 0;
      cur->serial = c->serial;
      if (c->tmax < k0 || c->tmin > k1) continue;
      const uint32_t lim = cut_count(q->cut, c);
      for (; cur->pos < lim; cur->pos++) {
        if (n == cap || scanned == SLICE_SCAN_MAX) return (int)n;
        scanned++;
        tmk_relay_zone o = stored_zone(st, t, c, cur->pos);
        if (o.start_ns + o.dur_ns < q->t0_ns || o.start_ns > t1) continue;
        if (o.dur_ns < q->min_dur_ns) continue;
        out[n++] = o;
      }
    }
  }
  cur->done = 1;
  return (int)n;
}

int tmk__store_zones(const tmk__store* st, const tmk_relay_query* q, tmk_relay_zone_fn fn,
                     void* ud) {
  tmk_relay_zone buf[256];
  tmk__store_cursor cur;
  size_t limit = q->limit ? q->limit : 100000, n = 0;
  memset(&cur, 0, sizeof cur);
  while (!cur.done && n < limit) {
    size_t want = limit - n < 256 ? limit - n : 256;
    int k = tmk__store_zones_slice(st, q, &cur, buf, want);
    for (int i = 0; i < k; i++) {
      n++;
      if (fn(ud, &buf[i])) return (int)n;
    }
  }
  return (int)n;
}

int tmk__store_events_slice(const tmk__store* st, const tmk_relay_query* q, unsigned type_mask,
                            tmk__store_cursor* cur, tmk_relay_event* out, size_t cap,
                            char* text, size_t text_cap) {
  uint64_t t1 = q->t1_ns ? q->t1_ns : UINT64_MAX;
  uint64_t k0 = to_ticks_approx(st, q->t0_ns, 0), k1 = to_ticks_approx(st, t1, 1);
  size_t n = 0, scanned = 0, tn = 0;
  for (; cur->thread < st->nthreads; cur->thread++, cur->serial = 0, cur->pos = 0, cur->off = 0) {
    const thread* t = &st->threads[cur->thread];
    if (q->thread >= 0 && (uint64_t)q->thread != t->id) continue;
    for (const chunk* c = t->events.head; c; c = c->snext) {
      if (c->serial < cur->serial) continue;
      if (c->serial > cur->serial) cur->pos = cur->off = 0;
      cur->serial = c->serial;
      if (c->tmax < k0 || c->tmin > k1) continue;
      const uint32_t lim = cut_count(q->cut, c);
      for (; cur->pos < lim; cur->pos++) {
        erec h;
        memcpy(&h, c->data + cur->off, sizeof h);
        if (n == cap || scanned == SLICE_SCAN_MAX || text_cap - tn < h.text_len) return (int)n;
        scanned++;
        size_t size = sizeof h + (h.type == TMK_RELAY_EV_PLOT ? 8 : 0) + h.text_len;
        const uint8_t* p = c->data + cur->off + sizeof h;
        cur->off += (uint32_t)((size + 3) & ~(size_t)3);
        if (type_mask && !(type_mask & (1u << h.type))) continue;
        uint64_t ns = to_ns(st, c->base + (uint64_t)(int64_t)h.t_off);
        if (ns < q->t0_ns || ns > t1) continue;
        tmk_relay_event* e = &out[n++];
        memset(e, 0, sizeof *e);
        e->type = h.type;
        e->severity = h.severity;
        e->is_double = h.is_double;
        e->thread = t->id;
        e->site = h.site;
        e->verbosity = h.verbosity;
        e->time_ns = ns;
        if (h.type == TMK_RELAY_EV_PLOT) {
          if (h.is_double) memcpy(&e->d, p, 8);
          else memcpy(&e->i, p, 8);
          p += 8;
        }
        /* the text is copied: the chunk may be evicted once the lock is released */
        if (h.text_len) memcpy(text + tn, p, h.text_len);
        e->text = text + tn;
        e->text_len = h.text_len;
        tn += h.text_len;
      }
    }
  }
  cur->done = 1;
  return (int)n;
}

int tmk__store_sites(const tmk__store* st, tmk_relay_site_fn fn, void* ud) {
  int n = 0;
  for (uint32_t i = 0; i < st->nsites; i++) {
    const site* s = &st->sites[i];
    tmk_relay_site o = {s->id,       s->known,          s->kind,           s->severity,
                        s->verbosity, s->color,          s->line,           s->name ? s->name : "",
                        s->file ? s->file : ""};
    n++;
    if (fn(ud, &o)) break;
  }
  return n;
}

int tmk__store_threads(const tmk__store* st, tmk_relay_thread_fn fn, void* ud) {
  int n = 0;
  for (uint32_t i = 0; i < st->nthreads; i++) {
    n++;
    if (fn(ud, st->threads[i].id, st->threads[i].name ? st->threads[i].name : "")) break;
  }
  return n;
}

int tmk__store_teams(const tmk__store* st, tmk_relay_thread_fn fn, void* ud) {
  int n = 0;
  for (uint32_t i = 0; i < TMK_PROTO_MAX_TEAMS; i++) {
    if (!st->teams[i]) continue;
    n++;
    if (fn(ud, i, st->teams[i])) break;
  }
  return n;
}
