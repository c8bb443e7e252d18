/* test_relay_core.c — unit tests of the relay's core: the reorder buffer (order, duplicates,
 * loss by count and by age, late packets), the recording format (round trip, every possible torn
 * tail, corrupt chunks, agent files), the store (decode, queries, budget eviction), JSON. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relay_core.h"
#include "tmk_test.h"

/* ---------------------------------------------------------------------------------------------
 * Reorder
 * ------------------------------------------------------------------------------------------- */
typedef struct got {
  uint64_t seqs[4096];
  size_t n;
} got;

static void on_deliver(void* ud, const uint8_t* p, size_t len, uint64_t seq) {
  got* g = ud;
  assert_int_equal(len, 8);
  uint64_t inside;
  memcpy(&inside, p, 8);
  assert_int_equal(inside, seq); /* the payload travelled with its seq */
  g->seqs[g->n++] = seq;
}

static int push(tmk__reorder* ro, uint64_t seq, uint64_t now, got* g) {
  uint8_t p[8];
  memcpy(p, &seq, 8);
  return tmk__reorder_push(ro, seq, p, 8, now, on_deliver, g);
}

static void test_reorder_in_order_and_swaps(void** state) {
  (void)state;
  tmk__reorder ro;
  got g = {{0}, 0};
  assert_int_equal(tmk__reorder_init(&ro, 16, 100), 0);
  uint64_t order[] = {0, 2, 1, 3, 5, 4, 4, 6, 2};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) push(&ro, order[i], 0, &g);
  assert_int_equal(g.n, 7);
  for (size_t i = 0; i < 7; i++) assert_int_equal(g.seqs[i], i);
  assert_int_equal(ro.duplicated, 2);
  assert_int_equal(ro.reordered, 2);
  assert_int_equal(ro.lost, 0);
  tmk__reorder_free(&ro);
}

static void test_reorder_loss_by_window_and_age(void** state) {
  (void)state;
  tmk__reorder ro;
  got g = {{0}, 0};
  assert_int_equal(tmk__reorder_init(&ro, 8, 100), 0);
  push(&ro, 0, 0, &g);
  push(&ro, 2, 0, &g); /* 1 missing */
  assert_int_equal(g.n, 1);
  tmk__reorder_tick(&ro, 50, 0, on_deliver, &g); /* too young */
  assert_int_equal(g.n, 1);
  tmk__reorder_tick(&ro, 100, 0, on_deliver, &g); /* the window has passed seq 1 */
  assert_int_equal(g.n, 2);
  assert_int_equal(g.seqs[1], 2);
  assert_int_equal(ro.lost, 1);
  /* by count: 4 is missing, 5..12 arrive; 12 pushes the window past 4 */
  push(&ro, 3, 200, &g);
  for (uint64_t s = 5; s <= 12; s++) push(&ro, s, 200, &g);
  assert_int_equal(ro.lost, 2);
  assert_int_equal(g.seqs[g.n - 1], 12);
  assert_int_equal(g.n, 11);
  /* late: 4 arrives after being declared lost: delivered, lost goes back */
  push(&ro, 4, 300, &g);
  assert_int_equal(ro.lost, 1);
  assert_int_equal(ro.late, 1);
  assert_int_equal(g.seqs[g.n - 1], 4);
  /* and again: now it is a duplicate */
  push(&ro, 4, 300, &g);
  assert_int_equal(ro.duplicated, 1);
  /* a jump short of TMK__REORDER_FAR counts the gap as lost */
  push(&ro, 3000, 400, &g);
  tmk__reorder_tick(&ro, 400, 1, on_deliver, &g);
  assert_int_equal(ro.lost, 1 + (3000 - 13));
  assert_int_equal(g.seqs[g.n - 1], 3000);
  tmk__reorder_free(&ro);
}

/* Issue 15 item 3: one packet far ahead (a spoofed seq of next + 2^40) is refused and counted;
 * the session goes on. A run of them after a quiet second is an agent back from an outage: a
 * new epoch. A run while the in-range stream is alive is not. */
static void test_reorder_far_jump(void** state) {
  (void)state;
  tmk__reorder ro;
  got g = {{0}, 0};
  assert_int_equal(tmk__reorder_init(&ro, 16, 100), 0);
  for (uint64_t s = 0; s < 10; s++) push(&ro, s, 0, &g);
  assert_int_equal(push(&ro, 10 + (1ull << 40), 10, &g), 0);
  assert_int_equal(push(&ro, 10 + TMK__REORDER_FAR, 10, &g), 0);
  for (uint64_t s = 10; s < 20; s++) assert_int_equal(push(&ro, s, 20, &g), 1);
  assert_int_equal(g.n, 20);
  assert_int_equal(ro.lost, 0);
  assert_int_equal(ro.refused, 2);
  /* a run far ahead while the stream is alive (a packet in range every 10 ms): refused */
  for (uint64_t k = 0; k < 20; k++) {
    assert_int_equal(push(&ro, 100000 + k, 30 + 10 * k, &g), 0);
    assert_int_equal(push(&ro, 20 + k, 30 + 10 * k, &g), 1);
  }
  assert_int_equal(ro.epochs, 0);
  /* the stream jumps (an outage, a burst of kernel drops) and goes on from there: once nothing
   * came in range for the window's 100 ms, the run starts a new epoch; the gap is loss */
  for (uint64_t k = 0; k < TMK__REORDER_EPOCH_RUN; k++) push(&ro, 50000 + k, 400, &g);
  assert_int_equal(ro.epochs, 1);
  assert_int_equal(g.seqs[g.n - 1], 50000 + TMK__REORDER_EPOCH_RUN - 1);
  push(&ro, 50000 + TMK__REORDER_EPOCH_RUN, 400, &g);
  assert_int_equal(g.seqs[g.n - 1], 50000 + TMK__REORDER_EPOCH_RUN);
  assert_int_equal(ro.lost, 50000 - 40);
  /* a jump beyond any outage (a forged 2^40) is not counted as loss when it wins */
  uint64_t lost = ro.lost;
  for (uint64_t k = 0; k < TMK__REORDER_EPOCH_RUN; k++) push(&ro, (1ull << 40) + k, 600, &g);
  assert_int_equal(ro.epochs, 2);
  assert_int_equal(ro.lost, lost);
  /* the old stream is now far behind: refused, not delivered */
  assert_int_equal(push(&ro, 50100, 600, &g), 0);
  tmk__reorder_free(&ro);
}

/* A keyed session (PROTOCOL.md §2.1): its packets can be replayed, not forged. A replayed run
 * far behind never starts an epoch back in time, and after a genuine forward epoch the packets
 * of the old one are duplicates, not late arrivals. */
static void test_reorder_keyed_replay(void** state) {
  (void)state;
  tmk__reorder ro;
  got g = {{0}, 0};
  for (int keyed = 0; keyed < 2; keyed++) {
    g.n = 0;
    assert_int_equal(tmk__reorder_init(&ro, 16, 100), 0);
    ro.forward_only = keyed;
    const uint64_t b = 100000; /* a relay that joined late */
    for (uint64_t s = b; s < b + 20; s++) push(&ro, s, 0, &g);
    /* forward epoch (an outage) of FAR + 100: the old stream's last packets are in history */
    for (uint64_t k = 0; k < TMK__REORDER_EPOCH_RUN; k++)
      push(&ro, b + 20 + TMK__REORDER_FAR + 100 + k, 400, &g);
    assert_int_equal(ro.epochs, 1);
    size_t n = g.n;
    for (uint64_t s = b + 10; s < b + 20; s++) push(&ro, s, 401, &g); /* replayed, pre-jump */
    assert_int_equal(g.n, keyed ? n : n + 10); /* unkeyed: taken as late arrivals */
    /* a run far behind after a quiet window (replayed from long ago) */
    uint64_t next = ro.next;
    for (uint64_t k = 0; k < TMK__REORDER_EPOCH_RUN; k++) push(&ro, next - 20000 + k, 800, &g);
    assert_int_equal(ro.epochs, keyed ? 1 : 2);
    tmk__reorder_free(&ro);
  }
}

