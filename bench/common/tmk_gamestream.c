/* tmk_gamestream.c — generator of the game-like stream (see tmk_gamestream.h). Each thread's frame
 * is built by walking its call tree: a zone starts a few tens of ns after the previous
 * instrumentation point, leaves last their site's base duration (scaled per entity) with a few %
 * of jitter, parents end after their children plus some self time. */
#include "tmk_gamestream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- call sites ---------------------------------------------------------------------------- */

enum {
  S_FRAME = 1, S_INPUT, S_UPDATE, S_SCRIPT, S_ENTITY, S_ANIM, S_ANIM_BLEND, S_UI, S_SUBMIT, S_WAIT,
  S_R_FRAME, S_R_CULL, S_R_CHUNK, S_R_SHADOW, S_R_MAIN, S_R_BIND, S_R_DRAW, S_R_UNIFORMS,
  S_R_POSTFX, S_R_PRESENT,
  S_P_STEP, S_P_BROAD, S_P_NARROW, S_P_CONTACT, S_P_SOLVER, S_P_ITER, S_P_ISLAND, S_P_INTEGRATE,
  S_AI_TICK, S_AI_SENSE, S_AI_AGENT_SENSE, S_AI_RAY, S_AI_PLAN, S_AI_AGENT_PLAN, S_AI_PATH,
  S_A_MIX, S_A_VOICE, S_A_REVERB,
  S_PL_FRAME_MS, S_PL_DRAWS, S_PL_ENTITIES, S_PL_MEMORY,
  S_M_STREAMED, S_M_NOPATH, S_F_GPU,
  S_COUNT
};

#define Z(id, name, file, line, sev, team, color) \
  {id, TMK_SITE_ZONE, sev, 1u << (team), color, line, {name, sizeof name - 1}, {file, sizeof file - 1}}
#define K(id, kind, name, file, line, sev, team) \
  {id, kind, sev, 1u << (team), 0, line, {name, sizeof name - 1}, {file, sizeof file - 1}}

