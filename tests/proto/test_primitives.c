/* test_primitives.c — the protocol's building blocks: varint codec (§3.1), zigzag (§3.2, seen
 * through PLOT_I), TCP framing (§1), tmk_strerror / tmk_err_name, ticks_to_ns and name tables. */
#include <string.h>

#include "proto_util.h"
#include "tmk_proto.h"
#include "tmk_test.h"

static void varint_round_trip(uint64_t v, int expect_len) {
  uint8_t buf[16];
  uint64_t got = 0;
  int n;
  memset(buf, 0xAA, sizeof buf);
  n = tmk_proto_varint_put(buf, v);
  assert_int_equal(n, expect_len);
  assert_int_equal(buf[n], 0xAA); /* wrote no more than it reported */
  assert_int_equal(tmk_proto_varint_get(buf, buf + n, &got), n);
  assert_true(got == v);
  /* the test's own encoder (§3.1) produces the same bytes */
  {
    uint8_t ref[16];
    assert_int_equal(pt_varint(ref, v), (size_t)n);
    assert_memory_equal(ref, buf, (size_t)n);
  }
}

static void test_varint_edges(void** state) {
  int k;
  (void)state;
  varint_round_trip(0, 1);
  varint_round_trip(1, 1);
  varint_round_trip(127, 1);
  varint_round_trip(128, 2);
  varint_round_trip(16383, 2);
  varint_round_trip(16384, 3);
  varint_round_trip(0xFFFFFFFFu, 5);
  varint_round_trip(0x100000000ull, 5);
  varint_round_trip(0x7FFFFFFFFFFFFFFFull, 9);
  varint_round_trip(0x8000000000000000ull, 10);
  varint_round_trip(~(uint64_t)0, 10);
  for (k = 0; k < 64; k++) {
    uint64_t v = (uint64_t)1 << k;
    varint_round_trip(v, k / 7 + 1);
    varint_round_trip(v - 1, k == 0 ? 1 : (k - 1) / 7 + 1);
  }
}

static void test_varint_exact_bytes(void** state) {
  static const uint8_t max[10] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
  uint8_t buf[16];
  (void)state;
  assert_int_equal(tmk_proto_varint_put(buf, 300), 2);
  assert_int_equal(buf[0], 0xAC);
  assert_int_equal(buf[1], 0x02);
  assert_int_equal(tmk_proto_varint_put(buf, ~(uint64_t)0), 10);
  assert_memory_equal(buf, max, 10);
}

static void test_varint_malformed(void** state) {
  uint8_t b[16] = {0};
  uint64_t v = 12345;
  int i;
  (void)state;
  /* empty and unterminated input */
  assert_int_equal(tmk_proto_varint_get(b, b, &v), TMK_ETRUNC);
  b[0] = 0x80;
  assert_int_equal(tmk_proto_varint_get(b, b + 1, &v), TMK_ETRUNC);
  for (i = 0; i < 9; i++) b[i] = 0xFF;
  assert_int_equal(tmk_proto_varint_get(b, b + 9, &v), TMK_ETRUNC);
  /* tenth byte above 1 overflows 64 bits */
  b[9] = 0x02;
  assert_int_equal(tmk_proto_varint_get(b, b + 10, &v), TMK_EVARINT);
  b[9] = 0x7F;
  assert_int_equal(tmk_proto_varint_get(b, b + 10, &v), TMK_EVARINT);
  /* an eleventh byte */
  b[9] = 0x81;
  b[10] = 0x00;
  assert_int_equal(tmk_proto_varint_get(b, b + 11, &v), TMK_EVARINT);
  for (i = 0; i < 10; i++) b[i] = 0x80;
  b[10] = 0x00;
  assert_int_equal(tmk_proto_varint_get(b, b + 11, &v), TMK_EVARINT);
  /* tenth byte exactly 1 is the largest value */
  for (i = 0; i < 9; i++) b[i] = 0xFF;
  b[9] = 0x01;
  assert_int_equal(tmk_proto_varint_get(b, b + 10, &v), 10);
  assert_true(v == ~(uint64_t)0);
  /* padded (non-minimal) encodings within 10 bytes are valid per §3.1 */
  b[0] = 0x80;
  b[1] = 0x00;
  assert_int_equal(tmk_proto_varint_get(b, b + 2, &v), 2);
  assert_true(v == 0);
  for (i = 0; i < 9; i++) b[i] = 0x80;
  b[9] = 0x00;
  assert_int_equal(tmk_proto_varint_get(b, b + 10, &v), 10);
  assert_true(v == 0);
  /* the decoder stops at the terminating byte even if more input follows */
  b[0] = 0x05;
  b[1] = 0xFF;
  assert_int_equal(tmk_proto_varint_get(b, b + 2, &v), 1);
  assert_true(v == 5);
}

