/* test_edges.c — pins the answers docs/PROTOCOL.md gives where an independent decoder would
 * otherwise have to guess: field widths (§3.5), records handed out before an error (§5), the cold
 * state rule and unchecked escapes (§5.0), THREAD_NAME and CLOCK_SYNC (§5.2, §5.10), unknown
 * DROPS reasons (§5.9), and control packets: byte order, LZ4, trailing bytes, BYE (§2, §6).
 * Packets are assembled by hand. Numbers are all 0 where zones need them: every context then
 * stays cold and each number is one 0 bit, so the number stream is ceil(count / 8) zero bytes. */
#include <stdlib.h>
#include <string.h>

#include "proto_util.h"
#include "tmk_proto.h"
#include "tmk_test.h"

typedef struct rec_buf {
  uint8_t r[512];
  size_t n;
  size_t zero_numbers; /* numbers of value 0 the records use */
} rec_buf;

static void r_u8(rec_buf* b, unsigned v) { b->r[b->n++] = (uint8_t)v; }
static void r_v(rec_buf* b, uint64_t v) { b->n += pt_varint(b->r + b->n, v); }
static void r_s(rec_buf* b, int64_t v) { b->n += pt_svarint(b->r + b->n, v); }
static void r_str(rec_buf* b, const char* s) {
  size_t len = strlen(s);
  r_v(b, len);
  memcpy(b->r + b->n, s, len);
  b->n += len;
}

/* DATA packet, base 1000: header | A | N | records | the zero numbers. Returns its length. */
static size_t data_packet(uint8_t* p, const rec_buf* b) {
  size_t nb = (b->zero_numbers + 7) / 8, n = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 1000, 0);
  n += pt_varint(p + n, b->n);
  n += pt_varint(p + n, nb);
  memcpy(p + n, b->r, b->n);
  n += b->n;
  memset(p + n, 0, nb);
  return n + nb;
}

/* Decodes a one-off body and checks the final code and the number of records before it. */
static void expect(const rec_buf* b, int want, size_t want_recs, const char* what) {
  uint8_t p[1024];
  pt_decoded d;
  pt_decode(&d, p, data_packet(p, b));
  if (d.rc != want || d.n != want_recs)
    fail_msg("%s: got %s after %u records, want %s after %u", what, tmk_err_name(d.rc),
             (unsigned)d.n, tmk_err_name(want), (unsigned)want_recs);
  pt_decoded_free(&d);
}

/* §3.5: every 32-bit field takes 2^32 - 1 and refuses 2^32. */
static void test_field_widths(void** state) {
  const uint64_t max = 0xFFFFFFFFull, over = 0x100000000ull;
  int i;
  (void)state;
  for (i = 0; i < 2; i++) {
    uint64_t v = i ? over : max;
    int want = i ? TMK_ERANGE : 0;
    rec_buf b;
    size_t k;
    struct {
      const char* what;
      int kind;
    } cases[] = {{"SITE line", 0},       {"SITE verbosity", 1}, {"MESSAGE verbosity", 2},
                 {"MESSAGE site", 3},    {"FRAME site", 4},     {"PLOT site", 5},
                 {"MARKER site", 6},     {"THREAD_NAME thread", 7}, {"DROPS reason", 8},
                 {"AT depth", 9},        {"THREAD", 10},        {"long LEAF site", 11},
                 {"long OPEN site", 12}};
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      memset(&b, 0, sizeof b);
      switch (cases[k].kind) {
        case 0: r_u8(&b, 0x01), r_v(&b, 1), r_v(&b, 0), r_v(&b, 3), r_v(&b, 1), r_v(&b, 0);
                r_v(&b, v), r_str(&b, "n"), r_str(&b, "f"); break;
        case 1: r_u8(&b, 0x01), r_v(&b, 1), r_v(&b, 0), r_v(&b, 3), r_v(&b, v), r_v(&b, 0);
                r_v(&b, 1), r_str(&b, "n"), r_str(&b, "f"); break;
        case 2: r_u8(&b, 0x09), r_v(&b, 0), r_v(&b, 3), r_v(&b, v), r_s(&b, 0), r_str(&b, "m"); break;
        case 3: r_u8(&b, 0x09), r_v(&b, v), r_v(&b, 3), r_v(&b, 1), r_s(&b, 0), r_str(&b, "m"); break;
        case 4: r_u8(&b, 0x06), r_v(&b, v), r_s(&b, 0); break;
        case 5: r_u8(&b, 0x07), r_v(&b, v), r_s(&b, 0), r_s(&b, 1); break;
        case 6: r_u8(&b, 0x04), r_v(&b, v), r_s(&b, 0), r_str(&b, ""); break;
        case 7: r_u8(&b, 0x0A), r_v(&b, v), r_str(&b, "t"); break;
        case 8: r_u8(&b, 0x0B), r_v(&b, v), r_v(&b, 1); break;
        case 9: r_u8(&b, 0x03), r_v(&b, v), r_s(&b, 0), r_u8(&b, 0x80), b.zero_numbers = 2; break;
        case 10: r_u8(&b, 0x02), r_v(&b, v), r_u8(&b, 0x06), r_v(&b, 0), r_s(&b, 0); break;
        case 11: r_u8(&b, 0x21), r_v(&b, v), b.zero_numbers = 2; break;
        default: r_u8(&b, 0x22), r_v(&b, v), r_u8(&b, 0x20), b.zero_numbers = 2; break;
      }
      expect(&b, want, i ? 0 : 1, cases[k].what);
    }
  }
}

