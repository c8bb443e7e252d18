/* relay_ingest.c — ingest on the libuv loop: UDP and TCP on one port, the handshake (WELCOME /
 * REJECT, logged once), sessions by agent session id (a UDP session that moves to TCP keeps its
 * id), the reorder buffer in front of the store, and bad-input accounting with bounded memory. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "relay_internal.h"

/* UDP receive buffer asked of the kernel: about 14 k full packets, a second of a tight loop. */
#define RCVBUF_WANTED (32 * 1024 * 1024)

/* ---------------------------------------------------------------------------------------------
 * Addresses
 * ------------------------------------------------------------------------------------------- */
/* Formats a sockaddr as "ip:port". */
static void addr_str(const struct sockaddr* sa, char* out, size_t cap) {
  char ip[64] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in* a = (const struct sockaddr_in*)(const void*)sa;
    uv_ip4_name(a, ip, sizeof ip);
    port = ntohs(a->sin_port);
    snprintf(out, cap, "%s:%d", ip, port);
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6* a = (const struct sockaddr_in6*)(const void*)sa;
    uv_ip6_name(a, ip, sizeof ip);
    port = ntohs(a->sin6_port);
    snprintf(out, cap, "[%s]:%d", ip, port);
  } else if (sa->sa_family == AF_UNIX) { /* a serial line (relay_serial.c): its device */
    snprintf(out, cap, "serial:%.56s", ((const struct sockaddr_un*)(const void*)sa)->sun_path);
  } else {
    snprintf(out, cap, "?");
  }
}

static void ip_str(const struct sockaddr* sa, char* out, size_t cap) {
  if (sa->sa_family == AF_INET) uv_ip4_name((const struct sockaddr_in*)(const void*)sa, out, cap);
  else if (sa->sa_family == AF_INET6)
    uv_ip6_name((const struct sockaddr_in6*)(const void*)sa, out, cap);
  else addr_str(sa, out, cap);
}

/* 1 if both addresses have the same IP (ports ignored). */
int tmk__same_ip(const struct sockaddr* a, const struct sockaddr* b) {
  if (a->sa_family != b->sa_family) return 0;
  if (a->sa_family == AF_INET)
    return memcmp(&((const struct sockaddr_in*)(const void*)a)->sin_addr,
                  &((const struct sockaddr_in*)(const void*)b)->sin_addr, 4) == 0;
  if (a->sa_family == AF_INET6)
    return memcmp(&((const struct sockaddr_in6*)(const void*)a)->sin6_addr,
                  &((const struct sockaddr_in6*)(const void*)b)->sin6_addr, 16) == 0;
  if (a->sa_family == AF_UNIX)
    return strcmp(((const struct sockaddr_un*)(const void*)a)->sun_path,
                  ((const struct sockaddr_un*)(const void*)b)->sun_path) == 0;
  return 0;
}

