/* demo_sim.c — the simulated game behind telemark-demo: five threads doing busy work of varying
 * length inside nested TMK_ZONEs, paced at 60 fps, with frame marks, plots, messages at several
 * severities and markers with payloads. See demo_sim.h. */
#define _POSIX_C_SOURCE 200809L
#include "demo_sim.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "telemark.h"

const char* const demo_team_names[5] = {"engine", "render", "physics", "ai", "audio"};

#define FRAME_NS 16666667ull

/* Flags and results shared between the game's threads: relaxed atomics (the joins order the
 * rest), so that a thread sanitizer sees no race. */
#if defined(__GNUC__) || defined(__clang__)
#define DEMO_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define DEMO_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#else /* no atomics in C99: volatile, as good as it gets there */
#define DEMO_LOAD(p) (*(volatile int*)(p))
#define DEMO_STORE(p, v) (*(volatile int*)(p) = (int)(v))
#endif

typedef struct sim {
  double seconds;
  volatile int* stop; /* set by the caller's signal handler (its own thread) */
  int done;           /* set by the main thread, read by the others: DEMO_LOAD / DEMO_STORE */
  uint64_t t0;
  long frames;
} sim;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t) {
  uint64_t now = mono_ns();
  if (t > now) {
    struct timespec ts;
    ts.tv_sec = (time_t)((t - now) / 1000000000ull);
    ts.tv_nsec = (long)((t - now) % 1000000000ull);
    nanosleep(&ts, NULL);
  }
}

