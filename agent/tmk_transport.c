/* tmk_transport.c — how the agent's packets leave the process: UDP datagrams, TCP or a user
 * callback with varint length framing, or a "TMKFILE1" file (docs/PROTOCOL.md §1); the TCP
 * (re)connect state machine; and the handshake: HELLO out, WELCOME/REJECT/CONTROL in (§6). */
#include <string.h>

#include "tmk_agent_internal.h"

#define TCP_RETRY_MS 500u
#define TCP_CONNECT_TIMEOUT_MS 2000u
/* How long a full socket may hold up a send: the flusher thread can wait; tmk_agent_pump() runs
 * on the game's thread and must not. */
#define TCP_SEND_TIMEOUT_MS(g) ((g)->has_flusher_thread ? 1000u : 2u)
#define UDP_SEND_WAIT_MS(g) ((g)->has_flusher_thread ? 5u : 0u)

static const char* transport_name(tmk_transport t) {
  switch (t) {
    case TMK_TRANSPORT_UDP: return "udp";
    case TMK_TRANSPORT_TCP: return "tcp";
    case TMK_TRANSPORT_CALLBACK: return "callback";
    case TMK_TRANSPORT_FILE: return "file";
    default: return "auto";
  }
}

/* ============================================================================================
 * Open / close
 * ========================================================================================== */

int tmk__transport_open(void) {
  tmk__agent* g = &tmk__g;
  int rc;
  g->transport = g->desc.transport;
  g->tcp_state = 0;
  switch (g->transport) {
    case TMK_TRANSPORT_AUTO:
    case TMK_TRANSPORT_UDP:
      rc = tmk_port_udp_open(&g->sock, g->host, g->desc.relay_port);
      if (rc == 0) {
        g->transport = TMK_TRANSPORT_UDP;
        return 0;
      }
      if (g->transport == TMK_TRANSPORT_UDP) {
        tmk__log(TMK_SEV_ERROR, "telemark: cannot open a UDP socket to %s:%u: %s", g->host,
                 (unsigned)g->desc.relay_port, tmk_strerror(rc));
        return rc;
      }
      tmk__log(TMK_SEV_WARNING, "telemark: no UDP socket (%s); falling back to TCP",
               tmk_strerror(rc));
      g->transport = TMK_TRANSPORT_TCP;
      return 0; /* the flusher connects */
    case TMK_TRANSPORT_TCP: return 0;
    case TMK_TRANSPORT_CALLBACK: return 0;
    case TMK_TRANSPORT_FILE:
      g->file = tmk_port_file_create(g->desc.file_path);
      if (!g->file) {
        tmk__log(TMK_SEV_ERROR, "telemark: cannot create %s", g->desc.file_path);
        return TMK_EIO;
      }
      if (tmk_port_file_write(g->file, "TMKFILE1", 8) < 0) {
        tmk_port_file_close(g->file);
        g->file = NULL;
        return TMK_EIO;
      }
      return 0;
    default: return TMK_EINVAL;
  }
}

void tmk__transport_close(void) {
  tmk_port_close(&tmk__g.sock);
  tmk__g.tcp_state = 0;
  if (tmk__g.file) tmk_port_file_close(tmk__g.file);
  tmk__g.file = NULL;
}

static void tcp_down(const char* why) {
  tmk__agent* g = &tmk__g;
  if (g->tcp_state == 2)
    tmk__log(TMK_SEV_WARNING, "telemark: TCP connection to %s:%u lost (%s); reconnecting", g->host,
             (unsigned)g->desc.relay_port, why);
  tmk_port_close(&g->sock);
  g->tcp_state = 0;
  g->rx_len = 0;
  g->rx_skip = 0;
  g->tcp_retry_ms = tmk__ms() + TCP_RETRY_MS;
}

static void tcp_up(void) {
  tmk__agent* g = &tmk__g;
  g->tcp_state = 2;
  g->rx_len = 0;
  g->rx_skip = 0;
  g->welcomed = 0;
  g->force_meta = 1; /* a new connection may be a new relay: resend descriptors */
  tmk__log(TMK_SEV_INFO, "telemark: connected to %s:%u over TCP", g->host,
           (unsigned)g->desc.relay_port);
  tmk__send_hello();
}

/* ============================================================================================
 * Sending
 * ========================================================================================== */