static size_t addr_len(const struct sockaddr* sa) {
  if (sa->sa_family == AF_UNIX) return sizeof(struct sockaddr_un);
  return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* The sender of the packet being handled; its "ip:port" text is only formatted when a log line
 * or a new session needs it (formatting per packet would cost more than decoding it). */
typedef struct src_ctx {
  const struct sockaddr* addr;
  tmk__conn* conn;
  char str[64];
  int have;
} src_ctx;

static const char* src_name(src_ctx* sc) {
  if (!sc->have) {
    if (sc->conn) snprintf(sc->str, sizeof sc->str, "%s", sc->conn->peer_str);
    else addr_str(sc->addr, sc->str, sizeof sc->str);
    sc->have = 1;
  }
  return sc->str;
}

/* ---------------------------------------------------------------------------------------------
 * Sending (replies and CONTROL)
 * ------------------------------------------------------------------------------------------- */
typedef struct write_req {
  uv_write_t req;
  uint8_t data[];
} write_req;

static void write_done(uv_write_t* req, int status) {
  (void)status;
  free(req);
}

static int send_tcp(tmk__conn* c, const uint8_t* packet, size_t len) {
  if (c->closing) return TMK_ESTATE;
  /* An agent that does not read its socket cannot make us queue without bound. */
  if (uv_stream_get_write_queue_size((uv_stream_t*)&c->tcp) > 256 * 1024) return TMK_EAGAIN;
  uint8_t prefix[3];
  int n = tmk_proto_frame_prefix(prefix, len);
  if (n < 0) return n;
  write_req* w = malloc(sizeof *w + (size_t)n + len);
  if (!w) return TMK_ENOMEM;
  memcpy(w->data, prefix, (size_t)n);
  memcpy(w->data + n, packet, len);
  uv_buf_t b = uv_buf_init((char*)w->data, (unsigned)((size_t)n + len));
  if (uv_write(&w->req, (uv_stream_t*)&c->tcp, &b, 1, write_done) != 0) {
    free(w);
    return TMK_ESOCKET;
  }
  return 0;
}

static int send_udp(tmk_relay* r, const struct sockaddr* to, const uint8_t* packet, size_t len) {
  if (to->sa_family == AF_UNIX) return TMK_ESTATE; /* a serial line: nothing goes back */
  uv_buf_t b = uv_buf_init((char*)(uintptr_t)packet, (unsigned)len);
  int rc = uv_udp_try_send(&r->udp, &b, 1, to);
  return rc < 0 ? TMK_ESOCKET : 0;
}

static int reply(tmk_relay* r, tmk__conn* c, const struct sockaddr* to, const uint8_t* packet,
                 size_t len) {
  return c ? send_tcp(c, packet, len) : send_udp(r, to, packet, len);
}

int tmk__ingest_send(tmk_relay* r, tmk__session* s, const uint8_t* packet, size_t len) {
  if (s->conn) return send_tcp(s->conn, packet, len);
  if (!s->has_addr || !r->udp_open) return TMK_ESTATE;
  return send_udp(r, (const struct sockaddr*)&s->addr, packet, len);
}

/* A REJECT is ten times the size of the smallest HELLO that earns one, and UDP sources can be
 * forged: unthrottled, the relay would reflect floods at a victim (issue 15 item 11). An agent
 * repeats its HELLO every 2 s until answered, so one REJECT per host per second loses nothing. */
static int reject_allowed(tmk_relay* r, const struct sockaddr* to, uint64_t now) {
  uint32_t key = 2166136261u;
  const uint8_t* ip = NULL;
  size_t n = 0;
  if (to->sa_family == AF_INET) {
    ip = (const uint8_t*)&((const struct sockaddr_in*)(const void*)to)->sin_addr;
    n = 4;
  } else if (to->sa_family == AF_INET6) {
    ip = (const uint8_t*)&((const struct sockaddr_in6*)(const void*)to)->sin6_addr;
    n = 16;
  }
  for (size_t i = 0; i < n; i++) key = (key ^ ip[i]) * 16777619u;
  key |= 1;
  uint32_t slot = key & 255;
  if (r->reject_key[slot] == key && now - r->reject_ms[slot] < TMK__REJECT_MS) return 0;
  if (now - r->reject_sec_ms >= 1000) {
    r->reject_sec_ms = now;
    r->reject_sec_n = 0;
  }
  if (r->reject_sec_n >= TMK__REJECTS_PER_S) return 0;
  r->reject_sec_n++;
  r->reject_key[slot] = key;
  r->reject_ms[slot] = now;
  return 1;
}

/* key: the MAC a keyed agent needs to believe the REJECT (§2.1), NULL for an unkeyed one. */
static void send_reject(tmk_relay* r, tmk__conn* c, const struct sockaddr* to, uint64_t sid,
                        uint32_t reason, const char* text, const uint8_t* key) {
  if (!c && !reject_allowed(r, to, uv_now(r->loop))) return; /* TCP cannot be forged */
  uint8_t out[512];
  tmk_proto_reject rj;
  rj.reason = reason;
  rj.text.ptr = text;
  rj.text.len = (uint32_t)strlen(text);
  int n = tmk_proto_encode_reject(out, sizeof out - TMK_PROTO_MAC_LEN, sid, &rj);
  if (n > 0 && key) n = tmk_proto_mac_seal(out, (size_t)n, sizeof out, key);
  if (n > 0) reply(r, c, to, out, (size_t)n);
}

/* ---------------------------------------------------------------------------------------------
 * Packets
 * ------------------------------------------------------------------------------------------- */

/* A rejected agent keeps sending HELLO (§6) when our REJECT does not reach it; the REJECT goes
 * out every time, the log line only the first time per session id (bounded memory). */
static int first_reject(uint64_t sid) {
  static uint64_t seen[256];
  static unsigned next;
  for (unsigned i = 0; i < 256; i++)
    if (seen[i] == sid && sid) return 0;
  seen[next++ % 256] = sid;
  return 1;
}
static void deliver(void* ud, const uint8_t* p, size_t len, uint64_t seq) {
  (void)seq;
  tmk__session* s = ud;
  tmk__session_apply(s, p, len, s->relay->scratch);
}

/* Decodes a DATA packet completely without storing it: a new session is only created for a
 * packet that is valid all the way through, so garbage with random session ids costs nothing. */
static int validate_data(tmk_relay* r, const uint8_t* p, size_t len) {
  tmk_proto_reader rd;
  int rc = tmk_proto_open(&rd, p, len, r->scratch, TMK_PROTO_MAX_BODY);
  if (rc < 0) return rc;
  tmk_proto_record rec;
  while ((rc = tmk_proto_next(&rd, &rec)) > 0) {
  }
  return rc;
}

/* Sessions held for a host, ended ones included: a host that churns DATA+BYE must not fill the
 * registry and push out another host's sessions (issue 15 item 8). */
static uint32_t sessions_from_ip(tmk_relay* r, const struct sockaddr* src) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < r->nsessions; i++) {
    tmk__session* s = r->sessions[i];
    if (s->replay) continue;
    const struct sockaddr* a =
        s->conn ? (const struct sockaddr*)&s->conn->peer : (const struct sockaddr*)&s->addr;
    if ((s->has_addr || s->conn) && tmk__same_ip(a, src)) n++;
  }
  return n;
}

static uint32_t per_source_limit(const tmk_relay* r) {
  uint32_t lim = r->cfg.max_sessions / 2;
  return lim < 1 ? 1 : lim;
}

