/* test_records.c — round trip through writer and decoder of every DATA record type (§5) in both
 * byte orders and compressed, every control packet (§6), the writer's limits and its
 * all-or-nothing promise on TMK_ENOSPC, and descriptor resolution across packets (§5.1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto_util.h"
#include "tmk_proto.h"
#include "tmk_test.h"

#define SESSION 0x0123456789ABCDEFull

static int str_is(tmk_proto_str s, const char* want, size_t len) {
  return s.len == len && (len == 0 || memcmp(s.ptr, want, len) == 0);
}

/* ---- every record type ----------------------------------------------------------------------- */

static const char k_payload[] = {0, 1, 2, (char)0xFF, 'x'};
static char g_long_text[TMK_PROTO_MAX_STRING];
static char g_long_payload[TMK_PROTO_MAX_PAYLOAD];

static void put_all_kinds(tmk_proto_writer* w, uint64_t t0) {
  tmk_proto_site s;
  tmk_proto_zone z[3];
  memset(&s, 0, sizeof s);
  s.id = 1;
  s.kind = TMK_SITE_ZONE;
  s.severity = TMK_SEV_TRACE;
  s.verbosity = 0xFFFFFFFFu;
  s.color = 0xFFFFFF;
  s.line = 0xFFFFFFFFu;
  s.name.ptr = "Physics::Step";
  s.name.len = 13;
  s.file = s.name;
  s.file.ptr = "src/physics/step.c";
  s.file.len = 18;
  assert_int_equal(tmk_proto_put_site(w, &s), 0);
  s.id = 0xFFFFFFFFu;
  s.kind = TMK_SITE_FRAME;
  s.severity = TMK_SEV_CRITICAL;
  s.verbosity = 0;
  s.color = 0;
  s.line = 0;
  s.name.ptr = "";
  s.name.len = 0;
  s.file.ptr = g_long_text;
  s.file.len = TMK_PROTO_MAX_STRING;
  assert_int_equal(tmk_proto_put_site(w, &s), 0);
  assert_int_equal(tmk_proto_put_thread_name(w, 3, "Render", 6), 0);
  assert_int_equal(tmk_proto_put_thread_name(w, 0xFFFFFFFFu, "", 0), 0);
  assert_int_equal(tmk_proto_put_team(w, 0, "render", 6), 0);
  assert_int_equal(tmk_proto_put_team(w, 31, "audio", 5), 0);
  assert_int_equal(tmk_proto_put_drops(w, TMK_DROP_RING_FULL, 0), 0);
  assert_int_equal(tmk_proto_put_drops(w, TMK_DROP_MISMATCH, ~(uint64_t)0), 0);
  assert_int_equal(tmk_proto_put_clock(w, t0, 1763776000000000000ull), 0);
  assert_int_equal(tmk_proto_put_clock(w, ~(uint64_t)0, 0), 0);
  assert_int_equal(tmk_proto_put_thread(w, 3), 0);
  z[0].site = 1;
  z[0].depth = 0;
  z[0].start = t0 + 10;
  z[0].duration = 500;
  z[1].site = 200;
  z[1].depth = 1;
  z[1].start = t0 + 20;
  z[1].duration = 100;
  z[2].site = 0xFFFFFFFFu;
  z[2].depth = 1;
  z[2].start = t0 + 130;
  z[2].duration = 0;
  assert_int_equal(tmk_proto_put_zones(w, z, 3), 3);
  assert_int_equal(tmk_proto_put_marker(w, 0, 5, t0 + 1, k_payload, sizeof k_payload), 0);
  assert_int_equal(tmk_proto_put_marker(w, 1, 5, t0 + 2, NULL, 0), 0);
  assert_int_equal(tmk_proto_put_marker(w, 0, 6, t0 + 3, g_long_payload, TMK_PROTO_MAX_PAYLOAD), 0);
  assert_int_equal(tmk_proto_put_frame(w, 0, t0 + 4), 0);
  assert_int_equal(tmk_proto_put_frame(w, 9, t0 - 4), 0);
  assert_int_equal(tmk_proto_put_plot_i(w, 10, t0, INT64_MIN), 0);
  assert_int_equal(tmk_proto_put_plot_d(w, 11, t0, -0.0), 0);
  assert_int_equal(tmk_proto_put_plot_d(w, 11, t0, 6.02214076e23), 0);
  assert_int_equal(tmk_proto_put_plot_d(w, 11, t0, -HUGE_VAL), 0);
  assert_int_equal(tmk_proto_put_plot_d(w, 11, t0, 4.9406564584124654e-324), 0);
  assert_int_equal(tmk_proto_put_message(w, 12, TMK_SEV_WARNING, 0x80000001u, t0 + 50, "", 0), 0);
  assert_int_equal(tmk_proto_put_message(w, 0, TMK_SEV_TRACE, 0, t0 + 60, "héllo\n\"w\"", 11), 0);
  assert_int_equal(tmk_proto_put_message(w, 0, TMK_SEV_CRITICAL, 1, t0, g_long_text,
                                         TMK_PROTO_MAX_STRING), 0);
  assert_int_equal(tmk_proto_put_thread(w, 0), 0);
  assert_int_equal(tmk_proto_put_frame(w, 0, t0 + 16666667), 0);
}

