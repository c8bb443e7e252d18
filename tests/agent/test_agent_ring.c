/* test_agent_ring.c — ring stress: producer threads against the flusher with millions of
 * records through small rings. Wait mode loses and duplicates nothing (every zone and message
 * counted per producer); drop mode counts every drop exactly; threads beyond the slot count are
 * counted, and slots of exited threads are reused; an overflowing ring drops whole subtrees,
 * never a parent whose children went out. Also built with -fsanitize=thread. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "agent_test_util.h"
#include "tmk_port.h"

#ifndef STRESS_N
#define STRESS_N 500000 /* zones per producer */
#endif
#define PRODUCERS 4

static receiver sink;
static pthread_barrier_t start_line;

static void one_zone(int who) {
  switch (who) {
    case 0: { TMK_ZONE("p0", TMK_SEV_INFO, 1); } break;
    case 1: { TMK_ZONE("p1", TMK_SEV_INFO, 1); } break;
    case 2: { TMK_ZONE("p2", TMK_SEV_INFO, 1); } break;
    default: { TMK_ZONE("p3", TMK_SEV_INFO, 1); } break;
  }
}

static void* stress_producer(void* arg) {
  int who = (int)(intptr_t)arg, i;
  static const char text[] = "variable-length text that wraps the ring at odd offsets";
  pthread_barrier_wait(&start_line);
  for (i = 0; i < STRESS_N; i++) {
    one_zone(who);
    if (i % 64 == 0) TMK_MESSAGE_TEXT(TMK_SEV_INFO, 1, text, (size_t)(i / 64) % sizeof text);
  }
  return NULL;
}

static void run(int n) {
  pthread_t t[PRODUCERS];
  intptr_t i;
  pthread_barrier_init(&start_line, NULL, (unsigned)n);
  for (i = 0; i < n; i++) pthread_create(&t[i], NULL, stress_producer, (void*)i);
  for (i = 0; i < n; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&start_line);
}

static void wait_mode_loses_nothing(void** state) {
  tmk_agent_desc d;
  tmk_agent_stats s;
  (void)state;
  recv_init_offline(&sink);
  d = sink_desc(&sink);
  d.overflow = TMK_OVERFLOW_WAIT;
  d.ring_bytes = 4096;
  d.max_threads = PRODUCERS;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  run(PRODUCERS);
  tmk_agent_flush();
  s = stats_now();
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(s.drops[TMK_DROP_RING_FULL], 0);
  assert_int_equal(sink.bad_packets, 0);
  assert_int_equal(recv_zones_named(&sink, "p0"), STRESS_N);
  assert_int_equal(recv_zones_named(&sink, "p1"), STRESS_N);
  assert_int_equal(recv_zones_named(&sink, "p2"), STRESS_N);
  assert_int_equal(recv_zones_named(&sink, "p3"), STRESS_N);
  assert_int_equal(sink.zones, (uint64_t)PRODUCERS * STRESS_N);
  assert_int_equal(sink.messages, (uint64_t)PRODUCERS * ((STRESS_N + 63) / 64));
  assert_int_equal(sink.seq_gaps, 0);
}

static void drop_mode_counts_exactly(void** state) {
  tmk_agent_desc d;
  tmk_agent_stats s;
  int i;
  (void)state;
  recv_init_offline(&sink);
  d = sink_desc(&sink);
  d.manual_pump = 1; /* nothing drains until we pump: the ring holds exactly 4096/32 zones */
  d.ring_bytes = 4096;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  for (i = 0; i < 1000; i++) one_zone(0);
  s = stats_now();
  assert_int_equal(s.drops[TMK_DROP_RING_FULL], 1000 - 4096 / 32);
  tmk_agent_pump();
  for (i = 0; i < 10; i++) one_zone(1); /* room again */
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&sink, "p0"), 4096 / 32);
  assert_int_equal(recv_zones_named(&sink, "p1"), 10);
  assert_int_equal(sink.drops[TMK_DROP_RING_FULL], 1000 - 4096 / 32); /* reported in-band */
}

