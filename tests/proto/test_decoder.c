/* test_decoder.c — the decoder against hand-assembled bytes written from docs/PROTOCOL.md (not
 * from the encoder). The test codes the number stream itself (§5.0: adaptive Rice codes in five
 * contexts that start cold every packet, stored from the body's end backwards) and keeps its own
 * model of the two predictor tables (§5.3: leaf durations and parents' tails, predicted numbers
 * zigzagged against the prediction, fresh ones coded as themselves), pins a few bodies byte for
 * byte, and checks the decoder on valid input (the reference packet; a sweep of number sizes that
 * takes every context's Rice parameter from 0 to 63 and through the escape, with cold starts of
 * every kind) and on hostile input: every
 * prefix of a valid packet, record and number stream cuts, padding and leftovers in the number
 * stream, stream lengths that lie, corrupted headers and bodies, bad nesting, and LZ4 bodies that
 * lie about their size, each rejected with the right TMK_E* code. */
#include <stdlib.h>
#include <string.h>

#include "proto_util.h"
#include "tmk_proto.h"
#include "tmk_test.h"

/* ---- the number stream, coded from §5.0 ---------------------------------------------------- */

/* The five number contexts (§5.0); each starts every packet at state 0 (cold). */
enum { CX_GAP, CX_DUR, CX_FRESH, CX_CLOSE, CX_CFRESH, CX_COUNT };

#define MAX_NUMS 4096

/* A number stream being written. Bit i of the stream is bit i % 8 of b[i / 8], where b[j] is the
 * j-th byte counted from the body's end. It also keeps where each number ends (in bits) and which
 * codes it used, so that tests can cut exactly and check what they covered. */
typedef struct nstream {
  uint8_t b[65536];
  size_t nbit;
  unsigned s[CX_COUNT];
  size_t nnum;
  size_t end[MAX_NUMS];
  uint64_t kseen[CX_COUNT]; /* bit k: Rice parameter k was used in this context */
  unsigned qseen;           /* bit q: unary length q (0..5) was used; bit 6: an escape */
  size_t esc64;             /* escapes of 64-bit numbers */
  unsigned cold[CX_COUNT];  /* as qseen, for numbers coded while the context was cold (s = 0) */
  size_t warmed[CX_COUNT];  /* how often a cold context's first non-zero number set its state */
} nstream;

static unsigned bitlen(uint64_t v) {
  unsigned n = 0;
  while (v) {
    n++;
    v >>= 1;
  }
  return n;
}

static void ns_init(nstream* w) { memset(w, 0, sizeof *w); }

/* Appends the n low bits of v, least significant first. */
static void ns_bits(nstream* w, uint64_t v, unsigned n) {
  unsigned i;
  for (i = 0; i < n; i++, w->nbit++)
    if ((v >> i) & 1) w->b[w->nbit / 8] = (uint8_t)(w->b[w->nbit / 8] | (1u << (w->nbit % 8)));
}

static void ns_put(nstream* w, int cx, uint64_t v) {
  unsigned s = w->s[cx], len = (s + 12) >> 4, k = len > 1 ? len - 1 : 0;
  uint64_t q;
  /* s is 16 * bitlen at first and then moves towards it, and bitlen <= 64: s <= 1024, k <= 63 */
  assert_true(s <= 1024 && k <= 63);
  q = v >> k;
  if (q < 6) {
    ns_bits(w, ((uint64_t)1 << q) - 1, (unsigned)q); /* q one bits */
    ns_bits(w, 0, 1);                               /* a zero bit */
    ns_bits(w, v, k);                               /* the low k bits */
    w->qseen |= 1u << q;
    if (s == 0) w->cold[cx] |= 1u << q;
  } else {
    unsigned n = bitlen(v);
    ns_bits(w, 0x3F, 6);    /* six one bits */
    ns_bits(w, n - 1, 6);   /* n - 1 in 6 bits */
    ns_bits(w, v, n);       /* the n low bits */
    w->qseen |= 1u << 6;
    if (s == 0) w->cold[cx] |= 1u << 6;
    if (n == 64) w->esc64++;
  }
  w->kseen[cx] |= (uint64_t)1 << k;
  /* step 4: a cold context's first number sets the state outright (a zero leaves it cold) */
  if (s == 0) {
    w->s[cx] = 16 * bitlen(v);
    if (v) w->warmed[cx]++;
  } else {
    w->s[cx] = s - (s >> 3) + 2 * bitlen(v);
  }
  assert_true(w->nnum < MAX_NUMS);
  w->end[w->nnum++] = w->nbit;
}

/* The stream's bytes in body order (front first, the last byte is the body's last); the last
 * byte written is padded with zero bits. Returns how many. */
static size_t ns_bytes(const nstream* w, uint8_t* out) {
  size_t n = (w->nbit + 7) / 8, j;
  for (j = 0; j < n; j++) out[n - 1 - j] = w->b[j];
  return n;
}

/* body = varint A | varint N | record stream (a bytes) | number stream (n bytes) (§5), with the
 * declared A and N given separately so that tests can lie. Returns the body length. */
static size_t assemble(uint8_t* out, uint64_t decl_a, uint64_t decl_n, const uint8_t* rec, size_t a,
                       const uint8_t* num, size_t n) {
  size_t len = pt_varint(out, decl_a);
  len += pt_varint(out + len, decl_n);
  memcpy(out + len, rec, a);
  len += a;
  memcpy(out + len, num, n);
  return len + n;
}

/* ---- a packet assembled by hand (§2, §5) ---------------------------------------------------- */

/* A DATA body under construction: the record stream, the zone numbers (gaps, duration codes) with
 * their contexts in the order the records need them, and after every record a mark saying where
 * it ends, how many numbers it has used, how many zones are open and how many records the decoder
 * has reported. */
typedef struct mark_t {
  size_t rend, nnum;
  int open;
  size_t emitted;
} mark_t;

typedef struct buf {
  uint8_t r[16384];
  size_t nr;
  uint64_t num[MAX_NUMS];
  int cx[MAX_NUMS];
  size_t nnum;
  mark_t marks[64];
  size_t nmarks;
} buf;

static void mark(buf* o, int open, size_t emitted) {
  o->marks[o->nmarks].rend = o->nr;
  o->marks[o->nmarks].nnum = o->nnum;
  o->marks[o->nmarks].open = open;
  o->marks[o->nmarks].emitted = emitted;
  o->nmarks++;
}
static void b_bytes(buf* o, const void* p, size_t n) {
  memcpy(o->r + o->nr, p, n);
  o->nr += n;
}
static void b_u8(buf* o, unsigned v) { o->r[o->nr++] = (uint8_t)v; }
static void b_v(buf* o, uint64_t v) { o->nr += pt_varint(o->r + o->nr, v); }
static void b_s(buf* o, int64_t v) { o->nr += pt_svarint(o->r + o->nr, v); }
static void b_str(buf* o, const char* s, size_t n) {
  b_v(o, n);
  b_bytes(o, s, n);
}
static uint64_t zz(int64_t v) {
  uint64_t u = (uint64_t)v;
  return (u << 1) ^ (v < 0 ? ~(uint64_t)0 : 0);
}
static uint64_t unzz(uint64_t u) { return (u >> 1) ^ (0 - (u & 1)); }
static void n_put(buf* o, int cx, uint64_t v) {
  o->cx[o->nnum] = cx;
  o->num[o->nnum++] = v;
}
/* The callers say each number's context (§5.0, §5.3): the gap of LEAF and OPEN; a LEAF's duration
 * when its site sits in slot site % 32 of predictor table 0 (duration: the code is zigzag of the
 * difference from the slot's duration), or when it does not (fresh: the code is the duration
 * itself); a CLOSE's tail (end - zone cursor) when the popped zone's site sits in slot site % 32
 * of table 1 (close: zigzag of the difference from the slot's tail), or not (close-fresh: the
 * tail itself). */
static void n_gap(buf* o, uint64_t v) { n_put(o, CX_GAP, v); }
static void n_dur(buf* o, int64_t d) { n_put(o, CX_DUR, zz(d)); }
static void n_fresh(buf* o, uint64_t d) { n_put(o, CX_FRESH, d); }
static void n_close(buf* o, int64_t d) { n_put(o, CX_CLOSE, zz(d)); }
static void n_cfresh(buf* o, uint64_t t) { n_put(o, CX_CFRESH, t); }
static void b_reset(buf* o) {
  o->nr = 0;
  o->nnum = 0;
  o->nmarks = 0;
}

/* Codes the first nnum numbers of o into w (initialised here). */
static void num_stream(const buf* o, size_t nnum, nstream* w) {
  size_t i;
  ns_init(w);
  for (i = 0; i < nnum; i++) ns_put(w, o->cx[i], o->num[i]);
}

/* Body of the record stream [0, rlen) and the first nnum numbers, lengths declared truthfully.
 * Returns the body length. */
