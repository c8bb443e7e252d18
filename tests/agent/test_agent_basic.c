/* test_agent_basic.c — agent behaviour without sockets: every record kind reaches the decoder
 * (callback transport), the 8 KB arena, the file transport, marker mismatches, a wrapping 32-bit
 * user clock, compile-time stripping (TMK_MAX_SEVERITY) and the run-time level and mask. */
#include "agent_test_util.h"

int stripped_debug_zone(void); /* test_agent_stripped.c, built with TMK_MAX_SEVERITY=2 */

static void nested(int n) {
  TMK_ZONE("outer", TMK_SEV_INFO, 1);
  {
    int i;
    for (i = 0; i < n; i++) {
      TMK_ZONE("inner", TMK_SEV_INFO, 1);
      {
        TMK_ZONE("leaf", TMK_SEV_INFO, 1);
      }
    }
  }
}

static void every_record_kind(void** state) {
  receiver r;
  tmk_agent_desc d;
  tmk_agent_stats s;
  static const char payload[] = "entity=42";
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  d.team_names[0] = "engine";
  d.team_names[3] = "audio";
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), TMK_ESTATE);
  /* A 4 MB arena holds LZ4's state whenever the build has LZ4. */
  assert_int_equal(stats_now().lz4, tmk_proto_lz4_state_size() > 0);
  tmk_thread_name("main");
  nested(10);
  TMK_FRAME();
  TMK_FRAME_NAMED("physics-step");
  TMK_PLOT_I("entities", -1234567);
  TMK_PLOT_D("frame-ms", 16.5);
  TMK_MESSAGE(TMK_SEV_WARNING, 1, "literal warning");
  TMK_MESSAGE_TEXT(TMK_SEV_ERROR, 1, "dynamic text", 12);
  TMK_ZONE_BEGIN_DATA("load-level", TMK_SEV_INFO, 1, payload, sizeof payload - 1);
  TMK_ZONE_END();
  assert_true(tmk_agent_flush() >= 1);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(tmk_agent_shutdown(), TMK_ESTATE);

  assert_int_equal(r.bad_packets, 0);
  assert_int_equal(r.hellos, 1); /* once at start on byte-stream transports */
  assert_int_equal(recv_zones_named(&r, "outer"), 1);
  assert_int_equal(recv_zones_named(&r, "inner"), 10);
  assert_int_equal(recv_zones_named(&r, "leaf"), 10);
  assert_int_equal(r.max_depth, 2);
  assert_int_equal(r.frames, 2);
  assert_int_equal(recv_events_named(&r, "physics-step"), 1);
  assert_int_equal(r.plots, 2);
  assert_true(r.last_plot_i == -1234567);
  assert_true(r.last_plot_d == 16.5);
  assert_int_equal(r.messages, 2);
  assert_int_equal(recv_events_named(&r, "literal warning"), 1);
  assert_string_equal(r.last_message, "dynamic text");
  assert_int_equal(r.markers_begin, 1);
  assert_int_equal(r.markers_end, 1);
  assert_int_equal(recv_events_named(&r, "load-level"), 2);
  assert_string_equal(r.thread_names[0], "main");
  assert_string_equal(r.team_names[0], "engine");
  assert_string_equal(r.team_names[3], "audio");
  assert_true(r.clock_syncs >= 1);
  assert_int_equal(r.byes, 1);
  assert_int_equal(r.seq_gaps, 0);
  (void)s;
}

static void tiny_arena_8k(void** state) {
  static uint64_t small[8192 / 8];
  receiver r;
  tmk_agent_desc d;
  tmk_agent_stats s;
  int frame;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  d.overflow = TMK_OVERFLOW_WAIT;
  assert_int_equal(tmk_agent_init(&d, small, sizeof small), 0);
  s = stats_now();
  assert_true(s.max_threads >= 1);
  assert_true(s.ring_bytes >= 256);
  assert_int_equal(s.lz4, 0);
  for (frame = 0; frame < 100; frame++) {
    nested(20); /* 41 zones per frame: more than the ring holds, so wait mode drains inline */
    TMK_FRAME();
    tmk_agent_pump();
  }
  s = stats_now();
  assert_int_equal(s.drops[TMK_DROP_RING_FULL], 0);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(r.bad_packets, 0);
  assert_int_equal(recv_zones_named(&r, "outer"), 100);
  assert_int_equal(recv_zones_named(&r, "inner"), 2000);
  assert_int_equal(recv_zones_named(&r, "leaf"), 2000);
  assert_int_equal(r.frames, 100);
  assert_int_equal(tmk_agent_init(&d, small, 512), TMK_ENOMEM);
}

