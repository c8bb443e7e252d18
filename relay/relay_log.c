/* relay_log.c — a relay's log: one line per event, handed with its level to the logger given in
 * tmk_relay_desc.log (none: silent), and a rate-limited variant for bad input so that a hostile
 * or broken sender cannot flood the log (one line per source per interval, with a count of what
 * was suppressed). tmk_relay_log_to_file is the stock logger telemark-relay uses. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "relay_core.h"

static const char* const k_names[] = {"error", "warn", "info", "debug"};

void tmk__logger_init(tmk__logger* lg, tmk_relay_log_fn fn, void* ud, int level) {
  memset(lg, 0, sizeof *lg);
  lg->fn = fn;
  lg->ud = ud;
  lg->level = level ? level : TMK_LOG_INFO;
  pthread_mutex_init(&lg->mu, NULL);
}

void tmk__logger_free(tmk__logger* lg) { pthread_mutex_destroy(&lg->mu); }

int tmk_relay__log_parse_level(const char* s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, k_names[i]) == 0) return i + 1;
  if (strcmp(s, "warning") == 0) return TMK_LOG_WARN;
  return -1;
}

uint64_t tmk__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void tmk__cond_wait_ms(pthread_cond_t* cv, pthread_mutex_t* mu, uint64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_cond_timedwait(cv, mu, &ts);
}

uint64_t tmk__unix_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void tmk_relay_log_to_file(void* file, int level, const char* line) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* whole lines, whoever logs */
  FILE* out = file ? file : stderr;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  time_t t = ts.tv_sec;
  gmtime_r(&t, &tm);
  if (level < TMK_LOG_ERROR || level > TMK_LOG_DEBUG) level = TMK_LOG_ERROR;
  pthread_mutex_lock(&mu);
  fprintf(out, "%02d:%02d:%02d.%03ld %-5s %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
          ts.tv_nsec / 1000000L, k_names[level - 1], line);
  fflush(out);
  pthread_mutex_unlock(&mu);
}

static void vlog(tmk__logger* lg, int level, const char* prefix, const char* fmt, va_list ap) {
  char line[1024];
  size_t n = strlen(prefix);
  if (n >= sizeof line) n = sizeof line - 1;
  memcpy(line, prefix, n);
  vsnprintf(line + n, sizeof line - n, fmt, ap);
  lg->fn(lg->ud, level, line);
}

void tmk_relay__log(tmk__logger* lg, int level, const char* fmt, ...) {
  if (!lg->fn || level > lg->level) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(lg, level, "", fmt, ap);
  va_end(ap);
}

/* Rate limiting: a small open-addressed table of keys; when full, the oldest entry is reused,
 * so memory stays bounded whatever the number of sources. */
static uint32_t hash_str(const char* s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

void tmk_relay__log_limited(tmk__logger* lg, int level, const char* key, uint64_t now_ms,
                            const char* fmt, ...) {
  if (!lg->fn || level > lg->level) return;
  pthread_mutex_lock(&lg->mu);
  uint32_t h = hash_str(key);
  struct tmk__log_slot* slot = NULL;
  struct tmk__log_slot* oldest = NULL;
  for (uint32_t i = 0; i < 8; i++) {
    struct tmk__log_slot* s = &lg->slots[(h + i) % TMK__LOG_LIMIT_SLOTS];
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
      pthread_mutex_unlock(&lg->mu);
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
  pthread_mutex_unlock(&lg->mu);

  char prefix[96];
  if (suppressed)
    snprintf(prefix, sizeof prefix, "(%llu similar suppressed) ", (unsigned long long)suppressed);
  else
    prefix[0] = 0;
  va_list ap;
  va_start(ap, fmt);
  vlog(lg, level, prefix, fmt, ap);
  va_end(ap);
}
