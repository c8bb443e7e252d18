/* tmk_proto_writer.c — the encoder (§5, §6): builds a DATA body record by record in a caller's
 * buffer (record stream from the front, number stream from the back), finishes it into a packet
 * with header and optional LZ4, and encodes the control packets. No allocation, no OS calls. */
#include "tmk_proto_rice.h"

#if TMK_PROTO_TIME32 && !TMK__SIZE_BUILD
#error "TMK_PROTO_TIME32 is a mode of the -Os build (tmk_proto.h)"
#endif

#define TMK__CLOSE_MAX 14u /* tag + the longest number code, rounded up to whole bytes */
#define TMK__ZONE_MAX 56u  /* AT + tag + site + two longest number codes, and then some */
#define TMK__HALF 0x8000000000000000ull
#define TMK__APREFIX 6u /* room for the two stream lengths (3 bytes each, body <= 65536) */

/* =============================================================================================
 * Bounded output for the record stream and control bodies
 * =========================================================================================== */

/* Writes stop at `end`, `ok` turns 0, and the caller rolls back. */
typedef struct tmk__ob {
  uint8_t* p;
  uint8_t* end;
  int ok;
} tmk__ob;

static void tmk__ob_u8(tmk__ob* o, unsigned b) {
  if (o->p < o->end)
    *o->p++ = (uint8_t)b;
  else
    o->ok = 0;
}

static void tmk__ob_bytes(tmk__ob* o, const void* data, size_t n) {
  if ((size_t)(o->end - o->p) >= n) {
    if (n) memcpy(o->p, data, n);
    o->p += n;
  } else {
    o->ok = 0;
  }
}

static void tmk__ob_var(tmk__ob* o, uint64_t v) {
#if TMK__SIZE_BUILD /* -Os: through a buffer and tmk__ob_bytes, the smaller code */
  uint8_t t[10];
  tmk__ob_bytes(o, t, (size_t)tmk_proto_varint_put(t, v));
#else
  if (o->end - o->p >= 10) {
    o->p += tmk_proto_varint_put(o->p, v);
  } else {
    uint8_t t[10];
    int n = tmk_proto_varint_put(t, v);
    if (o->end - o->p >= n) {
      memcpy(o->p, t, (size_t)n);
      o->p += n;
    } else {
      o->ok = 0;
    }
  }
#endif
}

static void tmk__ob_str(tmk__ob* o, const char* s, size_t n) {
  if (n > TMK_PROTO_MAX_STRING) {
    o->ok = 0;
    return;
  }
  tmk__ob_var(o, n);
  tmk__ob_bytes(o, s, n);
}

/* A fixed-width 64-bit field in the packet's byte order (§3.4). */
static void tmk__ob_u64(tmk__ob* o, uint64_t v, int big_endian) {
  uint8_t b[8];
  tmk__put_u64(b, v, big_endian);
  tmk__ob_bytes(o, b, 8);
}

/* =============================================================================================
 * Writer state and the small records (§5.1, §5.2, §5.4 - §5.12)
 * =========================================================================================== */

int tmk_proto_writer_init(tmk_proto_writer* w, void* body, size_t cap) {
  if (!w || !body || cap < 64 || cap > TMK_PROTO_MAX_PACKET - TMK_PROTO_MAX_HEADER)
    return TMK_EINVAL;
  memset(w, 0, sizeof *w);
  w->buf = (uint8_t*)body;
  w->cap = (uint32_t)cap;
  w->big_endian = tmk__host_big_endian();
  tmk_proto_writer_reset(w);
  return 0;
}

void tmk_proto_writer_reset(tmk_proto_writer* w) {
  int big_endian = w->big_endian;
  /* every field from len to the predictor tables is state of the packet being written */
  memset(&w->len, 0, (size_t)((char*)&w->open_end - (char*)&w->len));
#if TMK__NOUT_U
  tmk__nout_init(w->nstate); /* (at -Os the memset has done it: states of 0) */
#endif
  w->big_endian = big_endian;
  w->len = 2;
  w->a_end = TMK__APREFIX;
  w->b_start = w->cap;
}

/* (len is 2, two empty stream lengths, exactly when both streams are empty: tmk__w_size) */
int tmk_proto_writer_empty(const tmk_proto_writer* w) { return !w->sealed && w->len == 2; }

/* The varint length of a stream length (below 2^21: a body is at most 65,536 bytes). */
static uint32_t tmk__len_size(uint32_t v) { return 1u + (v >= 0x80u) + (v >= 0x4000u); }

static void tmk__w_size(tmk_proto_writer* w) {
  uint32_t a = w->a_end - TMK__APREFIX;
  uint32_t b = w->cap - w->b_start + (w->npend ? 1u : 0u);
  w->len = tmk__len_size(a) + tmk__len_size(b) + a + b;
}

static void tmk__w_open(tmk_proto_writer* w, tmk__ob* o) {
  o->p = w->buf + w->a_end;
  o->end = w->buf + w->b_start - (w->npend ? 1 : 0); /* keep the number stream's last byte */
  o->ok = !w->sealed;
}

static int tmk__w_commit(tmk_proto_writer* w, tmk__ob* o) {
  if (!o->ok) return w->sealed ? TMK_ESTATE : TMK_ENOSPC;
  w->a_end = (uint32_t)(o->p - w->buf);
  w->records++;
  tmk__w_size(w);
  return 0;
}

/* The first timed record fixes the packet's base time (§5.2). */
static void tmk__w_base(tmk_proto_writer* w, uint64_t t) {
  if (!w->has_base) {
    w->has_base = 1;
    w->base_time = w->zone_cursor = w->event_cursor = t;
  }
}

/* Every record but zones, in one function driven by a table of each record's fields in wire
 * order: one copy of the bounded-output, event-cursor and validation code and one field loop,
 * which is what a small board's image counts. A record that fails a check leaves the writer as
 * it was: bytes written past a_end count only once committed. */
enum {
  TMK__F_U8 = 1, /* a uint8_t, as a varint */
  TMK__F_BOOL,   /* a uint8_t, as varint 0 or 1 */
  TMK__F_U32,    /* a uint32_t, as a varint */
  TMK__F_U64,    /* a uint64_t, as a varint */
  TMK__F_DT,     /* the event's time (uint64_t): zigzag of its distance from the event cursor */
  TMK__F_ZZ,     /* an int64_t, zigzagged */
  TMK__F_F64,    /* a double's bits, fixed width in the packet's byte order (§3.4) */
  TMK__F_STR     /* a tmk_proto_str: varint length, bytes */
};
/* A field's kind may carry, times 16, the range its value (a string: its length) must be in,
 * beyond what its type implies: an index into tmk__field_max. The site id is never 0. */