static size_t body_bytes(const buf* o, size_t rlen, size_t nnum, uint8_t* out) {
  nstream* w = (nstream*)malloc(sizeof *w);
  uint8_t* num = (uint8_t*)malloc(sizeof w->b);
  size_t nb, n;
  assert_true(w && num);
  num_stream(o, nnum, w);
  nb = ns_bytes(w, num);
  n = assemble(out, rlen, nb, o->r, rlen, num, nb);
  free(w);
  free(num);
  return n;
}

/* The reference body; base time 1000. f64 1.5 in the given byte order. Predictor slots are noted
 * where a number's context depends on them (table 0 for leaves, table 1 for CLOSE). */
static void spec_body(buf* o, int big_endian) {
  static const uint8_t d15_le[8] = {0, 0, 0, 0, 0, 0, 0xF8, 0x3F};
  static const uint8_t d15_be[8] = {0x3F, 0xF8, 0, 0, 0, 0, 0, 0};
  b_reset(o);
  mark(o, 0, 0);
  b_u8(o, 0x01); /* SITE */
  b_v(o, 1), b_v(o, 0), b_v(o, 3), b_v(o, 1), b_v(o, 0xFF0000), b_v(o, 42);
  b_str(o, "Frame", 5), b_str(o, "a.c", 3), mark(o, 0, 1);
  b_u8(o, 0x0A), b_v(o, 0), b_str(o, "main", 4), mark(o, 0, 2); /* THREAD_NAME 0 */
  b_u8(o, 0x02), b_v(o, 0), mark(o, 0, 2);                      /* THREAD 0 */
  b_u8(o, 0x22), b_v(o, 1), n_gap(o, 5), mark(o, 1, 2);         /* OPEN site 1 at 1005 */
  b_u8(o, 0x81), n_gap(o, 3), n_fresh(o, 20), mark(o, 1, 3);    /* LEAF site 2 at 1008, 20 */
  b_u8(o, 0x81), n_gap(o, 2), n_dur(o, -1), mark(o, 1, 4);      /* LEAF site 2 at 1030, 20-1 */
  b_u8(o, 0x21), b_v(o, 34), n_gap(o, 1), n_fresh(o, 7), mark(o, 1, 5); /* slot 2 holds 2: 7 */
  b_u8(o, 0x81), n_gap(o, 0), n_fresh(o, 0), mark(o, 1, 6); /* LEAF site 2 at 1057: slot holds 34 */
  /* CLOSE site 1 at 1067, 62: table 1 is empty (OPEN and the leaves do not touch it): tail 10 */
  b_u8(o, 0x20), n_cfresh(o, 10), mark(o, 0, 7);
  b_u8(o, 0x03), b_v(o, 2), b_s(o, -100), mark(o, 0, 7);    /* AT depth 2, cursor 967 */
  b_u8(o, 0x40), n_gap(o, 0), mark(o, 1, 7);                /* OPEN short site 1 at 967 */
  b_u8(o, 0xC0), n_gap(o, 1), n_fresh(o, 4), mark(o, 1, 8); /* LEAF short site 65 at 968, 4 */
  b_u8(o, 0x20), n_close(o, -10), mark(o, 0, 9); /* CLOSE site 1 at 972, 5: tail 0, slot: 10 */
  b_u8(o, 0x06), b_v(o, 0), b_s(o, 100), mark(o, 0, 10);    /* FRAME 1100 */
  b_u8(o, 0x07), b_v(o, 3), b_s(o, -50), b_s(o, -2), mark(o, 0, 11); /* PLOT_I 1050 -2 */
  b_u8(o, 0x08), b_v(o, 4), b_s(o, 0);                               /* PLOT_D 1050 1.5 */
  b_bytes(o, big_endian ? d15_be : d15_le, 8), mark(o, 0, 12);
  b_u8(o, 0x09), b_v(o, 0), b_v(o, 2), b_v(o, 0x80000000u), b_s(o, 1), b_str(o, "hi", 2);
  mark(o, 0, 13);
  b_u8(o, 0x04), b_v(o, 5), b_s(o, 9), b_str(o, "\0\1", 2), mark(o, 0, 14); /* MARKER_BEGIN 1060 */
  b_u8(o, 0x05), b_v(o, 5), b_s(o, 40), b_str(o, "", 0), mark(o, 0, 15);    /* MARKER_END 1100 */
  b_u8(o, 0x0B), b_v(o, 3), b_v(o, 300), mark(o, 0, 16);                    /* DROPS */
  b_u8(o, 0x0C), b_v(o, 1234), b_v(o, 1700000000000000000ull), mark(o, 0, 17); /* CLOCK_SYNC */
  b_u8(o, 0x0D), b_v(o, 31), b_str(o, "render", 6), mark(o, 0, 18);          /* TEAM_NAME */
  b_u8(o, 0x02), b_v(o, 7), mark(o, 0, 18);               /* THREAD 7: cursors reset */
  b_u8(o, 0xFF), n_gap(o, 0), n_fresh(o, 5), mark(o, 0, 19); /* LEAF short site 128 at 1000 */
  b_u8(o, 0x06), b_v(o, 9), b_s(o, 0), mark(o, 0, 20);    /* FRAME site 9 at 1000 */
  /* the gaps so far (5 3 2 1 0 0 1 0) left the gap state at 28 (k = 1), so 300 needs an escape */
  b_u8(o, 0x80), n_gap(o, 300), n_fresh(o, 6), mark(o, 0, 21); /* LEAF short site 1 at 1305, 6 */
}

/* Header (seq 42, base 1000) + body; returns the packet length. */
static size_t spec_packet(buf* o, int big_endian, uint8_t* pkt) {
  size_t h;
  spec_body(o, big_endian);
  h = pt_header(pkt, big_endian ? TMK_PKT_F_BIG_ENDIAN : 0, TMK_PKT_DATA, 0x1122334455667788ull, 42,
                1000, 0);
  return h + body_bytes(o, o->nr, o->nnum, pkt + h);
}

static void expect_zone(const tmk_proto_record* r, uint32_t thread, uint32_t site, uint32_t depth,
                        uint64_t start, uint64_t dur) {
  if (r->type != TMK_REC_ZONE || r->thread != thread || r->u.zone.site != site ||
      r->u.zone.depth != depth || r->u.zone.start != start || r->u.zone.duration != dur) {
    char line[256];
    tmk_proto_format_record(r, line, sizeof line);
    fail_msg("want zone thread %u site %u depth %u start %llu dur %llu, got: %s", (unsigned)thread,
             (unsigned)site, (unsigned)depth, (unsigned long long)start, (unsigned long long)dur, line);
  }
}

static void check_spec_packet(const pt_decoded* d, int big_endian) {
  const tmk_proto_record* r = d->recs;
  assert_int_equal(d->rc, 0);
  assert_int_equal(d->hdr.version, 1);
  assert_int_equal(d->hdr.type, TMK_PKT_DATA);
  assert_int_equal(d->hdr.flags, big_endian ? TMK_PKT_F_BIG_ENDIAN : 0);
  assert_true(d->hdr.session_id == 0x1122334455667788ull);
  assert_true(d->hdr.seq == 42);
  assert_true(d->hdr.base_time == 1000);
  assert_int_equal(d->hdr.header_len, 14 + 1 + 2);
  assert_int_equal(d->n, 21);
  assert_int_equal(r[0].type, TMK_REC_SITE);
  assert_int_equal(r[0].u.site.id, 1);
  assert_int_equal(r[0].u.site.kind, 0);
  assert_int_equal(r[0].u.site.severity, 3);
  assert_int_equal(r[0].u.site.verbosity, 1);
  assert_int_equal(r[0].u.site.color, 0xFF0000);
  assert_int_equal(r[0].u.site.line, 42);
  assert_int_equal(r[0].u.site.name.len, 5);
  assert_memory_equal(r[0].u.site.name.ptr, "Frame", 5);
  assert_int_equal(r[0].u.site.file.len, 3);
  assert_memory_equal(r[0].u.site.file.ptr, "a.c", 3);
  assert_int_equal(r[1].type, TMK_REC_THREAD_NAME);
  assert_int_equal(r[1].thread, 0);
  assert_int_equal(r[1].u.thread_name.name.len, 4);
  expect_zone(&r[2], 0, 2, 1, 1008, 20);
  expect_zone(&r[3], 0, 2, 1, 1030, 19);
  expect_zone(&r[4], 0, 34, 1, 1050, 7);
  expect_zone(&r[5], 0, 2, 1, 1057, 0);
  expect_zone(&r[6], 0, 1, 0, 1005, 62);
  expect_zone(&r[7], 0, 65, 3, 968, 4);
  expect_zone(&r[8], 0, 1, 2, 967, 5);
  assert_int_equal(r[9].type, TMK_REC_FRAME);
  assert_int_equal(r[9].u.frame.site, 0);
  assert_true(r[9].u.frame.time == 1100);
  assert_int_equal(r[10].type, TMK_REC_PLOT);
  assert_int_equal(r[10].u.plot.site, 3);
  assert_true(r[10].u.plot.time == 1050);
  assert_int_equal(r[10].u.plot.is_double, 0);
  assert_true(r[10].u.plot.i == -2);
  assert_int_equal(r[11].type, TMK_REC_PLOT);
  assert_int_equal(r[11].u.plot.is_double, 1);
  assert_true(r[11].u.plot.d == 1.5);
  assert_true(r[11].u.plot.time == 1050);
  assert_int_equal(r[12].type, TMK_REC_MESSAGE);
  assert_int_equal(r[12].u.message.site, 0);
  assert_int_equal(r[12].u.message.severity, 2);
  assert_int_equal(r[12].u.message.verbosity, 0x80000000u);
  assert_true(r[12].u.message.time == 1051);
  assert_int_equal(r[12].u.message.text.len, 2);
  assert_memory_equal(r[12].u.message.text.ptr, "hi", 2);
  assert_int_equal(r[13].type, TMK_REC_MARKER_BEGIN);
  assert_int_equal(r[13].u.marker.site, 5);
  assert_true(r[13].u.marker.time == 1060);
  assert_int_equal(r[13].u.marker.payload.len, 2);
  assert_memory_equal(r[13].u.marker.payload.ptr, "\0\1", 2);
  assert_int_equal(r[14].type, TMK_REC_MARKER_END);
  assert_true(r[14].u.marker.time == 1100);
  assert_int_equal(r[14].u.marker.payload.len, 0);
  assert_int_equal(r[15].type, TMK_REC_DROPS);
  assert_int_equal(r[15].u.drops.reason, 3);
  assert_true(r[15].u.drops.count == 300);
  assert_int_equal(r[16].type, TMK_REC_CLOCK_SYNC);
  assert_true(r[16].u.clock.ticks == 1234);
  assert_true(r[16].u.clock.unix_ns == 1700000000000000000ull);
  assert_int_equal(r[17].type, TMK_REC_TEAM_NAME);
  assert_int_equal(r[17].u.team.bit, 31);
  assert_int_equal(r[17].u.team.name.len, 6);
  expect_zone(&r[18], 7, 128, 0, 1000, 5);
  assert_int_equal(r[19].type, TMK_REC_FRAME);
  assert_int_equal(r[19].thread, 7);
  assert_int_equal(r[19].u.frame.site, 9);
  assert_true(r[19].u.frame.time == 1000);
  expect_zone(&r[20], 7, 1, 0, 1305, 6);
}

