/* tmk_proto.h — the telemark wire protocol: packet header, records, encoder and decoder.
 * The specification is docs/PROTOCOL.md; section numbers below (§n) refer to it.
 * This module knows nothing of sockets, threads, files or malloc: callers hand it buffers. */
#ifndef TMK_PROTO_H
#define TMK_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "tmk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Constants (§2, §3)
 * ------------------------------------------------------------------------------------------- */
#define TMK_PROTO_VERSION 1
#define TMK_PROTO_SHIBBOLETH "telemark"
#define TMK_PROTO_DEFAULT_PORT 7720
#define TMK_PROTO_DEFAULT_PACKET 1200 /* never fragments on an Ethernet LAN */
#define TMK_PROTO_MIN_PACKET 256      /* smallest max-packet an agent may configure */
#define TMK_PROTO_MAX_PACKET 65507    /* largest UDP payload */
#define TMK_PROTO_MAX_HEADER 39       /* 6 fixed + 8 session + 3 varints (10+10+5) */
#define TMK_PROTO_MAX_BODY 65536      /* decompressed body limit (bomb guard) */
#define TMK_PROTO_MAX_STRING 1024     /* longest string field */
#define TMK_PROTO_MAX_PAYLOAD 255     /* longest marker extra-data payload */
#define TMK_PROTO_MAX_OPEN 32         /* zone nesting inside one packet's zone tree */
#define TMK_PROTO_PREDICT_SLOTS 32    /* leaf-duration predictor slots (§5.3) */
#define TMK_PROTO_MAX_TEAMS 32        /* verbosity mask bits */
#define TMK_PROTO_NUM_CONTEXTS 5      /* number-stream coding contexts (§5) */
#define TMK_PROTO_MAC_LEN 8           /* SipHash-2-4 tag at the end of a keyed packet (§2.1) */
#define TMK_PROTO_KEY_LEN 16          /* SipHash-2-4 key */

/* TMK_PROTO_TIME32: tmk_proto_put_zones works out gaps, durations and its cursor in 32 bits, for
 * a 32-bit core where every 64-bit operation takes two or more instructions. The bytes are those
 * of the 64-bit encoder, for the zones it takes: every zone of a packet must start and end within
 * 2^30 ticks of the packet's base time (TMK_PROTO_TIME32_REACH). A zone beyond that ends the
 * packet's zones (as a full packet does: the next packet has a base of its own); a zone longer
 * than the reach fits no packet and is refused with TMK_ERANGE. Off unless -DTMK_PROTO_TIME32=1
 * (it saves 28 B on Cortex-M4 and 78 B on rv32, and costs every zone of 2^30 ticks or more);
 * protocol/ must then be built -Os (its loop is the size build's). docs/PORTING.md, "Size". */
#ifndef TMK_PROTO_TIME32
#define TMK_PROTO_TIME32 0
#endif
#if TMK_PROTO_TIME32 != 0 && TMK_PROTO_TIME32 != 1
#error "TMK_PROTO_TIME32 must be 0 or 1"
#endif
#define TMK_PROTO_TIME32_REACH (1ull << 30) /* ticks a zone may lie from its packet's base */

/* Packet types (header byte 5, §2). */
enum {
  TMK_PKT_DATA = 1,    /* agent -> relay: records */
  TMK_PKT_HELLO = 2,   /* agent -> relay: handshake with target facts */
  TMK_PKT_WELCOME = 3, /* relay -> agent: accepted */
  TMK_PKT_REJECT = 4,  /* relay -> agent: refused, with reason */
  TMK_PKT_CONTROL = 5, /* relay -> agent: new severity level and verbosity mask */
  TMK_PKT_BYE = 6      /* agent -> relay: clean shutdown */
};

/* Header flags (header byte 4, §2). */
enum {
  TMK_PKT_F_LZ4 = 0x01,        /* body is one LZ4 block */
  TMK_PKT_F_BIG_ENDIAN = 0x02, /* fixed-width fields are big-endian */
  TMK_PKT_F_MAC = 0x04,        /* the packet ends with an 8-byte MAC (§2.1) */
  TMK_PKT_F_KNOWN = 0x07
};

/* Severity levels (§4). A record passes the run-time filter when severity <= level. */
enum {
  TMK_SEV_CRITICAL = 0,
  TMK_SEV_ERROR = 1,
  TMK_SEV_WARNING = 2,
  TMK_SEV_INFO = 3,
  TMK_SEV_DEBUG = 4,
  TMK_SEV_TRACE = 5,
  TMK_SEV_COUNT = 6
};