static void test_reorder_late_join(void** state) {
  (void)state;
  tmk__reorder ro;
  got g = {{0}, 0};
  assert_int_equal(tmk__reorder_init(&ro, 8, 100), 0);
  push(&ro, 5000, 0, &g); /* joined a running session: nothing before counts as lost */
  push(&ro, 5001, 0, &g);
  assert_int_equal(g.n, 2);
  assert_int_equal(ro.lost, 0);
  tmk__reorder_free(&ro);
}

/* ---------------------------------------------------------------------------------------------
 * Recording format
 * ------------------------------------------------------------------------------------------- */
typedef struct seen {
  size_t n;
  int bad;
} seen;

static int count_packet(void* ud, const uint8_t* p, size_t len) {
  seen* s = ud;
  /* every packet is 10 + i bytes filled with the byte i */
  if (len != 10 + s->n % 50) s->bad = 1;
  for (size_t k = 0; k < len; k++)
    if (p[k] != (uint8_t)s->n) s->bad = 1;
  s->n++;
  return 0;
}

static uint8_t* slurp(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t* b = malloc((size_t)n + 64);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

static void test_recording_roundtrip_and_every_torn_tail(void** state) {
  (void)state;
  char path[] = "/tmp/tmk-rec-test-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  unlink(path);
  tmk__rec_writer w;
  tmk__rec_session rs;
  memset(&rs, 0, sizeof rs);
  rs.session_id = 0x1122334455667788ull;
  rs.created_unix_ns = 42;
  strcpy(rs.transport, "udp");
  strcpy(rs.source, "127.0.0.1:9");
  strcpy(rs.relay_version, "t");
  assert_int_equal(tmk__rec_create(&w, path, &rs), 0);
  /* chunk boundaries: flush after packets 100, 250 and 400 (explicitly) */
  size_t boundaries[4] = {100, 250, 400, 0};
  size_t nb = 0;
  uint8_t pk[64];
  for (size_t i = 0; i < 400; i++) {
    memset(pk, (uint8_t)i, sizeof pk);
    assert_int_equal(tmk__rec_packet(&w, pk, 10 + i % 50), 0);
    if (i + 1 == boundaries[nb]) {
      assert_int_equal(tmk__rec_flush(&w, 0), 0);
      nb++;
    }
  }
  tmk__rec_stats st = {1, 2, 3, 4, 5, 6};
  assert_int_equal(tmk__rec_write_stats(&w, &st), 0);
  assert_int_equal(tmk__rec_close(&w), 0);
  size_t len;
  uint8_t* data = slurp(path, &len);
  unlink(path);

  tmk__rec_read_result res;
  seen s = {0, 0};
  assert_int_equal(tmk__rec_read(data, len, count_packet, &s, &res), 0);
  assert_int_equal(s.n, 400);
  assert_false(s.bad);
  assert_true(res.clean_end);
  assert_true(res.have_session);
  assert_int_equal(res.session.session_id, 0x1122334455667788ull);
  assert_string_equal(res.session.source, "127.0.0.1:9");
  assert_true(res.have_stats);
  assert_int_equal(res.stats.late, 4);
  assert_int_equal(res.tail_error, 0);

  /* Every truncation point: the reader returns exactly the packets of the complete chunks
   * before it, never a partial or misread one. */
  size_t prev = 0;
  for (size_t cut = 8; cut < len; cut++) {
    seen t = {0, 0};
    assert_int_equal(tmk__rec_read(data, cut, count_packet, &t, &res), 0);
    assert_false(t.bad);
    assert_true(t.n == 0 || t.n == 100 || t.n == 250 || t.n == 400);
    assert_true(t.n >= prev);
    prev = t.n;
    assert_int_equal(res.valid_bytes + res.torn_bytes, cut);
  }
  /* A flipped byte anywhere inside the second chunk stops the reader after the first. */
  seen t = {0, 0};
  tmk__rec_read(data, len, NULL, NULL, &res);
  size_t first_end = 0;
  {
    /* find the end of chunk 2 (SESSION) + chunk 3 (first PACKETS) by reading with a cut */
    for (size_t cut = 8; cut < len; cut++) {
      seen u = {0, 0};
      tmk__rec_read(data, cut, count_packet, &u, &res);
      if (u.n == 100) {
        first_end = cut;
        break;
      }
    }
  }
  assert_true(first_end > 0);
  data[first_end + 20] ^= 0x40;
  assert_int_equal(tmk__rec_read(data, len, count_packet, &t, &res), 0);
  assert_int_equal(t.n, 100);
  assert_int_equal(res.tail_error, TMK_ECORRUPT);
  /* Not a recording at all. */
  assert_int_equal(tmk__rec_read((const uint8_t*)"hello world", 11, NULL, NULL, &res), TMK_EMAGIC);
  free(data);
}

static void test_crc32c_check_value(void** state) {
  (void)state;
  assert_int_equal(tmk__crc32c(0, "123456789", 9), 0xE3069283u); /* RECORDING.md §2 */
  uint32_t part = tmk__crc32c(0, "1234", 4);
  assert_int_equal(tmk__crc32c(part, "56789", 5), 0xE3069283u);
}

/* Bit at a time, straight from the polynomial: what both table and instruction must give. */
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t* p, size_t len) {
  crc = ~crc;
  while (len--) {
    crc ^= *p++;
    for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

static void test_crc32c_every_offset_and_length(void** state) {
  (void)state;
  static uint8_t buf[600];
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof buf; i++) {
    x = x * 1103515245u + 12345u;
    buf[i] = (uint8_t)(x >> 23);
  }
  for (size_t off = 0; off < 16; off++)
    for (size_t len = 0; len + off <= sizeof buf; len += len < 40 ? 1 : 37) {
      uint32_t want = crc32c_bitwise(0x1234u, buf + off, len);
      assert_int_equal(tmk__crc32c(0x1234u, buf + off, len), want);
      assert_int_equal(tmk__crc32c_tables(0x1234u, buf + off, len), want);
      /* in two pieces, split anywhere */
      uint32_t part = tmk__crc32c(0x1234u, buf + off, len / 3);
      assert_int_equal(tmk__crc32c(part, buf + off + len / 3, len - len / 3), want);
    }
  assert_int_equal(tmk__crc32c_tables(0, "123456789", 9), 0xE3069283u);
}

static void test_agent_file(void** state) {
  (void)state;
  uint8_t buf[4096];
  size_t len = 0;
  memcpy(buf, "TMKFILE1", 8);
  len = 8;
  uint8_t pk[64];
  for (size_t i = 0; i < 20; i++) {
    size_t n = 10 + i % 50;
    memset(pk, (uint8_t)i, n);
    len += (size_t)tmk_proto_frame_prefix(buf + len, n);
    memcpy(buf + len, pk, n);
    len += n;
  }
  tmk__rec_read_result res;
  seen s = {0, 0};
  assert_int_equal(tmk__rec_read(buf, len, count_packet, &s, &res), 0);
  assert_true(res.agent_file);
  assert_int_equal(s.n, 20);
  seen t = {0, 0};
  assert_int_equal(tmk__rec_read(buf, len - 3, count_packet, &t, &res), 0);
  assert_int_equal(t.n, 19);
  assert_int_equal(res.tail_error, TMK_ETRUNC);
}

/* ---------------------------------------------------------------------------------------------
 * Store
 * ------------------------------------------------------------------------------------------- */
static size_t make_packet(uint8_t* out, size_t cap, uint64_t seq, uint32_t nzones, int with_site) {
  uint8_t body[1200];
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, body, sizeof body);
  if (with_site) {
    tmk_proto_site s;
    memset(&s, 0, sizeof s);
    s.id = 3;
    s.name.ptr = "Work";
    s.name.len = 4;
    s.file.ptr = "w.c";
    s.file.len = 3;
    assert_true(tmk_proto_put_site(&w, &s) >= 0);
  }
  tmk_proto_zone z[64];
  for (uint32_t i = 0; i < nzones; i++) {
    z[i].start = 1000000 * seq + i * 100;
    z[i].duration = 50;
    z[i].site = 3;
    z[i].depth = 0;
  }
  assert_int_equal(tmk_proto_put_zones(&w, z, nzones), (int)nzones);
  int n = tmk_proto_finish(&w, 77, seq, out, cap, NULL);
  assert_true(n > 0);
  return (size_t)n;
}

