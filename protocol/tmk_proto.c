/* tmk_proto.c — encoder and decoder for the telemark wire protocol (docs/PROTOCOL.md).
 * The decoder is safe on malicious input: every read is bounds-checked against the packet end
 * and every failure is a negative TMK_E* code. No allocation, no OS calls. */
#include "tmk_proto.h"

#include <string.h>

#if defined(TMK_HAVE_LZ4) && TMK_HAVE_LZ4
#include <lz4.h>
#define TMK__LZ4 1
#else
#define TMK__LZ4 0
#endif

#define TMK__TAG_SITE 0x01
#define TMK__TAG_THREAD 0x02
#define TMK__TAG_AT 0x03
#define TMK__TAG_MARKER_BEGIN 0x04
#define TMK__TAG_MARKER_END 0x05
#define TMK__TAG_FRAME 0x06
#define TMK__TAG_PLOT_I 0x07
#define TMK__TAG_PLOT_D 0x08
#define TMK__TAG_MESSAGE 0x09
#define TMK__TAG_THREAD_NAME 0x0A
#define TMK__TAG_DROPS 0x0B
#define TMK__TAG_CLOCK 0x0C
#define TMK__TAG_TEAM 0x0D
#define TMK__TAG_CLOSE 0x20
#define TMK__TAG_LEAF 0x21
#define TMK__TAG_OPEN 0x22
#define TMK__TAG_OPEN_SHORT 0x40 /* 0x40..0x7F: site 1..64 */
#define TMK__TAG_LEAF_SHORT 0x80 /* 0x80..0xFF: site 1..128 */
#define TMK__OPEN_SHORT_MAX 64u
#define TMK__LEAF_SHORT_MAX 128u
#define TMK__CLOSE_MAX 14u     /* tag + the longest number code, rounded up to whole bytes */
#define TMK__ZONE_MAX 56u      /* AT + tag + site + two longest number codes, and then some */
#define TMK__RICE_ESC 6u       /* unary length that announces an escaped number (§5.0) */
#define TMK__NUM_GAP 0         /* number contexts */
#define TMK__NUM_DUR 1
#define TMK__NUM_CLOSE 2
#define TMK__NUM_FRESH 3       /* duration of a leaf whose site has no prediction yet */
#define TMK__NUM_CLOSE_FRESH 4 /* tail of a parent whose site has no prediction yet */
#define TMK__HALF 0x8000000000000000ull
#if defined(__GNUC__) || defined(__clang__)
#define TMK__HOT static inline __attribute__((always_inline))
#else
#define TMK__HOT static
#endif
#define TMK__APREFIX 6u        /* room for the two stream lengths (3 bytes each, body <= 65536) */

/* =============================================================================================
 * Primitives (§3)
 * =========================================================================================== */

int tmk_proto_host_big_endian(void) {
  const uint16_t probe = 0x0102;
  uint8_t first;
  memcpy(&first, &probe, 1);
  return first == 0x01;
}

