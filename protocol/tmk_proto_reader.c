/* tmk_proto_reader.c — the decoder (§5, §6): opens a packet (header, LZ4), hands out the records
 * of a DATA body one at a time, and reads control packet bodies. Safe on malicious input: every
 * read is bounds-checked and every failure is a negative TMK_E* code. No allocation, no OS calls. */
#include "tmk_proto_rice.h"

/* =============================================================================================
 * Opening a packet (§2, §5)
 * =========================================================================================== */

int tmk_proto_open(tmk_proto_reader* r, const void* packet, size_t len, void* scratch,
                   size_t scratch_cap) {
  int n;
  if (!r) return TMK_EINVAL;
  /* all but the open-zone stack, which is written before it is read (nopen counts it) */
  memset(r, 0, offsetof(tmk_proto_reader, open));
  memset((char*)r + offsetof(tmk_proto_reader, open) + sizeof r->open, 0,
         sizeof *r - offsetof(tmk_proto_reader, open) - sizeof r->open);
  r->done = TMK_ESTATE;
  if ((n = tmk_proto_parse_header(packet, len, &r->hdr)) < 0) {
    r->done = n;
    return n;
  }
  r->p = (const uint8_t*)packet + n;
  len -= r->hdr.mac_len; /* §2.1: the MAC is not body */
  r->end = (const uint8_t*)packet + len;
  if (r->hdr.flags & TMK_PKT_F_LZ4) {
#if TMK__LZ4
    int got;
    size_t clen = len - (size_t)n;
    if (!scratch || scratch_cap < r->hdr.raw_len) {
      r->done = TMK_ENOSPC;
      return TMK_ENOSPC;
    }
    got = LZ4_decompress_safe((const char*)r->p, (char*)scratch, (int)clen, (int)r->hdr.raw_len);
    if (got < 0 || (uint32_t)got != r->hdr.raw_len) {
      r->done = TMK_ELZ4;
      return TMK_ELZ4;
    }
    r->p = (const uint8_t*)scratch;
    r->end = r->p + got;
#else
    (void)scratch;
    (void)scratch_cap;
    r->done = TMK_ENOLZ4;
    return TMK_ENOLZ4;
#endif
  }
  r->zone_cursor = r->event_cursor = r->hdr.base_time;
  r->q = r->end; /* control packets have no number stream */
  if (r->hdr.type == TMK_PKT_DATA) {
    /* varint A, varint N, record stream (A bytes), number stream (N bytes) (§5). */
    uint64_t a, b;
    int m1, m2 = 0;
    m1 = tmk_proto_varint_get(r->p, r->end, &a);
    if (m1 > 0) m2 = tmk_proto_varint_get(r->p + m1, r->end, &b);
    if (m1 < 0 || m2 < 0) {
      r->done = m1 < 0 ? m1 : m2;
      return r->done;
    }
    r->p += m1 + m2;
    if (a > TMK_PROTO_MAX_BODY || b > TMK_PROTO_MAX_BODY || a + b > (uint64_t)(r->end - r->p)) {
      r->done = TMK_ETRUNC;
      return TMK_ETRUNC;
    }
    if (a + b != (uint64_t)(r->end - r->p)) {
      r->done = TMK_ECORRUPT; /* bytes after the number stream */
      return TMK_ECORRUPT;
    }
    r->end = r->p + a;
    r->q = r->end + b;
  }
  r->done = 0;
  return 0;
}

/* =============================================================================================
 * Field readers (§3): record stream fields; the number stream's are in tmk_proto_rice.h
 * =========================================================================================== */

static uint64_t tmk__in_var(tmk__in* in) {
  uint64_t v = 0;
  int n;
  if (in->err) return 0;
  if (in->p < in->end && *in->p < 0x80) return *in->p++;
  n = tmk_proto_varint_get(in->p, in->end, &v);
  if (n < 0) {
    in->err = n;
    return 0;
  }
  in->p += n;
  return v;
}

static uint32_t tmk__in_u32(tmk__in* in) {
  uint64_t v = tmk__in_var(in);
  if (v > 0xFFFFFFFFull) {
    if (!in->err) in->err = TMK_ERANGE;
    return 0;
  }
  return (uint32_t)v;
}

static uint32_t tmk__in_max(tmk__in* in, uint32_t max) {
  uint64_t v = tmk__in_var(in);
  if (v > max) {
    if (!in->err) in->err = TMK_ERANGE;
    return 0;
  }
  return (uint32_t)v;
}