/* TMK_ARENA_MIN is the true minimum: it works (64-byte aligned), 8 bytes less does not. */
static void arena_min_is_the_true_minimum(void** state) {
  static uint64_t small[8192 / 8 + 8];
  uint8_t* aligned = (uint8_t*)(((uintptr_t)small + 63u) & ~(uintptr_t)63u);
  receiver r;
  tmk_agent_desc d;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  assert_int_equal(tmk_agent_init(&d, aligned, TMK_ARENA_MIN - 8u), TMK_ENOMEM);
  assert_int_equal(tmk_agent_init(&d, aligned, TMK_ARENA_MIN), 0);
  assert_int_equal(stats_now().max_threads, 1);
  {
    TMK_ZONE("smallest", TMK_SEV_INFO, 1);
  }
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&r, "smallest"), 1);
}

static void file_transport(void** state) {
  char path[64];
  tmk_agent_desc d;
  receiver r;
  static uint8_t buf[1 << 20];
  FILE* f;
  size_t n;
  (void)state;
  snprintf(path, sizeof path, "tmk-agent-test-%ld.tmk", (long)time(NULL));
  memset(&d, 0, sizeof d);
  d.transport = TMK_TRANSPORT_FILE;
  d.file_path = path;
  d.manual_pump = 1;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  nested(50);
  assert_int_equal(tmk_agent_shutdown(), 0);
  f = fopen(path, "rb");
  assert_non_null(f);
  n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  remove(path);
  assert_true(n > 8);
  assert_memory_equal(buf, "TMKFILE1", 8);
  recv_init_offline(&r);
  assert_true(recv_feed_stream(&r, buf + 8, n - 8) >= 2);
  assert_int_equal(r.bad_packets, 0);
  assert_int_equal(r.hellos, 1);
  assert_int_equal(recv_zones_named(&r, "inner"), 50);
  assert_int_equal(r.byes, 1);
  d.file_path = "/nonexistent-dir/x.tmk";
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), TMK_EIO);
}

static void marker_mismatch_counted(void** state) {
  receiver r;
  tmk_agent_desc d;
  tmk_agent_stats s;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  TMK_ZONE_END(); /* no BEGIN: counted, not crashed on */
  TMK_ZONE_BEGIN("a", TMK_SEV_INFO, 1);
  TMK_ZONE_BEGIN("b-filtered", TMK_SEV_TRACE, 1);
  TMK_ZONE_END(); /* closes the filtered one: nothing sent */
  TMK_ZONE_END(); /* closes "a" */
  TMK_ZONE_END(); /* mismatch again */
  tmk_agent_flush();
  s = stats_now();
  assert_int_equal(s.drops[TMK_DROP_MISMATCH], 2);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(r.markers_begin, 1);
  assert_int_equal(r.markers_end, 1);
  assert_int_equal(recv_events_named(&r, "a"), 2);
  assert_int_equal(r.drops[TMK_DROP_MISMATCH], 2);
}

static void limits_are_counted_not_crashed_on(void** state) {
  receiver r;
  tmk_agent_desc d;
  tmk_agent_stats s;
  static char big[2000];
  int i;
  (void)state;
  memset(big, 'x', sizeof big);
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  /* 20 nested markers: the per-thread stack holds 16; the rest are counted at both ends. */
  for (i = 0; i < 20; i++) TMK_ZONE_BEGIN("deep", TMK_SEV_INFO, 1);
  for (i = 0; i < 20; i++) TMK_ZONE_END();
  /* A payload above 255 bytes: the marker goes out without it, counted as too big. */
  TMK_ZONE_BEGIN_DATA("fat", TMK_SEV_INFO, 1, big, 300);
  TMK_ZONE_END();
  /* Dynamic text is cut at the protocol's 1024-byte string limit. */
  TMK_MESSAGE_TEXT(TMK_SEV_ERROR, 1, big, sizeof big);
  tmk_agent_flush();
  s = stats_now();
  assert_int_equal(s.drops[TMK_DROP_MISMATCH], 8);
  assert_int_equal(s.drops[TMK_DROP_TOO_BIG], 1);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(r.bad_packets, 0);
  assert_int_equal(recv_events_named(&r, "deep"), 32);
  assert_int_equal(recv_events_named(&r, "fat"), 2);
  assert_int_equal(r.messages, 1);
  assert_int_equal(r.last_message_len, 1024);
  assert_int_equal(r.drops[TMK_DROP_MISMATCH], 8);
  assert_int_equal(r.drops[TMK_DROP_TOO_BIG], 1);
}