static const tmk_proto_site k_sites[S_COUNT - 1] = {
    Z(S_FRAME, "Frame", "src/main.c", 210, TMK_SEV_INFO, 0, 0x4060A0),
    Z(S_INPUT, "Input::Poll", "src/input.c", 44, TMK_SEV_DEBUG, 0, 0),
    Z(S_UPDATE, "Game::Update", "src/game.c", 120, TMK_SEV_INFO, 3, 0x40A040),
    Z(S_SCRIPT, "Script::Tick", "src/script/vm.c", 301, TMK_SEV_DEBUG, 3, 0),
    Z(S_ENTITY, "Entity::Update", "src/game/entity.c", 88, TMK_SEV_TRACE, 3, 0),
    Z(S_ANIM, "Anim::Evaluate", "src/anim/anim.c", 145, TMK_SEV_TRACE, 3, 0xA0A040),
    Z(S_ANIM_BLEND, "Anim::Blend", "src/anim/blend.c", 67, TMK_SEV_TRACE, 3, 0),
    Z(S_UI, "UI::Layout", "src/ui/layout.c", 512, TMK_SEV_DEBUG, 0, 0),
    Z(S_SUBMIT, "Render::Submit", "src/render/submit.c", 33, TMK_SEV_INFO, 1, 0xA04040),
    Z(S_WAIT, "Frame::WaitVSync", "src/main.c", 260, TMK_SEV_INFO, 0, 0x808080),
    Z(S_R_FRAME, "Render::Frame", "src/render/render.c", 101, TMK_SEV_INFO, 1, 0xA04040),
    Z(S_R_CULL, "Render::Cull", "src/render/cull.c", 20, TMK_SEV_DEBUG, 1, 0),
    Z(S_R_CHUNK, "Cull::Chunk", "src/render/cull.c", 61, TMK_SEV_TRACE, 1, 0),
    Z(S_R_SHADOW, "Render::ShadowPass", "src/render/shadow.c", 140, TMK_SEV_DEBUG, 1, 0),
    Z(S_R_MAIN, "Render::MainPass", "src/render/render.c", 180, TMK_SEV_DEBUG, 1, 0),
    Z(S_R_BIND, "Material::Bind", "src/render/material.c", 77, TMK_SEV_TRACE, 1, 0),
    Z(S_R_DRAW, "DrawCall", "src/render/draw.c", 12, TMK_SEV_TRACE, 1, 0),
    Z(S_R_UNIFORMS, "Upload::Uniforms", "src/render/draw.c", 40, TMK_SEV_TRACE, 1, 0),
    Z(S_R_POSTFX, "PostFX::Pass", "src/render/postfx.c", 90, TMK_SEV_DEBUG, 1, 0),
    Z(S_R_PRESENT, "GPU::Present", "src/render/render.c", 240, TMK_SEV_INFO, 1, 0),
    Z(S_P_STEP, "Physics::Step", "src/physics/world.c", 300, TMK_SEV_INFO, 2, 0xC08000),
    Z(S_P_BROAD, "Broadphase", "src/physics/broad.c", 51, TMK_SEV_DEBUG, 2, 0),
    Z(S_P_NARROW, "Narrowphase", "src/physics/narrow.c", 75, TMK_SEV_DEBUG, 2, 0),
    Z(S_P_CONTACT, "Contact::Generate", "src/physics/narrow.c", 130, TMK_SEV_TRACE, 2, 0),
    Z(S_P_SOLVER, "Solver", "src/physics/solver.c", 40, TMK_SEV_DEBUG, 2, 0),
    Z(S_P_ITER, "Solver::Iteration", "src/physics/solver.c", 88, TMK_SEV_TRACE, 2, 0),
    Z(S_P_ISLAND, "Solver::Island", "src/physics/solver.c", 120, TMK_SEV_TRACE, 2, 0),
    Z(S_P_INTEGRATE, "Integrate", "src/physics/world.c", 350, TMK_SEV_DEBUG, 2, 0),
    Z(S_AI_TICK, "AI::Tick", "src/ai/ai.c", 30, TMK_SEV_INFO, 3, 0x20A0A0),
    Z(S_AI_SENSE, "AI::Perception", "src/ai/sense.c", 18, TMK_SEV_DEBUG, 3, 0),
    Z(S_AI_AGENT_SENSE, "Agent::Sense", "src/ai/sense.c", 55, TMK_SEV_TRACE, 3, 0),
    Z(S_AI_RAY, "Physics::Raycast", "src/physics/query.c", 210, TMK_SEV_TRACE, 2, 0),
    Z(S_AI_PLAN, "AI::Planner", "src/ai/plan.c", 25, TMK_SEV_DEBUG, 3, 0),
    Z(S_AI_AGENT_PLAN, "Agent::Plan", "src/ai/plan.c", 80, TMK_SEV_TRACE, 3, 0),
    Z(S_AI_PATH, "PathFind", "src/ai/path.c", 140, TMK_SEV_DEBUG, 3, 0x2060C0),
    Z(S_A_MIX, "Audio::Mix", "src/audio/mixer.c", 60, TMK_SEV_INFO, 4, 0x8040C0),
    Z(S_A_VOICE, "Voice::Render", "src/audio/voice.c", 33, TMK_SEV_TRACE, 4, 0),
    Z(S_A_REVERB, "DSP::Reverb", "src/audio/dsp.c", 150, TMK_SEV_TRACE, 4, 0),
    K(S_PL_FRAME_MS, TMK_SITE_PLOT, "frame ms", "src/main.c", 270, TMK_SEV_INFO, 0),
    K(S_PL_DRAWS, TMK_SITE_PLOT, "draw calls", "src/render/render.c", 250, TMK_SEV_INFO, 1),
    K(S_PL_ENTITIES, TMK_SITE_PLOT, "entities", "src/game.c", 180, TMK_SEV_INFO, 3),
    K(S_PL_MEMORY, TMK_SITE_PLOT, "heap KB", "src/mem.c", 99, TMK_SEV_INFO, 0),
    K(S_M_STREAMED, TMK_SITE_MESSAGE, "level chunk streamed in", "src/stream.c", 140, TMK_SEV_INFO, 0),
    K(S_M_NOPATH, TMK_SITE_MESSAGE, "no path", "src/ai/path.c", 190, TMK_SEV_WARNING, 3),
    K(S_F_GPU, TMK_SITE_FRAME, "GPU frame", "src/render/render.c", 245, TMK_SEV_INFO, 1),
};