static void test_spec_packet(void** state) {
  buf* o = (buf*)malloc(sizeof *o);
  uint8_t pkt[4096];
  pt_decoded d;
  size_t n;
  int be;
  (void)state;
  assert_non_null(o);
  for (be = 0; be < 2; be++) {
    n = spec_packet(o, be, pkt);
    pt_decode(&d, pkt, n);
    check_spec_packet(&d, be);
    pt_decoded_free(&d);
  }
  free(o);
}

/* Decodes header(seq 0, base 1000) + body. Call pt_decoded_free afterwards. */
static int decode_body(pt_decoded* d, const uint8_t* body, size_t len) {
  uint8_t* p = (uint8_t*)malloc(len + 64);
  size_t h;
  assert_non_null(p);
  h = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 1000, 0);
  memcpy(p + h, body, len);
  pt_decode(d, p, h + len);
  free(p);
  return d->rc;
}

static void expect_raw(const uint8_t* body, size_t len, int want, size_t want_recs,
                       const char* what) {
  pt_decoded d;
  decode_body(&d, body, len);
  if (d.rc != want || d.n != want_recs)
    fail_msg("%s: got %s after %u records, want %s after %u", what, tmk_err_name(d.rc),
             (unsigned)d.n, tmk_err_name(want), (unsigned)want_recs);
  pt_decoded_free(&d);
}

/* Bodies worked out by hand from §5.0, byte for byte; the test's coder must produce them and the
 * decoder must read them. At the start of a packet every context is cold (state 0, so k = 0: a
 * number below 6 is v one bits and a zero, a larger one escapes), and a context's first non-zero
 * number sets its state to 16 * bitlen. */
static void test_pinned_bodies(void** state) {
  /* LEAF site 1: gap 1 (gap: 10), duration 2, fresh so coded as itself (fresh: 110); 5 bits,
   * 10110 from bit 0: 0x0D with three bits of padding */
  static const uint8_t small[] = {0x01, 0x01, 0x80, 0x0D};
  /* LEAF site 1: gap 300 = 0b100101100: escape 111111, n - 1 = 8 as 000100, the 9 bits
   * 001101001; duration 0: 0; 22 bits, from the last byte backwards 0x3F, 0xC2, 0x12 */
  static const uint8_t escape[] = {0x01, 0x03, 0x80, 0x12, 0xC2, 0x3F};
  /* LEAF site 1: gap 2^64 - 1: escape 111111, 63 as 111111, 64 one bits; duration 0: 0;
   * 77 bits: nine 0xFF, then 0x0F */
  static const uint8_t wide[] = {0x01, 0x0A, 0x80, 0x0F, 0xFF, 0xFF, 0xFF,
                                 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  /* A tree that pins the state update and both CLOSE contexts:
   *   OPEN site 1, gap 1            gap 1, cold:        10                  gap s = 16
   *   LEAF site 1, gap 2^20         k = 0, escape:      111111 001010 (20)  gap s = 16 - 2 + 2*21
   *                                                     then 20 zeros, 1    = 56 (k = 3)
   *     duration 5 (table 0 empty)  fresh, cold:        111110
   *   CLOSE: tail 3 (table 1 empty) close-fresh, cold:  1110                table 1 slot 1: 1, 3
   *   OPEN site 1, gap 9            gap, k = 3:         10 100 (9 >> 3 = 1, low bits 001)
   *   CLOSE: tail 1, predicted 3    close, cold:        1110 (zigzag(-2) = 3)
   * 54 bits; from bit 0: FD 14 00 00 FC AE 1C (two bits of padding), stored backwards. Leaf at
   * 1001 + 2^20 (5), parent 1001 (2^20 + 8), parent 1018 + 2^20 (1). Had the second gap set the
   * state the old way (s - s/16 + bitlen = 36, k = 2), gap 9 would read differently. */
  static const uint8_t tree[] = {0x05, 0x07, 0x40, 0x80, 0x20, 0x40, 0x20,
                                 0x1C, 0xAE, 0xFC, 0x00, 0x00, 0x14, 0xFD};
  static const struct {
    const uint8_t* body;
    size_t len;
    uint64_t gap, start, dur;
  } cases[] = {{small, sizeof small, 1, 1001, 2},
               {escape, sizeof escape, 300, 1300, 0},
               {wide, sizeof wide, ~(uint64_t)0, 999, 0}};
  const uint64_t m = (uint64_t)1 << 20;
  buf* o = (buf*)calloc(1, sizeof *o);
  uint8_t body[64];
  size_t i, n;
  pt_decoded d;
  (void)state;
  assert_non_null(o);
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    b_reset(o);
    b_u8(o, 0x80), n_gap(o, cases[i].gap), n_fresh(o, cases[i].dur);
    n = body_bytes(o, o->nr, o->nnum, body);
    assert_int_equal(n, cases[i].len);
    assert_memory_equal(body, cases[i].body, n);
    assert_int_equal(decode_body(&d, cases[i].body, cases[i].len), 0);
    assert_int_equal(d.n, 1);
    expect_zone(&d.recs[0], 0, 1, 0, cases[i].start, cases[i].dur);
    pt_decoded_free(&d);
  }
  b_reset(o);
  b_u8(o, 0x40), n_gap(o, 1);
  b_u8(o, 0x80), n_gap(o, m), n_fresh(o, 5);
  b_u8(o, 0x20), n_cfresh(o, 3);
  b_u8(o, 0x40), n_gap(o, 9);
  b_u8(o, 0x20), n_close(o, -2);
  n = body_bytes(o, o->nr, o->nnum, body);
  assert_int_equal(n, sizeof tree);
  assert_memory_equal(body, tree, n);
  assert_int_equal(decode_body(&d, tree, sizeof tree), 0);
  assert_int_equal(d.n, 3);
  expect_zone(&d.recs[0], 0, 1, 1, 1001 + m, 5);
  expect_zone(&d.recs[1], 0, 1, 0, 1001, m + 8);
  expect_zone(&d.recs[2], 0, 1, 0, 1018 + m, 1);
  pt_decoded_free(&d);
  free(o);
}

/* ---- truncation -------------------------------------------------------------------------------- */

static void format_all(const pt_decoded* d, char (*lines)[256], size_t n) {
  size_t i;
  for (i = 0; i < n && i < d->n; i++) tmk_proto_format_record(&d->recs[i], lines[i], 256);
}

/* Cut the reference packet at every length. Inside the header open() says ETRUNC and so does the
 * header parser; inside the body the declared stream lengths (§5) no longer fit, so open() says
 * ETRUNC before any record comes out. One byte more than the streams is ECORRUPT. */
