/* relay_api.c — the relay's web server (Debian's civetweb) and its JSON API under /api
 * (docs/API.md). Handlers run on civetweb worker threads and use only the thread-safe functions
 * of tmk_relay.h, so a request never blocks the ingest loop. Other handlers come in via hooks. */
#define _POSIX_C_SOURCE 200809L
#include <civetweb.h>
#include <jansson.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "relay_analysis.h"
#include "relay_api.h"
#include "relay_internal.h"

#define MAX_BODY 4096
#define MAX_LIST 4096

/* ---------------------------------------------------------------------------------------------
 * Responses. Errors follow one table (docs/API.md "Errors"): the status comes from the TMK_E*
 * code, except 403 (EACCESS: a foreign Origin or Host), 405 (EINVAL: the wrong method), 415
 * (EACCESS: a POST without JSON) and 429 (EAGAIN: too many live streams).
 * ------------------------------------------------------------------------------------------- */
static const char* http_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Internal Server Error"; /* not sent: every status used is listed above */
  }
}

static int http_status(int err) {
  switch (err) {
    case TMK_EINVAL:
    case TMK_ERANGE: return 400;
    case TMK_EACCESS: return 401;
    case TMK_ENOTFOUND: return 404;
    case TMK_ESTATE:
    case TMK_ENOSPC: return 409;
    case TMK_ETOOBIG: return 413;
    case TMK_ECORRUPT: return 422;
    case TMK_EAGAIN: return 503;
    default: return 500;
  }
}

static int send_body(struct mg_connection* conn, int status, const char* body, size_t len) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\n%s\r\n",
            status, http_reason(status), len,
            status == 401 || status == 403 ? "Connection: close\r\n" : "");
  mg_write(conn, body, len);
  return status;
}

/* Sends the reply built in j (500 ENOMEM if building it ran out of memory) and frees j. */
static int reply(struct mg_connection* conn, int status, tmk__json* j) {
  int rc;
  if (j->oom) {
    static const char oom[] = "{\"error\":\"out of memory\",\"code\":\"ENOMEM\"}";
    rc = send_body(conn, 500, oom, sizeof oom - 1);
  } else {
    rc = send_body(conn, status, j->buf ? j->buf : "", j->len);
  }
  tmk__json_free(j);
  return rc;
}

int tmk__http_send_error(struct mg_connection* conn, int status, int err, const char* msg) {
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "error");
  tmk__json_cstr(&j, msg && *msg ? msg : tmk_strerror(err));
  tmk__json_key(&j, "code");
  tmk__json_cstr(&j, tmk_err_name(err));
  tmk__json_end_obj(&j);
  return reply(conn, status ? status : http_status(err), &j);
}

/* An error with the status from the table. */
static int send_error(struct mg_connection* conn, int err, const char* msg) {
  return tmk__http_send_error(conn, 0, err, msg);
}

/* ---------------------------------------------------------------------------------------------
 * Request parsing
 * ------------------------------------------------------------------------------------------- */
