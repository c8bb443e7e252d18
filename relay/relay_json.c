/* relay_json.c — a small JSON writer for the HTTP API: a growable buffer that inserts commas,
 * escapes strings (control bytes as \u00XX, bytes that are not UTF-8 as U+FFFD) and prints
 * numbers exactly. Allocation failure sets `oom` and stops writing. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "relay_core.h"

void tmk__json_init(tmk__json* j) { memset(j, 0, sizeof *j); }

void tmk__json_free(tmk__json* j) {
  free(j->buf);
  memset(j, 0, sizeof *j);
}

void tmk__json_raw(tmk__json* j, const char* s, size_t n) {
  if (j->oom) return;
  if (j->len + n + 1 > j->cap) {
    size_t cap = j->cap ? j->cap : 256;
    while (cap < j->len + n + 1) cap *= 2;
    char* nb = realloc(j->buf, cap);
    if (!nb) {
      j->oom = 1;
      return;
    }
    j->buf = nb;
    j->cap = cap;
  }
  memcpy(j->buf + j->len, s, n);
  j->len += n;
  j->buf[j->len] = 0;
}

static void sep(tmk__json* j) {
  if (j->need_comma) tmk__json_raw(j, ",", 1);
  j->need_comma = 1;
}

void tmk__json_begin_obj(tmk__json* j) {
  sep(j);
  tmk__json_raw(j, "{", 1);
  j->need_comma = 0;
}
void tmk__json_end_obj(tmk__json* j) {
  tmk__json_raw(j, "}", 1);
  j->need_comma = 1;
}
void tmk__json_begin_arr(tmk__json* j) {
  sep(j);
  tmk__json_raw(j, "[", 1);
  j->need_comma = 0;
}
void tmk__json_end_arr(tmk__json* j) {
  tmk__json_raw(j, "]", 1);
  j->need_comma = 1;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not one (overlong forms,
 * surrogates and values above U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char* s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned min;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
  else return 0;
  if (n < len) return 0;
  unsigned v = c & (0x3Fu >> (len - 1));
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (s[i] & 0x3Fu);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  return len;
}

/* Writes a JSON string: escapes quotes, backslashes and control bytes; bytes that are not valid
 * UTF-8 become U+FFFD, so the response is always valid JSON text. */
static void put_escaped(tmk__json* j, const char* s, size_t n) {
  const unsigned char* u = (const unsigned char*)s;
  tmk__json_raw(j, "\"", 1);
  size_t run = 0, i = 0;
  while (i < n) {
    unsigned char c = u[i];
    const char* esc = NULL;
    char tmp[8];
    size_t step = 1;
    if (c == '"') esc = "\\\"";
    else if (c == '\\') esc = "\\\\";
    else if (c == '\n') esc = "\\n";
    else if (c == '\r') esc = "\\r";
    else if (c == '\t') esc = "\\t";
    else if (c < 0x20 || c == 0x7f) {
      snprintf(tmp, sizeof tmp, "\\u%04x", c);
      esc = tmp;
    } else if (c >= 0x80) {
      step = utf8_len(u + i, n - i);
      if (!step) {
        esc = "\\ufffd";
        step = 1;
      }
    }
    if (esc) {
      tmk__json_raw(j, s + i - run, run);
      run = 0;
      tmk__json_raw(j, esc, strlen(esc));
    } else {
      run += step;
    }
    i += step;
  }
  tmk__json_raw(j, s + n - run, run);
  tmk__json_raw(j, "\"", 1);
}

void tmk__json_key(tmk__json* j, const char* key) {
  sep(j);
  put_escaped(j, key, strlen(key));
  tmk__json_raw(j, ":", 1);
  j->need_comma = 0;
}

void tmk__json_str(tmk__json* j, const char* s, size_t n) {
  sep(j);
  put_escaped(j, s ? s : "", s ? n : 0);
}

void tmk__json_cstr(tmk__json* j, const char* s) { tmk__json_str(j, s, s ? strlen(s) : 0); }

