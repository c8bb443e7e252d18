/* zone_digest.c — tmk-proto-zone-digest: encodes seeded pseudo-random zone streams (nested
 * trees, deep nesting, siblings, long and short sites, small and huge gaps, zero durations,
 * timestamps near 2^64, arbitrary unsorted input) into packets of several body sizes and prints
 * one line per stream and size: packets, zones and an FNV-1a hash of every packet's bytes. Built
 * against the protocol at -O2 and at -Os (tests/proto/CMakeLists.txt), whose zone encoders take
 * different paths (the speed build's leaf runs, the size build's single loop); the test
 * proto-zone-digest-same requires both to print the same lines: the same bytes, and packets that
 * end at the same zones. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tmk_proto.h"

#define MAXZ 6000

static uint64_t g_rng;
static uint64_t rnd(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 2685821657736338717ull;
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

static tmk_proto_zone g_z[MAXZ];

static uint32_t site_of(int style) {
  uint64_t r = below(100);
  if (style == 0 || r < 80) return 1 + (uint32_t)below(6);
  if (r < 95) return 1 + (uint32_t)below(300);
  return (uint32_t)(1 + below(0xFFFFFFFEu));
}

static uint64_t step(int style) {
  uint64_t r = below(1000);
  if (r < 900) return below(40);
  if (r < 990) return below(100000);
  return style == 2 ? below(1ull << 62) : below(1ull << 40);
}

/* Zones of a tree starting at t at depth d, at most `left` of them, in start order (parents
 * before their children): returns how many; *end is where the tree's root ends. */
static size_t tree(size_t at, size_t left, uint64_t t, uint32_t d, int style, uint64_t* end) {
  size_t n = 1, kids;
  uint64_t c;
  tmk_proto_zone* z = &g_z[at];
  if (!left) return 0;
  z->start = t;
  z->site = site_of(style);
  z->depth = d;
  c = t + step(style);
  kids = d < 70 && below(3) == 0 ? (size_t)below(d > 30 ? 2 : 6) : 0;
  while (kids-- && n < left) {
    uint64_t e;
    n += tree(at + n, left - n, c, d + 1, style, &e);
    c = e + step(style);
  }
  z->duration = c - t + (below(4) == 0 ? 0 : below(30));
  *end = t + z->duration;
  return n;
}

static size_t stream(uint64_t seed, int style) {
  size_t n = 0;
  uint64_t t;
  g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
  t = style == 2 ? ~0ull - below(1ull << 30) : below(1ull << 20); /* style 2 wraps past 2^64 */
  while (n < MAXZ - 100) {
    uint64_t e;
    uint32_t root = below(8) == 0 ? (uint32_t)below(4) : 0;
    n += tree(n, MAXZ - 100 - n, t, root, style, &e);
    t = below(20) == 0 ? t - below(1000) : e + step(style); /* now and then back in time */
  }
  if (style == 3) /* arbitrary input: depths swapped, children that outlast their parents */
    for (size_t i = 0; i < n; i++) {
      size_t j = (size_t)below(n);
      uint32_t d = g_z[i].depth;
      if (below(4) == 0) {
        g_z[i].depth = g_z[j].depth;
        g_z[j].depth = d;
      }
      if (below(4) == 0) g_z[i].duration += below(200);
    }
  return n;
}

int main(void) {
  static const size_t caps[] = {64, 200, 1161, 16384};
  static uint8_t body[16384], pkt[16384 + TMK_PROTO_MAX_HEADER + 64];
  for (uint64_t seed = 1; seed <= 12; seed++) {
    for (int style = 0; style < 4; style++) {
      size_t n = stream(seed, style);
      for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        tmk_proto_writer w;
        uint64_t h = 1469598103934665603ull;
        size_t done = 0, packets = 0;
        if (tmk_proto_writer_init(&w, body, caps[c]) != 0) return 2;
        while (done < n) {
          int k = tmk_proto_put_zones(&w, g_z + done, n - done), len;
          if (k < 0) {
            printf("seed %llu style %d cap %zu: put_zones %d at zone %zu\n",
                   (unsigned long long)seed, style, caps[c], k, done);
            break;
          }
          done += k ? (size_t)k : 1u; /* a zone that fits no packet is skipped, as the agent does */
          len = tmk_proto_finish(&w, 0x5EED, packets, pkt, sizeof pkt, NULL);
          if (len < 0) return 3;
          for (int i = 0; i < len; i++) h = (h ^ pkt[i]) * 1099511628211ull;
          packets++;
          tmk_proto_writer_reset(&w);
        }
        printf("seed %llu style %d cap %zu: %zu zones, %zu packets, %016llx\n",
               (unsigned long long)seed, style, caps[c], n, packets, (unsigned long long)h);
      }
    }
  }
  return 0;
}
