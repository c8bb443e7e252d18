/* fuzz_recording.c — libFuzzer target for the relay's file reader (relay recordings and agent
 * files, RECORDING.md §4-5) and the replay path behind it: every packet the reader yields is
 * decoded into a session store with a small budget, as when the relay opens a file. */
#include <stdint.h>
#include <stdlib.h>

#include "relay_core.h"

static tmk__store* g_store;
static void* g_scratch;

static int on_packet(void* ud, const uint8_t* p, size_t len) {
  (void)ud;
  tmk_proto_header h;
  if (tmk_proto_parse_header(p, len, &h) > 0 && h.type == TMK_PKT_DATA)
    (void)tmk__store_packet(g_store, p, len, g_scratch);
  return 0;
}

typedef struct counter {
  size_t n;
} counter;
static int count_zone(void* ud, const tmk_relay_zone* z) {
  (void)z;
  ((counter*)ud)->n++;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_scratch) g_scratch = malloc(TMK_PROTO_MAX_BODY);
  g_store = tmk__store_new(1u << 20);
  if (!g_store || !g_scratch) abort();
  tmk__rec_read_result res;
  int rc = tmk__rec_read(data, size, on_packet, NULL, &res);
  if (rc == 0 && res.valid_bytes + res.torn_bytes != size) abort();
  tmk_relay_query q = {0, 0, -1, 0, 0, NULL};
  counter c = {0};
  tmk__store_zones(g_store, &q, count_zone, &c);
  tmk_relay_session_info info = {0};
  tmk__store_fill_info(g_store, &info);
  if (c.n + info.stats.evicted < info.stats.zones && c.n < 100000) abort();
  tmk__store_free(g_store);
  return 0;
}