static unsigned tmk__varint_size(uint64_t v) {
  unsigned n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

int tmk_proto_varint_put(uint8_t* out, uint64_t v) {
  int n = 0;
  while (v >= 0x80) {
    out[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  out[n++] = (uint8_t)v;
  return n;
}

int tmk_proto_varint_get(const uint8_t* p, const uint8_t* end, uint64_t* v) {
  uint64_t r = 0;
  int i;
  for (i = 0; i < 10; i++) {
    uint8_t b;
    if (p + i >= end) return TMK_ETRUNC;
    b = p[i];
    if (i == 9 && b > 1) return TMK_EVARINT;
    r |= (uint64_t)(b & 0x7F) << (7 * i);
    if (!(b & 0x80)) {
      *v = r;
      return i + 1;
    }
  }
  return TMK_EVARINT;
}

/* Zigzag on two's-complement bit patterns, so no signed overflow or shift is ever involved. */
static uint64_t tmk__zz(uint64_t v) { return (v << 1) ^ (0 - (v >> 63)); }
static uint64_t tmk__unzz(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }
static int64_t tmk__u2i(uint64_t u) {
  return u <= 0x7FFFFFFFFFFFFFFFull ? (int64_t)u : -(int64_t)(~u) - 1;
}

/* Bounded output: writes stop at `end`, `ok` turns 0, and the caller rolls back. */
typedef struct tmk__ob {
  uint8_t* p;
  uint8_t* end;
  int ok;
} tmk__ob;

static void tmk__ob_u8(tmk__ob* o, unsigned b) {
  if (o->p < o->end)
    *o->p++ = (uint8_t)b;
  else
    o->ok = 0;
}

static void tmk__ob_var(tmk__ob* o, uint64_t v) {
  if (o->end - o->p >= 10) {
    o->p += tmk_proto_varint_put(o->p, v);
  } else {
    uint8_t t[10];
    int n = tmk_proto_varint_put(t, v);
    if (o->end - o->p >= n) {
      memcpy(o->p, t, (size_t)n);
      o->p += n;
    } else {
      o->ok = 0;
    }
  }
}

static void tmk__ob_bytes(tmk__ob* o, const void* data, size_t n) {
  if ((size_t)(o->end - o->p) >= n) {
    if (n) memcpy(o->p, data, n);
    o->p += n;
  } else {
    o->ok = 0;
  }
}

static void tmk__ob_str(tmk__ob* o, const char* s, size_t n) {
  if (n > TMK_PROTO_MAX_STRING) {
    o->ok = 0;
    return;
  }
  tmk__ob_var(o, n);
  tmk__ob_bytes(o, s, n);
}

/* A fixed-width 64-bit field in the packet's byte order (§3.4). */
static void tmk__ob_u64(tmk__ob* o, uint64_t v, int big_endian) {
  uint8_t b[8];
  int i;
  for (i = 0; i < 8; i++) b[big_endian ? 7 - i : i] = (uint8_t)(v >> (8 * i));
  tmk__ob_bytes(o, b, 8);
}

static uint64_t tmk__get_u64(const uint8_t* b, int big_endian) {
  uint64_t v = 0;
  int i;
  for (i = 0; i < 8; i++) v |= (uint64_t)b[big_endian ? 7 - i : i] << (8 * i);
  return v;
}

/* ---- Number stream coding (§5.0): adaptive Rice codes, one running mean per context ---- */

/* Bit length of v (0 for 0), and the number of trailing one bits of v capped at `cap`. */
#if defined(__GNUC__) || defined(__clang__)
static unsigned tmk__bitlen(uint64_t v) { return v ? 64u - (unsigned)__builtin_clzll(v) : 0; }
static unsigned tmk__ones(uint64_t v, unsigned cap) {
  return (unsigned)__builtin_ctzll(~v | (1ull << cap));
}
#else
static unsigned tmk__bitlen(uint64_t v) {
  unsigned n = 0;
  while (v) {
    n++;
    v >>= 1;
  }
  return n;
}
static unsigned tmk__ones(uint64_t v, unsigned cap) {
  unsigned n = 0;
  while (n < cap && ((v >> n) & 1)) n++;
  return n;
}
#endif

/* A context's state is 16 times the running mean of its numbers' bit lengths, so one outlier
 * moves the Rice parameter by a bit or two instead of throwing it off for many numbers. */
static unsigned tmk__rice_k(uint32_t state) {
  unsigned len = (state + 12) >> 4;
  return len > 1 ? len - 1 : 0;
}

static uint32_t tmk__rice_update(uint32_t state, uint64_t v) {
  if (state == 0) return 16u * tmk__bitlen(v); /* a context's first number sets it at once */
  return state - (state >> 3) + 2u * tmk__bitlen(v);
}

static void tmk__nstate_init(uint32_t* s) {
  unsigned i;
  for (i = 0; i < TMK_PROTO_NUM_CONTEXTS; i++) s[i] = 0;
}

/* The predictor (§5.3) for `site` in table 0 (leaf durations) or 1 (parent tails): returns the
 * context its number is coded in, predicted or fresh, and the prediction in *pred. */
static unsigned tmk__predict(tmk_proto_slot (*t)[TMK_PROTO_PREDICT_SLOTS], unsigned table,
                             uint32_t site, uint64_t* pred) {
  const tmk_proto_slot* sl = &t[table][site & (TMK_PROTO_PREDICT_SLOTS - 1)];
  if (sl->used && sl->site == site) {
    *pred = sl->duration;
    return table ? TMK__NUM_CLOSE : TMK__NUM_DUR;
  }
  *pred = 0;
  return table ? TMK__NUM_CLOSE_FRESH : TMK__NUM_FRESH;
}

/* A predicted number is coded as the zigzag of its difference from the prediction, a fresh one
 * as itself. */
static uint64_t tmk__pcode(unsigned ctx, uint64_t v, uint64_t pred) {
  return ctx == TMK__NUM_DUR || ctx == TMK__NUM_CLOSE ? tmk__zz(v - pred) : v;
}
static uint64_t tmk__punc(unsigned ctx, uint64_t code, uint64_t pred) {
  return ctx == TMK__NUM_DUR || ctx == TMK__NUM_CLOSE ? pred + tmk__unzz(code) : code;
}

static void tmk__learn(tmk_proto_slot (*t)[TMK_PROTO_PREDICT_SLOTS], unsigned table, uint32_t site,
                       uint64_t v) {
  tmk_proto_slot* sl = &t[table][site & (TMK_PROTO_PREDICT_SLOTS - 1)];
  sl->site = site;
  sl->used = 1;
  sl->duration = v;
}

/* Length in bits of v's code with parameter k. */
static unsigned tmk__rice_bits(uint64_t v, unsigned k) {
  uint64_t q = v >> k;
  return q < TMK__RICE_ESC ? (unsigned)q + 1 + k : TMK__RICE_ESC + 6 + tmk__bitlen(v);
}

/* =============================================================================================
 * Header (§2)
 * =========================================================================================== */

static int tmk__write_header(uint8_t* out, size_t cap, unsigned flags, unsigned type,
                             uint64_t session, uint64_t seq, uint64_t base, uint32_t raw_len) {
  tmk__ob o;
  o.p = out;
  o.end = out + cap;
  o.ok = 1;
  tmk__ob_bytes(&o, "TMK", 3);
  tmk__ob_u8(&o, TMK_PROTO_VERSION);
  tmk__ob_u8(&o, flags);
  tmk__ob_u8(&o, type);
  tmk__ob_u64(&o, session, (flags & TMK_PKT_F_BIG_ENDIAN) != 0);
  tmk__ob_var(&o, seq);
  tmk__ob_var(&o, base);
  if (flags & TMK_PKT_F_LZ4) tmk__ob_var(&o, raw_len);
  if (!o.ok) return TMK_ENOSPC;
  return (int)(o.p - out);
}

int tmk_proto_parse_header(const void* packet, size_t len, tmk_proto_header* h) {
  const uint8_t* p = (const uint8_t*)packet;
  const uint8_t* end;
  uint64_t v;
  int n;
  if (!packet || !h) return TMK_EINVAL;
  if (len > TMK_PROTO_MAX_PACKET) return TMK_ETOOBIG;
  if (memcmp(p, "TMK", len < 3 ? len : 3) != 0) return TMK_EMAGIC;
  if (len < 4) return TMK_ETRUNC;
  if (p[3] != TMK_PROTO_VERSION) return TMK_EVERSION;
  if (len < 14) return TMK_ETRUNC;
  memset(h, 0, sizeof *h);
  h->version = p[3];
  h->flags = p[4];
  h->type = p[5];
  if (h->flags & ~TMK_PKT_F_KNOWN) return TMK_EFLAGS;
  if (h->type < TMK_PKT_DATA || h->type > TMK_PKT_BYE) return TMK_ETYPE;
  h->session_id = tmk__get_u64(p + 6, (h->flags & TMK_PKT_F_BIG_ENDIAN) != 0);
  end = p + len;
  p += 14;
  if ((n = tmk_proto_varint_get(p, end, &h->seq)) < 0) return n;
  p += n;
  if ((n = tmk_proto_varint_get(p, end, &h->base_time)) < 0) return n;
  p += n;
  if (h->flags & TMK_PKT_F_LZ4) {
    if ((n = tmk_proto_varint_get(p, end, &v)) < 0) return n;
    p += n;
    if (v > TMK_PROTO_MAX_BODY) return TMK_EBOMB;
    if (v == 0) return TMK_ERANGE;
    h->raw_len = (uint32_t)v;
  }
  h->header_len = (uint32_t)(p - (const uint8_t*)packet);
  if (!(h->flags & TMK_PKT_F_LZ4)) h->raw_len = (uint32_t)(len - h->header_len);
  return (int)h->header_len;
}

/* =============================================================================================
 * Decoder (§5)
 * =========================================================================================== */

int tmk_proto_open(tmk_proto_reader* r, const void* packet, size_t len, void* scratch,
                   size_t scratch_cap) {
  int n;
  if (!r) return TMK_EINVAL;
  memset(r, 0, sizeof *r);
  r->done = TMK_ESTATE;
  if ((n = tmk_proto_parse_header(packet, len, &r->hdr)) < 0) {
    r->done = n;
    return n;
  }
  r->p = (const uint8_t*)packet + n;
  r->end = (const uint8_t*)packet + len;
  if (r->hdr.flags & TMK_PKT_F_LZ4) {
#if TMK__LZ4
    int got;
    size_t clen = len - (size_t)n;
    if (!scratch || scratch_cap < r->hdr.raw_len) {
      r->done = TMK_ENOSPC;
      return TMK_ENOSPC;
    }
    got = LZ4_decompress_safe((const char*)r->p, (char*)scratch, (int)clen, (int)r->hdr.raw_len);
    if (got < 0 || (uint32_t)got != r->hdr.raw_len) {
      r->done = TMK_ELZ4;
      return TMK_ELZ4;
    }
    r->p = (const uint8_t*)scratch;
    r->end = r->p + got;
#else
    (void)scratch;
    (void)scratch_cap;
    r->done = TMK_ENOLZ4;
    return TMK_ENOLZ4;
#endif
  }
  r->zone_cursor = r->event_cursor = r->hdr.base_time;
  r->q = r->end; /* control packets have no number stream */
  tmk__nstate_init(r->nstate);
  if (r->hdr.type == TMK_PKT_DATA) {
    /* varint A, varint N, record stream (A bytes), number stream (N bytes) (§5). */
    uint64_t a, b;
    int m1, m2 = 0;
    m1 = tmk_proto_varint_get(r->p, r->end, &a);
    if (m1 > 0) m2 = tmk_proto_varint_get(r->p + m1, r->end, &b);
    if (m1 < 0 || m2 < 0) {
      r->done = m1 < 0 ? m1 : m2;
      return r->done;
    }
    r->p += m1 + m2;
    if (a > TMK_PROTO_MAX_BODY || b > TMK_PROTO_MAX_BODY || a + b > (uint64_t)(r->end - r->p)) {
      r->done = TMK_ETRUNC;
      return TMK_ETRUNC;
    }
    if (a + b != (uint64_t)(r->end - r->p)) {
      r->done = TMK_ECORRUPT; /* bytes after the number stream */
      return TMK_ECORRUPT;
    }
    r->end = r->p + a;
    r->q = r->end + b;
  }
  r->done = 0;
  return 0;
}

/* Field readers: on failure they store the error in `err` and the caller bails out. */
typedef struct tmk__in {
  const uint8_t* p;
  const uint8_t* end;
  const uint8_t* q; /* number stream: bytes are taken from q down to `end` */
  uint64_t acc;     /* number stream bits taken but not used, LSB first */
  unsigned nbits;
  uint32_t* nstate;
  int err;
} tmk__in;

TMK__HOT void tmk__in_refill(tmk__in* in) {
  while (in->nbits <= 56 && in->q > in->end) {
    in->acc |= (uint64_t)*--in->q << in->nbits;
    in->nbits += 8;
  }
}

/* Takes n <= 32 bits from the number stream. */
static uint64_t tmk__in_bits(tmk__in* in, unsigned n) {
  uint64_t v;
  if (n == 0) return 0;
  tmk__in_refill(in);
  if (in->nbits < n) {
    in->err = TMK_ETRUNC;
    return 0;
  }
  v = in->acc & ((1ull << n) - 1);
  in->acc >>= n;
  in->nbits -= n;
  return v;
}

/* Reads the next number of context `ctx` from the number stream (§5.0). */
TMK__HOT uint64_t tmk__in_num(tmk__in* in, unsigned ctx) {
  unsigned k, ones;
  uint64_t v;
  if (in->err) return 0;
  k = tmk__rice_k(in->nstate[ctx]);
  tmk__in_refill(in);
  ones = tmk__ones(in->acc, TMK__RICE_ESC);
  if (ones < TMK__RICE_ESC && ones + 1 + k <= in->nbits) {
    /* the common case: the whole code is in the accumulator */
    unsigned n = ones + 1 + k;
    v = ((uint64_t)ones << k) | ((in->acc >> (ones + 1)) & ((1ull << k) - 1));
    in->acc = n < 64 ? in->acc >> n : 0;
    in->nbits -= n;
  } else if (ones < TMK__RICE_ESC) {
    if (in->nbits < ones + 1) {
      in->err = TMK_ETRUNC;
      return 0;
    }
    in->acc >>= ones + 1;
    in->nbits -= ones + 1;
    v = ((uint64_t)ones << k) | tmk__in_bits(in, k < 32 ? k : 32);
    if (k > 32) v |= tmk__in_bits(in, k - 32) << 32;
  } else {
    unsigned n;
    if (in->nbits < TMK__RICE_ESC) {
      in->err = TMK_ETRUNC;
      return 0;
    }
    in->acc >>= TMK__RICE_ESC;
    in->nbits -= TMK__RICE_ESC;
    n = (unsigned)tmk__in_bits(in, 6) + 1;
    v = tmk__in_bits(in, n < 32 ? n : 32);
    if (n > 32) v |= tmk__in_bits(in, n - 32) << 32;
  }
  if (in->err) return 0;
  in->nstate[ctx] = tmk__rice_update(in->nstate[ctx], v);
  return v;
}

static uint64_t tmk__in_var(tmk__in* in) {
  uint64_t v = 0;
  int n;
  if (in->err) return 0;
  if (in->p < in->end && *in->p < 0x80) return *in->p++;
  n = tmk_proto_varint_get(in->p, in->end, &v);
  if (n < 0) {
    in->err = n;
    return 0;
  }
  in->p += n;
  return v;
}

static uint32_t tmk__in_u32(tmk__in* in) {
  uint64_t v = tmk__in_var(in);
  if (v > 0xFFFFFFFFull) {
    if (!in->err) in->err = TMK_ERANGE;
    return 0;
  }
  return (uint32_t)v;
}

static uint32_t tmk__in_max(tmk__in* in, uint32_t max) {
  uint64_t v = tmk__in_var(in);
  if (v > max) {
    if (!in->err) in->err = TMK_ERANGE;
    return 0;
  }
  return (uint32_t)v;
}

static tmk_proto_str tmk__in_str(tmk__in* in, uint32_t max) {
  tmk_proto_str s;
  uint64_t n = tmk__in_var(in);
  s.ptr = "";
  s.len = 0;
  if (in->err) return s;
  if (n > max) {
    in->err = TMK_ETOOBIG;
    return s;
  }
  if ((uint64_t)(in->end - in->p) < n) {
    in->err = TMK_ETRUNC;
    return s;
  }
  s.ptr = (const char*)in->p;
  s.len = (uint32_t)n;
  in->p += n;
  return s;
}

static uint64_t tmk__in_f64bits(tmk__in* in, int swap_to_host_be) {
  uint64_t v;
  if (in->err) return 0;
  if (in->end - in->p < 8) {
    in->err = TMK_ETRUNC;
    return 0;
  }
  v = tmk__get_u64(in->p, swap_to_host_be);
  in->p += 8;
  return v;
}

static int tmk__fail(tmk_proto_reader* r, int err) {
  r->done = err;
  return err;
}

int tmk_proto_next(tmk_proto_reader* r, tmk_proto_record* rec) {
  tmk__in in;
  if (!r || !rec) return TMK_EINVAL;
  if (r->done < 0) return r->done;
  if (r->hdr.type != TMK_PKT_DATA) return tmk__fail(r, TMK_ETYPE);
  in.p = r->p;
  in.end = r->end;
  in.q = r->q;
  in.acc = r->nacc;
  in.nbits = r->nbits;
  in.nstate = r->nstate;
  in.err = 0;
  for (;;) {
    unsigned tag;
    uint32_t site;
    uint64_t start;
    if (in.p >= in.end) {
      r->p = in.p;
      if (r->nopen) return tmk__fail(r, TMK_ENEST);
      /* Every number used: nothing but the last byte's zero padding may be left (§5.0). */
      if (in.q != in.end || in.nbits >= 8 || in.acc != 0) return tmk__fail(r, TMK_ECORRUPT);
      return 0;
    }
    tag = *in.p++;
    rec->thread = r->thread;

    if (tag >= TMK__TAG_OPEN_SHORT || tag == TMK__TAG_LEAF || tag == TMK__TAG_OPEN) {
      /* Zone events (§5.3). */
      int is_leaf = tag >= TMK__TAG_LEAF_SHORT || tag == TMK__TAG_LEAF;
      uint64_t gap;
      uint64_t depth = (uint64_t)r->root_depth + r->nopen;
      if (tag >= TMK__TAG_LEAF_SHORT)
        site = tag - TMK__TAG_LEAF_SHORT + 1;
      else if (tag >= TMK__TAG_OPEN_SHORT)
        site = tag - TMK__TAG_OPEN_SHORT + 1;
      else
        site = tmk__in_u32(&in);
      gap = tmk__in_num(&in, TMK__NUM_GAP);
      if (in.err) return tmk__fail(r, in.err);
      if (depth > 0xFFFFFFFFull) return tmk__fail(r, TMK_ERANGE);
      start = r->zone_cursor + gap;
      if (is_leaf) {
        uint64_t pred;
        unsigned ctx = tmk__predict(r->predict, 0, site, &pred);
        uint64_t dur = tmk__punc(ctx, tmk__in_num(&in, ctx), pred);
        if (in.err) return tmk__fail(r, in.err);
        tmk__learn(r->predict, 0, site, dur);
        r->zone_cursor = start + dur;
        rec->type = TMK_REC_ZONE;
        rec->u.zone.site = site;
        rec->u.zone.start = start;
        rec->u.zone.duration = dur;
        rec->u.zone.depth = (uint32_t)depth;
        r->p = in.p;
        r->q = in.q;
        r->nacc = in.acc;
        r->nbits = in.nbits;
        return 1;
      }
      if (r->nopen >= TMK_PROTO_MAX_OPEN) return tmk__fail(r, TMK_ENEST);
      r->open[r->nopen].start = start;
      r->open[r->nopen].site = site;
      r->nopen++;
      r->zone_cursor = start;
      continue;
    }

    switch (tag) {
      case TMK__TAG_CLOSE: {
        uint64_t pred, tail, end;
        unsigned ctx;
        if (r->nopen == 0) return tmk__fail(r, TMK_ENEST);
        ctx = tmk__predict(r->predict, 1, r->open[r->nopen - 1].site, &pred);
        tail = tmk__punc(ctx, tmk__in_num(&in, ctx), pred);
        if (in.err) return tmk__fail(r, in.err);
        tmk__learn(r->predict, 1, r->open[r->nopen - 1].site, tail);
        end = r->zone_cursor + tail;
        r->nopen--;
        rec->type = TMK_REC_ZONE;
        rec->u.zone.site = r->open[r->nopen].site;
        rec->u.zone.start = r->open[r->nopen].start;
        rec->u.zone.duration = end - r->open[r->nopen].start;
        rec->u.zone.depth = r->root_depth + r->nopen;
        r->zone_cursor = end;
        r->p = in.p;
        r->q = in.q;
        r->nacc = in.acc;
        r->nbits = in.nbits;
        return 1;
      }
      case TMK__TAG_AT: {
        uint32_t depth = tmk__in_u32(&in);
        uint64_t delta = tmk__unzz(tmk__in_var(&in));
        if (in.err) return tmk__fail(r, in.err);
        if (r->nopen) return tmk__fail(r, TMK_ENEST);
        r->root_depth = depth;
        r->zone_cursor += delta;
        continue;
      }
      case TMK__TAG_THREAD: {
        uint32_t t = tmk__in_u32(&in);
        if (in.err) return tmk__fail(r, in.err);
        if (r->nopen) return tmk__fail(r, TMK_ENEST);
        r->thread = t;
        r->zone_cursor = r->event_cursor = r->hdr.base_time;
        r->root_depth = 0;
        continue;
      }
      case TMK__TAG_SITE: {
        tmk_proto_site* s = &rec->u.site;
        s->id = tmk__in_u32(&in);
        s->kind = (uint8_t)tmk__in_max(&in, TMK_SITE_KIND_COUNT - 1);
        s->severity = (uint8_t)tmk__in_max(&in, TMK_SEV_COUNT - 1);
        s->verbosity = tmk__in_u32(&in);
        s->color = tmk__in_max(&in, 0xFFFFFF);
        s->line = tmk__in_u32(&in);
        s->name = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        s->file = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        if (!in.err && s->id == 0) in.err = TMK_ERANGE;
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_SITE;
        break;
      }
      case TMK__TAG_MARKER_BEGIN:
      case TMK__TAG_MARKER_END:
        rec->u.marker.site = tmk__in_u32(&in);
        r->event_cursor += tmk__unzz(tmk__in_var(&in));
        rec->u.marker.time = r->event_cursor;
        rec->u.marker.payload = tmk__in_str(&in, TMK_PROTO_MAX_PAYLOAD);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = tag == TMK__TAG_MARKER_BEGIN ? TMK_REC_MARKER_BEGIN : TMK_REC_MARKER_END;
        break;
      case TMK__TAG_FRAME:
        rec->u.frame.site = tmk__in_u32(&in);
        r->event_cursor += tmk__unzz(tmk__in_var(&in));
        rec->u.frame.time = r->event_cursor;
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_FRAME;
        break;
      case TMK__TAG_PLOT_I:
      case TMK__TAG_PLOT_D:
        rec->u.plot.site = tmk__in_u32(&in);
        r->event_cursor += tmk__unzz(tmk__in_var(&in));
        rec->u.plot.time = r->event_cursor;
        if (tag == TMK__TAG_PLOT_I) {
          rec->u.plot.is_double = 0;
          rec->u.plot.i = tmk__u2i(tmk__unzz(tmk__in_var(&in)));
          rec->u.plot.d = (double)rec->u.plot.i;
        } else {
          uint64_t bits = tmk__in_f64bits(&in, (r->hdr.flags & TMK_PKT_F_BIG_ENDIAN) != 0);
          rec->u.plot.is_double = 1;
          memcpy(&rec->u.plot.d, &bits, 8);
          rec->u.plot.i = (int64_t)0;
        }
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_PLOT;
        break;
      case TMK__TAG_MESSAGE:
        rec->u.message.site = tmk__in_u32(&in);
        rec->u.message.severity = (uint8_t)tmk__in_max(&in, TMK_SEV_COUNT - 1);
        rec->u.message.verbosity = tmk__in_u32(&in);
        r->event_cursor += tmk__unzz(tmk__in_var(&in));
        rec->u.message.time = r->event_cursor;
        rec->u.message.text = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_MESSAGE;
        break;
      case TMK__TAG_THREAD_NAME:
        rec->thread = tmk__in_u32(&in);
        rec->u.thread_name.name = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_THREAD_NAME;
        break;
      case TMK__TAG_DROPS:
        rec->u.drops.reason = tmk__in_u32(&in);
        rec->u.drops.count = tmk__in_var(&in);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_DROPS;
        break;
      case TMK__TAG_CLOCK:
        rec->u.clock.ticks = tmk__in_var(&in);
        rec->u.clock.unix_ns = tmk__in_var(&in);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_CLOCK_SYNC;
        break;
      case TMK__TAG_TEAM:
        rec->u.team.bit = tmk__in_max(&in, TMK_PROTO_MAX_TEAMS - 1);
        rec->u.team.name = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_TEAM_NAME;
        break;
      default:
        return tmk__fail(r, TMK_ERECORD);
    }
    r->p = in.p;
    r->q = in.q;
    r->nacc = in.acc;
    r->nbits = in.nbits;
    return 1;
  }
}

/* Control packet bodies (§6). */
static int tmk__body(tmk_proto_reader* r, int type, tmk__in* in) {
  if (!r) return TMK_EINVAL;
  if (r->done < 0) return r->done;
  if (r->hdr.type != type) return TMK_ETYPE;
  in->p = r->p;
  in->end = r->end;
  in->q = r->end;
  in->acc = 0;
  in->nbits = 0;
  in->nstate = r->nstate;
  in->err = 0;
  return 0;
}

int tmk_proto_read_hello(tmk_proto_reader* r, tmk_proto_hello* h) {
  tmk__in in;
  tmk_proto_str shib;
  int rc = tmk__body(r, TMK_PKT_HELLO, &in);
  if (rc) return rc;
  memset(h, 0, sizeof *h);
  shib = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  if (!in.err && (shib.len != sizeof TMK_PROTO_SHIBBOLETH - 1 ||
                  memcmp(shib.ptr, TMK_PROTO_SHIBBOLETH, shib.len) != 0))
    return TMK_EMAGIC;
  h->proto_version = tmk__in_u32(&in);
  h->agent_version = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  h->program = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  h->platform = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  h->arch = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  h->big_endian = (uint8_t)tmk__in_max(&in, 1);
  h->pointer_size = (uint8_t)tmk__in_max(&in, 16);
  h->timer_freq = tmk__in_var(&in);
  h->caps = tmk__in_u32(&in);
  h->max_packet = tmk__in_max(&in, TMK_PROTO_MAX_PACKET);
  if (!in.err && h->timer_freq == 0) in.err = TMK_ERANGE;
  if (!in.err && in.p < in.end) {
    /* §6.1 optional trailing fields build, label. A tail that does not decode as them is
     * ignored like any unknown tail (both stay empty): it never fails the HELLO. */
    tmk__in t = in;
    tmk_proto_str b = tmk__in_str(&t, TMK_PROTO_MAX_LABEL), l = {"", 0};
    if (!t.err && t.p < t.end) l = tmk__in_str(&t, TMK_PROTO_MAX_LABEL);
    if (!t.err) {
      h->build = b;
      h->label = l;
    }
  }
  return in.err;
}

int tmk_proto_read_welcome(tmk_proto_reader* r, tmk_proto_welcome* w) {
  tmk__in in;
  int rc = tmk__body(r, TMK_PKT_WELCOME, &in);
  if (rc) return rc;
  w->proto_version = tmk__in_u32(&in);
  w->relay_version = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  return in.err;
}

int tmk_proto_read_reject(tmk_proto_reader* r, tmk_proto_reject* rj) {
  tmk__in in;
  int rc = tmk__body(r, TMK_PKT_REJECT, &in);
  if (rc) return rc;
  rj->reason = tmk__in_u32(&in);
  rj->text = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  return in.err;
}

int tmk_proto_read_control(tmk_proto_reader* r, tmk_proto_control* c) {
  tmk__in in;
  int rc = tmk__body(r, TMK_PKT_CONTROL, &in);
  if (rc) return rc;
  c->seq = tmk__in_u32(&in);
  c->severity = (uint8_t)tmk__in_max(&in, TMK_SEV_COUNT - 1);
  c->verbosity = tmk__in_u32(&in);
  return in.err;
}

/* =============================================================================================
 * Encoder (§5)
 * =========================================================================================== */

int tmk_proto_writer_init(tmk_proto_writer* w, void* body, size_t cap) {
  if (!w || !body || cap < 64 || cap > TMK_PROTO_MAX_PACKET - TMK_PROTO_MAX_HEADER)
    return TMK_EINVAL;
  memset(w, 0, sizeof *w);
  w->buf = (uint8_t*)body;
  w->cap = (uint32_t)cap;
  w->big_endian = tmk_proto_host_big_endian();
  tmk_proto_writer_reset(w);
  return 0;
}

void tmk_proto_writer_reset(tmk_proto_writer* w) {
  w->len = 2;
  w->a_end = TMK__APREFIX;
  w->b_start = w->cap;
  w->nacc = 0;
  w->npend = 0;
  tmk__nstate_init(w->nstate);
  w->sealed = 0;
  w->records = 0;
  w->zones = 0;
  w->base_time = 0;
  w->has_base = 0;
  w->thread = 0;
  w->root_depth = 0;
  w->zone_cursor = 0;
  w->event_cursor = 0;
  memset(w->predict, 0, sizeof w->predict);
}

int tmk_proto_writer_empty(const tmk_proto_writer* w) {
  return w->a_end == TMK__APREFIX && w->b_start == w->cap && w->npend == 0;
}

static void tmk__w_size(tmk_proto_writer* w) {
  uint32_t a = w->a_end - TMK__APREFIX;
  uint32_t b = w->cap - w->b_start + (w->npend ? 1u : 0u);
  w->len = tmk__varint_size(a) + tmk__varint_size(b) + a + b;
}

static void tmk__w_open(tmk_proto_writer* w, tmk__ob* o) {
  o->p = w->buf + w->a_end;
  o->end = w->buf + w->b_start - (w->npend ? 1 : 0); /* keep the number stream's last byte */
  o->ok = !w->sealed;
}

static int tmk__w_commit(tmk_proto_writer* w, tmk__ob* o) {
  if (!o->ok) return w->sealed ? TMK_ESTATE : TMK_ENOSPC;
  w->a_end = (uint32_t)(o->p - w->buf);
  w->records++;
  tmk__w_size(w);
  return 0;
}

/* The first timed record fixes the packet's base time (§5.2). */
static void tmk__w_base(tmk_proto_writer* w, uint64_t t) {
  if (!w->has_base) {
    w->has_base = 1;
    w->base_time = w->zone_cursor = w->event_cursor = t;
  }
}

int tmk_proto_put_thread(tmk_proto_writer* w, uint32_t thread) {
  tmk__ob o;
  int rc;
  if (thread == w->thread) return 0;
  tmk__w_open(w, &o);
  tmk__ob_u8(&o, TMK__TAG_THREAD);
  tmk__ob_var(&o, thread);
  if ((rc = tmk__w_commit(w, &o)) != 0) return rc;
  w->records--; /* a context switch, not a record */
  w->thread = thread;
  w->zone_cursor = w->event_cursor = w->base_time;
  w->root_depth = 0;
  return 0;
}

int tmk_proto_put_site(tmk_proto_writer* w, const tmk_proto_site* s) {
  tmk__ob o;
  if (!s || s->id == 0 || s->kind >= TMK_SITE_KIND_COUNT || s->severity >= TMK_SEV_COUNT ||
      s->color > 0xFFFFFF || s->name.len > TMK_PROTO_MAX_STRING ||
      s->file.len > TMK_PROTO_MAX_STRING)
    return TMK_EINVAL;
  tmk__w_open(w, &o);
  tmk__ob_u8(&o, TMK__TAG_SITE);
  tmk__ob_var(&o, s->id);
  tmk__ob_var(&o, s->kind);
  tmk__ob_var(&o, s->severity);
  tmk__ob_var(&o, s->verbosity);
  tmk__ob_var(&o, s->color);
  tmk__ob_var(&o, s->line);
  tmk__ob_str(&o, s->name.ptr, s->name.len);
  tmk__ob_str(&o, s->file.ptr, s->file.len);
  return tmk__w_commit(w, &o);
}

/* Event records share: tag, site, dt from the event cursor (§5.2). */
static uint64_t tmk__w_event_start(tmk_proto_writer* w, tmk__ob* o, unsigned tag, uint32_t site,
                                   uint64_t time) {
  uint64_t cursor = w->has_base ? w->event_cursor : time;
  tmk__w_open(w, o);
  tmk__ob_u8(o, tag);
  tmk__ob_var(o, site);
  tmk__ob_var(o, tmk__zz(time - cursor));
  return time;
}

static int tmk__w_event_commit(tmk_proto_writer* w, tmk__ob* o, uint64_t time) {
  int rc = tmk__w_commit(w, o);
  if (rc) return rc;
  tmk__w_base(w, time);
  w->event_cursor = time;
  return 0;
}

int tmk_proto_put_marker(tmk_proto_writer* w, int is_end, uint32_t site, uint64_t time,
                         const void* payload, size_t payload_len) {
  tmk__ob o;
  if (payload_len > TMK_PROTO_MAX_PAYLOAD || (payload_len && !payload)) return TMK_EINVAL;
  tmk__w_event_start(w, &o, is_end ? TMK__TAG_MARKER_END : TMK__TAG_MARKER_BEGIN, site, time);
  tmk__ob_var(&o, payload_len);
  tmk__ob_bytes(&o, payload, payload_len);
  return tmk__w_event_commit(w, &o, time);
}

int tmk_proto_put_frame(tmk_proto_writer* w, uint32_t site, uint64_t time) {
  tmk__ob o;
  tmk__w_event_start(w, &o, TMK__TAG_FRAME, site, time);
  return tmk__w_event_commit(w, &o, time);
}

int tmk_proto_put_plot_i(tmk_proto_writer* w, uint32_t site, uint64_t time, int64_t value) {
  tmk__ob o;
  tmk__w_event_start(w, &o, TMK__TAG_PLOT_I, site, time);
  tmk__ob_var(&o, tmk__zz((uint64_t)value));
  return tmk__w_event_commit(w, &o, time);
}

int tmk_proto_put_plot_d(tmk_proto_writer* w, uint32_t site, uint64_t time, double value) {
  tmk__ob o;
  uint64_t bits;
  memcpy(&bits, &value, 8);
  tmk__w_event_start(w, &o, TMK__TAG_PLOT_D, site, time);
  tmk__ob_u64(&o, bits, w->big_endian);
  return tmk__w_event_commit(w, &o, time);
}

int tmk_proto_put_message(tmk_proto_writer* w, uint32_t site, uint8_t severity,
                          uint32_t verbosity, uint64_t time, const char* text, size_t len) {
  tmk__ob o;
  uint64_t cursor = w->has_base ? w->event_cursor : time;
  if (severity >= TMK_SEV_COUNT || len > TMK_PROTO_MAX_STRING || (len && !text))
    return TMK_EINVAL;
  tmk__w_open(w, &o);
  tmk__ob_u8(&o, TMK__TAG_MESSAGE);
  tmk__ob_var(&o, site);
  tmk__ob_var(&o, severity);
  tmk__ob_var(&o, verbosity);
  tmk__ob_var(&o, tmk__zz(time - cursor));
  tmk__ob_str(&o, text, len);
  return tmk__w_event_commit(w, &o, time);
}

int tmk_proto_put_thread_name(tmk_proto_writer* w, uint32_t thread, const char* name,
                              size_t len) {
  tmk__ob o;
  if (len > TMK_PROTO_MAX_STRING || (len && !name)) return TMK_EINVAL;
  tmk__w_open(w, &o);
  tmk__ob_u8(&o, TMK__TAG_THREAD_NAME);
  tmk__ob_var(&o, thread);
  tmk__ob_str(&o, name, len);
  return tmk__w_commit(w, &o);
}

int tmk_proto_put_drops(tmk_proto_writer* w, uint32_t reason, uint64_t count) {
  tmk__ob o;
  tmk__w_open(w, &o);
  tmk__ob_u8(&o, TMK__TAG_DROPS);
  tmk__ob_var(&o, reason);
  tmk__ob_var(&o, count);
  return tmk__w_commit(w, &o);
}

int tmk_proto_put_clock(tmk_proto_writer* w, uint64_t ticks, uint64_t unix_ns) {
  tmk__ob o;
  tmk__w_open(w, &o);
  tmk__ob_u8(&o, TMK__TAG_CLOCK);
  tmk__ob_var(&o, ticks);
  tmk__ob_var(&o, unix_ns);
  return tmk__w_commit(w, &o);
}

int tmk_proto_put_team(tmk_proto_writer* w, uint32_t bit, const char* name, size_t len) {
  tmk__ob o;
  if (bit >= TMK_PROTO_MAX_TEAMS || len > TMK_PROTO_MAX_STRING || (len && !name))
    return TMK_EINVAL;
  tmk__w_open(w, &o);
  tmk__ob_u8(&o, TMK__TAG_TEAM);
  tmk__ob_var(&o, bit);
  tmk__ob_str(&o, name, len);
  return tmk__w_commit(w, &o);
}

/* Number stream output (§5.0): bits collect LSB first and are stored a byte at a time in front
 * of the bytes already stored, so the stream grows towards the record stream. */
typedef struct tmk__nout {
  uint8_t* front;
  uint64_t acc;
  unsigned pend;
  uint32_t* state;
} tmk__nout;

/* Works on locals: the byte stores could alias *o, which would reload it every byte. */
TMK__HOT void tmk__nout_bits(tmk__nout* o, uint64_t bits, unsigned n) { /* n <= 56 */
  uint64_t acc = o->acc | (bits << o->pend);
  unsigned pend = o->pend + n;
  uint8_t* front = o->front;
  while (pend >= 8) {
    *--front = (uint8_t)acc;
    acc >>= 8;
    pend -= 8;
  }
  o->acc = acc;
  o->pend = pend;
  o->front = front;
}

TMK__HOT void tmk__nout_num(tmk__nout* o, unsigned ctx, uint64_t v) {
  unsigned k = tmk__rice_k(o->state[ctx]);
  uint64_t q = v >> k;
  if (q < TMK__RICE_ESC && k <= 48) {
    /* q ones, a zero, then the low k bits: one field of at most 55 bits */
    uint64_t low = v & ((1ull << k) - 1);
    tmk__nout_bits(o, ((1ull << q) - 1) | (low << (q + 1)), (unsigned)q + 1 + k);
  } else if (q < TMK__RICE_ESC) { /* k > 48: the low bits go in two pieces */
    tmk__nout_bits(o, (1ull << q) - 1, (unsigned)q + 1);
    tmk__nout_bits(o, v & 0xFFFFFFFFull, 32);
    tmk__nout_bits(o, (v >> 32) & ((1ull << (k - 32)) - 1), k - 32);
  } else {
    unsigned n = tmk__bitlen(v);
    tmk__nout_bits(o, (1ull << TMK__RICE_ESC) - 1, TMK__RICE_ESC);
    tmk__nout_bits(o, n - 1, 6);
    tmk__nout_bits(o, v & 0xFFFFFFFFull, n < 32 ? n : 32);
    if (n > 32) tmk__nout_bits(o, v >> 32, n - 32);
  }
  o->state[ctx] = tmk__rice_update(o->state[ctx], v);
}

/* Does zone `z` lie inside [from, end) measured from `cursor`, modulo 2^64? */
static int tmk__inside(uint64_t cursor, uint64_t end, const tmk_proto_zone* z) {
  uint64_t gap = z->start - cursor;
  uint64_t room = end - cursor;
  return gap < TMK__HALF && room < TMK__HALF && gap <= room && z->duration <= room - gap;
}

/* CLOSE's number: the parent's tail after its last child, predicted from its site (§5.3). */
static void tmk__put_tail(tmk_proto_writer* w, tmk__nout* num, uint32_t site, uint64_t tail) {
  uint64_t pred;
  unsigned ctx = tmk__predict(w->predict, 1, site, &pred);
  tmk__nout_num(num, ctx, tmk__pcode(ctx, tail, pred));
  tmk__learn(w->predict, 1, site, tail);
}

int tmk_proto_put_zones(tmk_proto_writer* w, const tmk_proto_zone* zones, size_t n) {
  uint64_t open_end[TMK_PROTO_MAX_OPEN];
  uint32_t open_depth[TMK_PROTO_MAX_OPEN];
  uint32_t open_site[TMK_PROTO_MAX_OPEN];
  unsigned nopen = 0;
  uint64_t cursor;
  uint32_t root_depth;
  uint8_t* p;
  tmk__nout num;
  size_t i;
  int had_base;

  if (!w || (!zones && n)) return TMK_EINVAL;
  if (w->sealed) return TMK_ESTATE;
  p = w->buf + w->a_end;
  num.front = w->buf + w->b_start; /* free space is [p, num.front) */
  num.acc = w->nacc;
  num.pend = w->npend;
  num.state = w->nstate;
  had_base = w->has_base;
  root_depth = w->root_depth;
  if (n == 0) return 0;
  if (n > 0x7FFFFFFF) n = 0x7FFFFFFF;
  if (!had_base) {
    w->has_base = 1;
    w->base_time = w->zone_cursor = w->event_cursor = zones[0].start;
  }
  cursor = w->zone_cursor;

  for (i = 0; i < n; i++) {
    const tmk_proto_zone* z = &zones[i];
    uint64_t zend = z->start + z->duration;
    int need_at = 0, is_open = 0;
    size_t need;
    unsigned nbits, dctx = TMK__NUM_DUR;
    uint64_t gap, code = 0, pred;

    /* Close the open zones that cannot hold z as a direct child. */
    while (nopen) {
      if (z->depth == open_depth[nopen - 1] + 1 && tmk__inside(cursor, open_end[nopen - 1], z))
        break;
      nopen--;
      *p++ = TMK__TAG_CLOSE;
      tmk__put_tail(w, &num, open_site[nopen], open_end[nopen] - cursor);
      cursor = open_end[nopen];
    }
    if (nopen == 0 && (z->depth != root_depth || z->start - cursor >= TMK__HALF)) need_at = 1;
    if (i + 1 < n && nopen < TMK_PROTO_MAX_OPEN) {
      const tmk_proto_zone* c = &zones[i + 1];
      is_open = z->depth != 0xFFFFFFFFu && c->depth == z->depth + 1 &&
                tmk__inside(z->start, zend, c);
    }

    gap = need_at ? 0 : z->start - cursor;
    if (!is_open) {
      dctx = tmk__predict(w->predict, 0, z->site, &pred);
      code = tmk__pcode(dctx, z->duration, pred);
    }
    need = (size_t)TMK__CLOSE_MAX * (nopen + (unsigned)is_open);
    if ((size_t)(num.front - p) < need + TMK__ZONE_MAX) {
      /* Near the end of the packet: work out exactly what this zone takes. */
      if (need_at) need += 1 + tmk__varint_size(z->depth) + tmk__varint_size(tmk__zz(z->start - cursor));
      nbits = num.pend + tmk__rice_bits(gap, tmk__rice_k(num.state[TMK__NUM_GAP]));
      if (is_open) {
        need += (z->site >= 1 && z->site <= TMK__OPEN_SHORT_MAX ? 1 : 1 + tmk__varint_size(z->site));
      } else {
        /* Contexts are separate, so coding the gap leaves the duration's state unchanged. */
        need += (z->site >= 1 && z->site <= TMK__LEAF_SHORT_MAX ? 1 : 1 + tmk__varint_size(z->site));
        nbits += tmk__rice_bits(code, tmk__rice_k(num.state[dctx]));
      }
      need += (nbits + 7) / 8;
      if ((size_t)(num.front - p) < need) break;
    }

    if (need_at) {
      *p++ = TMK__TAG_AT;
      p += tmk_proto_varint_put(p, z->depth);
      p += tmk_proto_varint_put(p, tmk__zz(z->start - cursor));
      cursor = z->start;
      root_depth = z->depth;
    }
    if (is_open) {
      if (z->site >= 1 && z->site <= TMK__OPEN_SHORT_MAX) {
        *p++ = (uint8_t)(TMK__TAG_OPEN_SHORT + z->site - 1);
      } else {
        *p++ = TMK__TAG_OPEN;
        p += tmk_proto_varint_put(p, z->site);
      }
      tmk__nout_num(&num, TMK__NUM_GAP, gap);
      open_end[nopen] = zend;
      open_site[nopen] = z->site;
      open_depth[nopen] = z->depth;
      nopen++;
      cursor = z->start;
    } else {
      if (z->site >= 1 && z->site <= TMK__LEAF_SHORT_MAX) {
        *p++ = (uint8_t)(TMK__TAG_LEAF_SHORT + z->site - 1);
      } else {
        *p++ = TMK__TAG_LEAF;
        p += tmk_proto_varint_put(p, z->site);
      }
      tmk__nout_num(&num, TMK__NUM_GAP, gap);
      tmk__nout_num(&num, dctx, code);
      tmk__learn(w->predict, 0, z->site, z->duration);
      cursor = zend;
    }
  }
  while (nopen) {
    nopen--;
    *p++ = TMK__TAG_CLOSE;
    tmk__put_tail(w, &num, open_site[nopen], open_end[nopen] - cursor);
    cursor = open_end[nopen];
  }
  if (i == 0 && !had_base) {
    w->has_base = 0;
    w->base_time = w->zone_cursor = w->event_cursor = 0;
    return 0;
  }
  w->a_end = (uint32_t)(p - w->buf);
  w->b_start = (uint32_t)(num.front - w->buf);
  w->nacc = num.acc;
  w->npend = num.pend;
  tmk__w_size(w);
  w->zone_cursor = cursor;
  w->root_depth = root_depth;
  w->zones += (uint32_t)i;
  w->records += (uint32_t)i;
  return (int)i;
}

size_t tmk_proto_lz4_state_size(void) {
#if TMK__LZ4
  return (size_t)LZ4_sizeofState();
#else
  return 0;
#endif
}

int tmk_proto_finish(tmk_proto_writer* w, uint64_t session_id, uint64_t seq, void* out,
                     size_t out_cap, void* lz4_state) {
  uint8_t* o = (uint8_t*)out;
  unsigned flags;
  uint64_t base;
  uint32_t body_at;
  int hl;
  if (!w || !out) return TMK_EINVAL;
  flags = w->big_endian ? TMK_PKT_F_BIG_ENDIAN : 0;
  base = w->has_base ? w->base_time : 0;
  if (!w->sealed) {
    /* Body = varint A, varint N, record stream (A bytes), number stream (N bytes) (§5). */
    uint32_t a = w->a_end - TMK__APREFIX, b;
    unsigned pre;
    if (w->npend) { /* the last bits, zero-padded; room for this byte was kept */
      w->buf[--w->b_start] = (uint8_t)w->nacc;
      w->nacc = 0;
      w->npend = 0;
    }
    b = w->cap - w->b_start;
    pre = tmk__varint_size(a) + tmk__varint_size(b);
    memmove(w->buf + w->a_end, w->buf + w->b_start, b);
    body_at = TMK__APREFIX - pre;
    tmk_proto_varint_put(w->buf + body_at + tmk_proto_varint_put(w->buf + body_at, a), b);
    w->b_start = body_at; /* once sealed, b_start is where the joined body begins */
    w->sealed = 1;
    w->len = pre + a + b;
  } else {
    body_at = w->b_start;
  }
#if TMK__LZ4
  if (lz4_state && w->len >= 32) {
    hl = tmk__write_header(o, out_cap, flags | TMK_PKT_F_LZ4, TMK_PKT_DATA, session_id, seq, base,
                           w->len);
    if (hl > 0) {
      /* Only worth it if the compressed packet is smaller than the plain one. */
      size_t plain = (size_t)hl - tmk__varint_size(w->len) + w->len;
      size_t room = out_cap - (size_t)hl;
      size_t limit = plain - (size_t)hl - 1;
      int c;
      if (limit > room) limit = room;
      c = LZ4_compress_fast_extState(lz4_state, (const char*)w->buf + body_at, (char*)o + hl,
                                     (int)w->len, (int)limit, 1);
      if (c > 0) return hl + c;
    }
  }
#else
  (void)lz4_state;
#endif
  hl = tmk__write_header(o, out_cap, flags, TMK_PKT_DATA, session_id, seq, base, 0);
  if (hl < 0) return hl;
  if (out_cap - (size_t)hl < w->len) return TMK_ENOSPC;
  memcpy(o + hl, w->buf + body_at, w->len);
  return hl + (int)w->len;
}

/* Control packets (§6): a header with seq 0 and base 0, then the body. */
static int tmk__ctl_open(tmk__ob* o, void* out, size_t cap, unsigned type, uint64_t session) {
  int hl;
  if (!out) return TMK_EINVAL;
  hl = tmk__write_header((uint8_t*)out, cap, tmk_proto_host_big_endian() ? TMK_PKT_F_BIG_ENDIAN : 0,
                         type, session, 0, 0, 0);
  if (hl < 0) return hl;
  o->p = (uint8_t*)out + hl;
  o->end = (uint8_t*)out + cap;
  o->ok = 1;
  return 0;
}

static int tmk__ctl_close(tmk__ob* o, void* out) {
  if (!o->ok) return TMK_ENOSPC;
  return (int)(o->p - (uint8_t*)out);
}

static void tmk__ob_pstr(tmk__ob* o, tmk_proto_str s) { tmk__ob_str(o, s.ptr, s.len); }

int tmk_proto_encode_hello(void* out, size_t cap, uint64_t session_id, const tmk_proto_hello* h) {
  tmk__ob o;
  int rc;
  if (!h || h->timer_freq == 0) return TMK_EINVAL;
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_HELLO, session_id)) < 0) return rc;
  tmk__ob_str(&o, TMK_PROTO_SHIBBOLETH, sizeof TMK_PROTO_SHIBBOLETH - 1);
  tmk__ob_var(&o, h->proto_version);
  tmk__ob_pstr(&o, h->agent_version);
  tmk__ob_pstr(&o, h->program);
  tmk__ob_pstr(&o, h->platform);
  tmk__ob_pstr(&o, h->arch);
  tmk__ob_var(&o, h->big_endian ? 1 : 0);
  tmk__ob_var(&o, h->pointer_size);
  tmk__ob_var(&o, h->timer_freq);
  tmk__ob_var(&o, h->caps);
  tmk__ob_var(&o, h->max_packet);
  if (h->build.len || h->label.len) { /* §6.1 optional trailing fields */
    if (h->build.len > TMK_PROTO_MAX_LABEL || h->label.len > TMK_PROTO_MAX_LABEL)
      return TMK_ETOOBIG;
    tmk__ob_pstr(&o, h->build);
    tmk__ob_pstr(&o, h->label);
  }
  return tmk__ctl_close(&o, out);
}

