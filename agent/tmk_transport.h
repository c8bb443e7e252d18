/* tmk_transport.h — the agent's transports as a module of their own: one tmk__transport owned by
 * the flusher and passed explicitly. The transport moves bytes and hands every packet it receives
 * back to its caller; it never interprets WELCOME, REJECT or CONTROL (the flusher does). */
#ifndef TMK_TRANSPORT_H
#define TMK_TRANSPORT_H

#include "telemark.h"
#include "tmk_port.h"

typedef struct tmk__transport {
  /* set by tmk__transport_open */
  tmk_transport kind; /* resolved: UDP, TCP, CALLBACK or FILE (AUTO picks UDP or TCP) */
  const char* host;
  uint16_t port;
  tmk_write_callback write;
  tmk_logger logger;
  uint32_t send_wait_ms; /* how long a full TCP socket may hold up one send; UDP waits 5 ms
                            when this is 5 or more, else never (the owner may change it) */
  /* owned state */
#if TMK_PORT_HAS_SOCKETS
  tmk_port_sock sock;
#endif
  int tcp_state; /* 0 down, 1 connecting, 2 up */
  uint64_t tcp_retry_ms;
  uint64_t tcp_connect_ms;
  void* file;
  uint8_t* rx; /* caller's buffer: one UDP datagram, or TCP bytes being de-framed */
  uint32_t rx_cap, rx_len, rx_off, rx_skip;
  uint64_t bytes_sent;
} tmk__transport;

/* Opens the transport `desc->transport` names, using rx (rx_cap bytes) as receive buffer; with
 * send_wait_ms 0 a send never waits for a full socket. Returns 0, TMK_ENOTSUP when the port
 * lacks what the transport needs, or TMK_ESOCKET / TMK_ENOTFOUND / TMK_EIO / TMK_EINVAL. */
int tmk__transport_open(tmk__transport* tr, const tmk_agent_desc* desc, const char* host,
                        uint8_t* rx, uint32_t rx_cap, uint32_t send_wait_ms);
/* Closes sockets and files (idempotent). */
void tmk__transport_close(tmk__transport* tr);
/* Drives TCP (re)connection. Returns 1 when a connection has just come up (the caller says
 * HELLO and resends metadata: the relay may be a new one), else 0. */
int tmk__transport_tick(tmk__transport* tr, uint64_t now_ms);
/* Returns the length of the next packet received from the relay, with *pkt pointing at it
 * (valid until the next call), or 0 when none is waiting. */
int tmk__transport_recv(tmk__transport* tr, const uint8_t** pkt, uint64_t now_ms);
/* Sends one packet; packet has 3 bytes of headroom before it for a stream length prefix.
 * Returns 0, or a negative TMK_E* code (TMK_ECLOSED while TCP is down). */
int tmk__transport_send(tmk__transport* tr, uint8_t* packet, size_t len, uint64_t now_ms);
/* Returns 1 when packets can go out now (TCP connected; always for the others). */
static inline int tmk__transport_ready(const tmk__transport* tr) {
  return !TMK_PORT_HAS_SOCKETS || tr->kind != TMK_TRANSPORT_TCP || tr->tcp_state == 2;
}
/* Returns "udp", "tcp", "callback" or "file": an open transport's name (for logs). */
#if TMK_PORT_HAS_SOCKETS || TMK_PORT_HAS_FILES
const char* tmk__transport_name(const tmk__transport* tr);
#else
#define tmk__transport_name(tr) ((void)(tr), "callback") /* the only one such a port opens */
#endif

/* tmk_log.c: formats "telemark: " and fmt into a line for the game's logger (silent without
 * one). (The relay has its own tmk__log; the names differ so the two never meet.) */
void tmk__agent_log(const tmk_logger* logger, int level, const char* fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif /* TMK_TRANSPORT_H */
