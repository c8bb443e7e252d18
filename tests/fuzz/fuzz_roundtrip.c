/* fuzz_roundtrip.c — libFuzzer target for the encoder: the input is read as a program of writer
 * calls (zones, events, descriptors, thread switches, packet ends) on a writer of an input-chosen
 * size. Every packet is finished (compressed on every other one when LZ4 is built in), decoded
 * and compared with what was put: events and descriptors in order, zones as a set per thread.
 * Any difference, or a refusal other than TMK_ENOSPC of a valid call, traps. The batched zone
 * decoder (tmk_proto_next_zones) decodes every packet again and must agree with tmk_proto_next. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tmk_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

#define MAXREC 4096

typedef struct in_t {
  const uint8_t* p;
  const uint8_t* end;
} in_t;

static uint8_t in_u8(in_t* in) { return in->p < in->end ? *in->p++ : 0; }
static uint64_t in_bytes(in_t* in, int n) {
  uint64_t v = 0;
  int i;
  for (i = 0; i < n; i++) v = (v << 8) | in_u8(in);
  return v;
}
/* A number that is usually small (typical of real streams) and sometimes any 64-bit value. */
static uint64_t in_num(in_t* in) {
  uint8_t sel = in_u8(in);
  switch (sel >> 6) {
    case 0: return sel & 0x3F;
    case 1: return in_bytes(in, 1) | ((uint64_t)(sel & 0x3F) << 8);
    case 2: return in_bytes(in, 3);
    default: return in_bytes(in, 8);
  }
}

typedef struct model {
  tmk_proto_record rec[MAXREC]; /* non-zone records, in order */
  size_t nrec;
  tmk_proto_zone zone[MAXREC];
  uint32_t zone_thread[MAXREC];
  size_t nzone;
  char text[MAXREC][16]; /* string contents, compared by value */
} model;

static model g_want;
static tmk_proto_zone g_got_zone[MAXREC];
static uint32_t g_got_thread[MAXREC];
static uint8_t g_body[TMK_PROTO_MAX_BODY];
static uint8_t g_pkt[TMK_PROTO_MAX_BODY + TMK_PROTO_MAX_HEADER];
static uint8_t g_scratch[TMK_PROTO_MAX_BODY];
static uint64_t g_lz4_state[(1 << 15) / 8];

static int zone_less(const tmk_proto_zone* a, uint32_t ta, const tmk_proto_zone* b, uint32_t tb) {
  if (ta != tb) return ta < tb;
  if (a->start != b->start) return a->start < b->start;
  if (a->depth != b->depth) return a->depth < b->depth;
  if (a->site != b->site) return a->site < b->site;
  return a->duration < b->duration;
}

static void sort_zones(tmk_proto_zone* z, uint32_t* t, size_t n) {
  size_t i, j;
  for (i = 1; i < n; i++) {
    tmk_proto_zone kz = z[i];
    uint32_t kt = t[i];
    for (j = i; j > 0 && zone_less(&kz, kt, &z[j - 1], t[j - 1]); j--) {
      z[j] = z[j - 1];
      t[j] = t[j - 1];
    }
    z[j] = kz;
    t[j] = kt;
  }
}

static int str_eq(tmk_proto_str s, const char* want, size_t len) {
  return s.len == len && (len == 0 || memcmp(s.ptr, want, len) == 0);
}

