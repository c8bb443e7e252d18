/* proto_util.c — helpers shared by the protocol tests (see proto_util.h). Independent of the
 * implementation where it matters: the hand-written header and varint writers follow
 * docs/PROTOCOL.md §2 and §3 directly. */
#include "proto_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int decode_ref(pt_decoded* d, const void* packet, size_t len);

int pt_decode(pt_decoded* d, const void* packet, size_t len) {
  static const size_t runs[] = {1, 2, 7, PT_MAX_RECS};
  size_t i;
  int rc = decode_ref(d, packet, len);
  if (rc == TMK_ENOMEM) return rc;
  for (i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    pt_decoded b;
    char what[64];
    long at;
    pt_decode_batched(&b, packet, len, runs[i]);
    snprintf(what, sizeof what, "batched decoder, runs of %lu zones", (unsigned long)runs[i]);
    at = b.rc == TMK_ENOMEM ? -1 : pt_decodings_differ(d, &b, what);
    pt_decoded_free(&b);
    if (at >= 0) {
      d->rc = PT_EBATCH;
      break;
    }
  }
  return d->rc;
}

static int decode_open(pt_decoded* d, tmk_proto_reader* r, const void* packet, size_t len) {
  int rc;
  memset(d, 0, sizeof *d);
  d->recs = (tmk_proto_record*)calloc(PT_MAX_RECS, sizeof *d->recs);
  d->scratch = (uint8_t*)malloc(TMK_PROTO_MAX_BODY);
  d->copy = (uint8_t*)malloc(len ? len : 1);
  if (!d->recs || !d->scratch || !d->copy) {
    d->rc = TMK_ENOMEM;
    return d->rc;
  }
  if (len) memcpy(d->copy, packet, len);
  rc = tmk_proto_open(r, d->copy, len, d->scratch, TMK_PROTO_MAX_BODY);
  if (rc < 0) {
    d->rc = rc;
    d->failed_in_open = 1;
    return rc;
  }
  d->hdr = r->hdr;
  return 0;
}

int pt_decode_batched(pt_decoded* d, const void* packet, size_t len, size_t run) {
  tmk_proto_reader r;
  tmk_proto_zone* z = (tmk_proto_zone*)malloc(run * sizeof *z);
  if (!z) {
    memset(d, 0, sizeof *d);
    d->rc = TMK_ENOMEM;
    return d->rc;
  }
  if (decode_open(d, &r, packet, len) != 0) {
    free(z);
    return d->rc;
  }
  for (;;) {
    size_t room = PT_MAX_RECS - d->n, i;
    uint32_t thread = 0xDEADBEEF;
    int rc;
    if (room == 0) {
      d->rc = TMK_ENOSPC;
      break;
    }
    rc = tmk_proto_next_zones(&r, z, run < room ? run : room, &thread);
    if (rc < 0) {
      d->rc = rc;
      break;
    }
    for (i = 0; i < (size_t)rc; i++, d->n++) {
      d->recs[d->n].type = TMK_REC_ZONE;
      d->recs[d->n].thread = thread;
      d->recs[d->n].u.zone = z[i];
    }
    if (rc > 0) continue;
    rc = tmk_proto_next(&r, &d->recs[d->n]);
    if (rc < 0) {
      d->rc = rc;
      break;
    }
    if (rc == 0) break;
    d->n++;
  }
  free(z);
  return d->rc;
}

long pt_decodings_differ(const pt_decoded* ref, const pt_decoded* got, const char* what) {
  static char a[4096], b[4096];
  size_t i, n = ref->n < got->n ? ref->n : got->n;
  for (i = 0; i < n; i++) {
    const tmk_proto_record* x = &ref->recs[i];
    const tmk_proto_record* y = &got->recs[i];
    tmk_proto_format_record(x, a, sizeof a);
    tmk_proto_format_record(y, b, sizeof b);
    if (x->type != y->type || x->thread != y->thread || strcmp(a, b) != 0) {
      fprintf(stderr, "%s: record %lu differs from tmk_proto_next's:\n  next:    %s\n  batched: %s\n",
              what, (unsigned long)i, a, b);
      return (long)i;
    }
  }
  if (ref->n != got->n || ref->rc != got->rc) {
    fprintf(stderr, "%s: %lu records then %s, tmk_proto_next: %lu records then %s\n", what,
            (unsigned long)got->n, tmk_err_name(got->rc), (unsigned long)ref->n,
            tmk_err_name(ref->rc));
    return (long)n;
  }
  return -1;
}

