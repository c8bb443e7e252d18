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

#define TMK__SIPROUND            \
  do {                           \
    v0 += v1;                    \
    v1 = TMK__ROTL(v1, 13);      \
    v1 ^= v0;                    \
    v0 = TMK__ROTL(v0, 32);      \
    v2 += v3;                    \
    v3 = TMK__ROTL(v3, 16);      \
    v3 ^= v2;                    \
    v0 += v3;                    \
    v3 = TMK__ROTL(v3, 21);      \
    v3 ^= v0;                    \
    v2 += v1;                    \
    v1 = TMK__ROTL(v1, 17);      \
    v1 ^= v2;                    \
    v2 = TMK__ROTL(v2, 32);      \
  } while (0)

uint64_t tmk_proto_siphash(const uint8_t key[TMK_PROTO_KEY_LEN], const void* data, size_t len) {
  const uint8_t* p = (const uint8_t*)data;
  const uint8_t* end = p + (len & ~(size_t)7);
  uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
  uint64_t v0 = k0 ^ 0x736f6d6570736575ull;
  uint64_t v1 = k1 ^ 0x646f72616e646f6dull;
  uint64_t v2 = k0 ^ 0x6c7967656e657261ull;
  uint64_t v3 = k1 ^ 0x7465646279746573ull;
  uint64_t m;
  unsigned left = (unsigned)(len & 7), i;
  for (; p != end; p += 8) { /* compression: two rounds per 8-byte word */
    m = load_le64(p);
    v3 ^= m;
    TMK__SIPROUND;
    TMK__SIPROUND;
    v0 ^= m;
  }
  m = (uint64_t)(len & 0xff) << 56; /* last word: the length mod 256 on top, the tail below */
  for (i = 0; i < left; i++) m |= (uint64_t)p[i] << (8 * i);
  v3 ^= m;
  TMK__SIPROUND;
  TMK__SIPROUND;
  v0 ^= m;
  v2 ^= 0xff; /* finalisation: four rounds */
  TMK__SIPROUND;
  TMK__SIPROUND;
  TMK__SIPROUND;
  TMK__SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
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