enum { TMK__L_KIND = 1, TMK__L_SEV, TMK__L_COLOR, TMK__L_TEAM, TMK__L_PAYLOAD, TMK__L_ID };
static const uint32_t tmk__field_max[] = {0xFFFFFFFFu, TMK_SITE_KIND_COUNT - 1, TMK_SEV_COUNT - 1,
                                          0xFFFFFFu, TMK_PROTO_MAX_TEAMS - 1, TMK_PROTO_MAX_PAYLOAD,
                                          0xFFFFFFFEu /* id - 1 */};
/* Writes the fields `f` lists ((kind, offset) pairs up to a 0) of the struct at `base`. Event
 * times (TMK__F_DT) are coded from w's event cursor and the last one is stored in *time; w also
 * gives the byte order of TMK__F_F64. Returns 1 when a time was written, 0 when none, or
 * TMK_EINVAL for a string that is too long or has no bytes, or a value out of its field's range
 * (the checks a record's fields need beyond their types: tmk__field_max). */
static int tmk__ob_fields(tmk__ob* o, const void* base, const uint8_t* f,
                          const tmk_proto_writer* w, uint64_t* time) {
  int timed = 0;
  for (; *f; f += 2) {
    const void* at = (const char*)base + f[1];
    unsigned lim = f[0] >> 4u;
    uint64_t v;
    switch (f[0] & 15u) {
      case TMK__F_U8: v = *(const uint8_t*)at; break;
      case TMK__F_BOOL: v = *(const uint8_t*)at != 0; break;
      case TMK__F_U32: v = *(const uint32_t*)at; break;
      case TMK__F_DT:
      case TMK__F_ZZ:
        v = *(const uint64_t*)at;
        if (f[0] == TMK__F_DT) {
          *time = v;
          timed = 1;
          v = w->has_base ? v - w->event_cursor : 0;
        }
        v = tmk__zz(v);
        break;
      case TMK__F_F64: {
        uint64_t bits;
        memcpy(&bits, at, 8);
        tmk__ob_u64(o, bits, w->big_endian);
        continue;
      }
      case TMK__F_STR: {
        const tmk_proto_str* s = (const tmk_proto_str*)at;
        if (s->len > TMK_PROTO_MAX_STRING || (s->len && !s->ptr) || s->len > tmk__field_max[lim])
          return TMK_EINVAL;
        tmk__ob_var(o, s->len); /* (checked above: not tmk__ob_str) */
        tmk__ob_bytes(o, s->ptr, s->len); /* copies nothing when len is 0 */
        continue;
      }
      default: v = *(const uint64_t*)at; break; /* TMK__F_U64 */
    }
    if ((uint32_t)v - (lim == TMK__L_ID) > tmk__field_max[lim]) return TMK_EINVAL;
    tmk__ob_var(o, v);
  }
  return timed;
}

/* One record in the writer: its tag (f[0]) and fields (f + 1, of the struct at base), committed
 * only when all fit. Returns what tmk__ob_fields does, or TMK_ENOSPC / TMK_ESTATE. */
static int tmk__w_fields(tmk_proto_writer* w, const void* base, const uint8_t* f, uint64_t* time) {
  tmk__ob o;
  int timed, rc;
  tmk__w_open(w, &o);
  tmk__ob_u8(&o, f[0]);
  if ((timed = tmk__ob_fields(&o, base, f + 1, w, time)) < 0) return timed;
  if ((rc = tmk__w_commit(w, &o)) != 0) return rc;
  return timed;
}

#define TMK__F(kind, member) (uint8_t)(kind), (uint8_t)offsetof(tmk_proto_record, member)
#define TMK__FL(kind, lim, member) TMK__F((kind) | (lim) << 4, member)
/* Each record: its tag, then (kind, offset) pairs, then 0 (§5.1, §5.2, §5.4 - §5.12). */
static const uint8_t tmk__rec_fields[] = {
#define TMK__R_SITE 0
    TMK__TAG_SITE, TMK__FL(TMK__F_U32, TMK__L_ID, u.site.id),
    TMK__FL(TMK__F_U8, TMK__L_KIND, u.site.kind), TMK__FL(TMK__F_U8, TMK__L_SEV, u.site.severity),
    TMK__F(TMK__F_U32, u.site.verbosity), TMK__FL(TMK__F_U32, TMK__L_COLOR, u.site.color),
    TMK__F(TMK__F_U32, u.site.line),
    TMK__F(TMK__F_STR, u.site.name), TMK__F(TMK__F_STR, u.site.file), 0,
#define TMK__R_MARKER_BEGIN (TMK__R_SITE + 18)
    TMK__TAG_MARKER_BEGIN, TMK__F(TMK__F_U32, u.marker.site), TMK__F(TMK__F_DT, u.marker.time),
    TMK__FL(TMK__F_STR, TMK__L_PAYLOAD, u.marker.payload), 0,
#define TMK__R_MARKER_END (TMK__R_MARKER_BEGIN + 8)
    TMK__TAG_MARKER_END, TMK__F(TMK__F_U32, u.marker.site), TMK__F(TMK__F_DT, u.marker.time),
    TMK__FL(TMK__F_STR, TMK__L_PAYLOAD, u.marker.payload), 0,
#define TMK__R_FRAME (TMK__R_MARKER_END + 8)
    TMK__TAG_FRAME, TMK__F(TMK__F_U32, u.frame.site), TMK__F(TMK__F_DT, u.frame.time), 0,
#define TMK__R_PLOT_I (TMK__R_FRAME + 6)
    TMK__TAG_PLOT_I, TMK__F(TMK__F_U32, u.plot.site), TMK__F(TMK__F_DT, u.plot.time),
    TMK__F(TMK__F_ZZ, u.plot.i), 0,
#define TMK__R_PLOT_D (TMK__R_PLOT_I + 8)
    TMK__TAG_PLOT_D, TMK__F(TMK__F_U32, u.plot.site), TMK__F(TMK__F_DT, u.plot.time),
    TMK__F(TMK__F_F64, u.plot.d), 0,
#define TMK__R_MESSAGE (TMK__R_PLOT_D + 8)
    TMK__TAG_MESSAGE, TMK__F(TMK__F_U32, u.message.site),
    TMK__FL(TMK__F_U8, TMK__L_SEV, u.message.severity),
    TMK__F(TMK__F_U32, u.message.verbosity), TMK__F(TMK__F_DT, u.message.time),
    TMK__F(TMK__F_STR, u.message.text), 0,
#define TMK__R_THREAD_NAME (TMK__R_MESSAGE + 12)
    TMK__TAG_THREAD_NAME, TMK__F(TMK__F_U32, thread), TMK__F(TMK__F_STR, u.thread_name.name), 0,
#define TMK__R_DROPS (TMK__R_THREAD_NAME + 6)
    TMK__TAG_DROPS, TMK__F(TMK__F_U32, u.drops.reason), TMK__F(TMK__F_U64, u.drops.count), 0,
#define TMK__R_CLOCK (TMK__R_DROPS + 6)
    TMK__TAG_CLOCK, TMK__F(TMK__F_U64, u.clock.ticks), TMK__F(TMK__F_U64, u.clock.unix_ns), 0,
#define TMK__R_TEAM (TMK__R_CLOCK + 6)
    TMK__TAG_TEAM, TMK__FL(TMK__F_U32, TMK__L_TEAM, u.team.bit),
    TMK__F(TMK__F_STR, u.team.name), 0,
#define TMK__R_END (TMK__R_TEAM + 6)
};
/* Where each TMK_REC_* type's entry starts (0xFF: not written here); a plot with is_double
 * takes the entry after it. */
