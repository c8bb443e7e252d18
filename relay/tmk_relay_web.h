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
  /* A live stream whose browser sent nothing (no subscribe, ack or keep-alive ping, no
   * WebSocket frame at all) for this long is closed, so idle clients cannot hold the 32 stream
   * places for good; the page pings every 10 s. 0 = 60000. */
  uint32_t ws_idle_ms;
} tmk_relay_web_desc;

typedef struct tmk_relay_web tmk_relay_web;

/* Creates the dashboard's state (token, Origin check, team names, live-stream clients) from a
 * desc (copied; NULL = all defaults). Put {tmk_relay_web_hook, *out} into
 * tmk_relay_desc.http_hooks so the relay's HTTP server installs it. Returns 0, TMK_EINVAL (token
 * longer than 127 bytes) or TMK_ENOMEM. */
int tmk_relay_web_create(const tmk_relay_web_desc* d, tmk_relay_web** out);
/* The hook (tmk_relay_http_hook) that installs "/", the /api guards and /api/stream; ud is the
 * tmk_relay_web. One tmk_relay_web serves one relay. */
void tmk_relay_web_hook(struct mg_context* ctx, tmk_relay* r, void* ud);
/* Frees it; call after tmk_relay_destroy (which stops the HTTP server). */
void tmk_relay_web_destroy(tmk_relay_web* w);

/* Fills `out` (cap bytes, at least 33) with a random 32-hex-digit token from /dev/urandom.
 * Returns 0 or TMK_EIO. */
int tmk_relay_web_make_token(char* out, size_t cap);

/* 1 when `host` (an --http host part, without port) is a loopback address or "localhost". */
int tmk_relay_web_is_loopback(const char* host);

/* Live-stream counters over all WebSocket clients of one dashboard. */
typedef struct tmk_relay_stream_stats {
  unsigned clients;            /* connected now */
  unsigned long long messages; /* binary messages sent */
  unsigned long long bytes;    /* bytes sent */
  unsigned long long coalesced;/* times a slow client skipped live items */
  unsigned long long idle_closed; /* streams closed for sending nothing for ws_idle_ms */
} tmk_relay_stream_stats;
void tmk_relay_web_get_stats(tmk_relay_web* w, tmk_relay_stream_stats* out);

#ifdef __cplusplus
}
#endif
#endif /* TMK_RELAY_WEB_H */
