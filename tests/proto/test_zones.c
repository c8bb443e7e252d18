/* test_zones.c — zone trees through writer and decoder (§5.3): nesting, siblings, unsorted and
 * arbitrary input, nesting deeper than TMK_PROTO_MAX_OPEN, batches split over many packets
 * (every zone exactly once), several threads, and timestamps near 0, near 2^64 and across a
 * 32-bit timer wrap. Also run against TMK_PROTO_TIME32 (proto-zones-t32), without the zones
 * beyond its reach (test_time32.c tests those). */
#include <stdlib.h>
#include <string.h>

#include "proto_util.h"
#include "tmk_proto.h"
#include "tmk_test.h"

#define MAXZ 20000

static tmk_proto_zone g_in[MAXZ], g_out[MAXZ];

/* Encodes zones of one thread into as many packets of body `cap` as needed and decodes them all.
 * Returns the number of packets; zones decoded go to out, their count to nout. */
static int encode_decode(const tmk_proto_zone* z, size_t n, size_t cap, int big_endian, int lz4,
                         uint32_t thread, tmk_proto_zone* out, size_t* nout) {
  pt_enc* e = pt_enc_new(cap, big_endian, lz4);
  size_t done = 0;
  int packets = 0;
  *nout = 0;
  assert_non_null(e);
  while (done < n) {
    pt_decoded d;
    size_t i;
    int rc;
    if (thread) assert_int_equal(tmk_proto_put_thread(&e->w, thread), 0);
    rc = tmk_proto_put_zones(&e->w, z + done, n - done);
    if (rc <= 0) fail_msg("put_zones on an empty %u-byte body returned %d (done %lu of %lu)",
                          (unsigned)cap, rc, (unsigned long)done, (unsigned long)n);
    assert_int_equal(e->w.zones, (uint32_t)rc);
    done += (size_t)rc;
    assert_true(pt_enc_finish(e, 0xABCDEF, (uint64_t)packets) > 0);
    assert_true((size_t)e->pkt_len <= cap + TMK_PROTO_MAX_HEADER);
    if (pt_decode(&d, e->pkt, (size_t)e->pkt_len) != 0)
      fail_msg("packet %d does not decode: %s", packets, tmk_err_name(d.rc));
    for (i = 0; i < d.n; i++) {
      assert_int_equal(d.recs[i].type, TMK_REC_ZONE);
      assert_int_equal(d.recs[i].thread, thread);
      assert_true(*nout < MAXZ);
      out[(*nout)++] = d.recs[i].u.zone;
    }
    assert_int_equal(d.n, (size_t)rc);
    pt_decoded_free(&d);
    tmk_proto_writer_reset(&e->w);
    packets++;
  }
  pt_enc_free(e);
  return packets;
}

/* Round trip in one roomy packet and in small packets, both byte orders, with and without LZ4. */
static void check_round_trip(const tmk_proto_zone* z, size_t n) {
  static const size_t caps[] = {60000, 1161, 200, 64};
  size_t c, nout;
  int mode;
  for (c = 0; c < sizeof caps / sizeof caps[0]; c++) {
    for (mode = 0; mode < 3; mode++) {
      int packets = encode_decode(z, n, caps[c], mode == 1, mode == 2, mode == 1 ? 5 : 0, g_out, &nout);
      if (pt_zone_sets_differ(z, n, g_out, nout) != -1)
        fail_msg("zones differ: cap %u mode %d (%d packets)", (unsigned)caps[c], mode, packets);
      if (c == 0 && n > 0 && n < 1500) assert_int_equal(packets, 1);
    }
  }
}

static size_t add(tmk_proto_zone* z, size_t i, uint32_t site, uint32_t depth, uint64_t start,
                  uint64_t duration) {
  z[i].site = site;
  z[i].depth = depth;
  z[i].start = start;
  z[i].duration = duration;
  return i + 1;
}

