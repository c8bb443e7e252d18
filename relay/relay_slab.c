/* relay_slab.c — memory for the store's full zone chunks: 2 MiB slabs, aligned so that they can
 * be transparent huge pages, and populated in one call, so that a session storing zones fast
 * takes no page fault of its own; each fresh region gets the kind of page that has cost least
 * to populate lately (below: on one host a huge page is the cheaper by half, on a VM whose host
 * takes back free memory 4 KiB pages can be ten times cheaper); a slab whose last chunk is freed
 * (the store evicts oldest first, so slabs empty in order) is kept as the one spare and reused
 * before a new one is mapped, so that a store at its budget, evicting as fast as it stores, takes
 * no fresh pages at all; emptied slabs beyond the spare go to the process's pool of 2 MiB regions
 * (below), which the UDP receive queue's 2 MiB blocks share. Also tmk__map_pages, which the
 * queue's smaller blocks and the ClickHouse sink's staging use. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MADV_* */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>

#include "relay_core.h"

#ifndef MAP_ANONYMOUS
#define MAP_ANONYMOUS MAP_ANON
#endif

#ifndef MAP_POPULATE
#define MAP_POPULATE 0 /* another system: pages fault in as they are first written */
#endif

/* Populating, process-wide: the bytes asked for and the CPU time the calling threads spent in
 * those calls (the kernel finding and clearing the pages; on a VM whose host takes back free
 * memory, also the host's faults: docs/AGENT.md "Fresh memory on this VM"). */
static _Atomic uint64_t populated_bytes, populate_cpu_ns;

uint64_t tmk__own_cpu_ns(void) {
#ifdef CLOCK_THREAD_CPUTIME_ID
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
  return 0;
}

void tmk__name_thread(const char* name) {
#ifdef __linux__
  prctl(PR_SET_NAME, name, 0, 0, 0); /* at most 15 characters are kept */
#else
  (void)name;
#endif
}

static void count_populate(size_t bytes, uint64_t cpu_ns) {
  atomic_fetch_add_explicit(&populated_bytes, bytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&populate_cpu_ns, cpu_ns, memory_order_relaxed);
}

/* Populates and counts, as tmk__populate: 1 with the CPU time it took in *ns, or 0 where the
 * kernel cannot (the pages then fault in later, uncounted). */
static int populate_timed(void* p, size_t bytes, uint64_t* ns) {
#ifdef MADV_POPULATE_WRITE
  const uint64_t t0 = tmk__own_cpu_ns();
  /* Linux 5.14+: one call; an older kernel refuses it */
  if (madvise(p, bytes, MADV_POPULATE_WRITE) != 0) return 0;
  *ns = tmk__own_cpu_ns() - t0;
  count_populate(bytes, *ns);
  return 1;
#else
  (void)p;
  (void)bytes;
  (void)ns;
  return 0;
#endif
}

void tmk__populate(void* p, size_t bytes) {
  uint64_t ns;
  (void)populate_timed(p, bytes, &ns);
}

void tmk__populate_stats(uint64_t* bytes, uint64_t* cpu_ns) {
  *bytes = atomic_load_explicit(&populated_bytes, memory_order_relaxed);
  *cpu_ns = atomic_load_explicit(&populate_cpu_ns, memory_order_relaxed);
}

