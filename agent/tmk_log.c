/* tmk_log.c — the agent's one logging function: formats a line and hands it to the game's
 * tmk_logger. Used by every agent file; calls nothing of theirs. Formats by itself, not with
 * vsnprintf: a libc printf costs kilobytes on a board and drags malloc in (newlib's). */
#include <stdarg.h>
#include <string.h>

#include "tmk_transport.h"

/* Writes "telemark: " and then `fmt` (without that prefix). Supports %s, %.*s, %u, %x with a
 * zero-padded width ("%08x": the only padding the agent's lines use); no signed form (the one
 * negative number the agent logs, a TMK_E* code, is written "-%u" of its negation) and no 64-bit
 * forms (a 64-bit value is passed as two 32-bit words, "%08x%08x": no 64-bit division on 32-bit
 * targets). Each conversion becomes a run of characters that one loop copies, cut at 159
 * characters. */
void tmk__agent_log(const tmk_logger* logger, int level, const char* fmt, ...) {
  char buf[160];
  char num[12]; /* digits, and zeros to pad up to a width of 11 */
  unsigned len = 10;
  va_list ap;
  if (!logger || !logger->fn) return;
  memcpy(buf, "telemark: ", 10); /* every line's prefix, kept once */
  va_start(ap, fmt);
  for (; *fmt; fmt++) {
    const char* s = fmt; /* the run: up to n characters from s, ending early at a NUL */
    unsigned n = 1;
    if (*fmt == '%') {
      unsigned width = 0;
      fmt++;
      while (*fmt >= '0' && *fmt <= '9') width = width * 10u + (unsigned)(*fmt++ - '0');
      if (fmt[0] == '.' && fmt[1] == '*') {
        n = (unsigned)va_arg(ap, int); /* a negative precision: as good as none */
        fmt += 2;
      } else {
        n = ~0u;
      }
      s = fmt;
      switch (*fmt) {
        case 's':
          s = va_arg(ap, const char*);
          if (!s) s = "(null)";
          break;
        case 'u':
        case 'x': {
          uint32_t v = va_arg(ap, unsigned), base = *fmt == 'x' ? 16u : 10u;
          char* q = num + sizeof num;
          do {
            uint32_t d = v % base;
            *--q = (char)('0' + d + (d > 9u) * ('a' - '0' - 10u));
            v /= base;
          } while ((v || (unsigned)(num + sizeof num - q) < width) && q > num + 1);
          s = q;
          n = (unsigned)(num + sizeof num - q);
          break;
        }
        case '%': n = 1; break;
        default:
          s = "?";
          if (!*fmt) fmt--;
          break;
      }
    }
    for (; n && *s && len + 1u < sizeof buf; n--) buf[len++] = *s++;
  }
  va_end(ap);
  buf[len] = 0;
  logger->fn(logger->user_data, level, buf);
}
