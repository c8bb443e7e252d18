/* test_time32.c — the edges of TMK_PROTO_TIME32's window (tmk_proto.h): zones that start or end
 * just inside and just beyond TMK_PROTO_TIME32_REACH of their packet's base time, a gap longer
 * than 2^31 ticks, a far zone whose low 32 bits look nested, a zone too long for any packet, a
 * base set by an event; times near multiples of 2^32 throughout. Every zone a packet takes
 * decodes exactly; none is lost without a code. Built only against the TMK_PROTO_TIME32
 * protocol (proto-time32-t32). */
#include <string.h>

#include "proto_util.h"
#include "tmk_proto.h"
#include "tmk_test.h"

#if !TMK_PROTO_TIME32
#error "test_time32.c tests the TMK_PROTO_TIME32 build"
#endif

#define R TMK_PROTO_TIME32_REACH
#define MAXZ 64

static tmk_proto_zone g_out[MAXZ];

static tmk_proto_zone zone(uint32_t site, uint32_t depth, uint64_t start, uint64_t duration) {
  tmk_proto_zone z;
  z.site = site;
  z.depth = depth;
  z.start = start;
  z.duration = duration;
  return z;
}

/* Finishes e's packet, decodes it, appends its zones to g_out[*nout...] and resets e. */
static void finish_into(pt_enc* e, size_t* nout, uint64_t seq) {
  pt_decoded d;
  size_t i;
  assert_true(pt_enc_finish(e, 0x7E57, seq) > 0);
  if (pt_decode(&d, e->pkt, (size_t)e->pkt_len) != 0)
    fail_msg("packet %u does not decode: %d", (unsigned)seq, d.rc);
  for (i = 0; i < d.n; i++) {
    if (d.recs[i].type != TMK_REC_ZONE) continue;
    assert_true(*nout < MAXZ);
    g_out[(*nout)++] = d.recs[i].u.zone;
  }
  pt_decoded_free(&d);
  tmk_proto_writer_reset(&e->w);
}

/* Puts z[0..n) as the agent's flusher does (a packet that takes none is sent and the zones tried
 * once more on a fresh one) and expects `packets` packets, every zone decoded exactly. */
static void put_all(const tmk_proto_zone* z, size_t n, int packets) {
  pt_enc* e = pt_enc_new(4000, 0, 0);
  size_t done = 0, nout = 0;
  int sent = 0;
  assert_non_null(e);
  while (done < n) {
    int rc = tmk_proto_put_zones(&e->w, z + done, n - done);
    assert_true(rc >= 0);
    if (rc == 0) {
      assert_false(tmk_proto_writer_empty(&e->w)); /* a fresh packet always takes one */
      finish_into(e, &nout, (uint64_t)sent++);
      continue;
    }
    done += (size_t)rc;
  }
  finish_into(e, &nout, (uint64_t)sent++);
  assert_int_equal(sent, packets);
  assert_int_equal(pt_zone_sets_differ(z, n, g_out, nout), -1);
  pt_enc_free(e);
}

/* Starts and ends within the reach share a packet; one tick further starts the next. */
static void test_reach_forward(void** state) {
  const uint64_t b = 0x3FFFFFFF0ull; /* 16 ticks before 2^34 */
  tmk_proto_zone z[4];
  (void)state;
  z[0] = zone(1, 0, b, 10);
  z[1] = zone(2, 0, b + R - 101, 100); /* ends at b + R - 1: the last tick in reach */
  z[2] = zone(3, 0, b + R - 1, 0);
  put_all(z, 3, 1);
  z[2] = zone(3, 0, b + R - 100, 100); /* ends at b + R: one beyond */
  put_all(z, 3, 2);
  z[2] = zone(3, 0, b + R, 5); /* starts beyond */
  put_all(z, 3, 2);
}

/* A parent that starts before the packet's base (its children came in an earlier batch): as far
 * back as the reach, and no further. */
static void test_reach_backward(void** state) {
  const uint64_t b = 0xFFFFFFFF00000000ull;
  tmk_proto_zone z[3];
  pt_enc* e = pt_enc_new(4000, 0, 0);
  size_t nout = 0;
  (void)state;
  assert_non_null(e);
  z[0] = zone(1, 1, b, 10);
  assert_int_equal(tmk_proto_put_zones(&e->w, z, 1), 1);
  z[1] = zone(2, 0, b - R, R + 20); /* its parent, from b - R to b + 20 */
  assert_int_equal(tmk_proto_put_zones(&e->w, z + 1, 1), 1);
  z[2] = zone(3, 0, b - R - 1, 1); /* one tick further back: the next packet's */
  assert_int_equal(tmk_proto_put_zones(&e->w, z + 2, 1), 0);
  finish_into(e, &nout, 0);
  assert_int_equal(tmk_proto_put_zones(&e->w, z + 2, 1), 1);
  finish_into(e, &nout, 1);
  assert_int_equal(pt_zone_sets_differ(z, 3, g_out, nout), -1);
  pt_enc_free(e);
}

/* Gaps of 2^31 ticks and more between zones, and one that crosses 2^32 on its way: each far zone
 * opens a packet of its own, with its own base, and every time decodes exactly. */