static void test_nested_tree(void** state) {
  size_t n = 0;
  (void)state;
  n = add(g_in, n, 1, 0, 1000, 16000); /* Frame */
  n = add(g_in, n, 2, 1, 1020, 5000);  /*   Update */
  n = add(g_in, n, 3, 2, 1040, 1000);  /*     AI */
  n = add(g_in, n, 4, 2, 2060, 3900);  /*     Physics */
  n = add(g_in, n, 5, 3, 2080, 1900);  /*       Broadphase */
  n = add(g_in, n, 6, 3, 4000, 1900);  /*       Solver (ends where Physics ends) */
  n = add(g_in, n, 7, 1, 6100, 9000);  /*   Render */
  n = add(g_in, n, 8, 2, 6120, 100);   /*     Draw */
  n = add(g_in, n, 8, 2, 6240, 100);   /*     Draw */
  n = add(g_in, n, 8, 2, 6360, 104);   /*     Draw */
  n = add(g_in, n, 9, 1, 15200, 0);    /*   Present, zero length */
  check_round_trip(g_in, n);
}

static void test_siblings_and_same_start(void** state) {
  size_t n = 0, i;
  (void)state;
  for (i = 0; i < 300; i++) n = add(g_in, n, (uint32_t)(1 + i % 7), 0, 5000 + i * 53, 40 + i % 5);
  /* a parent and its first child start at the same tick, and a child ends with its parent */
  n = add(g_in, n, 10, 0, 100000, 500);
  n = add(g_in, n, 11, 1, 100000, 500);
  n = add(g_in, n, 12, 2, 100000, 0);
  n = add(g_in, n, 12, 2, 100000, 0); /* the same zone twice is two zones */
  check_round_trip(g_in, n);
}

/* Batches that begin inside zones still open on the agent: depths start above 0. */
static void test_tree_not_at_depth_zero(void** state) {
  size_t n = 0;
  (void)state;
  n = add(g_in, n, 3, 4, 9000, 300);
  n = add(g_in, n, 4, 5, 9010, 100);
  n = add(g_in, n, 3, 4, 9400, 300);
  n = add(g_in, n, 2, 2, 9800, 10);
  n = add(g_in, n, 9, 31, 10000, 1);
  n = add(g_in, n, 9, 1000000, 10005, 1);
  check_round_trip(g_in, n);
  /* the deepest depth a zone can have, with a zone of depth 0 inside its interval */
  n = 0;
  n = add(g_in, n, 1, 0xFFFFFFFFu, 20000, 100);
  n = add(g_in, n, 2, 0, 20010, 10);
  n = add(g_in, n, 3, 0xFFFFFFFEu, 20200, 100);
  n = add(g_in, n, 4, 0xFFFFFFFFu, 20210, 10);
  check_round_trip(g_in, n);
}

/* A random but consistent game-like tree, written in pre-order (sorted by start, then depth). */
static size_t gen_tree(tmk_proto_zone* z, size_t n, size_t cap, uint64_t* rng, uint32_t depth,
                       uint32_t maxdepth, uint64_t* t) {
  size_t me = n, kids, k;
  if (n >= cap) return n;
  n = add(z, n, (uint32_t)(1 + pt_rand(rng) % 40), depth, *t, 0);
  *t += 5 + pt_rand(rng) % 60;
  kids = depth + 1 < maxdepth ? (size_t)(pt_rand(rng) % 6) : 0;
  for (k = 0; k < kids && n < cap; k++) {
    n = gen_tree(z, n, cap, rng, depth + 1, maxdepth, t);
    *t += pt_rand(rng) % 80;
  }
  if (kids == 0) *t += pt_rand(rng) % 5000;
  z[me].duration = *t - z[me].start;
  *t += 1 + pt_rand(rng) % 40;
  return n;
}

static size_t gen_forest(tmk_proto_zone* z, size_t cap, uint64_t seed, uint64_t t0) {
  uint64_t rng = seed, t = t0;
  size_t n = 0;
  while (n < cap - 50) n = gen_tree(z, n, cap - 50, &rng, 0, 2 + (uint32_t)(pt_rand(&rng) % 6), &t);
  return n;
}

