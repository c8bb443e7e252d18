/* tmk_test_receiver.c — the agent tests' relay stand-in (see tmk_test_receiver.h): sockets on
 * 127.0.0.1, a poll loop on its own thread, and full decoding of every packet so that tests can
 * account for every zone the agent produced. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE 1
#include "tmk_test_receiver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void copy_str(char* dst, size_t cap, tmk_proto_str s) {
  size_t n = s.len < cap - 1 ? s.len : cap - 1;
  memcpy(dst, s.ptr, n);
  dst[n] = 0;
}

static void handle_data(receiver* r, tmk_proto_reader* rd) {
  tmk_proto_record rec;
  int rc;
  if (rd->hdr.seq != r->next_seq) r->seq_gaps++;
  r->next_seq = rd->hdr.seq + 1;
  for (;;) {
    uint32_t id, open_before = rd->nopen;
    if ((rc = tmk_proto_next(rd, &rec)) != 1) break;
    switch (rec.type) {
      case TMK_REC_SITE:
        id = rec.u.site.id;
        r->sites_seen++;
        if (id < RECV_MAX_SITES) {
          copy_str(r->sites[id].name, sizeof r->sites[id].name, rec.u.site.name);
          r->sites[id].kind = rec.u.site.kind;
          r->sites[id].severity = rec.u.site.severity;
          r->sites[id].verbosity = rec.u.site.verbosity;
        }
        break;
      case TMK_REC_ZONE:
        r->zones++;
        id = rec.u.zone.site;
        if (id < RECV_MAX_SITES) {
          r->zones_by_id[id]++;
          if (rec.u.zone.depth > r->sites[id].max_depth) r->sites[id].max_depth = rec.u.zone.depth;
        }
        if (rec.u.zone.depth > 64) r->zone_depth_errors++;
        /* a CLOSE returns the zone it closes; a leaf leaves as many zones open (or more) */
        if (rd->nopen < open_before) r->parent_zones++;
        if (rec.u.zone.depth > 0 && rd->nopen == 0) r->loose_zones++;
        if (rec.u.zone.duration > r->max_duration) r->max_duration = rec.u.zone.duration;
        if (rec.u.zone.depth > r->max_depth) r->max_depth = rec.u.zone.depth;
        break;
      case TMK_REC_MARKER_BEGIN:
      case TMK_REC_MARKER_END:
        if (rec.type == TMK_REC_MARKER_BEGIN) r->markers_begin++;
        else r->markers_end++;
        id = rec.u.marker.site;
        if (id < RECV_MAX_SITES) r->events_by_id[id]++;
        if (rec.u.marker.payload.len) { /* keep the last non-empty payload */
          r->last_marker_payload_len = rec.u.marker.payload.len;
          copy_str(r->last_marker_payload, sizeof r->last_marker_payload, rec.u.marker.payload);
        }
        break;
      case TMK_REC_FRAME:
        r->frames++;
        id = rec.u.frame.site;
        if (id < RECV_MAX_SITES) r->events_by_id[id]++;
        break;
      case TMK_REC_PLOT:
        r->plots++;
        id = rec.u.plot.site;
        if (id < RECV_MAX_SITES) r->events_by_id[id]++;
        if (rec.u.plot.is_double) r->last_plot_d = rec.u.plot.d;
        else r->last_plot_i = rec.u.plot.i;
        break;
      case TMK_REC_MESSAGE:
        r->messages++;
        id = rec.u.message.site;
        if (id < RECV_MAX_SITES) r->events_by_id[id]++;
        copy_str(r->last_message, sizeof r->last_message, rec.u.message.text);
        r->last_message_len = rec.u.message.text.len;
        break;
      case TMK_REC_THREAD_NAME:
        if (rec.thread < 16) copy_str(r->thread_names[rec.thread], 32, rec.u.thread_name.name);
        break;
      case TMK_REC_TEAM_NAME:
        if (rec.u.team.bit < 32) copy_str(r->team_names[rec.u.team.bit], 32, rec.u.team.name);
        break;
      case TMK_REC_DROPS:
        if (rec.u.drops.reason < TMK_DROP_REASON_COUNT)
          r->drops[rec.u.drops.reason] = rec.u.drops.count;
        break;
      case TMK_REC_CLOCK_SYNC: r->clock_syncs++; break;
      default: break;
    }
  }
  if (rc < 0) {
    r->bad_packets++;
    fprintf(stderr, "receiver: bad DATA packet: %s\n", tmk_strerror(rc));
  }
}

