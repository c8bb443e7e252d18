/* tmk_port_baremetal.c — the required functions of the bare-metal port. There is no OS clock:
 * the game passes desc.clock, and the port's own clock only counts calls (1 us each) so that a
 * game that forgot still gets ordered, if meaningless, times. No wall clock. */
#include "tmk_port.h"

void* tmk_port_baremetal_tls;
/* The board may store something that differs per boot here before tmk_agent_init (a cycle
 * counter read after waiting for a UART, an ADC's noise, a unique-id register): it seeds the
 * session id. */
uint64_t tmk_port_baremetal_entropy;
static uint64_t calls;

uint64_t tmk_port_monotonic_ns(void) { return calls += 1000u; }

uint64_t tmk_port_unix_ns(void) { return 0; }

/* A 32-bit finaliser (MurmurHash3's fmix32): xor-shifts and odd multiplies, each invertible. */
static uint32_t mix32(uint32_t x) {
  x = (x ^ (x >> 16)) * 0x85EBCA6Bu;
  x = (x ^ (x >> 13)) * 0xC2B2AE35u;
  return x ^ (x >> 16);
}

/* Steps the seed by a 64-bit odd constant and mixes it with 32-bit multiplies only (a 64-bit one
 * takes three on a 32-bit core): the low half mixed, then the high half mixed with that, which is
 * invertible, so distinct seeds give distinct ids. */
uint64_t tmk_port_random64(void) {
  uint64_t s = (tmk_port_baremetal_entropy += 0x9E3779B97F4A7C15ull);
  uint32_t lo = mix32((uint32_t)s);
  return (uint64_t)mix32((uint32_t)(s >> 32) ^ lo) << 32 | lo;
}