static uint32_t fake_counter;
static uint64_t fake_clock(void* user) {
  (void)user;
  fake_counter += 16;
  return fake_counter;
}

static void wrapping_32bit_clock(void** state) {
  receiver r;
  tmk_agent_desc d;
  int i;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  d.clock.fn = fake_clock;
  d.clock.frequency = 1000000;
  d.clock.bits = 32;
  fake_counter = 0xFFFFF000u; /* wraps after 256 reads */
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  assert_int_equal(tmk_ticks_per_second(), 1000000);
  for (i = 0; i < 100; i++) {
    nested(3);
    tmk_agent_pump(); /* the flusher keeps the extension fresh */
  }
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(r.bad_packets, 0);
  assert_int_equal(recv_zones_named(&r, "outer"), 100);
  assert_true(fake_counter < 0x10000u); /* it really wrapped */
  assert_true(r.max_duration < 1000);   /* no zone spans a bogus 2^32 ticks */
  assert_true(r.max_duration > 0);
}

/* A 24-bit counter (a SysTick) wrapping: the extension adds 2^24, not 2^32, on 32-bit targets
 * too (the cross builds run this under qemu-user). */
static void wrapping_24bit_clock(void** state) {
  receiver r;
  tmk_agent_desc d;
  int i;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  d.clock.fn = fake_clock;
  d.clock.frequency = 1000000;
  d.clock.bits = 24;
  fake_counter = 0x00FFF000u; /* bit 24 and up are noise the agent must mask off */
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  for (i = 0; i < 100; i++) {
    nested(3);
    tmk_agent_pump();
  }
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(r.bad_packets, 0);
  assert_int_equal(recv_zones_named(&r, "outer"), 100);
  assert_true(fake_counter > 0x01000000u); /* it really wrapped at 24 bits */
  assert_true(r.max_duration < 1000);
  assert_true(r.max_duration > 0);
}

/* A comb d levels deep: each level a zone holding a leaf ("tooth") and the next level. Its
 * zones reach the ring as tooth, tooth, ..., then the combs innermost first, so a flusher that
 * places each zone before its descendants keeps one mark per level at once. Returns the zones
 * recorded; *parents counts those with zones nested in them. */
static int comb(int d, int* parents) {
  TMK_ZONE("comb", TMK_SEV_INFO, 1);
  {
    TMK_ZONE("tooth", TMK_SEV_INFO, 1);
  }
  ++*parents;
  return 2 + (d > 1 ? comb(d - 1, parents) : 0);
}

/* Zones reach the ring by end time, each after everything nested in it; every zone with zones
 * nested in it must still go out as a parent (OPEN ... CLOSE, §5.3) before them, and siblings in
 * the order they ran, or a zone decodes as a leaf after an AT, outside its parent. Covered: frames whose zones the flusher places as it drains, a plot and
 * a frame mark recorded inside zones (the drain stops there, and sorts the batch), and combs
 * deeper than the flusher's placement tracks (sorted too). */
static void parents_go_before_their_children(void** state) {
  receiver r;
  tmk_agent_desc d;
  int f, zones = 0, parents = 0;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  d.max_packet = 16384; /* one drain's zones fit one packet: none is cut off from its parent */
  d.clock.fn = fake_clock; /* every zone begins and ends at a time of its own */
  d.clock.frequency = 1000000;
  fake_counter = 0;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  for (f = 0; f < 40; f++) {
    {
      TMK_ZONE("frame", TMK_SEV_INFO, 1);
      {
        TMK_ZONE("update", TMK_SEV_INFO, 1);
        {
          TMK_ZONE("ai", TMK_SEV_INFO, 1);
        }
        {
          TMK_ZONE("physics", TMK_SEV_INFO, 1);
        }
      }
      {
        TMK_ZONE("render", TMK_SEV_INFO, 1);
        {
          TMK_ZONE("draw", TMK_SEV_INFO, 1);
        }
        if (f % 3 == 1) TMK_PLOT_I("draws", f);
        {
          TMK_ZONE("draw", TMK_SEV_INFO, 1);
        }
      }
      if (f % 4 == 2) TMK_FRAME();
      zones += 7 + comb(f % 24 + 1, &parents);
      parents += 3; /* frame, update, render */
    }
    assert_true(tmk_agent_flush() >= 1);
  }
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(r.bad_packets, 0);
  assert_int_equal(r.zones, (uint64_t)zones);
  assert_int_equal(r.max_depth, 25); /* the 24-level comb (depths 1..24) and its last tooth */
  assert_int_equal(r.parent_zones, (uint64_t)parents);
  assert_int_equal(r.loose_zones, 0); /* each zone inside its parent, siblings in order */
}