/* Parses an unsigned decimal or 0x-hex number that must fill the whole string. */
static int parse_u64(const char* s, uint64_t* out) {
  if (!s || !*s || *s == '-' || *s == '+') return -1;
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

/* Query parameter `name`: returns 1 and sets *out when present and valid, 0 when absent, -1
 * when present but not a number. */
static int query_u64(const struct mg_request_info* ri, const char* name, uint64_t* out) {
  if (!ri->query_string) return 0;
  char buf[64];
  int n = mg_get_var(ri->query_string, strlen(ri->query_string), name, buf, sizeof buf);
  if (n < 0) return n == -1 ? 0 : -1;
  return parse_u64(buf, out) == 0 ? 1 : -1;
}

/* Reads the request body (at most MAX_BODY bytes). Returns its length or -1 if too large. */
static int read_body(struct mg_connection* conn, char* buf, size_t cap) {
  const struct mg_request_info* ri = mg_get_request_info(conn);
  if (ri->content_length > (long long)cap - 1) return -1;
  size_t len = 0;
  for (;;) {
    if (len == cap - 1) {
      char extra;
      if (mg_read(conn, &extra, 1) > 0) return -1;
      break;
    }
    int n = mg_read(conn, buf + len, cap - 1 - len);
    if (n <= 0) break;
    len += (size_t)n;
  }
  buf[len] = 0;
  return (int)len;
}

/* Reads the body as a JSON object (jansson). Returns it (json_decref it) or NULL after sending
 * 413 (too large) or 400 (`usage` as the message). */
static json_t* read_json_object(struct mg_connection* conn, const char* usage) {
  char body[MAX_BODY];
  int len = read_body(conn, body, sizeof body);
  if (len < 0) {
    send_error(conn, TMK_ETOOBIG, "request body is larger than 4 KiB");
    return NULL;
  }
  json_t* o = json_loadb(body, (size_t)len, 0, NULL);
  if (!json_is_object(o)) {
    json_decref(o);
    send_error(conn, TMK_EINVAL, usage);
    return NULL;
  }
  return o;
}

/* Returns 1 with the value, 0 when absent, -1 when not a non-negative integer (a string holding
 * a decimal or 0x-hex number is accepted too, for masks). */
static int obj_u64(const json_t* o, const char* key, uint64_t* out) {
  const json_t* v = json_object_get(o, key);
  if (!v) return 0;
  if (json_is_string(v)) return parse_u64(json_string_value(v), out) == 0 ? 1 : -1;
  if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
  *out = (uint64_t)json_integer_value(v);
  return 1;
}

/* ---------------------------------------------------------------------------------------------
 * JSON for sessions
 * ------------------------------------------------------------------------------------------- */
static void put_stats(tmk__json* j, const tmk_relay_stats* s) {
  tmk__json_begin_obj(j);
#define F(name)             \
  tmk__json_key(j, #name); \
  tmk__json_u64(j, s->name);
  F(packets) F(records) F(bytes) F(zones) F(lost) F(duplicated) F(reordered) F(late)
  F(malformed) F(dropped_by_agent) F(spoofed) F(evicted) F(mem_bytes) F(unresolved_sites)
  F(orphans)
#undef F
  tmk__json_end_obj(j);
}

/* A session as JSON (docs/API.md "Session"): one table, in the order the API lists the keys. */
enum { F_STR, F_BOOL, F_INT, F_U32, F_U64, F_SID, F_BYTE_ORDER, F_CLOCK, F_CONTROL, F_DROPS,
       F_STATS };
#define FIELD(key, kind, member) {key, kind, offsetof(tmk_relay_session_info, member)}
static const struct session_field {
  const char* key;
  int kind;
  size_t off;
} k_session_fields[] = {
    FIELD("id", F_STR, id),
    FIELD("session_id", F_SID, session_id),
    FIELD("program", F_STR, program),
    FIELD("live", F_BOOL, live),
    FIELD("recorded", F_BOOL, recorded),
    FIELD("recording", F_BOOL, recording),
    FIELD("recording_path", F_STR, recording_path),
    FIELD("has_hello", F_BOOL, has_hello),
    FIELD("transport", F_STR, transport),
    FIELD("source", F_STR, source),
    FIELD("platform", F_STR, platform),
    FIELD("arch", F_STR, arch),
    FIELD("agent_version", F_STR, agent_version),
    FIELD("build", F_STR, build),
    FIELD("label", F_STR, label),
    FIELD("byte_order", F_BYTE_ORDER, big_endian),
    FIELD("pointer_size", F_INT, pointer_size),
    FIELD("timer_freq", F_U64, timer_freq),
    FIELD("caps", F_U32, caps),
    FIELD("first_ns", F_U64, first_ns),
    FIELD("last_ns", F_U64, last_ns),
    FIELD("clock", F_CLOCK, clock_ns),
    FIELD("created_unix_ns", F_U64, created_unix_ns),
    FIELD("threads", F_U32, threads),
    FIELD("sites", F_U32, sites),
    FIELD("control", F_CONTROL, control_level),
    FIELD("dropped_by_reason", F_DROPS, dropped_by_reason),
    FIELD("stats", F_STATS, stats),
};
#undef FIELD

static void put_session(tmk__json* j, const tmk_relay_session_info* in) {
  tmk__json_begin_obj(j);
  for (size_t i = 0; i < sizeof k_session_fields / sizeof k_session_fields[0]; i++) {
    const struct session_field* f = &k_session_fields[i];
    const char* p = (const char*)in + f->off;
    tmk__json_key(j, f->key);
    switch (f->kind) {
      case F_STR: tmk__json_cstr(j, p); break;
      case F_BOOL: tmk__json_bool(j, *(const int*)p); break;
      case F_INT: tmk__json_i64(j, *(const int*)p); break;
      case F_U32: tmk__json_u64(j, *(const uint32_t*)p); break;
      case F_U64: tmk__json_u64(j, *(const uint64_t*)p); break;
      case F_SID: {
        char sid[24];
        snprintf(sid, sizeof sid, "%016" PRIx64, in->session_id);
        tmk__json_cstr(j, sid);
        break;
      }
      case F_BYTE_ORDER:
        tmk__json_cstr(j, in->has_hello ? (in->big_endian ? "big" : "little") : "");
        break;
      case F_CLOCK:
        tmk__json_begin_obj(j);
        tmk__json_key(j, "ns");
        tmk__json_u64(j, in->clock_ns);
        tmk__json_key(j, "unix_ns");
        tmk__json_u64(j, in->clock_unix_ns);
        tmk__json_end_obj(j);
        break;
      case F_CONTROL:
        tmk__json_begin_obj(j);
        tmk__json_key(j, "level");
        if (in->control_level < 0) tmk__json_null(j);
        else tmk__json_u64(j, (uint64_t)in->control_level);
        tmk__json_key(j, "mask");
        tmk__json_u64(j, in->control_mask);
        tmk__json_end_obj(j);
        break;
      case F_DROPS:
        tmk__json_begin_obj(j);
        for (unsigned k = 0; k < 5; k++) {
          tmk__json_key(j, tmk_proto_drop_reason_name(k));
          tmk__json_u64(j, in->dropped_by_reason[k]);
        }
        tmk__json_end_obj(j);
        break;
      default: put_stats(j, &in->stats); break;
    }
  }
  tmk__json_end_obj(j);
}

/* ---------------------------------------------------------------------------------------------
 * Handlers
 * ------------------------------------------------------------------------------------------- */
static int h_sessions(struct mg_connection* conn, tmk_relay* r) {
  int cap = tmk_relay_sessions(r, NULL, 0) + 16; /* a few more may appear meanwhile */
  if (cap > MAX_LIST) cap = MAX_LIST;
  tmk_relay_session_info* infos = malloc((size_t)cap * sizeof *infos);
  if (!infos) return send_error(conn, TMK_ENOMEM, "out of memory");
  int n = tmk_relay_sessions(r, infos, (size_t)cap);
  if (n > cap) n = cap;
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_arr(&j);
  for (int i = 0; i < n; i++) put_session(&j, &infos[i]);
  tmk__json_end_arr(&j);
  free(infos);
  return reply(conn, 200, &j);
}

static int h_session(struct mg_connection* conn, tmk_relay* r, const char* id) {
  tmk_relay_session_info info;
  int rc = tmk_relay_session(r, id, &info);
  if (rc < 0) return send_error(conn, TMK_ENOTFOUND, "no such session");
  tmk__json j;
  tmk__json_init(&j);
  put_session(&j, &info);
  return reply(conn, 200, &j);
}

static int parse_query(struct mg_connection* conn, tmk_relay_query* q) {
  const struct mg_request_info* ri = mg_get_request_info(conn);
  memset(q, 0, sizeof *q);
  q->thread = -1;
  uint64_t v;
  int rc;
  if ((rc = query_u64(ri, "t0", &v)) < 0) return send_error(conn, TMK_EINVAL, "t0 must be ns");
  if (rc) q->t0_ns = v;
  if ((rc = query_u64(ri, "t1", &v)) < 0) return send_error(conn, TMK_EINVAL, "t1 must be ns");
  if (rc) q->t1_ns = v;
  if (q->t1_ns && q->t1_ns < q->t0_ns) return send_error(conn, TMK_EINVAL, "t1 is before t0");
  if ((rc = query_u64(ri, "thread", &v)) < 0 || (rc && v > UINT32_MAX))
    return send_error(conn, TMK_EINVAL, "thread must be a thread index");
  if (rc) q->thread = (int64_t)v;
  if ((rc = query_u64(ri, "min_dur", &v)) < 0)
    return send_error(conn, TMK_EINVAL, "min_dur must be ns");
  if (rc) q->min_dur_ns = v;
  if ((rc = query_u64(ri, "limit", &v)) < 0 || (rc && (v == 0 || v > 1000000)))
    return send_error(conn, TMK_EINVAL, "limit must be 1..1000000");
  q->limit = rc ? (size_t)v : 100000;
  return 0;
}

typedef struct zone_ctx {
  tmk__json* j;
  size_t n;
} zone_ctx;

static int zone_cb(void* ud, const tmk_relay_zone* z) {
  zone_ctx* c = ud;
  tmk__json* j = c->j;
  /* compact rows: [start_ns, dur_ns, thread, site, depth, flags] */
  tmk__json_begin_arr(j);
  tmk__json_u64(j, z->start_ns);
  tmk__json_u64(j, z->dur_ns);
  tmk__json_u64(j, z->thread);
  tmk__json_u64(j, z->site);
  tmk__json_u64(j, z->depth);
  tmk__json_u64(j, z->flags);
  tmk__json_end_arr(j);
  c->n++;
  return j->oom;
}

/* Ends a …/zones or …/events answer: the array its callback filled, then count and truncated.
 * n < 0 (the query's result) means the session is unknown. */
static int reply_list(struct mg_connection* conn, tmk__json* j, int n, uint64_t count,
                      uint64_t limit) {
  if (n < 0) {
    tmk__json_free(j);
    return send_error(conn, TMK_ENOTFOUND, "no such session");
  }
  tmk__json_end_arr(j);
  tmk__json_key(j, "count");
  tmk__json_u64(j, count);
  tmk__json_key(j, "truncated");
  tmk__json_bool(j, count >= limit);
  tmk__json_end_obj(j);
  return reply(conn, 200, j);
}

static int h_zones(struct mg_connection* conn, tmk_relay* r, const char* id) {
  tmk_relay_query q;
  if (parse_query(conn, &q)) return 400;
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "columns");
  static const char cols[] = "[\"start_ns\",\"dur_ns\",\"thread\",\"site\",\"depth\",\"flags\"]";
  tmk__json_raw(&j, cols, sizeof cols - 1);
  j.need_comma = 1;
  tmk__json_key(&j, "zones");
  tmk__json_begin_arr(&j);
  zone_ctx c = {&j, 0};
  int n = tmk_relay_query_zones(r, id, &q, zone_cb, &c);
  return reply_list(conn, &j, n, c.n, q.limit);
}

static const char* const k_ev_names[] = {"", "frame", "plot", "message", "marker_begin",
                                         "marker_end"};

static int event_cb(void* ud, const tmk_relay_event* e) {
  zone_ctx* c = ud;
  tmk__json* j = c->j;
  tmk__json_begin_obj(j);
  tmk__json_key(j, "type");
  tmk__json_cstr(j, e->type <= 5 ? k_ev_names[e->type] : "?");
  tmk__json_key(j, "time_ns");
  tmk__json_u64(j, e->time_ns);
  tmk__json_key(j, "thread");
  tmk__json_u64(j, e->thread);
  tmk__json_key(j, "site");
  tmk__json_u64(j, e->site);
  if (e->type == TMK_RELAY_EV_PLOT) {
    tmk__json_key(j, "value");
    if (e->is_double) tmk__json_f64(j, e->d);
    else tmk__json_i64(j, e->i);
  } else if (e->type == TMK_RELAY_EV_MESSAGE) {
    tmk__json_key(j, "severity");
    tmk__json_u64(j, e->severity);
    tmk__json_key(j, "verbosity");
    tmk__json_u64(j, e->verbosity);
    tmk__json_key(j, "text");
    tmk__json_str(j, e->text, e->text_len);
  } else if (e->type == TMK_RELAY_EV_MARKER_BEGIN || e->type == TMK_RELAY_EV_MARKER_END) {
    tmk__json_key(j, "payload");
    tmk__json_str(j, e->text, e->text_len);
    /* extra data is bytes, not necessarily text: also give it exactly */
    char hex[2 * TMK_PROTO_MAX_PAYLOAD + 1];
    uint32_t n = e->text_len <= TMK_PROTO_MAX_PAYLOAD ? e->text_len : TMK_PROTO_MAX_PAYLOAD;
    for (uint32_t k = 0; k < n; k++)
      snprintf(hex + 2 * k, 3, "%02x", (unsigned)(unsigned char)e->text[k]);
    hex[2 * n] = 0;
    tmk__json_key(j, "payload_hex");
    tmk__json_cstr(j, hex);
  }
  tmk__json_end_obj(j);
  c->n++;
  return j->oom;
}

static int h_events(struct mg_connection* conn, tmk_relay* r, const char* id) {
  tmk_relay_query q;
  if (parse_query(conn, &q)) return 400;
  const struct mg_request_info* ri = mg_get_request_info(conn);
  unsigned mask = 0;
  char types[128];
  if (ri->query_string &&
      mg_get_var(ri->query_string, strlen(ri->query_string), "type", types, sizeof types) >= 0) {
    char* save = NULL;
    for (char* t = strtok_r(types, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      unsigned k = 0;
      for (unsigned i = 1; i <= 5; i++)
        if (strcmp(t, k_ev_names[i]) == 0) k = i;
      if (!k)
        return send_error(conn, TMK_EINVAL,
                          "type must be a comma list of frame, plot, message, marker_begin, "
                          "marker_end");
      mask |= 1u << k;
    }
  }
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "events");
  tmk__json_begin_arr(&j);
  zone_ctx c = {&j, 0};
  int n = tmk_relay_query_events(r, id, &q, mask, event_cb, &c);
  return reply_list(conn, &j, n, c.n, q.limit);
}

static int site_cb(void* ud, const tmk_relay_site* s) {
  tmk__json* j = ud;
  tmk__json_begin_obj(j);
  tmk__json_key(j, "id");
  tmk__json_u64(j, s->id);
  tmk__json_key(j, "known");
  tmk__json_bool(j, s->known);
  tmk__json_key(j, "kind");
  tmk__json_cstr(j, s->known ? tmk_proto_site_kind_name(s->kind) : "");
  tmk__json_key(j, "severity");
  tmk__json_u64(j, s->severity);
  tmk__json_key(j, "verbosity");
  tmk__json_u64(j, s->verbosity);
  tmk__json_key(j, "color");
  tmk__json_u64(j, s->color);
  tmk__json_key(j, "line");
  tmk__json_u64(j, s->line);
  tmk__json_key(j, "name");
  tmk__json_cstr(j, s->name);
  tmk__json_key(j, "file");
  tmk__json_cstr(j, s->file);
  tmk__json_end_obj(j);
  return j->oom;
}

static int name_cb(void* ud, uint32_t idx, const char* name) {
  tmk__json* j = ud;
  tmk__json_begin_obj(j);
  tmk__json_key(j, "index");
  tmk__json_u64(j, idx);
  tmk__json_key(j, "name");
  tmk__json_cstr(j, name);
  tmk__json_end_obj(j);
  return j->oom;
}

static int h_sites(struct mg_connection* conn, tmk_relay* r, const char* id) {
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "sites");
  tmk__json_begin_arr(&j);
  if (tmk_relay_query_sites(r, id, site_cb, &j) < 0) {
    tmk__json_free(&j);
    return send_error(conn, TMK_ENOTFOUND, "no such session");
  }
  tmk__json_end_arr(&j);
  tmk__json_key(&j, "threads");
  tmk__json_begin_arr(&j);
  tmk_relay_query_threads(r, id, name_cb, &j);
  tmk__json_end_arr(&j);
  tmk__json_key(&j, "teams");
  tmk__json_begin_arr(&j);
  tmk_relay_query_teams(r, id, name_cb, &j);
  tmk__json_end_arr(&j);
  tmk__json_end_obj(&j);
  return reply(conn, 200, &j);
}