static void same_record(const tmk_proto_record* got, const tmk_proto_record* w, const char* text) {
  if (got->type != w->type) __builtin_trap();
  switch (w->type) {
    case TMK_REC_SITE:
      if (got->u.site.id != w->u.site.id || got->u.site.kind != w->u.site.kind ||
          got->u.site.severity != w->u.site.severity || got->u.site.verbosity != w->u.site.verbosity ||
          got->u.site.color != w->u.site.color || got->u.site.line != w->u.site.line ||
          !str_eq(got->u.site.name, text, w->u.site.name.len) ||
          !str_eq(got->u.site.file, text, w->u.site.file.len))
        __builtin_trap();
      break;
    case TMK_REC_MARKER_BEGIN:
    case TMK_REC_MARKER_END:
      if (got->thread != w->thread || got->u.marker.site != w->u.marker.site ||
          got->u.marker.time != w->u.marker.time ||
          !str_eq(got->u.marker.payload, text, w->u.marker.payload.len))
        __builtin_trap();
      break;
    case TMK_REC_FRAME:
      if (got->thread != w->thread || got->u.frame.site != w->u.frame.site ||
          got->u.frame.time != w->u.frame.time)
        __builtin_trap();
      break;
    case TMK_REC_PLOT:
      if (got->thread != w->thread || got->u.plot.site != w->u.plot.site ||
          got->u.plot.time != w->u.plot.time || got->u.plot.is_double != w->u.plot.is_double)
        __builtin_trap();
      if (w->u.plot.is_double ? memcmp(&got->u.plot.d, &w->u.plot.d, 8) != 0 : got->u.plot.i != w->u.plot.i)
        __builtin_trap();
      break;
    case TMK_REC_MESSAGE:
      if (got->thread != w->thread || got->u.message.site != w->u.message.site ||
          got->u.message.severity != w->u.message.severity ||
          got->u.message.verbosity != w->u.message.verbosity ||
          got->u.message.time != w->u.message.time ||
          !str_eq(got->u.message.text, text, w->u.message.text.len))
        __builtin_trap();
      break;
    case TMK_REC_THREAD_NAME:
      if (got->thread != w->thread || !str_eq(got->u.thread_name.name, text, w->u.thread_name.name.len))
        __builtin_trap();
      break;
    case TMK_REC_DROPS:
      if (got->u.drops.reason != w->u.drops.reason || got->u.drops.count != w->u.drops.count)
        __builtin_trap();
      break;
    case TMK_REC_CLOCK_SYNC:
      if (got->u.clock.ticks != w->u.clock.ticks || got->u.clock.unix_ns != w->u.clock.unix_ns)
        __builtin_trap();
      break;
    case TMK_REC_TEAM_NAME:
      if (got->u.team.bit != w->u.team.bit || !str_eq(got->u.team.name, text, w->u.team.name.len))
        __builtin_trap();
      break;
    default: __builtin_trap();
  }
}

/* The batched zone decoder (tmk_proto_next_zones, at most `run` zones a call, tmk_proto_next for
 * the rest) on the same packet must find what tmk_proto_next found: the same zones of the same
 * threads in the same order (g_got_*, still in decode order), and as many other records. */
static tmk_proto_zone g_batch[MAXREC];
static void check_batched(int len, size_t nz, size_t nrec, size_t run) {
  tmk_proto_reader r;
  tmk_proto_record rec;
  size_t z = 0, other = 0, k;
  uint32_t thread;
  int rc;
  if (tmk_proto_open(&r, g_pkt, (size_t)len, g_scratch, sizeof g_scratch) != 0) __builtin_trap();
  for (;;) {
    rc = tmk_proto_next_zones(&r, g_batch, run, &thread);
    if (rc < 0 || (size_t)rc > run) __builtin_trap();
    if (rc > 0) {
      for (k = 0; k < (size_t)rc; k++, z++) {
        if (z >= nz || thread != g_got_thread[z] || g_batch[k].start != g_got_zone[z].start ||
            g_batch[k].duration != g_got_zone[z].duration || g_batch[k].site != g_got_zone[z].site ||
            g_batch[k].depth != g_got_zone[z].depth)
          __builtin_trap();
      }
      continue;
    }
    rc = tmk_proto_next(&r, &rec);
    if (rc < 0) __builtin_trap();
    if (rc == 0) break;
    if (rec.type != TMK_REC_ZONE) {
      other++;
      continue;
    }
    if (z >= nz || rec.thread != g_got_thread[z] || rec.u.zone.start != g_got_zone[z].start ||
        rec.u.zone.duration != g_got_zone[z].duration || rec.u.zone.site != g_got_zone[z].site ||
        rec.u.zone.depth != g_got_zone[z].depth)
      __builtin_trap();
    z++;
  }
  if (z != nz || other != nrec) __builtin_trap();
}

/* Finishes the packet, decodes it and compares it with the model; then empties both. */
static void flush(tmk_proto_writer* w, uint64_t seq) {
  tmk_proto_reader r;
  tmk_proto_record rec;
  size_t nrec = 0, nz = 0, i;
  void* lz4 = (seq & 1) && tmk_proto_lz4_state_size() <= sizeof g_lz4_state ? g_lz4_state : NULL;
  int len = tmk_proto_finish(w, 0x5E55, seq, g_pkt, sizeof g_pkt, tmk_proto_lz4_state_size() ? lz4 : NULL);
  int rc;
  if (len <= 0 || (size_t)len > w->len + TMK_PROTO_MAX_HEADER) __builtin_trap();
  if (w->zones != g_want.nzone) __builtin_trap();
  if (tmk_proto_open(&r, g_pkt, (size_t)len, g_scratch, sizeof g_scratch) != 0) __builtin_trap();
  if (r.hdr.seq != seq || r.hdr.session_id != 0x5E55 || r.hdr.raw_len != w->len) __builtin_trap();
  while ((rc = tmk_proto_next(&r, &rec)) == 1) {
    if (rec.type == TMK_REC_ZONE) {
      if (nz == MAXREC) __builtin_trap();
      g_got_zone[nz] = rec.u.zone;
      g_got_thread[nz++] = rec.thread;
    } else {
      if (nrec >= g_want.nrec) __builtin_trap();
      same_record(&rec, &g_want.rec[nrec], g_want.text[nrec]);
      nrec++;
    }
  }
  if (rc != 0 || nrec != g_want.nrec || nz != g_want.nzone) __builtin_trap();
  check_batched(len, nz, nrec, seq % 3 == 0 ? MAXREC : 1 + (size_t)(seq % 5));
  sort_zones(g_got_zone, g_got_thread, nz);
  sort_zones(g_want.zone, g_want.zone_thread, nz);
  for (i = 0; i < nz; i++) {
    if (g_got_thread[i] != g_want.zone_thread[i] || g_got_zone[i].start != g_want.zone[i].start ||
        g_got_zone[i].duration != g_want.zone[i].duration || g_got_zone[i].site != g_want.zone[i].site ||
        g_got_zone[i].depth != g_want.zone[i].depth)
      __builtin_trap();
  }
  tmk_proto_writer_reset(w);
  g_want.nrec = 0;
  g_want.nzone = 0;
}