static int send_all_tcp(const uint8_t* p, size_t len) {
  tmk__agent* g = &tmk__g;
  uint64_t deadline = tmk__ms() + TCP_SEND_TIMEOUT_MS(g);
  while (len > 0) {
    int n = tmk_port_send(&g->sock, p, len);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == TMK_EAGAIN && tmk__ms() < deadline) {
      if (tmk_port_wait_writable(&g->sock, 2) >= 0) continue;
    }
    tcp_down(n == TMK_EAGAIN ? "send timed out" : tmk_strerror(n));
    return n == TMK_EAGAIN ? TMK_EAGAIN : n;
  }
  return 0;
}

int tmk__transport_send(uint8_t* packet, size_t len) {
  tmk__agent* g = &tmk__g;
  uint8_t prefix[3];
  int plen, rc = 0;
  if (g->transport == TMK_TRANSPORT_UDP) {
    int n = tmk_port_send(&g->sock, packet, len);
    if (n == TMK_EAGAIN && UDP_SEND_WAIT_MS(g) &&
        tmk_port_wait_writable(&g->sock, UDP_SEND_WAIT_MS(g)) > 0)
      n = tmk_port_send(&g->sock, packet, len);
    if (n < 0) return n;
    g->bytes_sent += len;
    return 0;
  }
  /* Byte streams: varint length prefix written into the headroom before the packet. */
  plen = tmk_proto_frame_prefix(prefix, len);
  if (plen < 0) return plen;
  memcpy(packet - plen, prefix, (size_t)plen);
  switch (g->transport) {
    case TMK_TRANSPORT_TCP:
      if (g->tcp_state != 2) return TMK_ECLOSED;
      rc = send_all_tcp(packet - plen, len + (size_t)plen);
      break;
    case TMK_TRANSPORT_CALLBACK:
      rc = g->desc.write.fn(g->desc.write.user_data, packet - plen, len + (size_t)plen);
      if (rc > 0) rc = 0;
      break;
    case TMK_TRANSPORT_FILE:
      rc = g->file ? tmk_port_file_write(g->file, packet - plen, len + (size_t)plen) : TMK_EIO;
      break;
    default: rc = TMK_ESTATE;
  }
  if (rc == 0) g->bytes_sent += len + (size_t)plen;
  return rc < 0 ? rc : 0;
}

int tmk__send_hello(void) {
  tmk__agent* g = &tmk__g;
  tmk_proto_hello h;
  int n;
  memset(&h, 0, sizeof h);
  h.proto_version = TMK_PROTO_VERSION;
  h.agent_version.ptr = "0.1.0";
  h.agent_version.len = 5;
  h.program.ptr = g->program;
  h.program.len = (uint32_t)strlen(g->program);
  if (h.program.len > TMK_PROTO_MAX_STRING) h.program.len = TMK_PROTO_MAX_STRING;
  h.platform.ptr = TMK_PORT_PLATFORM;
  h.platform.len = (uint32_t)strlen(TMK_PORT_PLATFORM);
  h.arch.ptr = TMK_PORT_ARCH;
  h.arch.len = (uint32_t)strlen(TMK_PORT_ARCH);
  h.big_endian = (uint8_t)tmk_proto_host_big_endian();
  h.pointer_size = (uint8_t)sizeof(void*);
  h.timer_freq = g->freq;
  h.caps = (g->lz4_on ? TMK_CAP_LZ4 : 0u) |
           ((g->transport == TMK_TRANSPORT_UDP || g->transport == TMK_TRANSPORT_TCP)
                ? TMK_CAP_CONTROL
                : 0u) |
           (g->transport == TMK_TRANSPORT_TCP ? TMK_CAP_TCP : 0u);
  h.max_packet = g->max_packet;
  h.build.ptr = g->build_buf;
  h.build.len = (uint32_t)strlen(g->build_buf);
  h.label.ptr = g->label_buf;
  h.label.len = (uint32_t)strlen(g->label_buf);
  g->last_hello_ms = tmk__ms();
  if (g->rejected) return 0;
  if (g->transport == TMK_TRANSPORT_TCP && g->tcp_state != 2) return 0;
  n = tmk_proto_encode_hello(g->out + 3, g->out_cap - 3u, g->session_id, &h);
  if (n < 0) return n;
  return tmk__transport_send(g->out + 3, (size_t)n);
}

/* ============================================================================================
 * Receiving: WELCOME, REJECT, CONTROL (§6)
 * ========================================================================================== */