/* A tiny xorshift per thread for jitter. */
static uint32_t rnd(uint32_t* s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

static int sink; /* keeps the busy work from being optimised away */
/* Busy work of about `units` x ~10 ns, with +-12% jitter. */
static void work(uint32_t* seed, uint32_t units) {
  uint32_t n = units + (units >> 3) - (rnd(seed) % (units / 4 + 1)), i, acc = *seed;
  for (i = 0; i < n * 4; i++) acc = acc * 1664525u + 1013904223u;
  DEMO_STORE(&sink, (int)acc);
}

static int should_stop(sim* s) {
  if (DEMO_LOAD(&s->done) || (s->stop && *s->stop)) return 1;
  if (s->seconds > 0 && (double)(mono_ns() - s->t0) / 1e9 >= s->seconds) return 1;
  return 0;
}

/* ---- threads ------------------------------------------------------------------------------ */

static void* render_thread(void* arg) {
  sim* s = (sim*)arg;
  uint32_t seed = 0x1234567u;
  uint64_t next = mono_ns();
  TMK_THREAD_NAME("render");
  while (!DEMO_LOAD(&s->done)) {
    int b;
    {
      TMK_ZONE_C("Render::frame", TMK_SEV_INFO, DEMO_TEAM_RENDER, 0x3366CC);
      {
        TMK_ZONE("Render::cull", TMK_SEV_INFO, DEMO_TEAM_RENDER);
        work(&seed, 3000);
      }
      for (b = 0; b < 48; b++) {
        TMK_ZONE("Render::batch", TMK_SEV_INFO, DEMO_TEAM_RENDER);
        {
          TMK_ZONE("Render::bind", TMK_SEV_INFO, DEMO_TEAM_RENDER);
          work(&seed, 40);
        }
        {
          TMK_ZONE("Render::draw", TMK_SEV_INFO, DEMO_TEAM_RENDER);
          work(&seed, 120 + (uint32_t)(b % 7) * 20);
        }
        if (b % 16 == 0) {
          TMK_ZONE("Render::shader_check", TMK_SEV_TRACE, DEMO_TEAM_RENDER);
          work(&seed, 30);
        }
      }
      {
        TMK_ZONE("Render::present", TMK_SEV_INFO, DEMO_TEAM_RENDER);
        work(&seed, 800);
      }
    }
    TMK_FRAME_NAMED("render");
    next += FRAME_NS;
    sleep_until(next);
  }
  return NULL;
}

static void* physics_thread(void* arg) {
  sim* s = (sim*)arg;
  uint32_t seed = 0x2345678u;
  uint64_t next = mono_ns();
  TMK_THREAD_NAME("physics");
  while (!DEMO_LOAD(&s->done)) {
    int step, isl;
    for (step = 0; step < 2; step++) { /* two substeps per frame */
      TMK_ZONE_C("Physics::step", TMK_SEV_INFO, DEMO_TEAM_PHYSICS, 0xCC6633);
      {
        TMK_ZONE("Physics::broadphase", TMK_SEV_INFO, DEMO_TEAM_PHYSICS);
        work(&seed, 1500);
      }
      for (isl = 0; isl < 12; isl++) {
        TMK_ZONE("Physics::island", TMK_SEV_INFO, DEMO_TEAM_PHYSICS);
        {
          TMK_ZONE("Physics::narrowphase", TMK_SEV_INFO, DEMO_TEAM_PHYSICS);
          work(&seed, 150);
        }
        {
          TMK_ZONE("Physics::solve", TMK_SEV_INFO, DEMO_TEAM_PHYSICS);
          work(&seed, 250);
        }
      }
    }
    TMK_FRAME_NAMED("physics");
    next += FRAME_NS;
    sleep_until(next);
  }
  return NULL;
}

static void* ai_thread(void* arg) {
  sim* s = (sim*)arg;
  uint32_t seed = 0x3456789u;
  uint64_t next = mono_ns();
  long frame = 0;
  TMK_THREAD_NAME("ai");
  while (!DEMO_LOAD(&s->done)) {
    int a;
    TMK_ZONE("AI::update", TMK_SEV_INFO, DEMO_TEAM_AI);
    for (a = 0; a < 32; a++) {
      TMK_ZONE("AI::think", TMK_SEV_INFO, DEMO_TEAM_AI);
      work(&seed, 100);
      if ((a + frame) % 8 == 0) {
        TMK_ZONE("AI::pathfind", TMK_SEV_INFO, DEMO_TEAM_AI);
        work(&seed, 900);
      }
      {
        TMK_ZONE("AI::blackboard", TMK_SEV_DEBUG, DEMO_TEAM_AI);
        work(&seed, 20);
      }
    }
    if (frame % 300 == 299) TMK_MESSAGE(TMK_SEV_DEBUG, DEMO_TEAM_AI, "AI: replanning all squads");
    frame++;
    next += FRAME_NS;
    sleep_until(next);
  }
  return NULL;
}

static void* audio_thread(void* arg) {
  sim* s = (sim*)arg;
  uint32_t seed = 0x456789Au;
  uint64_t next = mono_ns();
  TMK_THREAD_NAME("audio");
  while (!DEMO_LOAD(&s->done)) {
    int block, v;
    for (block = 0; block < 4; block++) { /* audio runs in 4 ms blocks */
      TMK_ZONE_C("Audio::mix", TMK_SEV_INFO, DEMO_TEAM_AUDIO, 0x33CC66);
      for (v = 0; v < 8; v++) {
        TMK_ZONE("Audio::voice", TMK_SEV_INFO, DEMO_TEAM_AUDIO);
        work(&seed, 60);
      }
      next += FRAME_NS / 4;
      sleep_until(next);
    }
  }
  return NULL;
}

/* ---- main thread -------------------------------------------------------------------------- */

long demo_run(double seconds, volatile int* stop) {
  sim s;
  pthread_t th[4];
  void* (*fns[4])(void*) = {render_thread, physics_thread, ai_thread, audio_thread};
  uint32_t seed = 0x56789ABu;
  int64_t entities = 400;
  int i;
  uint64_t next, last;
  static const char level_name[] = "level=harbour.map";
  memset(&s, 0, sizeof s);
  s.seconds = seconds;
  s.stop = stop;
  s.t0 = mono_ns();
  TMK_THREAD_NAME("main");
  TMK_ZONE_BEGIN_DATA("Game::load_level", TMK_SEV_INFO, DEMO_TEAM_ENGINE, level_name,
                      sizeof level_name - 1);
  work(&seed, 20000);
  TMK_ZONE_END();
  TMK_MESSAGE(TMK_SEV_INFO, DEMO_TEAM_ENGINE, "level loaded");
  for (i = 0; i < 4; i++) pthread_create(&th[i], NULL, fns[i], &s);
  next = last = mono_ns();
  while (!should_stop(&s)) {
    uint64_t now = mono_ns();
    double frame_ms = (double)(now - last) / 1e6;
    int e;
    last = now;
    TMK_FRAME();
    {
      TMK_ZONE_C("Game::frame", TMK_SEV_INFO, DEMO_TEAM_ENGINE, 0xCCCC33);
      {
        TMK_ZONE("Game::input", TMK_SEV_INFO, DEMO_TEAM_ENGINE);
        work(&seed, 300);
      }
      {
        TMK_ZONE("Game::update", TMK_SEV_INFO, DEMO_TEAM_ENGINE);
        for (e = 0; e < 40; e++) {
          TMK_ZONE("Game::entity", TMK_SEV_INFO, DEMO_TEAM_ENGINE);
          work(&seed, 80);
        }
      }
      {
        TMK_ZONE("Game::scripts", TMK_SEV_INFO, DEMO_TEAM_ENGINE);
        for (e = 0; e < 6; e++) {
          TMK_ZONE("Game::script_vm", TMK_SEV_INFO, DEMO_TEAM_ENGINE);
          work(&seed, 200);
        }
      }
    }
    entities += (int64_t)(rnd(&seed) % 9) - 4;
    TMK_PLOT_D("frame ms", frame_ms);
    TMK_PLOT_I("entities", entities);
    TMK_PLOT_I("memory bytes", 64 * 1024 * 1024 + entities * 4096);
    if (frame_ms > 20.0) {
      char text[64];
      int n = snprintf(text, sizeof text, "frame %ld took %.1f ms", s.frames, frame_ms);
      TMK_MESSAGE_TEXT(TMK_SEV_WARNING, DEMO_TEAM_ENGINE, text, n);
    }
    if (s.frames % 600 == 599) TMK_MESSAGE(TMK_SEV_INFO, DEMO_TEAM_ENGINE, "autosave");
    if (s.frames % 1800 == 1799)
      TMK_MESSAGE(TMK_SEV_ERROR, DEMO_TEAM_ENGINE, "texture streaming fell behind");
    s.frames++;
    next += FRAME_NS;
    sleep_until(next);
  }
  DEMO_STORE(&s.done, 1);
  for (i = 0; i < 4; i++) pthread_join(th[i], NULL);
  return s.frames;
}