static void drop_mode_concurrent_accounts_for_all(void** state) {
  tmk_agent_desc d;
  tmk_agent_stats s;
  uint64_t produced = (uint64_t)PRODUCERS * STRESS_N;
  (void)state;
  recv_init_offline(&sink);
  d = sink_desc(&sink);
  d.ring_bytes = 2048;
  d.max_threads = PRODUCERS;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  run(PRODUCERS);
  tmk_agent_flush();
  s = stats_now();
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(sink.bad_packets, 0);
  /* Zones and messages share the rings; each record is either received or counted. */
  assert_int_equal(sink.zones + sink.messages + s.drops[TMK_DROP_RING_FULL],
                   produced + (uint64_t)PRODUCERS * ((STRESS_N + 63) / 64));
  assert_int_equal(sink.drops[TMK_DROP_RING_FULL], s.drops[TMK_DROP_RING_FULL]);
}

/* Frame > { Update > { Physics x 3 }, Render > { Draw x 4 } }: 10 zones, 3 levels. */
static void game_frame(void) {
  int k;
  TMK_ZONE("Frame", TMK_SEV_INFO, 1);
  {
    TMK_ZONE("Update", TMK_SEV_INFO, 1);
    for (k = 0; k < 3; k++) {
      TMK_ZONE("Physics", TMK_SEV_INFO, 1);
    }
  }
  {
    TMK_ZONE("Render", TMK_SEV_INFO, 1);
    for (k = 0; k < 4; k++) {
      TMK_ZONE("Draw", TMK_SEV_INFO, 1);
    }
  }
}

/* Rings of several sizes overflow at every point of a frame: no zone may arrive without its
 * parent (the outer zone ends last, so it used to be the one lost), and every zone is either
 * received or counted. */
static void drop_mode_keeps_trees_whole(void** state) {
  uint32_t ring;
  (void)state;
  for (ring = 256; ring <= 2048; ring *= 2) { /* 8 to 64 zones; 70 between pumps */
    tmk_agent_desc d;
    tmk_agent_stats s;
    uint64_t frame, update, physics, render, draw;
    int i;
    recv_init_offline(&sink);
    d = sink_desc(&sink);
    d.manual_pump = 1;
    d.ring_bytes = ring;
    assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
    for (i = 0; i < 100; i++) {
      game_frame();
      if (i % 7 == 6) tmk_agent_pump(); /* drains part of the way, so cuts fall anywhere */
    }
    s = stats_now();
    assert_int_equal(tmk_agent_shutdown(), 0);
    frame = recv_zones_named(&sink, "Frame");
    update = recv_zones_named(&sink, "Update");
    physics = recv_zones_named(&sink, "Physics");
    render = recv_zones_named(&sink, "Render");
    draw = recv_zones_named(&sink, "Draw");
    assert_true(s.drops[TMK_DROP_RING_FULL] > 0); /* the test overflows */
    assert_true(frame > 0);
    assert_true(update <= frame);
    assert_true(render <= frame);
    assert_true(physics <= 3 * update);
    assert_true(draw <= 4 * render);
    assert_int_equal(frame + update + physics + render + draw + s.drops[TMK_DROP_RING_FULL],
                     100 * 10);
  }
}

static void nest(int n) {
  TMK_ZONE("deep", TMK_SEV_INFO, 1);
  if (n > 1) nest(n - 1);
}

/* Wait mode cannot wait for room held by zones that are open on the waiting thread: nesting
 * deeper than the ring holds drops the innermost subtree instead of blocking for ever. */
static void wait_mode_deep_nesting_does_not_block(void** state) {
  tmk_agent_desc d;
  tmk_agent_stats s;
  (void)state;
  recv_init_offline(&sink);
  d = sink_desc(&sink);
  d.overflow = TMK_OVERFLOW_WAIT;
  d.ring_bytes = 256; /* 8 zones */
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  nest(20);
  tmk_agent_flush();
  s = stats_now();
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&sink, "deep"), 8);
  assert_int_equal(s.drops[TMK_DROP_RING_FULL], 12);
  assert_int_equal(sink.max_depth, 7);
}

