/* tmk_proto_zones.c — the batched zone decoder (tmk_proto_next_zones, §5.3): the relay's ingest
 * path. The same zones, in the same order and with the same errors, as tmk_proto_next in
 * tmk_proto_reader.c, whose reference number reader it falls back on. Safe on malicious input. */
#include "tmk_proto_rice.h"

/* =============================================================================================
 * Batched zones (§5.3): tmk_proto_next's zone events in one loop whose state stays in locals, and
 * a bit reader that takes 8 bytes at a time. Only the common codes are read here; escapes, codes
 * longer than what is buffered and the stream's last bytes go through the reference reader
 * (tmk__in_num), so both paths fail alike. tests/proto/test_batch.c and the fuzzers compare the
 * two record by record.
 * =========================================================================================== */

/* The number stream's reader (§5.0) as tmk__in keeps it: bytes are taken from q down to lim
 * (the record stream's end, passed to each call: kept in here, it made the compiler rebuild the
 * struct on every zone for the cold paths' copies), bits sit LSB first in acc. Bits above nbits
 * may hold the next bytes' bits already (a wide refill loads whole bytes but counts only those
 * that fit): they are the stream's own bits, so ORing them in again, here or in tmk__in_refill,
 * changes nothing. */
typedef struct tmk__zb {
  const uint8_t* q;
  uint64_t acc;
  unsigned nbits;
  int err; /* the first failure */
} tmk__zb;

/* The 8 bytes before q, the nearest (q[-1]) lowest: a big-endian load of q - 8. */
static inline uint64_t tmk__load_back8(const uint8_t* q) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint64_t w;
  memcpy(&w, q - 8, 8);
  return __builtin_bswap64(w);
#elif defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  uint64_t w;
  memcpy(&w, q - 8, 8);
  return w;
#else
  return (uint64_t)q[-1] | (uint64_t)q[-2] << 8 | (uint64_t)q[-3] << 16 | (uint64_t)q[-4] << 24 |
         (uint64_t)q[-5] << 32 | (uint64_t)q[-6] << 40 | (uint64_t)q[-7] << 48 |
         (uint64_t)q[-8] << 56;
#endif
}

/* A refill tops the buffer up to 56..63 bits once fewer than this many are left: a zone's
 * numbers nearly always take fewer (a code that does not fit goes the reference reader's way,
 * which refills on its own), so most zones of a busy stream need no refill at all. */
#define TMK__ZB_LOW 32

/* The stream's last 7 bytes, one at a time. */
TMK__COLD void tmk__zb_refill_tail(tmk__zb* b, const uint8_t* lim) {
  while (b->nbits <= 56 && b->q > lim) {
    b->acc |= (uint64_t)*--b->q << b->nbits;
    b->nbits += 8;
  }
}

TMK__HOT void tmk__zb_refill(tmk__zb* b, const uint8_t* lim) {
  if (b->nbits >= TMK__ZB_LOW) return;
  if (b->q - lim >= 8) {
    b->acc |= tmk__load_back8(b->q) << b->nbits;
    b->q -= (63 - b->nbits) >> 3; /* whole bytes that fit: nbits becomes 56..63 */
    b->nbits |= 56;
  } else { /* through a copy, so that b itself never escapes and stays in registers */
    tmk__zb t = *b;
    tmk__zb_refill_tail(&t, lim);
    *b = t;
  }
}

/* (1 << k) - 1 for each Rice parameter k: a load instead of three shifts a number. */
#define TMK__M4(k) ((1ull << (k)) - 1), ((1ull << ((k) + 1)) - 1), ((1ull << ((k) + 2)) - 1), \
                   ((1ull << ((k) + 3)) - 1)
