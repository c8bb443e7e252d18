/* tmk_proto_format.c — text forms of decoded records and names of protocol enums, for golden
 * vectors, dump tools and logs. Kept apart from the reader and writer so that agents that never
 * print do not link stdio. */
#include <inttypes.h>
#include <stdio.h>

#include "tmk_proto.h"

const char* tmk_proto_severity_name(unsigned severity) {
  static const char* const names[TMK_SEV_COUNT] = {"critical", "error", "warning",
                                                   "info",     "debug", "trace"};
  return severity < TMK_SEV_COUNT ? names[severity] : "?";
}

const char* tmk_proto_site_kind_name(unsigned kind) {
  static const char* const names[TMK_SITE_KIND_COUNT] = {"zone", "marker", "plot", "message",
                                                         "frame"};
  return kind < TMK_SITE_KIND_COUNT ? names[kind] : "?";
}

const char* tmk_proto_drop_reason_name(unsigned reason) {
  static const char* const names[TMK_DROP_REASON_COUNT] = {"ring_full", "no_thread", "too_big",
                                                           "send_failed", "mismatch"};
  return reason < TMK_DROP_REASON_COUNT ? names[reason] : "?";
}

const char* tmk_proto_packet_type_name(unsigned type) {
  static const char* const names[] = {"?", "data", "hello", "welcome", "reject", "control", "bye"};
  return type >= 1 && type <= TMK_PKT_BYE ? names[type] : "?";
}

/* Appends `s` with C escapes for quotes, backslashes and non-printable bytes. */
typedef struct tmk__fmt {
  char* out;
  size_t cap;
  size_t len;
} tmk__fmt;

static void tmk__fmt_raw(tmk__fmt* f, const char* s, size_t n) {
  size_t i;
  for (i = 0; i < n; i++, f->len++)
    if (f->len + 1 < f->cap) f->out[f->len] = s[i];
}

static void tmk__fmt_printf(tmk__fmt* f, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#include <stdarg.h>
static void tmk__fmt_printf(tmk__fmt* f, const char* fmt, ...) {
  char tmp[160];
  int n;
  va_list ap;
  va_start(ap, fmt);
  n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) tmk__fmt_raw(f, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void tmk__fmt_str(tmk__fmt* f, const char* key, tmk_proto_str s) {
  uint32_t i;
  tmk__fmt_printf(f, " %s=\"", key);
  for (i = 0; i < s.len; i++) {
    unsigned char c = (unsigned char)s.ptr[i];
    if (c == '"' || c == '\\') {
      char e[2];
      e[0] = '\\';
      e[1] = (char)c;
      tmk__fmt_raw(f, e, 2);
    } else if (c < 0x20 || c >= 0x7F) {
      tmk__fmt_printf(f, "\\x%02x", c);
    } else {
      tmk__fmt_raw(f, (const char*)&s.ptr[i], 1);
    }
  }
  tmk__fmt_raw(f, "\"", 1);
}

int tmk_proto_format_record(const tmk_proto_record* r, char* out, size_t cap) {
  tmk__fmt f;
  f.out = out;
  f.cap = cap;
  f.len = 0;
  switch (r->type) {
    case TMK_REC_SITE:
      tmk__fmt_printf(&f, "site id=%" PRIu32 " kind=%s severity=%s verbosity=0x%" PRIx32
                          " color=0x%06" PRIx32 " line=%" PRIu32,
                      r->u.site.id, tmk_proto_site_kind_name(r->u.site.kind),
                      tmk_proto_severity_name(r->u.site.severity), r->u.site.verbosity,
                      r->u.site.color, r->u.site.line);
      tmk__fmt_str(&f, "name", r->u.site.name);
      tmk__fmt_str(&f, "file", r->u.site.file);
      break;
    case TMK_REC_ZONE:
      tmk__fmt_printf(&f, "zone thread=%" PRIu32 " site=%" PRIu32 " start=%" PRIu64
                          " duration=%" PRIu64 " depth=%" PRIu32,
                      r->thread, r->u.zone.site, r->u.zone.start, r->u.zone.duration,
                      r->u.zone.depth);
      break;
    case TMK_REC_MARKER_BEGIN:
    case TMK_REC_MARKER_END:
      tmk__fmt_printf(&f, "%s thread=%" PRIu32 " site=%" PRIu32 " time=%" PRIu64,
                      r->type == TMK_REC_MARKER_BEGIN ? "marker_begin" : "marker_end", r->thread,
                      r->u.marker.site, r->u.marker.time);
      tmk__fmt_str(&f, "payload", r->u.marker.payload);
      break;
    case TMK_REC_FRAME:
      tmk__fmt_printf(&f, "frame thread=%" PRIu32 " site=%" PRIu32 " time=%" PRIu64, r->thread,
                      r->u.frame.site, r->u.frame.time);
      break;
    case TMK_REC_PLOT:
      if (r->u.plot.is_double)
        tmk__fmt_printf(&f, "plot thread=%" PRIu32 " site=%" PRIu32 " time=%" PRIu64 " double=%.17g",
                        r->thread, r->u.plot.site, r->u.plot.time, r->u.plot.d);
      else
        tmk__fmt_printf(&f, "plot thread=%" PRIu32 " site=%" PRIu32 " time=%" PRIu64 " int=%" PRId64,
                        r->thread, r->u.plot.site, r->u.plot.time, r->u.plot.i);
      break;
    case TMK_REC_MESSAGE:
      tmk__fmt_printf(&f, "message thread=%" PRIu32 " site=%" PRIu32 " severity=%s verbosity=0x%" PRIx32
                          " time=%" PRIu64,
                      r->thread, r->u.message.site, tmk_proto_severity_name(r->u.message.severity),
                      r->u.message.verbosity, r->u.message.time);
      tmk__fmt_str(&f, "text", r->u.message.text);
      break;
    case TMK_REC_THREAD_NAME:
      tmk__fmt_printf(&f, "thread_name thread=%" PRIu32, r->thread);
      tmk__fmt_str(&f, "name", r->u.thread_name.name);
      break;
    case TMK_REC_DROPS: /* a reason this build has no name for is printed as its number */
      if (r->u.drops.reason < TMK_DROP_REASON_COUNT)
        tmk__fmt_printf(&f, "drops reason=%s count=%" PRIu64,
                        tmk_proto_drop_reason_name(r->u.drops.reason), r->u.drops.count);
      else
        tmk__fmt_printf(&f, "drops reason=%" PRIu32 " count=%" PRIu64, r->u.drops.reason,
                        r->u.drops.count);
      break;
    case TMK_REC_CLOCK_SYNC:
      tmk__fmt_printf(&f, "clock_sync ticks=%" PRIu64 " unix_ns=%" PRIu64, r->u.clock.ticks,
                      r->u.clock.unix_ns);
      break;
    case TMK_REC_TEAM_NAME:
      tmk__fmt_printf(&f, "team_name bit=%" PRIu32, r->u.team.bit);
      tmk__fmt_str(&f, "name", r->u.team.name);
      break;
    default:
      tmk__fmt_printf(&f, "unknown type=%u", (unsigned)r->type);
      break;
  }
  if (cap) out[f.len < cap ? f.len : cap - 1] = '\0';
  return (int)f.len;
}