typedef struct zc {
  size_t n;
  uint64_t first_start;
} zc;
static int count_zone(void* ud, const tmk_relay_zone* z) {
  zc* c = ud;
  if (c->n == 0) c->first_start = z->start_ns;
  c->n++;
  return 0;
}

static void test_store_decode_query_and_budget(void** state) {
  (void)state;
  tmk__store* st = tmk__store_new(1 << 20);
  assert_non_null(st);
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  uint8_t pk[1300];
  /* zones before their site's descriptor: kept, unresolved, then resolved */
  size_t n = make_packet(pk, sizeof pk, 0, 10, 0);
  assert_int_equal(tmk__store_packet(st, pk, n, scratch), 10);
  tmk_relay_session_info info;
  memset(&info, 0, sizeof info);
  tmk__store_fill_info(st, &info);
  assert_int_equal(info.stats.unresolved_sites, 1);
  n = make_packet(pk, sizeof pk, 1, 10, 1);
  assert_int_equal(tmk__store_packet(st, pk, n, scratch), 11);
  memset(&info, 0, sizeof info);
  tmk__store_fill_info(st, &info);
  assert_int_equal(info.stats.unresolved_sites, 0);
  assert_int_equal(info.stats.zones, 20);
  tmk_relay_query q;
  memset(&q, 0, sizeof q);
  q.thread = -1;
  q.t0_ns = 1000000;
  q.t1_ns = 1000000 + 250;
  zc c = {0, 0};
  tmk__store_zones(st, &q, count_zone, &c);
  assert_int_equal(c.n, 3); /* zones at +0, +100, +200 */
  assert_int_equal(c.first_start, 1000000);
  /* a truncated packet is counted as malformed and nothing of it is stored, not even the
   * records before the point where it broke */
  n = make_packet(pk, sizeof pk, 2, 30, 0);
  assert_true(tmk__store_packet(st, pk, n - 3, scratch) < 0);
  memset(&info, 0, sizeof info);
  tmk__store_fill_info(st, &info);
  assert_int_equal(info.stats.zones, 20);
  assert_int_equal(info.stats.malformed, 1);
  /* fill far beyond the 1 MiB budget: memory stays bounded, eviction counted */
  for (uint64_t s = 2; s < 8000; s++) {
    n = make_packet(pk, sizeof pk, s, 60, 0);
    tmk__store_packet(st, pk, n, scratch);
  }
  memset(&info, 0, sizeof info);
  tmk__store_fill_info(st, &info);
  assert_true(info.stats.mem_bytes <= (1 << 20));
  assert_true(info.stats.evicted > 0);
  memset(&q, 0, sizeof q);
  q.thread = -1;
  q.limit = 1000000;
  c.n = 0;
  tmk__store_zones(st, &q, count_zone, &c);
  assert_int_equal(c.n + info.stats.evicted, info.stats.zones);
  assert_true(c.first_start > 1000000); /* the oldest went first */
  free(scratch);
  tmk__store_free(st);
}

/* One big packet of `nzones` zones on `thread`, `gap` ticks apart. */
static size_t make_thread_packet(uint8_t* out, size_t cap, uint64_t seq, uint32_t thread,
                                 uint32_t nzones, uint64_t gap) {
  static uint8_t body[60000];
  static tmk_proto_zone z[8192];
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, body, sizeof body);
  assert_true(tmk_proto_put_thread(&w, thread) >= 0);
  assert_true(nzones <= 8192);
  for (uint32_t i = 0; i < nzones; i++) {
    z[i].start = 1000000 + gap * i;
    z[i].duration = 50;
    z[i].site = 3;
    z[i].depth = 0;
  }
  assert_int_equal(tmk_proto_put_zones(&w, z, nzones), (int)nzones);
  int n = tmk_proto_finish(&w, 77, seq, out, cap, NULL);
  assert_true(n > 0);
  return (size_t)n;
}

typedef struct tz {
  uint32_t want;
  size_t n, wrong;
} tz;
static int check_thread(void* ud, const tmk_relay_zone* z) {
  tz* c = ud;
  c->n++;
  if (z->thread != c->want) c->wrong++;
  return 0;
}

/* Issue 15 item 1: chunks evicted after the thread table grew (and moved) must unlink from
 * their own thread, not write through a pointer into the old table. */
static void test_store_evict_after_thread_table_grows(void** state) {
  (void)state;
  tmk__store* st = tmk__store_new(1 << 20);
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  static uint8_t pk[TMK_PROTO_MAX_PACKET];
  for (uint32_t t = 0; t < 70; t++) {
    size_t n = make_thread_packet(pk, sizeof pk, t, t, 3000, 100);
    assert_int_equal(tmk__store_packet(st, pk, n, scratch), 3000);
  }
  tmk_relay_session_info info;
  memset(&info, 0, sizeof info);
  tmk__store_fill_info(st, &info);
  assert_true(info.stats.evicted > 0);
  assert_true(info.stats.mem_bytes <= (1 << 20));
  size_t total = 0;
  for (uint32_t t = 0; t < 70; t++) {
    tmk_relay_query q;
    memset(&q, 0, sizeof q);
    q.thread = t;
    q.limit = 1000000;
    tz c = {t, 0, 0};
    tmk__store_zones(st, &q, check_thread, &c);
    assert_int_equal(c.wrong, 0);
    total += c.n;
  }
  assert_int_equal(total + info.stats.evicted, info.stats.zones);
  free(scratch);
  tmk__store_free(st);
}

typedef struct zrun {
  uint32_t want;
  uint64_t next; /* expected start of the next zone in ns, 0 before the first */
  size_t n, wrong;
} zrun;
static int check_run(void* ud, const tmk_relay_zone* z) {
  zrun* c = ud;
  if (z->thread != c->want || z->dur_ns != 50 || z->site != 3 || (c->next && z->start_ns != c->next))
    c->wrong++;
  c->next = z->start_ns + 100;
  c->n++;
  return 0;
}

/* Issue 10: a store with a budget of 64 MiB or more takes its full zone chunks from slabs
 * (relay_slab.c). Two threads' chunks share the slabs; filling the budget twice over evicts
 * chunks and frees whole slabs in order, and what is left is intact: each thread's newest zones,
 * every one in sequence, none from a reused or unmapped block. Once at its budget the store
 * reuses its emptied slab instead of mapping fresh ones: over the whole run it maps about one
 * budget's worth of slabs, not two. */
/* Stores `packets` packets of `per` zones each, alternating threads 0 and 1; each thread's zones
 * go on where its previous packet stopped. */