/* Call-site kinds (§5.1). */
enum {
  TMK_SITE_ZONE = 0,
  TMK_SITE_MARKER = 1,
  TMK_SITE_PLOT = 2,
  TMK_SITE_MESSAGE = 3,
  TMK_SITE_FRAME = 4,
  TMK_SITE_KIND_COUNT = 5
};

/* Drop reasons (§5.9): why the agent threw records away. Counts are cumulative. */
enum {
  TMK_DROP_RING_FULL = 0,   /* records: a thread's ring was full */
  TMK_DROP_NO_THREAD = 1,   /* records: no free thread slot */
  TMK_DROP_TOO_BIG = 2,     /* records: could not fit any packet */
  TMK_DROP_SEND_FAILED = 3, /* packets: the transport refused them */
  TMK_DROP_MISMATCH = 4,    /* records: an END marker without matching BEGIN */
  TMK_DROP_REASON_COUNT = 5
};

/* HELLO capability bits (§6.1). */
enum {
  TMK_CAP_LZ4 = 0x01,     /* agent may send compressed packets */
  TMK_CAP_CONTROL = 0x02, /* agent listens for CONTROL packets */
  TMK_CAP_TCP = 0x04      /* agent is connected over TCP */
};

/* REJECT reasons (§6.3). */
enum {
  TMK_REJECT_VERSION = 1,   /* protocol version mismatch */
  TMK_REJECT_BAD_HELLO = 2, /* HELLO malformed or wrong shibboleth */
  TMK_REJECT_FULL = 3,      /* relay has no room for another session */
  TMK_REJECT_OTHER = 4
};

/* ---------------------------------------------------------------------------------------------
 * Decoded values
 * ------------------------------------------------------------------------------------------- */

/* A string inside a packet: not NUL-terminated, valid while the packet buffer lives. */
typedef struct tmk_proto_str {
  const char* ptr;
  uint32_t len;
} tmk_proto_str;

typedef struct tmk_proto_header {
  uint8_t version;
  uint8_t flags;
  uint8_t type;
  uint64_t session_id;
  uint64_t seq;       /* DATA: per-session sequence number; other types: 0 (not checked) */
  uint64_t base_time; /* ticks; zone and event times count from it (CLOCK_SYNC's do not, §5.10) */
  uint32_t raw_len;   /* body length after decompression */
  uint32_t header_len;
  uint32_t mac_len; /* TMK_PROTO_MAC_LEN when flags has TMK_PKT_F_MAC (the body ends before it) */
} tmk_proto_header;

/* A call-site descriptor (§5.1): static attributes, sent once and re-sent periodically. */
typedef struct tmk_proto_site {
  uint32_t id; /* > 0 */
  uint8_t kind;
  uint8_t severity;
  uint32_t verbosity; /* team bits */
  uint32_t color;     /* 0xRRGGBB, 0 = relay picks */
  uint32_t line;
  tmk_proto_str name;
  tmk_proto_str file;
} tmk_proto_site;

/* A complete zone. Encoder input and decoder output. */
typedef struct tmk_proto_zone {
  uint64_t start;    /* ticks */
  uint64_t duration; /* ticks */
  uint32_t site;
  uint32_t depth; /* nesting depth on its thread, 0 = outermost */
} tmk_proto_zone;

/* Decoded record kinds. */
enum {
  TMK_REC_SITE = 1,
  TMK_REC_ZONE = 2,
  TMK_REC_MARKER_BEGIN = 3,
  TMK_REC_MARKER_END = 4,
  TMK_REC_FRAME = 5,
  TMK_REC_PLOT = 6,
  TMK_REC_MESSAGE = 7,
  TMK_REC_THREAD_NAME = 8,
  TMK_REC_DROPS = 9,
  TMK_REC_CLOCK_SYNC = 10,
  TMK_REC_TEAM_NAME = 11
};