static int h_record(struct mg_connection* conn, tmk_relay* r, const char* id, int on) {
  char path[512] = "", err[256] = "";
  int rc = tmk_relay_record(r, id, on, path, sizeof path, err, sizeof err);
  if (rc < 0) return send_error(conn, rc, err);
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "id");
  tmk__json_cstr(&j, id);
  tmk__json_key(&j, "recording");
  tmk__json_bool(&j, on);
  if (on) {
    tmk__json_key(&j, "path");
    tmk__json_cstr(&j, path);
  }
  tmk__json_end_obj(&j);
  return reply(conn, 200, &j);
}

static int h_control(struct mg_connection* conn, tmk_relay* r, const char* id) {
  static const char usage[] = "body must be JSON {\"level\": 0..5, \"mask\": 32-bit team mask}";
  json_t* body = read_json_object(conn, usage);
  if (!body) return 400;
  uint64_t level = 0, mask = 0;
  int hl = obj_u64(body, "level", &level), hm = obj_u64(body, "mask", &mask);
  json_decref(body);
  if (hl <= 0 || hm <= 0) return send_error(conn, TMK_EINVAL, usage);
  if (level > 5) return send_error(conn, TMK_ERANGE, "level must be 0..5 (critical..trace)");
  if (mask > UINT32_MAX) return send_error(conn, TMK_ERANGE, "mask must fit in 32 bits");
  char err[256] = "";
  int rc = tmk_relay_control(r, id, (int)level, (uint32_t)mask, err, sizeof err);
  if (rc < 0) return send_error(conn, rc, err);
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "id");
  tmk__json_cstr(&j, id);
  tmk__json_key(&j, "level");
  tmk__json_u64(&j, level);
  tmk__json_key(&j, "mask");
  tmk__json_u64(&j, mask);
  tmk__json_end_obj(&j);
  return reply(conn, 200, &j);
}

