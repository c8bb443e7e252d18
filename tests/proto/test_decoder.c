/* test_decoder.c — the decoder against hand-assembled bytes written from docs/PROTOCOL.md (not
 * from the encoder), and against hostile input: every prefix of valid packets, corrupted headers
 * and bodies, and LZ4 bodies that lie about their size, each rejected with the right TMK_E* code. */
#include <stdlib.h>
#include <string.h>

#include "proto_util.h"
#include "tmk_proto.h"
#include "tmk_test.h"

/* ---- a packet assembled by hand (§2, §5) ---------------------------------------------------- */

/* A DATA body under construction: the record stream, the zone numbers (gaps, duration codes) in
 * the order the records need them, and after every record a mark saying where it ends, how many
 * numbers it has used, how many zones are open and how many records the decoder has reported. */
typedef struct mark_t {
  size_t rend, nnum;
  int open;
  size_t emitted;
} mark_t;

typedef struct buf {
  uint8_t r[4096];
  size_t nr;
  uint64_t num[256];
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
static void n_v(buf* o, uint64_t v) { o->num[o->nnum++] = v; }
static void n_s(buf* o, int64_t v) {
  uint64_t u = (uint64_t)v;
  n_v(o, (u << 1) ^ (v < 0 ? ~(uint64_t)0 : 0));
}
static void b_reset(buf* o) {
  o->nr = 0;
  o->nnum = 0;
  o->nmarks = 0;
}

/* Body = varint(rlen) | record stream[0, rlen) | numbers[0, nnum) written so that the first one
 * ends at the body's last byte (§5). Returns the body length; *num_at gets where numbers start. */
static size_t body_bytes(const buf* o, size_t rlen, size_t nnum, uint8_t* out, size_t* num_at) {
  size_t n = pt_varint(out, rlen), i;
  memcpy(out + n, o->r, rlen);
  n += rlen;
  if (num_at) *num_at = n;
  for (i = nnum; i > 0; i--) n += pt_varint(out + n, o->num[i - 1]);
  return n;
}

/* The reference body; base time 1000. f64 1.5 in the given byte order. */
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
  b_u8(o, 0x22), b_v(o, 1), n_v(o, 5), mark(o, 1, 2);           /* OPEN site 1 at 1005 */
  b_u8(o, 0x81), n_v(o, 3), n_s(o, 20), mark(o, 1, 3);          /* LEAF site 2 at 1008, 20 */
  b_u8(o, 0x81), n_v(o, 2), n_s(o, -1), mark(o, 1, 4);          /* LEAF site 2 at 1030, 20-1 */
  b_u8(o, 0x21), b_v(o, 34), n_v(o, 1), n_s(o, 7), mark(o, 1, 5); /* site 34 (slot 2): 0+7 */
  b_u8(o, 0x81), n_v(o, 0), n_s(o, 0), mark(o, 1, 6);   /* LEAF site 2 at 1057: slot holds 34 */
  b_u8(o, 0x20), n_v(o, 10), mark(o, 0, 7);             /* CLOSE at 1067: site 1, 62 */
  b_u8(o, 0x03), b_v(o, 2), b_s(o, -100), mark(o, 0, 7); /* AT depth 2, cursor 967 */
  b_u8(o, 0x40), n_v(o, 0), mark(o, 1, 7);              /* OPEN short site 1 at 967 */
  b_u8(o, 0xC0), n_v(o, 1), n_s(o, 4), mark(o, 1, 8);   /* LEAF short site 65 at 968, 4 */
  b_u8(o, 0x20), n_v(o, 0), mark(o, 0, 9);              /* CLOSE at 972: 5 */
  b_u8(o, 0x06), b_v(o, 0), b_s(o, 100), mark(o, 0, 10); /* FRAME 1100 */
  b_u8(o, 0x07), b_v(o, 3), b_s(o, -50), b_s(o, -2), mark(o, 0, 11); /* PLOT_I 1050 -2 */
  b_u8(o, 0x08), b_v(o, 4), b_s(o, 0);                  /* PLOT_D 1050 1.5 */
  b_bytes(o, big_endian ? d15_be : d15_le, 8), mark(o, 0, 12);
  b_u8(o, 0x09), b_v(o, 0), b_v(o, 2), b_v(o, 0x80000000u), b_s(o, 1), b_str(o, "hi", 2);
  mark(o, 0, 13);
  b_u8(o, 0x04), b_v(o, 5), b_s(o, 9), b_str(o, "\0\1", 2), mark(o, 0, 14); /* MARKER_BEGIN 1060 */
  b_u8(o, 0x05), b_v(o, 5), b_s(o, 40), b_str(o, "", 0), mark(o, 0, 15);    /* MARKER_END 1100 */
  b_u8(o, 0x0B), b_v(o, 3), b_v(o, 300), mark(o, 0, 16);                    /* DROPS */
  b_u8(o, 0x0C), b_v(o, 1234), b_v(o, 1700000000000000000ull), mark(o, 0, 17); /* CLOCK_SYNC */
  b_u8(o, 0x0D), b_v(o, 31), b_str(o, "render", 6), mark(o, 0, 18);          /* TEAM_NAME */
  b_u8(o, 0x02), b_v(o, 7), mark(o, 0, 18);           /* THREAD 7: cursors reset */
  b_u8(o, 0xFF), n_v(o, 0), n_s(o, 5), mark(o, 0, 19); /* LEAF short site 128 at 1000 */
  b_u8(o, 0x06), b_v(o, 9), b_s(o, 0), mark(o, 0, 20); /* FRAME site 9 at 1000 */
  /* a gap of 300 takes two bytes in the number stream, so a cut can land inside a number */
  b_u8(o, 0x80), n_v(o, 300), n_s(o, 6), mark(o, 0, 21); /* LEAF short site 1 at 1305, 6 */
}