int tmk_proto_encode_welcome(void* out, size_t cap, uint64_t session_id,
                             const tmk_proto_welcome* wl) {
  tmk__ob o;
  int rc;
  if (!wl) return TMK_EINVAL;
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_WELCOME, session_id)) < 0) return rc;
  tmk__ob_var(&o, wl->proto_version);
  tmk__ob_pstr(&o, wl->relay_version);
  return tmk__ctl_close(&o, out);
}

int tmk_proto_encode_reject(void* out, size_t cap, uint64_t session_id,
                            const tmk_proto_reject* rj) {
  tmk__ob o;
  int rc;
  if (!rj) return TMK_EINVAL;
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_REJECT, session_id)) < 0) return rc;
  tmk__ob_var(&o, rj->reason);
  tmk__ob_pstr(&o, rj->text);
  return tmk__ctl_close(&o, out);
}

int tmk_proto_encode_control(void* out, size_t cap, uint64_t session_id,
                             const tmk_proto_control* c) {
  tmk__ob o;
  int rc;
  if (!c || c->severity >= TMK_SEV_COUNT) return TMK_EINVAL;
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_CONTROL, session_id)) < 0) return rc;
  tmk__ob_var(&o, c->seq);
  tmk__ob_var(&o, c->severity);
  tmk__ob_var(&o, c->verbosity);
  return tmk__ctl_close(&o, out);
}