/* Base durations in ns of the sites that are timed as leaves or carry self time. */
static uint32_t base_ns(uint32_t site) {
  switch (site) {
    case S_INPUT: return 140000;
    case S_ENTITY: return 21000;
    case S_ANIM: return 9000;
    case S_ANIM_BLEND: return 24000;
    case S_UI: return 780000;
    case S_SUBMIT: return 310000;
    case S_R_CHUNK: return 38000;
    case S_R_BIND: return 6500;
    case S_R_DRAW: return 14000;
    case S_R_UNIFORMS: return 2600;
    case S_R_POSTFX: return 290000;
    case S_R_PRESENT: return 450000;
    case S_P_BROAD: return 310000;
    case S_P_CONTACT: return 11500;
    case S_P_ISLAND: return 14800;
    case S_P_INTEGRATE: return 205000;
    case S_AI_AGENT_SENSE: return 7800;
    case S_AI_RAY: return 3900;
    case S_AI_AGENT_PLAN: return 11800;
    case S_AI_PATH: return 150000;
    case S_A_VOICE: return 17500;
    case S_A_REVERB: return 24500;
    default: return 2000; /* self time of parents */
  }
}

static const char* const k_thread_names[TMK_GS_THREADS] = {"main", "render", "physics", "ai",
                                                           "audio"};
static const char* const k_team_names[] = {"engine", "render", "physics", "gameplay", "audio"};

const tmk_proto_site* tmk_gs_sites(size_t* n) {
  *n = S_COUNT - 1;
  return k_sites;
}
const char* tmk_gs_thread_name(uint32_t thread) {
  return thread < TMK_GS_THREADS ? k_thread_names[thread] : NULL;
}
const char* tmk_gs_team_name(uint32_t bit) {
  return bit < sizeof k_team_names / sizeof k_team_names[0] ? k_team_names[bit] : NULL;
}

/* ---- generator state ------------------------------------------------------------------------ */

#define ZCAP 4096
#define ECAP 64
#define N_ENTITIES 120
#define N_AGENTS 50
#define N_BATCHES 25
#define N_VOICES 24

typedef struct gs_thread {
  tmk_proto_zone z[ZCAP];
  size_t nz;
  tmk_gs_event e[ECAP];
  size_t ne;
  uint64_t free_at; /* when this thread finished its previous work */
  uint32_t depth;
} gs_thread;

struct tmk_gamestream {
  uint64_t rng;
  uint64_t frame;
  uint64_t t0;
  uint64_t audio_next;
  int contacts;
  int64_t heap_kb;
  float entity_cost[N_ENTITIES];
  float agent_cost[N_AGENTS];
  int draws_per_batch[N_BATCHES];
  gs_thread th[TMK_GS_THREADS];
  char text[ECAP][64];
  size_t ntext;
  tmk_gs_frame out;
};

static uint64_t rnd(tmk_gamestream* g) {
  uint64_t x = g->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  g->rng = x;
  return x * 0x2545F4914F6CDD1DULL;
}
static double unit(tmk_gamestream* g) { return (double)(rnd(g) >> 11) * (1.0 / 9007199254740992.0); }
/* About normal with the given relative sigma (sum of four uniforms), never below half. */
static double jitter(tmk_gamestream* g, double sigma) {
  double s = unit(g) + unit(g) + unit(g) + unit(g) - 2.0;
  double f = 1.0 + sigma * s * 1.7320508;
  return f < 0.5 ? 0.5 : f;
}
/* A few tens of ns between two instrumentation points. */
static uint64_t gap(tmk_gamestream* g) { return 18 + rnd(g) % 45; }

static uint64_t dur(tmk_gamestream* g, uint32_t site, double scale) {
  return (uint64_t)((double)base_ns(site) * scale * jitter(g, 0.03));
}

static size_t open_z(gs_thread* th, uint32_t site, uint64_t t) {
  size_t i = th->nz;
  if (i == ZCAP) abort(); /* the call trees below never come close */
  th->z[i].site = site;
  th->z[i].depth = th->depth++;
  th->z[i].start = t;
  th->z[i].duration = 0;
  th->nz++;
  return i;
}
/* Closes zone i at t + some self time; returns the end. */
static uint64_t close_z(tmk_gamestream* g, gs_thread* th, size_t i, uint64_t t) {
  t += gap(g) + dur(g, th->z[i].site, 1.0) / 4;
  th->z[i].duration = t - th->z[i].start;
  th->depth--;
  return t;
}
static uint64_t leaf(tmk_gamestream* g, gs_thread* th, uint32_t site, uint64_t t, double scale) {
  size_t i = open_z(th, site, t);
  th->z[i].duration = dur(g, site, scale);
  th->depth--;
  return t + th->z[i].duration;
}