/* The kind of page for fresh 2 MiB-aligned memory (docs/AGENT.md "Which pages"). Populating a
 * region costs per byte what the host makes it cost: on a machine of its own a 2 MiB page is
 * cleared in one go and mapped by one entry, about half the cost of 512 pages of 4 KiB; on a VM
 * whose host takes back memory that was free for a while (virtio-balloon free page reporting),
 * the free 2 MiB blocks a huge page needs are the very ones it took back, and each costs the
 * host's faults, while 4 KiB pages come first from the smaller free blocks it left alone (our
 * 2-core VM: ~40 against ~4 ns per 16 bytes). So each fresh region's populating is timed (the
 * thread's CPU time, which a vCPU stalled in the host's faults also counts) into a running
 * average per kind, in ns per MiB, and the next region gets the kind that averages less. Both
 * are tried first, huge pages first, and every PAGES_EXPLORE-th region gets the other kind, so
 * that a kind that has become the cheaper one is noticed, or every PAGES_EXPLORE_FAR-th while the
 * other kind averages more than four times as much: on our VM a trial of huge pages costs ~5 ms
 * more than 4 KiB pages would (~40 ns for each zone the 2 MiB hold), ~0.08 ns a stored zone on
 * average at one region in 512 (0.6 at one in 64); where huge pages are the cheaper kind, by
 * half, trials of 4 KiB pages cost ~0.03.
 * Where the kernel refuses MADV_HUGEPAGE (THP off) the "huge" regions are 4 KiB pages, and both
 * kinds average alike. Process-wide; relaxed atomics: a race loses a sample or repeats a trial,
 * nothing worse. */
#define PAGES_EXPLORE 64
#define PAGES_EXPLORE_FAR 512
static _Atomic uint64_t kind_ns_per_mib[2], kind_samples[2]; /* [0] 4 KiB, [1] huge */
static _Atomic uint64_t kind_regions, huge_populated;

/* The kind for the next region: with timed = 1 one whose populating will be noted (it may be a
 * trial), else the kind with the lower average (huge pages while only they are known). */
static int pages_pick(int timed) {
  const uint64_t n =
      timed ? atomic_fetch_add_explicit(&kind_regions, 1, memory_order_relaxed) : 0;
  if (!atomic_load_explicit(&kind_samples[1], memory_order_relaxed)) return 1;
  if (!atomic_load_explicit(&kind_samples[0], memory_order_relaxed)) return !timed;
  const uint64_t small_ns = atomic_load_explicit(&kind_ns_per_mib[0], memory_order_relaxed);
  const uint64_t huge_ns = atomic_load_explicit(&kind_ns_per_mib[1], memory_order_relaxed);
  const int huge = huge_ns <= small_ns;
  if (!timed) return huge;
  const uint64_t best = huge ? huge_ns : small_ns, other = huge ? small_ns : huge_ns;
  const uint64_t every = other / 4 > best ? PAGES_EXPLORE_FAR : PAGES_EXPLORE;
  return n % every == every - 1 ? !huge : huge;
}

int tmk__pages_pick_huge(void) { return pages_pick(1); }

void tmk__pages_note(int huge, size_t bytes, uint64_t cpu_ns) {
  if (!bytes) return;
  const uint64_t sample = (uint64_t)((double)cpu_ns * (double)(1u << 20) / (double)bytes);
  const uint64_t old = atomic_load_explicit(&kind_ns_per_mib[huge], memory_order_relaxed);
  const uint64_t had = atomic_fetch_add_explicit(&kind_samples[huge], 1, memory_order_relaxed);
  /* the first sample as it is, then a quarter of each new one */
  atomic_store_explicit(&kind_ns_per_mib[huge], had ? old - old / 4 + sample / 4 : sample,
                        memory_order_relaxed);
  if (huge) atomic_fetch_add_explicit(&huge_populated, bytes, memory_order_relaxed);
}

void tmk__pages_stats(tmk__pages_counters* out) {
  for (int k = 0; k < 2; k++) {
    out->ns_per_mib[k] = atomic_load_explicit(&kind_ns_per_mib[k], memory_order_relaxed);
    out->samples[k] = atomic_load_explicit(&kind_samples[k], memory_order_relaxed);
  }
  out->huge_bytes = atomic_load_explicit(&huge_populated, memory_order_relaxed);
}

