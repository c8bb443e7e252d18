/* relay_stream.h — the live stream's interface to the dashboard server (relay_web.c): one
 * tmk__stream per relay holds its WebSocket clients, wake-ups and counters. Internal. */
#ifndef TMK_RELAY_STREAM_H
#define TMK_RELAY_STREAM_H

#include "tmk_relay_web.h"

struct mg_context;
struct mg_connection;
typedef struct tmk__stream tmk__stream;

/* 1 when the WebSocket request may connect (token and Origin checks of relay_web.c). */
typedef int (*tmk__stream_auth_fn)(void* ud, const struct mg_connection* conn);

/* Team-name overrides are copied; idle_ms: a client silent this long is closed (0 = 60000).
 * Returns NULL when out of memory. */
tmk__stream* tmk__stream_new(const char* const team_names[32], uint32_t idle_ms);
/* After the HTTP server has stopped (no client left). */
void tmk__stream_free(tmk__stream* st);
/* Installs /api/stream on ctx and becomes r's data listener. */
void tmk__stream_register(tmk__stream* st, struct mg_context* ctx, tmk_relay* r,
                          tmk__stream_auth_fn authorize, void* auth_ud);
void tmk__stream_get_stats(tmk__stream* st, tmk_relay_stream_stats* out);
/* Streams open at once: each holds one of the HTTP server's threads (TMK__HTTP_THREADS). */
#define TMK__STREAM_MAX_CLIENTS 32
/* 1 when TMK__STREAM_MAX_CLIENTS streams are open. */
int tmk__stream_full(tmk__stream* st);

#endif /* TMK_RELAY_STREAM_H */