/* Finds or creates the session for a packet from `src` (over `c` when TCP). */
static tmk__session* session_for(tmk_relay* r, uint64_t sid, const struct sockaddr* src,
                                 tmk__conn* c, src_ctx* sc, uint64_t now) {
  tmk__session* s = tmk__session_find_sid(r, sid);
  if (s) return s;
  if (sessions_from_ip(r, src) >= per_source_limit(r) && tmk__session_evict(r, src) != 0) {
    r->rejected_sessions++;
    tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now,
                     "%s: refused new session %016llx: this source already has %u sessions "
                     "(limit is half of --max-sessions)",
                     src_name(sc), (unsigned long long)sid, per_source_limit(r));
    return NULL;
  }
  s = tmk__session_new(r, sid, NULL, 0);
  if (!s) return NULL;
  if (tmk__session_register(r, s) != 0) {
    tmk__session_unref(s);
    r->rejected_sessions++;
    tmk_relay__log_limited(&r->log, TMK_LOG_WARN, "max-sessions", now,
                     "refused new session %016llx from %s: %u sessions are live (--max-sessions)",
                     (unsigned long long)sid, src_name(sc), r->cfg.max_sessions);
    return NULL;
  }
  memcpy(&s->addr, src, addr_len(src));
  s->has_addr = 1;
  pthread_mutex_lock(&s->mu);
  snprintf(s->info.transport, sizeof s->info.transport, "%s",
           c ? "tcp" : src->sa_family == AF_UNIX ? "serial" : "udp");
  snprintf(s->info.source, sizeof s->info.source, "%s", src_name(sc));
  pthread_mutex_unlock(&s->mu);
  if (r->cfg.record_all) {
    char err[256];
    if (tmk__session_record_start(s, NULL, 0, err, sizeof err) != 0)
      tmk_relay__log(&r->log, TMK_LOG_ERROR, "session %s: %s", s->id, err);
  }
  return s;
}

/* Binds a session to where its packets come from. Returns 0 if the packet may be used. */
static int bind_source(tmk__session* s, const struct sockaddr* src, tmk__conn* c,
                       src_ctx* sc, int is_hello) {
  const struct sockaddr* bound =
      s->conn ? (const struct sockaddr*)&s->conn->peer : (const struct sockaddr*)&s->addr;
  if (c) {
    if (s->conn == c) return 0;
    /* A session moves to TCP (or reconnects) only with a HELLO from the same host, and takes
     * over a TCP connection only once that one has gone quiet (a dead link the kernel has not
     * noticed yet): a live link cannot be hijacked (issue 15 item 3). */
    if (!is_hello || !tmk__same_ip(bound, src)) return -1;
    if (c->session && c->session != s) return -1;
    if (s->conn && !s->conn->closing &&
        uv_now(c->relay->loop) - s->conn->last_packet_ms < TMK__TCP_TAKEOVER_MS)
      return -1;
    /* The old connection no longer owns the session: closing it later must not touch the
     * session, which may be gone by then (issue 15 item 2). */
    if (s->conn) s->conn->session = NULL;
    s->conn = c;
    c->session = s;
    memcpy(&s->addr, src, addr_len(src));
    s->has_addr = 1;
    pthread_mutex_lock(&s->mu);
    snprintf(s->info.transport, sizeof s->info.transport, "tcp");
    snprintf(s->info.source, sizeof s->info.source, "%s", src_name(sc));
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  /* UDP: the address (and port: where CONTROL goes) is the one of the session's first packet,
   * then of its first HELLO (handle_hello); later packets only have to come from that host. */
  if (!tmk__same_ip(bound, src)) return -1;
  return 0;
}

/* The target facts of a HELLO, hashed (FNV-1a): a session's later HELLOs must repeat them. */
static uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const uint8_t* b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}
static uint64_t hello_facts(const tmk_proto_hello* h) {
  uint64_t x = 0xcbf29ce484222325ull;
  const tmk_proto_str* strs[] = {&h->program, &h->platform, &h->arch, &h->agent_version};
  for (int i = 0; i < 4; i++) {
    x = fnv(x, &strs[i]->len, sizeof strs[i]->len);
    x = fnv(x, strs[i]->ptr, strs[i]->len);
  }
  uint64_t nums[3] = {h->big_endian, h->pointer_size, h->timer_freq};
  return fnv(x, nums, sizeof nums);
}

static void mark_live(tmk__session* s, uint64_t now) {
  s->last_packet_ms = now;
  if (s->ended || !s->info.live) {
    s->ended = 0;
    pthread_mutex_lock(&s->mu);
    s->info.live = 1;
    pthread_mutex_unlock(&s->mu);
  }
}

/* From the first authenticated packet on, a session is keyed: every packet of it must carry a
 * MAC by this key, and what the relay sends it carries one (§2.1). */
static void make_keyed(tmk__session* s, const uint8_t* key) {
  if (!key || s->keyed) return;
  s->keyed = 1;
  memcpy(s->key, key, sizeof s->key);
  s->ro.forward_only = 1;
}