static void check_all_kinds(const pt_decoded* d, uint64_t t0) {
  const tmk_proto_record* r = d->recs;
  size_t i = 0, nz = 0;
  tmk_proto_zone z[3];
  double dv;
  assert_int_equal(d->rc, 0);
  assert_int_equal(d->n, 27);
  assert_int_equal(r[i].type, TMK_REC_SITE);
  assert_int_equal(r[i].u.site.id, 1);
  assert_int_equal(r[i].u.site.kind, TMK_SITE_ZONE);
  assert_int_equal(r[i].u.site.severity, TMK_SEV_TRACE);
  assert_int_equal(r[i].u.site.verbosity, 0xFFFFFFFFu);
  assert_int_equal(r[i].u.site.color, 0xFFFFFF);
  assert_int_equal(r[i].u.site.line, 0xFFFFFFFFu);
  assert_true(str_is(r[i].u.site.name, "Physics::Step", 13));
  assert_true(str_is(r[i].u.site.file, "src/physics/step.c", 18));
  i++;
  assert_int_equal(r[i].type, TMK_REC_SITE);
  assert_int_equal(r[i].u.site.id, 0xFFFFFFFFu);
  assert_int_equal(r[i].u.site.kind, TMK_SITE_FRAME);
  assert_int_equal(r[i].u.site.severity, 0);
  assert_int_equal(r[i].u.site.verbosity, 0);
  assert_int_equal(r[i].u.site.color, 0);
  assert_int_equal(r[i].u.site.line, 0);
  assert_true(str_is(r[i].u.site.name, "", 0));
  assert_true(str_is(r[i].u.site.file, g_long_text, TMK_PROTO_MAX_STRING));
  i++;
  assert_int_equal(r[i].type, TMK_REC_THREAD_NAME);
  assert_int_equal(r[i].thread, 3);
  assert_true(str_is(r[i].u.thread_name.name, "Render", 6));
  i++;
  assert_int_equal(r[i].type, TMK_REC_THREAD_NAME);
  assert_int_equal(r[i].thread, 0xFFFFFFFFu);
  assert_true(str_is(r[i].u.thread_name.name, "", 0));
  i++;
  assert_int_equal(r[i].type, TMK_REC_TEAM_NAME);
  assert_int_equal(r[i].u.team.bit, 0);
  assert_true(str_is(r[i].u.team.name, "render", 6));
  i++;
  assert_int_equal(r[i].type, TMK_REC_TEAM_NAME);
  assert_int_equal(r[i].u.team.bit, 31);
  assert_true(str_is(r[i].u.team.name, "audio", 5));
  i++;
  assert_int_equal(r[i].type, TMK_REC_DROPS);
  assert_int_equal(r[i].u.drops.reason, TMK_DROP_RING_FULL);
  assert_true(r[i].u.drops.count == 0);
  i++;
  assert_int_equal(r[i].type, TMK_REC_DROPS);
  assert_int_equal(r[i].u.drops.reason, TMK_DROP_MISMATCH);
  assert_true(r[i].u.drops.count == ~(uint64_t)0);
  i++;
  assert_int_equal(r[i].type, TMK_REC_CLOCK_SYNC);
  assert_true(r[i].u.clock.ticks == t0);
  assert_true(r[i].u.clock.unix_ns == 1763776000000000000ull);
  i++;
  assert_int_equal(r[i].type, TMK_REC_CLOCK_SYNC);
  assert_true(r[i].u.clock.ticks == ~(uint64_t)0);
  assert_true(r[i].u.clock.unix_ns == 0);
  i++;
  /* zones: leaves come out before their parent; compare as a set */
  for (; i < 13; i++) {
    assert_int_equal(r[i].type, TMK_REC_ZONE);
    assert_int_equal(r[i].thread, 3);
    z[nz++] = r[i].u.zone;
  }
  {
    tmk_proto_zone want[3];
    want[0].site = 1, want[0].depth = 0, want[0].start = t0 + 10, want[0].duration = 500;
    want[1].site = 200, want[1].depth = 1, want[1].start = t0 + 20, want[1].duration = 100;
    want[2].site = 0xFFFFFFFFu, want[2].depth = 1, want[2].start = t0 + 130, want[2].duration = 0;
    assert_int_equal(pt_zone_sets_differ(want, 3, z, nz), -1);
    /* the parent is reported after its children (§5.3) */
    assert_int_equal(r[12].u.zone.site, 1);
  }
  assert_int_equal(r[i].type, TMK_REC_MARKER_BEGIN);
  assert_int_equal(r[i].thread, 3);
  assert_int_equal(r[i].u.marker.site, 5);
  assert_true(r[i].u.marker.time == t0 + 1);
  assert_true(str_is(r[i].u.marker.payload, k_payload, sizeof k_payload));
  i++;
  assert_int_equal(r[i].type, TMK_REC_MARKER_END);
  assert_int_equal(r[i].u.marker.site, 5);
  assert_true(r[i].u.marker.time == t0 + 2);
  assert_int_equal(r[i].u.marker.payload.len, 0);
  i++;
  assert_int_equal(r[i].type, TMK_REC_MARKER_BEGIN);
  assert_int_equal(r[i].u.marker.site, 6);
  assert_true(str_is(r[i].u.marker.payload, g_long_payload, TMK_PROTO_MAX_PAYLOAD));
  i++;
  assert_int_equal(r[i].type, TMK_REC_FRAME);
  assert_int_equal(r[i].thread, 3);
  assert_int_equal(r[i].u.frame.site, 0);
  assert_true(r[i].u.frame.time == t0 + 4);
  i++;
  assert_int_equal(r[i].type, TMK_REC_FRAME);
  assert_int_equal(r[i].u.frame.site, 9);
  assert_true(r[i].u.frame.time == t0 - 4);
  i++;
  assert_int_equal(r[i].type, TMK_REC_PLOT);
  assert_int_equal(r[i].u.plot.site, 10);
  assert_int_equal(r[i].u.plot.is_double, 0);
  assert_true(r[i].u.plot.i == INT64_MIN);
  assert_true(r[i].u.plot.time == t0);
  i++;
  assert_int_equal(r[i].type, TMK_REC_PLOT);
  assert_int_equal(r[i].u.plot.is_double, 1);
  dv = r[i].u.plot.d;
  assert_true(dv == 0.0 && signbit(dv));
  i++;
  assert_true(r[i].u.plot.is_double && r[i].u.plot.d == 6.02214076e23);
  i++;
  assert_true(r[i].u.plot.is_double && isinf(r[i].u.plot.d) && r[i].u.plot.d < 0);
  i++;
  assert_true(r[i].u.plot.is_double && r[i].u.plot.d == 4.9406564584124654e-324);
  assert_int_equal(r[i].u.plot.site, 11);
  i++;
  assert_int_equal(r[i].type, TMK_REC_MESSAGE);
  assert_int_equal(r[i].u.message.site, 12);
  assert_int_equal(r[i].u.message.severity, TMK_SEV_WARNING);
  assert_int_equal(r[i].u.message.verbosity, 0x80000001u);
  assert_true(r[i].u.message.time == t0 + 50);
  assert_int_equal(r[i].u.message.text.len, 0);
  i++;
  assert_int_equal(r[i].type, TMK_REC_MESSAGE);
  assert_int_equal(r[i].u.message.site, 0);
  assert_int_equal(r[i].u.message.severity, TMK_SEV_TRACE);
  assert_true(r[i].u.message.time == t0 + 60);
  assert_true(str_is(r[i].u.message.text, "héllo\n\"w\"", 11));
  i++;
  assert_int_equal(r[i].type, TMK_REC_MESSAGE);
  assert_true(str_is(r[i].u.message.text, g_long_text, TMK_PROTO_MAX_STRING));
  i++;
  assert_int_equal(r[i].type, TMK_REC_FRAME);
  assert_int_equal(r[i].thread, 0);
  assert_true(r[i].u.frame.time == t0 + 16666667);
  i++;
  assert_int_equal(i, d->n);
}

