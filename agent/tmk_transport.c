/* tmk_transport.c — how the agent's packets leave the process: UDP datagrams, TCP or a user
 * callback with varint length framing, or a "TMKFILE1" file (docs/PROTOCOL.md §1), and the TCP
 * (re)connect state machine. Received packets are de-framed and handed back to the flusher. */
#include <string.h>

#include "tmk_proto.h"
#include "tmk_transport.h"

#define TCP_RETRY_MS 500u
#define TCP_CONNECT_TIMEOUT_MS 2000u

#if TMK_PORT_HAS_SOCKETS || TMK_PORT_HAS_FILES /* (else a macro: tmk_transport.h) */
const char* tmk__transport_name(const tmk__transport* tr) {
  switch (tr->kind) {
    case TMK_TRANSPORT_UDP: return "udp";
    case TMK_TRANSPORT_TCP: return "tcp";
    case TMK_TRANSPORT_CALLBACK: return "callback";
    case TMK_TRANSPORT_FILE: return "file";
    default: return "auto";
  }
}
#endif

/* ============================================================================================
 * Open / close
 * ========================================================================================== */

static int open_file(tmk__transport* tr, const char* path) {
#if TMK_PORT_HAS_FILES
  tr->file = tmk_port_file_create(path);
  if (!tr->file) {
    tmk__agent_log(&tr->logger, TMK_SEV_ERROR, "cannot create %s", path);
    return TMK_EIO;
  }
  if (tmk_port_file_write(tr->file, "TMKFILE1", 8) < 0) {
    tmk_port_file_close(tr->file);
    tr->file = NULL;
    return TMK_EIO;
  }
  return 0;
#else
  (void)path;
  tmk__agent_log(&tr->logger, TMK_SEV_ERROR, "this port has no files (file transport)");
  return TMK_ENOTSUP;
#endif
}

int tmk__transport_open(tmk__transport* tr, const tmk_agent_desc* desc, const char* host,
                        uint8_t* rx, uint32_t rx_cap, uint32_t send_wait_ms) {
  memset(tr, 0, sizeof *tr);
  tr->kind = desc->transport;
  tr->write = desc->write;
  tr->logger = desc->logger;
  if (TMK_PORT_HAS_SOCKETS) { /* what only sockets use */
    tr->host = host;
    tr->port = desc->relay_port;
    tr->send_wait_ms = send_wait_ms;
    tr->rx = rx;
    tr->rx_cap = rx_cap;
  }
  if (!TMK_PORT_HAS_SOCKETS && !TMK_PORT_HAS_FILES && tr->kind != TMK_TRANSPORT_CALLBACK) {
    /* (the one transport such a port has: one line for every other) */
    tmk__agent_log(&tr->logger, TMK_SEV_ERROR,
                   "this port has neither sockets nor files; use the callback transport");
    return TMK_ENOTSUP;
  }
  switch (tr->kind) {
    case TMK_TRANSPORT_AUTO:
    case TMK_TRANSPORT_UDP:
    case TMK_TRANSPORT_TCP: {
#if TMK_PORT_HAS_SOCKETS
      int rc;
      if (tr->kind == TMK_TRANSPORT_TCP) return 0; /* tmk__transport_tick connects */
      rc = tmk_port_udp_open(&tr->sock, host, tr->port);
      if (rc == 0) {
        tr->kind = TMK_TRANSPORT_UDP;
        return 0;
      }
      if (tr->kind == TMK_TRANSPORT_UDP) {
        tmk__agent_log(&tr->logger, TMK_SEV_ERROR, "cannot open a UDP socket to %s:%u: %s",
                 host, (unsigned)tr->port, tmk_strerror(rc));
        return rc;
      }
      tmk__agent_log(&tr->logger, TMK_SEV_WARNING, "no UDP socket (%s); falling back to TCP",
               tmk_strerror(rc));
      tr->kind = TMK_TRANSPORT_TCP;
      return 0;
#else
      tmk__agent_log(&tr->logger, TMK_SEV_ERROR,
                     TMK_PORT_HAS_FILES
                         ? "this port has no sockets; use the callback or file transport"
                         : "this port has no sockets; use the callback transport");
      return TMK_ENOTSUP;
#endif
    }
    case TMK_TRANSPORT_CALLBACK: return tr->write.fn ? 0 : TMK_EINVAL;
    case TMK_TRANSPORT_FILE: return open_file(tr, desc->file_path);
    default: return TMK_EINVAL;
  }
}