static tmk_gs_event* event(gs_thread* th, uint8_t kind, uint32_t site, uint64_t t) {
  tmk_gs_event* e;
  if (th->ne == ECAP) abort();
  e = &th->e[th->ne++];
  memset(e, 0, sizeof *e);
  e->kind = kind;
  e->site = site;
  e->time = t;
  return e;
}

/* ---- the threads' frames -------------------------------------------------------------------- */

static void main_thread(tmk_gamestream* g, uint64_t vsync) {
  gs_thread* th = &g->th[0];
  uint64_t t = vsync + gap(g), next = vsync + TMK_GS_FRAME_TICKS;
  size_t fr, up, sc;
  int e;
  tmk_gs_event* ev;
  event(th, TMK_GS_FRAME, 0, vsync);
  fr = open_z(th, S_FRAME, t);
  t = leaf(g, th, S_INPUT, t + gap(g), 1.0);
  up = open_z(th, S_UPDATE, t + gap(g));
  t = th->z[up].start;
  sc = open_z(th, S_SCRIPT, t + gap(g));
  t = th->z[sc].start;
  for (e = 0; e < N_ENTITIES; e++) {
    size_t en = open_z(th, S_ENTITY, t + gap(g));
    t = th->z[en].start + gap(g);
    if (e % 4 == 0) {
      size_t an = open_z(th, S_ANIM, t);
      t = leaf(g, th, S_ANIM_BLEND, t + gap(g), g->entity_cost[e]);
      t = close_z(g, th, an, t);
    }
    t += dur(g, S_ENTITY, g->entity_cost[e]);
    th->z[en].duration = t - th->z[en].start;
    th->depth--;
  }
  t = close_z(g, th, sc, t);
  t = close_z(g, th, up, t);
  t = leaf(g, th, S_UI, t + gap(g), 1.0);
  t = leaf(g, th, S_SUBMIT, t + gap(g), 1.0);
  {
    size_t w = open_z(th, S_WAIT, t + gap(g));
    uint64_t end = next > th->z[w].start + 1000 ? next - 200 : th->z[w].start + 1000;
    th->z[w].duration = end - th->z[w].start;
    th->depth--;
    t = end;
  }
  th->z[fr].duration = t + gap(g) - th->z[fr].start;
  th->depth--;
  ev = event(th, TMK_GS_PLOT_D, S_PL_FRAME_MS, t + 100);
  ev->d = (double)(t - vsync) / 1e6;
  ev = event(th, TMK_GS_PLOT_I, S_PL_ENTITIES, t + 120);
  ev->i = N_ENTITIES;
  g->heap_kb += (int64_t)(rnd(g) % 64) - 31;
  ev = event(th, TMK_GS_PLOT_I, S_PL_MEMORY, t + 140);
  ev->i = g->heap_kb;
  if (g->frame % 97 == 13) {
    ev = event(th, TMK_GS_MESSAGE, S_M_STREAMED, th->z[up].start + 500);
    ev->severity = TMK_SEV_INFO;
    ev->verbosity = 1;
  }
}

