/* tmk_log.c — the agent's one logging function: formats a line and hands it to the game's
 * tmk_logger. Used by every agent file; calls nothing of theirs. */
#include <stdarg.h>
#include <stdio.h>

#include "tmk_transport.h"

void tmk__agent_log(const tmk_logger* logger, int level, const char* fmt, ...) {
  char line[256];
  va_list ap;
  if (!logger || !logger->fn) return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  logger->fn(logger->user_data, level, line);
}