static const uint64_t tmk__zb_mask[64] = {
    TMK__M4(0),  TMK__M4(4),  TMK__M4(8),  TMK__M4(12), TMK__M4(16), TMK__M4(20),
    TMK__M4(24), TMK__M4(28), TMK__M4(32), TMK__M4(36), TMK__M4(40), TMK__M4(44),
    TMK__M4(48), TMK__M4(52), TMK__M4(56), TMK__M4(60)};
#undef TMK__M4

/* The inline path of tmk__zb_num: 1 with the number in *out when its code is wholly in acc
 * (nearly all of them: a Rice code with a short unary part, or an escape of up to 51 bits,
 * which every cold context starts with), 0 (nothing taken) when not. */
TMK__HOT int tmk__zb_fast(tmk__zb* b, uint32_t* u, unsigned ctx, uint64_t* out) {
  const uint32_t s = u[ctx];
  const unsigned k = tmk__u_k(s); /* tmk__rice_k of the state, <= 63 */
  uint64_t acc = b->acc, v;
  const uint64_t ones = tmk__ones(acc, TMK__RICE_ESC);
  unsigned n;
  if (ones < TMK__RICE_ESC) {
    n = (unsigned)ones + 1 + k;
    if (n >= b->nbits) return 0;
    /* the unary part and the low bits are shifted out in turn: the second shift is by k, as
     * the unary part's */
    acc >>= ones + 1;
    v = acc & tmk__zb_mask[k];
    acc >>= k;
    v |= ones << k;
  } else { /* escape: 6 ones, the bit length - 1 in 6 bits, the number in that many bits */
    const unsigned len = (unsigned)((acc >> TMK__RICE_ESC) & 63) + 1;
    n = TMK__RICE_ESC + 6 + len;
    if (n >= b->nbits) return 0; /* else len <= 51 */
    v = (acc >> (TMK__RICE_ESC + 6)) & tmk__zb_mask[len];
    acc >>= n;
  }
  /* nbits <= 64 (tmk__in_refill's most), so n <= 63 (n == nbits is rare) and v < 2^62: a code
   * of n bits holds a number of at most n - 1 bits */
  b->acc = acc;
  b->nbits -= n;
  /* tmk__u_update, with the bit scan in each branch: GCC then lays this loop out in 2 fewer
   * instructions a zone (callgrind, tmk-bench-drain) */
  if (TMK__P_LIKELY(s != TMK__U_ZERO))
    u[ctx] = s - (s >> 3) + 2u * tmk__bitlen63(v);
  else
    u[ctx] = v ? 16u * tmk__bitlen63(v) : TMK__U_ZERO;
  *out = v;
  return 1;
}

/* A number the inline path did not take: the buffer topped up to 56..63 bits, as a refill does,
 * then the inline path again (a long code: the first numbers of a context, escapes), else the
 * reference reader (the stream's last bytes, the longest escapes). */
TMK__COLD uint64_t tmk__zb_slow(tmk__zb* b, const uint8_t* lim, uint32_t* u, unsigned ctx) {
  tmk__in in;
  uint32_t st[TMK_PROTO_NUM_CONTEXTS] = {0};
  uint64_t v;
  if (b->nbits < 56 && b->q - lim >= 8) {
    b->acc |= tmk__load_back8(b->q) << b->nbits;
    b->q -= (63 - b->nbits) >> 3;
    b->nbits |= 56;
    if (tmk__zb_fast(b, u, ctx, &v)) return v;
  }
  st[ctx] = tmk__u_state(u[ctx]);
  in.p = in.end = lim;
  in.q = b->q;
  in.acc = b->acc;
  in.nbits = b->nbits;
  in.nstate = st;
  in.err = 0;
  v = tmk__in_num(&in, ctx);
  u[ctx] = tmk__state_u(st[ctx]);
  b->q = in.q;
  b->acc = in.acc;
  b->nbits = in.nbits;
  b->err = in.err;
  return v;
}