static tmk_proto_str tmk__in_str(tmk__in* in, uint32_t max) {
  tmk_proto_str s;
  uint64_t n = tmk__in_var(in);
  s.ptr = "";
  s.len = 0;
  if (in->err) return s;
  if (n > max) {
    in->err = TMK_ETOOBIG;
    return s;
  }
  if ((uint64_t)(in->end - in->p) < n) {
    in->err = TMK_ETRUNC;
    return s;
  }
  s.ptr = (const char*)in->p;
  s.len = (uint32_t)n;
  in->p += n;
  return s;
}

static uint64_t tmk__in_f64bits(tmk__in* in, int big_endian) {
  uint64_t v;
  if (in->err) return 0;
  if (in->end - in->p < 8) {
    in->err = TMK_ETRUNC;
    return 0;
  }
  v = tmk__get_u64(in->p, big_endian);
  in->p += 8;
  return v;
}

static int tmk__fail(tmk_proto_reader* r, int err) {
  r->done = err;
  return err;
}

/* =============================================================================================
 * DATA records (§5)
 * =========================================================================================== */

int tmk_proto_next(tmk_proto_reader* r, tmk_proto_record* rec) {
  tmk__in in;
  if (!r || !rec) return TMK_EINVAL;
  if (r->done < 0) return r->done;
  if (r->hdr.type != TMK_PKT_DATA) return tmk__fail(r, TMK_ETYPE);
  in.p = r->p;
  in.end = r->end;
  in.q = r->q;
  in.acc = r->nacc;
  in.nbits = r->nbits;
  in.nstate = r->nstate;
  in.err = 0;
  for (;;) {
    unsigned tag;
    uint32_t site;
    uint64_t start;
    if (in.p >= in.end) {
      r->p = in.p;
      if (r->nopen) return tmk__fail(r, TMK_ENEST);
      /* Every number used: nothing but the last byte's zero padding may be left (§5.0). */
      if (in.q != in.end || in.nbits >= 8 || in.acc != 0) return tmk__fail(r, TMK_ECORRUPT);
      return 0;
    }
    tag = *in.p++;
    rec->thread = r->thread;

    if (tag >= TMK__TAG_OPEN_SHORT || tag == TMK__TAG_LEAF || tag == TMK__TAG_OPEN) {
      /* Zone events (§5.3). */
      int is_leaf = tag >= TMK__TAG_LEAF_SHORT || tag == TMK__TAG_LEAF;
      uint64_t gap;
      uint64_t depth = (uint64_t)r->root_depth + r->nopen;
      if (tag >= TMK__TAG_LEAF_SHORT)
        site = tag - TMK__TAG_LEAF_SHORT + 1;
      else if (tag >= TMK__TAG_OPEN_SHORT)
        site = tag - TMK__TAG_OPEN_SHORT + 1;
      else
        site = tmk__in_u32(&in);
      gap = tmk__in_num(&in, TMK__NUM_GAP);
      if (in.err) return tmk__fail(r, in.err);
      if (depth > 0xFFFFFFFFull) return tmk__fail(r, TMK_ERANGE);
      start = r->zone_cursor + gap;
      if (is_leaf) {
        uint64_t pred;
        unsigned ctx = tmk__predict(r->predict, 0, site, &pred);
        uint64_t dur = tmk__punc(ctx, tmk__in_num(&in, ctx), pred);
        if (in.err) return tmk__fail(r, in.err);
        tmk__learn(r->predict, 0, site, dur);
        r->zone_cursor = start + dur;
        rec->type = TMK_REC_ZONE;
        rec->u.zone.site = site;
        rec->u.zone.start = start;
        rec->u.zone.duration = dur;
        rec->u.zone.depth = (uint32_t)depth;
        r->p = in.p;
        r->q = in.q;
        r->nacc = in.acc;
        r->nbits = in.nbits;
        return 1;
      }
      if (r->nopen >= TMK_PROTO_MAX_OPEN) return tmk__fail(r, TMK_ENEST);
      r->open[r->nopen].start = start;
      r->open[r->nopen].site = site;
      r->nopen++;
      r->zone_cursor = start;
      continue;
    }

    switch (tag) {
      case TMK__TAG_CLOSE: {
        uint64_t pred, tail, end;
        unsigned ctx;
        if (r->nopen == 0) return tmk__fail(r, TMK_ENEST);
        ctx = tmk__predict(r->predict, 1, r->open[r->nopen - 1].site, &pred);
        tail = tmk__punc(ctx, tmk__in_num(&in, ctx), pred);
        if (in.err) return tmk__fail(r, in.err);
        tmk__learn(r->predict, 1, r->open[r->nopen - 1].site, tail);
        end = r->zone_cursor + tail;
        r->nopen--;
        rec->type = TMK_REC_ZONE;
        rec->u.zone.site = r->open[r->nopen].site;
        rec->u.zone.start = r->open[r->nopen].start;
        rec->u.zone.duration = end - r->open[r->nopen].start;
        rec->u.zone.depth = r->root_depth + r->nopen;
        r->zone_cursor = end;
        r->p = in.p;
        r->q = in.q;
        r->nacc = in.acc;
        r->nbits = in.nbits;
        return 1;
      }
      case TMK__TAG_AT: {
        uint32_t depth = tmk__in_u32(&in);
        uint64_t delta = tmk__unzz(tmk__in_var(&in));
        if (in.err) return tmk__fail(r, in.err);
        if (r->nopen) return tmk__fail(r, TMK_ENEST);
        r->root_depth = depth;
        r->zone_cursor += delta;
        continue;
      }
      case TMK__TAG_THREAD: {
        uint32_t t = tmk__in_u32(&in);
        if (in.err) return tmk__fail(r, in.err);
        if (r->nopen) return tmk__fail(r, TMK_ENEST);
        r->thread = t;
        r->zone_cursor = r->event_cursor = r->hdr.base_time;
        r->root_depth = 0;
        continue;
      }
      case TMK__TAG_SITE: {
        tmk_proto_site* s = &rec->u.site;
        s->id = tmk__in_u32(&in);
        s->kind = (uint8_t)tmk__in_max(&in, TMK_SITE_KIND_COUNT - 1);
        s->severity = (uint8_t)tmk__in_max(&in, TMK_SEV_COUNT - 1);
        s->verbosity = tmk__in_u32(&in);
        s->color = tmk__in_max(&in, 0xFFFFFF);
        s->line = tmk__in_u32(&in);
        s->name = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        s->file = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        if (!in.err && s->id == 0) in.err = TMK_ERANGE;
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_SITE;
        break;
      }
      case TMK__TAG_MARKER_BEGIN:
      case TMK__TAG_MARKER_END:
        rec->u.marker.site = tmk__in_u32(&in);
        r->event_cursor += tmk__unzz(tmk__in_var(&in));
        rec->u.marker.time = r->event_cursor;
        rec->u.marker.payload = tmk__in_str(&in, TMK_PROTO_MAX_PAYLOAD);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = tag == TMK__TAG_MARKER_BEGIN ? TMK_REC_MARKER_BEGIN : TMK_REC_MARKER_END;
        break;
      case TMK__TAG_FRAME:
        rec->u.frame.site = tmk__in_u32(&in);
        r->event_cursor += tmk__unzz(tmk__in_var(&in));
        rec->u.frame.time = r->event_cursor;
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_FRAME;
        break;
      case TMK__TAG_PLOT_I:
      case TMK__TAG_PLOT_D:
        rec->u.plot.site = tmk__in_u32(&in);
        r->event_cursor += tmk__unzz(tmk__in_var(&in));
        rec->u.plot.time = r->event_cursor;
        if (tag == TMK__TAG_PLOT_I) {
          rec->u.plot.is_double = 0;
          rec->u.plot.i = tmk__u2i(tmk__unzz(tmk__in_var(&in)));
          rec->u.plot.d = (double)rec->u.plot.i;
        } else {
          uint64_t bits = tmk__in_f64bits(&in, (r->hdr.flags & TMK_PKT_F_BIG_ENDIAN) != 0);
          rec->u.plot.is_double = 1;
          memcpy(&rec->u.plot.d, &bits, 8);
          rec->u.plot.i = (int64_t)0;
        }
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_PLOT;
        break;
      case TMK__TAG_MESSAGE:
        rec->u.message.site = tmk__in_u32(&in);
        rec->u.message.severity = (uint8_t)tmk__in_max(&in, TMK_SEV_COUNT - 1);
        rec->u.message.verbosity = tmk__in_u32(&in);
        r->event_cursor += tmk__unzz(tmk__in_var(&in));
        rec->u.message.time = r->event_cursor;
        rec->u.message.text = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_MESSAGE;
        break;
      case TMK__TAG_THREAD_NAME:
        rec->thread = tmk__in_u32(&in);
        rec->u.thread_name.name = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_THREAD_NAME;
        break;
      case TMK__TAG_DROPS:
        rec->u.drops.reason = tmk__in_u32(&in);
        rec->u.drops.count = tmk__in_var(&in);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_DROPS;
        break;
      case TMK__TAG_CLOCK:
        rec->u.clock.ticks = tmk__in_var(&in);
        rec->u.clock.unix_ns = tmk__in_var(&in);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_CLOCK_SYNC;
        break;
      case TMK__TAG_TEAM:
        rec->u.team.bit = tmk__in_max(&in, TMK_PROTO_MAX_TEAMS - 1);
        rec->u.team.name = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
        if (in.err) return tmk__fail(r, in.err);
        rec->type = TMK_REC_TEAM_NAME;
        break;
      default:
        return tmk__fail(r, TMK_ERECORD);
    }
    r->p = in.p;
    r->q = in.q;
    r->nacc = in.acc;
    r->nbits = in.nbits;
    return 1;
  }
}

