/* tmk_proto_rice.h — the number stream (§5.0) in one place: the adaptive Rice code's decoder and
 * encoder side by side so they stay mirror images, and the predictor (§5.3) that picks a number's
 * context. Private, and all static (inline where hot): both halves sit on per-zone paths. */
#ifndef TMK_PROTO_RICE_H
#define TMK_PROTO_RICE_H

#include "tmk_proto_internal.h"

#define TMK__RICE_ESC 6u /* unary length that announces an escaped number (§5.0) */

/* =============================================================================================
 * Shared: parameter, state update, code length, predictor
 * =========================================================================================== */

/* Bit length of v (0 for 0), and the number of trailing one bits of v capped at `cap`. */
#if defined(__GNUC__) || defined(__clang__)
static inline unsigned tmk__bitlen(uint64_t v) { return v ? 64u - (unsigned)__builtin_clzll(v) : 0; }
static inline unsigned tmk__ones(uint64_t v, unsigned cap) {
  return (unsigned)__builtin_ctzll(~v | (1ull << cap));
}
#else
static inline unsigned tmk__bitlen(uint64_t v) {
  unsigned n = 0;
  while (v) {
    n++;
    v >>= 1;
  }
  return n;
}
static inline unsigned tmk__ones(uint64_t v, unsigned cap) {
  unsigned n = 0;
  while (n < cap && ((v >> n) & 1)) n++;
  return n;
}
#endif

/* Bit length of v < 2^63: one bit scan, no test for 0 (clz(2v + 1) ^ 63 is the bit scan
 * itself), for the hot loops (tmk_proto_zones.c, the writer's leaf runs). */
#if defined(__GNUC__) || defined(__clang__)
static inline unsigned tmk__bitlen63(uint64_t v) {
  return (unsigned)__builtin_clzll(2 * v + 1) ^ 63u;
}
#else
static inline unsigned tmk__bitlen63(uint64_t v) { return tmk__bitlen(v); }
#endif

/* A context's state is 16 times the running mean of its numbers' bit lengths, so one outlier
 * moves the Rice parameter by a bit or two instead of throwing it off for many numbers. */
static inline unsigned tmk__rice_k(uint32_t state) {
  unsigned len = (state + 12) >> 4;
  return len > 1 ? len - 1 : 0;
}

/* The hot loops (the batched reader, the writer's leaf runs) keep each context's state as
 * u = state, except that a state of 0 (no non-zero number yet) is kept as 4: a state that is not
 * 0 is at least 7 (a first number sets 16 or more, and state - state / 8 never goes below 7 from
 * there), so the Rice parameter is (u - 4) >> 4 for every state, with no test for 0. */
#define TMK__U_ZERO 4u
static inline uint32_t tmk__state_u(uint32_t state) {
  return state >= TMK__U_ZERO ? state : TMK__U_ZERO;
}
static inline uint32_t tmk__u_state(uint32_t u) { return u == TMK__U_ZERO ? 0 : u; }
static inline unsigned tmk__u_k(uint32_t u) { return (u - TMK__U_ZERO) >> 4; }
/* tmk__rice_update on a state kept as u, from the number's bit length. The first branch is the
 * likely one: a state is 0 only at first. */
static inline uint32_t tmk__u_update_len(uint32_t u, uint32_t len) {
  if (TMK__P_LIKELY(u != TMK__U_ZERO)) return u - (u >> 3) + 2u * len;
  return len ? 16u * len : TMK__U_ZERO;
}
/* The same for v < 2^63 (tmk__bitlen63). */
static inline uint32_t tmk__u_update(uint32_t u, uint64_t v) {
  return tmk__u_update_len(u, tmk__bitlen63(v));
}

static inline uint32_t tmk__rice_update(uint32_t state, uint64_t v) {
  /* While the state is 0 (no non-zero number yet), a number sets it outright; a 0 leaves it 0. */
  if (state == 0) return 16u * tmk__bitlen(v);
  return state - (state >> 3) + 2u * tmk__bitlen(v);
}

static inline void tmk__nstate_init(uint32_t* s) {
  unsigned i;
  for (i = 0; i < TMK_PROTO_NUM_CONTEXTS; i++) s[i] = 0;
}