/* Reads the next number of context ctx into *out (tmk__zb_fast, else tmk__zb_slow). The caller
 * refills first. Returns 0, or the error (also left in b->err); the inline path returns a
 * constant 0, so a caller's test of it costs nothing there. u: the states as tmk__state_u keeps
 * them. */
TMK__HOT int tmk__zb_num(tmk__zb* b, const uint8_t* lim, uint32_t* u, unsigned ctx,
                         uint64_t* out) {
  if (tmk__zb_fast(b, u, ctx, out)) return 0;
  { /* through a copy, so that b itself never escapes and stays in registers */
    tmk__zb t = *b;
    *out = tmk__zb_slow(&t, lim, u, ctx);
    *b = t;
    return b->err;
  }
}

/* A record stream varint (§3.1) of at most max, as tmk__in_u32 reads it: the bytes it takes
 * (p itself is not passed by address, so that the caller keeps it in a register), or the error. */
static int tmk__zb_var(const uint8_t* p, const uint8_t* end, uint64_t max, uint64_t* out) {
  uint64_t v;
  int m;
  if (p < end && *p < 0x80) {
    *out = *p;
    return 1;
  }
  m = tmk_proto_varint_get(p, end, &v);
  if (m < 0) return m;
  if (v > max) return TMK_ERANGE;
  *out = v;
  return m;
}

/* The site of an OPEN or LEAF whose tag byte p has just been taken: in the tag when it is a short
 * one (tag >= short_tag), else the varint after it. Returns the bytes taken after the tag, or the
 * error. */
static inline int tmk__zb_site(unsigned tag, unsigned short_tag, const uint8_t* p,
                               const uint8_t* end, uint32_t* site) {
  uint64_t v;
  int m;
  if (tag >= short_tag) {
    *site = tag - short_tag + 1;
    return 0;
  }
  if ((m = tmk__zb_var(p, end, 0xFFFFFFFFull, &v)) < 0) return m;
  *site = (uint32_t)v;
  return m;
}

/* What an OPEN and a LEAF read alike after their tag byte: the site (moving *pp past it), then
 * the gap, checking that the zone's depth still fits 32 bits. Returns 0, or the error, also
 * left in b->err. */
TMK__HOT int tmk__zb_site_gap(tmk__zb* b, unsigned tag, unsigned short_tag, const uint8_t** pp,
                              const uint8_t* end, uint32_t* ns, uint64_t depth, uint32_t* site,
                              uint64_t* gap) {
  int m = tmk__zb_site(tag, short_tag, *pp, end, site);
  if (m < 0) return b->err = m;
  *pp += m;
  tmk__zb_refill(b, end);
  if (tmk__zb_num(b, end, ns, TMK__NUM_GAP, gap)) return b->err;
  if (TMK__P_UNLIKELY(depth > 0xFFFFFFFFull)) return b->err = TMK_ERANGE;
  return 0;
}

/* A number the predictor codes (§5.3) in slot sl: the slot's value plus the zigzag read in context
 * `ctx` (TMK__NUM_DUR or TMK__NUM_CLOSE) when the slot holds `site`, else a fresh number in the
 * matching fresh context (ctx + 2); the slot then holds the value. Returns 0, or the error. */
TMK__HOT int tmk__zb_pnum(tmk__zb* b, const uint8_t* lim, uint32_t* u, tmk_proto_slot* sl,
                          uint32_t site, unsigned ctx, uint64_t* out) {
  uint64_t v;
  if (TMK__P_LIKELY(sl->used && sl->site == site)) {
    if (tmk__zb_num(b, lim, u, ctx, &v)) return b->err;
    v = sl->duration + tmk__unzz(v);
  } else {
    if (tmk__zb_num(b, lim, u, ctx + 2, &v)) return b->err;
    sl->site = site;
    sl->used = 1;
  }
  sl->duration = v;
  *out = v;
  return 0;
}
typedef char tmk__zb_fresh_check[TMK__NUM_FRESH == TMK__NUM_DUR + 2 &&
                                 TMK__NUM_CLOSE_FRESH == TMK__NUM_CLOSE + 2 ? 1 : -1];