static const uint8_t tmk__rec_at[TMK_REC_TEAM_NAME + 1] = {
    0xFF,          TMK__R_SITE,  0xFF,           TMK__R_MARKER_BEGIN, TMK__R_MARKER_END,
    TMK__R_FRAME,  TMK__R_PLOT_I, TMK__R_MESSAGE, TMK__R_THREAD_NAME, TMK__R_DROPS,
    TMK__R_CLOCK,  TMK__R_TEAM};
typedef char tmk__rec_fields_check[sizeof tmk__rec_fields == TMK__R_END ? 1 : -1];

int tmk_proto_put_record(tmk_proto_writer* w, const tmk_proto_record* r) {
  const uint8_t* f;
  uint64_t time = 0;
  int timed;
  if (!w || !r || r->type > TMK_REC_TEAM_NAME || tmk__rec_at[r->type] == 0xFF) return TMK_EINVAL;
  f = tmk__rec_fields + tmk__rec_at[r->type];
  if (r->type == TMK_REC_PLOT && r->u.plot.is_double) f += TMK__R_PLOT_D - TMK__R_PLOT_I;
  if ((timed = tmk__w_fields(w, r, f, &time)) <= 0) return timed;
  tmk__w_base(w, time);
  w->event_cursor = time;
  return 0;
}

int tmk_proto_put_thread(tmk_proto_writer* w, uint32_t thread) {
  static const uint8_t fields[] = {TMK__TAG_THREAD, TMK__F_U32, 0, 0};
  int rc;
  if (thread == w->thread) return 0;
  if ((rc = tmk__w_fields(w, &thread, fields, NULL)) < 0) return rc;
  w->records--; /* a context switch, not a record */
  w->thread = thread;
  w->zone_cursor = w->event_cursor = w->base_time;
  w->root_depth = 0;
  return 0;
}

int tmk_proto_put_site(tmk_proto_writer* w, const tmk_proto_site* s) {
  tmk_proto_record r;
  if (!s) return TMK_EINVAL;
  memset(&r, 0, sizeof r);
  r.type = TMK_REC_SITE;
  r.u.site = *s;
  return tmk_proto_put_record(w, &r);
}

int tmk_proto_put_marker(tmk_proto_writer* w, int is_end, uint32_t site, uint64_t time,
                         const void* payload, size_t payload_len) {
  tmk_proto_record r;
  if (payload_len > TMK_PROTO_MAX_PAYLOAD) return TMK_EINVAL;
  memset(&r, 0, sizeof r);
  r.type = is_end ? TMK_REC_MARKER_END : TMK_REC_MARKER_BEGIN;
  r.u.marker.site = site;
  r.u.marker.time = time;
  r.u.marker.payload.ptr = (const char*)payload;
  r.u.marker.payload.len = (uint32_t)payload_len;
  return tmk_proto_put_record(w, &r);
}

int tmk_proto_put_frame(tmk_proto_writer* w, uint32_t site, uint64_t time) {
  tmk_proto_record r;
  memset(&r, 0, sizeof r);
  r.type = TMK_REC_FRAME;
  r.u.frame.site = site;
  r.u.frame.time = time;
  return tmk_proto_put_record(w, &r);
}

int tmk_proto_put_plot_i(tmk_proto_writer* w, uint32_t site, uint64_t time, int64_t value) {
  tmk_proto_record r;
  memset(&r, 0, sizeof r);
  r.type = TMK_REC_PLOT;
  r.u.plot.site = site;
  r.u.plot.time = time;
  r.u.plot.i = value;
  return tmk_proto_put_record(w, &r);
}

int tmk_proto_put_plot_d(tmk_proto_writer* w, uint32_t site, uint64_t time, double value) {
  tmk_proto_record r;
  memset(&r, 0, sizeof r);
  r.type = TMK_REC_PLOT;
  r.u.plot.site = site;
  r.u.plot.time = time;
  r.u.plot.is_double = 1;
  r.u.plot.d = value;
  return tmk_proto_put_record(w, &r);
}

int tmk_proto_put_message(tmk_proto_writer* w, uint32_t site, uint8_t severity,
                          uint32_t verbosity, uint64_t time, const char* text, size_t len) {
  tmk_proto_record r;
  if (len > TMK_PROTO_MAX_STRING) return TMK_EINVAL;
  memset(&r, 0, sizeof r);
  r.type = TMK_REC_MESSAGE;
  r.u.message.site = site;
  r.u.message.severity = severity;
  r.u.message.verbosity = verbosity;
  r.u.message.time = time;
  r.u.message.text.ptr = text;
  r.u.message.text.len = (uint32_t)len;
  return tmk_proto_put_record(w, &r);
}

int tmk_proto_put_thread_name(tmk_proto_writer* w, uint32_t thread, const char* name,
                              size_t len) {
  tmk_proto_record r;
  if (len > TMK_PROTO_MAX_STRING) return TMK_EINVAL;
  memset(&r, 0, sizeof r);
  r.type = TMK_REC_THREAD_NAME;
  r.thread = thread;
  r.u.thread_name.name.ptr = name;
  r.u.thread_name.name.len = (uint32_t)len;
  return tmk_proto_put_record(w, &r);
}