/* The flusher's millisecond timer (agent/tmk_agent_internal.h): converts ticks with 32-bit
 * divisions only, a long pause 2^31 ticks at a time. */
uint64_t tmk__ms(void);

static uint64_t set_ticks;
static uint64_t set_clock(void* user) {
  (void)user;
  return set_ticks;
}

/* Returns tmk__ms() after the clock moves on by each of `steps` (ticks), from a fresh agent. */
static uint64_t ms_after(uint64_t frequency, const uint64_t* steps, int n) {
  receiver r;
  tmk_agent_desc d;
  uint64_t ms0, ms = 0;
  int i;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  d.clock.fn = set_clock;
  d.clock.frequency = frequency;
  d.clock.bits = 64;
  set_ticks = 1000;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  ms0 = tmk__ms();
  for (i = 0; i < n; i++) {
    set_ticks += steps[i];
    ms = tmk__ms();
  }
  assert_int_equal(tmk_agent_shutdown(), 0);
  return ms - ms0;
}

/* Ends the steps exactly on a millisecond (a tick lost would show) and one tick before it (a
 * tick too many would show). */
static void check_ms_exact(uint64_t frequency) {
  uint64_t steps[9] = {249999, 1, 3, 250000 * 7 + 249998, 5ull << 31, (5ull << 31) + 12345,
                       (1ull << 40) + 7, 1, 0};
  uint64_t div = frequency / 1000u, total = 0;
  int i;
  for (i = 0; i < 8; i++) total += steps[i];
  steps[8] = div - total % div; /* total + steps[8]: a whole number of ms */
  total += steps[8];
  assert_int_equal(ms_after(frequency, steps, 9), total / div);
  steps[8]--;
  assert_int_equal(ms_after(frequency, steps, 9), total / div - 1u);
}

static void ms_timer_is_exact_over_long_pauses(void** state) {
  const uint64_t steps[] = {249999, 1, 3};
  (void)state;
  /* short steps whose remainders add up, then pauses of 2^31 ticks and more */
  check_ms_exact(250000000u);       /* 250 MHz */
  check_ms_exact(25000000u);        /* 25 MHz, a SysTick */
  check_ms_exact(10000000000ull);   /* 10 GHz: ticks per ms from a frequency above 2^32 */
  check_ms_exact(3000000000ull + 7); /* ticks per ms with a remainder */
  /* 999 Hz (slower than 1 kHz): whole ticks, scaled */
  assert_int_equal(ms_after(999u, steps, 3), 250003u * (1000u / 999u));
}

/* The agent's log lines: the session line carries the 64-bit id as 16 hex digits. */
static char session_line[256];
static void keep_session_line(void* user, int level, const char* message) {
  (void)user, (void)level;
  if (strncmp(message, "telemark: session ", 18) == 0)
    snprintf(session_line, sizeof session_line, "%s", message);
}

static void session_line_has_the_id(void** state) {
  receiver r;
  tmk_agent_desc d;
  char want[64];
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  d.logger.fn = keep_session_line;
  session_line[0] = 0;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  snprintf(want, sizeof want, "telemark: session %016llx over callback",
           (unsigned long long)stats_now().session_id);
  assert_int_equal(tmk_agent_shutdown(), 0);
  /* then ", lz4" / ", keyed" as the build and the desc have it */
  assert_int_equal(strncmp(session_line, want, strlen(want)), 0);
}

/* The log formatter (agent/tmk_log.c) writes what printf would for the conversions the agent's
 * lines use, after the "telemark: " prefix, cut at 159 characters. */
void tmk__agent_log(const tmk_logger* logger, int level, const char* fmt, ...);
static char log_line[256];
static void keep_log_line(void* user, int level, const char* message) {
  (void)user, (void)level;
  snprintf(log_line, sizeof log_line, "%s", message);
}
#define CHECK_LOG(...)                                                                  \
  do {                                                                                  \
    char want_[512] = "telemark: ";                                                     \
    snprintf(want_ + 10, sizeof want_ - 10, __VA_ARGS__);                               \
    want_[159] = 0;                                                                     \
    log_line[0] = 0;                                                                    \
    tmk__agent_log(&lg, TMK_SEV_INFO, __VA_ARGS__);                                     \
    assert_string_equal(log_line, want_);                                               \
  } while (0)