/* Starts the agent on the offline sink with `slots` thread slots of 8 KB rings, wait mode. */
static void start_with_slots(uint32_t slots) {
  tmk_agent_desc d;
  recv_init_offline(&sink);
  d = sink_desc(&sink);
  d.max_threads = slots;
  d.ring_bytes = 8192;
  d.overflow = TMK_OVERFLOW_WAIT;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
}

static void* short_lived(void* arg) {
  int i;
  (void)arg;
  for (i = 0; i < 100; i++) one_zone(2);
  return NULL;
}

static void* held(void* arg) {
  int i;
  pthread_barrier_t* both = (pthread_barrier_t*)arg;
  pthread_barrier_wait(both); /* all threads alive at once */
  for (i = 0; i < 100; i++) one_zone(3);
  pthread_barrier_wait(both);
  return NULL;
}

static void thread_slots_counted_and_reused(void** state) {
  tmk_agent_stats s;
  pthread_t t[4];
  pthread_barrier_t both;
  int i;
  (void)state;
  start_with_slots(2);
  for (i = 0; i < 6; i++) { /* one after the other: exited threads free their slot */
    pthread_create(&t[0], NULL, short_lived, NULL);
    pthread_join(t[0], NULL);
    tmk_agent_flush(); /* the flusher drains the dead slot and frees it */
  }
  s = stats_now();
  assert_int_equal(s.drops[TMK_DROP_NO_THREAD], 0);
  pthread_barrier_init(&both, NULL, 4);
  for (i = 0; i < 4; i++) pthread_create(&t[i], NULL, held, &both);
  for (i = 0; i < 4; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&both);
  tmk_agent_flush();
  s = stats_now();
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&sink, "p2"), 600);
  assert_int_equal(recv_zones_named(&sink, "p3") + s.drops[TMK_DROP_NO_THREAD], 400);
  assert_true(s.drops[TMK_DROP_NO_THREAD] >= 200); /* two threads found no slot */
}

static void short_lived_port(void* arg) { (void)short_lived(arg); }

/* issue 11: 10 threads one after another on 4 slots, started with the port's own thread call,
 * lose nothing: each exit (the port's thread-exit hook) frees the slot for the next thread. */
static void ten_threads_on_four_slots(void** state) {
  tmk_agent_stats s;
  tmk_port_thread t;
  int i;
  (void)state;
  start_with_slots(4);
  for (i = 0; i < 10; i++) {
    assert_int_equal(tmk_port_thread_start(&t, short_lived_port, NULL), 0);
    assert_int_equal(tmk_port_thread_join(&t), 0);
    tmk_agent_flush(); /* drains the dead slot and frees it */
  }
  s = stats_now();
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(s.drops[TMK_DROP_NO_THREAD], 0);
  assert_int_equal(recv_zones_named(&sink, "p2"), 1000);
}

static void* named_short_lived(void* arg) {
  tmk_thread_name((const char*)arg);
  return short_lived(NULL);
}

/* A thread that takes the slot an exited thread gave back gets a thread id of its own: the
 * relay must see two threads with their own names, not the first one renamed (the cross-target
 * sendtest lost "worker-a" this way when worker-a ended before worker-b began). */
static void reused_slot_gets_a_new_thread_id(void** state) {
  static const char* names[2] = {"first", "second"};
  pthread_t t;
  int i;
  (void)state;
  start_with_slots(1);
  for (i = 0; i < 2; i++) {
    pthread_create(&t, NULL, named_short_lived, (void*)names[i]);
    pthread_join(t, NULL);
    tmk_agent_flush(); /* the flusher drains the dead slot and frees it */
  }
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&sink, "p2"), 200);
  assert_string_equal(sink.thread_names[0], "first");
  assert_string_equal(sink.thread_names[1], "second");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      AGENT_TEST(wait_mode_loses_nothing),
      AGENT_TEST(drop_mode_counts_exactly),
      AGENT_TEST(drop_mode_concurrent_accounts_for_all),
      AGENT_TEST(drop_mode_keeps_trees_whole),
      AGENT_TEST(wait_mode_deep_nesting_does_not_block),
      AGENT_TEST(thread_slots_counted_and_reused),
      AGENT_TEST(ten_threads_on_four_slots),
      AGENT_TEST(reused_slot_gets_a_new_thread_id),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