/* =============================================================================================
 * Control packet bodies (§6)
 * =========================================================================================== */

static int tmk__body(tmk_proto_reader* r, int type, tmk__in* in) {
  if (!r) return TMK_EINVAL;
  if (r->done < 0) return r->done;
  if (r->hdr.type != type) return TMK_ETYPE;
  in->p = r->p;
  in->end = r->end;
  in->q = r->end;
  in->acc = 0;
  in->nbits = 0;
  in->nstate = r->nstate;
  in->err = 0;
  return 0;
}

int tmk_proto_read_hello(tmk_proto_reader* r, tmk_proto_hello* h) {
  tmk__in in;
  tmk_proto_str shib;
  int rc = tmk__body(r, TMK_PKT_HELLO, &in);
  if (rc) return rc;
  memset(h, 0, sizeof *h);
  shib = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  if (!in.err && (shib.len != sizeof TMK_PROTO_SHIBBOLETH - 1 ||
                  memcmp(shib.ptr, TMK_PROTO_SHIBBOLETH, shib.len) != 0))
    return TMK_EMAGIC;
  h->proto_version = tmk__in_u32(&in);
  h->agent_version = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  h->program = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  h->platform = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  h->arch = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  h->big_endian = (uint8_t)tmk__in_max(&in, 1);
  h->pointer_size = (uint8_t)tmk__in_max(&in, 16);
  h->timer_freq = tmk__in_var(&in);
  h->caps = tmk__in_u32(&in);
  h->max_packet = tmk__in_max(&in, TMK_PROTO_MAX_PACKET);
  if (!in.err && h->timer_freq == 0) in.err = TMK_ERANGE;
  if (!in.err && in.p < in.end) {
    /* §6.1 optional trailing fields build, label. A tail that does not decode as them is
     * ignored like any unknown tail (both stay empty): it never fails the HELLO. */
    tmk__in t = in;
    tmk_proto_str b = tmk__in_str(&t, TMK_PROTO_MAX_LABEL), l = {"", 0};
    if (!t.err && t.p < t.end) l = tmk__in_str(&t, TMK_PROTO_MAX_LABEL);
    if (!t.err) {
      h->build = b;
      h->label = l;
    }
  }
  return in.err;
}

int tmk_proto_read_welcome(tmk_proto_reader* r, tmk_proto_welcome* w) {
  tmk__in in;
  int rc = tmk__body(r, TMK_PKT_WELCOME, &in);
  if (rc) return rc;
  w->proto_version = tmk__in_u32(&in);
  w->relay_version = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  return in.err;
}

int tmk_proto_read_reject(tmk_proto_reader* r, tmk_proto_reject* rj) {
  tmk__in in;
  int rc = tmk__body(r, TMK_PKT_REJECT, &in);
  if (rc) return rc;
  rj->reason = tmk__in_u32(&in);
  rj->text = tmk__in_str(&in, TMK_PROTO_MAX_STRING);
  return in.err;
}

int tmk_proto_read_control(tmk_proto_reader* r, tmk_proto_control* c) {
  tmk__in in;
  int rc = tmk__body(r, TMK_PKT_CONTROL, &in);
  if (rc) return rc;
  c->seq = tmk__in_u32(&in);
  c->severity = (uint8_t)tmk__in_max(&in, TMK_SEV_COUNT - 1);
  c->verbosity = tmk__in_u32(&in);
  return in.err;
}