static int h_recordings(struct mg_connection* conn, tmk_relay* r) {
  tmk_relay_recording_info* list = malloc(MAX_LIST * sizeof *list);
  if (!list) return send_error(conn, TMK_ENOMEM, "out of memory");
  int n = tmk_relay_recordings(r, list, MAX_LIST);
  if (n > MAX_LIST) n = MAX_LIST;
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_arr(&j);
  for (int i = 0; i < n; i++) {
    tmk__json_begin_obj(&j);
    tmk__json_key(&j, "name");
    tmk__json_cstr(&j, list[i].name);
    tmk__json_key(&j, "size");
    tmk__json_u64(&j, list[i].size);
    tmk__json_key(&j, "mtime_unix_ns");
    tmk__json_u64(&j, list[i].mtime_unix_ns);
    tmk__json_key(&j, "kind");
    tmk__json_cstr(&j, list[i].agent_file ? "agent_file" : "recording");
    tmk__json_key(&j, "open");
    tmk__json_bool(&j, list[i].open);
    tmk__json_end_obj(&j);
  }
  tmk__json_end_arr(&j);
  free(list);
  return reply(conn, 200, &j);
}

static int h_open(struct mg_connection* conn, tmk_relay* r) {
  static const char usage[] = "body must be JSON {\"name\": \"<file in the data directory>\"}";
  json_t* body = read_json_object(conn, usage);
  if (!body) return 400;
  const char* v = json_string_value(json_object_get(body, "name"));
  char name[256];
  int ok = v && strlen(v) < sizeof name;
  if (ok) snprintf(name, sizeof name, "%s", v);
  json_decref(body);
  if (!ok) return send_error(conn, TMK_EINVAL, usage);
  char id[TMK_RELAY_ID_MAX] = "", err[256] = "";
  int rc = tmk_relay_open_recording(r, name, id, sizeof id, err, sizeof err);
  if (rc < 0) return send_error(conn, rc, err);
  return h_session(conn, r, id);
}