/* Builds a batch of zones: a consistent nested tree, or arbitrary values, from the input. */
static size_t make_zones(in_t* in, tmk_proto_zone* z, size_t cap) {
  size_t n = 1 + in_u8(in) % cap, i;
  uint8_t mode = in_u8(in);
  uint64_t t = in_num(in);
  if (mode & 1) {
    for (i = 0; i < n; i++) {
      z[i].start = in_num(in);
      z[i].duration = in_num(in);
      z[i].depth = (uint32_t)(mode & 2 ? in_num(in) : in_u8(in) % 40);
      z[i].site = (uint32_t)(1 + in_num(in) % 0xFFFFFFFEu);
    }
    return n;
  }
  {
    /* pre-order tree: each zone either goes one level down (child) or stays/climbs */
    uint64_t ends[64];
    uint32_t d = (uint32_t)(in_u8(in) % 4);
    size_t top = 0;
    for (i = 0; i < n; i++) {
      uint8_t b = in_u8(in);
      t += 1 + in_num(in) % 200;
      while (top && ends[top - 1] <= t) top--, d--;
      z[i].start = t;
      z[i].depth = d;
      z[i].site = 1 + (uint32_t)(in_u8(in) % (b & 0x80 ? 200 : 40));
      z[i].duration = 1 + in_num(in);
      if (top) {
        uint64_t room = ends[top - 1] - t;
        if (z[i].duration > room) z[i].duration = room;
      }
      if ((b & 3) == 0 && top < 64) {
        ends[top++] = t + z[i].duration;
        d++;
      } else {
        t += z[i].duration;
      }
    }
  }
  return n;
}