static void round_trip_all(int big_endian, int lz4, uint64_t t0) {
  pt_enc* e = pt_enc_new(8000, big_endian, lz4);
  pt_decoded d;
  size_t i;
  for (i = 0; i < sizeof g_long_text; i++) g_long_text[i] = (char)('a' + i % 26);
  for (i = 0; i < sizeof g_long_payload; i++) g_long_payload[i] = (char)i;
  assert_non_null(e);
  put_all_kinds(&e->w, t0);
  assert_int_equal(e->w.zones, 3);
  assert_true(pt_enc_finish(e, SESSION, 77) > 0);
  assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
  assert_int_equal(d.hdr.version, TMK_PROTO_VERSION);
  assert_int_equal(d.hdr.type, TMK_PKT_DATA);
  assert_true(d.hdr.session_id == SESSION);
  assert_true(d.hdr.seq == 77);
  assert_int_equal((d.hdr.flags & TMK_PKT_F_BIG_ENDIAN) != 0, big_endian);
  /* the long repeated strings compress: with LZ4 state the packet must be compressed */
  assert_int_equal((d.hdr.flags & TMK_PKT_F_LZ4) != 0, e->lz4 != NULL);
  if (e->lz4) assert_true((uint32_t)e->pkt_len < d.hdr.raw_len);
  else assert_int_equal((uint32_t)e->pkt_len, d.hdr.header_len + e->w.len);
  check_all_kinds(&d, t0);
  pt_decoded_free(&d);
  pt_enc_free(e);
}

static void test_all_records_le(void** state) {
  (void)state;
  round_trip_all(0, 0, 1000000);
  round_trip_all(0, 0, 5);
  round_trip_all(0, 0, ~(uint64_t)0 - 1000);
}
static void test_all_records_be(void** state) {
  (void)state;
  round_trip_all(1, 0, 1000000);
  round_trip_all(1, 0, 0xFFFFFFF0u);
}
static void test_all_records_lz4(void** state) {
  (void)state;
  if (tmk_proto_lz4_state_size() == 0) skip();
  round_trip_all(0, 1, 1000000);
  round_trip_all(1, 1, 0x100000010ull);
}

/* An incompressible body must go out uncompressed even with LZ4 state (§2: only when it saves). */
static void test_lz4_only_when_it_saves(void** state) {
  pt_enc* e;
  pt_decoded d;
  uint64_t rng = 5;
  char text[200];
  size_t i;
  (void)state;
  if (tmk_proto_lz4_state_size() == 0) skip();
  e = pt_enc_new(1161, 0, 1);
  assert_non_null(e);
  for (i = 0; i < sizeof text; i++) text[i] = (char)pt_rand(&rng);
  assert_int_equal(tmk_proto_put_message(&e->w, 0, 1, 1, 5, text, sizeof text), 0);
  assert_true(pt_enc_finish(e, 1, 0) > 0);
  assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
  assert_int_equal(d.hdr.flags & TMK_PKT_F_LZ4, 0);
  assert_int_equal(d.n, 1);
  assert_true(str_is(d.recs[0].u.message.text, text, sizeof text));
  pt_decoded_free(&d);
  pt_enc_free(e);
}

/* An empty writer still makes a valid packet with no records. */
static void test_empty_packet(void** state) {
  pt_enc* e = pt_enc_new(1161, -1, 1);
  pt_decoded d;
  (void)state;
  assert_non_null(e);
  assert_true(tmk_proto_writer_empty(&e->w));
  assert_true(pt_enc_finish(e, 42, 3) > 0);
  assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
  assert_int_equal(d.n, 0);
  assert_true(d.hdr.seq == 3 && d.hdr.session_id == 42);
  pt_decoded_free(&d);
  /* a finished writer takes no more puts until reset, and finishes again to the same bytes */
  {
    uint8_t again[64];
    int len = e->pkt_len;
    assert_int_equal(tmk_proto_put_frame(&e->w, 0, 1), TMK_ESTATE);
    assert_int_equal(tmk_proto_finish(&e->w, 42, 3, again, sizeof again, e->lz4), len);
    assert_memory_equal(again, e->pkt, (size_t)len);
  }
  tmk_proto_writer_reset(&e->w);
  assert_int_equal(tmk_proto_put_frame(&e->w, 0, 1), 0);
  assert_false(tmk_proto_writer_empty(&e->w));
  tmk_proto_writer_reset(&e->w);
  assert_true(tmk_proto_writer_empty(&e->w));
  assert_int_equal(e->w.len, 2); /* an empty body is the two stream lengths, 0 and 0 */
  assert_int_equal(e->w.records, 0);
  pt_enc_free(e);
}

/* The writer's byte-order default is the host's, and reset keeps what the caller chose. */
static void test_writer_byte_order(void** state) {
  uint8_t body[256];
  tmk_proto_writer w;
  (void)state;
  assert_int_equal(tmk_proto_writer_init(&w, body, sizeof body), 0);
  assert_int_equal(w.big_endian != 0, tmk_proto_host_big_endian());
  w.big_endian = !tmk_proto_host_big_endian();
  tmk_proto_writer_reset(&w);
  assert_int_equal(w.big_endian != 0, !tmk_proto_host_big_endian());
  assert_int_equal(tmk_proto_writer_init(&w, NULL, 100), TMK_EINVAL);
}

/* ---- writer limits ------------------------------------------------------------------------- */