/* §3.5: a zone's depth (root depth + open zones) is 32-bit too. */
static void test_depth_limit(void** state) {
  rec_buf b;
  uint8_t p[256];
  pt_decoded d;
  (void)state;
  /* AT depth 2^32 - 1, then a leaf there: fine */
  memset(&b, 0, sizeof b);
  r_u8(&b, 0x03), r_v(&b, 0xFFFFFFFFu), r_s(&b, 0), r_u8(&b, 0x80), b.zero_numbers = 2;
  assert_int_equal(pt_decode(&d, p, data_packet(p, &b)), 0);
  assert_int_equal(d.n, 1);
  assert_int_equal(d.recs[0].u.zone.depth, 0xFFFFFFFFu);
  pt_decoded_free(&d);
  /* an OPEN there and a leaf inside it, at depth 2^32: ERANGE */
  memset(&b, 0, sizeof b);
  r_u8(&b, 0x03), r_v(&b, 0xFFFFFFFFu), r_s(&b, 0), r_u8(&b, 0x40), r_u8(&b, 0x80), r_u8(&b, 0x20);
  b.zero_numbers = 4;
  expect(&b, TMK_ERANGE, 0, "depth 2^32");
  /* depth 300 decodes as 300 (the relay's store caps it at 255; the decoder does not) */
  memset(&b, 0, sizeof b);
  r_u8(&b, 0x03), r_v(&b, 300), r_s(&b, 0), r_u8(&b, 0x80), b.zero_numbers = 2;
  assert_int_equal(pt_decode(&d, p, data_packet(p, &b)), 0);
  assert_int_equal(d.recs[0].u.zone.depth, 300);
  pt_decoded_free(&d);
}

/* §5: the decoder hands records out as it reads them; errors that only show at the end of the
 * body come after them, and the packet as a whole is invalid. */