int tmk_proto_put_drops(tmk_proto_writer* w, uint32_t reason, uint64_t count) {
  tmk_proto_record r;
  memset(&r, 0, sizeof r);
  r.type = TMK_REC_DROPS;
  r.u.drops.reason = reason;
  r.u.drops.count = count;
  return tmk_proto_put_record(w, &r);
}

int tmk_proto_put_clock(tmk_proto_writer* w, uint64_t ticks, uint64_t unix_ns) {
  tmk_proto_record r;
  memset(&r, 0, sizeof r);
  r.type = TMK_REC_CLOCK_SYNC;
  r.u.clock.ticks = ticks;
  r.u.clock.unix_ns = unix_ns;
  return tmk_proto_put_record(w, &r);
}

int tmk_proto_put_team(tmk_proto_writer* w, uint32_t bit, const char* name, size_t len) {
  tmk_proto_record r;
  if (len > TMK_PROTO_MAX_STRING) return TMK_EINVAL;
  memset(&r, 0, sizeof r);
  r.type = TMK_REC_TEAM_NAME;
  r.u.team.bit = bit;
  r.u.team.name.ptr = name;
  r.u.team.name.len = (uint32_t)len;
  return tmk_proto_put_record(w, &r);
}

/* =============================================================================================
 * Zones (§5.3)
 * =========================================================================================== */

/* Does zone `z` lie inside [cursor, end], measured from `cursor` modulo 2^64 (both its start
 * and its end, and neither more than 2^63 ticks after `cursor`)? */
TMK__SMALL int tmk__inside(uint64_t cursor, uint64_t end, const tmk_proto_zone* z) {
  uint64_t gap = z->start - cursor;
  uint64_t room = end - cursor;
  return gap < TMK__HALF && room < TMK__HALF && gap <= room && z->duration <= room - gap;
}

/* A zone time in the -Os loop of tmk_proto_put_zones. With TMK_PROTO_TIME32 it is an offset
 * from the start of the packet's window (its base time - TMK_PROTO_TIME32_REACH): every time of
 * the packet's zones is then below 2^31, so differences fit 32 bits, a zone is inside another
 * by plain compares, and the bytes are those the 64-bit arithmetic writes (tmk_proto.h). */
#if TMK_PROTO_TIME32
typedef uint32_t tmk__zt;
/* [s, s + d] inside [c, e]: tmk__inside's verdict, for times below 2^31 */
#define TMK__ZIN(c, e, s, d, z) ((c) <= (s) && (s) + (d) <= (e))
#define TMK__ZBACK(s, c) ((s) < (c)) /* s before c: an AT (§5.3) */
/* Non-zero when z is beyond the packet's window: when it starts or ends TMK_PROTO_TIME32_REACH
 * ticks or more from the base time, or ends before it starts. */
TMK__SMALL uint32_t tmk__zfar(const tmk_proto_writer* w, const tmk_proto_zone* z) {
  uint64_t so = z->start - (w->base_time - TMK_PROTO_TIME32_REACH), d = z->duration;
  uint32_t s32 = (uint32_t)so, d32 = (uint32_t)d;
  return (uint32_t)(so >> 32) | (uint32_t)(d >> 32) | ((s32 | d32 | (s32 + d32)) >> 31);
}
#define TMK__ZS(z) ((uint32_t)(z)->start - lo) /* z's start and duration */
#define TMK__ZD(z) ((uint32_t)(z)->duration)
static inline uint32_t tmk__zz32(uint32_t v) { return (v << 1) ^ (0u - (v >> 31)); }
#define TMK__ZZ tmk__zz32
#else
typedef uint64_t tmk__zt;
#define TMK__ZIN(c, e, s, d, z) tmk__inside(c, e, z)
#define TMK__ZBACK(s, c) ((int)(((s) - (c)) >> 63))
#define TMK__ZS(z) ((z)->start)
#define TMK__ZD(z) ((z)->duration)
#define TMK__ZZ tmk__zz
#endif

#if TMK__SIZE_BUILD
/* tmk__predict and tmk__pcode on zone times */
static inline unsigned tmk__zpredict(tmk_proto_writer* w, unsigned table, uint32_t site,
                                     tmk__zt* pred) {
  uint64_t p;
  unsigned ctx = tmk__predict(w->predict, table, site, &p);
  *pred = (tmk__zt)p;
  return ctx;
}
static inline tmk__zt tmk__zpcode(unsigned ctx, tmk__zt v, tmk__zt pred) {
  return ctx == TMK__NUM_DUR || ctx == TMK__NUM_CLOSE ? TMK__ZZ(v - pred) : v;
}

/* CLOSE's number: the parent's tail after its last child, predicted from its site (§5.3). */
static void tmk__put_tail(tmk_proto_writer* w, tmk__nout* num, uint32_t site, tmk__zt tail) {
  tmk__zt pred;
  unsigned ctx = tmk__zpredict(w, 1, site, &pred);
  tmk__nout_num(num, ctx, tmk__zpcode(ctx, tail, pred));
  tmk__learn(w->predict, 1, site, tail);
}

typedef char tmk__tags_check[TMK__TAG_OPEN == TMK__TAG_LEAF + 1 ? 1 : -1];
#else
/* CLOSE's number: the parent's tail after its last child, predicted from its site (§5.3). */
TMK__HOT void /* inlined, so that the number stream's state stays in registers */
tmk__put_tail(tmk_proto_writer* w, tmk__nout* num, uint32_t site, uint64_t tail) {
  uint64_t pred;
  unsigned ctx = tmk__predict(w->predict, 1, site, &pred);
  tmk__nout_num(num, ctx, tmk__pcode(ctx, tail, pred));
  tmk__learn(w->predict, 1, site, tail);
}
#endif

/* The speed build's zone loop and leaf runs read the states as tmk__state_u keeps them. */
typedef char tmk__nout_u_check[TMK__SIZE_BUILD || TMK__NOUT_U ? 1 : -1];

#if !TMK__SIZE_BUILD && !TMK_PROTO_TIME32
/* A number's Rice code (§5.0) in *bits (*nb bits, <= 30) when its unary part is short and its
 * parameter at most 24 (nearly every number of a busy stream: tmk__nout_num writes the same
 * bits); 0 when not, and nothing is written. u: the state as tmk__state_u keeps it. */
