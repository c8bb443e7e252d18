/* relay_api.h — the HTTP reply helpers of the JSON API (relay_api.c) that the dashboard's guards
 * (relay_web.c) share: one table from TMK_E* codes to HTTP statuses (docs/API.md "Errors"),
 * every status with its reason text. Internal. */
#ifndef TMK_RELAY_API_H
#define TMK_RELAY_API_H

struct mg_connection;

/* Sends {"error": msg, "code": "<TMK_E* name>"} with the status's reason text. status 0 = the
 * table's: EINVAL/ERANGE 400, EACCESS 401, ENOTFOUND 404, ESTATE/ENOSPC 409, ETOOBIG 413,
 * ECORRUPT 422, EAGAIN 503, anything else 500. msg NULL or "" = tmk_strerror(err). 401 and 403
 * also close the connection. Returns the status sent. */
int tmk__http_send_error(struct mg_connection* conn, int status, int err, const char* msg);

#endif /* TMK_RELAY_API_H */
