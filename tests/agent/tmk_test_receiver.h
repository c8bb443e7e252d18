/* tmk_test_receiver.h — a small relay stand-in for the agent tests: listens on 127.0.0.1 (UDP
 * and TCP, ports picked by the kernel), decodes every packet with the protocol decoder on its
 * own thread, keeps per-site counts, and can answer WELCOME or send CONTROL packets. */
#ifndef TMK_TEST_RECEIVER_H
#define TMK_TEST_RECEIVER_H

#include <pthread.h>
#include <stdint.h>

#include "tmk_proto.h"

#define RECV_MAX_SITES 256

typedef struct recv_site {
  char name[64];
  uint8_t kind;
  uint8_t severity;
  uint32_t verbosity;
  uint64_t zones;     /* zone records naming this site */
  uint64_t events;    /* markers, frames, plots, messages naming it */
  uint64_t max_depth; /* deepest zone seen */
} recv_site;

typedef struct receiver {
  int udp_fd, listen_fd, tcp_fd;
  uint16_t udp_port, tcp_port;
  int auto_welcome; /* answer HELLO with WELCOME */
  int auto_reject;  /* answer HELLO with REJECT (relay full) */
  const uint8_t* key; /* set before start: drop (and count) packets without a valid MAC, MAC
                         what it sends (§2.1) */
  int stop; /* atomic */
  pthread_t thread;
  pthread_mutex_t mu;
  /* everything below is guarded by mu */
  unsigned char peer[128]; /* last UDP sender (struct sockaddr_storage) */
  unsigned peer_len;
  uint8_t tcp_buf[1 << 17];
  uint32_t tcp_len;
  uint64_t session_id;
  uint64_t hellos, data_packets, byes, bytes, bad_packets, tcp_packets, udp_packets;
  uint64_t timer_freq;
  uint64_t hello_caps;
  uint64_t hello_big_endian, hello_pointer_size, hello_header_big_endian;
  char arch[32];
  char program[64];
  char platform[32]; /* HELLO platform */
  uint64_t zones, markers_begin, markers_end, frames, plots, messages, sites_seen, clock_syncs;
  uint64_t drops[TMK_DROP_REASON_COUNT];
  uint64_t zone_depth_errors; /* a zone whose depth was impossible */
  uint64_t parent_zones;      /* zones that came as parents (OPEN ... CLOSE, §5.3) */
  uint64_t loose_zones;       /* zones deeper than 0 that came with no parent open (after an AT) */
  uint64_t max_duration;      /* longest zone, ticks */
  uint64_t max_depth;
  int64_t last_plot_i;
  double last_plot_d;
  char last_message[128];
  uint64_t last_message_len; /* full length as decoded */
  char last_marker_payload[64]; /* last non-empty one */
  uint32_t last_marker_payload_len;
  char thread_names[16][32];
  char team_names[32][32];
  recv_site sites[RECV_MAX_SITES]; /* by site id */
  uint64_t zones_by_id[RECV_MAX_SITES];
  uint64_t events_by_id[RECV_MAX_SITES];
  uint64_t next_seq;
  uint64_t seq_gaps;
  uint64_t keyed_packets, unkeyed_packets, bad_macs; /* with a key: how packets came in */
  uint64_t max_packet_len; /* longest packet received */
} receiver;

/* Binds UDP and TCP on 127.0.0.1 with free ports and starts the receive thread. Returns 0. */
int recv_start(receiver* r);
void recv_stop(receiver* r);
/* Sends a CONTROL packet to the agent (UDP: to the last sender; TCP: on the connection).
 * Returns 0 or -1 when there is no one to send to. */
int recv_send_control(receiver* r, int tcp, uint32_t seq, uint8_t severity, uint32_t verbosity);
/* The same with a MAC by `key` (NULL: none), whatever r->key is: a forged CONTROL. */
int recv_send_control_key(receiver* r, int tcp, uint32_t seq, uint8_t severity,
                          uint32_t verbosity, const uint8_t* key);
/* Zones seen for the site named `name` (summing all ids with that name). */
uint64_t recv_zones_named(receiver* r, const char* name);
/* Events (markers, frames, plots, messages) seen for the site named `name`. */
uint64_t recv_events_named(receiver* r, const char* name);
/* Waits up to ms milliseconds until *counter (read under the lock) >= want. Returns 1 if so. */
int recv_wait_at_least(receiver* r, const uint64_t* counter, uint64_t want, int ms);
/* Snapshot of a counter under the lock. */
uint64_t recv_get(receiver* r, const uint64_t* counter);
/* Decodes a file written by the file transport or a buffer of framed packets into r (no
 * sockets; r need not be started). Returns packets decoded or -1 on a framing error. */
int recv_feed_stream(receiver* r, const uint8_t* data, size_t len);
void recv_init_offline(receiver* r);
/* Closes the current TCP connection (the agent must reconnect). */
void recv_kick_tcp(receiver* r);

#endif