/* Header (seq 42, base 1000) + body; returns the packet length, *num_at where numbers start. */
static size_t spec_packet(buf* o, int big_endian, uint8_t* pkt, size_t* num_at) {
  size_t h, n;
  spec_body(o, big_endian);
  h = pt_header(pkt, big_endian ? TMK_PKT_F_BIG_ENDIAN : 0, TMK_PKT_DATA, 0x1122334455667788ull, 42,
                1000, 0);
  n = body_bytes(o, o->nr, o->nnum, pkt + h, num_at);
  if (num_at) *num_at += h;
  return h + n;
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
    n = spec_packet(o, be, pkt, NULL);
    pt_decode(&d, pkt, n);
    check_spec_packet(&d, be);
    pt_decoded_free(&d);
  }
  free(o);
}

/* ---- truncation -------------------------------------------------------------------------------- */

static void format_all(const pt_decoded* d, char (*lines)[256], size_t n) {
  size_t i;
  for (i = 0; i < n && i < d->n; i++) tmk_proto_format_record(&d->recs[i], lines[i], 256);
}

/* Cut the reference packet at every length. Inside the header, or before the record stream's
 * declared end, open() says ETRUNC. Cutting into the number stream (which is read from the end)
 * loses its first numbers: a cut between two numbers leaves too few (ETRUNC), a cut inside one
 * leaves a last byte with the high bit set (ECORRUPT). Nothing else may come out. */
static void test_every_prefix(void** state) {
  buf* o = (buf*)malloc(sizeof *o);
  uint8_t pkt[4096];
  size_t len, full, num_at, i, hlen, bound[256], nb = 0;
  int be;
  (void)state;
  assert_non_null(o);
  for (be = 0; be < 2; be++) {
    full = spec_packet(o, be, pkt, &num_at);
    hlen = 17;
    /* number boundaries in memory order: the numbers are stored last-needed first */
    bound[nb = 0] = num_at;
    for (i = o->nnum; i > 0; i--) {
      uint8_t tmp[10];
      bound[nb + 1] = bound[nb] + pt_varint(tmp, o->num[i - 1]);
      nb++;
    }
    assert_int_equal(bound[nb], full);
    for (len = 0; len < full; len++) {
      pt_decoded d;
      tmk_proto_header h;
      int want;
      pt_decode(&d, pkt, len);
      if (len < num_at) {
        if (d.rc != TMK_ETRUNC || !d.failed_in_open)
          fail_msg("prefix %u (numbers at %u): got %s", (unsigned)len, (unsigned)num_at,
                   tmk_err_name(d.rc));
        assert_int_equal(tmk_proto_parse_header(pkt, len, &h), len < hlen ? TMK_ETRUNC : (int)hlen);
        pt_decoded_free(&d);
        continue;
      }
      want = TMK_ECORRUPT;
      for (i = 0; i <= nb; i++)
        if (bound[i] == len) want = TMK_ETRUNC;
      if (d.rc != want)
        fail_msg("prefix %u (numbers at %u): got %s, want %s", (unsigned)len, (unsigned)num_at,
                 tmk_err_name(d.rc), tmk_err_name(want));
      pt_decoded_free(&d);
    }
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
  n = spec_packet(o, 0, pkt, NULL);
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
    n = h + body_bytes(o, c, nnum, pkt + h, NULL);
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
  static const uint8_t bad_flags[] = {0x04, 0x08, 0x10, 0x80, 0x07, 0xFF};
  static const uint8_t bad_types[] = {0, 7, 8, 0x40, 0xFF};
  tmk_proto_header h;
  (void)state;
  assert_non_null(o);
  n = spec_packet(o, 0, good, NULL);
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
  /* the record stream's length runs past the body */
  n = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 0, 0);
  p[n++] = 5;
  p[n++] = 0x06, p[n++] = 0, p[n++] = 0;
  assert_int_equal(open_rc(p, n), TMK_ETRUNC);
  /* a DATA packet with no body at all has no record stream length */
  n = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 0, 0);
  assert_int_equal(open_rc(p, n), TMK_ETRUNC);
  free(o);
}