/* ---------------------------------------------------------------------------------------------
 * Authenticated ingest (§2.1; which key applies: relay_auth.c)
 * ------------------------------------------------------------------------------------------- */
static const uint8_t auth_drop_mark;
#define AUTH_DROP (&auth_drop_mark)

/* Decides whether a packet may be used. Returns the key whose valid MAC it carries, NULL for an
 * unkeyed packet that may be used (no key applies to it), or AUTH_DROP for one that must not be
 * used (counted in unauthenticated or bad_mac, logged once per source per interval). A packet
 * that is malformed otherwise is left to the handlers (NULL) and counted there. */
static const uint8_t* authenticate(tmk_relay* r, const uint8_t* p, size_t len,
                                   const tmk_proto_header* h, const struct sockaddr* src,
                                   tmk__conn* c, src_ctx* sc, uint64_t now) {
  int macd = (h->flags & TMK_PKT_F_MAC) != 0;
  if (!macd && !r->cfg.nkeys) return NULL; /* no keys: unkeyed ingest as ever */
  tmk__session* s = tmk__session_find_sid(r, h->session_id);
  const uint8_t* k = NULL;
  const char* why;
  int bad_mac = 0;
  tmk_proto_str prog = {"", 0};
  if (s && s->keyed) { /* a keyed session: its key, always */
    if (macd && tmk_proto_mac_check(p, len, s->key) == 0) {
      tmk_proto_reader rd;
      tmk_proto_hello hello;
      if (h->type != TMK_PKT_HELLO || tmk_proto_open(&rd, p, len, r->scratch, TMK_PROTO_MAX_BODY) != 0 ||
          tmk_proto_read_hello(&rd, &hello) != 0)
        return s->key;
      /* a session keyed by its DATA (no HELLO yet): its program must be one of that key */
      k = tmk__auth_key_for(r, hello.program.ptr, hello.program.len);
      if (k && memcmp(k, s->key, sizeof s->key) == 0) return s->key;
      why = "a HELLO whose program has another key than its session";
    } else {
      why = macd ? "a MAC by another key than its session's" : "no MAC for a keyed session";
    }
    bad_mac = macd;
  } else if (h->type == TMK_PKT_HELLO) { /* the key of its program */
    tmk_proto_reader rd;
    tmk_proto_hello hello;
    if (tmk_proto_open(&rd, p, len, r->scratch, TMK_PROTO_MAX_BODY) != 0 ||
        tmk_proto_read_hello(&rd, &hello) != 0)
      return NULL; /* handle_hello counts and answers it */
    prog = hello.program;
    k = tmk__auth_key_for(r, prog.ptr, prog.len);
    if (!k && !macd) return NULL; /* a program no key names */
    if (k && macd && tmk_proto_mac_check(p, len, k) == 0) return k;
    bad_mac = macd;
    why = !k ? "a MAC, but no --key names its program" :
          macd ? "a MAC by another key than its program's" : "no MAC for a keyed program";
  } else if (macd) { /* DATA or BYE of a session without a keyed HELLO */
    if (!s && h->type == TMK_PKT_DATA && validate_data(r, p, len) < 0)
      return NULL; /* garbage first: no key is tried for it */
    if (s && s->has_facts) {
      why = "a MAC, but its session's HELLO had none";
    } else {
      k = tmk__auth_find_key(r, p, len); /* e.g. after a relay restart, before the next HELLO */
      if (k) return k;
      why = "a MAC that matches no key";
    }
    bad_mac = 1;
  } else { /* unkeyed DATA or BYE of a session without a keyed HELLO */
    if (s || !tmk__auth_all_keyed(r)) return NULL; /* its program may be one no key names */
    why = "no MAC, and every program is keyed (--key with *)";
  }
  if (bad_mac) r->bad_mac++;
  else r->unauthenticated++;
  tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now,
                         "%s: %s for session %016llx with %s; dropped (--key)", src_name(sc),
                         tmk_proto_packet_type_name(h->type), (unsigned long long)h->session_id,
                         why);
  if (h->type == TMK_PKT_HELLO && k && !macd) {
    /* an agent without its key learns why nothing works (a keyed agent ignores it: no MAC) */
    char text[256];
    snprintf(text, sizeof text,
             "telemark-relay requires a key for program '%.*s': give the agent desc.key "
             "(docs/SECURITY.md)", (int)(prog.len > 128 ? 128 : prog.len), prog.ptr);
    send_reject(r, c, src, h->session_id, TMK_REJECT_OTHER, text, NULL);
  }
  return AUTH_DROP;
}

