/* tmk_port_impl.h (posix) — the inline half of the POSIX port: types, TLS, atomics and the fast
 * tick counter (rdtsc on x86-64, CLOCK_MONOTONIC elsewhere). Included only via tmk_port.h.
 * Building with TMK_NO_THREADS=1 gives the single-threaded flavour (PSP-style targets). */
#ifndef TMK_PORT_IMPL_H
#define TMK_PORT_IMPL_H

#include <stdint.h>

#ifndef TMK_NO_THREADS
#define TMK_NO_THREADS 0
#endif

#if TMK_NO_THREADS
#define TMK_PORT_HAS_THREADS 0
#define TMK_PORT_TLS
typedef struct tmk_port_thread {
  int unused;
} tmk_port_thread;
#else
#include <pthread.h>
#define TMK_PORT_HAS_THREADS 1
#define TMK_PORT_TLS __thread __attribute__((tls_model("initial-exec")))
typedef struct tmk_port_thread {
  pthread_t handle;
  void (*fn)(void*);
  void* arg;
} tmk_port_thread;
/* Wake-ups through a self-pipe: portable across POSIX systems, and a write only happens when
 * the flusher sleeps (at most once per half ring). */
#define TMK_PORT_HAS_WAKE 1
typedef struct tmk_port_wake {
  int rd, wr;
} tmk_port_wake;
#endif

typedef struct tmk_port_sock {
  int fd; /* -1 when closed */
  int tcp;
} tmk_port_sock;
#define TMK_PORT_SOCK_INIT {-1, 0}

#define TMK_PORT_PLATFORM "linux"
#if defined(__x86_64__)
#define TMK_PORT_ARCH "x86_64"
#elif defined(__i386__)
#define TMK_PORT_ARCH "x86"
#elif defined(__powerpc64__)
#define TMK_PORT_ARCH "ppc64"
#elif defined(__powerpc__)
#define TMK_PORT_ARCH "ppc"
#elif defined(__mips__) && defined(__MIPSEL__)
#define TMK_PORT_ARCH "mipsel"
#elif defined(__mips__)
#define TMK_PORT_ARCH "mips"
#elif defined(__aarch64__)
#define TMK_PORT_ARCH "arm64"
#elif defined(__arm__)
#define TMK_PORT_ARCH "arm"
#else
#define TMK_PORT_ARCH "unknown"
#endif

/* 32-bit and pointer atomics. Nothing in the agent needs 64-bit atomics (mipsel has none). */
#define tmk_port_load32_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define tmk_port_load32_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define tmk_port_store32_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define tmk_port_store32_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define tmk_port_add32(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define tmk_port_cas32(p, expected_ptr, desired) \
  __atomic_compare_exchange_n((p), (expected_ptr), (desired), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#define tmk_port_loadptr_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define tmk_port_storeptr_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

#if defined(__x86_64__)
/* The raw cycle counter; tmk_port_fast_ticks_calibrate() measures its rate. */
static inline uint64_t tmk_port_fast_ticks(void) { return __builtin_ia32_rdtsc(); }
#define TMK_PORT_FAST_TICKS_NS 0
#else
uint64_t tmk_port_monotonic_ns(void);
static inline uint64_t tmk_port_fast_ticks(void) { return tmk_port_monotonic_ns(); }
#define TMK_PORT_FAST_TICKS_NS 1 /* ticks are nanoseconds */
#endif

#endif /* TMK_PORT_IMPL_H */