/* ---- corrupted bodies --------------------------------------------------------------------------- */

/* Decodes header(base 1000) + body built from o and returns the final code; resets o. */
static void expect_body(buf* o, int want, size_t want_recs, const char* what) {
  uint8_t* p = (uint8_t*)malloc(o->nr + 16 * o->nnum + 64);
  size_t n;
  pt_decoded d;
  assert_non_null(p);
  n = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 1000, 0);
  n += body_bytes(o, o->nr, o->nnum, p + n, NULL);
  pt_decode(&d, p, n);
  if (d.rc != want || d.n != want_recs)
    fail_msg("%s: got %s after %u records, want %s after %u", what, tmk_err_name(d.rc),
             (unsigned)d.n, tmk_err_name(want), (unsigned)want_recs);
  pt_decoded_free(&d);
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
  b_u8(o, 0x21), b_v(o, 0x100000000ull), n_v(o, 0), n_s(o, 1);
  expect_body(o, TMK_ERANGE, 0, "leaf site 2^32");
  /* varints inside the record stream */
  frame(o), b_u8(o, 0x0B), b_v(o, 0);
  for (k = 0; k < 10; k++) b_u8(o, 0xFF);
  b_u8(o, 0x01), expect_body(o, TMK_EVARINT, 1, "11-byte varint");
  frame(o), b_u8(o, 0x0B), b_v(o, 0), b_u8(o, 0x80), expect_body(o, TMK_ETRUNC, 1, "unterminated varint");
  free(o);
}

/* The number stream must be used up exactly (§5). */
static void test_bad_number_stream(void** state) {
  buf* o = (buf*)calloc(1, sizeof *o);
  uint8_t p[256];
  size_t n, h;
  pt_decoded d;
  int k;
  (void)state;
  assert_non_null(o);
  b_u8(o, 0x80), n_v(o, 1), n_s(o, 2), expect_body(o, 0, 1, "one leaf");
  b_u8(o, 0x80), n_v(o, 1), n_s(o, 2), n_v(o, 7), expect_body(o, TMK_ECORRUPT, 1, "a number left over");
  frame(o), n_v(o, 7), expect_body(o, TMK_ECORRUPT, 1, "numbers but no zones");
  b_u8(o, 0x80), n_v(o, 1), expect_body(o, TMK_ETRUNC, 0, "a leaf without its duration");
  b_u8(o, 0x20), expect_body(o, TMK_ENEST, 0, "close with nothing open, no numbers");
  /* the body's last byte has its high bit set */
  h = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 0, 0);
  n = h;
  p[n++] = 1, p[n++] = 0x80, p[n++] = 0x02, p[n++] = 0x81;
  pt_decode(&d, p, n);
  assert_int_equal(d.rc, TMK_ECORRUPT);
  pt_decoded_free(&d);
  /* a number of 11 bytes read backwards */
  n = h;
  p[n++] = 1, p[n++] = 0x80;
  p[n++] = 0x00; /* duration code 0 */
  for (k = 0; k < 10; k++) p[n++] = 0x80;
  p[n - 1] = 0x00; /* gap: nine 0x80 then 0x00 is a valid 10-byte number */
  pt_decode(&d, p, n);
  /* numbers from the back: gap = 10-byte encoding of 0, then the duration code (1 byte) */
  assert_int_equal(d.rc, 0);
  assert_int_equal(d.n, 1);
  pt_decoded_free(&d);
  n = h;
  p[n++] = 1, p[n++] = 0x80;
  p[n++] = 0x00;
  for (k = 0; k < 11; k++) p[n++] = 0x80;
  p[n - 1] = 0x00;
  pt_decode(&d, p, n);
  assert_int_equal(d.rc, TMK_EVARINT);
  pt_decoded_free(&d);
  free(o);
}