static int decode_ref(pt_decoded* d, const void* packet, size_t len) {
  tmk_proto_reader r;
  int rc;
  if (decode_open(d, &r, packet, len) != 0) return d->rc;
  for (;;) {
    if (d->n == PT_MAX_RECS) {
      d->rc = TMK_ENOSPC;
      break;
    }
    rc = tmk_proto_next(&r, &d->recs[d->n]);
    if (rc < 0) {
      d->rc = rc;
      break;
    }
    if (rc == 0) break;
    d->n++;
  }
  return d->rc;
}

void pt_decoded_free(pt_decoded* d) {
  free(d->recs);
  free(d->scratch);
  free(d->copy);
  memset(d, 0, sizeof *d);
}

size_t pt_zones_of(const pt_decoded* d, tmk_proto_zone* out, size_t cap, uint32_t thread) {
  size_t i, n = 0;
  for (i = 0; i < d->n && n < cap; i++)
    if (d->recs[i].type == TMK_REC_ZONE && d->recs[i].thread == thread) out[n++] = d->recs[i].u.zone;
  return n;
}

pt_enc* pt_enc_new(size_t body_cap, int big_endian, int lz4) {
  pt_enc* e = (pt_enc*)calloc(1, sizeof *e);
  if (!e) return NULL;
  e->body_cap = body_cap;
  e->body = (uint8_t*)malloc(body_cap ? body_cap : 1);
  e->pkt_cap = body_cap + TMK_PROTO_MAX_HEADER;
  e->pkt = (uint8_t*)malloc(e->pkt_cap);
  if (lz4 && tmk_proto_lz4_state_size() > 0) {
    /* calloc'd memory is suitably aligned for any type, which covers the 8-byte requirement */
    e->lz4 = calloc(1, tmk_proto_lz4_state_size());
    if (!e->lz4) goto fail;
  }
  if (!e->body || !e->pkt) goto fail;
  if (tmk_proto_writer_init(&e->w, e->body, body_cap) != 0) goto fail;
  if (big_endian >= 0) e->w.big_endian = big_endian;
  return e;
fail:
  pt_enc_free(e);
  return NULL;
}

void pt_enc_free(pt_enc* e) {
  if (!e) return;
  free(e->body);
  free(e->pkt);
  free(e->lz4);
  free(e);
}

int pt_enc_finish(pt_enc* e, uint64_t session, uint64_t seq) {
  e->pkt_len = tmk_proto_finish(&e->w, session, seq, e->pkt, e->pkt_cap, e->lz4);
  return e->pkt_len;
}

static int zone_cmp(const void* pa, const void* pb) {
  const tmk_proto_zone* a = (const tmk_proto_zone*)pa;
  const tmk_proto_zone* b = (const tmk_proto_zone*)pb;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  if (a->depth != b->depth) return a->depth < b->depth ? -1 : 1;
  if (a->site != b->site) return a->site < b->site ? -1 : 1;
  if (a->duration != b->duration) return a->duration < b->duration ? -1 : 1;
  return 0;
}

void pt_sort_zones(tmk_proto_zone* z, size_t n) { qsort(z, n, sizeof *z, zone_cmp); }

void pt_print_zone(const char* what, const tmk_proto_zone* z) {
  fprintf(stderr, "  %s: site %u depth %u start %llu (%#llx) duration %llu\n", what,
          (unsigned)z->site, (unsigned)z->depth, (unsigned long long)z->start,
          (unsigned long long)z->start, (unsigned long long)z->duration);
}

