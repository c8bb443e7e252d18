/* tmk_port_impl.h (win32) — the inline part of the Windows port: target facts, types and 32-bit
 * atomics (GCC/Clang builtins for MinGW, Interlocked intrinsics for MSVC). Includes no Windows
 * header. Included only by platforms/tmk_port.h. TMK_NO_THREADS=1 gives the single-threaded
 * flavour. */
#ifndef TMK_PORT_IMPL_H
#define TMK_PORT_IMPL_H

#include <stdint.h>

#ifndef TMK_NO_THREADS
#define TMK_NO_THREADS 0
#endif

#define TMK_PORT_PLATFORM "windows"
#if defined(_M_X64) || defined(__x86_64__)
#define TMK_PORT_ARCH "x86_64"
#elif defined(_M_IX86) || defined(__i386__)
#define TMK_PORT_ARCH "x86"
#elif defined(_M_ARM64) || defined(__aarch64__)
#define TMK_PORT_ARCH "arm64"
#else
#define TMK_PORT_ARCH "unknown"
#endif

#define TMK_PORT_HAS_SOCKETS 1
#define TMK_PORT_HAS_FILES 1
#define TMK_PORT_HAS_THREADS (!TMK_NO_THREADS)

#ifdef __cplusplus
extern "C" {
#endif

/* TLS: TlsGetValue/TlsSetValue in tmk_port_win32.c (one index, allocated on first set). */
void* tmk_port_tls_get(void);
void tmk_port_tls_set(void* v);

typedef struct tmk_port_sock {
  int open; /* 0 when closed: an all-zero tmk_port_sock is closed */
  int tcp;
  uintptr_t s; /* SOCKET */
} tmk_port_sock;

#if !TMK_NO_THREADS
typedef struct tmk_port_thread {
  void* handle; /* HANDLE from CreateThread */
  void (*fn)(void*);
  void* arg;
} tmk_port_thread;

#if defined(__GNUC__) || defined(__clang__)
#define tmk_port_load32_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define tmk_port_load32_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define tmk_port_store32_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define tmk_port_store32_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define tmk_port_add32(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define tmk_port_cas32(p, expected_ptr, desired) \
  __atomic_compare_exchange_n((p), (expected_ptr), (desired), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#elif defined(_MSC_VER)
/* MSVC (not run here: compile-checked by nobody yet, see docs/PORTING.md). Aligned 32-bit
 * volatile accesses are atomic on x86, x64 and ARM64; the barriers order them. */
#include <intrin.h>
static __inline uint32_t tmk__w32_load_acquire(uint32_t* p) {
  uint32_t v = *(volatile uint32_t*)p;
  _ReadWriteBarrier();
  return v;
}
static __inline void tmk__w32_store_release(uint32_t* p, uint32_t v) {
  _ReadWriteBarrier();
  *(volatile uint32_t*)p = v;
}
static __inline uint32_t tmk__w32_add(uint32_t* p, uint32_t v) {
  return (uint32_t)_InterlockedExchangeAdd((volatile long*)p, (long)v) + v;
}
static __inline int tmk__w32_cas(uint32_t* p, uint32_t* expected, uint32_t v) {
  uint32_t old = (uint32_t)_InterlockedCompareExchange((volatile long*)p, (long)v, (long)*expected);
  if (old == *expected) return 1;
  *expected = old;
  return 0;
}
#define tmk_port_load32_relaxed(p) (*(volatile uint32_t*)(p))
#define tmk_port_load32_acquire(p) tmk__w32_load_acquire(p)
#define tmk_port_store32_relaxed(p, v) ((void)(*(volatile uint32_t*)(p) = (v)))
#define tmk_port_store32_release(p, v) tmk__w32_store_release((p), (v))
#define tmk_port_add32(p, v) tmk__w32_add((p), (v))
#define tmk_port_cas32(p, expected_ptr, desired) tmk__w32_cas((p), (expected_ptr), (desired))
#else
#error "platforms/win32: no 32-bit atomics for this compiler"
#endif
#endif /* !TMK_NO_THREADS */

#ifdef __cplusplus
}
#endif
#endif /* TMK_PORT_IMPL_H */