static void test_every_prefix(void** state) {
  buf* o = (buf*)malloc(sizeof *o);
  uint8_t pkt[4096];
  size_t len, full, hlen = 17;
  int be;
  (void)state;
  assert_non_null(o);
  for (be = 0; be < 2; be++) {
    pt_decoded d;
    full = spec_packet(o, be, pkt);
    for (len = 0; len < full; len++) {
      tmk_proto_header h;
      pt_decode(&d, pkt, len);
      if (d.rc != TMK_ETRUNC || !d.failed_in_open)
        fail_msg("prefix %u of %u: got %s%s", (unsigned)len, (unsigned)full, tmk_err_name(d.rc),
                 d.failed_in_open ? "" : " (not in open)");
      assert_int_equal(tmk_proto_parse_header(pkt, len, &h), len < hlen ? TMK_ETRUNC : (int)hlen);
      pt_decoded_free(&d);
    }
    pkt[full] = 0;
    pt_decode(&d, pkt, full + 1);
    assert_int_equal(d.rc, TMK_ECORRUPT);
    assert_true(d.failed_in_open);
    pt_decoded_free(&d);
  }
  free(o);
}

/* A record stream cut short with a consistent length (and the numbers its complete records use):
 * at a record boundary the records so far decode and the end is clean (0) or leaves a zone open
 * (ENEST); inside a record the decoder reports ETRUNC after the records before it. */
static void test_record_stream_cuts(void** state) {
  buf* o = (buf*)malloc(sizeof *o);
  char(*full)[256] = (char(*)[256])malloc(64 * 256);
  char(*part)[256] = (char(*)[256])malloc(64 * 256);
  uint8_t pkt[4096];
  size_t c, i, n, h;
  pt_decoded d;
  (void)state;
  assert_true(o && full && part);
  n = spec_packet(o, 0, pkt);
  assert_int_equal(pt_decode(&d, pkt, n), 0);
  format_all(&d, full, 64);
  pt_decoded_free(&d);
  h = pt_header(pkt, 0, TMK_PKT_DATA, 1, 0, 1000, 0);
  for (c = 0; c < o->nr; c++) {
    int want = TMK_ETRUNC;
    size_t want_n = 0, nnum = 0;
    for (i = 0; i < o->nmarks && o->marks[i].rend <= c; i++) {
      want_n = o->marks[i].emitted;
      nnum = o->marks[i].nnum;
      if (o->marks[i].rend == c) want = o->marks[i].open ? TMK_ENEST : 0;
    }
    n = h + body_bytes(o, c, nnum, pkt + h);
    pt_decode(&d, pkt, n);
    if (d.rc != want || d.n != want_n)
      fail_msg("record stream cut at %u: got %s after %u records, want %s after %u", (unsigned)c,
               tmk_err_name(d.rc), (unsigned)d.n, tmk_err_name(want), (unsigned)want_n);
    format_all(&d, part, 64);
    for (i = 0; i < d.n; i++) assert_string_equal(part[i], full[i]);
    pt_decoded_free(&d);
  }
  free(o);
  free(full);
  free(part);
}

/* The number stream losing bytes at its front (where its last numbers are), with its length
 * declared consistently: the first number that lost a bit runs past the front of the stream
 * (ETRUNC, §5.0), and every record before the one that needs it decodes as in the full packet. */
static void test_number_stream_cuts(void** state) {
  buf* o = (buf*)malloc(sizeof *o);
  nstream* w = (nstream*)malloc(sizeof *w);
  char(*full)[256] = (char(*)[256])malloc(64 * 256);
  char(*part)[256] = (char(*)[256])malloc(64 * 256);
  uint8_t num[512], body[4096];
  size_t nb, drop, i, n;
  pt_decoded d;
  (void)state;
  assert_true(o && w && full && part);
  spec_body(o, 0);
  num_stream(o, o->nnum, w);
  nb = ns_bytes(w, num);
  n = assemble(body, o->nr, nb, o->r, o->nr, num, nb);
  assert_int_equal(decode_body(&d, body, n), 0);
  format_all(&d, full, 64);
  pt_decoded_free(&d);
  for (drop = 1; drop <= nb; drop++) {
    size_t keep = nb - drop, first = 0, want_n = 0;
    while (w->end[first] <= 8 * keep) first++; /* the first number with a bit in the lost bytes */
    for (i = 0; i < o->nmarks && o->marks[i].nnum <= first; i++) want_n = o->marks[i].emitted;
    n = assemble(body, o->nr, keep, o->r, o->nr, num + drop, keep);
    decode_body(&d, body, n);
    if (d.rc != TMK_ETRUNC || d.n != want_n || d.failed_in_open)
      fail_msg("number stream without its first %u of %u bytes: got %s after %u records, want "
               "ETRUNC after %u", (unsigned)drop, (unsigned)nb, tmk_err_name(d.rc), (unsigned)d.n,
               (unsigned)want_n);
    format_all(&d, part, 64);
    for (i = 0; i < d.n; i++) assert_string_equal(part[i], full[i]);
    pt_decoded_free(&d);
  }
  free(o);
  free(w);
  free(full);
  free(part);
}

/* ---- corrupted headers ------------------------------------------------------------------------ */

static int open_rc(const uint8_t* p, size_t n) {
  tmk_proto_reader r;
  uint8_t* copy = (uint8_t*)malloc(n ? n : 1);
  static uint8_t scratch[TMK_PROTO_MAX_BODY];
  int rc;
  if (!copy) return TMK_ENOMEM;
  memcpy(copy, p, n);
  rc = tmk_proto_open(&r, copy, n, scratch, sizeof scratch);
  free(copy);
  return rc;
}

static void test_bad_header(void** state) {
  buf* o = (buf*)malloc(sizeof *o);
  uint8_t good[4096], p[4096];
  size_t i, n;
  static const uint8_t bad_versions[] = {0, 2, 0x7F, 0xFF};
  static const uint8_t bad_flags[] = {0x08, 0x10, 0x80, 0x0F, 0xFF}; /* 0x04 is MAC (§2.1) */
  static const uint8_t bad_types[] = {0, 7, 8, 0x40, 0xFF};
  tmk_proto_header h;
  (void)state;
  assert_non_null(o);
  n = spec_packet(o, 0, good);
  for (i = 0; i < 3; i++) {
    memcpy(p, good, n);
    p[i] ^= 0x20;
    assert_int_equal(open_rc(p, n), TMK_EMAGIC);
    assert_int_equal(tmk_proto_parse_header(p, n, &h), TMK_EMAGIC);
  }
  for (i = 0; i < sizeof bad_versions; i++) {
    memcpy(p, good, n);
    p[3] = bad_versions[i];
    assert_int_equal(open_rc(p, n), TMK_EVERSION);
  }
  for (i = 0; i < sizeof bad_flags; i++) {
    memcpy(p, good, n);
    p[4] = bad_flags[i];
    assert_int_equal(open_rc(p, n), TMK_EFLAGS);
  }
  for (i = 0; i < sizeof bad_types; i++) {
    memcpy(p, good, n);
    p[5] = bad_types[i];
    assert_int_equal(open_rc(p, n), TMK_ETYPE);
  }
  /* an overflowing varint in seq or base time */
  {
    size_t k;
    n = 14;
    memcpy(p, good, 14);
    for (k = 0; k < 10; k++) p[n++] = 0xFF;
    p[n++] = 0x01; /* 11 bytes */
    p[n++] = 0x00;
    assert_int_equal(open_rc(p, n), TMK_EVARINT);
    n = 14;
    p[n++] = 0x00;
    for (k = 0; k < 9; k++) p[n++] = 0xFF;
    p[n++] = 0x02; /* tenth byte above 1 */
    p[n++] = 0x00;
    assert_int_equal(open_rc(p, n), TMK_EVARINT);
  }
  /* stream lengths (§5) that disagree with the body: the bytes after them are one FRAME record
   * (06 00 00) and `extra` zero bytes; the body must be exactly A + N long after the lengths */
  {
    static const struct {
      uint64_t a, n;
      size_t extra;
      int want;
    } lens[] = {
        {3, 0, 0, 0},
        {5, 0, 0, TMK_ETRUNC},       /* the record stream runs past the body */
        {3, 1, 0, TMK_ETRUNC},       /* the number stream runs past the body */
        {2, 2, 0, TMK_ETRUNC},       /* together they do */
        {3, 0, 1, TMK_ECORRUPT},     /* a byte after the number stream */
        {3, 0, 9, TMK_ECORRUPT},     /* nine */
        {2, 0, 0, TMK_ECORRUPT},     /* the record's last byte lies after both streams */
        {0, 0, 0, TMK_ECORRUPT},     /* no streams, three bytes */
        {0, 3, 0, 0},                /* lengths fit; the numbers nobody reads are next()'s */
        {4, ~(uint64_t)0, 0, TMK_ETRUNC},                                /* sum wraps to 3 */
        {((uint64_t)1 << 63) + 3, (uint64_t)1 << 63, 0, TMK_ETRUNC},     /* sum wraps to 3 */
        {~(uint64_t)0, 0, 0, TMK_ETRUNC},
        {TMK_PROTO_MAX_BODY + 1, 0, 0, TMK_ETRUNC},
    };
    for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
      int rc;
      n = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 0, 0);
      n += pt_varint(p + n, lens[i].a);
      n += pt_varint(p + n, lens[i].n);
      p[n++] = 0x06, p[n++] = 0, p[n++] = 0;
      memset(p + n, 0, lens[i].extra);
      n += lens[i].extra;
      rc = open_rc(p, n);
      if (rc != lens[i].want)
        fail_msg("A %llu, N %llu, %u bytes after: got %s, want %s", (unsigned long long)lens[i].a,
                 (unsigned long long)lens[i].n, (unsigned)lens[i].extra, tmk_err_name(rc),
                 tmk_err_name(lens[i].want));
    }
  }
  /* a DATA packet with no body at all has no stream lengths; one with A but no N */
  n = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 0, 0);
  assert_int_equal(open_rc(p, n), TMK_ETRUNC);
  p[n++] = 0;
  assert_int_equal(open_rc(p, n), TMK_ETRUNC);
  p[n++] = 0x80; /* N unterminated */
  assert_int_equal(open_rc(p, n), TMK_ETRUNC);
  /* an 11-byte A */
  {
    int k;
    n = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 0, 0);
    for (k = 0; k < 10; k++) p[n++] = 0x80;
    p[n++] = 0x00, p[n++] = 0x00;
    assert_int_equal(open_rc(p, n), TMK_EVARINT);
  }
  free(o);
}