static void handle_packet(const uint8_t* p, size_t len) {
  tmk__agent* g = &tmk__g;
  tmk_proto_reader r;
  if (tmk_proto_open(&r, p, len, NULL, 0) < 0) return;
  if (r.hdr.session_id != g->session_id && r.hdr.session_id != 0) return; /* not for us */
  switch (r.hdr.type) {
    case TMK_PKT_WELCOME: {
      tmk_proto_welcome w;
      if (tmk_proto_read_welcome(&r, &w) == 0 && !g->welcomed) {
        g->welcomed = 1;
        tmk__log(TMK_SEV_INFO, "telemark: relay %.*s welcomed session %016llx",
                 (int)w.relay_version.len, w.relay_version.ptr,
                 (unsigned long long)g->session_id);
      }
      break;
    }
    case TMK_PKT_REJECT: {
      tmk_proto_reject rj;
      if (tmk_proto_read_reject(&r, &rj) == 0 && !g->rejected) {
        g->rejected = 1;
        tmk__log(TMK_SEV_ERROR, "telemark: relay rejected this agent (reason %u): %.*s",
                 (unsigned)rj.reason, (int)rj.text.len, rj.text.ptr);
      }
      break;
    }
    case TMK_PKT_CONTROL: {
      tmk_proto_control c;
      if (tmk_proto_read_control(&r, &c) != 0) break;
      if (g->has_control && c.seq <= g->control_seq) break; /* stale or repeated (§6.4) */
      g->has_control = 1;
      g->control_seq = c.seq;
      g->control_applied++;
      tmk__apply_filter(c.severity, c.verbosity);
      tmk__log(TMK_SEV_INFO, "telemark: relay set level %s, verbosity 0x%08x (change %u)",
               tmk_proto_severity_name(c.severity), (unsigned)c.verbosity, (unsigned)c.seq);
      break;
    }
    default: break;
  }
}

static void poll_udp(void) {
  tmk__agent* g = &tmk__g;
  int i;
  for (i = 0; i < 64; i++) {
    int n = tmk_port_recv(&g->sock, g->rx, g->rx_cap);
    if (n <= 0) break;
    handle_packet(g->rx, (size_t)n);
  }
}

static void poll_tcp(void) {
  tmk__agent* g = &tmk__g;
  int i;
  for (i = 0; i < 64 && g->tcp_state == 2; i++) {
    uint32_t off = 0;
    int n = tmk_port_recv(&g->sock, g->rx + g->rx_len, g->rx_cap - g->rx_len);
    if (n == TMK_EAGAIN) break;
    if (n <= 0) {
      tcp_down(n == 0 || n == TMK_ECLOSED ? "closed by the relay" : tmk_strerror(n));
      break;
    }
    g->rx_len += (uint32_t)n;
    while (off < g->rx_len) {
      uint32_t flen = 0;
      int pl;
      if (g->rx_skip) { /* the rest of a frame too large for rx: not a control packet */
        uint32_t k = g->rx_len - off < g->rx_skip ? g->rx_len - off : g->rx_skip;
        off += k;
        g->rx_skip -= k;
        continue;
      }
      pl = tmk_proto_frame_parse(g->rx + off, g->rx_len - off, &flen);
      if (pl < 0) {
        tcp_down("bad framing from the relay");
        return;
      }
      if (pl == 0) break;
      if (flen + (uint32_t)pl > g->rx_cap) {
        off += (uint32_t)pl;
        g->rx_skip = flen;
        continue;
      }
      if (g->rx_len - off < (uint32_t)pl + flen) break;
      handle_packet(g->rx + off + pl, flen);
      off += (uint32_t)pl + flen;
    }
    memmove(g->rx, g->rx + off, g->rx_len - off);
    g->rx_len -= off;
  }
}

void tmk__transport_tick(void) {
  tmk__agent* g = &tmk__g;
  uint64_t now;
  int rc;
  if (g->transport == TMK_TRANSPORT_UDP) {
    poll_udp();
    return;
  }
  if (g->transport != TMK_TRANSPORT_TCP) return;
  now = tmk__ms();
  if (g->tcp_state == 0 && now >= g->tcp_retry_ms) {
    rc = tmk_port_tcp_connect(&g->sock, g->host, g->desc.relay_port);
    if (rc == 0) {
      tcp_up();
    } else if (rc == TMK_EAGAIN) {
      g->tcp_state = 1;
      g->tcp_connect_ms = now;
    } else {
      tcp_down(tmk_strerror(rc));
    }
  }
  if (g->tcp_state == 1) {
    rc = tmk_port_tcp_poll_connect(&g->sock);
    if (rc == 0) {
      tcp_up();
    } else if (rc != TMK_EAGAIN || now - g->tcp_connect_ms > TCP_CONNECT_TIMEOUT_MS) {
      tcp_down(rc == TMK_EAGAIN ? "connect timed out" : "connect failed");
    }
  }
  if (g->tcp_state == 2) poll_tcp();
}

const char* tmk__transport_name(void) { return transport_name(tmk__g.transport); }