static void test_random_trees(void** state) {
  uint64_t seed;
  (void)state;
  for (seed = 1; seed <= 6; seed++) {
    size_t n = gen_forest(g_in, 400 + 300 * (size_t)seed, seed, seed * 1000000007ull);
    check_round_trip(g_in, n);
  }
}

static void shuffle(tmk_proto_zone* z, size_t n, uint64_t seed) {
  size_t i;
  for (i = n; i > 1; i--) {
    size_t j = (size_t)(pt_rand(&seed) % i);
    tmk_proto_zone t = z[i - 1];
    z[i - 1] = z[j];
    z[j] = t;
  }
}

static void test_unsorted_input(void** state) {
  size_t n;
  (void)state;
  n = gen_forest(g_in, 1000, 77, 123456);
  shuffle(g_in, n, 5);
  check_round_trip(g_in, n);
  /* reversed pre-order: children before parents */
  n = gen_forest(g_in, 500, 78, 5);
  {
    size_t i;
    for (i = 0; i < n / 2; i++) {
      tmk_proto_zone t = g_in[i];
      g_in[i] = g_in[n - 1 - i];
      g_in[n - 1 - i] = t;
    }
  }
  check_round_trip(g_in, n);
}

#if !TMK_PROTO_TIME32 /* (beyond a 32-bit encoder's reach) */
/* Values that form no tree at all: any start, duration, depth and site. "Any order is valid". */
static void test_arbitrary_zones(void** state) {
  uint64_t rng = 2024;
  size_t i, n = 2000;
  (void)state;
  for (i = 0; i < n; i++) {
    uint64_t r = pt_rand(&rng);
    g_in[i].site = (uint32_t)(1 + pt_rand(&rng) % (r & 1 ? 200 : 0xFFFFFFFEu));
    g_in[i].depth = (uint32_t)(r & 2 ? pt_rand(&rng) % 40 : pt_rand(&rng));
    g_in[i].start = r & 4 ? pt_rand(&rng) : 1000 + pt_rand(&rng) % 100000;
    g_in[i].duration = r & 8 ? pt_rand(&rng) : pt_rand(&rng) % 1000;
  }
  check_round_trip(g_in, n);
}
#endif

static void test_deep_nesting(void** state) {
  static const uint32_t depths[] = {TMK_PROTO_MAX_OPEN - 1, TMK_PROTO_MAX_OPEN,
                                    TMK_PROTO_MAX_OPEN + 1, 40, 100, 300};
  size_t k;
  (void)state;
  for (k = 0; k < sizeof depths / sizeof depths[0]; k++) {
    size_t n = 0;
    uint32_t d;
    /* a chain, each level also with a leaf before its child */
    for (d = 0; d < depths[k]; d++) {
      n = add(g_in, n, 1 + d % 50, d, 1000 + 20 * (uint64_t)d, 100000 - 40 * (uint64_t)d);
      n = add(g_in, n, 60, d + 1, 1000 + 20 * (uint64_t)d + 2, 3);
    }
    check_round_trip(g_in, n);
    /* a bare chain */
    n = 0;
    for (d = 0; d < depths[k]; d++) n = add(g_in, n, 7, d, 500 + (uint64_t)d, 10000 - 2 * (uint64_t)d);
    check_round_trip(g_in, n);
  }
}

/* A large batch split over many small packets: every zone decoded exactly once, each packet
 * standing alone. */
static void test_split_across_packets(void** state) {
  static const size_t caps[] = {64, 80, 97, 128, 300, 1161};
  size_t n, nout, c;
  (void)state;
  n = gen_forest(g_in, 5000, 4242, 987654321);
  for (c = 0; c < sizeof caps / sizeof caps[0]; c++) {
    int packets = encode_decode(g_in, n, caps[c], 0, 0, 0, g_out, &nout);
    assert_int_equal(pt_zone_sets_differ(g_in, n, g_out, nout), -1);
    assert_true(packets > 1);
  }
}

