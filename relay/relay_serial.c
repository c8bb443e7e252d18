/* relay_serial.c — ingest from serial lines (--serial DEVICE[:BAUD]): a UART byte stream with the
 * TCP framing (docs/PROTOCOL.md §1) from a USB-UART adapter or a pty. A stream may start in the
 * middle of a packet (board reset, adapter plugged in late): the reader resynchronises on the next
 * frame whose packet header parses, counting each run of skipped bytes once as garbage. A device
 * that goes away (unplugged, emulator exited) is reopened every second. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include "relay_internal.h"

#define BUF_CAP (2u * TMK_PROTO_MAX_PACKET + 16u)
#define REOPEN_MS 1000u

typedef struct tmk__serial_port {
  tmk_relay* relay;
  char path[sizeof(((struct sockaddr_un*)0)->sun_path)];
  unsigned baud;
  int fd;                    /* -1 while closed */
  int polling;
  uv_poll_t poll;
  struct sockaddr_un addr;   /* names the source of its sessions (relay_ingest.c) */
  int in_garbage;            /* skipping bytes since the last good packet */
  uint64_t garbage_bytes;
  size_t len;
  uint8_t buf[BUF_CAP];
} tmk__serial_port;

struct tmk__serial {
  uv_timer_t reopen;
  int timer_on;
  int n;
  tmk__serial_port* ports[TMK_RELAY_MAX_SERIAL];
};

/* ---------------------------------------------------------------------------------------------
 * De-framing with resynchronisation
 * ------------------------------------------------------------------------------------------- */

/* Returns 1 when a complete, valid packet starts at p (its frame prefix), 0 when more bytes are
 * needed to tell, -1 when this byte cannot start a frame. *size gets prefix + packet bytes. */
static int frame_at(const uint8_t* p, size_t avail, size_t* size) {
  static const uint8_t magic[4] = {'T', 'M', 'K', TMK_PROTO_VERSION};
  uint32_t plen = 0;
  int n = tmk_proto_frame_parse(p, avail, &plen);
  if (n < 0) return -1;
  if (n == 0) return 0;
  size_t have = avail - (size_t)n, cmp = have < 4 ? have : 4;
  if (plen < 4 || memcmp(p + n, magic, cmp) != 0) return -1; /* not a header: do not wait */
  if (have < plen) return 0;
  tmk_proto_header h;
  if (tmk_proto_parse_header(p + n, plen, &h) < 0) return -1;
  *size = (size_t)n + plen;
  return 1;
}

static void skip_byte(tmk__serial_port* sp) {
  tmk_relay* r = sp->relay;
  sp->garbage_bytes++;
  if (sp->in_garbage) return;
  sp->in_garbage = 1;
  r->garbage++;
  tmk_relay__log_limited(&r->log, TMK_LOG_WARN, sp->path, uv_now(r->loop),
                         "serial:%s: bytes that are not a telemark packet (line noise, a reset "
                         "mid-packet, the wrong baud rate?); resynchronising", sp->path);
}

static void consume(tmk__serial_port* sp) {
  size_t off = 0;
  while (off < sp->len) {
    size_t size = 0;
    int rc = frame_at(sp->buf + off, sp->len - off, &size);
    if (rc == 0) {
      /* Waiting for more could be a false start (noise then "TMK" looks like a long frame):
       * a complete packet further on wins, and the bytes before it are noise. */
      size_t next = off + 1;
      while (next < sp->len && frame_at(sp->buf + next, sp->len - next, &size) != 1) next++;
      if (next >= sp->len) break;
      while (off < next) {
        skip_byte(sp);
        off++;
      }
      continue;
    }
    if (rc < 0) {
      skip_byte(sp);
      off++;
      continue;
    }
    sp->in_garbage = 0;
    uint32_t plen = 0;
    int n = tmk_proto_frame_parse(sp->buf + off, sp->len - off, &plen);
    tmk__ingest_packet(sp->relay, sp->buf + off + n, plen, (const struct sockaddr*)&sp->addr);
    off += size;
  }
  if (off) {
    memmove(sp->buf, sp->buf + off, sp->len - off);
    sp->len -= off;
  }
}

/* ---------------------------------------------------------------------------------------------
 * The device
 * ------------------------------------------------------------------------------------------- */
static speed_t baud_const(unsigned baud) {
  switch (baud) {
    case 9600: return B9600;
    case 19200: return B19200;
    case 38400: return B38400;
    case 57600: return B57600;
    case 115200: return B115200;
    case 230400: return B230400;
#ifdef B460800
    case 460800: return B460800;
    case 921600: return B921600;
    case 1000000: return B1000000;
    case 2000000: return B2000000;
#endif
    default: return 0;
  }
}

static void port_close(tmk__serial_port* sp);

