/* tmk_proto_primitives.c — the pieces of the wire format that reader and writer share: varints
 * (§3.1), the packet header in both directions (§2), TCP framing (§1) and tick conversion.
 * No allocation, no OS calls; the readers here are safe on malicious input like the decoder. */
#include "tmk_proto_internal.h"

/* =============================================================================================
 * Primitives (§3)
 * =========================================================================================== */

int tmk_proto_host_big_endian(void) {
  const uint16_t probe = 0x0102;
  uint8_t first;
  memcpy(&first, &probe, 1);
  return first == 0x01;
}

int tmk_proto_varint_put(uint8_t* out, uint64_t v) {
  int n = 0;
  while (v >= 0x80) {
    out[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  out[n++] = (uint8_t)v;
  return n;
}

int tmk_proto_varint_get(const uint8_t* p, const uint8_t* end, uint64_t* v) {
  uint64_t r = 0;
  int i;
  for (i = 0; i < 10; i++) {
    uint8_t b;
    if (p + i >= end) return TMK_ETRUNC;
    b = p[i];
    if (i == 9 && b > 1) return TMK_EVARINT;
    r |= (uint64_t)(b & 0x7F) << (7 * i);
    if (!(b & 0x80)) {
      *v = r;
      return i + 1;
    }
  }
  return TMK_EVARINT;
}

#if TMK__SIZE_BUILD
__attribute__((noinline)) void tmk__put_u64(uint8_t b[8], uint64_t v, int big_endian) {
  tmk__put_u64_inline(b, v, big_endian);
}
#endif

/* =============================================================================================
 * Header (§2)
 * =========================================================================================== */

int tmk__write_header(uint8_t* out, size_t cap, unsigned flags, unsigned type, uint64_t session,
                      uint64_t seq, uint64_t base, uint32_t raw_len) {
  uint8_t h[TMK_PROTO_MAX_HEADER]; /* written here first: its length is known once written */
  size_t n = 14;
  memcpy(h, "TMK", 3);
  h[3] = TMK_PROTO_VERSION;
  h[4] = (uint8_t)flags;
  h[5] = (uint8_t)type;
  tmk__put_u64(h + 6, session, (flags & TMK_PKT_F_BIG_ENDIAN) != 0);
  n += (size_t)tmk_proto_varint_put(h + n, seq);
  n += (size_t)tmk_proto_varint_put(h + n, base);
  if (flags & TMK_PKT_F_LZ4) n += (size_t)tmk_proto_varint_put(h + n, raw_len);
  if (n > cap) return TMK_ENOSPC;
  memcpy(out, h, n);
  return (int)n;
}

int tmk_proto_parse_header(const void* packet, size_t len, tmk_proto_header* h) {
  const uint8_t* p = (const uint8_t*)packet;
  const uint8_t* end;
  uint64_t v;
  int n;
  if (!packet || !h) return TMK_EINVAL;
  if (len > TMK_PROTO_MAX_PACKET) return TMK_ETOOBIG;
  for (n = 0; n < 3 && (size_t)n < len; n++) /* the bytes there are must start the magic */
    if (p[n] != (uint8_t)"TMK"[n]) return TMK_EMAGIC;
  if (len < 4) return TMK_ETRUNC;
  if (p[3] != TMK_PROTO_VERSION) return TMK_EVERSION;
  if (len < 14) return TMK_ETRUNC;
  memset(h, 0, sizeof *h);
  h->version = p[3];
  h->flags = p[4];
  h->type = p[5];
  if (h->flags & ~TMK_PKT_F_KNOWN) return TMK_EFLAGS;
  if (h->type < TMK_PKT_DATA || h->type > TMK_PKT_BYE) return TMK_ETYPE;
  h->session_id = tmk__get_u64(p + 6, (h->flags & TMK_PKT_F_BIG_ENDIAN) != 0);
  if (h->flags & TMK_PKT_F_MAC) { /* §2.1: the last 8 bytes are the MAC, never header or body */
    if (len < 14 + TMK_PROTO_MAC_LEN) return TMK_ETRUNC;
    h->mac_len = TMK_PROTO_MAC_LEN;
  }
  end = p + len - h->mac_len;
  p += 14;
  if ((n = tmk_proto_varint_get(p, end, &h->seq)) < 0) return n;
  p += n;
  if ((n = tmk_proto_varint_get(p, end, &h->base_time)) < 0) return n;
  p += n;
  if (h->flags & TMK_PKT_F_LZ4) {
    if ((n = tmk_proto_varint_get(p, end, &v)) < 0) return n;
    p += n;
    if (v > TMK_PROTO_MAX_BODY) return TMK_EBOMB;
    if (v == 0) return TMK_ERANGE;
    h->raw_len = (uint32_t)v;
  }
  h->header_len = (uint32_t)(p - (const uint8_t*)packet);
  if (!(h->flags & TMK_PKT_F_LZ4)) h->raw_len = (uint32_t)(len - h->mac_len - h->header_len);
  return (int)h->header_len;
}

/* =============================================================================================
 * Framing and time
 * =========================================================================================== */

int tmk_proto_frame_prefix(uint8_t out[3], size_t len) {
  if (len == 0 || len > TMK_PROTO_MAX_PACKET) return TMK_ETOOBIG;
  return tmk_proto_varint_put(out, len);
}

int tmk_proto_frame_parse(const void* data, size_t avail, uint32_t* len) {
  uint64_t v;
  const uint8_t* p = (const uint8_t*)data;
  int n = tmk_proto_varint_get(p, p + (avail < 3 ? avail : 3), &v);
  if (n == TMK_ETRUNC) return avail < 3 ? 0 : TMK_ETOOBIG;
  if (n < 0) return TMK_ETOOBIG;
  if (v == 0 || v > TMK_PROTO_MAX_PACKET) return TMK_ETOOBIG;
  *len = (uint32_t)v;
  return n;
}

uint64_t tmk_proto_ticks_to_ns(uint64_t ticks, uint64_t freq) {
  if (freq == 0) return 0;
  if (freq == 1000000000ull) return ticks;
  return ticks / freq * 1000000000ull + ticks % freq * 1000000000ull / freq;
}