static int h_relay(struct mg_connection* conn, tmk_relay* r) {
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "version");
  tmk__json_cstr(&j, TMK_RELAY_VERSION);
  tmk__json_key(&j, "protocol");
  tmk__json_u64(&j, TMK_PROTO_VERSION);
  tmk__json_key(&j, "listen_port");
  tmk__json_u64(&j, (uint64_t)r->bound_port);
  tmk__json_key(&j, "data_dir");
  tmk__json_cstr(&j, r->cfg.data_dir);
  tmk__json_key(&j, "record_all");
  tmk__json_bool(&j, r->cfg.record_all);
  tmk__json_key(&j, "max_sessions");
  tmk__json_u64(&j, r->cfg.max_sessions);
  tmk__json_key(&j, "session_memory");
  tmk__json_u64(&j, r->cfg.session_memory);
  tmk__json_key(&j, "garbage");
  tmk__json_u64(&j, atomic_load(&r->garbage));
  tmk__json_key(&j, "rejected_sessions");
  tmk__json_u64(&j, atomic_load(&r->rejected_sessions));
  tmk__rxq_counters q; /* the UDP receive queue (relay_udp_rx.c) */
  tmk__udp_rx_counters(r->udp_rx, &q);
  tmk__json_key(&j, "udp_queue");
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "capacity");
  tmk__json_u64(&j, q.capacity);
  tmk__json_key(&j, "memory");
  tmk__json_u64(&j, q.memory);
  tmk__json_key(&j, "bytes");
  tmk__json_u64(&j, q.bytes);
  tmk__json_key(&j, "peak");
  tmk__json_u64(&j, q.peak);
  tmk__json_key(&j, "datagrams");
  tmk__json_u64(&j, q.datagrams);
  tmk__json_key(&j, "drops");
  tmk__json_u64(&j, q.drops);
  tmk__json_end_obj(&j);
  uint64_t pop_bytes, pop_ns;
  tmk__populate_stats(&pop_bytes, &pop_ns);
  tmk__json_key(&j, "populated"); /* fresh memory faulted in ahead of use, and its CPU time */
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "bytes");
  tmk__json_u64(&j, pop_bytes);
  tmk__json_key(&j, "cpu_ns");
  tmk__json_u64(&j, pop_ns);
  uint64_t pool_kept, pool_reused; /* freed regions kept for reuse (relay_slab.c) */
  tmk__pool_stats(&pool_kept, &pool_reused);
  tmk__json_key(&j, "kept_bytes");
  tmk__json_u64(&j, pool_kept);
  tmk__json_key(&j, "reused_bytes");
  tmk__json_u64(&j, pool_reused);
  tmk__pages_counters pc; /* which kind of page fresh regions get (relay_slab.c) */
  tmk__pages_stats(&pc);
  tmk__json_key(&j, "huge_bytes");
  tmk__json_u64(&j, pc.huge_bytes);
  tmk__json_key(&j, "small_ns_per_mib");
  tmk__json_u64(&j, pc.ns_per_mib[0]);
  tmk__json_key(&j, "huge_ns_per_mib");
  tmk__json_u64(&j, pc.ns_per_mib[1]);
  tmk__json_end_obj(&j);
  tmk__json_key(&j, "ingest_nice");
  tmk__json_i64(&j, r->cfg.ingest_nice);
  tmk__json_key(&j, "keys"); /* authenticated ingest (§2.1): programs with a key */
  tmk__json_u64(&j, r->cfg.nkeys);
  tmk__json_key(&j, "unauthenticated");
  tmk__json_u64(&j, atomic_load(&r->unauthenticated));
  tmk__json_key(&j, "bad_mac");
  tmk__json_u64(&j, atomic_load(&r->bad_mac));
  tmk_relay_totals tot; /* each session's lock, briefly */
  tmk_relay_get_stats(r, &tot);
  tmk__json_key(&j, "orphans"); /* zones whose parent was lost (PROTOCOL.md §5.3.1), all sessions */
  tmk__json_u64(&j, tot.sum.orphans);
  tmk__json_key(&j, "clickhouse"); /* the history sink's counters, null when off */
  if (r->ch) tmk__ch_json_stats(r->ch, &j);
  else tmk__json_null(&j);
  tmk__json_end_obj(&j);
  return reply(conn, 200, &j);
}