/* The packets a batch is cut into, byte for byte, pinned by a hash: each packet holds exactly as
 * many zones as fit (§5.3's exact end-of-packet count), and the -Os encoder (proto-zones-small,
 * which counts by writing to scratch) must cut and write them as the speed build does. */
static uint64_t packets_hash(const tmk_proto_zone* z, size_t n, size_t cap) {
  pt_enc* e = pt_enc_new(cap, 0, 0);
  uint64_t h = 14695981039346656037ull; /* FNV-1a */
  size_t done = 0;
  int packets = 0, i;
  assert_non_null(e);
  while (done < n) {
    int rc = tmk_proto_put_zones(&e->w, z + done, n - done);
    assert_true(rc > 0);
    done += (size_t)rc;
    assert_true(pt_enc_finish(e, 0xABCDEF, (uint64_t)packets) > 0);
    for (i = 0; i < e->pkt_len; i++) h = (h ^ e->pkt[i]) * 1099511628211ull;
    h = (h ^ (uint64_t)rc) * 1099511628211ull;
    tmk_proto_writer_reset(&e->w);
    packets++;
  }
  pt_enc_free(e);
  return h;
}

static void test_packet_bytes_pinned(void** state) {
  static const size_t caps[] = {64, 80, 97, 128, 300, 1161};
  uint64_t h = 0;
  size_t n, c;
  (void)state;
  n = gen_forest(g_in, 5000, 4242, 987654321);
  for (c = 0; c < sizeof caps / sizeof caps[0]; c++) h = h * 31u + packets_hash(g_in, n, caps[c]);
  /* unsorted input: AT records, long closes and sites past the short tags */
  n = gen_forest(g_in, 3000, 91, 0xFFFFFFFFull - 5000);
  shuffle(g_in, n, 17);
  for (c = 0; c < n; c += 7) g_in[c].site += 200;
  for (c = 0; c < sizeof caps / sizeof caps[0]; c++) h = h * 31u + packets_hash(g_in, n, caps[c]);
  if (h != 0x1eba42f0d7857171ull)
    fail_msg("packet bytes changed: hash 0x%016llx", (unsigned long long)h);
}

/* Zones of several threads interleaved in one packet keep their thread. */
static void test_threads(void** state) {
  pt_enc* e = pt_enc_new(60000, -1, 0);
  pt_decoded d;
  size_t na, nb, i;
  uint32_t th;
  (void)state;
  assert_non_null(e);
  na = gen_forest(g_in, 300, 1, 5000);
  nb = gen_forest(g_in + na, 300, 2, 7000);
  assert_int_equal(tmk_proto_put_thread(&e->w, 1), 0);
  assert_int_equal(tmk_proto_put_zones(&e->w, g_in, na / 2), (int)(na / 2));
  assert_int_equal(tmk_proto_put_thread(&e->w, 2), 0);
  assert_int_equal(tmk_proto_put_zones(&e->w, g_in + na, nb), (int)nb);
  assert_int_equal(tmk_proto_put_thread(&e->w, 1), 0);
  assert_int_equal(tmk_proto_put_zones(&e->w, g_in + na / 2, na - na / 2), (int)(na - na / 2));
  assert_true(pt_enc_finish(e, 1, 0) > 0);
  assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
  for (th = 1; th <= 2; th++) {
    size_t nout = pt_zones_of(&d, g_out, MAXZ, th);
    if (th == 1) assert_int_equal(pt_zone_sets_differ(g_in, na, g_out, nout), -1);
    else assert_int_equal(pt_zone_sets_differ(g_in + na, nb, g_out, nout), -1);
  }
  for (i = 0; i < d.n; i++) assert_true(d.recs[i].thread == 1 || d.recs[i].thread == 2);
  assert_int_equal(d.n, na + nb);
  pt_decoded_free(&d);
  pt_enc_free(e);
}

