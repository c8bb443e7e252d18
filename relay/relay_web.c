/* relay_web.c — serves the dashboard embedded at build time (tmk::web_assets) at "/", guards
 * /api and the WebSocket with the access token and an Origin check, and installs the live stream
 * (relay_stream.c). Nothing but embedded assets is ever served from here. */
#define _POSIX_C_SOURCE 200809L
#include <civetweb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "relay_api.h"
#include "relay_stream.h"
#include "tmk_web_assets.h"

struct tmk_relay_web {
  char token[128];   /* "" = none required */
  int check_origin;
  tmk__stream* stream;
};

/* ---- helpers ---------------------------------------------------------------------------- */

int tmk_relay_web_is_loopback(const char* host) {
  if (!host || !*host) return 0;
  if (strcasecmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 || strcmp(host, "[::1]") == 0)
    return 1;
  /* 127.0.0.0/8: "127." followed by digits and dots only */
  if (strncmp(host, "127.", 4) != 0) return 0;
  for (const char* p = host + 4; *p; p++)
    if (!(*p == '.' || (*p >= '0' && *p <= '9'))) return 0;
  return 1;
}

int tmk_relay_web_make_token(char* out, size_t cap) {
  unsigned char raw[16];
  if (cap < 33) return TMK_EINVAL;
  FILE* f = fopen("/dev/urandom", "rb");
  if (!f) return TMK_EIO;
  size_t n = fread(raw, 1, sizeof raw, f);
  fclose(f);
  if (n != sizeof raw) return TMK_EIO;
  for (size_t i = 0; i < sizeof raw; i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
  return 0;
}

/* Constant-time comparison of a candidate against the token. */
static int token_equal(const tmk_relay_web* w, const char* s, size_t n) {
  size_t tl = strlen(w->token);
  unsigned diff = (unsigned)(n ^ tl);
  for (size_t i = 0; i < tl; i++) diff |= (unsigned)(w->token[i] ^ (i < n ? s[i] : 0));
  return diff == 0;
}

static int has_token(const tmk_relay_web* w, const struct mg_connection* conn) {
  if (!w->token[0]) return 1;
  const struct mg_request_info* ri = mg_get_request_info(conn);
  const char* auth = mg_get_header(conn, "Authorization");
  if (auth && strncasecmp(auth, "Bearer ", 7) == 0 && token_equal(w, auth + 7, strlen(auth + 7))) return 1;
  const char* q = ri ? ri->query_string : NULL;
  while (q && *q) {
    const char* amp = strchr(q, '&');
    size_t len = amp ? (size_t)(amp - q) : strlen(q);
    if (len > 6 && strncmp(q, "token=", 6) == 0 && token_equal(w, q + 6, len - 6)) return 1;
    q = amp ? amp + 1 : NULL;
  }
  return 0;
}

/* The Origin of a browser's WebSocket must name the host the page was loaded from (the Host
 * header), so another site's page cannot read the stream. Clients without Origin (tools) pass. */
static int origin_ok(const struct mg_connection* conn) {
  const char* origin = mg_get_header(conn, "Origin");
  if (!origin) return 1;
  const char* host = mg_get_header(conn, "Host");
  if (!host) return 0;
  const char* p = strstr(origin, "://");
  if (!p) return 0;
  p += 3;
  return strcasecmp(p, host) == 0;
}

/* Without a token (loopback mode) the Host a browser sends must be a loopback address or
 * localhost: a page of evil.example that resolves its name to 127.0.0.1 (DNS rebinding) sends
 * Host: evil.example, matching its own Origin, and must not read the API (issue 15 item 10). */
static int host_ok(const tmk_relay_web* w, const struct mg_connection* conn) {
  if (w->token[0]) return 1; /* the token protects a relay on another address */
  const char* host = mg_get_header(conn, "Host");
  if (!host) return 1;       /* HTTP/1.0 tools; a browser always sends one */
  char name[128];
  size_t n = strlen(host);
  if (n >= sizeof name) return 0;
  memcpy(name, host, n + 1);
  char* colon = name[0] == '[' ? strstr(name, "]:") : strrchr(name, ':');
  if (colon) colon[name[0] == '[' ? 1 : 0] = 0; /* strip the port */
  return tmk_relay_web_is_loopback(name);
}

/* A request that changes state (POST) must say it carries JSON — a cross-site form or
 * text/plain POST cannot, without a CORS preflight, which the relay never grants — and a
 * browser's Origin must be this relay. Tools send no Origin. */
static int post_ok(const struct mg_connection* conn, const char** why) {
  const char* ct = mg_get_header(conn, "Content-Type");
  if (!ct || strncasecmp(ct, "application/json", 16) != 0) {
    *why = "a POST needs Content-Type: application/json";
    return 415;
  }
  if (!origin_ok(conn)) {
    *why = "a POST from another site's page (Origin does not match the relay's host)";
    return 403;
  }
  return 0;
}

/* The live stream's connect check (tmk__stream_auth_fn): token and Origin. */
static int ws_authorized(void* ud, const struct mg_connection* conn) {
  const tmk_relay_web* w = ud;
  if (!has_token(w, conn) || !host_ok(w, conn)) return 0;
  if ((w->check_origin || w->token[0]) && !origin_ok(conn)) return 0;
  return 1;
}

/* ---- handlers --------------------------------------------------------------------------- */

static int auth_api(struct mg_connection* conn, void* ud) {
  const tmk_relay_web* w = ud;
  const char* up = mg_get_header(conn, "Upgrade");
  int ws = up && strcasecmp(up, "websocket") == 0;
  if (!has_token(w, conn)) {
    tmk__http_send_error(conn, 401, TMK_EACCESS,
                         "missing or wrong access token: open the URL the relay printed (it ends "
                         "in ?token=...)");
    return 0;
  }
  if (!host_ok(w, conn)) {
    tmk__http_send_error(conn, 403, TMK_EACCESS,
                         "Host is not this relay: open the dashboard at http://127.0.0.1:PORT/ or "
                         "http://localhost:PORT/ (a page of another site is reading the relay)");
    return 0;
  }
  if (ws && (w->check_origin || w->token[0]) && !origin_ok(conn)) {
    tmk__http_send_error(conn, 403, TMK_EACCESS, "WebSocket Origin does not match the relay's host");
    return 0;
  }
  const struct mg_request_info* ri = mg_get_request_info(conn);
  const char* why = NULL;
  int st = 0;
  if (ri && strcmp(ri->request_method, "GET") != 0 && strcmp(ri->request_method, "HEAD") != 0 &&
      strcmp(ri->request_method, "OPTIONS") != 0)
    st = post_ok(conn, &why);
  if (st) {
    tmk__http_send_error(conn, st, TMK_EACCESS, why);
    return 0;
  }
  if (ws && tmk__stream_full(w->stream)) {
    tmk__http_send_error(conn, 429, TMK_EAGAIN,
                         "too many live streams open (32): close dashboards you no longer need; "
                         "the API still answers");
    return 0;
  }
  return 1;
}

static int serve_asset(struct mg_connection* conn, void* ud) {
  (void)ud;
  const struct mg_request_info* ri = mg_get_request_info(conn);
  const char* uri = ri->local_uri ? ri->local_uri : "/";
  if (strcmp(uri, "/") == 0) uri = "/index.html";
  const tmk_web_asset* a = tmk_web_asset_find(uri);
  if (strcmp(ri->request_method, "GET") != 0 && strcmp(ri->request_method, "HEAD") != 0) {
    mg_printf(conn, "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\nContent-Length: 0\r\n\r\n");
    return 405;
  }
  if (!a) {
    static const char body[] = "not found\n";
    mg_printf(conn, "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: %u\r\n\r\n%s",
              (unsigned)(sizeof body - 1), body);
    return 404;
  }
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %lu\r\nCache-Control: no-cache\r\n"
            "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n"
            "Cross-Origin-Opener-Policy: same-origin\r\nCross-Origin-Embedder-Policy: require-corp\r\n"
            "Cross-Origin-Resource-Policy: same-origin\r\n"
            "Content-Security-Policy: default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'\r\n\r\n",
            a->content_type, (unsigned long)a->size);
  if (strcmp(ri->request_method, "HEAD") != 0) mg_write(conn, a->data, a->size);
  return 200;
}