static inline int tmk__short_code(uint32_t u, uint64_t v, uint64_t* bits, unsigned* nb) {
  const unsigned k = tmk__u_k(u); /* tmk__rice_k of the state */
  const uint64_t q = v >> k;
  if (q >= TMK__RICE_ESC || k > 24) return 0;
  /* q ones, a zero, the k low bits (v - (q << k)): ((2 * low + 1) << q) - 1 */
  *bits = ((2 * (v - (q << k)) + 1) << q) - 1;
  *nb = (unsigned)q + 1 + k;
  return 1;
}

/* The loop of tmk__leaf_run, for zones with an open parent ending at pe (has_parent) or at the
 * root depth with nothing open: inlined once for each, so neither tests which it is. */
TMK__HOT size_t tmk__leaf_loop(tmk_proto_slot* slots, const tmk_proto_zone* zones, size_t i,
                               size_t n, uint8_t** pp, tmk__nout* num, uint64_t* cursorp,
                               uint32_t* u, uint32_t depth, const int has_parent, uint64_t pe,
                               size_t keep) {
  uint8_t* p = *pp;
  tmk__nout o = *num;
  uint64_t cursor = *cursorp;
  uint32_t ugap = u[0], udur = u[1], ufresh = u[2];
  /* (the last zone goes to the general path: zones[i + 1] is always there to look at) */
  for (; i + 1 < n; i++) {
    const tmk_proto_zone* z = &zones[i];
    const uint64_t start = z->start, dur = z->duration, gap = start - cursor;
    const uint32_t site = z->site;
    tmk_proto_slot* sl;
    uint64_t b1, b2;
    unsigned n1, n2;
    if (z->depth != depth || site - 1u >= TMK__LEAF_SHORT_MAX || gap >= TMK__HALF) break;
    if (has_parent) { /* tmk__inside(cursor, pe, z) */
      const uint64_t room = pe - cursor;
      if (room >= TMK__HALF || gap > room || dur > room - gap) break;
    }
    if (zones[i + 1].depth == depth + 1) break; /* z may be an OPEN */
    if ((size_t)(o.front - p) < keep) break;
    if (!tmk__short_code(ugap, gap, &b1, &n1)) break;
    sl = &slots[site & (TMK_PROTO_PREDICT_SLOTS - 1)];
    if (TMK__P_LIKELY(sl->site == site)) { /* predicted (site >= 1: only a used slot holds it) */
      const uint64_t code = tmk__zz(dur - sl->duration);
      if (!tmk__short_code(udur, code, &b2, &n2)) break;
      udur = tmk__u_update(udur, code);
    } else {
      if (!tmk__short_code(ufresh, dur, &b2, &n2)) break;
      ufresh = tmk__u_update(ufresh, dur);
      sl->site = site;
      sl->used = 1;
    }
    ugap = tmk__u_update(ugap, gap);
    *p++ = (uint8_t)(TMK__TAG_LEAF_SHORT + site - 1);
    if (TMK__P_LIKELY(n1 + n2 <= 32)) { /* both codes in one write, nearly always */
      tmk__nout_bits(&o, b1 | b2 << n1, n1 + n2);
    } else {
      tmk__nout_bits(&o, b1, n1);
      tmk__nout_bits(&o, b2, n2);
    }
    sl->duration = dur;
    cursor = start + dur;
  }
  u[0] = ugap;
  u[1] = udur;
  u[2] = ufresh;
  *pp = p;
  *num = o;
  *cursorp = cursor;
  return i;
}

/* A run of zones that are plain LEAFs with a short site (§5.3): each a direct child of the zone
 * open now (or at the root depth with nothing open), inside it, needing no AT, not followed by a
 * zone one deeper (which might make it an OPEN), with short codes for both numbers and room to
 * spare in the packet. What tmk_proto_put_zones's loop writes for such a zone, with the number
 * stream's state in locals: the byte stores cannot alias them, so nothing is reloaded. Returns
 * the index of the first zone that is not such a leaf (the loop's general path takes it), or n.
 * The bytes, and where a packet ends, are the same as without it (tests/proto compares). */
TMK__HOT size_t tmk__leaf_run(tmk_proto_writer* w, const tmk_proto_zone* zones, size_t i,
                              size_t n, uint8_t** pp, tmk__nout* num, uint64_t* cursorp,
                              uint32_t depth, const uint64_t* parent_end, unsigned nopen) {
  uint32_t* st = num->state; /* kept as tmk__state_u keeps them (TMK__NOUT_U) */
  uint32_t u[3]; /* (the loop on a copy, not on st itself: GCC then keeps them in registers,
                    3 instructions a zone fewer nested, callgrind) */
  const size_t keep = (size_t)TMK__CLOSE_MAX * nopen + TMK__ZONE_MAX;
  u[0] = st[TMK__NUM_GAP];
  u[1] = st[TMK__NUM_DUR];
  u[2] = st[TMK__NUM_FRESH];
  if (parent_end)
    i = tmk__leaf_loop(w->predict[0], zones, i, n, pp, num, cursorp, u, depth, 1, *parent_end,
                       keep);
  else
    i = tmk__leaf_loop(w->predict[0], zones, i, n, pp, num, cursorp, u, depth, 0, 0, keep);
  st[TMK__NUM_GAP] = u[0];
  st[TMK__NUM_DUR] = u[1];
  st[TMK__NUM_FRESH] = u[2];
  return i;
}
#endif