static void handle_hello(tmk_relay* r, const uint8_t* p, size_t len, const tmk_proto_header* h,
                         const struct sockaddr* src, tmk__conn* c, src_ctx* sc,
                         uint64_t now, const uint8_t* key) {
  tmk_proto_reader rd;
  tmk_proto_hello hello;
  int rc = tmk_proto_open(&rd, p, len, r->scratch, TMK_PROTO_MAX_BODY);
  if (rc == 0) rc = tmk_proto_read_hello(&rd, &hello);
  if (rc < 0) {
    r->garbage++;
    tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now, "%s: bad HELLO for session %016llx (%s)",
                     src_name(sc), (unsigned long long)h->session_id, tmk_strerror(rc));
    send_reject(r, c, src, h->session_id, TMK_REJECT_BAD_HELLO,
                "telemark-relay: malformed HELLO; update the agent to match the relay", key);
    return;
  }
  if (hello.proto_version != TMK_PROTO_VERSION) {
    char text[200];
    snprintf(text, sizeof text,
             "telemark-relay %s speaks protocol %d, the agent speaks %u: rebuild the agent and "
             "relay from the same telemark version",
             TMK_RELAY_VERSION, TMK_PROTO_VERSION, hello.proto_version);
    if (first_reject(h->session_id))
      tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now, "%s: REJECT session %016llx: %s",
                       src_name(sc), (unsigned long long)h->session_id, text);
    send_reject(r, c, src, h->session_id, TMK_REJECT_VERSION, text, key);
    return;
  }
  tmk__session* s = session_for(r, h->session_id, src, c, sc, now);
  if (!s) {
    send_reject(r, c, src, h->session_id, TMK_REJECT_FULL,
                "telemark-relay is full (--max-sessions); stop other targets or raise the limit",
                key);
    return;
  }
  int was_tcp = s->conn != NULL;
  int first = !s->has_facts;
  uint64_t facts = hello_facts(&hello);
  if (s->has_facts && facts != s->facts) {
    /* Facts are fixed by the first HELLO: a later one that contradicts it (another program,
     * a timer frequency of 1) is not from this session's agent (issue 15 item 3). */
    s->spoofed++;
    tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now,
                     "%s: HELLO for session %016llx contradicts its first HELLO (program "
                     "'%.*s'); dropped", src_name(sc), (unsigned long long)h->session_id,
                     (int)hello.program.len, hello.program.ptr);
    return;
  }
  if (bind_source(s, src, c, sc, 1) != 0) {
    s->spoofed++;
    tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now,
                     "%s: HELLO for session %016llx, which belongs to another address; dropped",
                     src_name(sc), (unsigned long long)h->session_id);
    return;
  }
  make_keyed(s, key);
  if (first) {
    s->has_facts = 1;
    s->facts = facts;
    if (!s->conn) memcpy(&s->addr, src, addr_len(src)); /* CONTROL goes here from now on */
  }
  mark_live(s, now);
  tmk__session_apply(s, p, len, r->scratch);
  if (first || (!was_tcp && s->conn)) {
    tmk_relay__log(&r->log, TMK_LOG_INFO,
             "session %s: WELCOME %.*s (%.*s/%.*s, agent %.*s, %llu Hz) over %s from %s", s->id,
             (int)hello.program.len, hello.program.ptr, (int)hello.platform.len,
             hello.platform.ptr, (int)hello.arch.len, hello.arch.ptr,
             (int)hello.agent_version.len, hello.agent_version.ptr,
             (unsigned long long)hello.timer_freq, s->conn ? "tcp" : "udp", src_name(sc));
  }
  uint8_t out[128];
  tmk_proto_welcome w;
  w.proto_version = TMK_PROTO_VERSION;
  w.relay_version.ptr = TMK_RELAY_VERSION;
  w.relay_version.len = (uint32_t)strlen(TMK_RELAY_VERSION);
  int n = tmk_proto_encode_welcome(out, sizeof out - TMK_PROTO_MAC_LEN, h->session_id, &w);
  if (n > 0) n = tmk__auth_seal(s, out, (size_t)n, sizeof out);
  if (n > 0) reply(r, c, src, out, (size_t)n);
}

static void handle_data(tmk_relay* r, const uint8_t* p, size_t len, const tmk_proto_header* h,
                        const struct sockaddr* src, tmk__conn* c, src_ctx* sc,
                        uint64_t now, const uint8_t* key) {
  tmk__session* s = tmk__session_find_sid(r, h->session_id);
  if (!s) {
    int rc = validate_data(r, p, len);
    if (rc < 0) {
      r->garbage++;
      tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now,
                       "%s: undecodable DATA for unknown session %016llx (%s); dropped", src_name(sc),
                       (unsigned long long)h->session_id, tmk_strerror(rc));
      return;
    }
    s = session_for(r, h->session_id, src, c, sc, now);
    if (!s) return;
    if (c && !c->session) {
      c->session = s;
      s->conn = c;
    }
    tmk_relay__log(&r->log, TMK_LOG_INFO, "session %s: %sdata over %s from %s before any HELLO (target unknown)",
             s->id, key ? "keyed " : "", c ? "tcp" : "udp", src_name(sc));
  } else if (bind_source(s, src, c, sc, 0) != 0) {
    s->spoofed++;
    tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now,
                     "%s: DATA for session %016llx, which belongs to another address; dropped",
                     src_name(sc), (unsigned long long)h->session_id);
    return;
  }
  make_keyed(s, key);
  mark_live(s, now);
  if (tmk__reorder_push(&s->ro, h->seq, p, len, now, deliver, s) == TMK_ENOMEM)
    tmk_relay__log_limited(&r->log, TMK_LOG_ERROR, "oom", now, "out of memory holding packets for reordering");
  /* counters reach the API on the next tick (tmk__ingest_tick) */
}