void tmk__json_u64(tmk__json* j, uint64_t v) {
  char b[32];
  int n = snprintf(b, sizeof b, "%" PRIu64, v);
  sep(j);
  tmk__json_raw(j, b, (size_t)n);
}

void tmk__json_i64(tmk__json* j, int64_t v) {
  char b[32];
  int n = snprintf(b, sizeof b, "%" PRId64, v);
  sep(j);
  tmk__json_raw(j, b, (size_t)n);
}

void tmk__json_f64(tmk__json* j, double v) {
  if (!isfinite(v)) {
    tmk__json_null(j);
    return;
  }
  char b[40];
  int n = snprintf(b, sizeof b, "%.17g", v);
  sep(j);
  tmk__json_raw(j, b, (size_t)n);
}

void tmk__json_bool(tmk__json* j, int v) {
  sep(j);
  if (v) tmk__json_raw(j, "true", 4);
  else tmk__json_raw(j, "false", 5);
}

void tmk__json_null(tmk__json* j) {
  sep(j);
  tmk__json_raw(j, "null", 4);
}

/* ---------------------------------------------------------------------------------------------
 * Syntax check (tmk__json_valid): a recursive descent over the text, nothing built.
 * ------------------------------------------------------------------------------------------- */
typedef struct jscan {
  const unsigned char *p, *end;
} jscan;

static void js_ws(jscan* c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
    c->p++;
}

static int js_digits(jscan* c) { /* one or more */
  const unsigned char* b = c->p;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
  return c->p > b;
}

static int js_number(jscan* c) {
  if (c->p < c->end && *c->p == '-') c->p++;
  if (c->p < c->end && *c->p == '0') c->p++;
  else if (!js_digits(c)) return 0;
  if (c->p < c->end && *c->p == '.') {
    c->p++;
    if (!js_digits(c)) return 0;
  }
  if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
    c->p++;
    if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
    if (!js_digits(c)) return 0;
  }
  return 1;
}

static int js_string(jscan* c) { /* at the opening quote */
  for (c->p++; c->p < c->end; c->p++) {
    const unsigned char ch = *c->p;
    if (ch == '"') {
      c->p++;
      return 1;
    }
    if (ch < 0x20) return 0;
    if (ch != '\\') continue;
    if (++c->p == c->end) return 0;
    if (*c->p == 'u') {
      for (int k = 0; k < 4; k++) {
        if (++c->p == c->end) return 0;
        const unsigned char h = *c->p;
        if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
          return 0;
      }
    } else if (!strchr("\"\\/bfnrt", *c->p) || !*c->p) {
      return 0;
    }
  }
  return 0;
}

static int js_word(jscan* c, const char* w, size_t n) {
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return 0;
  c->p += n;
  return 1;
}

static int js_value(jscan* c, int depth) {
  js_ws(c);
  if (c->p == c->end) return 0;
  switch (*c->p) {
    case '"': return js_string(c);
    case 't': return js_word(c, "true", 4);
    case 'f': return js_word(c, "false", 5);
    case 'n': return js_word(c, "null", 4);
    case '[':
    case '{': {
      if (depth == 64) return 0;
      const unsigned char close = *c->p == '[' ? ']' : '}';
      c->p++;
      js_ws(c);
      if (c->p < c->end && *c->p == close) {
        c->p++;
        return 1;
      }
      for (;;) {
        if (close == '}') {
          js_ws(c);
          if (c->p == c->end || *c->p != '"' || !js_string(c)) return 0;
          js_ws(c);
          if (c->p == c->end || *c->p++ != ':') return 0;
        }
        if (!js_value(c, depth + 1)) return 0;
        js_ws(c);
        if (c->p == c->end) return 0;
        if (*c->p == close) {
          c->p++;
          return 1;
        }
        if (*c->p++ != ',') return 0;
      }
    }
    default: return js_number(c);
  }
}

int tmk__json_valid(const char* s, size_t n) {
  jscan c = {(const unsigned char*)s, (const unsigned char*)s + n};
  if (!js_value(&c, 0)) return 0;
  js_ws(&c);
  return c.p == c.end;
}