/* ---- corrupted bodies --------------------------------------------------------------------------- */

/* Decodes header(base 1000) + body built from o and checks the final code; resets o. */
static void expect_body(buf* o, int want, size_t want_recs, const char* what) {
  uint8_t* p = (uint8_t*)malloc(o->nr + 16 * o->nnum + 64);
  assert_non_null(p);
  expect_raw(p, body_bytes(o, o->nr, o->nnum, p), want, want_recs, what);
  free(p);
  b_reset(o);
}

static void frame(buf* o) { b_u8(o, 0x06), b_v(o, 0), b_s(o, 1); }

static void site(buf* o, uint64_t id, uint64_t kind, uint64_t sev, uint64_t verb, uint64_t len) {
  b_u8(o, 0x01), b_v(o, id), b_v(o, kind), b_v(o, sev), b_v(o, verb), b_v(o, 0), b_v(o, 1);
  b_v(o, len);
  memset(o->r + o->nr, 'n', (size_t)(len < 2000 ? len : 0));
  o->nr += (size_t)(len < 2000 ? len : 0);
  b_str(o, "f.c", 3);
}

static void test_bad_records(void** state) {
  static const uint8_t bad_tags[] = {0x00, 0x0E, 0x0F, 0x10, 0x1F, 0x23, 0x30, 0x3F};
  buf* o = (buf*)calloc(1, sizeof *o);
  size_t i;
  int k;
  (void)state;
  assert_non_null(o);
  for (i = 0; i < sizeof bad_tags; i++) {
    frame(o), b_u8(o, bad_tags[i]), b_v(o, 1), b_v(o, 1);
    expect_body(o, TMK_ERECORD, 1, "reserved tag");
  }
  /* SITE */
  site(o, 1, 0, 5, 0xFFFFFFFFu, 0), expect_body(o, 0, 1, "valid site");
  site(o, 0, 0, 3, 1, 4), expect_body(o, TMK_ERANGE, 0, "site id 0");
  site(o, 1, 0, 6, 1, 4), expect_body(o, TMK_ERANGE, 0, "site severity 6");
  site(o, 0x100000000ull, 0, 3, 1, 4), expect_body(o, TMK_ERANGE, 0, "site id 2^32");
  site(o, 1, 0, 3, 0x100000000ull, 4), expect_body(o, TMK_ERANGE, 0, "verbosity 2^32");
  site(o, 1, 0, 3, 1, TMK_PROTO_MAX_STRING), expect_body(o, 0, 1, "1024-byte name");
  site(o, 1, 0, 3, 1, TMK_PROTO_MAX_STRING + 1), expect_body(o, TMK_ETOOBIG, 0, "1025-byte name");
  site(o, 1, 0, 3, 1, 0xFFFFFFFFFFull), expect_body(o, TMK_ETOOBIG, 0, "huge name length");
  frame(o), b_u8(o, 0x01), b_v(o, 1), b_v(o, 0), b_v(o, 3), b_v(o, 1), b_v(o, 0), b_v(o, 1);
  b_v(o, 50), b_bytes(o, "short", 5), expect_body(o, TMK_ETRUNC, 1, "name past the end");
  /* strings and payloads */
  frame(o), b_u8(o, 0x09), b_v(o, 0), b_v(o, 3), b_v(o, 1), b_s(o, 0), b_v(o, 3), b_bytes(o, "ab", 2);
  expect_body(o, TMK_ETRUNC, 1, "message text past the end");
  b_u8(o, 0x09), b_v(o, 0), b_v(o, 6), b_v(o, 1), b_s(o, 0), b_str(o, "x", 1);
  expect_body(o, TMK_ERANGE, 0, "message severity 6");
  b_u8(o, 0x04), b_v(o, 1), b_s(o, 0), b_v(o, 255);
  memset(o->r + o->nr, 'p', 255), o->nr += 255, expect_body(o, 0, 1, "255-byte payload");
  b_u8(o, 0x05), b_v(o, 1), b_s(o, 0), b_v(o, 256);
  memset(o->r + o->nr, 'p', 256), o->nr += 256, expect_body(o, TMK_ETOOBIG, 0, "256-byte payload");
  b_u8(o, 0x0A), b_v(o, 1), b_v(o, 1025);
  memset(o->r + o->nr, 't', 1025), o->nr += 1025, expect_body(o, TMK_ETOOBIG, 0, "thread name 1025");
  b_u8(o, 0x0D), b_v(o, 32), b_str(o, "x", 1), expect_body(o, TMK_ERANGE, 0, "team bit 32");
  b_u8(o, 0x0D), b_v(o, 31), b_str(o, "x", 1), expect_body(o, 0, 1, "team bit 31");
  b_u8(o, 0x02), b_v(o, 0x100000000ull), expect_body(o, TMK_ERANGE, 0, "thread 2^32");
  b_u8(o, 0x02), b_v(o, 0xFFFFFFFFu), expect_body(o, 0, 0, "thread 2^32-1");
  b_u8(o, 0x21), b_v(o, 0x100000000ull), n_gap(o, 0), n_fresh(o, 1);
  expect_body(o, TMK_ERANGE, 0, "leaf site 2^32");
  /* varints inside the record stream */
  frame(o), b_u8(o, 0x0B), b_v(o, 0);
  for (k = 0; k < 10; k++) b_u8(o, 0xFF);
  b_u8(o, 0x01), expect_body(o, TMK_EVARINT, 1, "11-byte varint");
  frame(o), b_u8(o, 0x0B), b_v(o, 0), b_u8(o, 0x80), expect_body(o, TMK_ETRUNC, 1, "unterminated varint");
  free(o);
}

/* The end of the number stream (§5.0): when the record stream has been read, every byte of the
 * number stream must have been taken and at most 7 bits, all zero, may be left (ECORRUPT
 * otherwise); a number that runs past its front is ETRUNC. */
