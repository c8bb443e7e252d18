/* tmk_port_impl.h (port_minimal) — the smallest port the contract allows, as a bare-metal target
 * would start: the required clock and TLS only; no threads, sockets or files. Built into
 * tmk_agent_minimal to prove that such a port compiles and links, and that the transports it
 * cannot carry say TMK_ENOTSUP (tests/agent/test_agent_minimal_port.c). */
#ifndef TMK_PORT_IMPL_H
#define TMK_PORT_IMPL_H

#define TMK_PORT_PLATFORM "minimal"
#define TMK_PORT_ARCH "test"
#define TMK_PORT_HAS_THREADS 0
#define TMK_PORT_HAS_SOCKETS 0
#define TMK_PORT_HAS_FILES 0

/* One thread of execution: TLS is one variable, the agent keeps one thread slot. */
#define TMK_PORT_ONE_THREAD 1
extern void* tmk_port_minimal_tls;
#define tmk_port_tls_get() tmk_port_minimal_tls
#define tmk_port_tls_set(v) ((void)(tmk_port_minimal_tls = (v)))

#endif /* TMK_PORT_IMPL_H */