static void on_readable(uv_poll_t* h, int status, int events) {
  tmk__serial_port* sp = h->data;
  (void)events;
  for (;;) {
    if (status < 0) break;
    ssize_t n = read(sp->fd, sp->buf + sp->len, BUF_CAP - sp->len);
    if (n > 0) {
      sp->len += (size_t)n;
      consume(sp);
      if (sp->len == BUF_CAP) { /* cannot happen: a frame is at most TMK_PROTO_MAX_PACKET + 3 */
        skip_byte(sp);
        memmove(sp->buf, sp->buf + 1, --sp->len);
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    break; /* EOF or error: the device went away (a pty's other end closed gives EIO) */
  }
  tmk_relay__log(&sp->relay->log, TMK_LOG_INFO, "serial:%s: closed; reopening every second",
                 sp->path);
  port_close(sp);
}

static int port_open(tmk__serial_port* sp, int log_errors) {
  tmk_relay* r = sp->relay;
  int fd = open(sp->path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (log_errors)
      tmk_relay__log(&r->log, TMK_LOG_ERROR, "serial:%s: cannot open: %s (is the adapter "
                     "plugged in, and may this user read it? e.g. group dialout)",
                     sp->path, strerror(errno));
    return TMK_EIO;
  }
  struct termios t;
  if (tcgetattr(fd, &t) == 0) { /* raw bytes: no echo, no CR/LF translation, no flow control */
    cfmakeraw(&t);
    t.c_cflag |= CLOCAL | CREAD;
    t.c_cflag &= ~(tcflag_t)CRTSCTS;
    t.c_iflag &= ~(tcflag_t)(IXON | IXOFF);
    if (sp->baud) {
      cfsetispeed(&t, baud_const(sp->baud));
      cfsetospeed(&t, baud_const(sp->baud));
    }
    tcsetattr(fd, TCSANOW, &t);
  }
  if (uv_poll_init(r->loop, &sp->poll, fd) != 0) {
    close(fd);
    return TMK_EIO;
  }
  sp->fd = fd;
  sp->poll.data = sp;
  sp->polling = 1;
  sp->len = 0;
  sp->in_garbage = 0;
  uv_poll_start(&sp->poll, UV_READABLE, on_readable);
  tmk_relay__log(&r->log, TMK_LOG_INFO, "serial:%s: reading%s", sp->path,
                 sp->baud ? "" : " (baud rate as set)");
  return 0;
}

static void poll_closed(uv_handle_t* h) {
  tmk__serial_port* sp = h->data;
  close(sp->fd);
  sp->fd = -1;
}

static void port_close(tmk__serial_port* sp) {
  if (!sp->polling) return;
  sp->polling = 0;
  uv_poll_stop(&sp->poll);
  uv_close((uv_handle_t*)&sp->poll, poll_closed);
}

static void on_reopen(uv_timer_t* t) {
  struct tmk__serial* s = t->data;
  for (int i = 0; i < s->n; i++)
    if (!s->ports[i]->polling && s->ports[i]->fd < 0) port_open(s->ports[i], 0);
}

/* ---------------------------------------------------------------------------------------------
 * Start / stop
 * ------------------------------------------------------------------------------------------- */
int tmk__serial_start(tmk_relay* r, const char* const* specs, int n) {
  struct tmk__serial* s = NULL;
  for (int i = 0; i < n; i++) {
    if (!specs[i]) continue;
    if (!s && !(s = r->serial = calloc(1, sizeof *s))) return TMK_ENOMEM;
    tmk__serial_port* sp = calloc(1, sizeof *sp);
    if (!sp) return TMK_ENOMEM;
    s->ports[s->n++] = sp;
    sp->relay = r;
    sp->fd = -1;
    const char* colon = strrchr(specs[i], ':');
    size_t plen = colon ? (size_t)(colon - specs[i]) : strlen(specs[i]);
    if (colon) {
      char* end = NULL;
      unsigned long b = strtoul(colon + 1, &end, 10);
      if (!*(colon + 1) || *end || !baud_const((unsigned)b)) {
        tmk_relay__log(&r->log, TMK_LOG_ERROR, "--serial %s: unsupported baud rate (9600 .. "
                       "2000000, e.g. /dev/ttyUSB0:115200)", specs[i]);
        return TMK_EINVAL;
      }
      sp->baud = (unsigned)b;
    }
    if (plen == 0 || plen >= sizeof sp->path) {
      tmk_relay__log(&r->log, TMK_LOG_ERROR, "--serial %s: give a device path", specs[i]);
      return TMK_EINVAL;
    }
    memcpy(sp->path, specs[i], plen);
    sp->addr.sun_family = AF_UNIX;
    memcpy(sp->addr.sun_path, sp->path, plen);
    int rc = port_open(sp, 1);
    if (rc < 0) return rc;
  }
  if (s) {
    uv_timer_init(r->loop, &s->reopen);
    s->reopen.data = s;
    s->timer_on = 1;
    uv_timer_start(&s->reopen, on_reopen, REOPEN_MS, REOPEN_MS);
  }
  return 0;
}

void tmk__serial_stop(tmk_relay* r) {
  struct tmk__serial* s = r->serial;
  if (!s) return;
  for (int i = 0; i < s->n; i++) port_close(s->ports[i]);
  if (s->timer_on) {
    s->timer_on = 0;
    uv_timer_stop(&s->reopen);
    uv_close((uv_handle_t*)&s->reopen, NULL);
  }
}

void tmk__serial_free(tmk_relay* r) {
  struct tmk__serial* s = r->serial;
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    if (s->ports[i]->fd >= 0) close(s->ports[i]->fd);
    free(s->ports[i]);
  }
  free(s);
  r->serial = NULL;
}