void tmk_relay_web_hook(struct mg_context* ctx, tmk_relay* r, void* ud) {
  tmk_relay_web* w = ud;
  mg_set_auth_handler(ctx, "/api", auth_api, w);
  mg_set_request_handler(ctx, "/$", serve_asset, NULL);
  for (size_t i = 0; i < tmk_web_asset_count(); i++) {
    const tmk_web_asset* a = tmk_web_asset_at(i);
    mg_set_request_handler(ctx, a->path, serve_asset, NULL);
  }
  tmk__stream_register(w->stream, ctx, r, ws_authorized, w);
}

int tmk_relay_web_create(const tmk_relay_web_desc* d, tmk_relay_web** out) {
  *out = NULL;
  if (d && d->token && strlen(d->token) >= sizeof((tmk_relay_web*)0)->token) return TMK_EINVAL;
  tmk_relay_web* w = calloc(1, sizeof *w);
  if (!w) return TMK_ENOMEM;
  w->check_origin = d ? d->check_origin : 1;
  if (d && d->token) snprintf(w->token, sizeof w->token, "%s", d->token);
  w->stream = tmk__stream_new(d ? d->team_names : NULL, d ? d->ws_idle_ms : 0);
  if (!w->stream) {
    free(w);
    return TMK_ENOMEM;
  }
  *out = w;
  return 0;
}

void tmk_relay_web_destroy(tmk_relay_web* w) {
  if (!w) return;
  tmk__stream_free(w->stream);
  free(w);
}

void tmk_relay_web_get_stats(tmk_relay_web* w, tmk_relay_stream_stats* out) {
  tmk__stream_get_stats(w->stream, out);
}