typedef struct tmk_proto_record {
  uint8_t type;    /* TMK_REC_* */
  uint32_t thread; /* agent-local thread index the record belongs to */
  union {
    tmk_proto_site site;
    tmk_proto_zone zone;
    struct {
      uint32_t site;
      uint64_t time;
      tmk_proto_str payload; /* extra data, <= TMK_PROTO_MAX_PAYLOAD bytes */
    } marker;
    struct {
      uint32_t site; /* 0 = the main frame */
      uint64_t time;
    } frame;
    struct {
      uint32_t site;
      uint64_t time;
      uint8_t is_double;
      int64_t i;
      double d;
    } plot;
    struct {
      uint32_t site; /* 0 = no call site (fully dynamic message) */
      uint8_t severity;
      uint32_t verbosity;
      uint64_t time;
      tmk_proto_str text; /* empty: the text is the call site's name */
    } message;
    struct {
      tmk_proto_str name; /* name of record.thread */
    } thread_name;
    struct {
      uint32_t reason; /* TMK_DROP_*, or a reason this build does not know (§5.9) */
      uint64_t count;  /* cumulative since agent start */
    } drops;
    struct {
      uint64_t ticks;
      uint64_t unix_ns; /* wall clock at that tick, ns since 1970 */
    } clock;
    struct {
      uint32_t bit; /* 0..31 */
      tmk_proto_str name;
    } team;
  } u;
} tmk_proto_record;

/* HELLO body (§6.1). */
typedef struct tmk_proto_hello {
  uint32_t proto_version;
  tmk_proto_str agent_version;
  tmk_proto_str program;
  tmk_proto_str platform; /* "linux", "wii", "psp", "win32", "baremetal" */
  tmk_proto_str arch;     /* "x86_64", "ppc", "mipsel", "arm" */
  uint8_t big_endian;
  uint8_t pointer_size;
  uint64_t timer_freq; /* ticks per second */
  uint32_t caps;       /* TMK_CAP_* */
  uint32_t max_packet;
  /* Optional trailing fields (§6.1): empty when absent. An encoder writes both when either is
   * non-empty; a decoder that meets a HELLO from an older agent leaves them empty. */
  tmk_proto_str build; /* build id, e.g. "4121" or a commit; at most TMK_PROTO_MAX_LABEL bytes */
  tmk_proto_str label; /* free label, e.g. "nightly" or a device name; same limit */
} tmk_proto_hello;

#define TMK_PROTO_MAX_LABEL 64 /* longest HELLO build / label string (§6.1) */

typedef struct tmk_proto_welcome {
  uint32_t proto_version;
  tmk_proto_str relay_version;
} tmk_proto_welcome;

typedef struct tmk_proto_reject {
  uint32_t reason; /* TMK_REJECT_* */
  tmk_proto_str text;
} tmk_proto_reject;

typedef struct tmk_proto_control {
  uint32_t seq; /* increases with every change; agents ignore stale ones */
  uint8_t severity;
  uint32_t verbosity;
} tmk_proto_control;

/* One predictor slot (§5.3): the last leaf duration or parent tail of a site in this packet. */
typedef struct tmk_proto_slot {
  uint32_t site;
  uint32_t used; /* 0: the slot is empty, whatever `site` says */
  uint64_t duration;
} tmk_proto_slot;

/* ---------------------------------------------------------------------------------------------
 * Decoder. Safe on malicious input: never reads outside [packet, packet+len), never writes
 * outside the scratch it is given, returns a negative TMK_E* code on anything malformed.
 * ------------------------------------------------------------------------------------------- */

typedef struct tmk_proto_reader {
  /* `end` is kept apart from the cursors below: a wide load merging it with `p` right after
   * the previous call stored `p` alone would stall on store forwarding. */
  const uint8_t* end; /* end of the record stream = start of the number stream */
  tmk_proto_header hdr;
  const uint8_t* p; /* record stream cursor */
  const uint8_t* q; /* number stream cursor: moves from the body's end towards `end` */
  uint64_t nacc;         /* number stream bits read but not used yet, LSB first */
  uint32_t nbits;
  uint32_t nstate[TMK_PROTO_NUM_CONTEXTS];
  uint32_t thread;
  uint32_t root_depth;
  uint64_t zone_cursor;
  uint64_t event_cursor;
  uint32_t nopen;
  struct {
    uint64_t start;
    uint32_t site;
  } open[TMK_PROTO_MAX_OPEN];
  tmk_proto_slot predict[2][TMK_PROTO_PREDICT_SLOTS]; /* [0] leaf durations, [1] parent tails */
  int done; /* 0 while readable; the TMK_E* code once opening or decoding failed */
} tmk_proto_reader;