/* One packet from a UDP datagram, a TCP frame or a serial line (tmk__ingest_packet). */
static void handle_packet(tmk_relay* r, const uint8_t* p, size_t len, const struct sockaddr* src,
                          tmk__conn* c) {
  uint64_t now = uv_now(r->loop);
  src_ctx sc0 = {src, c, "", 0};
  src_ctx* sc = &sc0;
  tmk_proto_header h;
  int rc = tmk_proto_parse_header(p, len, &h);
  if (rc < 0) {
    /* A HELLO of another protocol version still has the v1 layout up to the session id (§8):
     * answer it with REJECT so the agent can say what is wrong. */
    if (len >= 14 && memcmp(p, "TMK", 3) == 0 && p[3] != TMK_PROTO_VERSION &&
        p[5] == TMK_PKT_HELLO) {
      uint64_t sid = 0;
      int be = (p[4] & TMK_PKT_F_BIG_ENDIAN) != 0;
      for (int i = 0; i < 8; i++)
        sid |= (uint64_t)p[6 + (be ? i : 7 - i)] << (8 * (7 - i));
      char text[200];
      snprintf(text, sizeof text,
               "telemark-relay %s speaks protocol %d, the agent speaks %u: rebuild the agent "
               "and relay from the same telemark version",
               TMK_RELAY_VERSION, TMK_PROTO_VERSION, p[3]);
      if (first_reject(sid))
        tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now, "%s: REJECT session %016llx: %s",
                         src_name(sc), (unsigned long long)sid, text);
      send_reject(r, c, src, sid, TMK_REJECT_VERSION, text, NULL);
      return;
    }
    r->garbage++;
    tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now, "%s: dropped %zu-byte packet: %s", src_name(sc), len,
                     tmk_strerror(rc));
    return;
  }
  const uint8_t* key = authenticate(r, p, len, &h, src, c, sc, now);
  if (key == AUTH_DROP) return;
  switch (h.type) {
    case TMK_PKT_DATA:
      handle_data(r, p, len, &h, src, c, sc, now, key);
      break;
    case TMK_PKT_HELLO:
      handle_hello(r, p, len, &h, src, c, sc, now, key);
      break;
    case TMK_PKT_BYE: {
      tmk__session* s = tmk__session_find_sid(r, h.session_id);
      if (!s || bind_source(s, src, c, sc, 0) != 0) {
        r->garbage++;
        return;
      }
      tmk__reorder_tick(&s->ro, now, 1, deliver, s);
      tmk__session_sync_stats(s);
      tmk__session_apply(s, p, len, r->scratch);
      s->ended = 1;
      tmk_relay_session_info info;
      pthread_mutex_lock(&s->mu);
      info = s->info;
      tmk__store_fill_info(s->store, &info);
      pthread_mutex_unlock(&s->mu);
      tmk_relay__log(&r->log, TMK_LOG_INFO, "session %s: BYE (%llu records, %llu zones, %llu lost packets)",
               s->id, (unsigned long long)info.stats.records,
               (unsigned long long)info.stats.zones, (unsigned long long)info.stats.lost);
      break;
    }
    default:
      r->garbage++;
      tmk_relay__log_limited(&r->log, TMK_LOG_WARN, src_name(sc), now, "%s: unexpected %s packet from an agent",
                       src_name(sc), tmk_proto_packet_type_name(h.type));
      break;
  }
}