static void send_packet_keyed(receiver* r, int tcp, uint8_t* p, int n, const uint8_t* key) {
  if (n <= 0) return;
  if (key) n = tmk_proto_mac_seal(p, (size_t)n, (size_t)n + TMK_PROTO_MAC_LEN, key);
  if (n <= 0) return;
  if (tcp) {
    uint8_t frame[4096];
    int pl = tmk_proto_frame_prefix(frame, (size_t)n);
    if (r->tcp_fd < 0 || pl < 0) return;
    memcpy(frame + pl, p, (size_t)n);
    if (send(r->tcp_fd, frame, (size_t)(pl + n), MSG_NOSIGNAL) < 0) return;
  } else if (r->peer_len) {
    sendto(r->udp_fd, p, (size_t)n, 0, (struct sockaddr*)r->peer, r->peer_len);
  }
}

#define send_packet_locked(r, tcp, p, n) send_packet_keyed(r, tcp, p, n, (r)->key)

static void handle_packet(receiver* r, const uint8_t* p, size_t len, int tcp) {
  static uint8_t scratch[TMK_PROTO_MAX_BODY];
  tmk_proto_reader rd;
  int rc;
  if (len > r->max_packet_len) r->max_packet_len = len;
  if (r->key) {
    rc = tmk_proto_mac_check(p, len, r->key);
    if (rc != 0) {
      if (len > 4 && (p[4] & TMK_PKT_F_MAC)) r->bad_macs++;
      else r->unkeyed_packets++;
      return;
    }
    r->keyed_packets++;
  }
  rc = tmk_proto_open(&rd, p, len, scratch, sizeof scratch);
  r->bytes += len;
  if (tcp) r->tcp_packets++;
  else r->udp_packets++;
  if (rc < 0) {
    r->bad_packets++;
    fprintf(stderr, "receiver: bad packet: %s\n", tmk_strerror(rc));
    return;
  }
  r->session_id = rd.hdr.session_id;
  switch (rd.hdr.type) {
    case TMK_PKT_HELLO: {
      tmk_proto_hello h;
      if (tmk_proto_read_hello(&rd, &h) < 0) {
        r->bad_packets++;
        break;
      }
      r->hellos++;
      r->timer_freq = h.timer_freq;
      r->hello_caps = h.caps;
      r->hello_big_endian = h.big_endian;
      r->hello_pointer_size = h.pointer_size;
      r->hello_header_big_endian = (rd.hdr.flags & TMK_PKT_F_BIG_ENDIAN) != 0;
      copy_str(r->arch, sizeof r->arch, h.arch);
      copy_str(r->program, sizeof r->program, h.program);
      copy_str(r->platform, sizeof r->platform, h.platform);
      if (r->auto_reject) {
        uint8_t out[256];
        tmk_proto_reject rj;
        rj.reason = TMK_REJECT_FULL;
        rj.text.ptr = "relay full: stop another session";
        rj.text.len = (uint32_t)strlen(rj.text.ptr);
        send_packet_locked(r, tcp, out,
                           tmk_proto_encode_reject(out, sizeof out, rd.hdr.session_id, &rj));
      } else if (r->auto_welcome) {
        uint8_t out[256];
        tmk_proto_welcome w;
        w.proto_version = TMK_PROTO_VERSION;
        w.relay_version.ptr = "test";
        w.relay_version.len = 4;
        send_packet_locked(r, tcp, out,
                           tmk_proto_encode_welcome(out, sizeof out, rd.hdr.session_id, &w));
      }
      break;
    }
    case TMK_PKT_DATA:
      r->data_packets++;
      handle_data(r, &rd);
      break;
    case TMK_PKT_BYE: r->byes++; break;
    default: r->bad_packets++; break;
  }
}