static void fill_store(tmk__store* st, uint32_t packets, uint32_t per) {
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  static uint8_t pk[TMK_PROTO_MAX_PACKET];
  static tmk_proto_zone z[8000];
  static uint8_t body[60000];
  assert_non_null(scratch);
  assert_true(per <= 8000);
  for (uint32_t i = 0; i < packets; i++) {
    tmk_proto_writer w;
    tmk_proto_writer_init(&w, body, sizeof body);
    assert_true(tmk_proto_put_thread(&w, i % 2) >= 0);
    for (uint32_t k = 0; k < per; k++) {
      z[k].start = 1000000 + ((uint64_t)(i / 2) * per + k) * 100;
      z[k].duration = 50;
      z[k].site = 3;
      z[k].depth = 0;
    }
    assert_int_equal(tmk_proto_put_zones(&w, z, per), (int)per);
    int n = tmk_proto_finish(&w, 77, i, pk, sizeof pk, NULL);
    assert_true(n > 0);
    assert_int_equal(tmk__store_packet(st, pk, (size_t)n, scratch), (int)per);
  }
  free(scratch);
}

static void test_store_slabs_evict(void** state) {
  (void)state;
  size_t budget = (size_t)64 << 20;
  tmk__store* st = tmk__store_new(budget);
  uint32_t per = 8000, packets = 2 * (uint32_t)(budget / 16 / per) + 10;
  fill_store(st, packets, per);
  tmk_relay_session_info info;
  memset(&info, 0, sizeof info);
  tmk__store_fill_info(st, &info);
  assert_true(info.stats.evicted > (uint64_t)per * packets / 3);
  assert_true(info.stats.mem_bytes <= budget);
  size_t total = 0;
  for (uint32_t t = 0; t < 2; t++) {
    tmk_relay_query q;
    memset(&q, 0, sizeof q);
    q.thread = t;
    q.limit = 100000000;
    zrun c = {t, 0, 0, 0};
    tmk__store_zones(st, &q, check_run, &c);
    assert_int_equal(c.wrong, 0);
    total += c.n;
  }
  assert_int_equal(total + info.stats.evicted, info.stats.zones);
  uint64_t maps = tmk__store_slab_maps(st);
  if (maps > budget / TMK__SLAB_BYTES + 4)
    fail_msg("the store mapped %llu slabs for a %zu-slab budget filled twice over (reuse: <= %zu)",
             (unsigned long long)maps, budget / TMK__SLAB_BYTES, budget / TMK__SLAB_BYTES + 4);
  assert_true(maps >= budget / TMK__SLAB_BYTES / 2); /* it did use slabs */
  tmk__store_free(st);
}

/* A session's store, freed, gives its slabs to the process's pool (up to the pool's bound), and
 * the next store takes them before it maps new ones: the same pages, already faulted in
 * (relay_slab.c). */
static void test_store_slabs_reused_after_free(void** state) {
  (void)state;
  const uint64_t R = TMK__HUGE_PAGE;
  uint64_t kept, reused0, reused;
  tmk__pool_limit(0); /* empty */
  tmk__pool_limit(64 * R);
  tmk__store* a = tmk__store_new((size_t)64 << 20); /* 64 MiB and up: chunks from slabs */
  fill_store(a, 160, 8000); /* 1.28 M zones, ~20 MB of chunks: no eviction */
  const uint64_t maps = tmk__store_slab_maps(a);
  assert_true(maps >= 8);
  tmk__store_free(a);
  tmk__pool_stats(&kept, &reused0);
  assert_int_equal(kept, maps * R); /* every slab, the spare too */
  tmk__store* b = tmk__store_new((size_t)64 << 20);
  fill_store(b, 160, 8000);
  assert_int_equal(tmk__store_slab_maps(b), maps);
  tmk__pool_stats(&kept, &reused);
  assert_int_equal(reused - reused0, maps * R); /* each of b's slabs came from the pool */
  assert_int_equal(kept, 0);
  tmk__store_free(b);
  tmk__pool_limit(0);
}

typedef struct zlist {
  tmk_relay_zone z[20000];
  size_t n;
} zlist;
static int list_zone(void* ud, const tmk_relay_zone* z) {
  zlist* l = ud;
  l->z[l->n++] = *z;
  return 0;
}

/* Issue 15 item 7: a query in slices (the lock held per slice) returns what one pass returns,
 * and goes on sensibly when chunks are evicted between two slices. */
static void test_store_query_slices(void** state) {
  (void)state;
  tmk__store* st = tmk__store_new(1 << 20);
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  static uint8_t pk[TMK_PROTO_MAX_PACKET];
  for (uint32_t t = 0; t < 3; t++) {
    size_t n = make_thread_packet(pk, sizeof pk, t, t, 3000, 100);
    assert_int_equal(tmk__store_packet(st, pk, n, scratch), 3000);
  }
  static zlist whole, sliced;
  tmk_relay_query q;
  memset(&q, 0, sizeof q);
  q.thread = -1;
  q.limit = 1000000;
  q.t0_ns = 1000000 + 50000;
  whole.n = sliced.n = 0;
  tmk__store_zones(st, &q, list_zone, &whole);
  tmk__store_cursor cur;
  memset(&cur, 0, sizeof cur);
  while (!cur.done) {
    int k = tmk__store_zones_slice(st, &q, &cur, sliced.z + sliced.n, 7);
    assert_true(k >= 0 && k <= 7);
    sliced.n += (size_t)k;
  }
  assert_int_equal(sliced.n, whole.n);
  assert_memory_equal(sliced.z, whole.z, whole.n * sizeof whole.z[0]);
  /* evictions between slices: no zone twice, none from before the cursor, and it ends */
  memset(&cur, 0, sizeof cur);
  sliced.n = 0;
  q.thread = 1;
  uint32_t t = 3;
  while (!cur.done) {
    int k = tmk__store_zones_slice(st, &q, &cur, sliced.z + sliced.n, 50);
    sliced.n += (size_t)k;
    size_t n = make_thread_packet(pk, sizeof pk, t, t, 3000, 100);
    tmk__store_packet(st, pk, n, scratch);
    t++;
    assert_true(t < 200);
  }
  tmk_relay_session_info info;
  memset(&info, 0, sizeof info);
  tmk__store_fill_info(st, &info);
  assert_true(info.stats.evicted > 0);
  assert_true(sliced.n > 0 && sliced.n < 3000);
  for (size_t i = 1; i < sliced.n; i++) {
    assert_int_equal(sliced.z[i].thread, 1);
    assert_true(sliced.z[i].start_ns > sliced.z[i - 1].start_ns);
  }
  free(scratch);
  tmk__store_free(st);
}

/* What a tap saw: the zones of every run, read back from narrow or wide records. */
typedef struct tapped {
  uint64_t start[4000], dur[4000];
  uint32_t site[4000], depth[4000];
  size_t n, narrow, wide;
} tapped;
static void tap_collect(void* ud, uint32_t thread, uint64_t base, uint64_t freq, const void* recs,
                        uint32_t n, uint32_t rec) {
  tapped* t = ud;
  (void)thread;
  (void)freq;
  assert_true(rec == sizeof(tmk__tap_nrec) || rec == sizeof(tmk__tap_zrec));
  for (uint32_t i = 0; i < n && t->n < 4000; i++, t->n++) {
    const tmk__tap_zone z = tmk__tap_read((const uint8_t*)recs + (size_t)i * rec, rec);
    if (rec == sizeof(tmk__tap_nrec)) t->narrow++;
    else t->wide++;
    t->start[t->n] = base + (uint64_t)(int64_t)z.start_off;
    t->dur[t->n] = z.dur;
    t->site[t->n] = z.site;
    t->depth[t->n] = z.depth;
  }
}

/* Zones that a narrow (12-byte) record cannot hold (a duration of 2^32 ticks or more, a site of
 * 2^20 or more) go into wide chunks among narrow ones: every zone reads back as it went in, from
 * a query and from the tap, and zones that fit are stored in 12 bytes. */