int tmk_proto_put_zones(tmk_proto_writer* w, const tmk_proto_zone* zones, size_t n) {
  uint64_t* open_end;
  uint32_t* open_site;
  uint32_t open_depth0 = 0; /* open zone k has depth open_depth0 + k: each is a direct child */
  unsigned nopen = 0;
  tmk__zt cursor;
  uint32_t root_depth;
#if TMK_PROTO_TIME32
  uint32_t lo; /* where the packet's window starts (its base time - TMK_PROTO_TIME32_REACH),
                  low 32 bits */
#endif
  uint8_t* p;
  tmk__nout num;
  size_t i;
  int had_base;

  if (!w || (!zones && n)) return TMK_EINVAL;
  if (w->sealed) return TMK_ESTATE;
  open_end = w->open_end;
  open_site = w->open_site;
  p = w->buf + w->a_end;
  num.front = w->buf + w->b_start; /* free space is [p, num.front) */
  num.acc = (tmk__nacc)w->nacc;
  num.pend = w->npend;
  num.state = w->nstate;
  had_base = w->has_base;
  root_depth = w->root_depth;
  if (n == 0) return 0;
  if (n > 0x7FFFFFFF) n = 0x7FFFFFFF;
  if (!had_base) {
    w->has_base = 1;
    w->base_time = w->zone_cursor = w->event_cursor = zones[0].start;
  }
#if TMK_PROTO_TIME32
  lo = (uint32_t)w->base_time - (uint32_t)TMK_PROTO_TIME32_REACH;
  cursor = (uint32_t)w->zone_cursor - lo; /* the base or a zone's time: in the window */
#else
  cursor = w->zone_cursor;
#endif

  /* At -Os one pass past the last zone (z NULL) closes what is still open; a speed build has
   * a loop of its own for that after this one. */
#if TMK__SIZE_BUILD
  for (i = 0;; i++) {
    const tmk_proto_zone* z = i < n ? &zones[i] : NULL;
    tmk__zt zend;
#if TMK_PROTO_TIME32
    if (z && tmk__zfar(w, z)) { /* ends the packet's zones: what is open is closed */
      n = i;
      z = NULL;
    }
#endif
#else
  for (i = 0; i < n; i++) {
    const tmk_proto_zone* z;
    uint64_t zend;
#if !TMK_PROTO_TIME32
    i = tmk__leaf_run(w, zones, i, n, &p, &num, &cursor, nopen ? open_depth0 + nopen : root_depth,
                      nopen ? &open_end[nopen - 1] : NULL, nopen);
    if (i == n) break;
#endif
    z = &zones[i];
    zend = z->start + z->duration;
#endif
    int need_at = 0, is_open = 0;
    size_t need;
    unsigned nbits, dctx = TMK__NUM_DUR;
    tmk__zt gap, code = 0, pred;

    /* Close the open zones that cannot hold z as a direct child (all of them after the last). */
    while (nopen) {
#if TMK__SIZE_BUILD
      if (z && z->depth == open_depth0 + nopen &&
          TMK__ZIN(cursor, (tmk__zt)open_end[nopen - 1], TMK__ZS(z), TMK__ZD(z), z))
        break;
      nopen--;
      *p++ = TMK__TAG_CLOSE;
      tmk__put_tail(w, &num, open_site[nopen], (tmk__zt)open_end[nopen] - cursor);
      cursor = (tmk__zt)open_end[nopen];
#else
      if (z->depth == open_depth0 + nopen && tmk__inside(cursor, open_end[nopen - 1], z)) break;
      nopen--;
      *p++ = TMK__TAG_CLOSE;
      tmk__put_tail(w, &num, open_site[nopen], open_end[nopen] - cursor);
      cursor = open_end[nopen];
#endif
    }
#if TMK__SIZE_BUILD
    if (!z) break;
    zend = TMK__ZS(z) + TMK__ZD(z);
#endif
#if !TMK__SIZE_BUILD
    if (nopen == 0 && (z->depth != root_depth || z->start - cursor >= TMK__HALF)) need_at = 1;
#endif
    if (i + 1 < n && nopen < TMK_PROTO_MAX_OPEN) {
      const tmk_proto_zone* c = &zones[i + 1];
#if TMK__SIZE_BUILD
      /* (TMK_PROTO_TIME32: c's window is checked on its turn. A c beyond it may seem inside z
       * here; z is then an OPEN that the next turn closes at once, which codes z's start and
       * duration as exactly as a LEAF.) */
      is_open = z->depth != 0xFFFFFFFFu && c->depth == z->depth + 1 &&
                TMK__ZIN(TMK__ZS(z), zend, TMK__ZS(c), TMK__ZD(c), c);
#else
      is_open = z->depth != 0xFFFFFFFFu && c->depth == z->depth + 1 &&
                tmk__inside(z->start, zend, c);
#endif
    }
#if TMK__SIZE_BUILD
    /* (-Os: after is_open and without branches, so that GCC keeps one copy of the is_open
     * test instead of threading three through need_at's paths) */
    need_at = (nopen == 0) & ((z->depth != root_depth) | TMK__ZBACK(TMK__ZS(z), cursor));

    gap = need_at ? 0 : TMK__ZS(z) - cursor;
    if (!is_open) {
      dctx = tmk__zpredict(w, 0, z->site, &pred);
      code = tmk__zpcode(dctx, TMK__ZD(z), pred);
    }
    {
      /* -Os: the zone's record bytes and number bits go to scratch first, so what it takes is
       * counted by the code that writes it (no separate size count); if the room left after it
       * cannot also hold a CLOSE for every zone still open, it ends the packet's zones. */
      uint8_t rec[32], bits[24], *q = rec;
      tmk__nout t = num;
      uint32_t saved_gap = num.state[TMK__NUM_GAP], saved_dur = num.state[dctx];
      size_t nb;
      (void)need; /* the speed build's exact count near the end of the packet */
      (void)nbits;
      t.front = bits + sizeof bits;
      if (need_at) {
        *q++ = TMK__TAG_AT;
        q += tmk_proto_varint_put(q, z->depth);
        q += tmk_proto_varint_put(q, TMK__ZZ(TMK__ZS(z) - cursor));
      }
      /* OPEN or LEAF: the site in the tag when it is small (one unsigned compare for 1..max),
       * else after it (TMK__TAG_OPEN is TMK__TAG_LEAF + 1: tmk__tags_check) */
      if (z->site - 1u < (is_open ? TMK__OPEN_SHORT_MAX : TMK__LEAF_SHORT_MAX)) {
        *q++ = (uint8_t)((is_open ? TMK__TAG_OPEN_SHORT : TMK__TAG_LEAF_SHORT) + z->site - 1);
      } else {
        *q++ = (uint8_t)(TMK__TAG_LEAF + is_open);
        q += tmk_proto_varint_put(q, z->site);
      }
      tmk__nout_num(&t, TMK__NUM_GAP, gap);
      if (!is_open) tmk__nout_num(&t, dctx, code);
      nb = (size_t)(bits + sizeof bits - t.front);
      if ((size_t)(num.front - p) < (size_t)TMK__CLOSE_MAX * (nopen + (unsigned)is_open) +
                                        (size_t)(q - rec) + nb + (t.pend ? 1u : 0u)) {
        num.state[TMK__NUM_GAP] = saved_gap; /* as it was: z is not written */
        num.state[dctx] = saved_dur;
        n = i--;
        continue;
      }
      memcpy(p, rec, (size_t)(q - rec));
      p += q - rec;
      num.front -= nb;
      memcpy(num.front, t.front, nb);
      num.acc = t.acc;
      num.pend = t.pend;
    }
    if (need_at) {
      cursor = TMK__ZS(z);
      root_depth = z->depth;
    }
    if (is_open) {
      open_end[nopen] = zend;
      open_site[nopen] = z->site;
      if (nopen == 0) open_depth0 = z->depth;
      nopen++;
      cursor = TMK__ZS(z);
    } else {
      tmk__learn(w->predict, 0, z->site, TMK__ZD(z));
      cursor = zend;
    }
#else
    gap = need_at ? 0 : z->start - cursor;
    if (!is_open) {
      dctx = tmk__predict(w->predict, 0, z->site, &pred);
      code = tmk__pcode(dctx, z->duration, pred);
    }
    need = (size_t)TMK__CLOSE_MAX * (nopen + (unsigned)is_open);
    if ((size_t)(num.front - p) < need + TMK__ZONE_MAX) {
      /* Near the end of the packet: work out exactly what this zone takes. */
      if (need_at) need += 1 + tmk__varint_size(z->depth) + tmk__varint_size(tmk__zz(z->start - cursor));
      nbits = num.pend + tmk__rice_bits(gap, tmk__u_k(num.state[TMK__NUM_GAP]));
      if (is_open) {
        need += (z->site >= 1 && z->site <= TMK__OPEN_SHORT_MAX ? 1 : 1 + tmk__varint_size(z->site));
      } else {
        /* Contexts are separate, so coding the gap leaves the duration's state unchanged. */
        need += (z->site >= 1 && z->site <= TMK__LEAF_SHORT_MAX ? 1 : 1 + tmk__varint_size(z->site));
        nbits += tmk__rice_bits(code, tmk__u_k(num.state[dctx]));
      }
      need += (nbits + 7) / 8;
      if ((size_t)(num.front - p) < need) break;
    }

    if (need_at) {
      *p++ = TMK__TAG_AT;
      p += tmk_proto_varint_put(p, z->depth);
      p += tmk_proto_varint_put(p, tmk__zz(z->start - cursor));
      cursor = z->start;
      root_depth = z->depth;
    }
    if (is_open) {
      if (z->site >= 1 && z->site <= TMK__OPEN_SHORT_MAX) {
        *p++ = (uint8_t)(TMK__TAG_OPEN_SHORT + z->site - 1);
      } else {
        *p++ = TMK__TAG_OPEN;
        p += tmk_proto_varint_put(p, z->site);
      }
      tmk__nout_num(&num, TMK__NUM_GAP, gap);
      open_end[nopen] = zend;
      open_site[nopen] = z->site;
      if (nopen == 0) open_depth0 = z->depth;
      nopen++;
      cursor = z->start;
    } else {
      if (z->site >= 1 && z->site <= TMK__LEAF_SHORT_MAX) {
        *p++ = (uint8_t)(TMK__TAG_LEAF_SHORT + z->site - 1);
      } else {
        *p++ = TMK__TAG_LEAF;
        p += tmk_proto_varint_put(p, z->site);
      }
      tmk__nout_num(&num, TMK__NUM_GAP, gap);
      tmk__nout_num(&num, dctx, code);
      tmk__learn(w->predict, 0, z->site, z->duration);
      cursor = zend;
    }
#endif
  }
#if !TMK__SIZE_BUILD
  while (nopen) {
    nopen--;
    *p++ = TMK__TAG_CLOSE;
    tmk__put_tail(w, &num, open_site[nopen], open_end[nopen] - cursor);
    cursor = open_end[nopen];
  }
#endif
  if (i == 0 && !had_base) {
    w->has_base = 0;
    w->base_time = w->zone_cursor = w->event_cursor = 0;
#if TMK_PROTO_TIME32
    if (zones[0].duration >= TMK_PROTO_TIME32_REACH) return TMK_ERANGE; /* fits no packet */
#endif
    return 0;
  }
  if (!TMK__SIZE_BUILD) tmk__nout_settle(&num);
  w->a_end = (uint32_t)(p - w->buf);
  w->b_start = (uint32_t)(num.front - w->buf);
  w->nacc = num.acc;
  w->npend = num.pend;
  tmk__w_size(w);
#if TMK_PROTO_TIME32
  w->zone_cursor = w->base_time - TMK_PROTO_TIME32_REACH + cursor;
#else
  w->zone_cursor = cursor;
#endif
  w->root_depth = root_depth;
  w->zones += (uint32_t)i;
  w->records += (uint32_t)i;
  return (int)i;
}

/* =============================================================================================
 * Finishing a packet (§2, §5)
 * =========================================================================================== */

size_t tmk_proto_lz4_state_size(void) {
#if TMK__LZ4
  return (size_t)LZ4_sizeofState();
#else
  return 0;
#endif
}

/* Joins the streams into the body (§5): varint A, varint N, the record stream (A bytes), the
 * number stream (N bytes); b_start is then where it begins. Once: the writer is sealed. */
static void tmk__seal(tmk_proto_writer* w) {
  uint32_t a = w->a_end - TMK__APREFIX, b, body_at;
  uint8_t lens[TMK__APREFIX];
  unsigned pre;
  if (w->sealed) return;
  if (w->npend) { /* the last bits, zero-padded; room for this byte was kept */
    w->buf[--w->b_start] = (uint8_t)w->nacc;
    w->nacc = 0;
    w->npend = 0;
  }
  b = w->cap - w->b_start;
  pre = (unsigned)tmk_proto_varint_put(lens, a);
  pre += (unsigned)tmk_proto_varint_put(lens + pre, b);
  memmove(w->buf + w->a_end, w->buf + w->b_start, b);
  body_at = TMK__APREFIX - pre;
  memcpy(w->buf + body_at, lens, pre);
  w->b_start = body_at; /* once sealed, b_start is where the joined body begins */
  w->sealed = 1;
  w->len = pre + a + b;
}

int tmk_proto_finish(tmk_proto_writer* w, uint64_t session_id, uint64_t seq, void* out,
                     size_t out_cap, void* lz4_state) {
  uint8_t* o = (uint8_t*)out;
  unsigned flags;
  int hl;
  if (!w || !out) return TMK_EINVAL;
  flags = w->big_endian ? TMK_PKT_F_BIG_ENDIAN : 0;
  /* the base is 0 while !has_base (reset, and a put_zones that wrote none) */
#if TMK__LZ4
  tmk__seal(w);
  if (lz4_state && w->len >= 32) {
    hl = tmk__write_header(o, out_cap, flags | TMK_PKT_F_LZ4, TMK_PKT_DATA, session_id, seq,
                           w->base_time, w->len);
    if (hl > 0) {
      /* Only worth it if the compressed packet is smaller than the plain one. */
      size_t plain = (size_t)hl - tmk__varint_size(w->len) + w->len;
      size_t room = out_cap - (size_t)hl;
      size_t limit = plain - (size_t)hl - 1;
      int c;
      if (limit > room) limit = room;
      c = LZ4_compress_fast_extState(lz4_state, (const char*)w->buf + w->b_start, (char*)o + hl,
                                     (int)w->len, (int)limit, 1);
      if (c > 0) return hl + c;
    }
  }
  hl = tmk__write_header(o, out_cap, flags, TMK_PKT_DATA, session_id, seq, w->base_time, 0);
#else
  /* The header first: its fields are the arguments, and w->len is the body's length sealed or
   * not (tmk__w_size), so few values have to outlive the calls. */
  (void)lz4_state;
  hl = tmk__write_header(o, out_cap, flags, TMK_PKT_DATA, session_id, seq, w->base_time, 0);
  tmk__seal(w);
#endif
  if (hl < 0) return hl;
  if (out_cap - (size_t)hl < w->len) return TMK_ENOSPC;
  memcpy(o + hl, w->buf + w->b_start, w->len);
  return hl + (int)w->len;
}

/* =============================================================================================
 * Control packets (§6)
 * =========================================================================================== */

/* A header with seq 0 and base 0 in the host's byte order, never compressed, then the body. */
static int tmk__ctl_open(tmk__ob* o, void* out, size_t cap, unsigned type, uint64_t session) {
  int hl;
  if (!out) return TMK_EINVAL;
  hl = tmk__write_header((uint8_t*)out, cap, tmk__host_big_endian() ? TMK_PKT_F_BIG_ENDIAN : 0,
                         type, session, 0, 0, 0);
  if (hl < 0) return hl;
  o->p = (uint8_t*)out + hl;
  o->end = (uint8_t*)out + cap;
  o->ok = 1;
  return 0;
}

static int tmk__ctl_close(tmk__ob* o, void* out) {
  if (!o->ok) return TMK_ENOSPC;
  return (int)(o->p - (uint8_t*)out);
}

static void tmk__ob_pstr(tmk__ob* o, tmk_proto_str s) { tmk__ob_str(o, s.ptr, s.len); }

/* HELLO's fields after the shibboleth (§6.1), then its optional trailing ones (from
 * TMK__HELLO_TRAIL), in the form tmk__ob_fields reads. */
#define TMK__H(kind, member) (uint8_t)(kind), (uint8_t)offsetof(tmk_proto_hello, member)
#define TMK__HELLO_TRAIL 21
static const uint8_t tmk__hello_fields[] = {
    TMK__H(TMK__F_U32, proto_version), TMK__H(TMK__F_STR, agent_version),
    TMK__H(TMK__F_STR, program),       TMK__H(TMK__F_STR, platform),
    TMK__H(TMK__F_STR, arch),          TMK__H(TMK__F_BOOL, big_endian),
    TMK__H(TMK__F_U8, pointer_size),   TMK__H(TMK__F_U64, timer_freq),
    TMK__H(TMK__F_U32, caps),          TMK__H(TMK__F_U32, max_packet), 0,
    TMK__H(TMK__F_STR, build),         TMK__H(TMK__F_STR, label), 0};
typedef char tmk__hello_fields_check[sizeof tmk__hello_fields == TMK__HELLO_TRAIL + 5 ? 1 : -1];

typedef char tmk__shibboleth_check[sizeof TMK_PROTO_SHIBBOLETH == 9 ? 1 : -1];

int tmk_proto_encode_hello(void* out, size_t cap, uint64_t session_id, const tmk_proto_hello* h) {
  tmk__ob o;
  int rc;
  if (!h || h->timer_freq == 0) return TMK_EINVAL;
  if (h->build.len > TMK_PROTO_MAX_LABEL || h->label.len > TMK_PROTO_MAX_LABEL)
    return TMK_ETOOBIG; /* §6.1 optional trailing fields */
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_HELLO, session_id)) < 0) return rc;
  tmk__ob_bytes(&o, "\010" TMK_PROTO_SHIBBOLETH, 9); /* a string: its length (8), its bytes */
  if ((rc = tmk__ob_fields(&o, h, tmk__hello_fields, NULL, NULL)) < 0)
    return rc;
  if ((h->build.len || h->label.len) &&
      (rc = tmk__ob_fields(&o, h, tmk__hello_fields + TMK__HELLO_TRAIL, NULL, NULL)) < 0)
    return rc;
  return tmk__ctl_close(&o, out);
}