/* Parses the header only. Returns the header length (> 0) or a negative TMK_E* code. With
 * TMK_PKT_F_MAC the last TMK_PROTO_MAC_LEN bytes are the MAC, not body (hdr.mac_len); parsing
 * does not check it (tmk_proto_mac_check does). */
int tmk_proto_parse_header(const void* packet, size_t len, tmk_proto_header* out);

/* Opens a packet for reading: parses the header and, if the body is compressed, decompresses
 * it into `scratch` (scratch_cap >= TMK_PROTO_MAX_BODY always suffices; may be NULL/0 for
 * uncompressed packets). The packet and scratch must outlive the reader.
 * Returns 0 or a negative TMK_E* code. */
int tmk_proto_open(tmk_proto_reader* r, const void* packet, size_t len, void* scratch,
                   size_t scratch_cap);

/* Decodes the next record of a DATA packet. Returns 1 with *rec filled, 0 at the end of the
 * body, or a negative TMK_E* code (the reader then stays failed). Zones come out when they
 * complete: leaves in place, parents after their children. A packet is valid only as a whole
 * (§5): records handed out before a failure come from a packet that must be dropped. */
int tmk_proto_next(tmk_proto_reader* r, tmk_proto_record* rec);

/* The batched zone decoder: the same zones tmk_proto_next would return, in the same order, with
 * the same errors, but a run at a time into a plain array (the relay's ingest path). Decodes the
 * zone events (§5.3: LEAF, OPEN, CLOSE, AT) that come next, stopping before the first record
 * that is not one and at the end of the body, or when `cap` zones are out. A THREAD before the
 * call's first zone is taken as tmk_proto_next takes it; one after a zone stops the call. Every
 * zone returned belongs to the thread stored in *thread. Returns the number of zones
 * (0: the next record is not a zone, or cap is 0: call tmk_proto_next for it), or a negative
 * TMK_E* code (the reader then stays failed, as with tmk_proto_next; zones decoded before the
 * failure are returned first, the code on the next call). Both calls may be mixed freely on
 * one reader. */
int tmk_proto_next_zones(tmk_proto_reader* r, tmk_proto_zone* out, size_t cap, uint32_t* thread);

/* Decode the body of an opened HELLO / WELCOME / REJECT / CONTROL packet.
 * Return 0 or a negative TMK_E* code (TMK_ETYPE if the packet is of another type). */
int tmk_proto_read_hello(tmk_proto_reader* r, tmk_proto_hello* out);
int tmk_proto_read_welcome(tmk_proto_reader* r, tmk_proto_welcome* out);
int tmk_proto_read_reject(tmk_proto_reader* r, tmk_proto_reject* out);
int tmk_proto_read_control(tmk_proto_reader* r, tmk_proto_control* out);

/* ---------------------------------------------------------------------------------------------
 * Encoder. Builds one DATA packet body in a caller buffer; tmk_proto_finish() adds the header
 * and, given LZ4 state memory, compresses. Every put is all-or-nothing: on TMK_ENOSPC the
 * writer is unchanged, so the caller finishes the packet and retries on a fresh one.
 * ------------------------------------------------------------------------------------------- */

typedef struct tmk_proto_writer {
  uint8_t* buf;
  uint32_t cap;
  /* from len to predict: the packet's state, which tmk_proto_writer_reset clears in one go */
  uint32_t len;     /* body bytes if the packet were finished now */
  uint32_t a_end;   /* record stream: buf[6, a_end) (6 bytes kept for the stream lengths) */
  uint32_t b_start; /* number stream: buf[b_start, cap), grows towards the front (§5) */
  uint64_t nacc;    /* number stream bits not yet stored, LSB first */
  uint32_t npend;
  uint32_t nstate[TMK_PROTO_NUM_CONTEXTS]; /* the contexts' states (§5.0); a speed build keeps a
                                             state of 0 as 4 (TMK__NOUT_U, tmk_proto_rice.h) */
  uint32_t records; /* records written since reset */
  uint32_t zones;   /* zones written since reset */
  uint64_t base_time;
  int has_base;
  int sealed;     /* finish() joined the streams; reset() before the next put */
  int big_endian; /* write fixed-width fields big-endian; defaults to the host's order */
  uint32_t thread;
  uint32_t root_depth;
  uint64_t zone_cursor;
  uint64_t event_cursor;
  tmk_proto_slot predict[2][TMK_PROTO_PREDICT_SLOTS]; /* [0] leaf durations, [1] parent tails */
  /* tmk_proto_put_zones' open-zone stack during one call (not state): here rather than on the
   * stack, which a small board has little of */
  uint64_t open_end[TMK_PROTO_MAX_OPEN];
  uint32_t open_site[TMK_PROTO_MAX_OPEN];
} tmk_proto_writer;

