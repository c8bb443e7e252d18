/* relay_analysis.h — analysis over everything a session stores: per-call-site statistics
 * (count, total, self, mean, median, p95, max, share of the range) and one site's occurrences with
 * a duration histogram. Served as GET /api/sessions/{id}/stats and …/occurrences (docs/API.md,
 * "Analysis"). Uses only tmk_relay.h, in bounded time slices, so no session lock is held long. */
#ifndef TMK_RELAY_ANALYSIS_H
#define TMK_RELAY_ANALYSIS_H

#include "relay_core.h"

/* Answers one analysis request. `query` is the URL's query string (may be NULL). Writes the
 * response body (an error object on failure) to `out`, which the caller has initialised and
 * frees. Returns the HTTP status: 200, 400 (a bad parameter, or a range holding more call sites
 * than one request analyses), 404 (no such session), 503 (too many analyses running), 500. */
int tmk__analysis_stats_json(tmk_relay* r, const char* id, const char* query, tmk__json* out);
int tmk__analysis_occurrences_json(tmk_relay* r, const char* id, const char* query,
                                   tmk__json* out);

#endif /* TMK_RELAY_ANALYSIS_H */
