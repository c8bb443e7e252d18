/* tmk_log.c — the agent's one logging function: formats a line and hands it to the game's
 * tmk_logger. Used by every agent file; calls nothing of theirs. Formats by itself, not with
 * vsnprintf: a libc printf costs kilobytes on a board and drags malloc in (newlib's). */
#include <stdarg.h>
#include <string.h>

#include "tmk_transport.h"

typedef struct line {
  char buf[160];
  unsigned len;
} line;

static void put(line* l, char c) {
  if (l->len + 1u < sizeof l->buf) l->buf[l->len++] = c;
}

/* Writes v in base 10 or 16, at least `width` digits wide (zero-padded). 32-bit words only (no
 * 64-bit division on 32-bit targets): a 64-bit value is passed as two ("%08x%08x"). */
static void put_num(line* l, uint32_t v, unsigned base, unsigned width) {
  char digits[10];
  unsigned n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  while (width > n) {
    put(l, '0');
    width--;
  }
  while (n) put(l, digits[--n]);
}

/* Writes "telemark: " and then `fmt` (without that prefix). Supports %s, %.*s, %d, %u, %x with a
 * zero-padded width ("%08x": the only padding the agent's lines use); no 64-bit forms. */
void tmk__agent_log(const tmk_logger* logger, int level, const char* fmt, ...) {
  line l;
  va_list ap;
  if (!logger || !logger->fn) return;
  memcpy(l.buf, "telemark: ", 10); /* every line's prefix, kept once */
  l.len = 10;
  va_start(ap, fmt);
  for (; *fmt; fmt++) {
    unsigned width = 0;
    int prec = -1;
    if (*fmt != '%') {
      put(&l, *fmt);
      continue;
    }
    fmt++;
    while (*fmt >= '0' && *fmt <= '9') width = width * 10u + (unsigned)(*fmt++ - '0');
    if (fmt[0] == '.' && fmt[1] == '*') {
      prec = va_arg(ap, int);
      fmt += 2;
    }
    switch (*fmt) {
      case 's': {
        const char* s = va_arg(ap, const char*);
        if (!s) s = "(null)";
        for (; *s && prec != 0; s++, prec--) put(&l, *s);
        break;
      }
      case 'd': {
        int v = va_arg(ap, int);
        if (v < 0) put(&l, '-');
        put_num(&l, v < 0 ? 0u - (uint32_t)v : (uint32_t)v, 10u, width);
        break;
      }
      case 'u': put_num(&l, va_arg(ap, unsigned), 10u, width); break;
      case 'x': put_num(&l, va_arg(ap, unsigned), 16u, width); break;
      case '%': put(&l, '%'); break;
      default: put(&l, '?'); if (!*fmt) fmt--; break;
    }
  }
  va_end(ap);
  l.buf[l.len] = 0;
  logger->fn(logger->user_data, level, l.buf);
}
