/* agent_sendtest.c — tmk-agent-sendtest HOST PORT udp|tcp [KEY]: a fixed, known workload sent by
 * the agent (keyed with KEY, 32 hex digits, when given) to a receiver in another process. Built for every target; the host's
 * tmk-agent-recvcheck runs the powerpc and mipsel builds under qemu-user and checks on the host
 * (little-endian x86-64) that every record of the big-endian/32-bit agent decodes exactly. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "telemark.h"

#define ITER 1000

static uint64_t arena[(1u << 20) / 8];

static void* worker(void* arg) {
  int i;
  tmk_thread_name((const char*)arg);
  for (i = 0; i < ITER; i++) {
    TMK_ZONE("frame", TMK_SEV_INFO, 1);
    {
      TMK_ZONE("update", TMK_SEV_INFO, 1);
      {
        TMK_ZONE("leaf", TMK_SEV_INFO, 1);
      }
    }
    {
      TMK_ZONE("render", TMK_SEV_INFO, 2);
    }
  }
  return NULL;
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, 0};
  ts.tv_nsec = (long)ms * 1000000L;
  nanosleep(&ts, NULL);
}

int main(int argc, char** argv) {
  tmk_agent_desc d;
  tmk_agent_stats s;
  pthread_t t[2];
  static const char payload[] = "payload-\x01\x02\xff";
  static const char text[] = "dynamic \xc3\xa9t\xc3\xa9"; /* UTF-8 */
  static uint8_t key[16];
  int i, rc;
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: tmk-agent-sendtest HOST PORT udp|tcp [KEY]\n");
    return 2;
  }
  memset(&d, 0, sizeof d);
  d.relay_host = argv[1];
  d.relay_port = (uint16_t)atoi(argv[2]);
  d.transport = strcmp(argv[3], "tcp") == 0 ? TMK_TRANSPORT_TCP : TMK_TRANSPORT_UDP;
  d.program = "sendtest";
  d.overflow = TMK_OVERFLOW_WAIT;
  d.team_names[1] = "render";
  if (argc == 5) {
    for (i = 0; i < 16; i++) {
      unsigned x;
      if (strlen(argv[4]) != 32 || sscanf(argv[4] + 2 * i, "%2x", &x) != 1) {
        fprintf(stderr, "sendtest: KEY must be 32 hex digits\n");
        return 2;
      }
      key[i] = (uint8_t)x;
    }
    d.key = key;
  }
  rc = tmk_agent_init(&d, arena, sizeof arena);
  if (rc < 0) {
    fprintf(stderr, "sendtest: init: %s\n", tmk_strerror(rc));
    return 1;
  }
  for (i = 0; i < 1000; i++) { /* TCP: wait for the connection; UDP: for the WELCOME */
    if (tmk_agent_get_stats(&s) == 0 && s.connected && s.welcomed) break;
    sleep_ms(5);
  }
  pthread_create(&t[0], NULL, worker, (void*)"worker-a");
  pthread_create(&t[1], NULL, worker, (void*)"worker-b");
  pthread_join(t[0], NULL);
  pthread_join(t[1], NULL);
  TMK_PLOT_D("plot-d", -16.5e300);
  TMK_PLOT_I("plot-i", -1234567890123LL);
  TMK_MESSAGE_TEXT(TMK_SEV_ERROR, 1, text, sizeof text - 1);
  TMK_ZONE_BEGIN_DATA("marker", TMK_SEV_INFO, 1, payload, sizeof payload - 1);
  TMK_ZONE_END();
  TMK_FRAME();
  tmk_agent_flush();
  tmk_agent_get_stats(&s);
  tmk_agent_shutdown();
  printf("sendtest: %llu packets, welcomed %d, keyed %d, ring drops %llu, send failures %llu\n",
         (unsigned long long)s.packets_sent, s.welcomed, s.keyed,
         (unsigned long long)s.drops[TMK_DROP_RING_FULL],
         (unsigned long long)s.drops[TMK_DROP_SEND_FAILED]);
  return 0;
}