static void render_thread(tmk_gamestream* g, uint64_t vsync) {
  gs_thread* th = &g->th[1];
  uint64_t nominal = vsync + 5600000, t;
  size_t fr, cu, sh, mp, px;
  int i, k, draws = 0;
  tmk_gs_event* ev;
  t = (th->free_at > nominal ? th->free_at : nominal) + gap(g);
  fr = open_z(th, S_R_FRAME, t);
  cu = open_z(th, S_R_CULL, t + gap(g));
  t = th->z[cu].start;
  for (i = 0; i < 16; i++) t = leaf(g, th, S_R_CHUNK, t + gap(g), 0.7 + 0.05 * i);
  t = close_z(g, th, cu, t);
  sh = open_z(th, S_R_SHADOW, t + gap(g));
  t = th->z[sh].start;
  for (i = 0; i < 40; i++) t = leaf(g, th, S_R_DRAW, t + gap(g), 0.8), draws++;
  t = close_z(g, th, sh, t);
  mp = open_z(th, S_R_MAIN, t + gap(g));
  t = th->z[mp].start;
  for (i = 0; i < N_BATCHES; i++) {
    size_t b = open_z(th, S_R_BIND, t + gap(g));
    t = th->z[b].start + gap(g) + dur(g, S_R_BIND, 1.0);
    for (k = 0; k < g->draws_per_batch[i]; k++) {
      size_t d = open_z(th, S_R_DRAW, t + gap(g));
      t = leaf(g, th, S_R_UNIFORMS, th->z[d].start + gap(g), 1.0);
      t += dur(g, S_R_DRAW, 1.0);
      th->z[d].duration = t - th->z[d].start;
      th->depth--;
      draws++;
    }
    t = close_z(g, th, b, t);
  }
  t = close_z(g, th, mp, t);
  px = open_z(th, S_R_POSTFX, t + gap(g));
  t = th->z[px].start;
  for (i = 0; i < 3; i++) t = leaf(g, th, S_R_POSTFX, t + gap(g), 0.6 + 0.3 * i);
  t = close_z(g, th, px, t);
  t = leaf(g, th, S_R_PRESENT, t + gap(g), 1.0);
  t = close_z(g, th, fr, t);
  th->free_at = t;
  event(th, TMK_GS_FRAME, S_F_GPU, t + 50);
  ev = event(th, TMK_GS_PLOT_I, S_PL_DRAWS, t + 80);
  ev->i = draws;
}

static void physics_step(tmk_gamestream* g, gs_thread* th, uint64_t t) {
  size_t st, np, so;
  int i, k;
  st = open_z(th, S_P_STEP, t);
  t = leaf(g, th, S_P_BROAD, t + gap(g), 1.0);
  np = open_z(th, S_P_NARROW, t + gap(g));
  t = th->z[np].start;
  for (i = 0; i < g->contacts; i++) t = leaf(g, th, S_P_CONTACT, t + gap(g), 1.0);
  t = close_z(g, th, np, t);
  so = open_z(th, S_P_SOLVER, t + gap(g));
  t = th->z[so].start;
  for (i = 0; i < 8; i++) {
    size_t it = open_z(th, S_P_ITER, t + gap(g));
    t = th->z[it].start;
    for (k = 0; k < 6; k++) t = leaf(g, th, S_P_ISLAND, t + gap(g), 0.6 + 0.15 * k);
    t = close_z(g, th, it, t);
  }
  t = close_z(g, th, so, t);
  t = leaf(g, th, S_P_INTEGRATE, t + gap(g), 1.0);
  th->free_at = close_z(g, th, st, t);
}

static void physics_thread(tmk_gamestream* g, uint64_t vsync) {
  gs_thread* th = &g->th[2];
  int s;
  g->contacts += (int)(rnd(g) % 5) - 2;
  if (g->contacts < 28) g->contacts = 28;
  if (g->contacts > 52) g->contacts = 52;
  for (s = 0; s < 2; s++) {
    uint64_t nominal = vsync + 200000 + (uint64_t)s * (TMK_GS_FRAME_TICKS / 2);
    physics_step(g, th, (th->free_at > nominal ? th->free_at : nominal) + gap(g));
  }
}