/* Zigzag is visible on the wire through PLOT_I: a packet with known values encodes the values as
 * (v << 1) ^ (v >> 63), checked by decoding hand-built bytes and by the writer's round trip. */
static void test_zigzag_plot_values(void** state) {
  static const int64_t values[] = {0, -1, 1, -2, 2, 63, -64, 64, -65, 2147483647, -2147483647 - 1,
                                   INT64_MAX, INT64_MIN, INT64_MIN + 1, INT64_MAX - 1};
  const size_t nv = sizeof values / sizeof values[0];
  pt_enc* e;
  pt_decoded d;
  size_t i;
  uint8_t pkt[512];
  size_t n;
  (void)state;

  e = pt_enc_new(1000, -1, 0);
  assert_non_null(e);
  for (i = 0; i < nv; i++) assert_int_equal(tmk_proto_put_plot_i(&e->w, 7, 1000 + i, values[i]), 0);
  assert_true(pt_enc_finish(e, 1, 0) > 0);
  assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
  assert_int_equal(d.n, nv);
  for (i = 0; i < nv; i++) {
    assert_int_equal(d.recs[i].type, TMK_REC_PLOT);
    assert_int_equal(d.recs[i].u.plot.is_double, 0);
    assert_true(d.recs[i].u.plot.i == values[i]);
    assert_true(d.recs[i].u.plot.time == 1000 + i);
  }
  pt_decoded_free(&d);
  pt_enc_free(e);

  /* hand-built: zigzag 0,1,2,3 <-> 0,-1,1,-2, and the 10-byte extreme INT64_MIN */
  n = pt_header(pkt, 0, TMK_PKT_DATA, 9, 0, 50, 0);
  {
    static const uint8_t body[] = {0x07, 0x01, 0x00, 0x00, /* value 0 */
                                   0x07, 0x01, 0x00, 0x01, /* -1 */
                                   0x07, 0x01, 0x00, 0x02, /* 1 */
                                   0x07, 0x01, 0x00, 0x03, /* -2 */
                                   0x07, 0x01, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                   0xFF, 0xFF, 0xFF, 0xFF, 0x01 /* INT64_MIN */};
    pkt[n++] = (uint8_t)sizeof body; /* the record stream's length (§5) */
    pkt[n++] = 0;                    /* and the number stream's: none */
    memcpy(pkt + n, body, sizeof body);
    n += sizeof body;
  }
  assert_int_equal(pt_decode(&d, pkt, n), 0);
  assert_int_equal(d.n, 5);
  assert_true(d.recs[0].u.plot.i == 0);
  assert_true(d.recs[1].u.plot.i == -1);
  assert_true(d.recs[2].u.plot.i == 1);
  assert_true(d.recs[3].u.plot.i == -2);
  assert_true(d.recs[4].u.plot.i == INT64_MIN);
  for (i = 0; i < 5; i++) assert_true(d.recs[i].u.plot.time == 50);
  pt_decoded_free(&d);
}