static void test_time_near_zero(void** state) {
  size_t n = 0;
  (void)state;
  n = add(g_in, n, 1, 0, 0, 0);
  n = add(g_in, n, 1, 0, 0, 10);
  n = add(g_in, n, 2, 1, 0, 0);
  n = add(g_in, n, 2, 1, 1, 9);
  n = add(g_in, n, 3, 0, 10, 1);
  check_round_trip(g_in, n);
}

static void test_time_near_2_64(void** state) {
  const uint64_t top = ~(uint64_t)0;
  size_t n = 0;
  (void)state;
  n = add(g_in, n, 1, 0, top - 1000, 1000);
  n = add(g_in, n, 2, 1, top - 900, 100);
  n = add(g_in, n, 3, 1, top - 10, 10);
  n = add(g_in, n, 4, 0, top, 0);
#if !TMK_PROTO_TIME32 /* (beyond a 32-bit encoder's reach: test_time32.c) */
  n = add(g_in, n, 4, 0, top, top); /* longest possible zone */
#endif
  check_round_trip(g_in, n);
  /* a 64-bit wrap inside a tree: times are modulo 2^64 (§3.2) */
  n = 0;
  n = add(g_in, n, 1, 0, top - 15, 48);  /* ends at 32 after the wrap */
  n = add(g_in, n, 2, 1, top - 10, 8);   /* before the wrap */
  n = add(g_in, n, 3, 1, top - 1, 10);   /* across it */
  n = add(g_in, n, 4, 1, 12, 20);        /* after it */
  n = add(g_in, n, 5, 0, 100, 5);
  check_round_trip(g_in, n);
}

/* A 32-bit timer source extended to 64 bits: 0xFFFFFFF0 -> 0x100000010 decodes exactly, for zones
 * and for events. */
static void test_time_32bit_wrap(void** state) {
  pt_enc* e;
  pt_decoded d;
  size_t n = 0, nout;
  (void)state;
  n = add(g_in, n, 1, 0, 0xFFFFFFF0u, 0x20);
  n = add(g_in, n, 2, 1, 0xFFFFFFF2u, 0x0C);
  n = add(g_in, n, 3, 1, 0xFFFFFFFFu, 0x01);
  n = add(g_in, n, 4, 1, 0x100000000ull, 0x08);
  n = add(g_in, n, 5, 1, 0x100000009ull, 0x06);
  check_round_trip(g_in, n);
  e = pt_enc_new(1161, -1, 0);
  assert_non_null(e);
  assert_int_equal(tmk_proto_put_frame(&e->w, 0, 0xFFFFFFF0u), 0);
  assert_int_equal(tmk_proto_put_zones(&e->w, g_in, n), (int)n);
  assert_int_equal(tmk_proto_put_plot_i(&e->w, 8, 0x100000010ull, 1), 0);
  assert_int_equal(tmk_proto_put_marker(&e->w, 0, 9, 0xFFFFFFFFu, NULL, 0), 0);
  assert_int_equal(tmk_proto_put_marker(&e->w, 1, 9, 0x100000000ull, NULL, 0), 0);
  assert_int_equal(tmk_proto_put_frame(&e->w, 0, 0x100000010ull), 0);
  assert_int_equal(tmk_proto_put_message(&e->w, 0, 3, 1, 0xFFFFFFF1u, "wrap", 4), 0);
  assert_true(pt_enc_finish(e, 1, 0) > 0);
  assert_int_equal(pt_decode(&d, e->pkt, (size_t)e->pkt_len), 0);
  nout = pt_zones_of(&d, g_out, MAXZ, 0);
  assert_int_equal(pt_zone_sets_differ(g_in, n, g_out, nout), -1);
  assert_int_equal(d.n, n + 6);
  assert_true(d.recs[0].u.frame.time == 0xFFFFFFF0u);
  assert_true(d.recs[n + 1].u.plot.time == 0x100000010ull);
  assert_true(d.recs[n + 2].u.marker.time == 0xFFFFFFFFu);
  assert_true(d.recs[n + 3].u.marker.time == 0x100000000ull);
  assert_true(d.recs[n + 4].u.frame.time == 0x100000010ull);
  assert_true(d.recs[n + 5].u.message.time == 0xFFFFFFF1u);
  pt_decoded_free(&d);
  pt_enc_free(e);
}

