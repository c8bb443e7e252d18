/* demo_sim.h — a simulated game for telemark: main, render, physics, AI and audio threads at
 * 60 fps with nested zones, frame marks, plots, messages and team verbosity bits. Used by the
 * demo (telemark-demo) and by the agent benchmark, which measures the bytes of its stream. */
#ifndef DEMO_SIM_H
#define DEMO_SIM_H

#include <stdint.h>

/* Verbosity (team) bits of the demo, named in the agent desc via demo_team_names. */
enum {
  DEMO_TEAM_ENGINE = 1u << 0,
  DEMO_TEAM_RENDER = 1u << 1,
  DEMO_TEAM_PHYSICS = 1u << 2,
  DEMO_TEAM_AI = 1u << 3,
  DEMO_TEAM_AUDIO = 1u << 4
};
extern const char* const demo_team_names[5];

/* Runs the game until `seconds` have passed (0: forever) or *stop becomes non-zero.
 * Returns the number of frames the main thread ran. */
long demo_run(double seconds, volatile int* stop);

#endif