static void test_records_before_an_error(void** state) {
  rec_buf b;
  uint8_t p[256];
  tmk_proto_reader r;
  tmk_proto_record rec;
  size_t n;
  (void)state;
  memset(&b, 0, sizeof b);
  r_u8(&b, 0x06), r_v(&b, 0), r_s(&b, 5);     /* FRAME */
  r_u8(&b, 0x80), r_u8(&b, 0x40);             /* a leaf, then a zone left open */
  b.zero_numbers = 3;
  n = data_packet(p, &b);
  assert_int_equal(tmk_proto_open(&r, p, n, NULL, 0), 0);
  assert_int_equal(tmk_proto_next(&r, &rec), 1);
  assert_int_equal(rec.type, TMK_REC_FRAME);
  assert_int_equal(tmk_proto_next(&r, &rec), 1);
  assert_int_equal(rec.type, TMK_REC_ZONE);
  assert_int_equal(tmk_proto_next(&r, &rec), TMK_ENEST);
  /* the same with a number left over at the end: ECORRUPT after both records */
  memset(&b, 0, sizeof b);
  r_u8(&b, 0x06), r_v(&b, 0), r_s(&b, 5), r_u8(&b, 0x80);
  b.zero_numbers = 2;
  n = data_packet(p, &b);
  p[n - 1] = 0x04; /* bit 2: a third number (1: "10") nobody reads */
  assert_int_equal(tmk_proto_open(&r, p, n, NULL, 0), 0);
  assert_int_equal(tmk_proto_next(&r, &rec), 1);
  assert_int_equal(tmk_proto_next(&r, &rec), 1);
  assert_int_equal(tmk_proto_next(&r, &rec), TMK_ECORRUPT);
}

/* §5.0: every number read while a context's state is 0 sets it outright, not only the first:
 * gaps 0, 0, 100, 100 leave the gap state at 0, 0, 16 * 7 = 112, 112 - 14 + 14 = 112. Under a
 * "first number only" reading the third would give 0 - 0 + 2 * 7 = 14. */
static void test_cold_state_rule(void** state) {
  static const tmk_proto_zone z[4] = {
      {1000, 0, 1, 0}, {1000, 0, 2, 0}, {1100, 0, 3, 0}, {1200, 0, 4, 0}};
  static const uint32_t want[4] = {0, 0, 112, 112};
  pt_enc* e = pt_enc_new(1161, 0, 0);
  tmk_proto_reader r;
  tmk_proto_record rec;
  int i;
  (void)state;
  assert_non_null(e);
  assert_int_equal(tmk_proto_put_zones(&e->w, z, 4), 4);
  assert_true(pt_enc_finish(e, 1, 0) > 0);
  assert_int_equal(tmk_proto_open(&r, e->pkt, (size_t)e->pkt_len, NULL, 0), 0);
  for (i = 0; i < 4; i++) {
    assert_int_equal(tmk_proto_next(&r, &rec), 1);
    assert_true(rec.u.zone.start == z[i].start);
    assert_int_equal(r.nstate[0], want[i]); /* context 0 is the gap (§5.0) */
  }
  assert_int_equal(tmk_proto_next(&r, &rec), 0);
  pt_enc_free(e);
}

/* §5.0: a decoder accepts an escape a writer would not have used (n = 1 for the value 1). */
static void test_unneeded_escape(void** state) {
  /* LEAF site 1: gap = escape 111111, n - 1 = 0 in 6 bits, the bit 1; duration 0 (fresh): 0.
   * 14 bits from bit 0: 3F 10, stored backwards. */
  static const uint8_t body[] = {0x01, 0x02, 0x80, 0x10, 0x3F};
  uint8_t p[64];
  size_t n = pt_header(p, 0, TMK_PKT_DATA, 1, 0, 1000, 0);
  pt_decoded d;
  (void)state;
  memcpy(p + n, body, sizeof body);
  assert_int_equal(pt_decode(&d, p, n + sizeof body), 0);
  assert_int_equal(d.n, 1);
  assert_true(d.recs[0].u.zone.start == 1001 && d.recs[0].u.zone.duration == 0);
  pt_decoded_free(&d);
}

/* §5.2, §5.10: THREAD_NAME names its own thread without switching; CLOCK_SYNC ticks are
 * absolute and move no cursor. */
