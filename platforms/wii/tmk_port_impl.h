/* tmk_port_impl.h (wii) — the inline part of the Wii port (libogc, devkitPPC): target facts, TLS
 * by LWP thread id, 32-bit atomics (lwarx/stwcx. through GCC builtins; the Broadway has no 64-bit
 * atomics and the agent needs none) and the 60.75 MHz time base as the fast tick counter.
 * Compile-checked against libogc's headers only; never run on a Wii or in Dolphin (PORTING.md). */
#ifndef TMK_PORT_IMPL_H
#define TMK_PORT_IMPL_H

#include <stdint.h>

#include <ogc/lwp.h>
#include <ogc/lwp_watchdog.h>

#define TMK_PORT_PLATFORM "wii"
#define TMK_PORT_ARCH "ppc"
#define TMK_PORT_HAS_THREADS 1
#define TMK_PORT_HAS_SOCKETS 1 /* TCP only: the Wii's IOS network stack opens no UDP socket */
#define TMK_PORT_HAS_FILES 0

typedef struct tmk_port_thread {
  lwp_t handle;
  void (*fn)(void*);
  void* arg;
} tmk_port_thread;

typedef struct tmk_port_sock {
  int open; /* 0 when closed */
  int32_t fd;
} tmk_port_sock;

/* TLS: libogc has no thread-local storage; a small table keyed by LWP_GetSelf(). */
void* tmk_port_tls_get(void);
void tmk_port_tls_set(void* v);

#define tmk_port_load32_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define tmk_port_load32_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define tmk_port_store32_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define tmk_port_store32_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define tmk_port_add32(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define tmk_port_cas32(p, expected_ptr, desired) \
  __atomic_compare_exchange_n((p), (expected_ptr), (desired), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

/* The PowerPC time base (TB_TIMER_CLOCK: 60.75 MHz on the Wii); read in one instruction pair. */
#define TMK_PORT_FAST_TICKS_NS 0
static inline uint64_t tmk_port_fast_ticks(void) { return gettime(); }

#endif /* TMK_PORT_IMPL_H */