/* Prepares a writer over `body` (cap bytes, 64 .. TMK_PROTO_MAX_PACKET - TMK_PROTO_MAX_HEADER;
 * use max_packet - TMK_PROTO_MAX_HEADER so the packet always fits uncompressed).
 * Returns 0 or TMK_EINVAL. */
int tmk_proto_writer_init(tmk_proto_writer* w, void* body, size_t cap);
/* Empties the writer for the next packet (keeps buffer and byte order). */
void tmk_proto_writer_reset(tmk_proto_writer* w);
/* Returns 1 if nothing has been put since the last reset. */
int tmk_proto_writer_empty(const tmk_proto_writer* w);

/* Writes one record given in its decoded form (tmk_proto_next's output): any type but
 * TMK_REC_ZONE (zones go through tmk_proto_put_zones). It reads only the union member of
 * rec->type; rec->thread is the named thread of a THREAD_NAME and is ignored otherwise
 * (tmk_proto_put_thread switches threads). The puts below
 * are this call for one type. Returns 0 or a negative TMK_E* code (TMK_EINVAL, TMK_ENOSPC,
 * TMK_ESTATE). */
int tmk_proto_put_record(tmk_proto_writer* w, const tmk_proto_record* rec);
/* Switches the thread that following zone/marker/frame/plot/message records belong to. */
int tmk_proto_put_thread(tmk_proto_writer* w, uint32_t thread);
int tmk_proto_put_site(tmk_proto_writer* w, const tmk_proto_site* site);
/* Writes zones of the current thread. Best packed when sorted by start, then depth (the order
 * a depth-first walk visits them), but any order is valid. Returns how many zones of `zones`
 * were written (0..n; less than n when the packet is full) or a negative TMK_E* code. With
 * TMK_PROTO_TIME32 a zone further than TMK_PROTO_TIME32_REACH from the packet's base time also
 * ends the packet's zones, and one that no packet can take (it would be the packet's first
 * timed record, and it is longer than the reach) is TMK_ERANGE. */
int tmk_proto_put_zones(tmk_proto_writer* w, const tmk_proto_zone* zones, size_t n);
int tmk_proto_put_marker(tmk_proto_writer* w, int is_end, uint32_t site, uint64_t time,
                         const void* payload, size_t payload_len);
int tmk_proto_put_frame(tmk_proto_writer* w, uint32_t site, uint64_t time);
int tmk_proto_put_plot_i(tmk_proto_writer* w, uint32_t site, uint64_t time, int64_t value);
int tmk_proto_put_plot_d(tmk_proto_writer* w, uint32_t site, uint64_t time, double value);
int tmk_proto_put_message(tmk_proto_writer* w, uint32_t site, uint8_t severity,
                          uint32_t verbosity, uint64_t time, const char* text, size_t len);
int tmk_proto_put_thread_name(tmk_proto_writer* w, uint32_t thread, const char* name,
                              size_t len);
int tmk_proto_put_drops(tmk_proto_writer* w, uint32_t reason, uint64_t count);
int tmk_proto_put_clock(tmk_proto_writer* w, uint64_t ticks, uint64_t unix_ns);
int tmk_proto_put_team(tmk_proto_writer* w, uint32_t bit, const char* name, size_t len);

/* Writes header + body as one DATA packet into `out`. Compresses with LZ4 when `lz4_state` is
 * non-NULL (tmk_proto_lz4_state_size() bytes, 8-byte aligned) and that saves bytes.
 * out_cap >= TMK_PROTO_MAX_HEADER + w->len always suffices. Seals the writer: it may be
 * finished again (same packet) but takes no more puts until tmk_proto_writer_reset().
 * Returns the packet length or a negative TMK_E* code. */
int tmk_proto_finish(tmk_proto_writer* w, uint64_t session_id, uint64_t seq, void* out,
                     size_t out_cap, void* lz4_state);