static void test_store_narrow_and_wide_records(void** state) {
  (void)state;
  tmk__store* st = tmk__store_new(64 << 20);
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  static uint8_t pk[TMK_PROTO_MAX_PACKET];
  static uint8_t body[60000];
  static tmk_proto_zone z[3000];
  static tapped tap;
  memset(&tap, 0, sizeof tap);
  tmk__store_tap tp = {tap_collect, NULL, NULL, NULL, &tap};
  tmk__store_set_tap(st, &tp);
  uint64_t t = 1000000;
  for (uint32_t i = 0; i < 3000; i++) {
    z[i].start = t;
    z[i].duration = 50 + i % 7;
    z[i].site = 3 + i % 5;
    z[i].depth = 0;
    if (i % 97 == 5) z[i].duration = (1ull << 32) + i;   /* too long for a narrow record */
    if (i % 89 == 7) z[i].site = (1u << 20) + i;          /* too big a site */
    if (i == 1234) z[i].duration = 1ull << 50;             /* clamped to 48 bits */
    if (i >= 2000 && i < 2400 && i % 2) z[i].site = 0xFFFFFFF0u - i; /* wide and narrow in turn */
    t += z[i].duration + 10;
  }
  tmk_relay_session_info info;
  for (uint32_t i = 0; i < 3000; i += 250) {
    tmk_proto_writer w;
    tmk_proto_writer_init(&w, body, sizeof body);
    assert_true(tmk_proto_put_thread(&w, 9) >= 0);
    assert_int_equal(tmk_proto_put_zones(&w, z + i, 250), 250);
    int n = tmk_proto_finish(&w, 77, i / 250, pk, sizeof pk, NULL);
    assert_true(n > 0);
    assert_int_equal(tmk__store_packet(st, pk, (size_t)n, scratch), 250);
  }
  static zlist back;
  back.n = 0;
  tmk_relay_query q;
  memset(&q, 0, sizeof q);
  q.thread = -1;
  q.limit = 1000000;
  tmk__store_zones(st, &q, list_zone, &back);
  assert_int_equal(back.n, 3000);
  assert_int_equal(tap.n, 3000);
  assert_true(tap.narrow > 2000);
  assert_true(tap.wide > 100);
  for (uint32_t i = 0; i < 3000; i++) {
    const uint64_t dur = z[i].duration > 0xFFFFFFFFFFFFull ? 0xFFFFFFFFFFFFull : z[i].duration;
    assert_int_equal(back.z[i].start_ns, z[i].start); /* no HELLO: ns are ticks */
    assert_int_equal(back.z[i].dur_ns, dur);
    assert_int_equal(back.z[i].site, z[i].site);
    assert_int_equal(back.z[i].depth, 0);
    assert_int_equal(back.z[i].thread, 9);
    assert_int_equal(tap.start[i], z[i].start);
    assert_int_equal(tap.dur[i], dur);
    assert_int_equal(tap.site[i], z[i].site);
  }
  /* zones that all fit: 12 bytes each, and a little for their chunks' headers */
  tmk__store_free(st);
  st = tmk__store_new(64 << 20);
  uint64_t mem1 = 0;
  for (uint64_t s = 0; s <= 20; s++) {
    size_t n = make_thread_packet(pk, sizeof pk, s, 1, 1000, 100);
    assert_int_equal(tmk__store_packet(st, pk, n, scratch), 1000);
    memset(&info, 0, sizeof info);
    tmk__store_fill_info(st, &info);
    if (s == 0) mem1 = info.stats.mem_bytes; /* with the tables and decode buffers */
  }
  assert_int_equal(info.stats.zones, 21000);
  assert_true(info.stats.mem_bytes - mem1 < 20000 * 13);
  free(scratch);
  tmk__store_free(st);
}

static void test_store_live_ring(void** state) {
  (void)state;
  tmk__store* st = tmk__store_new(64 << 20);
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  uint8_t pk[1300];
  size_t n = make_packet(pk, sizeof pk, 0, 10, 1);
  tmk__store_packet(st, pk, n, scratch); /* before any follower: not in the ring */
  uint64_t cur = 99, skipped = 0;
  assert_int_equal(tmk__store_live_attach(st, &cur), 0);
  tmk_relay_live_item items[64];
  assert_int_equal(tmk__store_live_read(st, &cur, items, 64, &skipped), 0);
  n = make_packet(pk, sizeof pk, 1, 10, 0);
  tmk__store_packet(st, pk, n, scratch);
  assert_int_equal(tmk__store_live_read(st, &cur, items, 4, &skipped), 4);
  assert_true(items[0].is_zone);
  assert_int_equal(items[0].zone.start_ns, 1000000);
  assert_int_equal(items[0].zone.site, 3);
  assert_int_equal(tmk__store_live_read(st, &cur, items, 64, &skipped), 6);
  assert_int_equal(skipped, 0);
  /* a follower that does not read for a long time is told what it missed */
  for (uint64_t s = 2; s < 2000; s++) {
    n = make_packet(pk, sizeof pk, s, 10, 0);
    tmk__store_packet(st, pk, n, scratch);
  }
  int nread = tmk__store_live_read(st, &cur, items, 64, &skipped);
  assert_int_equal(nread, 64);
  assert_int_equal(skipped, 1998 * 10 - 16384);
  tmk__store_live_detach(st);
  free(scratch);
  tmk__store_free(st);
}

/* A packet of `n` zones on `thread`, all at the same times whatever `seq` (later packets overlap
 * earlier ones, as a late packet or a parent stored after its children does), and one frame. */
static size_t make_cut_packet(uint8_t* out, size_t cap, uint64_t seq, uint32_t thread, uint32_t n) {
  static uint8_t body[60000];
  static tmk_proto_zone z[4096];
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, body, sizeof body);
  assert_true(tmk_proto_put_thread(&w, thread) >= 0);
  for (uint32_t i = 0; i < n; i++) {
    z[i].start = 1000000 + 100 * i;
    z[i].duration = 50 + seq; /* tells the packets apart */
    z[i].site = 3;
    z[i].depth = 0;
  }
  assert_int_equal(tmk_proto_put_zones(&w, z, n), (int)n);
  assert_true(tmk_proto_put_frame(&w, 0, 1000000 + seq) >= 0);
  int len = tmk_proto_finish(&w, 77, seq, out, cap, NULL);
  assert_true(len > 0);
  return (size_t)len;
}

/* The cut taken with a follower's cursor (tmk__store_cut, tmk_relay_live_attach_cut): a query
 * through it returns exactly what was stored before, the follower exactly what came after, though
 * both cover the same times: more records in the tail chunk of the moment, new chunks of the same
 * thread, a new thread. */