/* GET /api/history/NAME?...: the history sink's fixed queries (docs/CLICKHOUSE.md). */
typedef struct hist_params {
  const struct mg_request_info* ri;
  char vals[8][300];
  int used;
} hist_params;

static const char* hist_get(void* ud, const char* key) {
  hist_params* p = ud;
  if (!p->ri->query_string || p->used == 8) return NULL;
  char* v = p->vals[p->used];
  int n = mg_get_var(p->ri->query_string, strlen(p->ri->query_string), key, v, sizeof p->vals[0]);
  if (n < 0) return n == -1 ? NULL : "\x01"; /* -2: too long, refused by the quoting */
  p->used++;
  return v;
}

static int h_history(struct mg_connection* conn, tmk_relay* r, const char* name) {
  if (!r->ch)
    return tmk__http_send_error(conn, 404, TMK_ENOTFOUND,
                                "history needs ClickHouse: start telemark-relay with --clickhouse URL");
  hist_params p;
  p.ri = mg_get_request_info(conn);
  p.used = 0;
  char err[300];
  tmk__json j;
  tmk__json_init(&j);
  int rc = tmk__ch_history(r->ch, name, hist_get, &p, &j, err, sizeof err);
  if (rc < 0) {
    tmk__json_free(&j);
    return tmk__http_send_error(conn,
                                rc == TMK_EINVAL      ? 400
                                : rc == TMK_ENOTFOUND ? 404
                                : rc == TMK_EAGAIN    ? 503
                                                      : 502,
                                rc, err);
  }
  return reply(conn, 200, &j);
}