static void ai_thread(tmk_gamestream* g, uint64_t vsync) {
  gs_thread* th = &g->th[3];
  uint64_t nominal = vsync + 1000000, t;
  size_t tk, se, pl;
  int a;
  t = (th->free_at > nominal ? th->free_at : nominal) + gap(g);
  tk = open_z(th, S_AI_TICK, t);
  se = open_z(th, S_AI_SENSE, t + gap(g));
  t = th->z[se].start;
  for (a = 0; a < N_AGENTS; a++) {
    size_t ag = open_z(th, S_AI_AGENT_SENSE, t + gap(g));
    t = leaf(g, th, S_AI_RAY, th->z[ag].start + gap(g), 1.0);
    t = leaf(g, th, S_AI_RAY, t + gap(g), 1.3);
    t += dur(g, S_AI_AGENT_SENSE, g->agent_cost[a]);
    th->z[ag].duration = t - th->z[ag].start;
    th->depth--;
  }
  t = close_z(g, th, se, t);
  pl = open_z(th, S_AI_PLAN, t + gap(g));
  t = th->z[pl].start;
  for (a = 0; a < N_AGENTS; a++) {
    size_t ag = open_z(th, S_AI_AGENT_PLAN, t + gap(g));
    t = th->z[ag].start + gap(g);
    if (rnd(g) % 10 == 0) {
      t = leaf(g, th, S_AI_PATH, t, 0.5 + unit(g));
      if (rnd(g) % 20 == 0 && g->ntext < ECAP) {
        tmk_gs_event* ev = event(th, TMK_GS_MESSAGE, S_M_NOPATH, t + 10);
        char* s = g->text[g->ntext++];
        int n = snprintf(s, 64, "agent %d: no path to (%d, %d)", a, (int)(rnd(g) % 256),
                         (int)(rnd(g) % 256));
        ev->severity = TMK_SEV_WARNING;
        ev->verbosity = 1u << 3;
        ev->text = s;
        ev->text_len = (uint32_t)(n < 63 ? n : 63);
      }
    }
    t += dur(g, S_AI_AGENT_PLAN, g->agent_cost[a]);
    th->z[ag].duration = t - th->z[ag].start;
    th->depth--;
  }
  t = close_z(g, th, pl, t);
  th->free_at = close_z(g, th, tk, t);
}

/* The audio callback runs every 256 samples at 48 kHz, on its own clock. */
static void audio_thread(tmk_gamestream* g, uint64_t vsync) {
  gs_thread* th = &g->th[4];
  uint64_t end = vsync + TMK_GS_FRAME_TICKS;
  while (g->audio_next < end) {
    uint64_t t = g->audio_next + gap(g);
    size_t mx = open_z(th, S_A_MIX, t);
    int v;
    for (v = 0; v < N_VOICES; v++) {
      size_t vo = open_z(th, S_A_VOICE, t + gap(g));
      t = th->z[vo].start + gap(g) + dur(g, S_A_VOICE, 0.8 + 0.02 * v);
      if (v % 4 == 0) t = leaf(g, th, S_A_REVERB, t + gap(g), 1.0);
      th->z[vo].duration = t - th->z[vo].start;
      th->depth--;
    }
    close_z(g, th, mx, t);
    g->audio_next += 5333333;
  }
}

/* ---- public --------------------------------------------------------------------------------- */

tmk_gamestream* tmk_gs_create(uint64_t seed) {
  tmk_gamestream* g = (tmk_gamestream*)calloc(1, sizeof *g);
  int i;
  if (!g) return NULL;
  g->rng = seed * 0x9E3779B97F4A7C15ull + 1;
  g->t0 = 3 * TMK_GS_TICKS_PER_S + rnd(g) % TMK_GS_TICKS_PER_S; /* seconds after boot */
  g->audio_next = g->t0 + 1200000;
  g->contacts = 40;
  g->heap_kb = 180000;
  for (i = 0; i < N_ENTITIES; i++) g->entity_cost[i] = (float)(0.6 + unit(g));
  for (i = 0; i < N_AGENTS; i++) g->agent_cost[i] = (float)(0.7 + 0.6 * unit(g));
  for (i = 0; i < N_BATCHES; i++) g->draws_per_batch[i] = 6 + (int)(rnd(g) % 5);
  return g;
}

void tmk_gs_destroy(tmk_gamestream* g) { free(g); }

const tmk_gs_frame* tmk_gs_next_frame(tmk_gamestream* g) {
  uint64_t vsync = g->t0 + g->frame * TMK_GS_FRAME_TICKS;
  uint32_t i;
  for (i = 0; i < TMK_GS_THREADS; i++) {
    g->th[i].nz = 0;
    g->th[i].ne = 0;
    g->th[i].depth = 0;
  }
  g->ntext = 0;
  main_thread(g, vsync);
  render_thread(g, vsync);
  physics_thread(g, vsync);
  ai_thread(g, vsync);
  audio_thread(g, vsync);
  g->out.index = g->frame;
  g->out.start = vsync;
  for (i = 0; i < TMK_GS_THREADS; i++) {
    g->out.batch[i].thread = i;
    g->out.batch[i].zones = g->th[i].z;
    g->out.batch[i].nzones = g->th[i].nz;
    g->out.batch[i].events = g->th[i].e;
    g->out.batch[i].nevents = g->th[i].ne;
  }
  g->frame++;
  return &g->out;
}
