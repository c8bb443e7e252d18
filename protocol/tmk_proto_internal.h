/* tmk_proto_internal.h — what the reader, the writer and the primitives of protocol/ share and
 * callers must not see: record tags, number contexts, zigzag and fixed-width byte order (§3),
 * the header writer (§2). Private: not installed, not part of the API. */
#ifndef TMK_PROTO_INTERNAL_H
#define TMK_PROTO_INTERNAL_H

#include <string.h>

#include "tmk_proto.h"

#if defined(TMK_HAVE_LZ4) && TMK_HAVE_LZ4
#include <lz4.h>
#define TMK__LZ4 1
#else
#define TMK__LZ4 0
#endif

/* Forced inlining for the per-zone paths of reader and writer; small helpers in the private
 * headers are plain static inline. TMK__RARE marks a helper off the common path whose inlining
 * is left to the compiler (an inline hint there makes the decoder's hot loop slower); `unused`
 * because a header function need not be used by every file that includes it. */
/* TMK__COLD: a helper that must stay out of line, so that the hot loop calling it stays small. */
#if defined(__GNUC__) || defined(__clang__)
#define TMK__COLD static __attribute__((noinline, cold, unused))
#else
#define TMK__COLD static
#endif
#if (defined(__GNUC__) || defined(__clang__)) && defined(__OPTIMIZE_SIZE__)
/* -Os (a small board): one copy of each, called. */
#define TMK__HOT static __attribute__((noinline, unused))
#define TMK__RARE static __attribute__((unused))
#elif defined(__GNUC__) || defined(__clang__)
#define TMK__HOT static inline __attribute__((always_inline))
#define TMK__RARE static __attribute__((unused))
#else
#define TMK__HOT static inline
#define TMK__RARE static
#endif

/* Branch hints for the per-zone loops. */
#if defined(__GNUC__) || defined(__clang__)
#define TMK__P_LIKELY(x) __builtin_expect(!!(x), 1)
#define TMK__P_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TMK__P_LIKELY(x) (x)
#define TMK__P_UNLIKELY(x) (x)
#endif

/* TMK__SMALL marks a small helper that is plain static inline in a speed build and one called
 * copy at -Os, where its inlined 64-bit arithmetic costs a small board more than the call. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__OPTIMIZE_SIZE__)
#define TMK__SMALL static __attribute__((noinline, unused))
#else
#define TMK__SMALL static inline
#endif

/* TMK__SIZE_BUILD is 1 at -Os: where a loop's shape trades speed for bytes, the small form is
 * taken in `if (TMK__SIZE_BUILD)` and a speed build compiles the code it always had. */
#if defined(__OPTIMIZE_SIZE__)
#define TMK__SIZE_BUILD 1
#else
#define TMK__SIZE_BUILD 0
#endif

/* ---- Record tags (§5, table) -------------------------------------------------------------- */
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

/* ---- Number contexts (§5.0) --------------------------------------------------------------- */
#define TMK__NUM_GAP 0         /* gap of LEAF and OPEN */
#define TMK__NUM_DUR 1         /* duration of a leaf whose site the predictor knows */
#define TMK__NUM_CLOSE 2       /* tail of a parent whose site the predictor knows */
#define TMK__NUM_FRESH 3       /* duration of a leaf whose site has no prediction yet */
#define TMK__NUM_CLOSE_FRESH 4 /* tail of a parent whose site has no prediction yet */

/* ---- Primitives (§3) ---------------------------------------------------------------------- */

TMK__SMALL unsigned tmk__varint_size(uint64_t v) {
  unsigned n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

/* Zigzag on two's-complement bit patterns, so no signed overflow or shift is ever involved. */
TMK__SMALL uint64_t tmk__zz(uint64_t v) { return (v << 1) ^ (0 - (v >> 63)); }
static inline uint64_t tmk__unzz(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }
static inline int64_t tmk__u2i(uint64_t u) {
  return u <= 0x7FFFFFFFFFFFFFFFull ? (int64_t)u : -(int64_t)(~u) - 1;
}

/* The host's byte order: a constant where the compiler tells it (GCC, Clang), else probed. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__)
#define tmk__host_big_endian() (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
#else
#define tmk__host_big_endian() tmk_proto_host_big_endian()
#endif

/* A fixed-width 64-bit field (session id, f64) in the packet's byte order (§3.4). */
static inline void tmk__put_u64_inline(uint8_t b[8], uint64_t v, int big_endian) {
  int i;
  for (i = 0; i < 8; i++, v >>= 8) b[big_endian ? 7 - i : i] = (uint8_t)v;
}
#if TMK__SIZE_BUILD
void tmk__put_u64(uint8_t b[8], uint64_t v, int big_endian); /* -Os: one copy (primitives) */
#else
#define tmk__put_u64 tmk__put_u64_inline
#endif

static inline uint64_t tmk__get_u64(const uint8_t* b, int big_endian) {
  uint64_t v = 0;
  int i;
  for (i = 0; i < 8; i++) v |= (uint64_t)b[big_endian ? 7 - i : i] << (8 * i);
  return v;
}

/* Writes a packet header (§2): raw_len is written only when flags has TMK_PKT_F_LZ4.
 * Returns the header length, or TMK_ENOSPC (nothing written) when it does not fit in cap. */
int tmk__write_header(uint8_t* out, size_t cap, unsigned flags, unsigned type, uint64_t session,
                      uint64_t seq, uint64_t base, uint32_t raw_len);

#endif /* TMK_PROTO_INTERNAL_H */