static void test_writer_rejects_bad_values(void** state) {
  pt_enc* e = pt_enc_new(4000, -1, 0);
  static char big[TMK_PROTO_MAX_STRING + 1];
  tmk_proto_site s;
  uint32_t len0;
  (void)state;
  assert_non_null(e);
  assert_int_equal(tmk_proto_put_frame(&e->w, 0, 100), 0);
  len0 = e->w.len;
  memset(&s, 0, sizeof s);
  s.id = 0; /* ids start at 1 */
  s.name.ptr = "x";
  s.name.len = 1;
  assert_true(tmk_proto_put_site(&e->w, &s) < 0);
  s.id = 1;
  s.severity = TMK_SEV_COUNT;
  assert_true(tmk_proto_put_site(&e->w, &s) < 0);
  s.severity = 0;
  s.kind = TMK_SITE_KIND_COUNT;
  assert_true(tmk_proto_put_site(&e->w, &s) < 0);
  s.kind = 0;
  s.color = 0x1000000;
  assert_true(tmk_proto_put_site(&e->w, &s) < 0);
  s.color = 0;
  s.name.ptr = big;
  s.name.len = TMK_PROTO_MAX_STRING + 1;
  assert_true(tmk_proto_put_site(&e->w, &s) < 0);
  assert_true(tmk_proto_put_message(&e->w, 0, 0, 0, 1, big, sizeof big) < 0);
  assert_true(tmk_proto_put_message(&e->w, 0, TMK_SEV_COUNT, 0, 1, "x", 1) < 0);
  assert_true(tmk_proto_put_marker(&e->w, 0, 1, 1, big, TMK_PROTO_MAX_PAYLOAD + 1) < 0);
  assert_true(tmk_proto_put_thread_name(&e->w, 1, big, sizeof big) < 0);
  assert_true(tmk_proto_put_team(&e->w, 1, big, sizeof big) < 0);
  assert_true(tmk_proto_put_team(&e->w, TMK_PROTO_MAX_TEAMS, "x", 1) < 0);
  /* nothing of the refused records reached the body */
  assert_int_equal(e->w.len, len0);
  assert_int_equal(e->w.records, 1);
  assert_int_equal(e->w.zones, 0);
  pt_enc_free(e);
}

/* ---- all-or-nothing on TMK_ENOSPC ------------------------------------------------------------ */

enum { OP_SITE, OP_THREAD, OP_ZONES, OP_MARKER, OP_FRAME, OP_PLOT_I, OP_PLOT_D, OP_MESSAGE,
       OP_THREAD_NAME, OP_DROPS, OP_CLOCK, OP_TEAM, OP_COUNT };

static int do_op(tmk_proto_writer* w, int op) {
  static const tmk_proto_zone z[4] = {{5000, 900, 2, 0}, {5010, 100, 3, 1}, {5120, 40, 3, 1},
                                      {5200, 600, 4, 1}};
  tmk_proto_site s;
  switch (op) {
    case OP_SITE:
      memset(&s, 0, sizeof s);
      s.id = 300;
      s.kind = TMK_SITE_ZONE;
      s.severity = 2;
      s.verbosity = 0x10;
      s.color = 0xAABBCC;
      s.line = 1234;
      s.name.ptr = "Renderer::DrawScene";
      s.name.len = 19;
      s.file.ptr = "render.c";
      s.file.len = 8;
      return tmk_proto_put_site(w, &s);
    case OP_THREAD: return tmk_proto_put_thread(w, 70000);
    case OP_ZONES: return tmk_proto_put_zones(w, z, 4);
    case OP_MARKER: return tmk_proto_put_marker(w, 0, 9, 123456789, "payload!", 8);
    case OP_FRAME: return tmk_proto_put_frame(w, 0, 99999999999ull);
    case OP_PLOT_I: return tmk_proto_put_plot_i(w, 3, 7000, -123456789012345ll);
    case OP_PLOT_D: return tmk_proto_put_plot_d(w, 3, 7000, 3.25);
    case OP_MESSAGE: return tmk_proto_put_message(w, 0, 3, 1, 8000, "hello there, world", 18);
    case OP_THREAD_NAME: return tmk_proto_put_thread_name(w, 4, "Audio mixer", 11);
    case OP_DROPS: return tmk_proto_put_drops(w, TMK_DROP_SEND_FAILED, 1ull << 40);
    case OP_CLOCK: return tmk_proto_put_clock(w, 1ull << 50, 1763776000123456789ull);
    case OP_TEAM: return tmk_proto_put_team(w, 17, "gameplay", 8);
  }
  return TMK_EINVAL;
}

static void assert_writer_same(const tmk_proto_writer* a, const tmk_proto_writer* b) {
  assert_true(a->buf == b->buf);
  assert_int_equal(a->cap, b->cap);
  assert_int_equal(a->len, b->len);
  assert_int_equal(a->a_end, b->a_end);
  assert_int_equal(a->b_start, b->b_start);
  assert_int_equal(a->sealed, b->sealed);
  assert_int_equal(a->records, b->records);
  assert_int_equal(a->zones, b->zones);
  assert_true(a->has_base == b->has_base);
  if (a->has_base) assert_true(a->base_time == b->base_time);
  assert_int_equal(a->big_endian, b->big_endian);
  assert_int_equal(a->thread, b->thread);
  assert_int_equal(a->root_depth, b->root_depth);
  assert_true(a->zone_cursor == b->zone_cursor);
  assert_true(a->event_cursor == b->event_cursor);
  assert_memory_equal(a->predict, b->predict, sizeof a->predict);
  assert_memory_equal(a->nstate, b->nstate, sizeof a->nstate);
}

/* For every op, after earlier content that leaves every amount of room from plenty to none: the
 * put either succeeds or returns TMK_ENOSPC leaving writer and body bytes untouched, and the
 * packet finished after a refused put decodes to exactly the earlier records. */
