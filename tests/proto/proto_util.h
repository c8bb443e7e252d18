/* proto_util.h — helpers shared by the protocol tests: build packets with the writer API, decode
 * whole packets into record arrays, compare zone sets, and a small site resolver. Nothing here
 * asserts (assertions live in the test files, so the mini runner's longjmp stays local). */
#ifndef TMK_PROTO_UTIL_H
#define TMK_PROTO_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "tmk_proto.h"

#define PT_MAX_RECS 20000

/* One decoded packet. Strings in recs point into `copy` or `scratch`, which it owns. */
typedef struct pt_decoded {
  tmk_proto_header hdr;
  int rc; /* 0, or the first negative code of tmk_proto_open / tmk_proto_next */
  int failed_in_open;
  size_t n;
  tmk_proto_record* recs;
  uint8_t* scratch;
  uint8_t* copy;
} pt_decoded;

/* pt_decode's code when the batched zone decoder disagreed with the reference (not a TMK_E*). */
#define PT_EBATCH (-1000)

/* Decodes every record of a DATA packet (copied into an exactly-sized buffer first, so that an
 * over-read is caught by sanitizers) with tmk_proto_next. Then decodes it again with the batched
 * zone decoder (pt_decode_batched, with runs of 1, 2, 7 and any number of zones) and compares
 * record by record: on any difference it prints both sides and d->rc becomes PT_EBATCH, so every
 * test that decodes through here checks both paths. Returns d->rc. Call pt_decoded_free. */
int pt_decode(pt_decoded* d, const void* packet, size_t len);
/* The same packet decoded with tmk_proto_next_zones (at most `run` zones a call) for the zones
 * and tmk_proto_next for everything else. Returns d->rc. */
int pt_decode_batched(pt_decoded* d, const void* packet, size_t len, size_t run);
/* Compares two decodings record by record (code, count, every record's type, thread and
 * formatted text). Returns -1 when equal, else the first differing index (printed to stderr). */
long pt_decodings_differ(const pt_decoded* ref, const pt_decoded* got, const char* what);
void pt_decoded_free(pt_decoded* d);
/* Copies the zones of a decoded packet (in decode order) to out; returns how many. */
size_t pt_zones_of(const pt_decoded* d, tmk_proto_zone* out, size_t cap, uint32_t thread);

/* A writer with its own body buffer, output buffer and (optionally) LZ4 state. */
typedef struct pt_enc {
  tmk_proto_writer w;
  uint8_t* body;
  size_t body_cap;
  uint8_t* pkt;
  size_t pkt_cap;
  int pkt_len;
  void* lz4;
} pt_enc;

/* Returns NULL on allocation failure or when tmk_proto_writer_init refuses body_cap.
 * big_endian: -1 leaves the writer's default, 0 or 1 sets it. lz4: allocate LZ4 state if the
 * build has LZ4. */
pt_enc* pt_enc_new(size_t body_cap, int big_endian, int lz4);
void pt_enc_free(pt_enc* e);
/* tmk_proto_finish into e->pkt; returns and stores the length (or the negative code). */
int pt_enc_finish(pt_enc* e, uint64_t session, uint64_t seq);

/* Orders zones by thread-independent key (start, depth, site, duration). */
void pt_sort_zones(tmk_proto_zone* z, size_t n);
/* Sorts copies of both sets and compares them. Returns -1 if equal, else the first differing
 * index (or the shorter length), after printing both sides to stderr. */
long pt_zone_sets_differ(const tmk_proto_zone* a, size_t na, const tmk_proto_zone* b, size_t nb);
/* Prints one zone (to stderr) for diagnostics. */
void pt_print_zone(const char* what, const tmk_proto_zone* z);

/* Deterministic PRNG (xorshift64*). */
uint64_t pt_rand(uint64_t* state);

/* Writes a LEB128 varint / zigzag svarint into p; returns bytes written. */
size_t pt_varint(uint8_t* p, uint64_t v);
size_t pt_svarint(uint8_t* p, int64_t v);
/* Writes a packet header by hand (§2): returns its length. */
size_t pt_header(uint8_t* p, uint8_t flags, uint8_t type, uint64_t session, uint64_t seq,
                 uint64_t base, uint32_t raw_len);

/* A relay-like site table: records naming a site not described yet wait in a pending list and
 * are resolved when the descriptor arrives (§5.1). Strings are copied. */
#define PT_RES_SITES 256
#define PT_RES_PENDING 4096
typedef struct pt_resolved {
  uint32_t site;
  uint64_t time;
  char name[64]; /* "" until resolved */
} pt_resolved;
typedef struct pt_resolver {
  char names[PT_RES_SITES][64];
  uint8_t known[PT_RES_SITES];
  pt_resolved out[PT_RES_PENDING];
  size_t nout;
  size_t unresolved;
} pt_resolver;
void pt_resolver_init(pt_resolver* r);
/* Feeds one decoded record; zones, markers, plots and messages with a site are kept. */
void pt_resolver_feed(pt_resolver* r, const tmk_proto_record* rec);

#endif