static void test_frame_prefix(void** state) {
  static const struct {
    size_t len;
    int n;
    uint8_t b[3];
  } cases[] = {{1, 1, {0x01}},
               {127, 1, {0x7F}},
               {128, 2, {0x80, 0x01}},
               {1200, 2, {0xB0, 0x09}},
               {16383, 2, {0xFF, 0x7F}},
               {16384, 3, {0x80, 0x80, 0x01}},
               {TMK_PROTO_MAX_PACKET, 3, {0xE3, 0xFF, 0x03}}};
  size_t i;
  uint8_t out[3];
  uint32_t len;
  (void)state;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(tmk_proto_frame_prefix(out, cases[i].len), cases[i].n);
    assert_memory_equal(out, cases[i].b, (size_t)cases[i].n);
    len = 0;
    assert_int_equal(tmk_proto_frame_parse(out, (size_t)cases[i].n, &len), cases[i].n);
    assert_int_equal(len, cases[i].len);
    /* any shorter prefix asks for more bytes */
    if (cases[i].n > 1) assert_int_equal(tmk_proto_frame_parse(out, (size_t)cases[i].n - 1, &len), 0);
  }
  assert_int_equal(tmk_proto_frame_prefix(out, TMK_PROTO_MAX_PACKET + 1), TMK_ETOOBIG);
  assert_int_equal(tmk_proto_frame_prefix(out, 1u << 24), TMK_ETOOBIG);
  assert_true(tmk_proto_frame_prefix(out, 0) < 0);
}

static void test_frame_parse_bad(void** state) {
  uint8_t b[8] = {0};
  uint32_t len = 77;
  (void)state;
  assert_int_equal(tmk_proto_frame_parse(b, 0, &len), 0);
  b[0] = 0x00; /* length 0 */
  assert_true(tmk_proto_frame_parse(b, 1, &len) < 0);
  b[0] = 0xE4; /* 65508 */
  b[1] = 0xFF;
  b[2] = 0x03;
  assert_true(tmk_proto_frame_parse(b, 3, &len) < 0);
  b[0] = 0x80; /* 2^21, more than any packet */
  b[1] = 0x80;
  b[2] = 0x80;
  b[3] = 0x01;
  assert_true(tmk_proto_frame_parse(b, 4, &len) < 0);
  memset(b, 0xFF, sizeof b); /* a runaway varint */
  assert_true(tmk_proto_frame_parse(b, sizeof b, &len) < 0);
}

/* A byte stream of framed packets, delivered in arbitrary chunk sizes, yields every packet. */
static void test_frame_stream(void** state) {
  enum { NPKT = 40 };
  static uint8_t stream[NPKT * (3 + 2000)];
  static uint8_t rx[sizeof stream];
  size_t lens[NPKT], offs[NPKT];
  size_t slen = 0, rxlen = 0, pos = 0, delivered = 0;
  uint64_t rng = 99;
  int i, got = 0;
  (void)state;
  for (i = 0; i < NPKT; i++) {
    uint8_t pre[3];
    size_t k;
    int pn;
    lens[i] = 1 + (size_t)(pt_rand(&rng) % (i % 3 == 0 ? 2000 : 120));
    pn = tmk_proto_frame_prefix(pre, lens[i]);
    assert_true(pn > 0);
    memcpy(stream + slen, pre, (size_t)pn);
    slen += (size_t)pn;
    offs[i] = slen;
    for (k = 0; k < lens[i]; k++) stream[slen + k] = (uint8_t)(i * 31 + k);
    slen += lens[i];
  }
  while (delivered < slen || pos < rxlen) {
    size_t chunk = 1 + (size_t)(pt_rand(&rng) % 300);
    uint32_t len = 0;
    int pn;
    if (chunk > slen - delivered) chunk = slen - delivered;
    memcpy(rx + rxlen, stream + delivered, chunk);
    rxlen += chunk;
    delivered += chunk;
    for (;;) {
      pn = tmk_proto_frame_parse(rx + pos, rxlen - pos, &len);
      assert_true(pn >= 0);
      if (pn == 0 || rxlen - pos - (size_t)pn < len) break;
      assert_true(got < NPKT);
      assert_int_equal(len, lens[got]);
      assert_memory_equal(rx + pos + pn, stream + offs[got], len);
      pos += (size_t)pn + len;
      got++;
    }
    if (chunk == 0) break;
  }
  assert_int_equal(got, NPKT);
  assert_int_equal(pos, slen);
}