static void test_put_all_or_nothing(void** state) {
  static char filler[200];
  int op, prefix;
  (void)state;
  memset(filler, 'f', sizeof filler);
  for (op = 0; op < OP_COUNT; op++) {
    for (prefix = 0; prefix < 2; prefix++) {
      size_t fill;
      int saw_nospc = 0, saw_ok = 0;
      for (fill = 0; fill <= 120; fill++) {
        pt_enc* e = pt_enc_new(128, -1, 0);
        tmk_proto_writer before;
        uint8_t body_before[128];
        uint32_t recs_before;
        int rc;
        pt_decoded d;
        assert_non_null(e);
        if (prefix) {
          static const tmk_proto_zone z0[2] = {{4200, 30, 2, 0}, {4210, 10, 40, 1}};
          if (tmk_proto_put_frame(&e->w, 0, 4000) != 0 || tmk_proto_put_plot_i(&e->w, 3, 4100, 5) != 0 ||
              tmk_proto_put_zones(&e->w, z0, 2) != 2) {
            pt_enc_free(e);
            continue;
          }
        }
        if (tmk_proto_put_message(&e->w, 0, 3, 1, 4300, filler, fill) != 0) {
          pt_enc_free(e);
          continue;
        }
        before = e->w;
        memcpy(body_before, e->body, sizeof body_before);
        recs_before = e->w.records;
        rc = do_op(&e->w, op);
        if (rc == TMK_ENOSPC || (op == OP_ZONES && rc == 0)) {
          saw_nospc = 1;
          assert_writer_same(&before, &e->w);
          /* the used parts of the body: record stream at the front, numbers at the back */
          assert_memory_equal(body_before, e->body, before.a_end);
          assert_memory_equal(body_before + before.b_start, e->body + before.b_start,
                              before.cap - before.b_start);
          assert_true(pt_enc_finish(e, 1, 0) > 0);
          assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
          assert_int_equal(d.n, recs_before);
          pt_decoded_free(&d);
        } else {
          size_t want;
          if (op == OP_ZONES) {
            assert_in_range(rc, 1, 4);
            want = recs_before + (size_t)rc;
            if (rc == 4) saw_ok = 1;
          } else {
            assert_int_equal(rc, 0);
            saw_ok = 1;
            want = recs_before + (op == OP_THREAD ? 0 : 1);
          }
          assert_true(pt_enc_finish(e, 1, 0) > 0);
          assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
          assert_int_equal(d.n, want);
          pt_decoded_free(&d);
        }
        pt_enc_free(e);
      }
      if (!saw_nospc || !saw_ok) fail_msg("op %d prefix %d: nospc %d ok %d", op, prefix, saw_nospc, saw_ok);
    }
  }
}

/* put_zones on a nearly full packet returns a count and those zones decode; the rest go in the
 * next packet (the full split tests live in test_zones.c). */
static void test_put_zones_partial_counts(void** state) {
  tmk_proto_zone z[64];
  size_t i, done = 0;
  int packets = 0;
  pt_enc* e = pt_enc_new(64, -1, 0);
  (void)state;
  assert_non_null(e);
  for (i = 0; i < 64; i++) {
    z[i].site = (uint32_t)(1 + i % 5);
    z[i].depth = 0;
    z[i].start = 1000 + i * 100;
    z[i].duration = 50 + i;
  }
  while (done < 64) {
    pt_decoded d;
    int rc = tmk_proto_put_zones(&e->w, z + done, 64 - done);
    assert_true(rc > 0); /* an empty 64-byte body always takes at least one zone */
    assert_int_equal(e->w.zones, (uint32_t)rc);
    assert_true(pt_enc_finish(e, 1, (uint64_t)packets) > 0);
    assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
    assert_int_equal(d.n, (size_t)rc);
    for (i = 0; i < (size_t)rc; i++) {
      assert_int_equal(d.recs[i].type, TMK_REC_ZONE);
      assert_true(d.recs[i].u.zone.start == z[done + i].start);
      assert_true(d.recs[i].u.zone.duration == z[done + i].duration);
    }
    pt_decoded_free(&d);
    done += (size_t)rc;
    tmk_proto_writer_reset(&e->w);
    packets++;
  }
  assert_true(packets > 1);
  pt_enc_free(e);
}

/* ---- control packets (§6) -------------------------------------------------------------------- */

static int open_pkt(tmk_proto_reader* r, const uint8_t* p, int len) {
  assert_true(len > 0);
  return tmk_proto_open(r, p, (size_t)len, NULL, 0);
}

/* Every strict prefix of a control packet must fail: in the header with ETRUNC from open, in the
 * body with ETRUNC from the read function. */
static void check_prefixes(const uint8_t* p, int len, int type) {
  int k;
  for (k = 0; k < len; k++) {
    tmk_proto_reader r;
    uint8_t* copy = (uint8_t*)malloc((size_t)k + 1);
    int rc;
    assert_non_null(copy);
    memcpy(copy, p, (size_t)k);
    rc = tmk_proto_open(&r, copy, (size_t)k, NULL, 0);
    if (rc == 0) {
      union {
        tmk_proto_hello h;
        tmk_proto_welcome w;
        tmk_proto_reject rj;
        tmk_proto_control c;
      } u;
      switch (type) {
        case TMK_PKT_HELLO: rc = tmk_proto_read_hello(&r, &u.h); break;
        case TMK_PKT_WELCOME: rc = tmk_proto_read_welcome(&r, &u.w); break;
        case TMK_PKT_REJECT: rc = tmk_proto_read_reject(&r, &u.rj); break;
        case TMK_PKT_CONTROL: rc = tmk_proto_read_control(&r, &u.c); break;
        default: rc = 0;
      }
    }
    if (rc != TMK_ETRUNC) fail_msg("type %d prefix %d of %d: got %d, want ETRUNC", type, k, len, rc);
    free(copy);
  }
}

static tmk_proto_str mk(const char* s) {
  tmk_proto_str r;
  r.ptr = s;
  r.len = (uint32_t)strlen(s);
  return r;
}

