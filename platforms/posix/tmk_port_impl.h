/* tmk_port_impl.h (posix) — the inline part of the POSIX port (Linux, macOS, BSDs): target
 * facts, TLS, atomics and the fast tick counter (rdtsc on x86-64, the monotonic clock elsewhere).
 * Included only by platforms/tmk_port.h. TMK_NO_THREADS=1 gives the single-threaded flavour. */
#ifndef TMK_PORT_IMPL_H
#define TMK_PORT_IMPL_H

#include <stdint.h>

#ifndef TMK_NO_THREADS
#define TMK_NO_THREADS 0
#endif

#define TMK_PORT_HAS_SOCKETS 1
#define TMK_PORT_HAS_FILES 1

#if TMK_NO_THREADS
#define TMK_PORT_HAS_THREADS 0
extern void* tmk_port_posix_tls;
#else
#include <pthread.h>
#define TMK_PORT_HAS_THREADS 1
typedef struct tmk_port_thread {
  pthread_t handle;
  void (*fn)(void*);
  void* arg;
} tmk_port_thread;
extern __thread void* tmk_port_posix_tls __attribute__((tls_model("initial-exec")));
/* Wake-ups through a self-pipe: portable across POSIX systems, and a write only happens when
 * the flusher sleeps (at most once per half ring). */
#define TMK_PORT_HAS_WAKE 1
#ifdef __linux__
#define TMK_PORT_HAS_THREAD_NAME 1 /* prctl(PR_SET_NAME) */
#endif
typedef struct tmk_port_wake {
  int rd, wr;
} tmk_port_wake;
#endif
#define tmk_port_tls_get() tmk_port_posix_tls
#define tmk_port_tls_set(v) ((void)(tmk_port_posix_tls = (v)))

typedef struct tmk_port_sock {
  int open; /* 0 when closed: an all-zero tmk_port_sock is closed */
  int fd;
  int tcp;
} tmk_port_sock;

#if defined(__APPLE__)
#define TMK_PORT_PLATFORM "macos"
#elif defined(__FreeBSD__)
#define TMK_PORT_PLATFORM "freebsd"
#elif defined(__OpenBSD__)
#define TMK_PORT_PLATFORM "openbsd"
#elif defined(__NetBSD__)
#define TMK_PORT_PLATFORM "netbsd"
#elif defined(__ANDROID__)
#define TMK_PORT_PLATFORM "android"
#elif defined(__linux__)
#define TMK_PORT_PLATFORM "linux"
#else
#define TMK_PORT_PLATFORM "posix"
#endif

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

#if !TMK_NO_THREADS
/* 32-bit atomics (GCC/Clang builtins). Nothing in the agent needs 64-bit atomics (mipsel has none). */
#define tmk_port_load32_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define tmk_port_load32_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define tmk_port_store32_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define tmk_port_store32_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define tmk_port_add32(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define tmk_port_cas32(p, expected_ptr, desired) \
  __atomic_compare_exchange_n((p), (expected_ptr), (desired), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#endif

#if defined(__x86_64__)
/* The raw cycle counter; tmk_port_fast_ticks_calibrate() measures its rate. */
#define TMK_PORT_FAST_TICKS_NS 0
static inline uint64_t tmk_port_fast_ticks(void) { return __builtin_ia32_rdtsc(); }
#endif

#endif /* TMK_PORT_IMPL_H */
