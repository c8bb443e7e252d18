/* relay_slab.c — memory for the store's full zone chunks: 2 MiB slabs, aligned so that the kernel
 * can back each with one huge page (MADV_HUGEPAGE) and faulted in with one call where it can
 * (MADV_POPULATE_WRITE), so that a session storing zones fast does not take a page fault every
 * 256 zones; a slab goes back to the kernel when its last chunk is freed (the store evicts
 * oldest first, so slabs empty in order). */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */
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

/* A new slab, or NULL. Without the madvise calls (another system, an older kernel) its pages
 * are faulted in as they are first written, as malloc'd memory would be. */
static tmk__slab* slab_map(void) {
  uint8_t* raw = mmap(NULL, 2 * (size_t)TMK__SLAB_BYTES, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uint8_t* m = (uint8_t*)(((uintptr_t)raw + TMK__SLAB_BYTES - 1) & ~(uintptr_t)(TMK__SLAB_BYTES - 1));
  uint8_t* rend = raw + 2 * (size_t)TMK__SLAB_BYTES;
  if (m > raw) munmap(raw, (size_t)(m - raw));
  if (m + TMK__SLAB_BYTES < rend) munmap(m + TMK__SLAB_BYTES, (size_t)(rend - (m + TMK__SLAB_BYTES)));
#ifdef MADV_HUGEPAGE
  madvise(m, TMK__SLAB_BYTES, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  madvise(m, TMK__SLAB_BYTES, MADV_POPULATE_WRITE);
#endif
  return (tmk__slab*)(void*)m;
}

static void slab_release(tmk__slabs* sl, tmk__slab* s) {
  if (s->prev) s->prev->next = s->next;
  else sl->all = s->next;
  if (s->next) s->next->prev = s->prev;
  if (sl->cur == s) sl->cur = NULL;
  munmap(s, TMK__SLAB_BYTES);
}

void* tmk__slab_alloc(tmk__slabs* sl, size_t size, tmk__slab** from) {
  size = (size + 63) & ~(size_t)63;
  if (size > TMK__SLAB_BYTES - SLAB_HEADER) return NULL;
  tmk__slab* s = sl->cur;
  if (!s || s->used + size > TMK__SLAB_BYTES) {
    tmk__slab* m = slab_map();
    if (!m) return NULL;
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
  if (s == sl->cur) s->used = (uint32_t)SLAB_HEADER; /* empty: fill it again from the start */
  else slab_release(sl, s);
}

void tmk__slab_free_all(tmk__slabs* sl) {
  while (sl->all) slab_release(sl, sl->all);
}