/* §5.3 promises a compact encoding: a leaf in a loop with the duration of its predecessor and a
 * small gap costs a short tag (one byte) and a few bits of number stream (§5.0: the gap about six,
 * the predicted duration one), so under two bytes; the 1001 zones here take 1888. */
static void test_compact_loop(void** state) {
  pt_enc* e = pt_enc_new(60000, -1, 0);
  size_t i, n = 0;
  (void)state;
  assert_non_null(e);
  n = add(g_in, n, 1, 0, 1000000, 1000 * 230 + 100);
  for (i = 0; i < 1000; i++) n = add(g_in, n, 2, 1, 1000000 + 50 + i * 230, 200);
  assert_int_equal(tmk_proto_put_zones(&e->w, g_in, n), (int)n);
  if (e->w.len >= 2 * n) fail_msg("%u zones took %u body bytes", (unsigned)n, (unsigned)e->w.len);
  pt_enc_free(e);
}

#if !TMK_PROTO_TIME32 /* (beyond a 32-bit encoder's reach) */
/* Long runs of huge durations push a context's Rice parameter above 48, where the low bits of a
 * code no longer fit one bit field with what is pending: they must still come out exactly. */
static void test_huge_durations(void** state) {
  uint64_t rng = 62;
  uint64_t t = 1000;
  size_t i, n = 0;
  (void)state;
  for (i = 0; i < 200; i++) {
    uint64_t d = (pt_rand(&rng) >> 2) | (1ull << 61);
    n = add(g_in, n, 1, 0, t, d);
    t += d + (pt_rand(&rng) & 0xFF);
  }
  check_round_trip(g_in, n);
}
#endif

/* Site 0 is a valid zone site: its first leaf in a packet has no prediction (the slots start
 * empty), the next one does. A round trip cannot tell which context was used (writer and reader
 * share the predictor); test_decoder.c's test_site_zero_is_fresh pins that byte for byte. */
static void test_site_zero_leaves(void** state) {
#if TMK_PROTO_TIME32
  const uint64_t t = 1ull << 29; /* within a 32-bit encoder's reach */
#else
  const uint64_t t = 1ull << 40;
#endif
  size_t n = 0;
  (void)state;
  n = add(g_in, n, 0, 0, 100, t);
  n = add(g_in, n, 0, 0, t + 200, 50);
  n = add(g_in, n, 32, 0, t + 300, 70);
  n = add(g_in, n, 0, 0, t + 400, 60);
  check_round_trip(g_in, n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#if !TMK_PROTO_TIME32 /* times, gaps and durations beyond a 32-bit encoder's reach */
      cmocka_unit_test(test_huge_durations),     cmocka_unit_test(test_arbitrary_zones),
#endif
      cmocka_unit_test(test_site_zero_leaves),
      cmocka_unit_test(test_nested_tree),        cmocka_unit_test(test_siblings_and_same_start),
      cmocka_unit_test(test_tree_not_at_depth_zero), cmocka_unit_test(test_random_trees),
      cmocka_unit_test(test_unsorted_input),
      cmocka_unit_test(test_deep_nesting),       cmocka_unit_test(test_split_across_packets),
      cmocka_unit_test(test_packet_bytes_pinned),
      cmocka_unit_test(test_threads),            cmocka_unit_test(test_time_near_zero),
      cmocka_unit_test(test_time_near_2_64),     cmocka_unit_test(test_time_32bit_wrap),
      cmocka_unit_test(test_compact_loop),
  };
  return cmocka_run_group_tests_name("proto-zones", tests, NULL, NULL);
}
