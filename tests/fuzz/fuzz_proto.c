/* fuzz_proto.c — libFuzzer target for the protocol decoder: the input is tried as one packet
 * (tmk_proto_open, then every record or the control-packet reader) and as a TCP byte stream of
 * framed packets (tmk_proto_frame_parse). Beyond crashes it traps on broken promises: strings
 * outside the input or scratch, lengths over the limits, a reader that recovers after failing,
 * and a batched zone decoder (tmk_proto_next_zones) that disagrees with tmk_proto_next on any
 * record or on where and how the packet fails. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tmk_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static uint8_t g_scratch[TMK_PROTO_MAX_BODY];

/* tmk_proto_next's records of the packet, for the batched decoder to be compared with. */
#define MAXREC (TMK_PROTO_MAX_BODY + 1)
static tmk_proto_record g_ref[MAXREC];
static tmk_proto_zone g_batch[64];
static char g_line_a[4096], g_line_b[4096];

static void same_as_ref(const tmk_proto_record* rec, unsigned i) {
  if (rec->type != g_ref[i].type || rec->thread != g_ref[i].thread) __builtin_trap();
  tmk_proto_format_record(rec, g_line_a, sizeof g_line_a);
  tmk_proto_format_record(&g_ref[i], g_line_b, sizeof g_line_b);
  if (strcmp(g_line_a, g_line_b) != 0) __builtin_trap();
}

/* Decodes the packet again, zones through tmk_proto_next_zones (at most `run` a call): the
 * records, their count and the final code must be tmk_proto_next's (n records, then ref_rc). */
static void check_batched(const uint8_t* data, size_t size, unsigned n, int ref_rc, size_t run) {
  tmk_proto_reader r;
  tmk_proto_record rec;
  unsigned i = 0;
  uint32_t thread;
  int rc;
  size_t k;
  if (tmk_proto_open(&r, data, size, g_scratch, sizeof g_scratch) != 0) __builtin_trap();
  for (;;) {
    rc = tmk_proto_next_zones(&r, g_batch, run, &thread);
    if (rc > (int)run) __builtin_trap();
    if (rc > 0) {
      for (k = 0; k < (size_t)rc; k++, i++) {
        if (i >= n) __builtin_trap();
        memset(&rec, 0, sizeof rec);
        rec.type = TMK_REC_ZONE;
        rec.thread = thread;
        rec.u.zone = g_batch[k];
        same_as_ref(&rec, i);
      }
      continue;
    }
    if (rc == 0) rc = tmk_proto_next(&r, &rec);
    if (rc != 1) break;
    if (i >= n) __builtin_trap();
    same_as_ref(&rec, i++);
  }
  if (i != n || rc != ref_rc) __builtin_trap();
  /* failed or finished, both calls stay so */
  if (tmk_proto_next_zones(&r, g_batch, run, &thread) != (rc < 0 ? rc : 0)) __builtin_trap();
}

static void check_str(tmk_proto_str s, const uint8_t* data, size_t size, uint32_t max) {
  const uint8_t* p = (const uint8_t*)s.ptr;
  if (s.len > max) __builtin_trap();
  if (s.len == 0) return;
  if (p >= data && p + s.len <= data + size) return;
  if (p >= g_scratch && p + s.len <= g_scratch + sizeof g_scratch) return;
  __builtin_trap();
}