int tmk_proto_encode_welcome(void* out, size_t cap, uint64_t session_id,
                             const tmk_proto_welcome* wl) {
  tmk__ob o;
  int rc;
  if (!wl) return TMK_EINVAL;
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_WELCOME, session_id)) < 0) return rc;
  tmk__ob_var(&o, wl->proto_version);
  tmk__ob_pstr(&o, wl->relay_version);
  return tmk__ctl_close(&o, out);
}

int tmk_proto_encode_reject(void* out, size_t cap, uint64_t session_id,
                            const tmk_proto_reject* rj) {
  tmk__ob o;
  int rc;
  if (!rj) return TMK_EINVAL;
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_REJECT, session_id)) < 0) return rc;
  tmk__ob_var(&o, rj->reason);
  tmk__ob_pstr(&o, rj->text);
  return tmk__ctl_close(&o, out);
}

int tmk_proto_encode_control(void* out, size_t cap, uint64_t session_id,
                             const tmk_proto_control* c) {
  tmk__ob o;
  int rc;
  if (!c || c->severity >= TMK_SEV_COUNT) return TMK_EINVAL;
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_CONTROL, session_id)) < 0) return rc;
  tmk__ob_var(&o, c->seq);
  tmk__ob_var(&o, c->severity);
  tmk__ob_var(&o, c->verbosity);
  return tmk__ctl_close(&o, out);
}

int tmk_proto_encode_bye(void* out, size_t cap, uint64_t session_id) {
  tmk__ob o;
  int rc;
  if ((rc = tmk__ctl_open(&o, out, cap, TMK_PKT_BYE, session_id)) < 0) return rc;
  return tmk__ctl_close(&o, out);
}