static void test_bad_nesting(void** state) {
  buf* o = (buf*)calloc(1, sizeof *o);
  int k;
  (void)state;
  assert_non_null(o);
  b_u8(o, 0x20), n_v(o, 0), expect_body(o, TMK_ENEST, 0, "close with nothing open");
  b_u8(o, 0x40), n_v(o, 0), expect_body(o, TMK_ENEST, 0, "body ends with a zone open");
  b_u8(o, 0x40), n_v(o, 0), b_u8(o, 0x80), n_v(o, 0), n_s(o, 3);
  expect_body(o, TMK_ENEST, 1, "open zone after a leaf");
  b_u8(o, 0x40), n_v(o, 0), b_u8(o, 0x02), b_v(o, 1), b_u8(o, 0x20), n_v(o, 0);
  expect_body(o, TMK_ENEST, 0, "thread while open");
  b_u8(o, 0x40), n_v(o, 0), b_u8(o, 0x03), b_v(o, 0), b_s(o, 0), b_u8(o, 0x20), n_v(o, 0);
  expect_body(o, TMK_ENEST, 0, "AT while open");
  b_u8(o, 0x40), n_v(o, 0), b_u8(o, 0x20), n_v(o, 0), b_u8(o, 0x20), n_v(o, 0);
  expect_body(o, TMK_ENEST, 1, "one close too many");
  for (k = 0; k < TMK_PROTO_MAX_OPEN; k++) b_u8(o, 0x40 + (k % 64)), n_v(o, 1);
  for (k = 0; k < TMK_PROTO_MAX_OPEN; k++) b_u8(o, 0x20), n_v(o, 1);
  expect_body(o, 0, TMK_PROTO_MAX_OPEN, "32 open");
  for (k = 0; k < TMK_PROTO_MAX_OPEN + 1; k++) b_u8(o, 0x40), n_v(o, 1);
  for (k = 0; k < TMK_PROTO_MAX_OPEN + 1; k++) b_u8(o, 0x20), n_v(o, 1);
  expect_body(o, TMK_ENEST, 0, "33 open");
  /* events are fine while a zone is open */
  b_u8(o, 0x40), n_v(o, 0), frame(o), b_u8(o, 0x20), n_v(o, 0);
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
  p[n++] = 7;
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
  /* one LZ4 sequence of literals only (token = count << 4): a body with one FRAME (site 0, dt 0),
   * and one with two FRAMEs, the second 1 tick later */
  static const uint8_t one[] = {0x40, 0x03, 0x06, 0x00, 0x00};
  static const uint8_t two[] = {0x70, 0x06, 0x06, 0x00, 0x00, 0x06, 0x00, 0x02};
  static const uint8_t garbage[] = {0xF0, 0xFF, 0xFF, 0xFF, 0x06};
  static const uint8_t bad_offset[] = {0x14, 0x06, 0x09, 0x00, 0x30, 0x06, 0x00, 0x00};
  uint8_t p[256];
  size_t n;
  int have = tmk_proto_lz4_state_size() > 0;
  pt_decoded d;
  tmk_proto_header h;
  (void)state;
  n = lz4_packet(p, 4, one, sizeof one);
  assert_int_equal(tmk_proto_parse_header(p, n, &h), (int)(n - sizeof one));
  assert_int_equal(h.raw_len, 4);
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
  n = lz4_packet(p, 7, two, sizeof two);
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
  n = lz4_packet(p, 5, one, sizeof one);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  n = lz4_packet(p, 3, one, sizeof one);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  n = lz4_packet(p, TMK_PROTO_MAX_BODY, one, sizeof one);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  /* broken blocks */
  n = lz4_packet(p, 100, garbage, sizeof garbage);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  n = lz4_packet(p, 12, bad_offset, sizeof bad_offset);
  assert_int_equal(open_rc(p, n), have ? TMK_ELZ4 : TMK_ENOLZ4);
  n = lz4_packet(p, 4, one, 0); /* no body at all */
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spec_packet),      cmocka_unit_test(test_every_prefix),
      cmocka_unit_test(test_record_stream_cuts), cmocka_unit_test(test_bad_number_stream),
      cmocka_unit_test(test_bad_header),       cmocka_unit_test(test_bad_records),
      cmocka_unit_test(test_bad_nesting),      cmocka_unit_test(test_failed_reader_stays_failed),
      cmocka_unit_test(test_lz4_hand_made),    cmocka_unit_test(test_lz4_bomb),
      cmocka_unit_test(test_lz4_prefixes),
  };
  return cmocka_run_group_tests_name("proto-decoder", tests, NULL, NULL);
}