static void test_hello(void** state) {
  uint8_t pkt[4096], buf[4096];
  tmk_proto_hello h, got;
  tmk_proto_reader r;
  int len, k;
  (void)state;
  memset(&h, 0, sizeof h);
  h.proto_version = TMK_PROTO_VERSION;
  h.agent_version = mk("0.1.0");
  h.program = mk("Super Game (release)");
  h.platform = mk("wii");
  h.arch = mk("ppc");
  h.big_endian = 1;
  h.pointer_size = 4;
  h.timer_freq = 60750000;
  h.caps = TMK_CAP_CONTROL | TMK_CAP_TCP;
  h.max_packet = 1200;
  len = tmk_proto_encode_hello(pkt, sizeof pkt, SESSION, &h);
  assert_true(len > 0);
  assert_int_equal(open_pkt(&r, pkt, len), 0);
  assert_int_equal(r.hdr.type, TMK_PKT_HELLO);
  assert_true(r.hdr.session_id == SESSION);
  assert_true(r.hdr.seq == 0 && r.hdr.base_time == 0);
  assert_int_equal(r.hdr.flags & TMK_PKT_F_LZ4, 0);
  assert_int_equal(tmk_proto_read_hello(&r, &got), 0);
  assert_int_equal(got.proto_version, TMK_PROTO_VERSION);
  assert_true(str_is(got.agent_version, "0.1.0", 5));
  assert_true(str_is(got.program, "Super Game (release)", 20));
  assert_true(str_is(got.platform, "wii", 3));
  assert_true(str_is(got.arch, "ppc", 3));
  assert_int_equal(got.big_endian, 1);
  assert_int_equal(got.pointer_size, 4);
  assert_true(got.timer_freq == 60750000);
  assert_int_equal(got.caps, TMK_CAP_CONTROL | TMK_CAP_TCP);
  assert_int_equal(got.max_packet, 1200);
  /* the other readers refuse a HELLO */
  {
    tmk_proto_welcome w;
    tmk_proto_control c;
    assert_int_equal(open_pkt(&r, pkt, len), 0);
    assert_int_equal(tmk_proto_read_welcome(&r, &w), TMK_ETYPE);
    assert_int_equal(open_pkt(&r, pkt, len), 0);
    assert_int_equal(tmk_proto_read_control(&r, &c), TMK_ETYPE);
  }
  check_prefixes(pkt, len, TMK_PKT_HELLO);
  /* bytes after the last field are ignored (§6.1) */
  memcpy(buf, pkt, (size_t)len);
  buf[len] = 0x05;
  buf[len + 1] = 0x99;
  assert_int_equal(open_pkt(&r, buf, len + 2), 0);
  assert_int_equal(tmk_proto_read_hello(&r, &got), 0);
  assert_int_equal(got.max_packet, 1200);
  /* without build/label (an older agent) both read back empty */
  assert_int_equal(got.build.len, 0);
  assert_int_equal(got.label.len, 0);
  /* build and label travel as optional trailing fields (§6.1); more bytes after them are
   * still ignored, and a tail that is not two strings leaves them empty */
  {
    tmk_proto_hello h2 = h;
    int len2;
    h2.build = mk("4121");
    h2.label = mk("nightly dev-kit 7");
    len2 = tmk_proto_encode_hello(buf, sizeof buf, SESSION, &h2);
    assert_true(len2 > len);
    assert_int_equal(open_pkt(&r, buf, len2), 0);
    assert_int_equal(tmk_proto_read_hello(&r, &got), 0);
    assert_true(str_is(got.build, "4121", 4));
    assert_true(str_is(got.label, "nightly dev-kit 7", 17));
    assert_int_equal(got.max_packet, 1200);
    /* cut inside the optional tail: the HELLO still reads, without build and label */
    for (k = len; k < len2; k++) {
      assert_int_equal(open_pkt(&r, buf, k), 0);
      assert_int_equal(tmk_proto_read_hello(&r, &got), 0);
      assert_int_equal(got.max_packet, 1200);
      assert_int_equal(got.label.len, 0);
    }
    buf[len2] = 0x7f;
    assert_int_equal(open_pkt(&r, buf, len2 + 1), 0);
    assert_int_equal(tmk_proto_read_hello(&r, &got), 0);
    assert_true(str_is(got.label, "nightly dev-kit 7", 17));
    h2.label = mk("");
    len2 = tmk_proto_encode_hello(buf, sizeof buf, SESSION, &h2);
    assert_int_equal(open_pkt(&r, buf, len2), 0);
    assert_int_equal(tmk_proto_read_hello(&r, &got), 0);
    assert_true(str_is(got.build, "4121", 4));
    assert_int_equal(got.label.len, 0);
    /* longer than TMK_PROTO_MAX_LABEL: the encoder refuses it */
    h2.build.len = TMK_PROTO_MAX_LABEL + 1;
    h2.build.ptr = (const char*)pkt;
    assert_int_equal(tmk_proto_encode_hello(buf, sizeof buf, SESSION, &h2), TMK_ETOOBIG);
  }
  /* every output size short of the packet is ENOSPC */
  for (k = 0; k < len; k++) assert_int_equal(tmk_proto_encode_hello(buf, (size_t)k, SESSION, &h), TMK_ENOSPC);
  /* a wrong shibboleth is refused */
  {
    uint8_t* s = (uint8_t*)memchr(pkt, 't', (size_t)len);
    assert_non_null(s);
    assert_memory_equal(s, "telemark", 8);
    memcpy(buf, pkt, (size_t)len);
    buf[s - pkt] = 'T';
    assert_int_equal(open_pkt(&r, buf, len), 0);
    assert_true(tmk_proto_read_hello(&r, &got) < 0);
  }
  /* a timer frequency of 0 is refused (§6.1: > 0) */
  h.timer_freq = 0;
  len = tmk_proto_encode_hello(pkt, sizeof pkt, SESSION, &h);
  if (len > 0) {
    assert_int_equal(open_pkt(&r, pkt, len), 0);
    assert_true(tmk_proto_read_hello(&r, &got) < 0);
  }
}

