/* relay_clickhouse_http.h — ClickHouse's HTTP interface as the history sink uses it
 * (relay_clickhouse_http.c): a growable byte buffer, the parsed --clickhouse URL, one blocking
 * POST per connection. Shared by the sink (relay_clickhouse.c) and the history queries
 * (relay_history.c). */
#ifndef TMK_RELAY_CLICKHOUSE_HTTP_H
#define TMK_RELAY_CLICKHOUSE_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct tmk__chbuf {
  uint8_t* p;
  size_t len, cap;
  int oom;       /* a growth failed: the buffer is incomplete */
  size_t mapped; /* > 0: p is an mmap of cap bytes (the sink's staging, relay_clickhouse.c) of
                    which the first `mapped` are populated */
  size_t step;   /* when mapped: bytes populated at a time (a power of two) */
} tmk__chbuf;

/* Grows the buffer to take n more bytes. Returns 1, or 0 with oom set when memory runs out. */
int tmk__chbuf_grow(tmk__chbuf* b, size_t n);
/* Makes room for n more bytes (inline while there is: the taps call it for every row). Returns
 * 1, or 0 with oom set when memory runs out. */
static inline int tmk__chbuf_room(tmk__chbuf* b, size_t n) {
  return b->len + n <= b->cap ? 1 : tmk__chbuf_grow(b, n);
}
/* Frees the bytes and zeroes the buffer. */
void tmk__chbuf_free(tmk__chbuf* b);
/* Appends n bytes (nothing once oom is set). n may be 0, also with nothing allocated yet (an
 * empty answer): memcpy must not be given the NULL buffer then, even for no bytes. */
static inline void tmk__chbuf_put(tmk__chbuf* b, const void* v, size_t n) {
  if (n == 0 || !tmk__chbuf_room(b, n)) return;
  memcpy(b->p + b->len, v, n);
  b->len += n;
}

typedef struct tmk__ch_endpoint {
  char host[128];
  char port[8];
  char params[512]; /* URL query string without '?', with database=NAME */
  char db[64];      /* NAME: letters, digits, _ */
  uint32_t timeout_ms; /* connect, send and answer, per request */
} tmk__ch_endpoint;

/* Parses http://HOST[:PORT]/[?database=NAME&...] into ep (not timeout_ms). Returns 0, or -1
 * for a URL tmk__ch_check_url rejects. */
int tmk__ch_parse_url(const char* url, tmk__ch_endpoint* ep);
/* Copies the start of an answer from ClickHouse (p, n bytes) into dst as one line for an error
 * message: at most cap - 1 bytes, control bytes as spaces. Returns how many bytes it took. */
size_t tmk__ch_quote(char* dst, size_t cap, const uint8_t* p, size_t n);
/* POSTs `sql` (in the URL, after `params`) with `body` on a new connection. Returns 0 on HTTP
 * 200 (the answer's body, at most rcap bytes, appended to resp when given), or -1 with a
 * sentence in err (unreachable, timeout, non-200 with ClickHouse's message).
 * lend = 1 (Linux; the body must be memory of the caller's own mapping, not the heap's): the
 * body's pages are lent to the kernel instead of copied into the socket (vmsplice, then splice:
 * the kernel's copy was half of the sink thread's CPU). They are back once the call returns 0
 * (ClickHouse has read the whole body, so no socket buffer holds them); after -1 a socket the
 * call gave up on may still hold some, and still send them, so the caller must never write to
 * that memory again (unmap it) lest ClickHouse take changed bytes for the request. */
int tmk__ch_post(const tmk__ch_endpoint* ep, const char* params, const char* sql,
                 const uint8_t* body, size_t blen, int lend, tmk__chbuf* resp, size_t rcap,
                 char* err, size_t ecap);

#endif /* TMK_RELAY_CLICKHOUSE_HTTP_H */