void tmk__transport_close(tmk__transport* tr) {
#if TMK_PORT_HAS_SOCKETS
  tmk_port_close(&tr->sock);
#endif
  tr->tcp_state = 0;
#if TMK_PORT_HAS_FILES
  if (tr->file) tmk_port_file_close(tr->file);
#endif
  tr->file = NULL;
}

/* ============================================================================================
 * TCP connection state
 * ========================================================================================== */

#if TMK_PORT_HAS_SOCKETS
static void tcp_down(tmk__transport* tr, const char* why, uint64_t now_ms) {
  if (tr->tcp_state == 2)
    tmk__agent_log(&tr->logger, TMK_SEV_WARNING,
             "TCP connection to %s:%u lost (%s); reconnecting", tr->host,
             (unsigned)tr->port, why);
  tmk_port_close(&tr->sock);
  tr->tcp_state = 0;
  tr->rx_len = tr->rx_off = tr->rx_skip = 0;
  tr->tcp_retry_ms = now_ms + TCP_RETRY_MS;
}

static int tcp_up(tmk__transport* tr) {
  tr->tcp_state = 2;
  tr->rx_len = tr->rx_off = tr->rx_skip = 0;
  tmk__agent_log(&tr->logger, TMK_SEV_INFO, "connected to %s:%u over TCP", tr->host,
           (unsigned)tr->port);
  return 1;
}
#endif

int tmk__transport_tick(tmk__transport* tr, uint64_t now_ms) {
#if TMK_PORT_HAS_SOCKETS
  int rc;
  if (tr->kind != TMK_TRANSPORT_TCP) return 0;
  if (tr->tcp_state == 0 && now_ms >= tr->tcp_retry_ms) {
    rc = tmk_port_tcp_connect(&tr->sock, tr->host, tr->port);
    if (rc == 0) return tcp_up(tr);
    if (rc != TMK_EAGAIN) {
      tcp_down(tr, tmk_strerror(rc), now_ms);
      return 0;
    }
    tr->tcp_state = 1;
    tr->tcp_connect_ms = now_ms;
  }
  if (tr->tcp_state == 1) {
    rc = tmk_port_tcp_poll_connect(&tr->sock);
    if (rc == 0) return tcp_up(tr);
    if (rc != TMK_EAGAIN || now_ms - tr->tcp_connect_ms > TCP_CONNECT_TIMEOUT_MS)
      tcp_down(tr, rc == TMK_EAGAIN ? "connect timed out" : "connect failed", now_ms);
  }
#else
  (void)tr, (void)now_ms;
#endif
  return 0;
}

/* ============================================================================================
 * Sending
 * ========================================================================================== */

#if TMK_PORT_HAS_SOCKETS
static int send_all_tcp(tmk__transport* tr, const uint8_t* p, size_t len, uint64_t now_ms) {
  uint32_t waited = 0; /* ms spent waiting for room, in 2 ms steps */
  while (len > 0) {
    int n = tmk_port_send(&tr->sock, p, len);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == TMK_EAGAIN && waited < tr->send_wait_ms) {
      waited += 2;
      if (tmk_port_wait_writable(&tr->sock, 2) >= 0) continue;
    }
    tcp_down(tr, n == TMK_EAGAIN ? "send timed out" : tmk_strerror(n), now_ms);
    return n;
  }
  return 0;
}
#endif