static void test_welcome_reject_control_bye(void** state) {
  uint8_t pkt[2048];
  tmk_proto_reader r;
  int len, k;
  (void)state;
  {
    tmk_proto_welcome w, got;
    w.proto_version = TMK_PROTO_VERSION;
    w.relay_version = mk("telemark-relay 0.1.0");
    len = tmk_proto_encode_welcome(pkt, sizeof pkt, 7, &w);
    assert_int_equal(open_pkt(&r, pkt, len), 0);
    assert_int_equal(r.hdr.type, TMK_PKT_WELCOME);
    assert_true(r.hdr.session_id == 7);
    assert_int_equal(tmk_proto_read_welcome(&r, &got), 0);
    assert_int_equal(got.proto_version, TMK_PROTO_VERSION);
    assert_true(str_is(got.relay_version, "telemark-relay 0.1.0", 20));
    check_prefixes(pkt, len, TMK_PKT_WELCOME);
    for (k = 0; k < len; k++) assert_int_equal(tmk_proto_encode_welcome(pkt + 1000, (size_t)k, 7, &w), TMK_ENOSPC);
  }
  {
    tmk_proto_reject rj, got;
    rj.reason = TMK_REJECT_VERSION;
    rj.text = mk("relay speaks protocol 1; update the agent");
    len = tmk_proto_encode_reject(pkt, sizeof pkt, ~(uint64_t)0, &rj);
    assert_int_equal(open_pkt(&r, pkt, len), 0);
    assert_int_equal(r.hdr.type, TMK_PKT_REJECT);
    assert_true(r.hdr.session_id == ~(uint64_t)0);
    assert_int_equal(tmk_proto_read_reject(&r, &got), 0);
    assert_int_equal(got.reason, TMK_REJECT_VERSION);
    assert_true(str_is(got.text, rj.text.ptr, rj.text.len));
    check_prefixes(pkt, len, TMK_PKT_REJECT);
    for (k = 0; k < len; k++) assert_int_equal(tmk_proto_encode_reject(pkt + 1000, (size_t)k, 7, &rj), TMK_ENOSPC);
  }
  {
    tmk_proto_control c, got;
    c.seq = 0xFFFFFFFFu;
    c.severity = TMK_SEV_TRACE;
    c.verbosity = 0xDEADBEEFu;
    len = tmk_proto_encode_control(pkt, sizeof pkt, 0, &c);
    assert_int_equal(open_pkt(&r, pkt, len), 0);
    assert_int_equal(r.hdr.type, TMK_PKT_CONTROL);
    assert_int_equal(tmk_proto_read_control(&r, &got), 0);
    assert_int_equal(got.seq, 0xFFFFFFFFu);
    assert_int_equal(got.severity, TMK_SEV_TRACE);
    assert_int_equal(got.verbosity, 0xDEADBEEFu);
    check_prefixes(pkt, len, TMK_PKT_CONTROL);
    for (k = 0; k < len; k++) assert_int_equal(tmk_proto_encode_control(pkt + 1000, (size_t)k, 7, &c), TMK_ENOSPC);
    /* severity above 5 is ERANGE (§7): patch the encoded severity byte */
    c.severity = 0;
    len = tmk_proto_encode_control(pkt, sizeof pkt, 0, &c);
    assert_int_equal(open_pkt(&r, pkt, len), 0);
    assert_int_equal(pkt[len - 6], 0); /* body: seq(5) severity(1) verbosity(5) */
    pkt[len - 6] = 6;
    assert_int_equal(open_pkt(&r, pkt, len), 0);
    assert_int_equal(tmk_proto_read_control(&r, &got), TMK_ERANGE);
  }
  {
    len = tmk_proto_encode_bye(pkt, sizeof pkt, 0x55);
    assert_int_equal(open_pkt(&r, pkt, len), 0);
    assert_int_equal(r.hdr.type, TMK_PKT_BYE);
    assert_true(r.hdr.session_id == 0x55);
    assert_int_equal(len, (int)r.hdr.header_len); /* empty body */
    for (k = 0; k < len; k++) assert_int_equal(tmk_proto_encode_bye(pkt + 1000, (size_t)k, 7), TMK_ENOSPC);
  }
}

/* ---- descriptors re-sent and resolved (§5.1) -------------------------------------------------- */

static const char* const k_site_names[] = {"", "Frame", "Update", "Physics", "Render", "Log"};

static void put_sites(tmk_proto_writer* w) {
  uint32_t id;
  for (id = 1; id <= 5; id++) {
    tmk_proto_site s;
    memset(&s, 0, sizeof s);
    s.id = id;
    s.kind = id == 5 ? TMK_SITE_MESSAGE : TMK_SITE_ZONE;
    s.severity = TMK_SEV_INFO;
    s.verbosity = 1;
    s.line = 10 * id;
    s.name = mk(k_site_names[id]);
    s.file = mk("game.c");
    assert_int_equal(tmk_proto_put_site(w, &s), 0);
  }
}

static void put_frame_zones(tmk_proto_writer* w, uint64_t t) {
  tmk_proto_zone z[4];
  z[0].site = 1, z[0].depth = 0, z[0].start = t, z[0].duration = 1000;
  z[1].site = 2, z[1].depth = 1, z[1].start = t + 10, z[1].duration = 300;
  z[2].site = 3, z[2].depth = 2, z[2].start = t + 20, z[2].duration = 200;
  z[3].site = 4, z[3].depth = 1, z[3].start = t + 400, z[3].duration = 500;
  assert_int_equal(tmk_proto_put_zones(w, z, 4), 4);
  assert_int_equal(tmk_proto_put_message(w, 5, TMK_SEV_INFO, 1, t + 950, "", 0), 0);
}

static void feed_packet(pt_resolver* res, pt_enc* e, uint64_t seq) {
  pt_decoded d;
  size_t i;
  assert_true(pt_enc_finish(e, SESSION, seq) > 0);
  tmk_proto_writer_reset(&e->w);
  assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
  for (i = 0; i < d.n; i++) pt_resolver_feed(res, &d.recs[i]);
  pt_decoded_free(&d);
}

static void test_descriptors_resolve_late(void** state) {
  pt_enc* e = pt_enc_new(1161, -1, 1);
  pt_resolver* res = (pt_resolver*)malloc(sizeof *res);
  size_t i;
  (void)state;
  assert_non_null(e);
  assert_non_null(res);
  pt_resolver_init(res);
  /* packet 0 carried the descriptors and was lost; packets 1 and 2 name sites never seen */
  put_frame_zones(&e->w, 1000000);
  feed_packet(res, e, 1);
  put_frame_zones(&e->w, 17666667);
  feed_packet(res, e, 2);
  assert_int_equal(res->nout, 10);
  assert_int_equal(res->unresolved, 10);
  /* packet 3: the periodic re-send of the descriptors, then more data */
  put_sites(&e->w);
  put_frame_zones(&e->w, 34333334);
  feed_packet(res, e, 3);
  assert_int_equal(res->nout, 15);
  assert_int_equal(res->unresolved, 0);
  for (i = 0; i < res->nout; i++) assert_string_equal(res->out[i].name, k_site_names[res->out[i].site]);
  free(res);
  pt_enc_free(e);
}

