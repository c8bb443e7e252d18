/* tmk_gamestream.h — a deterministic, game-like stream of profiling data for the benchmarks of
 * protocol, agent and relay: five threads (main, render, physics, AI, audio), ~40 call sites,
 * zones nested 3-6 deep at 60 fps with per-entity loops, realistic jitter and gaps, 1 GHz ticks,
 * plus frame marks, plot samples and occasional messages. Same seed, same stream. */
#ifndef TMK_GAMESTREAM_H
#define TMK_GAMESTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "tmk_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TMK_GS_THREADS 5
#define TMK_GS_TICKS_PER_S 1000000000ull /* timestamps are ns */
#define TMK_GS_FRAME_TICKS 16666667ull   /* 60 fps */

/* Non-zone records of one thread. */
enum { TMK_GS_FRAME = 1, TMK_GS_PLOT_I, TMK_GS_PLOT_D, TMK_GS_MESSAGE };

typedef struct tmk_gs_event {
  uint8_t kind; /* TMK_GS_* */
  uint8_t severity;
  uint32_t site; /* 0 = main frame / message without site */
  uint32_t verbosity;
  uint64_t time;
  int64_t i;
  double d;
  const char* text; /* messages; valid until the next tmk_gs_next_frame */
  uint32_t text_len;
} tmk_gs_event;

/* One thread's records for one frame: zones sorted by start, then depth (depth-first order). */
typedef struct tmk_gs_batch {
  uint32_t thread;
  const tmk_proto_zone* zones;
  size_t nzones;
  const tmk_gs_event* events;
  size_t nevents;
} tmk_gs_batch;

typedef struct tmk_gs_frame {
  uint64_t index;
  uint64_t start; /* vsync tick at which the frame began */
  tmk_gs_batch batch[TMK_GS_THREADS];
} tmk_gs_frame;

typedef struct tmk_gamestream tmk_gamestream;

/* Creates a stream (malloc'd, about 1 MB). Returns NULL when out of memory. */
tmk_gamestream* tmk_gs_create(uint64_t seed);
void tmk_gs_destroy(tmk_gamestream* g);
/* Generates the next frame; the result stays valid until the next call. */
const tmk_gs_frame* tmk_gs_next_frame(tmk_gamestream* g);

/* The call-site descriptors (ids 1..n), thread names and team names of the stream. */
const tmk_proto_site* tmk_gs_sites(size_t* n);
const char* tmk_gs_thread_name(uint32_t thread);
const char* tmk_gs_team_name(uint32_t bit); /* NULL for bits without a name */

#ifdef __cplusplus
}
#endif
#endif
