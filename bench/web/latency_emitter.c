/* latency_emitter.c — the target side of tmk-bench-web's latency figure: an agent that ends a
 * marker zone every 20 ms with the wall-clock time of its end (ns since 1970, as text) as extra
 * data, so the page can tell how long a zone end takes to reach a drawn pixel. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "telemark.h"

static unsigned long long wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PORT COUNT\n", argv[0]);
    return 2;
  }
  static unsigned char arena[1 << 20];
  tmk_agent_desc d;
  memset(&d, 0, sizeof d);
  d.relay_port = (uint16_t)atoi(argv[1]);
  d.program = "tmk-bench-web-latency";
  d.level = TMK_LEVEL(TMK_SEV_TRACE);
  int rc = tmk_agent_init(&d, arena, sizeof arena);
  if (rc != 0) {
    fprintf(stderr, "latency_emitter: agent init failed: %d\n", rc);
    return 1;
  }
  int count = atoi(argv[2]);
  for (int i = 0; i < count; i++) {
    TMK_ZONE_BEGIN("latency_probe", TMK_SEV_INFO, 1);
    struct timespec w = {0, 2000000L};
    nanosleep(&w, NULL);
    char text[32];
    int n = snprintf(text, sizeof text, "%llu", wall_ns());
    TMK_ZONE_END_DATA(text, n);
    TMK_FRAME();
    struct timespec p = {0, 18000000L};
    nanosleep(&p, NULL);
  }
  tmk_agent_shutdown();
  return 0;
}