static void test_long_gaps(void** state) {
  tmk_proto_zone z[6];
  (void)state;
  z[0] = zone(1, 0, 0xFFFFF000ull, 100);
  z[1] = zone(2, 0, 0xFFFFF000ull + 0x80000000ull, 7); /* a gap of 2^31 - 100 ticks */
  z[2] = zone(3, 0, 0xFFFFF000ull + 0x180000000ull, 7); /* 2^32 further */
  z[3] = zone(4, 1, 0xFFFFF000ull + 0x180000001ull, 2); /* its child */
  z[4] = zone(5, 0, 0xFFFFF000ull + 0x100000000ull, 3); /* 2^31 back */
  z[5] = zone(6, 0, 0xFFFFF000ull + 0x100000000ull + R - 4, 3);
  put_all(z, 6, 4);
}

/* A next zone 2^32 ticks on, one level deeper: its low 32 bits fall inside the zone before it,
 * which must not make it that zone's child. Both arrive exact, in two packets. */
static void test_far_zone_that_looks_inside(void** state) {
  const uint64_t b = 0x7FFFFFF00ull;
  tmk_proto_zone z[3];
  (void)state;
  z[0] = zone(1, 0, b, 100);
  z[1] = zone(2, 1, b + 0x100000000ull + 10, 5); /* b + 10 modulo 2^32 */
  z[2] = zone(3, 1, b + 0x100000000ull + 20, 5);
  put_all(z, 3, 2);
}

/* A zone of the reach's length or more fits no packet: TMK_ERANGE, and the writer is as it was.
 * One tick shorter is taken. */
static void test_too_long(void** state) {
  pt_enc* e = pt_enc_new(4000, 0, 0);
  tmk_proto_zone z[2];
  size_t nout = 0;
  (void)state;
  assert_non_null(e);
  z[0] = zone(1, 0, 0xFFFFFFF0ull, R);
  z[1] = zone(2, 0, 0xFFFFFFF0ull + R + 10, 1);
  assert_int_equal(tmk_proto_put_zones(&e->w, z, 2), TMK_ERANGE);
  assert_true(tmk_proto_writer_empty(&e->w));
  assert_int_equal(e->w.has_base, 0);
  assert_int_equal(tmk_proto_put_zones(&e->w, z + 1, 1), 1); /* the next one goes on */
  z[0].duration = R - 1;
  assert_int_equal(tmk_proto_put_thread(&e->w, 9), 0);
  assert_int_equal(tmk_proto_put_zones(&e->w, z, 1), 0); /* another base: not this packet */
  finish_into(e, &nout, 0);
  assert_int_equal(tmk_proto_put_thread(&e->w, 9), 0); /* untimed: the zone is still the base */
  assert_int_equal(tmk_proto_put_zones(&e->w, z, 1), 1);
  finish_into(e, &nout, 1);
  assert_int_equal(pt_zone_sets_differ(z, 2, g_out, nout), -1);
  pt_enc_free(e);
}

/* An event record sets the packet's base: the window is around its time, not the first zone's. */
static void test_base_from_an_event(void** state) {
  const uint64_t t = 0x2FFFFFF00ull;
  pt_enc* e = pt_enc_new(4000, 0, 0);
  tmk_proto_zone z[2];
  size_t nout = 0;
  (void)state;
  assert_non_null(e);
  assert_int_equal(tmk_proto_put_frame(&e->w, 0, t), 0);
  z[0] = zone(1, 0, t - R, 50);           /* as far back as the reach */
  z[1] = zone(2, 0, t + R - 3, 3);        /* ends one beyond it */
  assert_int_equal(tmk_proto_put_zones(&e->w, z, 2), 1);
  assert_int_equal(tmk_proto_put_zones(&e->w, z + 1, 1), 0);
  finish_into(e, &nout, 0);
  assert_int_equal(tmk_proto_put_zones(&e->w, z + 1, 1), 1);
  finish_into(e, &nout, 1);
  assert_int_equal(pt_zone_sets_differ(z, 2, g_out, nout), -1);
  pt_enc_free(e);
}

/* A tree whose parent ends beyond the reach: the packet keeps the zones before it, the tree goes
 * whole into the next one, nested as it was. */
static void test_tree_at_the_edge(void** state) {
  const uint64_t b = 0xFFFFFF00ull;
  tmk_proto_zone z[5];
  (void)state;
  z[0] = zone(1, 0, b, 10);
  z[1] = zone(2, 0, b + 100, R - 50); /* ends at b + R + 50 */
  z[2] = zone(3, 1, b + 200, 10);
  z[3] = zone(4, 2, b + 205, 1);
  z[4] = zone(5, 1, b + R, 50);
  put_all(z, 5, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reach_forward),   cmocka_unit_test(test_reach_backward),
      cmocka_unit_test(test_long_gaps),       cmocka_unit_test(test_far_zone_that_looks_inside),
      cmocka_unit_test(test_too_long),
      cmocka_unit_test(test_base_from_an_event), cmocka_unit_test(test_tree_at_the_edge),
  };
  return cmocka_run_group_tests_name("proto-time32", tests, NULL, NULL);
}