static void test_number_stream_end(void** state) {
  buf* o = (buf*)calloc(1, sizeof *o);
  nstream* w = (nstream*)malloc(sizeof *w);
  uint8_t num[64 + 16], body[128];
  unsigned pads = 0, j;
  size_t nb, n, extra;
  pt_decoded d;
  (void)state;
  assert_true(o && w);
  b_u8(o, 0x80), n_gap(o, 1), n_fresh(o, 2), expect_body(o, 0, 1, "one leaf");
  b_u8(o, 0x80), n_gap(o, 1), n_fresh(o, 2), n_gap(o, 7);
  expect_body(o, TMK_ECORRUPT, 1, "a number left over");
  /* gap 200 warms the gap context to 16 * 8 = 128 (k = 7), so a zero costs 8 zero bits */
  b_u8(o, 0x80), n_gap(o, 200), n_fresh(o, 2), n_gap(o, 0);
  expect_body(o, TMK_ECORRUPT, 1, "a zero left over (8 zero bits)");
  frame(o), n_gap(o, 7), expect_body(o, TMK_ECORRUPT, 1, "numbers but no zones");
  /* gap 8 (cold: escape, 6 + 6 + 4 bits) fills two bytes, so no padding bit can pose as a code */
  b_u8(o, 0x80), n_gap(o, 8), expect_body(o, TMK_ETRUNC, 0, "a leaf without its duration");
  b_u8(o, 0x20), expect_body(o, TMK_ENEST, 0, "close with nothing open, no numbers");
  b_u8(o, 0x40), b_u8(o, 0x20), expect_body(o, TMK_ETRUNC, 0, "an open without its gap");

  /* One leaf whose gap (cold: k = 0) takes g + 1 bits (g < 6) or 12 + bitlen (escape), and its
   * duration 3 (fresh, cold) 4 bits, so the padding in the stream's first byte takes every length
   * 0..7. */
  for (j = 0; j < 64 + 6; j++) {
    uint64_t g = j < 64 ? (uint64_t)1 << j : (uint64_t)(j - 64);
    unsigned pad;
    size_t k;
    b_reset(o);
    b_u8(o, 0x80), n_gap(o, g), n_fresh(o, 3);
    num_stream(o, o->nnum, w);
    nb = ns_bytes(w, num + 16);
    pad = (unsigned)(8 * nb - w->nbit);
    pads |= 1u << pad;
    n = assemble(body, 1, nb, o->r, 1, num + 16, nb);
    assert_int_equal(decode_body(&d, body, n), 0);
    assert_int_equal(d.n, 1);
    expect_zone(&d.recs[0], 0, 1, 0, 1000 + g, 3);
    pt_decoded_free(&d);
    /* any padding bit set */
    for (k = 0; k < pad; k++) {
      uint8_t save = num[16];
      num[16] = (uint8_t)(num[16] | (0x80u >> k));
      n = assemble(body, 1, nb, o->r, 1, num + 16, nb);
      expect_raw(body, n, TMK_ECORRUPT, 1, "a padding bit set");
      num[16] = save;
    }
    /* whole zero bytes left over in front (the decoder may have them in hand or not yet) */
    for (extra = 1; extra <= 16; extra++) {
      memset(num + 16 - extra, 0, extra);
      n = assemble(body, 1, nb + extra, o->r, 1, num + 16 - extra, nb + extra);
      expect_raw(body, n, TMK_ECORRUPT, 1, "zero bytes left over");
    }
    /* a non-zero byte left over */
    num[15] = 0x01;
    n = assemble(body, 1, nb + 1, o->r, 1, num + 15, nb + 1);
    expect_raw(body, n, TMK_ECORRUPT, 1, "a byte left over");
    /* the first byte missing: the duration code runs past the front of the stream */
    n = assemble(body, 1, nb - 1, o->r, 1, num + 17, nb - 1);
    expect_raw(body, n, TMK_ETRUNC, 0, "the stream's first byte missing");
    /* bytes after the declared streams, or lengths that claim more than the body */
    n = assemble(body, 1, nb, o->r, 1, num + 16, nb);
    body[n] = 0;
    expect_raw(body, n + 1, TMK_ECORRUPT, 0, "a byte after the number stream");
    n = assemble(body, 1, nb - 1, o->r, 1, num + 16, nb);
    expect_raw(body, n, TMK_ECORRUPT, 0, "N one short");
    n = assemble(body, 1, nb + 1, o->r, 1, num + 16, nb);
    expect_raw(body, n, TMK_ETRUNC, 0, "N one long");
    n = assemble(body, 2, nb, o->r, 1, num + 16, nb);
    expect_raw(body, n, TMK_ETRUNC, 0, "A one long");
  }
  assert_int_equal(pads, 0xFF);

  /* escapes of 64-bit numbers decode exactly: gap 2^64 - 1 (start 999), code 2^64 - 1 (fresh:
   * the duration itself), then the same site again at 998, code 2^64 - 2 (duration context, cold
   * so escaped: 2^64 - 1 + unzigzag = 2^64 - 1 + 2^63 - 1 = 2^63 - 2 modulo 2^64) */
  b_reset(o);
  b_u8(o, 0x80), n_put(o, CX_GAP, ~(uint64_t)0), n_put(o, CX_FRESH, ~(uint64_t)0);
  b_u8(o, 0x80), n_put(o, CX_GAP, 0), n_put(o, CX_DUR, ~(uint64_t)1);
  num_stream(o, o->nnum, w);
  assert_int_equal(w->esc64, 3);
  n = body_bytes(o, o->nr, o->nnum, body);
  assert_int_equal(decode_body(&d, body, n), 0);
  assert_int_equal(d.n, 2);
  expect_zone(&d.recs[0], 0, 1, 0, 999, ~(uint64_t)0);
  expect_zone(&d.recs[1], 0, 1, 0, 998, ((uint64_t)1 << 63) - 2);
  pt_decoded_free(&d);
  /* an escape whose value runs past the front: gap 2^64 - 1 with its last value bit missing */
  b_reset(o);
  b_u8(o, 0x80), n_put(o, CX_GAP, ~(uint64_t)0);
  num_stream(o, o->nnum, w);
  assert_int_equal(w->nbit, 76);
  w->nbit = 72; /* 9 bytes: 6 + 6 + 60 bits of the code */
  nb = ns_bytes(w, num);
  n = assemble(body, 1, nb, o->r, 1, num, nb);
  expect_raw(body, n, TMK_ETRUNC, 0, "an escape cut in its value");
  /* an escape cut in its length field: 111111 and 2 bits */
  body[0] = 1, body[1] = 1, body[2] = 0x80, body[3] = 0xFF;
  expect_raw(body, 4, TMK_ETRUNC, 0, "an escape cut in its length");
  /* 24 one bits: the unary run of the gap's code reaches the escape, then 63 as the length and
   * a value of 64 bits, which are not there */
  body[0] = 1, body[1] = 3, body[2] = 0x80, body[3] = body[4] = body[5] = 0xFF;
  expect_raw(body, 6, TMK_ETRUNC, 0, "an escape of 64 bits with 12 there");
  free(o);
  free(w);
}

/* ---- the adaptive code across its range ------------------------------------------------------ */

typedef struct zexp {
  uint64_t start, dur;
  uint32_t site, depth, thread;
} zexp;

/* A number whose bit length is drawn from the range of its phase; a context moves to the next
 * phase every 40 numbers. Zeros bring its Rice parameter to 0, two phases of 64-bit numbers take
 * it to 63, and the rest walk it back down and up through the middle. */
static uint64_t sweep_value(uint64_t* rng, size_t phase) {
  static const unsigned lo[] = {0, 64, 64, 0, 1, 4, 9, 20, 36, 54, 0, 58};
  static const unsigned hi[] = {0, 64, 64, 2, 3, 8, 14, 30, 48, 64, 64, 64};
  size_t p = phase % (sizeof lo / sizeof lo[0]);
  unsigned bl = lo[p] + (unsigned)(pt_rand(rng) % (hi[p] - lo[p] + 1));
  if (bl == 0) return 0;
  return (pt_rand(rng) >> (64 - bl)) | ((uint64_t)1 << (bl - 1));
}

/* The predictor (§5.3) as the test models it: two tables of 32 slots, empty at the start of
 * every packet (THREAD does not reset them). */
typedef struct pmodel {
  uint64_t val[2][TMK_PROTO_PREDICT_SLOTS];
  uint32_t site[2][TMK_PROTO_PREDICT_SLOTS];
  int used[2][TMK_PROTO_PREDICT_SLOTS];
} pmodel;

/* The context of the next number of `site` in table t (0 leaf durations, 1 parent tails). */
static int pm_ctx(const pmodel* m, int t, uint32_t site) {
  unsigned slot = site % TMK_PROTO_PREDICT_SLOTS;
  int hit = m->used[t][slot] && m->site[t][slot] == site;
  return t ? (hit ? CX_CLOSE : CX_CFRESH) : (hit ? CX_DUR : CX_FRESH);
}

/* The value that `code` in context cx stands for: the prediction plus the unzigzagged difference,
 * or the code itself when fresh. The slot then holds the site and the value. */
static uint64_t pm_value(pmodel* m, int t, uint32_t site, int cx, uint64_t code) {
  unsigned slot = site % TMK_PROTO_PREDICT_SLOTS;
  uint64_t v = cx == CX_DUR || cx == CX_CLOSE ? m->val[t][slot] + unzz(code) : code;
  m->used[t][slot] = 1, m->site[t][slot] = site, m->val[t][slot] = v;
  return v;
}

/* Random zone trees (OPEN / CLOSE / LEAF, short and long tags, THREAD and AT between trees) whose
 * numbers sweep the whole range, coded by the test with each number's context taken from its own
 * model of the predictor (§5.3: leaf durations in table 0, CLOSE tails in table 1 keyed by the
 * popped zone's site; per packet; THREAD does not reset it). Each context's phase carries on from
 * one packet to the next while its state starts cold, so the cold starts meet numbers of every
 * size. Every zone must come out exactly as the model says. */