void tmk__ingest_packet(tmk_relay* r, const uint8_t* p, size_t len, const struct sockaddr* src) {
  handle_packet(r, p, len, src, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * TCP
 * ------------------------------------------------------------------------------------------- */
static void conn_closed(uv_handle_t* h) {
  tmk__conn* c = h->data;
  tmk_relay* r = c->relay;
  tmk__conn** pp = &r->conns;
  while (*pp && *pp != c) pp = &(*pp)->next;
  if (*pp) *pp = c->next;
  r->nconns--;
  free(c->buf);
  free(c);
}

static void conn_close(tmk__conn* c) {
  if (c->closing) return;
  c->closing = 1;
  tmk__session* s = c->session;
  if (s && s->conn == c) {
    s->conn = NULL;
    tmk__reorder_tick(&s->ro, uv_now(c->relay->loop), 1, deliver, s);
    tmk__session_sync_stats(s);
    s->ended = 1;
    pthread_mutex_lock(&s->mu);
    s->info.live = 0;
    pthread_mutex_unlock(&s->mu);
    tmk_relay__log(&c->relay->log, TMK_LOG_INFO, "session %s: tcp connection from %s closed", s->id, c->peer_str);
  }
  uv_close((uv_handle_t*)&c->tcp, conn_closed);
}

static void conn_alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  (void)suggested;
  tmk__conn* c = h->data;
  *buf = uv_buf_init((char*)c->buf + c->len, (unsigned)(TMK__CONN_BUF - c->len));
}

static void conn_read(uv_stream_t* st, ssize_t nread, const uv_buf_t* buf) {
  (void)buf;
  tmk__conn* c = st->data;
  tmk_relay* r = c->relay;
  if (nread < 0) {
    conn_close(c);
    return;
  }
  c->len += (size_t)nread;
  size_t off = 0;
  while (!c->closing && off < c->len) {
    uint32_t plen = 0;
    int n = tmk_proto_frame_parse(c->buf + off, c->len - off, &plen);
    if (n < 0) {
      r->garbage++;
      tmk_relay__log_limited(&r->log, TMK_LOG_WARN, c->peer_str, uv_now(r->loop),
                       "%s: bad TCP framing (%s); closing the connection", c->peer_str,
                       tmk_strerror(n));
      conn_close(c);
      return;
    }
    if (n == 0 || c->len - off - (size_t)n < plen) break;
    c->last_packet_ms = uv_now(r->loop);
    handle_packet(r, c->buf + off + n, plen, (const struct sockaddr*)&c->peer, c);
    off += (size_t)n + plen;
  }
  if (off) {
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
  }
}

static void on_connection(uv_stream_t* server, int status) {
  tmk_relay* r = server->data;
  if (status < 0) return;
  tmk__conn* c = calloc(1, sizeof *c);
  if (c) c->buf = malloc(TMK__CONN_BUF);
  if (!c || !c->buf) {
    free(c);
    return;
  }
  c->relay = r;
  uv_tcp_init(r->loop, &c->tcp);
  c->tcp.data = c;
  c->next = r->conns;
  r->conns = c;
  r->nconns++;
  if (uv_accept(server, (uv_stream_t*)&c->tcp) != 0) {
    conn_close(c);
    return;
  }
  int alen = sizeof c->peer;
  uv_tcp_getpeername(&c->tcp, (struct sockaddr*)&c->peer, &alen);
  addr_str((const struct sockaddr*)&c->peer, c->peer_str, sizeof c->peer_str);
  c->last_packet_ms = uv_now(r->loop);
  uint32_t same = 0, open = 0;
  tmk__conn* oldest_unbound = NULL;
  for (tmk__conn* o = r->conns; o; o = o->next) {
    if (o == c || o->closing) continue;
    open++;
    if (!o->session) oldest_unbound = o; /* the list is newest first */
    if (tmk__same_ip((const struct sockaddr*)&o->peer, (const struct sockaddr*)&c->peer)) same++;
  }
  /* Full: a connection that has not named a session yet makes room, so idle connections cannot
   * lock agents out (issue 15 item 9); those that have keep theirs. */
  if (open >= TMK__MAX_CONNS && same < per_source_limit(r) && oldest_unbound) {
    tmk_relay__log_limited(&r->log, TMK_LOG_WARN, "tcp-full", uv_now(r->loop),
                     "%u TCP connections open: closed %s, which has sent no HELLO yet", open,
                     oldest_unbound->peer_str);
    conn_close(oldest_unbound);
    open--;
  }
  if (open >= TMK__MAX_CONNS || same >= per_source_limit(r)) {
    char ip[64];
    ip_str((const struct sockaddr*)&c->peer, ip, sizeof ip);
    tmk_relay__log_limited(&r->log, TMK_LOG_WARN, ip, uv_now(r->loop),
                     "%s: too many TCP connections (%u open, %u from this host); refused",
                     c->peer_str, open, same);
    conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t*)&c->tcp, conn_alloc, conn_read);
}

/* ---------------------------------------------------------------------------------------------
 * Start / stop / tick
 * ------------------------------------------------------------------------------------------- */
int tmk__ingest_start(tmk_relay* r) {
  struct sockaddr_storage addr;
  int rc;
  if (strchr(r->cfg.listen_host, ':'))
    rc = uv_ip6_addr(r->cfg.listen_host, r->cfg.listen_port, (struct sockaddr_in6*)&addr);
  else
    rc = uv_ip4_addr(r->cfg.listen_host, r->cfg.listen_port, (struct sockaddr_in*)&addr);
  if (rc) {
    tmk_relay__log(&r->log, TMK_LOG_ERROR, "--listen: '%s' is not an IP address", r->cfg.listen_host);
    return rc;
  }
  uv_tcp_init(r->loop, &r->tcp);
  r->tcp.data = r;
  r->tcp_open = 1;
  rc = uv_tcp_bind(&r->tcp, (const struct sockaddr*)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t*)&r->tcp, 128, on_connection);
  if (rc) {
    tmk_relay__log(&r->log, TMK_LOG_ERROR, "cannot listen on tcp %s:%d: %s (is another relay running? choose "
             "another port with --listen)", r->cfg.listen_host, r->cfg.listen_port,
             uv_strerror(rc));
    return rc;
  }
  struct sockaddr_storage bound;
  int blen = sizeof bound;
  uv_tcp_getsockname(&r->tcp, (struct sockaddr*)&bound, &blen);
  int port = ntohs(bound.ss_family == AF_INET6
                       ? ((struct sockaddr_in6*)&bound)->sin6_port
                       : ((struct sockaddr_in*)&bound)->sin_port);
  /* UDP on the same port number as TCP (the TCP bind chose it when --listen said port 0). */
  if (bound.ss_family == AF_INET6) ((struct sockaddr_in6*)&addr)->sin6_port = htons((uint16_t)port);
  else ((struct sockaddr_in*)&addr)->sin_port = htons((uint16_t)port);
  uv_udp_init_ex(r->loop, &r->udp, (unsigned)addr.ss_family);
  r->udp.data = r;
  r->udp_open = 1;
  rc = uv_udp_bind(&r->udp, (const struct sockaddr*)&addr, 0);
  if (rc) {
    tmk_relay__log(&r->log, TMK_LOG_ERROR, "cannot bind udp %s:%d: %s (is another relay running? choose "
             "another port with --listen)", r->cfg.listen_host, port, uv_strerror(rc));
    return rc;
  }
  /* A deep socket buffer rides out scheduling hiccups and bursts (an agent draining a full
   * ring sends faster than we decode) without loss. As root, SO_RCVBUFFORCE goes past
   * net.core.rmem_max (212992 on a stock system); otherwise ask and take the cap, and say so. */
  int rcvbuf = RCVBUF_WANTED, granted = 0;
  uv_os_fd_t ufd;