/* Each packet decodes on its own: losing any packet leaves the others' records unchanged. */
static void test_packets_independent(void** state) {
  pt_enc* e = pt_enc_new(300, -1, 0);
  uint8_t* pkts[8];
  int lens[8];
  pt_decoded alone;
  int i, j;
  (void)state;
  assert_non_null(e);
  for (i = 0; i < 8; i++) {
    if (i % 3 == 0) put_sites(&e->w);
    put_frame_zones(&e->w, 1000 + (uint64_t)i * 16666667);
    assert_int_equal(tmk_proto_put_plot_d(&e->w, 3, 2000 + (uint64_t)i * 16666667, i * 0.5), 0);
    lens[i] = pt_enc_finish(e, SESSION, (uint64_t)i);
    assert_true(lens[i] > 0);
    pkts[i] = (uint8_t*)malloc((size_t)lens[i]);
    assert_non_null(pkts[i]);
    memcpy(pkts[i], e->pkt, (size_t)lens[i]);
    tmk_proto_writer_reset(&e->w);
  }
  for (i = 0; i < 8; i++) {
    tmk_proto_reader r;
    uint8_t scratch[16];
    tmk_proto_record rec;
    assert_int_equal(pt_decode(&alone, pkts[i], (size_t)lens[i]), 0);
    /* the same reader struct, reused after every other packet, gives the same records */
    for (j = 0; j < 8; j++) {
      size_t n = 0;
      if (j == i) continue;
      assert_int_equal(tmk_proto_open(&r, pkts[j], (size_t)lens[j], scratch, 0), 0);
      while (tmk_proto_next(&r, &rec) == 1) n++;
    }
    assert_int_equal(tmk_proto_open(&r, pkts[i], (size_t)lens[i], scratch, 0), 0);
    for (j = 0; (size_t)j < alone.n; j++) {
      assert_int_equal(tmk_proto_next(&r, &rec), 1);
      assert_int_equal(rec.type, alone.recs[j].type);
      if (rec.type == TMK_REC_ZONE) {
        assert_true(rec.u.zone.start == alone.recs[j].u.zone.start);
        assert_true(rec.u.zone.duration == alone.recs[j].u.zone.duration);
        assert_int_equal(rec.u.zone.depth, alone.recs[j].u.zone.depth);
        assert_int_equal(rec.u.zone.site, alone.recs[j].u.zone.site);
      }
    }
    assert_int_equal(tmk_proto_next(&r, &rec), 0);
    pt_decoded_free(&alone);
  }
  for (i = 0; i < 8; i++) free(pkts[i]);
  pt_enc_free(e);
}

/* tmk_proto_put_record takes every record but a zone in the form tmk_proto_next hands it out:
 * putting the decoded records of a packet again gives the same records back. */
static void test_put_record_round_trip(void** state) {
  pt_enc* e = pt_enc_new(8000, 0, 0);
  pt_enc* e2 = pt_enc_new(8000, 0, 0);
  pt_decoded d, d2;
  tmk_proto_record zr;
  size_t i, j = 0;
  uint32_t thread = 0;
  char a[2048], b[2048];
  (void)state;
  assert_non_null(e);
  assert_non_null(e2);
  for (i = 0; i < sizeof g_long_text; i++) g_long_text[i] = (char)('a' + i % 26);
  for (i = 0; i < sizeof g_long_payload; i++) g_long_payload[i] = (char)i;
  put_all_kinds(&e->w, 1000000);
  assert_true(pt_enc_finish(e, SESSION, 1) > 0);
  assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
  for (i = 0; i < d.n; i++) {
    const tmk_proto_record* r = &d.recs[i];
    if (r->type == TMK_REC_ZONE) continue;
    if (r->type >= TMK_REC_MARKER_BEGIN && r->type <= TMK_REC_MESSAGE && r->thread != thread) {
      assert_int_equal(tmk_proto_put_thread(&e2->w, r->thread), 0);
      thread = r->thread;
    }
    assert_int_equal(tmk_proto_put_record(&e2->w, r), 0);
  }
  memset(&zr, 0, sizeof zr);
  zr.type = TMK_REC_ZONE; /* zones go through tmk_proto_put_zones */
  assert_int_equal(tmk_proto_put_record(&e2->w, &zr), TMK_EINVAL);
  assert_int_equal(tmk_proto_put_record(&e2->w, NULL), TMK_EINVAL);
  assert_true(pt_enc_finish(e2, SESSION, 2) > 0);
  assert_int_equal(pt_decode(&d2, e2->pkt, (size_t)e2->pkt_len), 0);
  for (i = 0; i < d.n; i++) {
    if (d.recs[i].type == TMK_REC_ZONE) continue;
    assert_true(j < d2.n);
    tmk_proto_format_record(&d.recs[i], a, sizeof a);
    tmk_proto_format_record(&d2.recs[j++], b, sizeof b);
    assert_string_equal(a, b);
  }
  assert_int_equal(j, d2.n);
  pt_decoded_free(&d);
  pt_decoded_free(&d2);
  pt_enc_free(e);
  pt_enc_free(e2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_records_le),
      cmocka_unit_test(test_all_records_be),
      cmocka_unit_test(test_all_records_lz4),
      cmocka_unit_test(test_lz4_only_when_it_saves),
      cmocka_unit_test(test_empty_packet),
      cmocka_unit_test(test_writer_byte_order),
      cmocka_unit_test(test_writer_rejects_bad_values),
      cmocka_unit_test(test_put_all_or_nothing),
      cmocka_unit_test(test_put_zones_partial_counts),
      cmocka_unit_test(test_hello),
      cmocka_unit_test(test_welcome_reject_control_bye),
      cmocka_unit_test(test_descriptors_resolve_late),
      cmocka_unit_test(test_packets_independent),
      cmocka_unit_test(test_put_record_round_trip),
  };
  return cmocka_run_group_tests_name("proto-records", tests, NULL, NULL);
}
