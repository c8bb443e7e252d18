/* win_agent.c — tmk-win-agent.exe HOST PORT udp|tcp exact|threads: a Windows program built with
 * MinGW-w64 against platforms/win32, run under wine by win32_e2e.py against a Linux relay.
 *   exact    one thread, manual pump, a clock the program drives (desc.clock: every read is 1000
 *            ticks of 1 us after the last), so zone durations are known exactly: 200 "outer"
 *            zones of 3 ms, each holding one "inner" of 1 ms at depth 1.
 *   threads  the port's own clock and flusher thread; 10 threads made with CreateThread one after
 *            another on 4 free agent slots, each 50 "job" zones holding one "work" zone: the
 *            slots of threads that exit must be reused (thread exit seen through the port's
 *            hook), or threads 5..10 lose their zones as TMK_DROP_NO_THREAD.
 * Exit status 0 when the agent started and reported no drops. */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "telemark.h"

static uint64_t arena[(256u << 10) / 8];
static uint64_t fake_ticks;

static uint64_t fake_clock(void* user) {
  (void)user;
  fake_ticks += 1000u;
  return fake_ticks;
}

static void log_line(void* user, int level, const char* msg) {
  (void)user, (void)level;
  fprintf(stderr, "agent: %s\n", msg);
}

static DWORD WINAPI worker(LPVOID arg) {
  int i;
  (void)arg;
  for (i = 0; i < 50; i++) {
    TMK_ZONE("job", TMK_SEV_INFO, 1);
    {
      TMK_ZONE("work", TMK_SEV_INFO, 1);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  tmk_agent_desc d;
  tmk_agent_stats st;
  int exact, i, rc, dropped = 0;
  if (argc != 5) {
    fprintf(stderr, "usage: tmk-win-agent HOST PORT udp|tcp exact|threads\n");
    return 2;
  }
  exact = strcmp(argv[4], "exact") == 0;
  memset(&d, 0, sizeof d);
  d.relay_host = argv[1];
  d.relay_port = (uint16_t)atoi(argv[2]);
  d.transport = strcmp(argv[3], "tcp") == 0 ? TMK_TRANSPORT_TCP : TMK_TRANSPORT_UDP;
  d.program = exact ? "win-exact" : "win-threads";
  d.logger.fn = log_line;
  d.max_threads = exact ? 0 : 5; /* main thread + 4 for the workers */
  d.overflow = TMK_OVERFLOW_WAIT;
  if (exact) {
    d.manual_pump = 1;
    d.clock.fn = fake_clock;
    d.clock.frequency = 1000000u;
  }
  rc = tmk_agent_init(&d, arena, sizeof arena);
  if (rc != 0) {
    fprintf(stderr, "tmk_agent_init: %s\n", tmk_strerror(rc));
    return 1;
  }
  if (exact) {
    /* TCP connects in the pump: wait for it (bounded) before recording */
    for (i = 0; i < 500 && tmk_agent_get_stats(&st) == 0 && !st.connected; i++) {
      tmk_agent_pump();
      Sleep(10);
    }
    tmk_agent_pump(); /* HELLO went out on connect */
    for (i = 0; i < 200; i++) {
      {
        TMK_ZONE("outer", TMK_SEV_INFO, 1);
        {
          TMK_ZONE("inner", TMK_SEV_INFO, 1);
        }
      }
      if (i % 20 == 19) tmk_agent_pump();
    }
  } else {
    TMK_THREAD_NAME("main"); /* takes a slot for the whole run */
    for (i = 0; i < 10; i++) {
      HANDLE h = CreateThread(NULL, 0, worker, NULL, 0, NULL);
      if (!h) return 1;
      WaitForSingleObject(h, INFINITE);
      CloseHandle(h);
      tmk_agent_flush(); /* drains the exited thread's ring, so its slot is free again */
    }
  }
  tmk_agent_flush();
  if (tmk_agent_get_stats(&st) == 0)
    for (i = 0; i < TMK_DROP_REASON_COUNT; i++) dropped += (int)st.drops[i];
  printf("platform=windows transport=%s session=%016llx dropped=%d\n", argv[3],
         (unsigned long long)st.session_id, dropped);
  tmk_agent_shutdown();
  return dropped == 0 ? 0 : 1;
}