static void test_store_live_cut(void** state) {
  (void)state;
  tmk__store* st = tmk__store_new(64 << 20);
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  static uint8_t pk[TMK_PROTO_MAX_PACKET];
  size_t n = make_cut_packet(pk, sizeof pk, 0, 0, 100);
  assert_int_equal(tmk__store_packet(st, pk, n, scratch), 101);
  uint64_t cur = 0, skipped = 0;
  assert_int_equal(tmk__store_live_attach(st, &cur), 0);
  tmk_relay_cut* cut = tmk__store_cut(st);
  assert_non_null(cut);
  n = make_cut_packet(pk, sizeof pk, 1, 0, 100); /* into the tail chunk of the cut */
  tmk__store_packet(st, pk, n, scratch);
  n = make_cut_packet(pk, sizeof pk, 2, 0, 4000); /* and on into new chunks of thread 0 */
  tmk__store_packet(st, pk, n, scratch);
  n = make_cut_packet(pk, sizeof pk, 3, 1, 100); /* a thread the cut did not know */
  tmk__store_packet(st, pk, n, scratch);
  tmk_relay_query q;
  memset(&q, 0, sizeof q);
  q.thread = -1;
  q.limit = 1000000;
  static zlist zs;
  zs.n = 0;
  tmk__store_zones(st, &q, list_zone, &zs);
  assert_int_equal(zs.n, 4300);
  q.cut = cut;
  zs.n = 0;
  tmk__store_zones(st, &q, list_zone, &zs);
  assert_int_equal(zs.n, 100);
  for (size_t i = 0; i < zs.n; i++) assert_int_equal(zs.z[i].dur_ns, 50);
  tmk__store_cursor qc;
  memset(&qc, 0, sizeof qc);
  size_t sliced = 0;
  while (!qc.done) sliced += (size_t)tmk__store_zones_slice(st, &q, &qc, zs.z, 7);
  assert_int_equal(sliced, 100);
  static tmk_relay_event ev[64];
  static char text[4096];
  size_t events = 0;
  memset(&qc, 0, sizeof qc);
  while (!qc.done)
    events += (size_t)tmk__store_events_slice(st, &q, 0, &qc, ev, 64, text, sizeof text);
  assert_int_equal(events, 1);
  static tmk_relay_live_item items[8192];
  size_t zones = 0, frames = 0, before = 0;
  int k;
  while ((k = tmk__store_live_read(st, &cur, items, 8192, &skipped)) > 0)
    for (int i = 0; i < k; i++) {
      if (items[i].is_zone) {
        zones++;
        before += items[i].zone.dur_ns == 50;
      } else {
        frames++;
      }
    }
  assert_int_equal(skipped, 0);
  assert_int_equal(zones, 4200);
  assert_int_equal(before, 0);
  assert_int_equal(frames, 3);
  free(cut);
  tmk__store_live_detach(st);
  free(scratch);
  tmk__store_free(st);
}

/* Live items keep the first 47 bytes of a longer message, cut before a character, never inside a
 * UTF-8 sequence, and say that they did (text_cut: the stream then takes the whole text from the
 * store); a text that fits is kept whole. */
static void test_store_live_text_cut(void** state) {
  (void)state;
  tmk__store* st = tmk__store_new(64 << 20);
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  uint8_t body[1200], pk[1300];
  char e2[61] = "", a47[48], a48[49];
  for (int i = 0; i < 30; i++) memcpy(e2 + 2 * i, "\xc3\xa9", 2); /* 30 x U+00E9, 60 bytes */
  memset(a47, 'a', 47);
  memset(a48, 'b', 48);
  const char* texts[3] = {e2, a47, a48};
  const size_t lens[3] = {60, 47, 48}, want[3] = {46, 47, 47};
  uint64_t cur = 0, skipped = 0;
  assert_int_equal(tmk__store_live_attach(st, &cur), 0);
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, body, sizeof body);
  for (int i = 0; i < 3; i++)
    assert_true(tmk_proto_put_message(&w, 0, 3, 1, 1000 + (uint64_t)i, texts[i], lens[i]) >= 0);
  int n = tmk_proto_finish(&w, 77, 0, pk, sizeof pk, NULL);
  assert_true(n > 0);
  tmk__store_packet(st, pk, (size_t)n, scratch);
  tmk_relay_live_item items[8];
  assert_int_equal(tmk__store_live_read(st, &cur, items, 8, &skipped), 3);
  for (int i = 0; i < 3; i++) {
    assert_false(items[i].is_zone);
    assert_int_equal(items[i].event.text_len, want[i]);
    assert_int_equal(items[i].text_cut, want[i] < lens[i]);
    assert_memory_equal(items[i].event.text, texts[i], want[i]);
  }
  tmk__store_live_detach(st);
  free(scratch);
  tmk__store_free(st);
}

static void test_json_escaping(void** state) {
  (void)state;
  tmk__json j;
  tmk__json_init(&j);
  tmk__json_begin_obj(&j);
  tmk__json_key(&j, "s");
  tmk__json_str(&j, "a\"b\\c\n\x01", 7);
  tmk__json_key(&j, "n");
  tmk__json_u64(&j, UINT64_MAX);
  tmk__json_key(&j, "a");
  tmk__json_begin_arr(&j);
  tmk__json_i64(&j, -5);
  tmk__json_f64(&j, 0.5);
  tmk__json_bool(&j, 1);
  tmk__json_end_arr(&j);
  tmk__json_end_obj(&j);
  assert_string_equal(j.buf,
                      "{\"s\":\"a\\\"b\\\\c\\n\\u0001\",\"n\":18446744073709551615,\"a\":[-5,0.5,true]}");
  tmk__json_free(&j);
  /* UTF-8 passes through; invalid bytes (a lone 0xFF, a cut sequence, an overlong form, a
   * surrogate) become U+FFFD so the document stays valid */
  tmk__json_init(&j);
  tmk__json_str(&j, "\xc3\xa9\xf0\x9f\x98\x80|\xff|\xc3|\xc0\xaf|\xed\xa0\x80", 17);
  assert_string_equal(j.buf, "\"\xc3\xa9\xf0\x9f\x98\x80|\\ufffd|\\ufffd|\\ufffd\\ufffd|"
                             "\\ufffd\\ufffd\\ufffd\"");
  tmk__json_free(&j);
}

/* ---------------------------------------------------------------------------------------------
 * Orphans: a child is never stored without its parent (PROTOCOL.md §5.3.1)
 * ------------------------------------------------------------------------------------------- */
/* A DATA packet of thread 1 holding zones zs[0..n) (sorted by start, then depth). */
static size_t make_tree_packet(uint8_t* out, size_t cap, uint64_t seq, const tmk_proto_zone* zs,
                               size_t n) {
  uint8_t body[4096];
  tmk_proto_writer w;
  tmk_proto_writer_init(&w, body, sizeof body);
  assert_true(tmk_proto_put_thread(&w, 1) >= 0);
  assert_int_equal(tmk_proto_put_zones(&w, zs, n), (int)n);
  int len = tmk_proto_finish(&w, 77, seq, out, cap, NULL);
  assert_true(len > 0);
  return (size_t)len;
}

#define Z(s, e, d) {(s), (e) - (s), 5, (d)}
/* Packet 0: A, an earlier tree. Packet 1: P with its first children C1 and C2. Packet 2: the rest
 * of P's children (C3 with a child G, then C4), continued at depth 1 as a writer does when P's
 * tree did not fit packet 1 (§5.3), then Q after P with its child Q1 (decoded before Q, at the
 * depth of the dropped trees). Packet 3: D, a child of R, which has not ended yet; packet 4: R. */
static const tmk_proto_zone tree_pk[5][5] = {
    {Z(0, 100, 0)},
    {Z(1000, 2000, 0), Z(1100, 1200, 1), Z(1300, 1400, 1)},
    {Z(1500, 1700, 1), Z(1550, 1600, 2), Z(1800, 1900, 1), Z(2100, 2200, 0), Z(2120, 2150, 1)},
    {Z(3100, 3200, 1)},
    {Z(3000, 3500, 0)},
};
static const size_t tree_n[5] = {1, 3, 5, 1, 1};
#undef Z

typedef struct zl {
  tmk_relay_zone z[64];
  size_t n;
} zl;
static int list_tree_zone(void* ud, const tmk_relay_zone* z) {
  zl* l = ud;
  assert_true(l->n < 64);
  l->z[l->n++] = *z;
  return 0;
}

/* Every zone in the store, and the check that none at depth > 0 lacks a parent. Returns the
 * number of zones. */
