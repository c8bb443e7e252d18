/* tmk_port_impl.h (baremetal) — the port for boards without an OS: one thread of execution, no
 * sockets, no files. The game gives the clock (desc.clock: SysTick, DWT->CYCCNT, mcycle; 32-bit
 * wrapping counters are fine) and the callback transport (desc.write, e.g. a UART). */
#ifndef TMK_PORT_IMPL_H
#define TMK_PORT_IMPL_H

#define TMK_PORT_PLATFORM "baremetal"
#if defined(__riscv)
#define TMK_PORT_ARCH (__riscv_xlen == 64 ? "riscv64" : "riscv32")
#elif defined(__thumb__) || defined(__arm__)
#define TMK_PORT_ARCH "arm"
#elif defined(__aarch64__)
#define TMK_PORT_ARCH "arm64"
#else
#define TMK_PORT_ARCH "unknown"
#endif
#define TMK_PORT_HAS_THREADS 0
#define TMK_PORT_HAS_SOCKETS 0
#define TMK_PORT_HAS_FILES 0

/* One thread of execution: TLS is one variable, the agent keeps one thread slot. Interrupt
 * handlers must not record. */
#define TMK_PORT_ONE_THREAD 1
extern void* tmk_port_baremetal_tls;
#define tmk_port_tls_get() tmk_port_baremetal_tls
#define tmk_port_tls_set(v) ((void)(tmk_port_baremetal_tls = (v)))

#endif /* TMK_PORT_IMPL_H */