static void test_thread_name_and_clock(void** state) {
  rec_buf b;
  uint8_t p[256];
  pt_decoded d;
  (void)state;
  memset(&b, 0, sizeof b);
  r_u8(&b, 0x02), r_v(&b, 3);                                 /* THREAD 3 */
  r_u8(&b, 0x0A), r_v(&b, 9), r_str(&b, "io");                /* THREAD_NAME 9 */
  r_u8(&b, 0x0C), r_v(&b, 5), r_v(&b, 1700000000000000000ull); /* CLOCK_SYNC at tick 5 */
  r_u8(&b, 0x06), r_v(&b, 0), r_s(&b, 0);                     /* FRAME: event cursor + 0 */
  assert_int_equal(pt_decode(&d, p, data_packet(p, &b)), 0);
  assert_int_equal(d.n, 3);
  assert_int_equal(d.recs[0].type, TMK_REC_THREAD_NAME);
  assert_int_equal(d.recs[0].thread, 9);
  assert_int_equal(d.recs[1].type, TMK_REC_CLOCK_SYNC);
  assert_true(d.recs[1].u.clock.ticks == 5); /* not base 1000 + 5 */
  assert_int_equal(d.recs[2].type, TMK_REC_FRAME);
  assert_int_equal(d.recs[2].thread, 3);
  assert_true(d.recs[2].u.frame.time == 1000);
  pt_decoded_free(&d);
}

/* §5.9: reasons without a name decode, and print as their number. */
static void test_unknown_drop_reasons(void** state) {
  static const uint32_t reasons[] = {5, 8, 1000, 0xFFFFFFFFu};
  rec_buf b;
  uint8_t p[256];
  pt_decoded d;
  char line[128];
  size_t i;
  (void)state;
  memset(&b, 0, sizeof b);
  for (i = 0; i < 4; i++) r_u8(&b, 0x0B), r_v(&b, reasons[i]), r_v(&b, 7);
  assert_int_equal(pt_decode(&d, p, data_packet(p, &b)), 0);
  assert_int_equal(d.n, 4);
  for (i = 0; i < 4; i++) assert_int_equal(d.recs[i].u.drops.reason, reasons[i]);
  tmk_proto_format_record(&d.recs[2], line, sizeof line);
  assert_string_equal(line, "drops reason=1000 count=7");
  pt_decoded_free(&d);
}

/* ---- control packets (§6) ------------------------------------------------------------------ */

static tmk_proto_str mk(const char* s) {
  tmk_proto_str r;
  r.ptr = s;
  r.len = (uint32_t)strlen(s);
  return r;
}

/* A HELLO of a little-endian target (byte order field 0) in the host's byte order. */
static int hello(uint8_t* out, size_t cap) {
  tmk_proto_hello h;
  memset(&h, 0, sizeof h);
  h.proto_version = TMK_PROTO_VERSION;
  h.agent_version = mk("0.1.0");
  h.program = mk("edges");
  h.platform = mk("linux");
  h.arch = mk("x86_64");
  h.pointer_size = 8;
  h.timer_freq = 1000000000u;
  h.max_packet = 1200;
  return tmk_proto_encode_hello(out, cap, 0x0123456789ABCDEFull, &h);
}

static int read_hello(const uint8_t* p, size_t n, tmk_proto_hello* h) {
  static uint8_t scratch[TMK_PROTO_MAX_BODY];
  tmk_proto_reader r;
  int rc = tmk_proto_open(&r, p, n, scratch, sizeof scratch);
  if (rc == 0) rc = tmk_proto_read_hello(&r, h);
  if (rc == 0 && r.hdr.session_id != 0x0123456789ABCDEFull) rc = TMK_ECORRUPT;
  return rc;
}

/* §2, §6.1: the header flag says how this packet is laid out; the byte order field is the
 * target's and need not agree. (hello.bin is the other way round.) */
static void test_hello_byte_orders(void** state) {
  uint8_t p[256], q[256];
  int n = hello(p, sizeof p), k;
  tmk_proto_hello h;
  (void)state;
  assert_true(n > 16);
  memcpy(q, p, (size_t)n);
  q[4] ^= TMK_PKT_F_BIG_ENDIAN; /* the other byte order for the header, same session id */
  for (k = 0; k < 8; k++) q[6 + k] = p[13 - k];
  assert_int_equal(read_hello(p, (size_t)n, &h), 0);
  assert_int_equal(h.big_endian, 0);
  assert_int_equal(read_hello(q, (size_t)n, &h), 0);
  assert_int_equal(h.big_endian, 0);
}