/* …/stats and …/occurrences: relay_analysis.c parses the query and writes the body. */
static int h_analysis(struct mg_connection* conn, tmk_relay* r, const char* id,
                      int (*fn)(tmk_relay*, const char*, const char*, tmk__json*)) {
  tmk__json j;
  tmk__json_init(&j);
  int status = fn(r, id, mg_get_request_info(conn)->query_string, &j);
  return reply(conn, status, &j);
}

/* Level-of-detail summaries: computed by relay_lod.c. */
static int h_lod(struct mg_connection* conn, tmk_relay* r, const char* id) {
  char err[256];
  int code = 0;
  tmk__json j;
  tmk__json_init(&j);
  int status = tmk__lod_request(r, id, mg_get_request_info(conn)->query_string, &j, err,
                                sizeof err, &code);
  if (status == 200) return reply(conn, 200, &j);
  tmk__json_free(&j);
  return tmk__http_send_error(conn, status, code, err);
}

/* /api/...: routes by method and path. */
static int api_handler(struct mg_connection* conn, void* cbdata) {
  tmk_relay* r = cbdata;
  const struct mg_request_info* ri = mg_get_request_info(conn);
  const char* m = ri->request_method;
  const char* uri = ri->local_uri ? ri->local_uri : "";
  int get = strcmp(m, "GET") == 0, post = strcmp(m, "POST") == 0;
  if (strcmp(uri, "/api/sessions") == 0) {
    if (!get) return tmk__http_send_error(conn, 405, TMK_EINVAL, "use GET");
    return h_sessions(conn, r);
  }
  if (strcmp(uri, "/api/relay") == 0) {
    if (!get) return tmk__http_send_error(conn, 405, TMK_EINVAL, "use GET");
    return h_relay(conn, r);
  }
  if (strcmp(uri, "/api/recordings") == 0) {
    if (!get) return tmk__http_send_error(conn, 405, TMK_EINVAL, "use GET");
    return h_recordings(conn, r);
  }
  if (strncmp(uri, "/api/history/", 13) == 0) {
    if (!get) return tmk__http_send_error(conn, 405, TMK_EINVAL, "use GET");
    return h_history(conn, r, uri + 13);
  }
  if (strcmp(uri, "/api/recordings/open") == 0) {
    if (!post) return tmk__http_send_error(conn, 405, TMK_EINVAL, "use POST");
    return h_open(conn, r);
  }
  if (strncmp(uri, "/api/sessions/", 14) == 0) {
    const char* rest = uri + 14;
    const char* slash = strchr(rest, '/');
    size_t idlen = slash ? (size_t)(slash - rest) : strlen(rest);
    if (idlen == 0 || idlen >= TMK_RELAY_ID_MAX)
      return send_error(conn, TMK_ENOTFOUND, "no such session");
    char id[TMK_RELAY_ID_MAX];
    memcpy(id, rest, idlen);
    id[idlen] = 0;
    const char* sub = slash ? slash + 1 : "";
    struct {
      const char* path;
      int post;
    } routes[] = {{"", 0},       {"zones", 0},        {"events", 0},       {"sites", 0},
                  {"control", 1}, {"record/start", 1}, {"record/stop", 1},
                  {"stats", 0},   {"occurrences", 0}, {"lod", 0}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
      if (strcmp(sub, routes[i].path) != 0) continue;
      if (routes[i].post ? !post : !get)
        return tmk__http_send_error(conn, 405, TMK_EINVAL, routes[i].post ? "use POST" : "use GET");
      switch (i) {
        case 0: return h_session(conn, r, id);
        case 1: return h_zones(conn, r, id);
        case 2: return h_events(conn, r, id);
        case 3: return h_sites(conn, r, id);
        case 4: return h_control(conn, r, id);
        case 5: return h_record(conn, r, id, 1);
        case 6: return h_record(conn, r, id, 0);
        case 7: return h_analysis(conn, r, id, tmk__analysis_stats_json);
        case 8: return h_analysis(conn, r, id, tmk__analysis_occurrences_json);
        default: return h_lod(conn, r, id);
      }
    }
  }
  return send_error(conn, TMK_ENOTFOUND, "no such API endpoint (see docs/API.md)");
}

