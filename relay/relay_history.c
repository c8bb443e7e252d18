/* relay_history.c — the relay's history queries (docs/CLICKHOUSE.md "Queries", GET
 * /api/history/NAME): fixed SQL templates run against the sink's ClickHouse; the parameters are
 * checked (length, no control bytes) and quoted here, never SQL from the caller. Results as
 * JSONEachRow, wrapped into {"query": NAME, "rows": [...]}. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_clickhouse.h"
#include "relay_clickhouse_http.h"
#include "relay_internal.h"

typedef tmk__chbuf chbuf;
static void put(chbuf* b, const void* v, size_t n) { tmk__chbuf_put(b, v, n); }
static void put_u8(chbuf* b, uint8_t v) { tmk__chbuf_put(b, &v, 1); }

#define HIST_MAX_ANSWER (8u << 20)
#define HIST_MAX_SECONDS 30u /* max_execution_time of every query (ClickHouse ends it then) */

/* Appends 'text' as a ClickHouse string literal. Returns -1 for text a parameter may not hold. */
static int put_literal(chbuf* q, const char* s) {
  size_t n = strlen(s);
  if (n > 256) return -1;
  put_u8(q, '\'');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f) return -1;
    if (c == '\'' || c == '\\') put_u8(q, '\\');
    put_u8(q, c);
  }
  put_u8(q, '\'');
  return 0;
}

static void put_s(chbuf* q, const char* s) { put(q, s, strlen(s)); }

static int param_uint(tmk__ch_param_fn get, void* ud, const char* key, long lo, long hi, long def,
                      long* out) {
  const char* v = get(ud, key);
  if (!v || !*v) {
    *out = def;
    return 0;
  }
  char* end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < lo || x > hi) return -1;
  *out = x;
  return 0;
}

/* "(SELECT session FROM sessions FINAL WHERE program = P [AND build IN (A, B)] AND day >= ...)" */
static int put_sessions(chbuf* q, const char* program, const char* a, const char* b, long days) {
  char tmp[64];
  put_s(q, "(SELECT session FROM sessions FINAL WHERE program = ");
  if (put_literal(q, program)) return -1;
  if (a) {
    put_s(q, " AND build IN (");
    if (put_literal(q, a)) return -1;
    put_s(q, ", ");
    if (put_literal(q, b)) return -1;
    put_s(q, ")");
  }
  snprintf(tmp, sizeof tmp, " AND day >= today() - %ld)", days);
  put_s(q, tmp);
  return 0;
}

