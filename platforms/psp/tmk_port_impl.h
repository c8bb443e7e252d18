/* tmk_port_impl.h (psp) — the inline part of the PSP port (pspsdk): target facts, TLS by kernel
 * thread id, and 32-bit atomics made by masking interrupts (the Allegrex is a single core, so
 * that is enough). The clock is sceKernelGetSystemTimeWide (microseconds).
 * Compile-checked against pspsdk's headers only; never run on a PSP or in PPSSPP (PORTING.md). */
#ifndef TMK_PORT_IMPL_H
#define TMK_PORT_IMPL_H

#include <stdint.h>

#include <pspintrman.h>
#include <psptypes.h>

#define TMK_PORT_PLATFORM "psp"
#define TMK_PORT_ARCH "mipsel"
#define TMK_PORT_HAS_THREADS 1
#define TMK_PORT_HAS_SOCKETS 1
#define TMK_PORT_HAS_FILES 0

typedef struct tmk_port_thread {
  SceUID handle;
  void (*fn)(void*);
  void* arg;
} tmk_port_thread;

typedef struct tmk_port_sock {
  int open; /* 0 when closed */
  int fd;
  int tcp;
} tmk_port_sock;

/* TLS: a small table keyed by sceKernelGetThreadId(). */
void* tmk_port_tls_get(void);
void tmk_port_tls_set(void* v);

/* One core: plain accesses with compiler barriers, read-modify-write with interrupts masked. */
#define tmk_port_load32_relaxed(p) (*(volatile uint32_t*)(p))
static inline uint32_t tmk_port_load32_acquire(uint32_t* p) {
  uint32_t v = *(volatile uint32_t*)p;
  __asm__ volatile("" ::: "memory");
  return v;
}
#define tmk_port_store32_relaxed(p, v) ((void)(*(volatile uint32_t*)(p) = (v)))
static inline void tmk_port_store32_release(uint32_t* p, uint32_t v) {
  __asm__ volatile("" ::: "memory");
  *(volatile uint32_t*)p = v;
}
static inline uint32_t tmk_port_add32(uint32_t* p, uint32_t v) {
  unsigned int s = sceKernelCpuSuspendIntr();
  uint32_t r = *p += v;
  sceKernelCpuResumeIntr(s);
  return r;
}
static inline int tmk_port_cas32(uint32_t* p, uint32_t* expected, uint32_t v) {
  unsigned int s = sceKernelCpuSuspendIntr();
  int ok = *p == *expected;
  if (ok) *p = v;
  else *expected = *p;
  sceKernelCpuResumeIntr(s);
  return ok;
}

#endif /* TMK_PORT_IMPL_H */
