/* tmk_port_port_minimal.c — the required functions of the minimal test port: a clock that moves
 * 1 us per reading (no OS clock), no wall clock, a fixed "random" session id. */
#include "tmk_port.h"

void* tmk_port_minimal_tls;
static uint64_t now_ns;

uint64_t tmk_port_monotonic_ns(void) { return now_ns += 1000u; }

uint64_t tmk_port_unix_ns(void) { return 0; }

uint64_t tmk_port_random64(void) { return 0x6d696e696d616cull; }