/* ---------------------------------------------------------------------------------------------
 * Server
 * ------------------------------------------------------------------------------------------- */
/* civetweb's messages: debug log; the first one while starting says why it failed. */
static int log_message(const struct mg_connection* conn, const char* msg) {
  struct mg_context* ctx = conn ? mg_get_context(conn) : NULL;
  tmk_relay* r = ctx ? mg_get_user_data(ctx) : NULL;
  if (r && !r->http && !r->http_start_error[0])
    snprintf(r->http_start_error, sizeof r->http_start_error, "%s", msg);
  if (r) tmk_relay__log(&r->log, TMK_LOG_DEBUG, "http: %s", msg);
  return 1;
}

static void init_civetweb(void) { mg_init_library(0); }

int tmk__http_start(tmk_relay* r) {
  if (r->cfg.http_port < 0) return 0;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_civetweb);
  char ports[96];
  if (strchr(r->cfg.http_host, ':'))
    snprintf(ports, sizeof ports, "[%s]:%d", r->cfg.http_host, r->cfg.http_port);
  else
    snprintf(ports, sizeof ports, "%s:%d", r->cfg.http_host, r->cfg.http_port);
  /* Every connection holds a worker thread while it is open: live streams (at most 32,
   * relay_stream.h) and idle or slow clients, which the timeouts bound (issue 15 item 6).
   * keep-alive: civetweb closes an idle connection after 500 ms by default, while clients keep
   * one for seconds (Node's fetch 4 s) and lose a request sent as it closes; 5 s lets such a
   * client close first. */
  const char* options[] = {"listening_ports", ports, "num_threads", "96", "request_timeout_ms",
                           "5000", "keep_alive_timeout_ms", "5000", "enable_keep_alive", "yes",
                           /* no CORS: civetweb's default answers preflights for any origin */
                           "access_control_allow_origin", "", "access_control_allow_methods", "",
                           "access_control_allow_headers", "", NULL};
  struct mg_callbacks cb;
  memset(&cb, 0, sizeof cb);
  cb.log_message = log_message;
  r->http_start_error[0] = 0;
  r->http = mg_start(&cb, r, options);
  if (!r->http) {
    tmk_relay__log(&r->log, TMK_LOG_ERROR, "cannot serve HTTP on %s: %s (port in use? choose another with "
             "--http)", ports, r->http_start_error[0] ? r->http_start_error : "civetweb failed to start");
    return TMK_ESOCKET;
  }
  struct mg_server_port sp[4];
  int n = mg_get_server_ports(r->http, 4, sp);
  r->http_port_bound = n > 0 ? sp[0].port : r->cfg.http_port;
  mg_set_request_handler(r->http, "/api", api_handler, r);
  for (int i = 0; i < TMK_RELAY_MAX_HOOKS; i++)
    if (r->cfg.hook_fn[i]) r->cfg.hook_fn[i](r->http, r, r->cfg.hook_ud[i]);
  return 0;
}

void tmk__http_stop(tmk_relay* r) {
  if (r->http) mg_stop(r->http);
  r->http = NULL;
}