int tmk_proto_encode_bye(void* out, size_t cap, uint64_t session_id) {
  tmk__ob o;
  int rc;
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_BYE, session_id)) < 0) return rc;
  return tmk__ctl_close(&o, out);
}

/* =============================================================================================
 * Helpers
 * =========================================================================================== */

int tmk_proto_frame_prefix(uint8_t out[3], size_t len) {
  if (len == 0 || len > TMK_PROTO_MAX_PACKET) return TMK_ETOOBIG;
  return tmk_proto_varint_put(out, len);
}

int tmk_proto_frame_parse(const void* data, size_t avail, uint32_t* len) {
  uint64_t v;
  const uint8_t* p = (const uint8_t*)data;
  int n = tmk_proto_varint_get(p, p + (avail < 3 ? avail : 3), &v);
  if (n == TMK_ETRUNC) return avail < 3 ? 0 : TMK_ETOOBIG;
  if (n < 0) return TMK_ETOOBIG;
  if (v == 0 || v > TMK_PROTO_MAX_PACKET) return TMK_ETOOBIG;
  *len = (uint32_t)v;
  return n;
}

uint64_t tmk_proto_ticks_to_ns(uint64_t ticks, uint64_t freq) {
  if (freq == 0) return 0;
  if (freq == 1000000000ull) return ticks;
  return ticks / freq * 1000000000ull + ticks % freq * 1000000000ull / freq;
}