static void test_strerror_every_code(void** state) {
  int count = 0;
  (void)state;
#define CHECK_CODE(name, value, msg)                        \
  assert_int_equal(TMK_##name, value);                      \
  assert_true((value) < 0);                                 \
  assert_string_equal(tmk_strerror(value), msg);            \
  assert_string_equal(tmk_err_name(value), #name);          \
  count++;
  TMK_ERRNO_MAP(CHECK_CODE)
#undef CHECK_CODE
  assert_int_equal(count, -(TMK__ERR_LAST + 1));
  assert_string_equal(tmk_strerror(TMK__ERR_LAST), "unknown error");
  assert_string_equal(tmk_strerror(-1000), "unknown error");
  assert_string_equal(tmk_strerror(5), "unknown error");
  assert_string_equal(tmk_err_name(TMK__ERR_LAST), "EUNKNOWN");
  assert_string_equal(tmk_err_name(12345), "EUNKNOWN");
}

/* Reference: floor(ticks * 1e9 / freq) with a 128-bit product built from 32-bit limbs and a
 * bitwise long division, so it shares no arithmetic with the implementation. */
static uint64_t ref_ticks_to_ns(uint64_t ticks, uint64_t freq) {
  uint64_t lo, hi, q = 0, rem = 0;
  uint64_t a0 = ticks & 0xFFFFFFFFu, a1 = ticks >> 32, b = 1000000000u;
  uint64_t p0 = a0 * b, p1 = a1 * b;
  int bit;
  lo = p0 + (p1 << 32);
  hi = (p1 >> 32) + (lo < p0 ? 1 : 0);
  for (bit = 127; bit >= 0; bit--) {
    uint64_t top = rem >> 63;
    rem = (rem << 1) | ((bit >= 64 ? hi >> (bit - 64) : lo >> bit) & 1);
    if (top || rem >= freq) {
      rem -= freq;
      if (bit < 64) q |= (uint64_t)1 << bit;
    }
  }
  return q;
}

static void test_ticks_to_ns(void** state) {
  static const uint64_t freqs[] = {1,          1000,       32768,       1000000,    60750000,
                                   243000000,  729000000,  1000000000,  2400000000u,
                                   3000000000u, 18000000000ull};
  uint64_t rng = 7;
  size_t i;
  int k;
  (void)state;
  assert_true(tmk_proto_ticks_to_ns(12345, 0) == 0);
  assert_true(tmk_proto_ticks_to_ns(0, 1000) == 0);
  assert_true(tmk_proto_ticks_to_ns(1000000000u, 1000000000u) == 1000000000u);
  assert_true(tmk_proto_ticks_to_ns(~(uint64_t)0, 1000000000u) == ~(uint64_t)0);
  assert_true(tmk_proto_ticks_to_ns(60750000u, 60750000u) == 1000000000u); /* Wii timebase */
  assert_true(tmk_proto_ticks_to_ns(3, 3000000000u) == 1);
  assert_true(tmk_proto_ticks_to_ns(1, 32768) == 30517); /* floor(30517.578125) */
  for (i = 0; i < sizeof freqs / sizeof freqs[0]; i++) {
    uint64_t f = freqs[i];
    /* largest ticks whose result still fits 64 bits: ticks * 1e9 / f < 2^64 */
    uint64_t maxt = f >= 1000000000u ? ~(uint64_t)0 : (uint64_t)((double)f * 18446744073.0);
    assert_true(tmk_proto_ticks_to_ns(f, f) == 1000000000u);
    for (k = 0; k < 2000; k++) {
      uint64_t t = pt_rand(&rng);
      uint64_t want;
      if (k % 4 == 0) t &= 0xFFFFFFFFu;
      if (maxt != ~(uint64_t)0) t %= maxt;
      want = ref_ticks_to_ns(t, f);
      if (tmk_proto_ticks_to_ns(t, f) != want)
        fail_msg("ticks_to_ns(%llu, %llu) = %llu, want %llu", (unsigned long long)t,
                 (unsigned long long)f, (unsigned long long)tmk_proto_ticks_to_ns(t, f),
                 (unsigned long long)want);
    }
  }
}

static void test_name_tables(void** state) {
  unsigned i, j;
  (void)state;
  for (i = 0; i < TMK_SEV_COUNT; i++) {
    assert_true(strcmp(tmk_proto_severity_name(i), "?") != 0);
    for (j = 0; j < i; j++)
      assert_true(strcmp(tmk_proto_severity_name(i), tmk_proto_severity_name(j)) != 0);
  }
  assert_string_equal(tmk_proto_severity_name(TMK_SEV_COUNT), "?");
  for (i = 0; i < TMK_SITE_KIND_COUNT; i++) {
    assert_true(strcmp(tmk_proto_site_kind_name(i), "?") != 0);
    for (j = 0; j < i; j++)
      assert_true(strcmp(tmk_proto_site_kind_name(i), tmk_proto_site_kind_name(j)) != 0);
  }
  assert_string_equal(tmk_proto_site_kind_name(TMK_SITE_KIND_COUNT), "?");
  for (i = 0; i < TMK_DROP_REASON_COUNT; i++) {
    assert_true(strcmp(tmk_proto_drop_reason_name(i), "?") != 0);
    for (j = 0; j < i; j++)
      assert_true(strcmp(tmk_proto_drop_reason_name(i), tmk_proto_drop_reason_name(j)) != 0);
  }
  assert_string_equal(tmk_proto_drop_reason_name(TMK_DROP_REASON_COUNT), "?");
  for (i = TMK_PKT_DATA; i <= TMK_PKT_BYE; i++) {
    assert_true(strcmp(tmk_proto_packet_type_name(i), "?") != 0);
    for (j = TMK_PKT_DATA; j < i; j++)
      assert_true(strcmp(tmk_proto_packet_type_name(i), tmk_proto_packet_type_name(j)) != 0);
  }
  assert_string_equal(tmk_proto_packet_type_name(0), "?");
  assert_string_equal(tmk_proto_packet_type_name(TMK_PKT_BYE + 1), "?");
  assert_string_equal(tmk_proto_severity_name(1000000u), "?");
}

/* tmk_proto_format_record behaves like snprintf: it returns the full length and always
 * terminates, writing a prefix of the full line into any smaller buffer. */
static void test_format_truncates(void** state) {
  tmk_proto_record rec;
  char full[512], part[512];
  int n, cap;
  (void)state;
  memset(&rec, 0, sizeof rec);
  rec.type = TMK_REC_MESSAGE;
  rec.thread = 4;
  rec.u.message.site = 9;
  rec.u.message.severity = TMK_SEV_WARNING;
  rec.u.message.verbosity = 0x10;
  rec.u.message.time = 0xFFFFFFFFFFull;
  rec.u.message.text.ptr = "say \"hi\"\n\x01";
  rec.u.message.text.len = 10;
  n = tmk_proto_format_record(&rec, full, sizeof full);
  assert_int_equal(n, (int)strlen(full));
  assert_string_equal(full, "message thread=4 site=9 severity=warning verbosity=0x10 time=1099511627775 "
                            "text=\"say \\\"hi\\\"\\x0a\\x01\"");
  for (cap = 1; cap <= n + 1; cap++) {
    memset(part, 'Z', sizeof part);
    assert_int_equal(tmk_proto_format_record(&rec, part, (size_t)cap), n);
    assert_int_equal(strlen(part), (size_t)cap - 1);
    assert_memory_equal(part, full, (size_t)cap - 1);
    assert_int_equal(part[cap], 'Z');
  }
  part[0] = 'Z';
  assert_int_equal(tmk_proto_format_record(&rec, part, 0), n);
  assert_int_equal(part[0], 'Z');
}

static void test_host_byte_order(void** state) {
  union {
    uint32_t u;
    uint8_t b[4];
  } probe;
  (void)state;
  probe.u = 0x01020304u;
  assert_int_equal(tmk_proto_host_big_endian(), probe.b[0] == 0x01 ? 1 : 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_varint_edges),       cmocka_unit_test(test_varint_exact_bytes),
      cmocka_unit_test(test_varint_malformed),   cmocka_unit_test(test_zigzag_plot_values),
      cmocka_unit_test(test_frame_prefix),       cmocka_unit_test(test_frame_parse_bad),
      cmocka_unit_test(test_frame_stream),       cmocka_unit_test(test_strerror_every_code),
      cmocka_unit_test(test_ticks_to_ns),        cmocka_unit_test(test_name_tables),
      cmocka_unit_test(test_host_byte_order),    cmocka_unit_test(test_format_truncates),
  };
  return cmocka_run_group_tests_name("proto-primitives", tests, NULL, NULL);
}