static size_t check_no_orphan(tmk__store* st) {
  zl l;
  l.n = 0;
  tmk_relay_query q;
  memset(&q, 0, sizeof q);
  q.thread = -1;
  tmk__store_zones(st, &q, list_tree_zone, &l);
  for (size_t i = 0; i < l.n; i++) {
    const tmk_relay_zone* c = &l.z[i];
    if (c->depth == 0) continue;
    int parent = 0;
    for (size_t k = 0; k < l.n; k++) {
      const tmk_relay_zone* p = &l.z[k];
      if (p->thread == c->thread && p->depth + 1 == c->depth && p->start_ns <= c->start_ns &&
          c->start_ns + c->dur_ns <= p->start_ns + p->dur_ns)
        parent = 1;
    }
    if (!parent) fail_msg("zone at %llu, depth %u, stored without its parent",
                          (unsigned long long)c->start_ns, (unsigned)c->depth);
  }
  return l.n;
}

static uint64_t orphans_of(const tmk__store* st) {
  tmk_relay_session_info info;
  memset(&info, 0, sizeof info);
  tmk__store_fill_info(st, &info);
  return info.stats.orphans;
}

/* Stores the packets of tree_pk named in `order` (seq = index), -1 ends. */
static tmk__store* store_trees(const int* order, void* scratch) {
  tmk__store* st = tmk__store_new(1 << 20);
  assert_non_null(st);
  for (; *order >= 0; order++) {
    uint8_t pk[4096];
    size_t n = make_tree_packet(pk, sizeof pk, (uint64_t)*order, tree_pk[*order], tree_n[*order]);
    assert_true(tmk__store_packet(st, pk, n, scratch) >= 0);
  }
  return st;
}

static void test_store_orphans_dropped(void** state) {
  (void)state;
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  /* everything delivered: all 11 zones, the child that came before R (packet 3) included */
  tmk__store* st = store_trees((const int[]){0, 1, 2, 3, 4, -1}, scratch);
  assert_int_equal(check_no_orphan(st), 11);
  assert_int_equal(orphans_of(st), 0);
  tmk__store_free(st);
  /* packet 1 (P) lost: C3, G and C4 go, counted; Q, Q1, D and R stay */
  st = store_trees((const int[]){0, 2, 3, 4, -1}, scratch);
  assert_int_equal(check_no_orphan(st), 5);
  assert_int_equal(orphans_of(st), 3);
  tmk_relay_session_info info;
  memset(&info, 0, sizeof info);
  tmk__store_fill_info(st, &info);
  assert_int_equal(info.stats.zones, 5);
  assert_int_equal(info.stats.records, 5);
  /* P arriving late after all (the reorder stage declared it lost): stored with what it holds */
  uint8_t pk[4096];
  size_t n = make_tree_packet(pk, sizeof pk, 1, tree_pk[1], tree_n[1]);
  assert_int_equal(tmk__store_packet(st, pk, n, scratch), 3);
  assert_int_equal(check_no_orphan(st), 8);
  assert_int_equal(orphans_of(st), 3);
  tmk__store_free(st);
  st = store_trees((const int[]){0, -1}, scratch);
  /* a sequence that starts again far behind (a new epoch, PROTOCOL.md §2) is followed from
   * there: after packets at 20001.., packets 20, 21, 22 follow each other, so D (a child of R,
   * which has not ended) in 22 is not checked and kept */
  for (int i = 1; i < 3; i++) {
    n = make_tree_packet(pk, sizeof pk, 20000 + (uint64_t)i, tree_pk[i], tree_n[i]);
    assert_true(tmk__store_packet(st, pk, n, scratch) >= 0);
  }
  for (int i = 1; i < 4; i++) {
    n = make_tree_packet(pk, sizeof pk, 19 + (uint64_t)i, tree_pk[i], tree_n[i]);
    assert_int_equal(tmk__store_packet(st, pk, n, scratch), (int)tree_n[i]);
  }
  assert_int_equal(orphans_of(st), 0);
  tmk__store_free(st);
  /* the relay joined at packet 2 (restart): the same as a loss before it */
  st = store_trees((const int[]){2, 3, 4, -1}, scratch);
  assert_int_equal(check_no_orphan(st), 4);
  assert_int_equal(orphans_of(st), 3);
  tmk__store_free(st);
  /* a packet lost that held no parent of what follows: nothing dropped */
  st = store_trees((const int[]){0, 1, 2, 4, -1}, scratch);
  assert_int_equal(check_no_orphan(st), 10);
  assert_int_equal(orphans_of(st), 0);
  tmk__store_free(st);
  free(scratch);
}

/* A tree continued over two packets after the lost one: packet 2 holds only P's subtree, so the
 * drop goes on at the start of packet 3 (until Q, at depth 0). A parent stored before the gap
 * (packet 1 delivered, packet 2 lost) keeps its children in packet 3. */
static void test_store_orphans_chain(void** state) {
  (void)state;
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  static const tmk_proto_zone p1[] = {{1000, 1000, 5, 0}, {1100, 100, 5, 1}};
  static const tmk_proto_zone p2[] = {{1300, 100, 5, 1}, {1320, 10, 5, 2}, {1500, 100, 5, 1}};
  static const tmk_proto_zone p3[] = {{1700, 100, 5, 1}, {1710, 50, 5, 2}, {2100, 100, 5, 0}};
  const tmk_proto_zone* pks[3] = {p1, p2, p3};
  const size_t ns[3] = {2, 3, 3};
  for (int lost = 0; lost < 2; lost++) {
    tmk__store* st = tmk__store_new(1 << 20);
    for (int i = 0; i < 3; i++) {
      if (i == lost) continue;
      uint8_t pk[4096];
      size_t n = make_tree_packet(pk, sizeof pk, (uint64_t)i + 1, pks[i], ns[i]);
      assert_true(tmk__store_packet(st, pk, n, scratch) >= 0);
    }
    if (lost == 0) { /* P lost: p2 and p3's first two go, the zone at depth 0 stays */
      assert_int_equal(check_no_orphan(st), 1);
      assert_int_equal(orphans_of(st), 5);
    } else { /* p2 lost: P is stored and covers p3's children */
      assert_int_equal(check_no_orphan(st), 5);
      assert_int_equal(orphans_of(st), 0);
    }
    tmk__store_free(st);
  }
  free(scratch);
}

/* Children of a zone that never ends (a thread's outermost zone, never sent): without a loss
 * all are kept; after a loss that follows stored children of it, too; when the relay joined
 * late (none stored), the drop ends after ORPHAN_CHAIN_MAX (4096) zones, not never. */
static void test_store_orphans_chain_cap(void** state) {
  (void)state;
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  static tmk_proto_zone kids[1000];
  /* lose: 0 nothing, 1 packet 0 (the relay joined late: nothing of the thread stored), 2 packet
   * 1 (after packet 0's children of the same open zone were stored) */
  for (int lose = 0; lose < 3; lose++) {
    tmk__store* st = tmk__store_new(1 << 20);
    for (uint64_t seq = 0; seq < 10; seq++) {
      if (lose && seq == (uint64_t)lose - 1) continue;
      for (uint32_t i = 0; i < 1000; i++) {
        kids[i].start = 1000000 * seq + 10 * i;
        kids[i].duration = 5;
        kids[i].site = 5;
        kids[i].depth = 1;
      }
      uint8_t pk[4096];
      size_t n = make_tree_packet(pk, sizeof pk, seq, kids, 1000);
      assert_true(tmk__store_packet(st, pk, n, scratch) >= 0);
    }
    tmk_relay_session_info info;
    memset(&info, 0, sizeof info);
    tmk__store_fill_info(st, &info);
    /* lost packet 0: packets 1..5 go (the drop goes on while fewer than 4096 were dropped
     * before a packet starts), 6..9 stay. Lost packet 1: packet 0 stored children of the
     * open zone, so packet 2's are taken for more of them and nothing is dropped. */
    const uint64_t orphans[3] = {0, 5000, 0}, zones[3] = {10000, 4000, 9000};
    assert_int_equal(info.stats.orphans, orphans[lose]);
    assert_int_equal(info.stats.zones, zones[lose]);
    tmk__store_free(st);
  }
  free(scratch);
}