#ifdef SO_RCVBUFFORCE
  if (uv_fileno((uv_handle_t*)&r->udp, &ufd) != 0 ||
      setsockopt(ufd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
#else
  (void)ufd;
#endif
    uv_recv_buffer_size((uv_handle_t*)&r->udp, &rcvbuf);
  uv_recv_buffer_size((uv_handle_t*)&r->udp, &granted); /* 0 reads it (Linux reports double) */
  if (granted < RCVBUF_WANTED) /* the receive thread empties it into the queue at once */
    tmk_relay__log(&r->log, TMK_LOG_INFO,
                   "udp socket receive buffer is %d KiB, not the %d KiB asked for (the receive "
                   "queue is %zu MiB); if the relay counts lost packets while its receive queue "
                   "has room, raise net.core.rmem_max (sysctl) to %d",
                   granted / 1024, RCVBUF_WANTED / 1024, r->cfg.udp_queue_bytes >> 20,
                   RCVBUF_WANTED);
  /* libuv's handle only sends (WELCOME, CONTROL); a thread of our own receives, so that the
   * socket is emptied at once even while the loop decodes or yields (--ingest-nice). */
  if (uv_fileno((uv_handle_t*)&r->udp, &ufd) != 0 ||
      !(r->udp_rx = tmk__udp_rx_start(r, ufd, r->cfg.udp_queue_bytes))) {
    tmk_relay__log(&r->log, TMK_LOG_ERROR, "cannot start the udp receive thread (%zu-byte queue)",
                   r->cfg.udp_queue_bytes);
    return UV_ENOMEM;
  }
  r->bound_port = port;
  return 0;
}

void tmk__ingest_stop(tmk_relay* r) {
  tmk__udp_rx_stop(r->udp_rx); /* decodes what it had queued */
  if (r->udp_open) {
    uv_close((uv_handle_t*)&r->udp, NULL);
    r->udp_open = 0;
  }
  if (r->tcp_open) {
    uv_close((uv_handle_t*)&r->tcp, NULL);
    r->tcp_open = 0;
  }
  for (tmk__conn* c = r->conns; c; c = c->next) conn_close(c);
}

/* Closes connections that named no session within TMK__CONN_HELLO_MS, or went silent for
 * TMK__CONN_IDLE_MS (a paused agent reconnects with a HELLO when it resumes). */
static void conn_timeouts(tmk_relay* r, uint64_t now_ms) {
  for (tmk__conn* c = r->conns; c; c = c->next) {
    if (c->closing) continue;
    uint64_t quiet = now_ms - c->last_packet_ms;
    if ((!c->session && quiet >= TMK__CONN_HELLO_MS) || quiet >= TMK__CONN_IDLE_MS) {
      tmk_relay__log_limited(&r->log, TMK_LOG_WARN, c->peer_str, now_ms,
                       "%s: TCP connection %s for %llu s; closed", c->peer_str,
                       c->session ? "silent" : "sent no HELLO", (unsigned long long)(quiet / 1000));
      conn_close(c);
    }
  }
}

void tmk__ingest_tick(tmk_relay* r, uint64_t now_ms) {
  int any = 0;
  if (now_ms - r->last_conn_check_ms >= 250) {
    r->last_conn_check_ms = now_ms;
    conn_timeouts(r, now_ms);
  }
  /* A gap's late packet may still wait in the receive queue: windows age only when it is empty. */
  const int behind = tmk__udp_rx_backlog(r->udp_rx);
  for (uint32_t i = 0; i < r->nsessions; i++) {
    tmk__session* s = r->sessions[i];
    if (s->replay) continue;
    if (s->ro.held && !behind) tmk__reorder_tick(&s->ro, now_ms, 0, deliver, s);
    tmk__session_flush_pending(s, 0);
    tmk__session_sync_stats(s);
    if (s->delivered) {
      any = 1;
      s->delivered = 0;
    }
  }
  if (any) {
    pthread_mutex_lock(&r->reg_mu);
    tmk_relay_data_fn fn = r->data_fn;
    void* ud = r->data_ud;
    pthread_mutex_unlock(&r->reg_mu);
    if (fn) fn(ud);
  }
}