int tmk__ch_history(tmk__ch* ch, const char* name, tmk__ch_param_fn get, void* ud, tmk__json* out,
                    char* err, size_t ecap) {
  chbuf q = {0};
  const char* program = get(ud, "program");
  const char* site = get(ud, "site");
  const char* what = get(ud, "what");
  const char* by = get(ud, "by");
  const char* a = get(ud, "a");
  const char* b = get(ud, "b");
  long days, limit;
  char tmp[160];
  int bad = 0;
  if (param_uint(get, ud, "days", 1, 3650, 30, &days) ||
      param_uint(get, ud, "limit", 1, 500, 20, &limit)) {
    snprintf(err, ecap, "days must be 1..3650 and limit 1..500");
    return TMK_EINVAL;
  }
  if (strcmp(name, "programs") == 0) {
    snprintf(tmp, sizeof tmp, "day >= today() - %ld", days);
    put_s(&q, "SELECT program, count() AS sessions, uniqExact(build) AS builds, "
              "max(created_unix_ns) AS last_unix_ns FROM sessions FINAL WHERE ");
    put_s(&q, tmp);
    put_s(&q, " GROUP BY program ORDER BY last_unix_ns DESC LIMIT 200");
  } else if (!program || !*program) {
    snprintf(err, ecap, "this query needs program=NAME");
    return TMK_EINVAL;
  } else if (strcmp(name, "builds") == 0) {
    put_s(&q, "SELECT build, count() AS sessions, min(created_unix_ns) AS first_unix_ns, "
              "max(created_unix_ns) AS last_unix_ns, groupUniqArray(label) AS labels "
              "FROM sessions FINAL WHERE program = ");
    bad |= put_literal(&q, program);
    snprintf(tmp, sizeof tmp, " AND day >= today() - %ld", days);
    put_s(&q, tmp);
    put_s(&q, " GROUP BY build ORDER BY first_unix_ns LIMIT 1000");
  } else if (strcmp(name, "sites") == 0) {
    /* zone sites (TMK_SITE_ZONE 0, TMK_SITE_MARKER 1) and frame sites (TMK_SITE_FRAME 4) */
    put_s(&q, "SELECT name, kind IN (0, 1) ? 'zone' : 'frame' AS what, count() AS sessions "
              "FROM sites FINAL WHERE kind IN (0, 1, 4) AND session IN ");
    bad |= put_sessions(&q, program, NULL, NULL, days);
    put_s(&q, " GROUP BY name, what ORDER BY what DESC, name LIMIT 5000");
  } else if (strcmp(name, "trend") == 0) {
    int frames = what && strcmp(what, "frame") == 0;
    int night = by && strcmp(by, "night") == 0;
    if ((what && *what && !frames && strcmp(what, "zone") != 0) ||
        (by && *by && !night && strcmp(by, "build") != 0) || (!frames && (!site || !*site))) {
      snprintf(err, ecap, "trend needs what=zone&site=NAME or what=frame[&site=NAME], "
                          "and by=build or by=night");
      return TMK_EINVAL;
    }
    put_s(&q, night ? "SELECT toString(sday) AS key" : "SELECT build AS key");
    put_s(&q, ", quantile(0.5)(dur_ns) AS p50, quantile(0.95)(dur_ns) AS p95, "
              "max(dur_ns) AS max, count() AS n, uniqExact(session) AS sessions, "
              "min(created_unix_ns) AS first_unix_ns FROM ");
    put_s(&q, frames ? "frames FINAL" : "zones FINAL");
    put_s(&q, " ANY INNER JOIN (SELECT session, build, day AS sday, created_unix_ns FROM "
              "sessions FINAL WHERE program = ");
    bad |= put_literal(&q, program);
    snprintf(tmp, sizeof tmp, " AND day >= today() - %ld) USING session WHERE day >= today() - %ld",
             days, days);
    put_s(&q, tmp);
    if (frames) put_s(&q, " AND dur_ns > 0");
    if (site && *site) {
      put_s(&q, " AND (session, site) IN (SELECT session, site FROM sites FINAL WHERE name = ");
      bad |= put_literal(&q, site);
      put_s(&q, ")");
    }
    put_s(&q, night ? " GROUP BY key ORDER BY key" : " GROUP BY key ORDER BY first_unix_ns");
    put_s(&q, " LIMIT 1000");
  } else if (strcmp(name, "diff") == 0) {
    if (!a || !*a || !b || !*b) {
      snprintf(err, ecap, "diff needs a=BUILD&b=BUILD");
      return TMK_EINVAL;
    }
    chbuf s = {0};
    bad |= put_sessions(&s, program, a, b, days);
    put_u8(&s, 0);
    put_s(&q, "SELECT name, quantileIf(0.5)(dur_ns, build = ");
    bad |= put_literal(&q, a);
    put_s(&q, ") AS a_p50, quantileIf(0.5)(dur_ns, build = ");
    bad |= put_literal(&q, b);
    put_s(&q, ") AS b_p50, countIf(build = ");
    bad |= put_literal(&q, a);
    put_s(&q, ") AS a_n, countIf(build = ");
    bad |= put_literal(&q, b);
    put_s(&q, ") AS b_n, (b_p50 + 1) / (a_p50 + 1) AS ratio FROM (SELECT session, dur_ns, name "
              "FROM zones FINAL ANY INNER JOIN (SELECT session, site, name FROM sites FINAL "
              "WHERE session IN ");
    if (!s.oom && s.p) {
      put_s(&q, (const char*)s.p);
      put_s(&q, ") USING (session, site) WHERE session IN ");
      put_s(&q, (const char*)s.p);
      put_s(&q, ") ANY INNER JOIN (SELECT session, build FROM sessions FINAL WHERE session IN ");
      put_s(&q, (const char*)s.p);
    }
    snprintf(tmp, sizeof tmp, ") USING session GROUP BY name HAVING a_n > 0 AND b_n > 0 "
                              "ORDER BY abs(log(ratio)) DESC LIMIT %ld", limit);
    put_s(&q, tmp);
    free(s.p);
  } else {
    snprintf(err, ecap, "unknown history query '%.40s' (programs, builds, sites, trend, diff)",
             name);
    return TMK_ENOTFOUND;
  }
  put_s(&q, " FORMAT JSONEachRow");
  put_u8(&q, 0);
  if (bad || q.oom) {
    free(q.p);
    snprintf(err, ecap, "a parameter is longer than 256 bytes or holds control characters");
    return TMK_EINVAL;
  }
  char params[700];
  snprintf(params, sizeof params,
           "%s&readonly=2&max_execution_time=%u&output_format_json_quote_64bit_integers=0",
           tmk__ch_endpoint_of(ch)->params, HIST_MAX_SECONDS);
  /* the answer may take as long as ClickHouse may run the query, and a little more */
  tmk__ch_endpoint ep = *tmk__ch_endpoint_of(ch);
  if (ep.timeout_ms < (HIST_MAX_SECONDS + 5) * 1000u)
    ep.timeout_ms = (HIST_MAX_SECONDS + 5) * 1000u;
  if (tmk__ch_history_begin(ch)) {
    free(q.p);
    snprintf(err, ecap,
             "too many history queries at once (%d are waiting for ClickHouse): try again when "
             "one has answered", TMK__CH_HISTORY_MAX);
    return TMK_EAGAIN;
  }
  chbuf resp = {0};
  int rc = tmk__ch_post(&ep, params, (const char*)q.p, NULL, 0, 0, &resp, HIST_MAX_ANSWER, err,
                        ecap);
  tmk__ch_history_end(ch);
  free(q.p);
  if (rc) {
    free(resp.p);
    return TMK_ESOCKET;
  }
  tmk__json_begin_obj(out);
  tmk__json_key(out, "query");
  tmk__json_cstr(out, name);
  tmk__json_key(out, "rows");
  tmk__json_raw(out, "[", 1);
  int first = 1;
  for (size_t i = 0; i < resp.len;) {
    const uint8_t* nl = memchr(resp.p + i, '\n', resp.len - i);
    size_t n = nl ? (size_t)(nl - (resp.p + i)) : resp.len - i;
    /* Rows are passed on as they are, so each must be JSON: an exception ClickHouse writes into
     * a 200 it has begun (a query stopped part-way), or a server that is not ClickHouse, would
     * otherwise break the whole answer for the page. (`out` then holds a part: the caller drops
     * it.) */
    if (n && !tmk__json_valid((const char*)resp.p + i, n)) {
      char line[121];
      const size_t k = tmk__ch_quote(line, sizeof line, resp.p + i, n);
      snprintf(err, ecap, "ClickHouse's answer to '%s' holds a row that is not JSON: %s%s", name,
               line, n > k ? "..." : "");
      free(resp.p);
      return TMK_ESOCKET;
    }
    if (n) {
      if (!first) tmk__json_raw(out, ",", 1);
      tmk__json_raw(out, (const char*)resp.p + i, n);
      first = 0;
    }
    i += n + 1;
  }
  tmk__json_raw(out, "]", 1);
  out->need_comma = 1;
  tmk__json_end_obj(out);
  free(resp.p);
  return 0;
}