static void drain_tcp(receiver* r) {
  uint32_t off = 0;
  for (;;) {
    uint32_t len = 0;
    int pl = tmk_proto_frame_parse(r->tcp_buf + off, r->tcp_len - off, &len);
    if (pl < 0) {
      r->bad_packets++;
      r->tcp_len = 0;
      return;
    }
    if (pl == 0 || r->tcp_len - off < (uint32_t)pl + len) break;
    handle_packet(r, r->tcp_buf + off + pl, len, 1);
    off += (uint32_t)pl + len;
  }
  memmove(r->tcp_buf, r->tcp_buf + off, r->tcp_len - off);
  r->tcp_len -= off;
}

static void* recv_main(void* arg) {
  receiver* r = (receiver*)arg;
  static uint8_t buf[65536];
  while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
    struct pollfd pf[3];
    int n = 0, i;
    int tcp_fd;
    pthread_mutex_lock(&r->mu);
    tcp_fd = r->tcp_fd;
    pthread_mutex_unlock(&r->mu);
    pf[n].fd = r->udp_fd, pf[n].events = POLLIN, pf[n++].revents = 0;
    pf[n].fd = r->listen_fd, pf[n].events = POLLIN, pf[n++].revents = 0;
    if (tcp_fd >= 0) pf[n].fd = tcp_fd, pf[n].events = POLLIN, pf[n++].revents = 0;
    if (poll(pf, (nfds_t)n, 10) <= 0) continue;
    pthread_mutex_lock(&r->mu);
    if (pf[0].revents & POLLIN) {
      for (i = 0; i < 256; i++) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        ssize_t got = recvfrom(r->udp_fd, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr*)&sa, &sl);
        if (got <= 0) break;
        memcpy(r->peer, &sa, sl < sizeof r->peer ? sl : sizeof r->peer);
        r->peer_len = sl;
        handle_packet(r, buf, (size_t)got, 0);
      }
    }
    if (pf[1].revents & POLLIN) {
      int fd = accept(r->listen_fd, NULL, NULL);
      if (fd >= 0) {
        if (r->tcp_fd >= 0) close(r->tcp_fd);
        r->tcp_fd = fd;
        r->tcp_len = 0;
      }
    }
    if (n == 3 && pf[2].fd == r->tcp_fd && (pf[2].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t got = recv(r->tcp_fd, r->tcp_buf + r->tcp_len, sizeof r->tcp_buf - r->tcp_len,
                         MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        /* spurious wake-up */
      } else if (got <= 0) {
        close(r->tcp_fd);
        r->tcp_fd = -1;
        r->tcp_len = 0;
      } else {
        r->tcp_len += (uint32_t)got;
        drain_tcp(r);
      }
    }
    pthread_mutex_unlock(&r->mu);
  }
  return NULL;
}

void recv_init_offline(receiver* r) {
  memset(r, 0, sizeof *r);
  r->udp_fd = r->listen_fd = r->tcp_fd = -1;
  pthread_mutex_init(&r->mu, NULL);
}