/* Deeper than the store's 8-bit depth (255): a parent at depth 299 is stored (and streamed
 * live) at 255 and still found for children at 300 after a gap; one that does not cover them is
 * not taken for it. */
static void test_store_orphans_deep(void** state) {
  (void)state;
  void* scratch = malloc(TMK_PROTO_MAX_BODY);
  for (int covers = 0; covers < 2; covers++) {
    const tmk_proto_zone parent = {covers ? 1000 : 100, covers ? 1000 : 50, 5, 299};
    const tmk_proto_zone kids[] = {{1100, 100, 5, 300}, {1110, 10, 5, 301}, {1300, 100, 5, 300}};
    tmk__store* st = tmk__store_new(64 << 20); /* room for the live ring too */
    uint64_t cur;
    assert_int_equal(tmk__store_live_attach(st, &cur), 0);
    uint8_t pk[4096];
    size_t n = make_tree_packet(pk, sizeof pk, 0, &parent, 1);
    assert_int_equal(tmk__store_packet(st, pk, n, scratch), 1);
    n = make_tree_packet(pk, sizeof pk, 2, kids, 3); /* packet 1 lost */
    assert_int_equal(tmk__store_packet(st, pk, n, scratch), covers ? 3 : 0);
    assert_int_equal(orphans_of(st), covers ? 0 : 3);
    /* the live stream carries the depth as stored (capped at 255), like every query */
    tmk_relay_live_item items[8];
    uint64_t skipped = 0;
    int nlive = tmk__store_live_read(st, &cur, items, 8, &skipped);
    assert_int_equal(nlive, covers ? 4 : 1);
    for (int i = 0; i < nlive; i++) assert_int_equal(items[i].zone.depth, 255);
    tmk__store_live_detach(st);
    tmk__store_free(st);
  }
  free(scratch);
}

/* The check sits behind the reorder stage: packet 1 late but within the window is delivered
 * in order and its children are kept; declared lost, they are dropped. */
typedef struct ro_store {
  tmk__store* st;
  void* scratch;
} ro_store;
static void deliver_to_store(void* ud, const uint8_t* p, size_t len, uint64_t seq) {
  (void)seq;
  ro_store* rs = ud;
  assert_true(tmk__store_packet(rs->st, p, len, rs->scratch) >= 0);
}

static void test_store_orphans_after_reorder(void** state) {
  (void)state;
  uint8_t pk[5][4096];
  size_t len[5];
  for (int i = 0; i < 5; i++) len[i] = make_tree_packet(pk[i], sizeof pk[i], (uint64_t)i, tree_pk[i], tree_n[i]);
  for (int late = 0; late < 2; late++) {
    ro_store rs = {tmk__store_new(1 << 20), malloc(TMK_PROTO_MAX_BODY)};
    tmk__reorder ro;
    assert_int_equal(tmk__reorder_init(&ro, 64, 100), 0);
    uint64_t now = 1000;
    tmk__reorder_push(&ro, 0, pk[0], len[0], now, deliver_to_store, &rs);
    tmk__reorder_push(&ro, 2, pk[2], len[2], now, deliver_to_store, &rs);
    tmk__reorder_push(&ro, 3, pk[3], len[3], now + 10, deliver_to_store, &rs);
    if (late) { /* the window's time passes: packet 1 is declared lost, 2 and 3 delivered */
      tmk__reorder_tick(&ro, now + 500, 0, deliver_to_store, &rs);
      assert_int_equal(ro.lost, 1);
    }
    tmk__reorder_push(&ro, 1, pk[1], len[1], now + 600, deliver_to_store, &rs);
    tmk__reorder_push(&ro, 4, pk[4], len[4], now + 600, deliver_to_store, &rs);
    tmk__reorder_tick(&ro, now + 2000, 1, deliver_to_store, &rs);
    if (!late) {
      assert_int_equal(ro.lost, 0);
      assert_int_equal(check_no_orphan(rs.st), 11);
      assert_int_equal(orphans_of(rs.st), 0);
    } else {
      assert_int_equal(ro.late, 1);
      assert_int_equal(check_no_orphan(rs.st), 8);
      assert_int_equal(orphans_of(rs.st), 3);
    }
    tmk__reorder_free(&ro);
    tmk__store_free(rs.st);
    free(rs.scratch);
  }
}

static void test_json_valid(void** state) {
  (void)state;
  static const char* const good[] = {
      "{}", " [ ] ", "0", "-0.5e+3", "1E9", "\"a\\\"\\u00e9\\n\"", "true", "null",
      "{\"program\":\"demo\",\"sessions\":2,\"labels\":[\"a\",\"b\"],\"x\":{\"y\":[1,[2]]}}",
      "{\"p50\":16666745,\"p95\":16757763.6,\"n\":717}\r\n"};
  static const char* const bad[] = {
      "", " ", "{", "}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "[1 2]", "01", "1.", "-",
      ".5", "1e", "\"abc", "\"a\\x\"", "\"\\u12g4\"", "tru", "nul", "{a:1}", "{\"a\":1}}",
      "{\"a\":1} x", "Code: 159. DB::Exception: Timeout exceeded", "{\"program\":\"de",
      "\"a\tb\""};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    if (!tmk__json_valid(good[i], strlen(good[i]))) fail_msg("not accepted: %s", good[i]);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    if (tmk__json_valid(bad[i], strlen(bad[i]))) fail_msg("accepted: %s", bad[i]);
  /* nesting: 64 levels are fine, 65 are not */
  char deep[2 * 65 + 1];
  for (int d = 64; d <= 65; d++) {
    memset(deep, '[', (size_t)d);
    memset(deep + d, ']', (size_t)d);
    assert_int_equal(tmk__json_valid(deep, (size_t)(2 * d)), d == 64);
  }
  /* a NUL inside the length is not JSON */
  assert_int_equal(tmk__json_valid("[1]\0", 4), 0);
  assert_int_equal(tmk__json_valid("\"a\0b\"", 5), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reorder_in_order_and_swaps),
      cmocka_unit_test(test_reorder_loss_by_window_and_age),
      cmocka_unit_test(test_reorder_late_join),
      cmocka_unit_test(test_reorder_far_jump),
      cmocka_unit_test(test_reorder_keyed_replay),
      cmocka_unit_test(test_recording_roundtrip_and_every_torn_tail),
      cmocka_unit_test(test_crc32c_check_value),
      cmocka_unit_test(test_crc32c_every_offset_and_length),
      cmocka_unit_test(test_agent_file),
      cmocka_unit_test(test_store_decode_query_and_budget),
      cmocka_unit_test(test_store_evict_after_thread_table_grows),
      cmocka_unit_test(test_store_slabs_evict),
      cmocka_unit_test(test_store_slabs_reused_after_free),
      cmocka_unit_test(test_store_query_slices),
      cmocka_unit_test(test_store_narrow_and_wide_records),
      cmocka_unit_test(test_store_live_ring),
      cmocka_unit_test(test_store_live_cut),
      cmocka_unit_test(test_store_live_text_cut),
      cmocka_unit_test(test_store_orphans_dropped),
      cmocka_unit_test(test_store_orphans_chain),
      cmocka_unit_test(test_store_orphans_deep),
      cmocka_unit_test(test_store_orphans_chain_cap),
      cmocka_unit_test(test_store_orphans_after_reorder),
      cmocka_unit_test(test_json_escaping),
      cmocka_unit_test(test_json_valid),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
