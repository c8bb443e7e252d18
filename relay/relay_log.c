/* relay_log.c — the relay's log: one line per event on stderr with a level, and a rate-limited
 * variant for bad input so that a hostile or broken sender cannot flood the log (one line per
 * source per interval, with a count of what was suppressed). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "relay_core.h"

static int g_level = TMK_LOG_INFO;
static FILE* g_out;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static const char* const k_names[] = {"error", "warn", "info", "debug"};

void tmk_relay__log_setup(int level, FILE* out) {
  g_level = level;
  g_out = out;
}

int tmk_relay__log_parse_level(const char* s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, k_names[i]) == 0) return i;
  if (strcmp(s, "warning") == 0) return TMK_LOG_WARN;
  return -1;
}

uint64_t tmk__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t tmk__unix_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void vlog(int level, const char* prefix, const char* fmt, va_list ap) {
  FILE* out = g_out ? g_out : stderr;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  time_t t = ts.tv_sec;
  gmtime_r(&t, &tm);
  pthread_mutex_lock(&g_mu);
  fprintf(out, "%02d:%02d:%02d.%03ld %-5s %s", tm.tm_hour, tm.tm_min, tm.tm_sec,
          ts.tv_nsec / 1000000L, k_names[level], prefix);
  vfprintf(out, fmt, ap);
  fputc('\n', out);
  fflush(out);
  pthread_mutex_unlock(&g_mu);
}

void tmk_relay__log(int level, const char* fmt, ...) {
  if (level > g_level) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, "", fmt, ap);
  va_end(ap);
}

/* Rate limiting: a small open-addressed table of keys; when full, the oldest entry is reused,
 * so memory stays bounded whatever the number of sources. */
#define LIMIT_SLOTS 256
typedef struct limit_slot {
  char key[64];
  uint64_t last_ms;
  uint64_t suppressed;
  int used;
} limit_slot;
static limit_slot g_slots[LIMIT_SLOTS];

static uint32_t hash_str(const char* s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

void tmk_relay__log_limited(int level, const char* key, uint64_t now_ms, const char* fmt, ...) {
  if (level > g_level) return;
  pthread_mutex_lock(&g_mu);
  uint32_t h = hash_str(key);
  limit_slot* slot = NULL;
  limit_slot* oldest = NULL;
  for (uint32_t i = 0; i < 8; i++) {
    limit_slot* s = &g_slots[(h + i) % LIMIT_SLOTS];
    if (s->used && strncmp(s->key, key, sizeof s->key - 1) == 0) {
      slot = s;
      break;
    }
    if (!oldest || (oldest->used && (!s->used || s->last_ms < oldest->last_ms))) oldest = s;
  }
  uint64_t suppressed = 0;
  if (slot) {
    if (now_ms - slot->last_ms < TMK__LOG_INTERVAL_MS) {
      slot->suppressed++;
      pthread_mutex_unlock(&g_mu);
      return;
    }
    suppressed = slot->suppressed;
  } else {
    slot = oldest;
    snprintf(slot->key, sizeof slot->key, "%s", key);
    slot->used = 1;
  }
  slot->last_ms = now_ms;
  slot->suppressed = 0;
  pthread_mutex_unlock(&g_mu);

  char prefix[96];
  if (suppressed)
    snprintf(prefix, sizeof prefix, "(%llu similar suppressed) ", (unsigned long long)suppressed);
  else
    prefix[0] = 0;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, prefix, fmt, ap);
  va_end(ap);
}
