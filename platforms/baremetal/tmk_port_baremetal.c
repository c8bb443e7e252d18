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

uint64_t tmk_port_random64(void) { /* splitmix64 step: distinct seeds give distinct ids */
  uint64_t z = (tmk_port_baremetal_entropy += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