int tmk_proto_next_zones(tmk_proto_reader* r, tmk_proto_zone* out, size_t cap, uint32_t* thread) {
  const uint8_t* p;
  const uint8_t* end;
  tmk__zb b;
  uint32_t ns[TMK_PROTO_NUM_CONTEXTS]; /* the context states, as tmk__state_u keeps them */
  uint64_t cursor, depth; /* depth: the root depth plus the open zones */
  uint32_t nopen;
  tmk_proto_slot* leafp; /* the leaf predictor (§5.3) */
  tmk_proto_zone* o = out;
  tmk_proto_zone* oend;
  unsigned i;
  int m;
  if (!r || !thread || (!out && cap)) return TMK_EINVAL;
  if (r->done < 0) return r->done;
  if (r->hdr.type != TMK_PKT_DATA) {
    r->done = TMK_ETYPE;
    return TMK_ETYPE;
  }
  if (cap > 0x7FFFFFFF) cap = 0x7FFFFFFF; /* the count is returned as an int */
  oend = out + cap;
  *thread = r->thread;
  p = r->p;
  end = r->end;
  b.q = r->q;
  b.acc = r->nacc;
  b.nbits = r->nbits;
  b.err = 0;
  for (i = 0; i < TMK_PROTO_NUM_CONTEXTS; i++) ns[i] = tmk__state_u(r->nstate[i]);
  cursor = r->zone_cursor;
  nopen = r->nopen;
  depth = (uint64_t)r->root_depth + nopen;
  leafp = r->predict[0];
  /* Every zone event takes at least one record byte and gives at most one zone, so while p is
   * below plim = p + min(record bytes left, room for zones) both are left: one test a record. */
  for (;;) {
    const size_t left = (size_t)(end - p), room = (size_t)(oend - o);
    const uint8_t* const plim = p + (left < room ? left : room);
    if (p >= plim) break;
    while (p < plim) {
      unsigned tag = *p;
      uint64_t gap, start, v;
      uint32_t site;
      tmk_proto_slot* sl;
      if (tag >= TMK__TAG_LEAF_SHORT && !(depth >> 32)) {
        /* A run of short LEAFs (§5.3), most of a busy stream: the depth does not change. */
        const uint32_t d32 = (uint32_t)depth;
        do {
          uint64_t dur;
          site = (uint32_t)*p++ - TMK__TAG_LEAF_SHORT + 1;
          tmk__zb_refill(&b, end); /* at least 32 bits: both numbers, nearly always */
          if (tmk__zb_num(&b, end, ns, TMK__NUM_GAP, &gap)) goto failed;
          start = cursor + gap;
          sl = &leafp[site & (TMK_PROTO_PREDICT_SLOTS - 1)];
          if (TMK__P_LIKELY(sl->site == site)) { /* site >= 1: a used slot holds it */
            if (tmk__zb_num(&b, end, ns, TMK__NUM_DUR, &v)) goto failed;
            dur = sl->duration + tmk__unzz(v);
          } else {
            if (tmk__zb_num(&b, end, ns, TMK__NUM_FRESH, &dur)) goto failed;
            sl->site = site;
            sl->used = 1;
          }
          sl->duration = dur;
          cursor = start + dur;
          o->start = start;
          o->duration = dur;
          o->site = site;
          o->depth = d32;
          o++;
        } while (p < plim && *p >= TMK__TAG_LEAF_SHORT);
      } else if (tag == TMK__TAG_CLOSE) {
        uint64_t tail;
        p++;
        if (TMK__P_UNLIKELY(nopen == 0)) {
          b.err = TMK_ENEST;
          goto stopped;
        }
        tmk__zb_refill(&b, end);
        nopen--;
        depth--;
        site = r->open[nopen].site;
        start = r->open[nopen].start;
        /* start and site now, duration and depth once the tail is read: stores far apart in
         * the zone stay scalar stores (the compiler pairs adjacent ones through vector
         * registers) */
        o->start = start;
        o->site = site;
        sl = &r->predict[1][site & (TMK_PROTO_PREDICT_SLOTS - 1)];
        if (tmk__zb_pnum(&b, end, ns, sl, site, TMK__NUM_CLOSE, &tail)) goto stopped;
        cursor += tail;
        o->duration = cursor - start;
        o->depth = (uint32_t)depth;
        o++;
      } else if ((tag & 0xC0) == TMK__TAG_OPEN_SHORT || tag == TMK__TAG_OPEN) { /* OPEN */
        p++;
        if (tmk__zb_site_gap(&b, tag, TMK__TAG_OPEN_SHORT, &p, end, ns, depth, &site, &gap))
          goto stopped;
        if (TMK__P_UNLIKELY(nopen >= TMK_PROTO_MAX_OPEN)) {
          b.err = TMK_ENEST;
          goto stopped;
        }
        cursor += gap;
        r->open[nopen].start = cursor;
        r->open[nopen].site = site;
        nopen++;
        depth++;
      } else if (tag >= TMK__TAG_LEAF_SHORT || tag == TMK__TAG_LEAF) { /* LEAF (§5.3) */
        uint64_t dur;
        p++;
        if (tmk__zb_site_gap(&b, tag, TMK__TAG_LEAF_SHORT, &p, end, ns, depth, &site, &gap))
          goto stopped;
        start = cursor + gap;
        sl = &leafp[site & (TMK_PROTO_PREDICT_SLOTS - 1)];
        if (tmk__zb_pnum(&b, end, ns, sl, site, TMK__NUM_DUR, &dur)) goto stopped;
        cursor = start + dur;
        o->start = start;
        o->duration = dur;
        o->site = site;
        o->depth = (uint32_t)depth;
        o++;
      } else if (tag == TMK__TAG_AT) {
        uint64_t root, delta;
        p++;
        if ((m = tmk__zb_var(p, end, 0xFFFFFFFFull, &root)) < 0) {
          b.err = m;
          goto stopped;
        }
        p += m;
        if ((m = tmk__zb_var(p, end, UINT64_MAX, &delta)) < 0) {
          b.err = m;
          goto stopped;
        }
        p += m;
        if (nopen) {
          b.err = TMK_ENEST;
          goto stopped;
        }
        depth = root; /* nothing is open */
        cursor += tmk__unzz(delta);
      } else if (tag == TMK__TAG_THREAD && o == out) {
        /* a THREAD before any zone of this call, as tmk_proto_next takes it: the zones that
         * follow are the new thread's */
        uint64_t t;
        p++;
        if ((m = tmk__zb_var(p, end, 0xFFFFFFFFull, &t)) < 0) {
          b.err = m;
          goto stopped;
        }
        p += m;
        if (nopen) {
          b.err = TMK_ENEST;
          goto stopped;
        }
        r->thread = *thread = (uint32_t)t;
        cursor = r->event_cursor = r->hdr.base_time;
        depth = 0;
      } else {
        goto stopped; /* not a zone event: tmk_proto_next's */
      }
    }
  }
stopped:
  if (b.err) {
  failed:
    /* the zones before the failure are handed out as tmk_proto_next would, the failure on
     * the next call */
    r->done = b.err;
    return o > out ? (int)(o - out) : b.err;
  }
  r->p = p;
  r->q = b.q;
  r->nacc = b.acc;
  r->nbits = b.nbits;
  for (i = 0; i < TMK_PROTO_NUM_CONTEXTS; i++) r->nstate[i] = tmk__u_state(ns[i]);
  r->zone_cursor = cursor;
  r->root_depth = (uint32_t)(depth - nopen);
  r->nopen = nopen;
  return (int)(o - out);
}