int recv_start(receiver* r) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  int one = 1, aw = r->auto_welcome, ar = r->auto_reject;
  const uint8_t* key = r->key;
  recv_init_offline(r);
  r->auto_welcome = aw;
  r->auto_reject = ar;
  r->key = key;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  r->udp_fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (r->udp_fd < 0 || bind(r->udp_fd, (struct sockaddr*)&sa, sizeof sa) < 0) return -1;
  {
    int big = 4 << 20;
    setsockopt(r->udp_fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  }
  getsockname(r->udp_fd, (struct sockaddr*)&sa, &sl);
  r->udp_port = ntohs(sa.sin_port);
  sa.sin_port = 0;
  r->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(r->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (r->listen_fd < 0 || bind(r->listen_fd, (struct sockaddr*)&sa, sizeof sa) < 0 ||
      listen(r->listen_fd, 4) < 0)
    return -1;
  sl = sizeof sa;
  getsockname(r->listen_fd, (struct sockaddr*)&sa, &sl);
  r->tcp_port = ntohs(sa.sin_port);
  return pthread_create(&r->thread, NULL, recv_main, r) == 0 ? 0 : -1;
}

void recv_stop(receiver* r) {
  __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
  pthread_join(r->thread, NULL);
  if (r->udp_fd >= 0) close(r->udp_fd);
  if (r->listen_fd >= 0) close(r->listen_fd);
  if (r->tcp_fd >= 0) close(r->tcp_fd);
  r->udp_fd = r->listen_fd = r->tcp_fd = -1;
}

int recv_send_control(receiver* r, int tcp, uint32_t seq, uint8_t severity, uint32_t verbosity) {
  return recv_send_control_key(r, tcp, seq, severity, verbosity, r->key);
}

int recv_send_control_key(receiver* r, int tcp, uint32_t seq, uint8_t severity,
                          uint32_t verbosity, const uint8_t* key) {
  uint8_t out[64];
  tmk_proto_control c;
  int ok;
  c.seq = seq;
  c.severity = severity;
  c.verbosity = verbosity;
  pthread_mutex_lock(&r->mu);
  ok = tcp ? r->tcp_fd >= 0 : r->peer_len > 0;
  if (ok)
    send_packet_keyed(r, tcp, out, tmk_proto_encode_control(out, sizeof out, r->session_id, &c),
                      key);
  pthread_mutex_unlock(&r->mu);
  return ok ? 0 : -1;
}

static uint64_t sum_named(receiver* r, const char* name, const uint64_t* by_id) {
  uint64_t n = 0;
  int i;
  pthread_mutex_lock(&r->mu);
  for (i = 1; i < RECV_MAX_SITES; i++)
    if (strcmp(r->sites[i].name, name) == 0) n += by_id[i];
  pthread_mutex_unlock(&r->mu);
  return n;
}

uint64_t recv_zones_named(receiver* r, const char* name) { return sum_named(r, name, r->zones_by_id); }
uint64_t recv_events_named(receiver* r, const char* name) {
  return sum_named(r, name, r->events_by_id);
}

uint64_t recv_get(receiver* r, const uint64_t* counter) {
  uint64_t v;
  pthread_mutex_lock(&r->mu);
  v = *counter;
  pthread_mutex_unlock(&r->mu);
  return v;
}

int recv_wait_at_least(receiver* r, const uint64_t* counter, uint64_t want, int ms) {
  int i;
  for (i = 0; i < ms; i += 5) {
    struct timespec ts = {0, 5000000};
    if (recv_get(r, counter) >= want) return 1;
    nanosleep(&ts, NULL);
  }
  return recv_get(r, counter) >= want;
}

int recv_feed_stream(receiver* r, const uint8_t* data, size_t len) {
  size_t off = 0;
  int packets = 0;
  while (off < len) {
    uint32_t plen = 0;
    int pl = tmk_proto_frame_parse(data + off, len - off, &plen);
    if (pl <= 0 || len - off < (size_t)pl + plen) return -1;
    pthread_mutex_lock(&r->mu);
    handle_packet(r, data + off + pl, plen, 1);
    pthread_mutex_unlock(&r->mu);
    off += (size_t)pl + plen;
    packets++;
  }
  return packets;
}

void recv_kick_tcp(receiver* r) {
  pthread_mutex_lock(&r->mu);
  if (r->tcp_fd >= 0) close(r->tcp_fd);
  r->tcp_fd = -1;
  r->tcp_len = 0;
  pthread_mutex_unlock(&r->mu);
}