/* The predictor (§5.3) for `site` in table 0 (leaf durations) or 1 (parent tails): returns the
 * context its number is coded in, predicted or fresh, and the prediction in *pred. */
static inline unsigned tmk__predict(tmk_proto_slot (*t)[TMK_PROTO_PREDICT_SLOTS],
                                    unsigned table, uint32_t site, uint64_t* pred) {
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
static inline uint64_t tmk__pcode(unsigned ctx, uint64_t v, uint64_t pred) {
  return ctx == TMK__NUM_DUR || ctx == TMK__NUM_CLOSE ? tmk__zz(v - pred) : v;
}
static inline uint64_t tmk__punc(unsigned ctx, uint64_t code, uint64_t pred) {
  return ctx == TMK__NUM_DUR || ctx == TMK__NUM_CLOSE ? pred + tmk__unzz(code) : code;
}

static inline void tmk__learn(tmk_proto_slot (*t)[TMK_PROTO_PREDICT_SLOTS], unsigned table,
                              uint32_t site, uint64_t v) {
  tmk_proto_slot* sl = &t[table][site & (TMK_PROTO_PREDICT_SLOTS - 1)];
  sl->site = site;
  sl->used = 1;
  sl->duration = v;
}

/* Length in bits of v's code with parameter k. */
TMK__SMALL unsigned tmk__rice_bits(uint64_t v, unsigned k) {
  uint64_t q = v >> k;
  return q < TMK__RICE_ESC ? (unsigned)q + 1 + k : TMK__RICE_ESC + 6 + tmk__bitlen(v);
}

/* =============================================================================================
 * Decoder half (used by tmk_proto_reader.c and tmk_proto_zones.c)
 * =========================================================================================== */

/* The reader's input while it decodes: the record stream cursor and the number stream's bit
 * reader. Field readers store the first failure in `err` and the caller bails out. */
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

/* Takes n <= 32 bits from the number stream (long codes and escapes only). */
TMK__RARE uint64_t tmk__in_bits(tmk__in* in, unsigned n) {
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

/* =============================================================================================
 * Encoder half (used by tmk_proto_writer.c)
 * =========================================================================================== */

/* Number stream output (§5.0): bits collect LSB first and are stored a byte at a time in front
 * of the bytes already stored, so the stream grows towards the record stream. */
#if defined(__OPTIMIZE_SIZE__)
typedef uint32_t tmk__nacc; /* -Os: fewer than 8 bits wait between calls (tmk__nout_bits) */
#else
typedef uint64_t tmk__nacc;
#endif
typedef struct tmk__nout {
  uint8_t* front;
  tmk__nacc acc;
  unsigned pend;
  uint32_t* state;
} tmk__nout;

#if (defined(__GNUC__) || defined(__clang__)) && defined(__OPTIMIZE_SIZE__)
/* -Os (a small board): the same bits, written in pieces of at most 16 with 32-bit arithmetic.
 * Between calls fewer than 8 bits wait in acc, so acc | bits << pend fits 32 bits. (The host
 * runs the protocol tests on an -Os build too: tests/proto, the "-small" tests.) */
static __attribute__((noinline, unused)) void tmk__nout_bits(tmk__nout* o, uint32_t bits,
                                                             unsigned n) { /* n <= 16 */
  uint32_t acc = (uint32_t)o->acc | (bits << o->pend);
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

/* A number of the zone encoder: 32 bits wide with TMK_PROTO_TIME32 (tmk_proto.h), where the
 * numbers it codes are below 2^32, else 64. */
#if TMK_PROTO_TIME32
typedef uint32_t tmk__nval;
static inline unsigned tmk__nval_bitlen(uint32_t v) {
  return v ? 32u - (unsigned)__builtin_clz(v) : 0;
}
#else
typedef uint64_t tmk__nval;
#define tmk__nval_bitlen tmk__bitlen
#endif

/* Appends the n low bits of v. */
static void tmk__nout_low(tmk__nout* o, tmk__nval v, unsigned n) {
  while (n) {
    unsigned m = n < 16 ? n : 16;
    tmk__nout_bits(o, (uint32_t)v & ((1u << m) - 1u), m);
    v >>= 16;
    n -= m;
  }
}

/* v's bit length is worked out once, for the escape and the state update alike. */
static __attribute__((noinline, unused)) void tmk__nout_num(tmk__nout* o, unsigned ctx,
                                                            tmk__nval v) {
  uint32_t* s = &o->state[ctx];
  unsigned k = tmk__rice_k(*s); /* <= 63; <= 32 with 32-bit numbers (bit lengths <= 32) */
  unsigned len = tmk__nval_bitlen(v);
#if TMK_PROTO_TIME32
  uint32_t q = k < 32 ? v >> k : 0;
#else
  uint64_t q = v >> k;
#endif
  if (q < TMK__RICE_ESC) { /* q ones, a zero, then the low k bits */
    tmk__nout_bits(o, (1u << q) - 1u, (unsigned)q + 1u);
  } else { /* the escape, the bit length - 1, then the bits */
    tmk__nout_bits(o, ((1u << TMK__RICE_ESC) - 1u) | (len - 1u) << TMK__RICE_ESC,
                   TMK__RICE_ESC + 6);
    k = len;
  }
  tmk__nout_low(o, v, k);
  *s = *s ? *s - (*s >> 3) + 2u * len : 16u * len; /* tmk__rice_update */
}
#else
/* Stores the low 32 bits of acc as the 4 bytes before q, the lowest byte nearest (q[-1]). */
static inline void tmk__store_back4(uint8_t* q, uint64_t acc) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint32_t w = __builtin_bswap32((uint32_t)acc);
  memcpy(q - 4, &w, 4);
#elif defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  uint32_t w = (uint32_t)acc;
  memcpy(q - 4, &w, 4);
#else
  q[-1] = (uint8_t)acc;
  q[-2] = (uint8_t)(acc >> 8);
  q[-3] = (uint8_t)(acc >> 16);
  q[-4] = (uint8_t)(acc >> 24);
#endif
}

/* Inside tmk_proto_put_zones up to 31 bits wait in acc and are stored 32 at a time (the bytes
 * are the same as stored one by one); tmk__nout_settle stores the whole bytes before the writer
 * keeps its state, so that between calls fewer than 8 bits wait, as everywhere else.
 * Works on locals: the byte stores could alias *o, which would reload it every byte. */
TMK__HOT void tmk__nout_bits(tmk__nout* o, uint64_t bits, unsigned n) { /* n <= 56 */
  uint64_t acc = o->acc;
  unsigned pend = o->pend;
  uint8_t* front = o->front;
  if (n > 32) { /* rare: long codes; pend + n could pass 64, so settle to < 8 bits first */
    while (pend >= 8) {
      *--front = (uint8_t)acc;
      acc >>= 8;
      pend -= 8;
    }
  }
  acc |= bits << pend;
  pend += n; /* <= 63 */
  if (pend >= 32) {
    tmk__store_back4(front, acc);
    front -= 4;
    acc >>= 32;
    pend -= 32;
  }
  o->acc = acc;
  o->pend = pend;
  o->front = front;
}

TMK__HOT void tmk__nout_num(tmk__nout* o, unsigned ctx, uint64_t v) {
  unsigned k = tmk__u_k(o->state[ctx]); /* (TMK__NOUT_U: the writer's states are kept as u) */
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
  o->state[ctx] = tmk__u_update_len(o->state[ctx], tmk__bitlen(v));
}
#endif

/* How the writer keeps its context states: as tmk__state_u does where the number stream is
 * written by the speed build's tmk__nout_num above (TMK__NOUT_U 1: the zone loops then use them
 * as they are), as the states themselves at -Os. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__OPTIMIZE_SIZE__)
#define TMK__NOUT_U 0
#else
#define TMK__NOUT_U 1
#endif
/* A writer's states before its first number, kept as u (TMK__NOUT_U). */
static inline void tmk__nout_init(uint32_t* s) {
  unsigned i;
  for (i = 0; i < TMK_PROTO_NUM_CONTEXTS; i++) s[i] = TMK__U_ZERO;
}

/* Stores the whole bytes waiting in o (a no-op where fewer than 8 bits ever wait). */
static inline void tmk__nout_settle(tmk__nout* o) {
  while (o->pend >= 8) {
    *--o->front = (uint8_t)o->acc;
    o->acc >>= 8;
    o->pend -= 8;
  }
}

#endif /* TMK_PROTO_RICE_H */
