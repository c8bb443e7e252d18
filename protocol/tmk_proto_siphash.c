/* tmk_proto_siphash.c — packet authentication (§2.1): SipHash-2-4 (Aumasson and Bernstein, 2012)
 * with a 128-bit key, and the seal / check of a keyed packet's 8-byte MAC. Written from the
 * paper's description; tests/proto/test_siphash.c checks it against the paper's 64 vectors. */
#include "tmk_proto_internal.h"

/* =============================================================================================
 * SipHash-2-4
 * =========================================================================================== */

static uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  int i;
  for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

#define TMK__ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

/* n SipRounds on the state v[0..3]. A loop rather than unrolled copies: on a small board the
 * eight rounds of a packet's tail would otherwise be eight copies of 64-bit code. */
static void sip_rounds(uint64_t v[4], int n) {
  while (n-- > 0) {
    v[0] += v[1];
    v[1] = TMK__ROTL(v[1], 13);
    v[1] ^= v[0];
    v[0] = TMK__ROTL(v[0], 32);
    v[2] += v[3];
    v[3] = TMK__ROTL(v[3], 16);
    v[3] ^= v[2];
    v[0] += v[3];
    v[3] = TMK__ROTL(v[3], 21);
    v[3] ^= v[0];
    v[2] += v[1];
    v[1] = TMK__ROTL(v[1], 17);
    v[1] ^= v[2];
    v[2] = TMK__ROTL(v[2], 32);
  }
}

/* Absorbs one 8-byte word: c = 2 compression rounds. */
static void sip_word(uint64_t v[4], uint64_t m) {
  v[3] ^= m;
  sip_rounds(v, 2);
  v[0] ^= m;
}

uint64_t tmk_proto_siphash(const uint8_t key[TMK_PROTO_KEY_LEN], const void* data, size_t len) {
  const uint8_t* p = (const uint8_t*)data;
  const uint8_t* end = p + (len & ~(size_t)7);
  uint64_t k0 = load_le64(key), k1 = load_le64(key + 8), m, v[4];
  unsigned left = (unsigned)(len & 7), i;
  v[0] = k0 ^ 0x736f6d6570736575ull;
  v[1] = k1 ^ 0x646f72616e646f6dull;
  v[2] = k0 ^ 0x6c7967656e657261ull;
  v[3] = k1 ^ 0x7465646279746573ull;
  for (; p != end; p += 8) sip_word(v, load_le64(p));
  m = (uint64_t)(len & 0xff) << 56; /* last word: the length mod 256 on top, the tail below */
  for (i = 0; i < left; i++) m |= (uint64_t)p[i] << (8 * i);
  sip_word(v, m);
  v[2] ^= 0xff; /* finalisation: d = 4 rounds */
  sip_rounds(v, 4);
  return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* =============================================================================================
 * Keyed packets (§2.1)
 * =========================================================================================== */

int tmk_proto_mac_seal(void* packet, size_t len, size_t cap, const uint8_t key[TMK_PROTO_KEY_LEN]) {
  uint8_t* p = (uint8_t*)packet;
  uint64_t tag;
  int i;
  if (!packet || !key || len < 14) return TMK_EINVAL;
  if (p[4] & TMK_PKT_F_MAC) return TMK_EINVAL;
  if (len + TMK_PROTO_MAC_LEN > cap || len + TMK_PROTO_MAC_LEN > TMK_PROTO_MAX_PACKET)
    return TMK_ENOSPC;
  p[4] |= TMK_PKT_F_MAC; /* the flag is inside what the MAC covers */
  tag = tmk_proto_siphash(key, p, len);
  for (i = 0; i < TMK_PROTO_MAC_LEN; i++) p[len + (size_t)i] = (uint8_t)(tag >> (8 * i));
  return (int)(len + TMK_PROTO_MAC_LEN);
}

int tmk_proto_mac_check(const void* packet, size_t len, const uint8_t key[TMK_PROTO_KEY_LEN]) {
  const uint8_t* p = (const uint8_t*)packet;
  uint64_t tag;
  unsigned diff = 0;
  size_t body;
  int i;
  if (!packet || !key) return TMK_EINVAL;
  if (len < 14 + TMK_PROTO_MAC_LEN) return len < 5 || !(p[4] & TMK_PKT_F_MAC) ? TMK_EAUTH : TMK_ETRUNC;
  if (!(p[4] & TMK_PKT_F_MAC)) return TMK_EAUTH;
  body = len - TMK_PROTO_MAC_LEN;
  tag = tmk_proto_siphash(key, p, body);
  for (i = 0; i < TMK_PROTO_MAC_LEN; i++) diff |= (unsigned)(p[body + (size_t)i] ^ (uint8_t)(tag >> (8 * i)));
  return diff ? TMK_EAUTH : 0;
}
