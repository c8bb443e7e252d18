/* relay_slab.c — memory for the store's full zone chunks: slabs of TMK__SLAB_BYTES faulted in by
 * the kernel in one call where it can (MAP_POPULATE), so that a session storing zones fast does
 * not take a page fault every 256 zones; a slab whose last chunk is freed (the store evicts oldest
 * first, so slabs empty in order) is kept as the one spare and reused before a new one is mapped,
 * so that a store at its budget, evicting as fast as it stores, takes no fresh pages at all;
 * emptied slabs beyond the spare go back to the kernel. Huge pages (MADV_HUGEPAGE on
 * aligned slabs) were tried: faster in process on a quiet machine, but slower in the relay
 * under load (clearing 2 MiB pages, compaction), so they are not used. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_POPULATE */
#include <stdint.h>
#include <sys/mman.h>

#include "relay_core.h"

#ifndef MAP_ANONYMOUS
#define MAP_ANONYMOUS MAP_ANON
#endif

struct tmk__slab {
  tmk__slab* prev;
  tmk__slab* next;
  uint32_t used; /* bytes handed out from the slab's start, this header included */
  uint32_t live; /* blocks not freed yet */
};

#define SLAB_HEADER ((sizeof(tmk__slab) + 63) & ~(size_t)63)

#ifndef MAP_POPULATE
#define MAP_POPULATE 0 /* another system: pages are faulted in as they are first written */
#endif

/* A new slab, or NULL. */
static tmk__slab* slab_map(void) {
  void* m = mmap(NULL, TMK__SLAB_BYTES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return m == MAP_FAILED ? NULL : (tmk__slab*)m;
}

/* Takes s out of the list of slabs holding blocks. */
static void slab_unlink(tmk__slabs* sl, tmk__slab* s) {
  if (s->prev) s->prev->next = s->next;
  else sl->all = s->next;
  if (s->next) s->next->prev = s->prev;
  if (sl->cur == s) sl->cur = NULL;
}

static void slab_release(tmk__slabs* sl, tmk__slab* s) {
  slab_unlink(sl, s);
  munmap(s, TMK__SLAB_BYTES);
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
  if (sl->spare) munmap(sl->spare, TMK__SLAB_BYTES);
  sl->spare = NULL;
}