static void test_number_coding_sweep(void** state) {
  buf* o = (buf*)calloc(1, sizeof *o);
  nstream* w = (nstream*)malloc(sizeof *w);
  zexp* z = (zexp*)malloc(2048 * sizeof *z);
  uint8_t* pkt = (uint8_t*)malloc(TMK_PROTO_MAX_PACKET);
  pmodel* pm = (pmodel*)malloc(sizeof *pm);
  uint64_t rng = 0x5EED5EEDull, kall[CX_COUNT] = {0, 0, 0, 0, 0};
  unsigned qall = 0, coldall[CX_COUNT] = {0, 0, 0, 0, 0};
  size_t esc64 = 0, warmed[CX_COUNT] = {0, 0, 0, 0, 0}, cnt[CX_COUNT] = {0, 0, 0, 0, 0};
  int c, packet;
  (void)state;
  assert_true(o && w && z && pkt && pm);
  for (packet = 0; packet < 12; packet++) {
    uint64_t base = pt_rand(&rng), cursor = base, ostart[TMK_PROTO_MAX_OPEN];
    uint32_t osite[TMK_PROTO_MAX_OPEN], thread = 0, root = 0;
    size_t nz = 0, op, i, h, n;
    unsigned nopen = 0;
    pt_decoded d;
    memset(pm, 0, sizeof *pm);
    b_reset(o);
    for (op = 0; op < 1200 || nopen > 0; op++) {
      unsigned r = (unsigned)(pt_rand(&rng) % 16);
      if (op >= 1200) r = 2; /* close what is still open */
      if (r < 2 && nopen < TMK_PROTO_MAX_OPEN) { /* OPEN; sites 1, 33, 65 and 97 share a slot */
        uint32_t site = 1 + (uint32_t)(pt_rand(&rng) % 100);
        uint64_t gap = sweep_value(&rng, cnt[CX_GAP]++ / 40);
        if (site <= 64 && (r & 1)) {
          b_u8(o, 0x3F + site);
        } else {
          b_u8(o, 0x22), b_v(o, site);
        }
        n_gap(o, gap);
        osite[nopen] = site;
        ostart[nopen++] = cursor = cursor + gap;
      } else if (r < 4 && nopen > 0) { /* CLOSE: the tail, predicted from the popped site or not */
        uint32_t site = osite[nopen - 1];
        int cx = pm_ctx(pm, 1, site);
        uint64_t code = sweep_value(&rng, cnt[cx]++ / 40), tail = pm_value(pm, 1, site, cx, code);
        b_u8(o, 0x20), n_put(o, cx, code);
        cursor += tail;
        nopen--;
        z[nz].start = ostart[nopen], z[nz].dur = cursor - ostart[nopen];
        z[nz].site = site, z[nz].depth = root + nopen, z[nz++].thread = thread;
      } else if (r == 4 && nopen == 0) { /* THREAD or AT between trees */
        if (pt_rand(&rng) & 1) {
          thread = (uint32_t)(pt_rand(&rng) % 4);
          b_u8(o, 0x02), b_v(o, thread);
          cursor = base, root = 0;
        } else {
          uint64_t delta = sweep_value(&rng, op / 40);
          root = (uint32_t)(pt_rand(&rng) % 5);
          b_u8(o, 0x03), b_v(o, root), b_s(o, (int64_t)delta);
          cursor += delta;
        }
      } else { /* LEAF; sites 1 and 33, 2 and 34 ... 16 and 48 share a predictor slot */
        uint32_t site = 1 + (uint32_t)(pt_rand(&rng) % 48);
        int cx = pm_ctx(pm, 0, site);
        uint64_t gap = sweep_value(&rng, cnt[CX_GAP]++ / 40);
        uint64_t code = sweep_value(&rng, cnt[cx]++ / 40), dur = pm_value(pm, 0, site, cx, code);
        if (site <= 128 && (r & 1)) {
          b_u8(o, 0x7F + site);
        } else {
          b_u8(o, 0x21), b_v(o, site);
        }
        n_gap(o, gap);
        n_put(o, cx, code);
        z[nz].start = cursor + gap, z[nz].dur = dur;
        z[nz].site = site, z[nz].depth = root + nopen, z[nz].thread = thread;
        cursor = z[nz].start + z[nz].dur;
        nz++;
      }
      assert_true(nz < 2048 && o->nnum < MAX_NUMS - 4 && o->nr < sizeof o->r - 16);
    }
    num_stream(o, o->nnum, w);
    for (c = 0; c < CX_COUNT; c++) {
      kall[c] |= w->kseen[c];
      coldall[c] |= w->cold[c];
      warmed[c] += w->warmed[c];
    }
    qall |= w->qseen;
    esc64 += w->esc64;
    h = pt_header(pkt, 0, TMK_PKT_DATA, 7, (uint64_t)packet, base, 0);
    n = h + body_bytes(o, o->nr, o->nnum, pkt + h);
    assert_true(n <= TMK_PROTO_MAX_PACKET);
    pt_decode(&d, pkt, n);
    if (d.rc != 0)
      fail_msg("sweep packet %d: %s after %u records", packet, tmk_err_name(d.rc), (unsigned)d.n);
    assert_int_equal(d.n, nz);
    for (i = 0; i < nz; i++)
      expect_zone(&d.recs[i], z[i].thread, z[i].site, z[i].depth, z[i].start, z[i].dur);
    pt_decoded_free(&d);
  }
  /* what the sweep covered: every unary length and the escape, 64-bit escapes, and in every
   * context the Rice parameters 0 and 63 and at least 56 of the 64; in every context cold codes
   * of zeros (which leave it cold), unary codes and escapes, and a cold state set by a non-zero
   * number in most of the 12 packets */
  assert_int_equal(qall, 0x7F);
  assert_true(esc64 > 0);
  for (c = 0; c < CX_COUNT; c++) {
    unsigned k, used = 0;
    for (k = 0; k < 64; k++) used += (unsigned)((kall[c] >> k) & 1);
    if (!(kall[c] & 1) || !(kall[c] >> 63) || used < 56)
      fail_msg("context %d: Rice parameters used %016llx", c, (unsigned long long)kall[c]);
    if (!(coldall[c] & 1) || !(coldall[c] & 0x3E) || !(coldall[c] & 0x40) || warmed[c] < 8)
      fail_msg("context %d: cold codes %02x, warmed %u times", c, coldall[c], (unsigned)warmed[c]);
  }
  free(o);
  free(w);
  free(z);
  free(pkt);
  free(pm);
}

static void test_bad_nesting(void** state) {
  buf* o = (buf*)calloc(1, sizeof *o);
  int k;
  (void)state;
  assert_non_null(o);
  b_u8(o, 0x20), n_cfresh(o, 0), expect_body(o, TMK_ENEST, 0, "close with nothing open");
  b_u8(o, 0x40), n_gap(o, 0), expect_body(o, TMK_ENEST, 0, "body ends with a zone open");
  b_u8(o, 0x40), n_gap(o, 0), b_u8(o, 0x80), n_gap(o, 0), n_fresh(o, 3);
  expect_body(o, TMK_ENEST, 1, "open zone after a leaf");
  b_u8(o, 0x40), n_gap(o, 0), b_u8(o, 0x02), b_v(o, 1), b_u8(o, 0x20), n_cfresh(o, 0);
  expect_body(o, TMK_ENEST, 0, "thread while open");
  b_u8(o, 0x40), n_gap(o, 0), b_u8(o, 0x03), b_v(o, 0), b_s(o, 0), b_u8(o, 0x20), n_cfresh(o, 0);
  expect_body(o, TMK_ENEST, 0, "AT while open");
  b_u8(o, 0x40), n_gap(o, 0), b_u8(o, 0x20), n_cfresh(o, 0), b_u8(o, 0x20), n_cfresh(o, 0);
  expect_body(o, TMK_ENEST, 1, "one close too many");
  for (k = 0; k < TMK_PROTO_MAX_OPEN; k++) b_u8(o, 0x40 + (unsigned)(k % 64)), n_gap(o, 1);
  /* the closes pop sites 32 .. 1, each alone in its slot of table 1: all close-fresh */
  for (k = 0; k < TMK_PROTO_MAX_OPEN; k++) b_u8(o, 0x20), n_cfresh(o, 1);
  expect_body(o, 0, TMK_PROTO_MAX_OPEN, "32 open");
  for (k = 0; k < TMK_PROTO_MAX_OPEN + 1; k++) b_u8(o, 0x40), n_gap(o, 1);
  b_u8(o, 0x20), n_cfresh(o, 1); /* site 1 every time: then predicted, tail 1 again */
  for (k = 1; k < TMK_PROTO_MAX_OPEN + 1; k++) b_u8(o, 0x20), n_close(o, 0);
  expect_body(o, TMK_ENEST, 0, "33 open");
  /* events are fine while a zone is open */
  b_u8(o, 0x40), n_gap(o, 0), frame(o), b_u8(o, 0x20), n_cfresh(o, 0);
  expect_body(o, 0, 2, "event inside an open zone");
  free(o);
}

/* A reader that failed stays failed. */
static void test_failed_reader_stays_failed(void** state) {
  uint8_t p[64];
  size_t n = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 0, 0);
  tmk_proto_reader r;
  tmk_proto_record rec;
  (void)state;
  p[n++] = 7, p[n++] = 0; /* A = 7, N = 0 */
  p[n++] = 0x06, p[n++] = 0, p[n++] = 0;
  p[n++] = 0x0E;
  p[n++] = 0x06, p[n++] = 0, p[n++] = 0;
  assert_int_equal(tmk_proto_open(&r, p, n, NULL, 0), 0);
  assert_int_equal(tmk_proto_next(&r, &rec), 1);
  assert_int_equal(tmk_proto_next(&r, &rec), TMK_ERECORD);
  assert_true(tmk_proto_next(&r, &rec) < 0);
  assert_true(tmk_proto_next(&r, &rec) < 0);
}