/* Control packets: each returns the packet length or a negative TMK_E* code. */
int tmk_proto_encode_hello(void* out, size_t cap, uint64_t session_id, const tmk_proto_hello* h);
int tmk_proto_encode_welcome(void* out, size_t cap, uint64_t session_id,
                             const tmk_proto_welcome* w);
int tmk_proto_encode_reject(void* out, size_t cap, uint64_t session_id,
                            const tmk_proto_reject* rj);
int tmk_proto_encode_control(void* out, size_t cap, uint64_t session_id,
                             const tmk_proto_control* c);
int tmk_proto_encode_bye(void* out, size_t cap, uint64_t session_id);

/* ---------------------------------------------------------------------------------------------
 * Authentication (§2.1): SipHash-2-4 with a 128-bit key over every byte before the MAC.
 * In tmk_proto_siphash.c, which a program that never calls these does not link.
 * ------------------------------------------------------------------------------------------- */

/* SipHash-2-4 of `len` bytes with a 16-byte key. Returns the 64-bit tag; its wire form is the
 * tag's 8 bytes least significant first (the byte order of the SipHash paper's vectors). */
uint64_t tmk_proto_siphash(const uint8_t key[TMK_PROTO_KEY_LEN], const void* data, size_t len);

/* Keys a finished packet of `len` bytes in place: sets TMK_PKT_F_MAC in its header and appends
 * the MAC of every byte before it. `cap` is the buffer's size. Returns the new length (len + 8),
 * TMK_ENOSPC when it does not fit (cap, or TMK_PROTO_MAX_PACKET), TMK_EINVAL for a packet that
 * is not one (shorter than 14 bytes) or already keyed. */
int tmk_proto_mac_seal(void* packet, size_t len, size_t cap, const uint8_t key[TMK_PROTO_KEY_LEN]);

/* Checks a packet's MAC against `key` in constant time. Returns 0 when TMK_PKT_F_MAC is set and
 * the MAC matches, TMK_EAUTH when the flag is missing or the MAC does not match, TMK_ETRUNC for a
 * packet too short to hold a header and a MAC. Safe on malicious input. */
int tmk_proto_mac_check(const void* packet, size_t len, const uint8_t key[TMK_PROTO_KEY_LEN]);

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

/* Bytes of LZ4 state tmk_proto_finish() needs; 0 when built without LZ4. */
size_t tmk_proto_lz4_state_size(void);

/* TCP framing (§1): every packet is preceded by its length as a varint.
 * tmk_proto_frame_prefix writes it (<= 3 bytes) and returns its size, or TMK_ETOOBIG.
 * tmk_proto_frame_parse reads one: returns the prefix size and sets *len, 0 if more bytes are
 * needed, or a negative TMK_E* code for a length of 0 or above TMK_PROTO_MAX_PACKET. */
int tmk_proto_frame_prefix(uint8_t out[3], size_t len);
int tmk_proto_frame_parse(const void* data, size_t avail, uint32_t* len);

/* Converts ticks at `freq` ticks per second to nanoseconds without overflow for any
 * freq <= 18 GHz. Returns 0 when freq is 0. */
uint64_t tmk_proto_ticks_to_ns(uint64_t ticks, uint64_t freq);

/* Returns 1 on a big-endian host. */
int tmk_proto_host_big_endian(void);

/* Name tables for logs and dumps; each returns "?" for unknown values. */
const char* tmk_proto_severity_name(unsigned severity);
const char* tmk_proto_site_kind_name(unsigned kind);
const char* tmk_proto_drop_reason_name(unsigned reason);
const char* tmk_proto_packet_type_name(unsigned type);

/* Formats one decoded record as a single line of text (no newline), the form used by the
 * golden vectors in tests/vectors/ and by dump tools. Strings are printed with C escapes.
 * Returns the length it wanted to write (like snprintf); the output is NUL-terminated when
 * cap > 0. */
int tmk_proto_format_record(const tmk_proto_record* rec, char* out, size_t cap);

/* Low-level varint codec, exposed for the relay's recording format and for tests.
 * put returns bytes written (1..10); get returns bytes read, or TMK_ETRUNC / TMK_EVARINT. */
int tmk_proto_varint_put(uint8_t* out, uint64_t v);
int tmk_proto_varint_get(const uint8_t* p, const uint8_t* end, uint64_t* v);

#ifdef __cplusplus
}
#endif
#endif /* TMK_PROTO_H */