static void decode_packet(const uint8_t* data, size_t size) {
  tmk_proto_reader r;
  tmk_proto_record rec;
  char line[4096];
  int rc = tmk_proto_open(&r, data, size, g_scratch, sizeof g_scratch);
  if (rc != 0) {
    if (rc >= 0) __builtin_trap();
    return;
  }
  if (r.hdr.header_len > size || r.hdr.header_len > TMK_PROTO_MAX_HEADER) __builtin_trap();
  if (r.hdr.raw_len > TMK_PROTO_MAX_BODY) __builtin_trap();
  switch (r.hdr.type) {
    case TMK_PKT_DATA: {
      unsigned n = 0;
      while ((rc = tmk_proto_next(&r, &rec)) == 1) {
        if (n < MAXREC) g_ref[n] = rec;
        n++;
        switch (rec.type) {
          case TMK_REC_SITE:
            if (rec.u.site.id == 0 || rec.u.site.severity >= TMK_SEV_COUNT) __builtin_trap();
            check_str(rec.u.site.name, data, size, TMK_PROTO_MAX_STRING);
            check_str(rec.u.site.file, data, size, TMK_PROTO_MAX_STRING);
            break;
          case TMK_REC_MARKER_BEGIN:
          case TMK_REC_MARKER_END:
            check_str(rec.u.marker.payload, data, size, TMK_PROTO_MAX_PAYLOAD);
            break;
          case TMK_REC_MESSAGE:
            if (rec.u.message.severity >= TMK_SEV_COUNT) __builtin_trap();
            check_str(rec.u.message.text, data, size, TMK_PROTO_MAX_STRING);
            break;
          case TMK_REC_THREAD_NAME:
            check_str(rec.u.thread_name.name, data, size, TMK_PROTO_MAX_STRING);
            break;
          case TMK_REC_TEAM_NAME:
            if (rec.u.team.bit >= TMK_PROTO_MAX_TEAMS) __builtin_trap();
            check_str(rec.u.team.name, data, size, TMK_PROTO_MAX_STRING);
            break;
          case TMK_REC_ZONE:
          case TMK_REC_FRAME:
          case TMK_REC_PLOT:
          case TMK_REC_DROPS:
          case TMK_REC_CLOCK_SYNC:
            break;
          default: __builtin_trap();
        }
        if (tmk_proto_format_record(&rec, line, sizeof line) < 0) __builtin_trap();
        if (n > TMK_PROTO_MAX_BODY) __builtin_trap(); /* every record takes at least one byte */
      }
      /* a finished or failed reader stays so */
      if (tmk_proto_next(&r, &rec) != rc) __builtin_trap();
      check_batched(data, size, n, rc, size % 3 == 2 ? 64 : 1 + size % 3);
      break;
    }
    case TMK_PKT_HELLO: {
      tmk_proto_hello h;
      if (tmk_proto_read_hello(&r, &h) == 0) {
        check_str(h.agent_version, data, size, TMK_PROTO_MAX_STRING);
        check_str(h.program, data, size, TMK_PROTO_MAX_STRING);
        check_str(h.platform, data, size, TMK_PROTO_MAX_STRING);
        check_str(h.arch, data, size, TMK_PROTO_MAX_STRING);
        if (h.timer_freq == 0 || h.max_packet > TMK_PROTO_MAX_PACKET) __builtin_trap();
      }
      break;
    }
    case TMK_PKT_WELCOME: {
      tmk_proto_welcome w;
      if (tmk_proto_read_welcome(&r, &w) == 0) check_str(w.relay_version, data, size, TMK_PROTO_MAX_STRING);
      break;
    }
    case TMK_PKT_REJECT: {
      tmk_proto_reject rj;
      if (tmk_proto_read_reject(&r, &rj) == 0) check_str(rj.text, data, size, TMK_PROTO_MAX_STRING);
      break;
    }
    case TMK_PKT_CONTROL: {
      tmk_proto_control c;
      if (tmk_proto_read_control(&r, &c) == 0 && c.severity >= TMK_SEV_COUNT) __builtin_trap();
      break;
    }
    default: break;
  }
  /* the readers of other types refuse this packet */
  if (r.hdr.type != TMK_PKT_HELLO) {
    tmk_proto_hello h;
    tmk_proto_reader r2;
    if (tmk_proto_open(&r2, data, size, g_scratch, sizeof g_scratch) == 0 &&
        tmk_proto_read_hello(&r2, &h) != TMK_ETYPE)
      __builtin_trap();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t pos = 0;
  tmk_proto_header h;
  int rc = tmk_proto_parse_header(data, size, &h);
  if (rc > 0 && (size_t)rc > size) __builtin_trap();
  decode_packet(data, size);
  /* the same bytes as a TCP stream of framed packets (§1) */
  while (pos < size) {
    uint32_t len = 0;
    int n = tmk_proto_frame_parse(data + pos, size - pos, &len);
    if (n <= 0) break;
    if (n > 3 || len == 0 || len > TMK_PROTO_MAX_PACKET) __builtin_trap();
    pos += (size_t)n;
    if (size - pos < len) break;
    {
      /* an exactly-sized copy, so an over-read of this packet is caught by ASan */
      uint8_t* pkt = (uint8_t*)malloc(len);
      if (!pkt) return 0;
      memcpy(pkt, data + pos, len);
      decode_packet(pkt, len);
      free(pkt);
    }
    pos += len;
  }
  return 0;
}