int tmk__transport_send(tmk__transport* tr, uint8_t* packet, size_t len, uint64_t now_ms) {
  int plen, rc;
  (void)now_ms;
#if TMK_PORT_HAS_SOCKETS
  if (tr->kind == TMK_TRANSPORT_UDP) {
    int n = tmk_port_send(&tr->sock, packet, len);
    uint32_t wait = tr->send_wait_ms >= 5u ? 5u : 0u; /* a datagram waits 5 ms at most */
    if (n == TMK_EAGAIN && wait && tmk_port_wait_writable(&tr->sock, wait) > 0)
      n = tmk_port_send(&tr->sock, packet, len);
    if (n < 0) return n;
    tr->bytes_sent += len;
    return 0;
  }
#endif
  /* Byte streams: varint length prefix written into the headroom before the packet. */
  if (len == 0 || len > TMK_PROTO_MAX_PACKET) return TMK_ETOOBIG; /* (tmk_proto_frame_prefix) */
  plen = 1 + (len >= 0x80u) + (len >= 0x4000u); /* its varint's size: len < 2^21 */
  tmk_proto_varint_put(packet - plen, len);
  /* (a port with neither sockets nor files opens only the callback transport) */
  switch (TMK_PORT_HAS_SOCKETS || TMK_PORT_HAS_FILES ? tr->kind : TMK_TRANSPORT_CALLBACK) {
#if TMK_PORT_HAS_SOCKETS
    case TMK_TRANSPORT_TCP:
      if (tr->tcp_state != 2) return TMK_ECLOSED;
      rc = send_all_tcp(tr, packet - plen, len + (size_t)plen, now_ms);
      break;
#endif
    case TMK_TRANSPORT_CALLBACK:
      rc = tr->write.fn(tr->write.user_data, packet - plen, len + (size_t)plen);
      if (rc > 0) rc = 0;
      break;
#if TMK_PORT_HAS_FILES
    case TMK_TRANSPORT_FILE:
      rc = tr->file ? tmk_port_file_write(tr->file, packet - plen, len + (size_t)plen) : TMK_EIO;
      break;
#endif
    default: rc = TMK_ESTATE;
  }
  if (rc < 0) return rc;
  tr->bytes_sent += len + (size_t)plen;
  return 0;
}

/* ============================================================================================
 * Receiving (§6): packets are handed back whole; TCP frames are cut out of the byte stream
 * ========================================================================================== */

#if TMK_PORT_HAS_SOCKETS
/* Returns the next whole frame already in rx (length, *pkt set), 0 when more bytes are needed,
 * or -1 after bad framing (the connection is dropped). */
static int next_frame(tmk__transport* tr, const uint8_t** pkt, uint64_t now_ms) {
  while (tr->rx_off < tr->rx_len) {
    uint32_t avail = tr->rx_len - tr->rx_off, flen = 0;
    int pl;
    if (tr->rx_skip) { /* the rest of a frame too large for rx: not a control packet */
      uint32_t k = avail < tr->rx_skip ? avail : tr->rx_skip;
      tr->rx_off += k;
      tr->rx_skip -= k;
      continue;
    }
    pl = tmk_proto_frame_parse(tr->rx + tr->rx_off, avail, &flen);
    if (pl < 0) {
      tcp_down(tr, "bad framing from the relay", now_ms);
      return -1;
    }
    if (pl == 0) break;
    if (flen + (uint32_t)pl > tr->rx_cap) {
      tr->rx_off += (uint32_t)pl;
      tr->rx_skip = flen;
      continue;
    }
    if (avail < (uint32_t)pl + flen) break;
    *pkt = tr->rx + tr->rx_off + pl;
    tr->rx_off += (uint32_t)pl + flen;
    return (int)flen;
  }
  return 0;
}

static int recv_tcp(tmk__transport* tr, const uint8_t** pkt, uint64_t now_ms) {
  int i;
  for (i = 0; i < 64 && tr->tcp_state == 2; i++) {
    int n = next_frame(tr, pkt, now_ms);
    if (n != 0) return n > 0 ? n : 0;
    /* keep the partial frame, make room behind it */
    memmove(tr->rx, tr->rx + tr->rx_off, tr->rx_len - tr->rx_off);
    tr->rx_len -= tr->rx_off;
    tr->rx_off = 0;
    n = tmk_port_recv(&tr->sock, tr->rx + tr->rx_len, tr->rx_cap - tr->rx_len);
    if (n == TMK_EAGAIN) return 0;
    if (n <= 0) {
      tcp_down(tr, n == 0 || n == TMK_ECLOSED ? "closed by the relay" : tmk_strerror(n), now_ms);
      return 0;
    }
    tr->rx_len += (uint32_t)n;
  }
  return 0;
}
#endif

int tmk__transport_recv(tmk__transport* tr, const uint8_t** pkt, uint64_t now_ms) {
#if TMK_PORT_HAS_SOCKETS
  if (tr->kind == TMK_TRANSPORT_UDP) {
    int n = tmk_port_recv(&tr->sock, tr->rx, tr->rx_cap);
    if (n <= 0) return 0;
    *pkt = tr->rx;
    return n;
  }
  if (tr->kind == TMK_TRANSPORT_TCP) return recv_tcp(tr, pkt, now_ms);
#else
  (void)tr, (void)pkt;
#endif
  (void)now_ms;
  return 0;
}