static void fill_text(in_t* in, char* out, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) out[i] = (char)in_u8(in);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  in_t in;
  tmk_proto_writer w;
  size_t cap;
  uint32_t thread = 0;
  uint64_t seq = 0;
  int steps = 0;
  in.p = data;
  in.end = data + size;
  cap = 64 + (size_t)in_bytes(&in, 2) % 2000;
  if (tmk_proto_writer_init(&w, g_body, cap) != 0) __builtin_trap();
  w.big_endian = in_u8(&in) & 1;
  g_want.nrec = g_want.nzone = 0;
  while (in.p < in.end && steps++ < 200) {
    uint8_t op = in_u8(&in) % 13;
    tmk_proto_record* rec = &g_want.rec[g_want.nrec];
    char* text = g_want.text[g_want.nrec];
    int rc = 0, tries;
    if (op == 1) {
      tmk_proto_zone z[48];
      size_t n = make_zones(&in, z, 48), done = 0;
      if (g_want.nzone + n > MAXREC) break;
      while (done < n) {
        int k = tmk_proto_put_zones(&w, z + done, n - done);
        size_t j;
        if (k < 0) __builtin_trap();
        for (j = 0; j < (size_t)k; j++) {
          g_want.zone[g_want.nzone] = z[done + j];
          g_want.zone_thread[g_want.nzone++] = thread;
        }
        done += (size_t)k;
        if (done < n) {
          if (k == 0 && tmk_proto_writer_empty(&w)) __builtin_trap(); /* one zone always fits */
          flush(&w, seq++);
          if (tmk_proto_put_thread(&w, thread) != 0) __builtin_trap();
        }
      }
      continue;
    }
    if (op == 12) {
      flush(&w, seq++);
      if (tmk_proto_put_thread(&w, thread) != 0) __builtin_trap();
      continue;
    }
    if (g_want.nrec == MAXREC) break;
    memset(rec, 0, sizeof *rec);
    rec->thread = thread;
    {
      /* draw the arguments once, then retry the same call on a fresh packet if it did not fit */
      uint32_t site = 1 + (uint32_t)(in_num(&in) % 0xFFFFFFFEu);
      uint64_t time = in_num(&in);
      uint64_t v = in_num(&in);
      size_t len = in_u8(&in) % 17;
      uint8_t sev = in_u8(&in) % TMK_SEV_COUNT;
      if (len > 16) len = 16;
      fill_text(&in, text, len);
      for (tries = 0; tries < 2; tries++) {
        switch (op) {
          case 0:
            rc = tmk_proto_put_thread(&w, (uint32_t)v);
            break;
          case 2:
            rec->type = (v & 1) ? TMK_REC_MARKER_END : TMK_REC_MARKER_BEGIN;
            rec->u.marker.site = site, rec->u.marker.time = time, rec->u.marker.payload.len = (uint32_t)len;
            rc = tmk_proto_put_marker(&w, (int)(v & 1), site, time, text, len);
            break;
          case 3:
            rec->type = TMK_REC_FRAME;
            rec->u.frame.site = site & 7, rec->u.frame.time = time;
            rc = tmk_proto_put_frame(&w, site & 7, time);
            break;
          case 4:
            rec->type = TMK_REC_PLOT;
            rec->u.plot.site = site, rec->u.plot.time = time, rec->u.plot.i = (int64_t)v;
            rc = tmk_proto_put_plot_i(&w, site, time, (int64_t)v);
            break;
          case 5:
            rec->type = TMK_REC_PLOT;
            rec->u.plot.site = site, rec->u.plot.time = time, rec->u.plot.is_double = 1;
            memcpy(&rec->u.plot.d, &v, 8);
            rc = tmk_proto_put_plot_d(&w, site, time, rec->u.plot.d);
            break;
          case 6:
            rec->type = TMK_REC_MESSAGE;
            rec->u.message.site = site & 0xFF, rec->u.message.severity = sev;
            rec->u.message.verbosity = (uint32_t)v, rec->u.message.time = time;
            rec->u.message.text.len = (uint32_t)len;
            rc = tmk_proto_put_message(&w, site & 0xFF, sev, (uint32_t)v, time, text, len);
            break;
          case 7:
            rec->type = TMK_REC_THREAD_NAME;
            rec->thread = (uint32_t)v, rec->u.thread_name.name.len = (uint32_t)len;
            rc = tmk_proto_put_thread_name(&w, (uint32_t)v, text, len);
            break;
          case 8:
            rec->type = TMK_REC_DROPS;
            rec->u.drops.reason = (uint32_t)(site % TMK_DROP_REASON_COUNT), rec->u.drops.count = v;
            rc = tmk_proto_put_drops(&w, rec->u.drops.reason, v);
            break;
          case 9:
            rec->type = TMK_REC_CLOCK_SYNC;
            rec->u.clock.ticks = time, rec->u.clock.unix_ns = v;
            rc = tmk_proto_put_clock(&w, time, v);
            break;
          case 10:
            rec->type = TMK_REC_TEAM_NAME;
            rec->u.team.bit = (uint32_t)(v % 32), rec->u.team.name.len = (uint32_t)len;
            rc = tmk_proto_put_team(&w, (uint32_t)(v % 32), text, len);
            break;
          default: {
            tmk_proto_site s;
            memset(&s, 0, sizeof s);
            s.id = site, s.kind = (uint8_t)(v % TMK_SITE_KIND_COUNT), s.severity = sev;
            s.verbosity = (uint32_t)time, s.color = (uint32_t)(v & 0xFFFFFF), s.line = (uint32_t)(v >> 32);
            s.name.ptr = text, s.name.len = (uint32_t)len;
            s.file.ptr = text, s.file.len = (uint32_t)(len / 2);
            rec->type = TMK_REC_SITE;
            rec->u.site = s;
            rc = tmk_proto_put_site(&w, &s);
            break;
          }
        }
        if (rc != TMK_ENOSPC) break;
        if (tries == 0) {
          flush(&w, seq++);
          if (tmk_proto_put_thread(&w, thread) != 0) __builtin_trap();
          rec = &g_want.rec[g_want.nrec];
          memmove(g_want.text[g_want.nrec], text, len);
          text = g_want.text[g_want.nrec];
          memset(rec, 0, sizeof *rec);
          rec->thread = thread;
        }
      }
      if (rc != 0) __builtin_trap(); /* every call above is valid and fits an empty packet */
      if (op == 0) thread = (uint32_t)v;
      else g_want.nrec++;
    }
  }
  flush(&w, seq);
  return 0;
}