long pt_zone_sets_differ(const tmk_proto_zone* a, size_t na, const tmk_proto_zone* b, size_t nb) {
  tmk_proto_zone* sa = (tmk_proto_zone*)malloc((na + 1) * sizeof *sa);
  tmk_proto_zone* sb = (tmk_proto_zone*)malloc((nb + 1) * sizeof *sb);
  long diff = -1;
  size_t i;
  if (!sa || !sb) {
    free(sa);
    free(sb);
    return 0;
  }
  if (na) memcpy(sa, a, na * sizeof *sa);
  if (nb) memcpy(sb, b, nb * sizeof *sb);
  pt_sort_zones(sa, na);
  pt_sort_zones(sb, nb);
  for (i = 0; i < na && i < nb; i++) {
    if (zone_cmp(&sa[i], &sb[i]) != 0) {
      diff = (long)i;
      fprintf(stderr, "zone sets differ at sorted index %lu:\n", (unsigned long)i);
      pt_print_zone("expected", &sa[i]);
      pt_print_zone("got     ", &sb[i]);
      break;
    }
  }
  if (diff < 0 && na != nb) {
    diff = (long)(na < nb ? na : nb);
    fprintf(stderr, "zone sets differ in size: expected %lu, got %lu\n", (unsigned long)na,
            (unsigned long)nb);
  }
  free(sa);
  free(sb);
  return diff;
}

uint64_t pt_rand(uint64_t* s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

size_t pt_varint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

size_t pt_svarint(uint8_t* p, int64_t v) {
  uint64_t u = (uint64_t)v;
  return pt_varint(p, (u << 1) ^ (v < 0 ? ~(uint64_t)0 : 0));
}

size_t pt_header(uint8_t* p, uint8_t flags, uint8_t type, uint64_t session, uint64_t seq,
                 uint64_t base, uint32_t raw_len) {
  size_t n = 0;
  int i;
  p[n++] = 'T';
  p[n++] = 'M';
  p[n++] = 'K';
  p[n++] = 1;
  p[n++] = flags;
  p[n++] = type;
  for (i = 0; i < 8; i++) {
    int shift = (flags & TMK_PKT_F_BIG_ENDIAN) ? 8 * (7 - i) : 8 * i;
    p[n++] = (uint8_t)(session >> shift);
  }
  n += pt_varint(p + n, seq);
  n += pt_varint(p + n, base);
  if (flags & TMK_PKT_F_LZ4) n += pt_varint(p + n, raw_len);
  return n;
}

void pt_resolver_init(pt_resolver* r) { memset(r, 0, sizeof *r); }

static void resolver_keep(pt_resolver* r, uint32_t site, uint64_t time) {
  pt_resolved* o;
  if (site == 0 || r->nout == PT_RES_PENDING) return;
  o = &r->out[r->nout++];
  o->site = site;
  o->time = time;
  if (site < PT_RES_SITES && r->known[site]) {
    strcpy(o->name, r->names[site]);
  } else {
    o->name[0] = 0;
    r->unresolved++;
  }
}

void pt_resolver_feed(pt_resolver* r, const tmk_proto_record* rec) {
  size_t i, n;
  switch (rec->type) {
    case TMK_REC_SITE:
      if (rec->u.site.id >= PT_RES_SITES) return;
      n = rec->u.site.name.len < 63 ? rec->u.site.name.len : 63;
      memcpy(r->names[rec->u.site.id], rec->u.site.name.ptr, n);
      r->names[rec->u.site.id][n] = 0;
      r->known[rec->u.site.id] = 1;
      for (i = 0; i < r->nout; i++) {
        if (r->out[i].site == rec->u.site.id && r->out[i].name[0] == 0) {
          strcpy(r->out[i].name, r->names[rec->u.site.id]);
          r->unresolved--;
        }
      }
      break;
    case TMK_REC_ZONE: resolver_keep(r, rec->u.zone.site, rec->u.zone.start); break;
    case TMK_REC_MARKER_BEGIN:
    case TMK_REC_MARKER_END: resolver_keep(r, rec->u.marker.site, rec->u.marker.time); break;
    case TMK_REC_PLOT: resolver_keep(r, rec->u.plot.site, rec->u.plot.time); break;
    case TMK_REC_MESSAGE: resolver_keep(r, rec->u.message.site, rec->u.message.time); break;
    default: break;
  }
}
