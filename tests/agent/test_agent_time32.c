/* test_agent_time32.c — the agent on the TMK_PROTO_TIME32 zone encoder (a board's opt-in, here
 * on the host): zones across 2^32, after a gap of more than 2^32 ticks and inside a zone too
 * long for it arrive with their exact 64-bit times; the too-long zone is counted as
 * TMK_DROP_TOO_BIG, never sent with a wrong time. Packets are decoded from the callback. */
#include <string.h>

#include "telemark.h"
#include "tmk_proto.h"
#include "tmk_test.h"

#if !TMK_PROTO_TIME32
#error "test_agent_time32.c tests the agent on the TMK_PROTO_TIME32 protocol"
#endif

#define REACH TMK_PROTO_TIME32_REACH
#define MAXZ 32

static uint64_t arena[(256u << 10) / 8];
static uint64_t now;
static struct {
  char name[16];
  uint64_t start, duration;
  uint32_t depth;
} got[MAXZ];
static size_t ngot;
static uint32_t site_ids[MAXZ];
static const char* site_names[MAXZ];
static size_t nsites;

static uint64_t test_clock(void* user) {
  (void)user;
  return now;
}

/* The callback transport's bytes: a varint length, then one packet. */
static int on_packet(void* user, const void* data, size_t len) {
  static tmk_proto_reader r;
  static uint8_t scratch[TMK_PROTO_MAX_BODY];
  tmk_proto_record rec;
  uint64_t n;
  int m = tmk_proto_varint_get((const uint8_t*)data, (const uint8_t*)data + len, &n);
  (void)user;
  assert_true(m > 0 && (size_t)m + n == len);
  if (tmk_proto_open(&r, (const uint8_t*)data + m, (size_t)n, scratch, sizeof scratch) < 0)
    return -1;
  if (r.hdr.type != TMK_PKT_DATA) return 0;
  while ((m = tmk_proto_next(&r, &rec)) == 1) {
    size_t i;
    if (rec.type == TMK_REC_SITE && nsites < MAXZ) {
      static char names[MAXZ][16];
      uint32_t l = rec.u.site.name.len < 15 ? rec.u.site.name.len : 15;
      memcpy(names[nsites], rec.u.site.name.ptr, l);
      site_ids[nsites] = rec.u.site.id;
      site_names[nsites] = names[nsites];
      nsites++;
    }
    if (rec.type != TMK_REC_ZONE) continue;
    assert_true(ngot < MAXZ);
    for (i = 0; i < nsites; i++)
      if (site_ids[i] == rec.u.zone.site) strcpy(got[ngot].name, site_names[i]);
    got[ngot].start = rec.u.zone.start;
    got[ngot].duration = rec.u.zone.duration;
    got[ngot].depth = rec.u.zone.depth;
    ngot++;
  }
  assert_int_equal(m, 0);
  return 0;
}

static void expect(const char* name, uint64_t start, uint64_t duration, uint32_t depth) {
  size_t i;
  for (i = 0; i < ngot; i++) {
    if (strcmp(got[i].name, name) != 0) continue;
    if (got[i].start != start || got[i].duration != duration || got[i].depth != depth)
      fail_msg("zone %s: start 0x%llx duration %llu depth %u, want 0x%llx %llu %u", name,
               (unsigned long long)got[i].start, (unsigned long long)got[i].duration,
               got[i].depth, (unsigned long long)start, (unsigned long long)duration, depth);
    return;
  }
  fail_msg("zone %s did not arrive", name);
}

static void far_and_long_zones(void** state) {
  tmk_agent_desc d;
  tmk_agent_stats s;
  uint64_t a, b, lng, c;
  size_t i;
  (void)state;
  memset(&d, 0, sizeof d);
  d.transport = TMK_TRANSPORT_CALLBACK;
  d.write.fn = on_packet;
  d.clock.fn = test_clock;
  d.clock.frequency = 1000000;
  d.manual_pump = 1;
  now = a = 0xFFFFF000ull; /* 4096 ticks before 2^32 */
  assert_int_equal(tmk_agent_init(&d, arena, sizeof arena), 0);
  {
    TMK_ZONE("a", TMK_SEV_INFO, 1);
    now += 0x2000; /* across 2^32 */
  }
  now += 3ull << 31; /* a gap of 1.5 * 2^32 ticks */
  b = now;
  {
    TMK_ZONE("b", TMK_SEV_INFO, 1);
    now += 50;
  }
  lng = now;
  {
    TMK_ZONE("long", TMK_SEV_INFO, 1); /* REACH + 20 ticks: beyond the encoder's reach */
    now += 10;
    {
      TMK_ZONE("inner", TMK_SEV_INFO, 1);
      now += 10;
    }
    now += REACH;
  }
  c = now;
  {
    TMK_ZONE("c", TMK_SEV_INFO, 1);
    now += 20;
  }
  assert_true(tmk_agent_pump() >= 0);
  assert_int_equal(tmk_agent_get_stats(&s), 0);
  assert_int_equal(s.drops[TMK_DROP_TOO_BIG], 1);
  assert_int_equal(s.drops[TMK_DROP_SEND_FAILED], 0);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(ngot, 4);
  expect("a", a, 0x2000, 0);
  expect("b", b, 50, 0);
  expect("inner", lng + 10, 10, 1);
  expect("c", c, 20, 0);
  for (i = 0; i < ngot; i++) assert_true(strcmp(got[i].name, "long") != 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(far_and_long_zones)};
  return cmocka_run_group_tests_name("agent-time32", tests, NULL, NULL);
}