static void log_lines_as_printf_writes_them(void** state) {
  tmk_logger lg = {keep_log_line, NULL};
  char long_text[300];
  (void)state;
  memset(long_text, 'a', sizeof long_text - 1);
  long_text[sizeof long_text - 1] = 0;
  CHECK_LOG("agent up, %u thread slot(s) x %u-byte rings", 16u, 65536u);
  CHECK_LOG("session %08x%08x over %s%s%s", 0xabcdu, 0x12u, "callback", "", ", keyed");
  CHECK_LOG("packet encoding failed (-%u)", 28u); /* a negative code: no signed form */
  CHECK_LOG("%u %u %u", 0u, 7u, 2147483648u);
  CHECK_LOG("%u %x %08x %08x %x", 4294967295u, 0xdeadbeefu, 1u, 0x89abcdefu, 0u);
  CHECK_LOG("relay %.*s welcomed, %.*s.", 3, "1.2.3.4", 0, "dropped");
  CHECK_LOG("100%% %s", "done");
  CHECK_LOG("%s|%s", long_text, "cut");
  tmk__agent_log(&lg, TMK_SEV_INFO, "%s", (const char*)NULL);
  assert_string_equal(log_line, "telemark: (null)");
  tmk__agent_log(&lg, TMK_SEV_INFO, "odd %q end %");
  assert_string_equal(log_line, "telemark: odd ? end ?");
  tmk__agent_log(&lg, TMK_SEV_INFO, "no %d", -3); /* not a form the agent's lines use */
  assert_string_equal(log_line, "telemark: no ?");
}

static void runtime_level_and_mask(void** state) {
  receiver r;
  tmk_agent_desc d;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.manual_pump = 1;
  d.level = TMK_LEVEL(TMK_SEV_WARNING);
  d.verbosity = 0x3;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  {
    TMK_ZONE("warn-team0", TMK_SEV_WARNING, 0x1);
  }
  {
    TMK_ZONE("error-team1", TMK_SEV_ERROR, 0x2);
  }
  {
    TMK_ZONE("info-team0", TMK_SEV_INFO, 0x1); /* above the level */
  }
  {
    TMK_ZONE("warn-team2", TMK_SEV_WARNING, 0x4); /* team not in the mask */
  }
  TMK_MESSAGE(TMK_SEV_DEBUG, 1, "debug message"); /* filtered */
  assert_int_equal(tmk_agent_set_filter(TMK_SEV_TRACE, 0x4), 0);
  assert_int_equal(tmk_agent_set_filter(9, 0x4), TMK_EINVAL);
  {
    TMK_ZONE("warn-team2", TMK_SEV_WARNING, 0x4);
  }
  {
    TMK_ZONE("warn-team0", TMK_SEV_WARNING, 0x1); /* team 0 now masked out */
  }
  /* Debug passes the run-time filter here, but not in the file built with TMK_MAX_SEVERITY=2. */
  assert_true(TMK__PASS(TMK_SEV_DEBUG, 0xFFFFFFFFu));
  assert_int_equal(stripped_debug_zone(), 0);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&r, "warn-team0"), 1);
  assert_int_equal(recv_zones_named(&r, "error-team1"), 1);
  assert_int_equal(recv_zones_named(&r, "info-team0"), 0);
  assert_int_equal(recv_zones_named(&r, "warn-team2"), 1);
  assert_int_equal(recv_zones_named(&r, "stripped-debug"), 0);
  assert_int_equal(recv_zones_named(&r, "kept-error"), 1);
  assert_int_equal(r.messages, 0);
}

static void zones_before_init_and_after_shutdown_are_ignored(void** state) {
  (void)state;
  nested(5); /* agent not running: the filter word is 0, nothing happens */
  TMK_FRAME();
  TMK_MESSAGE_TEXT(TMK_SEV_ERROR, 1, "x", 1);
  assert_int_equal(tmk_agent_pump(), TMK_ESTATE);
  assert_int_equal(tmk_now(), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      AGENT_TEST(every_record_kind),
      AGENT_TEST(tiny_arena_8k),
      AGENT_TEST(arena_min_is_the_true_minimum),
      AGENT_TEST(file_transport),
      AGENT_TEST(marker_mismatch_counted),
      AGENT_TEST(limits_are_counted_not_crashed_on),
      AGENT_TEST(parents_go_before_their_children),
      AGENT_TEST(wrapping_32bit_clock),
      AGENT_TEST(wrapping_24bit_clock),
      AGENT_TEST(ms_timer_is_exact_over_long_pauses),
      AGENT_TEST(session_line_has_the_id),
      AGENT_TEST(log_lines_as_printf_writes_them),
      AGENT_TEST(runtime_level_and_mask),
      AGENT_TEST(zones_before_init_and_after_shutdown_are_ignored),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
