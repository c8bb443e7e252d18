/* relay_recording.c — the relay's recording format (docs/RECORDING.md): an append-only file of
 * checksummed chunks holding the session's raw packets in delivery order, so a reader recovers
 * every chunk written before a crash and detects a torn tail. Also reads agent files (TMKFILE1). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relay_core.h"

#define CHUNK_HEADER 12             /* RECORDING.md §2 */
#define FLUSH_BYTES (64u * 1024u)   /* a PACKETS chunk is written when it reaches this size */

/* ---------------------------------------------------------------------------------------------
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the SSE4.2 crc32 instruction where the
 * CPU has it (x86-64, checked once at run time), else eight tables, eight bytes a step (the
 * spill files and recordings are checksummed whole: a byte a step was a fifth of a relay's CPU
 * when its ClickHouse sink spilled)
 * ------------------------------------------------------------------------------------------- */
/* filled once per process (relays on several threads share it) */
static uint32_t g_crc_table[8][256];
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TMK__CRC_HW 1
static int g_crc_hw;
#endif

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    g_crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int k = 1; k < 8; k++) {
      const uint32_t prev = g_crc_table[k - 1][i];
      g_crc_table[k][i] = (prev >> 8) ^ g_crc_table[0][prev & 0xFF];
    }
#ifdef TMK__CRC_HW
  g_crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t get_u32le(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The register form (no inversions) of the update, eight bytes a step, any byte order. */
static uint32_t crc_tables(uint32_t c, const uint8_t* p, size_t len) {
  const uint32_t(*t)[256] = g_crc_table;
  for (; len >= 8; len -= 8, p += 8) {
    const uint32_t lo = c ^ get_u32le(p), hi = get_u32le(p + 4);
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  while (len--) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c;
}

#ifdef TMK__CRC_HW
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t* p, size_t len) {
  uint64_t c64;
  for (; len && ((uintptr_t)p & 7); len--) c = __builtin_ia32_crc32qi(c, *p++);
  c64 = c;
  for (; len >= 8; len -= 8, p += 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c64 = __builtin_ia32_crc32di(c64, v);
  }
  c = (uint32_t)c64;
  while (len--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

uint32_t tmk__crc32c(uint32_t crc, const void* data, size_t len) {
  pthread_once(&g_crc_once, crc_init);
#ifdef TMK__CRC_HW
  if (g_crc_hw) return ~crc_hw(~crc, data, len);
#endif
  return ~crc_tables(~crc, data, len);
}

uint32_t tmk__crc32c_tables(uint32_t crc, const void* data, size_t len) {
  pthread_once(&g_crc_once, crc_init);
  return ~crc_tables(~crc, data, len);
}

static void put_u32le(uint8_t* p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

/* ---------------------------------------------------------------------------------------------
 * Writer
 * ------------------------------------------------------------------------------------------- */
static int write_all(int fd, const uint8_t* p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return TMK_EIO;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int reserve(tmk__rec_writer* w, size_t more) {
  if (w->len + more <= w->cap) return 0;
  size_t cap = w->cap ? w->cap : FLUSH_BYTES * 2;
  while (cap < w->len + more) cap *= 2;
  uint8_t* nb = realloc(w->buf, cap);
  if (!nb) return TMK_ENOMEM;
  w->buf = nb;
  w->cap = cap;
  return 0;
}

/* Completes the chunk whose payload sits at buf[CHUNK_HEADER..len) and writes it in one call. */
static int write_chunk(tmk__rec_writer* w, uint8_t type) {
  uint32_t plen = (uint32_t)(w->len - CHUNK_HEADER);
  put_u32le(w->buf, plen);
  w->buf[4] = type;
  w->buf[5] = w->buf[6] = w->buf[7] = 0;
  uint32_t crc = tmk__crc32c(0, w->buf, 8);
  crc = tmk__crc32c(crc, w->buf + CHUNK_HEADER, plen);
  put_u32le(w->buf + 8, crc);
  int rc = write_all(w->fd, w->buf, w->len);
  w->len = CHUNK_HEADER;
  if (rc) {
    w->failed = 1;
    return rc;
  }
  w->bytes_written += plen + CHUNK_HEADER;
  w->chunks++;
  return 0;
}

static void put_varint(tmk__rec_writer* w, uint64_t v) {
  if (reserve(w, 10)) return;
  w->len += (size_t)tmk_proto_varint_put(w->buf + w->len, v);
}

static void put_str(tmk__rec_writer* w, const char* s) {
  size_t n = strlen(s);
  put_varint(w, n);
  if (reserve(w, n)) return;
  memcpy(w->buf + w->len, s, n);
  w->len += n;
}

int tmk__rec_create(tmk__rec_writer* w, const char* path, const tmk__rec_session* s) {
  memset(w, 0, sizeof *w);
  w->fd = -1;
  snprintf(w->path, sizeof w->path, "%s", path);
  if (reserve(w, FLUSH_BYTES + CHUNK_HEADER)) return TMK_ENOMEM;
  w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (w->fd < 0) {
    free(w->buf);
    w->buf = NULL;
    return TMK_EIO;
  }
  int rc = write_all(w->fd, (const uint8_t*)TMK__REC_MAGIC, 8);
  w->len = CHUNK_HEADER;
  put_varint(w, s->session_id);
  put_varint(w, s->created_unix_ns);
  put_str(w, s->transport);
  put_str(w, s->source);
  put_str(w, s->relay_version);
  if (!rc) rc = write_chunk(w, TMK__CHUNK_SESSION);
  if (rc) {
    close(w->fd);
    unlink(path);
    free(w->buf);
    w->buf = NULL;
    w->fd = -1;
    return TMK_EIO;
  }
  return 0;
}

int tmk__rec_flush(tmk__rec_writer* w, int sync) {
  if (w->fd < 0 || w->failed) return TMK_EIO;
  if (w->len > CHUNK_HEADER) {
    int rc = write_chunk(w, TMK__CHUNK_PACKETS);
    if (rc) return rc;
  }
  if (sync && fdatasync(w->fd) != 0) {
    w->failed = 1;
    return TMK_EIO;
  }
  return 0;
}

int tmk__rec_packet(tmk__rec_writer* w, const uint8_t* packet, size_t len) {
  if (w->fd < 0 || w->failed) return TMK_EIO;
  if (reserve(w, len + 10)) return TMK_ENOMEM;
  w->len += (size_t)tmk_proto_varint_put(w->buf + w->len, len);
  memcpy(w->buf + w->len, packet, len);
  w->len += len;
  w->packets++;
  if (w->len - CHUNK_HEADER >= FLUSH_BYTES) return tmk__rec_flush(w, 0);
  return 0;
}

int tmk__rec_write_stats(tmk__rec_writer* w, const tmk__rec_stats* s) {
  int rc = tmk__rec_flush(w, 0);
  if (rc) return rc;
  put_varint(w, s->lost);
  put_varint(w, s->duplicated);
  put_varint(w, s->reordered);
  put_varint(w, s->late);
  put_varint(w, s->spoofed);
  put_varint(w, s->malformed_unparsed);
  return write_chunk(w, TMK__CHUNK_STATS);
}

int tmk__rec_close(tmk__rec_writer* w) {
  int rc = 0;
  if (w->fd >= 0) {
    rc = tmk__rec_flush(w, 0);
    if (!rc) {
      put_varint(w, w->packets);
      rc = write_chunk(w, TMK__CHUNK_END);
    }
    if (!rc && fsync(w->fd) != 0) rc = TMK_EIO;
    if (close(w->fd) != 0 && !rc) rc = TMK_EIO;
    w->fd = -1;
  }
  free(w->buf);
  w->buf = NULL;
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Reader
 * ------------------------------------------------------------------------------------------- */
typedef struct cursor {
  const uint8_t* p;
  const uint8_t* end;
  int err;
} cursor;

static uint64_t get_varint(cursor* c) {
  uint64_t v = 0;
  if (c->err) return 0;
  int n = tmk_proto_varint_get(c->p, c->end, &v);
  if (n < 0) {
    c->err = n;
    return 0;
  }
  c->p += n;
  return v;
}

static void get_str(cursor* c, char* out, size_t cap) {
  uint64_t n = get_varint(c);
  out[0] = 0;
  if (c->err) return;
  if (n > TMK_PROTO_MAX_STRING) { /* PROTOCOL.md §3.3 */
    c->err = TMK_ETOOBIG;
    return;
  }
  if (n > (uint64_t)(c->end - c->p)) {
    c->err = TMK_ETRUNC;
    return;
  }
  size_t k = n < cap - 1 ? (size_t)n : cap - 1;
  memcpy(out, c->p, k);
  out[k] = 0;
  c->p += n;
}

static int read_agent_file(const uint8_t* data, size_t len, tmk__rec_packet_fn fn, void* ud,
                           tmk__rec_read_result* res) {
  size_t off = 8;
  res->agent_file = 1;
  while (off < len) {
    uint32_t plen = 0;
    int n = tmk_proto_frame_parse(data + off, len - off, &plen);
    if (n < 0) {
      res->tail_error = n;
      break;
    }
    if (n == 0 || plen > len - off - (size_t)n) {
      res->tail_error = TMK_ETRUNC;
      break;
    }
    res->packets++;
    if (fn && fn(ud, data + off + n, plen)) {
      off += (size_t)n + plen;
      break;
    }
    off += (size_t)n + plen;
  }
  res->valid_bytes = res->tail_error ? off : len;
  res->torn_bytes = len - res->valid_bytes;
  return 0;
}

int tmk__rec_read(const uint8_t* data, size_t len, tmk__rec_packet_fn fn, void* ud,
                  tmk__rec_read_result* res) {
  memset(res, 0, sizeof *res);
  if (len < 8) return TMK_EMAGIC;
  if (memcmp(data, TMK__AGENT_FILE_MAGIC, 8) == 0) return read_agent_file(data, len, fn, ud, res);
  if (memcmp(data, TMK__REC_MAGIC, 8) != 0) return TMK_EMAGIC;
  size_t off = 8;
  res->valid_bytes = 8;
  while (off < len) {
    if (len - off < CHUNK_HEADER) {
      res->tail_error = TMK_ETRUNC;
      break;
    }
    const uint8_t* h = data + off;
    uint32_t plen = get_u32le(h);
    if (plen > TMK__REC_CHUNK_MAX || h[5] || h[6] || h[7]) {
      res->tail_error = TMK_ECORRUPT;
      break;
    }
    if (plen > len - off - CHUNK_HEADER) {
      res->tail_error = TMK_ETRUNC;
      break;
    }
    uint32_t crc = tmk__crc32c(0, h, 8);
    crc = tmk__crc32c(crc, h + CHUNK_HEADER, plen);
    if (crc != get_u32le(h + 8)) {
      res->tail_error = TMK_ECORRUPT;
      break;
    }
    cursor c = {h + CHUNK_HEADER, h + CHUNK_HEADER + plen, 0};
    int stop = 0;
    switch (h[4]) {
      case TMK__CHUNK_SESSION: { /* taken only whole: a chunk that does not parse is not used */
        tmk__rec_session se;
        se.session_id = get_varint(&c);
        se.created_unix_ns = get_varint(&c);
        get_str(&c, se.transport, sizeof se.transport);
        get_str(&c, se.source, sizeof se.source);
        get_str(&c, se.relay_version, sizeof se.relay_version);
        if (!c.err) {
          res->session = se;
          res->have_session = 1;
        }
        break;
      }
      case TMK__CHUNK_PACKETS: {
        /* every entry checked before any is used: a chunk whose content does not parse is
         * skipped whole, the packets before its bad entry too (RECORDING.md §4) */
        cursor all = c;
        while (!c.err && c.p < c.end) {
          uint64_t n = get_varint(&c);
          if (c.err) break;
          if (n == 0 || n > TMK_PROTO_MAX_PACKET || n > (uint64_t)(c.end - c.p)) {
            c.err = TMK_ECORRUPT;
            break;
          }
          c.p += n;
        }
        while (!c.err && all.p < all.end && !stop) {
          uint64_t n = get_varint(&all);
          res->packets++;
          if (fn && fn(ud, all.p, (size_t)n)) stop = 1;
          all.p += n;
        }
        break;
      }
      case TMK__CHUNK_STATS: {
        tmk__rec_stats st;
        st.lost = get_varint(&c);
        st.duplicated = get_varint(&c);
        st.reordered = get_varint(&c);
        st.late = get_varint(&c);
        st.spoofed = get_varint(&c);
        st.malformed_unparsed = get_varint(&c);
        if (!c.err) {
          res->stats = st;
          res->have_stats = 1;
        }
        break;
      }
      case TMK__CHUNK_END:
        res->clean_end = 1;
        break;
      default:
        break; /* unknown chunk types are skipped (RECORDING.md §4) */
    }
    if (c.err) { /* checksum matched but content is inconsistent: stop, never misread */
      res->tail_error = TMK_ECORRUPT;
      break;
    }
    off += CHUNK_HEADER + plen;
    res->chunks++;
    res->valid_bytes = off;
    if (stop || res->clean_end) break;
  }
  res->torn_bytes = len - res->valid_bytes;
  return 0;
}