/* §2, §6: a control body may be LZ4-compressed (here one block of literals only), carry bytes
 * after its last field, and have a non-zero seq and base in its header. */
static void test_control_packet_leniency(void** state) {
  uint8_t p[256], q[300];
  int n = hello(p, sizeof p);
  size_t body_len, m;
  tmk_proto_hello h;
  tmk_proto_reader r;
  tmk_proto_control c;
  (void)state;
  assert_true(n > 16);
  body_len = (size_t)n - 16; /* the header is 14 bytes, seq 0 and base 0 */
  m = pt_header(q, (uint8_t)(p[4] | TMK_PKT_F_LZ4), TMK_PKT_HELLO, 0x0123456789ABCDEFull, 0, 0,
                (uint32_t)body_len);
  assert_true(body_len >= 15 && body_len < 15 + 255);
  q[m++] = 0xF0; /* token: 15+ literals, no match */
  q[m++] = (uint8_t)(body_len - 15);
  memcpy(q + m, p + 16, body_len);
  m += body_len;
  assert_int_equal(read_hello(q, m, &h), tmk_proto_lz4_state_size() ? 0 : TMK_ENOLZ4);
  if (tmk_proto_lz4_state_size()) assert_memory_equal(h.program.ptr, "edges", 5);
  /* trailing bytes, seq 5, base 7 */
  m = pt_header(q, p[4], TMK_PKT_HELLO, 0x0123456789ABCDEFull, 5, 7, 0);
  memcpy(q + m, p + 16, body_len);
  m += body_len;
  q[m++] = 0x01, q[m++] = 0x02;
  assert_int_equal(read_hello(q, m, &h), 0);
  assert_int_equal(h.max_packet, 1200);
  /* a CONTROL with bytes after its last field */
  m = pt_header(q, 0, TMK_PKT_CONTROL, 1, 0, 0, 0);
  q[m++] = 4, q[m++] = 5, q[m++] = 0x03, q[m++] = 0xFF;
  assert_int_equal(tmk_proto_open(&r, q, m, NULL, 0), 0);
  assert_int_equal(tmk_proto_read_control(&r, &c), 0);
  assert_true(c.seq == 4 && c.severity == 5 && c.verbosity == 3);
}

/* §6.5: nothing reads a BYE's body; its header must parse, and it is not DATA. */
static void test_bye_with_a_body(void** state) {
  uint8_t q[64];
  size_t m = pt_header(q, 0, TMK_PKT_BYE, 1, 0, 0, 0);
  tmk_proto_header h;
  tmk_proto_reader r;
  tmk_proto_record rec;
  (void)state;
  q[m++] = 0xAB, q[m++] = 0xCD;
  assert_int_equal(tmk_proto_parse_header(q, m, &h), (int)m - 2);
  assert_int_equal(h.type, TMK_PKT_BYE);
  assert_int_equal(tmk_proto_open(&r, q, m, NULL, 0), 0);
  assert_int_equal(tmk_proto_next(&r, &rec), TMK_ETYPE);
  /* the LZ4 flag with a body that is no LZ4 block: the header still parses */
  m = pt_header(q, TMK_PKT_F_LZ4, TMK_PKT_BYE, 1, 0, 0, 100);
  q[m++] = 0xFF;
  assert_int_equal(tmk_proto_parse_header(q, m, &h), (int)m - 1);
  assert_int_equal(h.type, TMK_PKT_BYE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_field_widths),
      cmocka_unit_test(test_depth_limit),
      cmocka_unit_test(test_records_before_an_error),
      cmocka_unit_test(test_cold_state_rule),
      cmocka_unit_test(test_unneeded_escape),
      cmocka_unit_test(test_thread_name_and_clock),
      cmocka_unit_test(test_unknown_drop_reasons),
      cmocka_unit_test(test_hello_byte_orders),
      cmocka_unit_test(test_control_packet_leniency),
      cmocka_unit_test(test_bye_with_a_body),
  };
  return cmocka_run_group_tests_name("proto-edges", tests, NULL, NULL);
}
