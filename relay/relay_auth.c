/* relay_auth.c — authenticated ingest (docs/PROTOCOL.md §2.1, docs/SECURITY.md §4): the key
 * file behind --key, which key a packet must carry, and the MAC on what the relay sends to a
 * keyed agent. The ingest path (relay_ingest.c) decides what to do with a packet from these. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "relay_internal.h"

/* ---------------------------------------------------------------------------------------------
 * The key file
 * ------------------------------------------------------------------------------------------- */

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int tmk_relay_keys_parse(const char* text, size_t len, const char* name, tmk_relay_key* out,
                         uint32_t cap, uint32_t* n, char* err, size_t ecap) {
  const char* p = text;
  const char* end = text + len;
  uint32_t first = *n;
  unsigned line = 0;
  if (!name) name = "key file";
  while (p < end) {
    const char* eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    line++;
    /* fields: PROGRAM KEY, separated by blanks; a field that starts with '#' starts a comment
     * that runs to the end of the line */
    const char* f[3];
    size_t fl[3];
    int nf = 0;
    const char* q = p;
    while (q < eol && isspace((unsigned char)*q)) q++;
    {
      while (q < eol) {
        while (q < eol && isspace((unsigned char)*q)) q++;
        if (q >= eol || *q == '#') break;
        const char* s = q;
        while (q < eol && !isspace((unsigned char)*q)) q++;
        if (nf < 3) {
          f[nf] = s;
          fl[nf] = (size_t)(q - s);
        }
        nf++;
      }
    }
    p = eol + 1;
    if (nf == 0) continue;
    if (nf != 2) {
      snprintf(err, ecap,
               "%s:%u: expected 'PROGRAM KEY' (a program name, or * for any program, then the "
               "key as 32 hex digits), found %d fields",
               name, line, nf);
      return TMK_EINVAL;
    }
    if (fl[0] >= TMK_RELAY_KEY_PROGRAM_MAX) {
      snprintf(err, ecap, "%s:%u: program name longer than %d bytes", name, line,
               TMK_RELAY_KEY_PROGRAM_MAX - 1);
      return TMK_EINVAL;
    }
    uint8_t key[16];
    int ok = fl[1] == 32;
    for (size_t i = 0; ok && i < 16; i++) {
      int hi = hexval(f[1][2 * i]), lo = hexval(f[1][2 * i + 1]);
      if (hi < 0 || lo < 0) ok = 0;
      else key[i] = (uint8_t)(hi << 4 | lo);
    }
    if (!ok) {
      snprintf(err, ecap,
               "%s:%u: the key of '%.*s' is not 32 hex digits (16 bytes; make one with "
               "head -c16 /dev/urandom | xxd -p)",
               name, line, (int)fl[0], f[0]);
      return TMK_EINVAL;
    }
    for (uint32_t i = 0; i < *n; i++) {
      if (strlen(out[i].program) == fl[0] && memcmp(out[i].program, f[0], fl[0]) == 0) {
        snprintf(err, ecap, "%s:%u: '%.*s' has a key already (one key per program)", name, line,
                 (int)fl[0], f[0]);
        return TMK_EINVAL;
      }
    }
    if (*n >= cap) {
      snprintf(err, ecap, "%s:%u: more than %u keys", name, line, cap);
      return TMK_EINVAL;
    }
    memcpy(out[*n].program, f[0], fl[0]);
    out[*n].program[fl[0]] = 0;
    memcpy(out[*n].key, key, 16);
    (*n)++;
  }
  if (*n == first) {
    snprintf(err, ecap, "%s: no keys in it (lines 'PROGRAM KEY', * for any program)", name);
    return TMK_EINVAL;
  }
  return 0;
}

int tmk_relay_keys_load(const char* path, tmk_relay_key* out, uint32_t cap, uint32_t* n,
                        int* world_readable, char* err, size_t ecap) {
  static char buf[1 << 16];
  FILE* f = fopen(path, "rb");
  struct stat st;
  *world_readable = 0;
  if (!f) {
    snprintf(err, ecap, "cannot read key file %s: %s", path, strerror(errno));
    return TMK_EIO;
  }
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & S_IROTH)) *world_readable = 1;
  size_t len = fread(buf, 1, sizeof buf, f);
  int big = len == sizeof buf;
  fclose(f);
  if (big) {
    snprintf(err, ecap, "key file %s: larger than %zu bytes", path, sizeof buf - 1);
    return TMK_EINVAL;
  }
  return tmk_relay_keys_parse(buf, len, path, out, cap, n, err, ecap);
}

/* ---------------------------------------------------------------------------------------------
 * Which key applies
 * ------------------------------------------------------------------------------------------- */

const uint8_t* tmk__auth_key_for(const tmk_relay* r, const char* program, size_t len) {
  const uint8_t* any = NULL;
  for (uint32_t i = 0; i < r->cfg.nkeys; i++) {
    const tmk_relay_key* k = &r->cfg.keys[i];
    if (strcmp(k->program, "*") == 0) any = k->key;
    else if (strlen(k->program) == len && memcmp(k->program, program, len) == 0) return k->key;
  }
  return any;
}

int tmk__auth_all_keyed(const tmk_relay* r) {
  for (uint32_t i = 0; i < r->cfg.nkeys; i++)
    if (strcmp(r->cfg.keys[i].program, "*") == 0) return 1;
  return 0;
}

const uint8_t* tmk__auth_find_key(const tmk_relay* r, const uint8_t* p, size_t len) {
  for (uint32_t i = 0; i < r->cfg.nkeys; i++) {
    const uint8_t* k = r->cfg.keys[i].key;
    int seen = 0; /* a key several programs share is tried once */
    for (uint32_t j = 0; j < i && !seen; j++) seen = memcmp(r->cfg.keys[j].key, k, 16) == 0;
    if (!seen && tmk_proto_mac_check(p, len, k) == 0) return k;
  }
  return NULL;
}

int tmk__auth_seal(const tmk__session* s, uint8_t* p, size_t len, size_t cap) {
  if (!s->keyed) return (int)len;
  return tmk_proto_mac_seal(p, len, cap, s->key);
}