void tmk__pages_reset(void) {
  for (int k = 0; k < 2; k++) {
    atomic_store_explicit(&kind_ns_per_mib[k], 0, memory_order_relaxed);
    atomic_store_explicit(&kind_samples[k], 0, memory_order_relaxed);
  }
  atomic_store_explicit(&kind_regions, 0, memory_order_relaxed);
  atomic_store_explicit(&huge_populated, 0, memory_order_relaxed);
}

void* tmk__map_pages(size_t bytes, int huge, int populate, int* got_huge) {
  if (got_huge) *got_huge = 0;
  if (!huge) {
    const uint64_t t0 = populate ? tmk__own_cpu_ns() : 0;
    void* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
    if (m == MAP_FAILED) return NULL;
    if (populate && MAP_POPULATE != 0) count_populate(bytes, tmk__own_cpu_ns() - t0);
    return m;
  }
  size_t over = bytes + TMK__HUGE_PAGE;
  uint8_t* m = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  uintptr_t a = ((uintptr_t)m + TMK__HUGE_PAGE - 1) & ~(uintptr_t)(TMK__HUGE_PAGE - 1);
  size_t head = (size_t)(a - (uintptr_t)m);
  if (head) munmap(m, head);
  munmap((uint8_t*)a + bytes, over - head - bytes);
  const int kind = pages_pick(populate); /* (memory populated later is not timed) */
  if (got_huge) *got_huge = kind;
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  /* refused where THP is off: 4 KiB pages then; NOHUGEPAGE: where THP is on for every mapping */
  madvise((void*)a, bytes, kind ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
  uint64_t ns;
  if (populate && populate_timed((void*)a, bytes, &ns)) tmk__pages_note(kind, bytes, ns);
  return (void*)a;
}

/* The pool: populated 2 MiB regions that slabs and the UDP queue's blocks hand back, kept for
 * reuse instead of unmapped, up to pool_bound bytes (the largest bound a relay of the process
 * attached with), and given back to the kernel when the last relay detaches. A relay whose queue
 * fills and drains during a burst, or that frees a session and stores a new one, then writes into
 * pages it has already faulted in (on a VM whose host takes back free memory, faulting in is the
 * dearest part of storing a zone: docs/SCALE.md). The link to the next region is kept in the
 * region's first bytes. */
typedef struct pool_region {
  struct pool_region* next;
} pool_region;
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pool_region* pool_head;
static uint64_t pool_bytes, pool_bound, pool_reused;
static unsigned pool_users; /* relays attached */

void tmk__pool_attach(uint64_t bytes) {
  pthread_mutex_lock(&pool_mu);
  pool_users++;
  if (bytes > pool_bound) pool_bound = bytes;
  pthread_mutex_unlock(&pool_mu);
}

/* [pool_mu held] Sets the bound and takes what is kept beyond it off the pool: the caller unmaps
 * the list returned, after unlocking. */
static pool_region* pool_bound_locked(uint64_t bytes) {
  pool_region* drop = NULL;
  pool_bound = bytes;
  while (pool_head && pool_bytes > pool_bound) {
    pool_region* p = pool_head;
    pool_head = p->next;
    pool_bytes -= TMK__HUGE_PAGE;
    p->next = drop;
    drop = p;
  }
  return drop;
}

static void pool_unmap(pool_region* drop) {
  while (drop) {
    pool_region* next = drop->next;
    munmap(drop, TMK__HUGE_PAGE);
    drop = next;
  }
}

void tmk__pool_detach(void) {
  pool_region* drop = NULL;
  pthread_mutex_lock(&pool_mu);
  /* the last relay: bound 0, in the same hold of the lock as the count, so that a relay
   * attaching meanwhile keeps the bound it set */
  if (pool_users > 0 && --pool_users == 0) drop = pool_bound_locked(0);
  pthread_mutex_unlock(&pool_mu);
  pool_unmap(drop);
}

void* tmk__pool_take(void) {
  pthread_mutex_lock(&pool_mu);
  pool_region* p = pool_head;
  if (p) {
    pool_head = p->next;
    pool_bytes -= TMK__HUGE_PAGE;
    pool_reused += TMK__HUGE_PAGE;
  }
  pthread_mutex_unlock(&pool_mu);
  return p ? (void*)p : tmk__map_pages(TMK__HUGE_PAGE, 1, 1, NULL);
}

void tmk__pool_give(void* region) {
  pool_region* p = region;
  pthread_mutex_lock(&pool_mu);
  if (pool_bytes + TMK__HUGE_PAGE <= pool_bound) {
    p->next = pool_head;
    pool_head = p;
    pool_bytes += TMK__HUGE_PAGE;
    p = NULL;
  }
  pthread_mutex_unlock(&pool_mu);
  if (p) munmap(p, TMK__HUGE_PAGE); /* (outside the lock: it takes a while) */
}

void tmk__pool_limit(uint64_t bytes) {
  pthread_mutex_lock(&pool_mu);
  pool_region* drop = pool_bound_locked(bytes);
  pthread_mutex_unlock(&pool_mu);
  pool_unmap(drop);
}

void tmk__pool_stats(uint64_t* kept, uint64_t* reused) {
  pthread_mutex_lock(&pool_mu);
  *kept = pool_bytes;
  *reused = pool_reused;
  pthread_mutex_unlock(&pool_mu);
}

struct tmk__slab {
  tmk__slab* prev;
  tmk__slab* next;
  uint32_t used; /* bytes handed out from the slab's start, this header included */
  uint32_t live; /* blocks not freed yet */
};

#define SLAB_HEADER ((sizeof(tmk__slab) + 63) & ~(size_t)63)

/* A new slab (from the pool, or mapped), or NULL. */
static tmk__slab* slab_map(void) { return (tmk__slab*)tmk__pool_take(); }

/* Takes s out of the list of slabs holding blocks. */
static void slab_unlink(tmk__slabs* sl, tmk__slab* s) {
  if (s->prev) s->prev->next = s->next;
  else sl->all = s->next;
  if (s->next) s->next->prev = s->prev;
  if (sl->cur == s) sl->cur = NULL;
}

static void slab_release(tmk__slabs* sl, tmk__slab* s) {
  slab_unlink(sl, s);
  tmk__pool_give(s);
}

void* tmk__slab_alloc(tmk__slabs* sl, size_t size, tmk__slab** from) {
  size = (size + 63) & ~(size_t)63;
  if (size > TMK__SLAB_BYTES - SLAB_HEADER) return NULL;
  tmk__slab* s = sl->cur;
  if (!s || s->used + size > TMK__SLAB_BYTES) {
    tmk__slab* m = sl->spare;
    if (m) {
      sl->spare = NULL;
    } else {
      m = slab_map();
      if (!m) return NULL;
      sl->maps++;
    }
    if (s && s->live == 0) slab_release(sl, s);
    s = m;
    s->prev = NULL;
    s->next = sl->all;
    if (sl->all) sl->all->prev = s;
    sl->all = s;
    s->used = (uint32_t)SLAB_HEADER;
    s->live = 0;
    sl->cur = s;
  }
  void* p = (uint8_t*)s + s->used;
  s->used += (uint32_t)size;
  s->live++;
  *from = s;
  return p;
}

void tmk__slab_free(tmk__slabs* sl, tmk__slab* s) {
  if (--s->live) return;
  if (s == sl->cur) {
    s->used = (uint32_t)SLAB_HEADER; /* empty: fill it again from the start */
  } else if (!sl->spare) {
    slab_unlink(sl, s);
    sl->spare = s;
  } else {
    slab_release(sl, s);
  }
}

void tmk__slab_free_all(tmk__slabs* sl) {
  while (sl->all) slab_release(sl, sl->all);
  if (sl->spare) tmk__pool_give(sl->spare);
  sl->spare = NULL;
}
