/* tmk_relay_web.h — the dashboard side of telemark-relay: serves the embedded assets at "/",
 * the live-data WebSocket at /api/stream (relay_stream.c, format in docs/API.md "Live stream"),
 * and the access-token / Origin checks for everything under /api. */
#ifndef TMK_RELAY_WEB_H
#define TMK_RELAY_WEB_H

#include <stddef.h>

#include "tmk_relay.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tmk_relay_web_desc {
  /* Access token required on every /api request and the WebSocket (`?token=` or the header
   * `Authorization: Bearer <token>`); NULL or "" = none required (loopback). */
  const char* token;
  /* 1: a WebSocket whose Origin header is present must name the host it connected to. Always
   * applied when a token is set; recommended everywhere (stops other sites' pages). */
  int check_origin;
  /* Team (verbosity bit) names that override the agents' (relay --team BIT=NAME); NULL = the
   * agent's own name. */
  const char* team_names[32];
} tmk_relay_web_desc;

/* Registers the dashboard with the relay's HTTP server (tmk_relay_http_add_hook): call before
 * tmk_relay_run(). Copies the desc. Returns 0 or a negative TMK_E* code. */
int tmk_relay_web_install(tmk_relay* r, const tmk_relay_web_desc* d);

/* Fills `out` (cap bytes, at least 33) with a random 32-hex-digit token from /dev/urandom.
 * Returns 0 or TMK_EIO. */
int tmk_relay_web_make_token(char* out, size_t cap);

/* 1 when `host` (an --http host part, without port) is a loopback address or "localhost". */
int tmk_relay_web_is_loopback(const char* host);

/* Live-stream counters over all WebSocket clients (for the stats log and tests). */
typedef struct tmk_relay_ws_stats {
  unsigned clients;            /* connected now */
  unsigned long long messages; /* binary messages sent */
  unsigned long long bytes;    /* bytes sent */
  unsigned long long coalesced;/* times a slow client skipped live items */
} tmk_relay_ws_stats;
void tmk_relay_ws_get_stats(tmk_relay_ws_stats* out);

/* ---- internal, between relay_web.c and relay_stream.c ---- */
struct mg_context;
struct mg_connection;
/* Installs the /api/stream WebSocket handlers. */
void tmk__relay_ws_register(struct mg_context* ctx, tmk_relay* r);
/* Sets the team-name overrides (copied). */
void tmk__relay_ws_set_teams(const char* const names[32]);
/* 1 when the request carries the token (or none is required) and, for WebSockets, its Origin
 * is acceptable. */
int tmk__relay_web_authorized(const struct mg_connection* conn, int websocket);

#ifdef __cplusplus
}
#endif
#endif /* TMK_RELAY_WEB_H */