/* ---- LZ4 bodies (§2 Compression) -------------------------------------------------------------- */

static size_t lz4_packet(uint8_t* p, uint32_t raw_len, const uint8_t* block, size_t block_len) {
  size_t n = pt_header(p, TMK_PKT_F_LZ4, TMK_PKT_DATA, 5, 0, 777, raw_len);
  memcpy(p + n, block, block_len);
  return n + block_len;
}

static void test_lz4_hand_made(void** state) {
  /* one LZ4 sequence of literals only (token = count << 4): a body (A, N = 0, records) with one
   * FRAME (site 0, dt 0), and one with two FRAMEs, the second 1 tick later */
  static const uint8_t one[] = {0x50, 0x03, 0x00, 0x06, 0x00, 0x00};
  static const uint8_t two[] = {0x80, 0x06, 0x00, 0x06, 0x00, 0x00, 0x06, 0x00, 0x02};
  static const uint8_t garbage[] = {0xF0, 0xFF, 0xFF, 0xFF, 0x06};
  static const uint8_t bad_offset[] = {0x14, 0x06, 0x09, 0x00, 0x30, 0x06, 0x00, 0x00};
  uint8_t p[256];
  size_t n;
  int have = tmk_proto_lz4_state_size() > 0;
  pt_decoded d;
  tmk_proto_header h;
  (void)state;
  n = lz4_packet(p, 5, one, sizeof one);
  assert_int_equal(tmk_proto_parse_header(p, n, &h), (int)(n - sizeof one));
  assert_int_equal(h.raw_len, 5);
  pt_decode(&d, p, n);
  if (have) {
    assert_int_equal(d.rc, 0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.recs[0].type, TMK_REC_FRAME);
    assert_true(d.recs[0].u.frame.time == 777);
  } else {
    assert_int_equal(d.rc, TMK_ENOLZ4);
  }
  pt_decoded_free(&d);
  n = lz4_packet(p, 8, two, sizeof two);
  pt_decode(&d, p, n);
  if (have) {
    assert_int_equal(d.rc, 0);
    assert_int_equal(d.n, 2);
    assert_true(d.recs[1].u.frame.time == 778);
  } else {
    assert_int_equal(d.rc, TMK_ENOLZ4);
  }
  pt_decoded_free(&d);
  /* raw length that disagrees with the block */
  n = lz4_packet(p, 6, one, sizeof one);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  n = lz4_packet(p, 4, one, sizeof one);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  n = lz4_packet(p, TMK_PROTO_MAX_BODY, one, sizeof one);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  /* broken blocks */
  n = lz4_packet(p, 100, garbage, sizeof garbage);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  n = lz4_packet(p, 12, bad_offset, sizeof bad_offset);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  n = lz4_packet(p, 5, one, 0); /* no body at all */
  assert_true(open_rc(p, n) < 0);
  /* raw length 0 is outside 1..65536 */
  n = lz4_packet(p, 0, one, sizeof one);
  assert_true(open_rc(p, n) < 0);
}

/* A declared size above 65536 is refused before any work, in every build. */
static void test_lz4_bomb(void** state) {
  static const uint8_t one[] = {0x40, 0x03, 0x06, 0x00, 0x00};
  uint8_t p[256];
  size_t n;
  tmk_proto_header h;
  int rc;
  (void)state;
  n = lz4_packet(p, TMK_PROTO_MAX_BODY + 1, one, sizeof one);
  rc = tmk_proto_parse_header(p, n, &h);
  assert_int_equal(rc, TMK_EBOMB);
  assert_int_equal(open_rc(p, n), TMK_EBOMB);
  n = pt_header(p, TMK_PKT_F_LZ4, TMK_PKT_DATA, 5, 0, 777, 0);
  n -= 1; /* replace raw_len 0 by 2^40 */
  n += pt_varint(p + n, 1ull << 40);
  memcpy(p + n, one, sizeof one);
  n += sizeof one;
  assert_int_equal(open_rc(p, n), TMK_EBOMB);
}

/* A real compressed packet from the writer: every prefix fails (ETRUNC in the header, ELZ4 in the
 * block), and a scratch buffer smaller than the declared size is refused. */
static void test_lz4_prefixes(void** state) {
  pt_enc* e;
  pt_decoded d;
  size_t len;
  int i;
  (void)state;
  if (tmk_proto_lz4_state_size() == 0) skip();
  e = pt_enc_new(1161, -1, 1);
  assert_non_null(e);
  for (i = 0; i < 60; i++) assert_int_equal(tmk_proto_put_plot_i(&e->w, 3, 1000 + 10 * (uint64_t)i, 5), 0);
  assert_true(pt_enc_finish(e, 1, 0) > 0);
  assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
  assert_true(d.hdr.flags & TMK_PKT_F_LZ4);
  assert_int_equal(d.n, 60);
  for (len = 0; len < (size_t)e->pkt_len; len++) {
    int rc = open_rc(e->pkt, len);
    int want = len < d.hdr.header_len ? TMK_ETRUNC : TMK_ELZ4;
    if (rc != want) fail_msg("prefix %u: got %s, want %s", (unsigned)len, tmk_err_name(rc), tmk_err_name(want));
  }
  {
    tmk_proto_reader r;
    uint8_t small[64];
    assert_true(tmk_proto_open(&r, e->pkt, (size_t)e->pkt_len, small, sizeof small) < 0);
    assert_true(tmk_proto_open(&r, e->pkt, (size_t)e->pkt_len, NULL, 0) < 0);
  }
  pt_decoded_free(&d);
  pt_enc_free(e);
}

/* The predictor's slots start empty (§5.3): the first leaf of site 0 in a packet is coded in the
 * fresh context even though slot 0 of table 0 has never been written (an empty slot is not "site
 * 0, duration 0"). Bytes worked out by hand from §5.0, records 80 21 00 (A = 3):
 *   LEAF site 1, gap 0:   gap, cold (k = 0): 0; a zero leaves the state 0
 *     duration 2^40:      fresh, cold (k = 0), 2^40 >> 0 >= 6: escape 111111, n - 1 = 40 as
 *                         000101, then 41 bits: 40 zeros and a one; fresh state 16 * 41 = 656
 *   LEAF site 0, gap 0:   gap, still cold: 0
 *     duration 50:        fresh, L = (656 + 12) >> 4 = 41, k = 40: q = 0, so 0, then the 40 low
 *                         bits of 50 (0100110 and 33 zeros)
 * 1 + 53 + 1 + 41 = 96 bits, no padding; from bit 0 the bytes are 7E 14 00 00 00 00 20 32 00 00
 * 00 00, stored backwards (N = 12). Had site 0 been taken as predicted (duration context, cold,
 * k = 0), the zero at bit 55 would read as duration 0 and 40 bits would be left over. */
static void test_site_zero_is_fresh(void** state) {
  static const uint8_t body[] = {0x03, 0x0C, 0x80, 0x21, 0x00, 0x00, 0x00, 0x00, 0x00,
                                 0x32, 0x20, 0x00, 0x00, 0x00, 0x00, 0x14, 0x7E};
  static const tmk_proto_zone z[2] = {{5000, 1ull << 40, 1, 0}, {5000 + (1ull << 40), 50, 0, 0}};
  uint8_t pkt[128];
  size_t n = pt_header(pkt, 0, TMK_PKT_DATA, 1, 0, 5000, 0);
  pt_decoded d;
  pt_enc* e;
  (void)state;
  memcpy(pkt + n, body, sizeof body);
  n += sizeof body;
  assert_int_equal(pt_decode(&d, pkt, n), 0);
  assert_int_equal(d.n, 2);
  expect_zone(&d.recs[0], 0, 1, 0, 5000, 1ull << 40);
  expect_zone(&d.recs[1], 0, 0, 0, 5000 + (1ull << 40), 50);
  pt_decoded_free(&d);
  /* and the writer produces exactly these bytes */
  e = pt_enc_new(1161, 0, 0);
  assert_non_null(e);
  assert_int_equal(tmk_proto_put_zones(&e->w, z, 2), 2);
  assert_int_equal(pt_enc_finish(e, 1, 0), (int)n);
  assert_memory_equal(e->pkt, pkt, n);
  pt_enc_free(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spec_packet),
      cmocka_unit_test(test_site_zero_is_fresh),
      cmocka_unit_test(test_pinned_bodies),
      cmocka_unit_test(test_every_prefix),
      cmocka_unit_test(test_record_stream_cuts),
      cmocka_unit_test(test_number_stream_cuts),
      cmocka_unit_test(test_number_stream_end),
      cmocka_unit_test(test_number_coding_sweep),
      cmocka_unit_test(test_bad_header),
      cmocka_unit_test(test_bad_records),
      cmocka_unit_test(test_bad_nesting),
      cmocka_unit_test(test_failed_reader_stays_failed),
      cmocka_unit_test(test_lz4_hand_made),
      cmocka_unit_test(test_lz4_bomb),
      cmocka_unit_test(test_lz4_prefixes),
  };
  return cmocka_run_group_tests_name("proto-decoder", tests, NULL, NULL);
}
