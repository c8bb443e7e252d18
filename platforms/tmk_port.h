/* tmk_port.h — the contract between the telemark agent and the platform it runs on. A port is
 * one folder (platforms/posix/, platforms/win32/, or any folder named by TMK_PLATFORM) holding a
 * header tmk_port_impl.h and a source tmk_port_<folder>.c; docs/PORTING.md walks through writing one.
 *
 * The contract comes in groups. Required of every port: the target facts, the clock and TLS.
 * Optional, each switched on by a macro the port's tmk_port_impl.h sets to 1:
 *   TMK_PORT_HAS_THREADS  threads, the thread-exit hook, sleep/yield, 32-bit atomics
 *   TMK_PORT_HAS_SOCKETS  non-blocking UDP and TCP (the UDP, TCP and automatic transports)
 *   TMK_PORT_HAS_FILES    writing a file (the file transport)
 *   TMK_PORT_HAS_WAKE     waking the flusher from a recording thread (else it polls)
 *   TMK_PORT_HAS_THREAD_NAME  naming the calling thread for the platform's tools
 * A port without a group declares nothing of it; the transports that need a missing group
 * return TMK_ENOTSUP from tmk_agent_init(). The callback transport needs no optional group. */
#ifndef TMK_PORT_H
#define TMK_PORT_H

#include <stddef.h>
#include <stdint.h>

#include "tmk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Required: clock =========================================================================
 * Used only when the game gives no desc.clock (tmk_agent_init), and by the CLOCK_SYNC record. */

/* Returns a monotonic time in nanoseconds from an arbitrary origin; never goes back. */
uint64_t tmk_port_monotonic_ns(void);
/* Returns the wall-clock time in nanoseconds since 1970-01-01 UTC, or 0 where there is none. */
uint64_t tmk_port_unix_ns(void);
/* Returns 64 random bits for the session id; need not be cryptographic, should differ per run. */
uint64_t tmk_port_random64(void);

#ifdef __cplusplus
}
#endif

/* The port's inline part. tmk_port_impl.h must define:
 *   TMK_PORT_PLATFORM   string sent in HELLO: "linux", "macos", "windows", "wii", ...
 *   TMK_PORT_ARCH       string sent in HELLO: "x86_64", "ppc", "mipsel", ...
 *   TMK_PORT_HAS_THREADS, TMK_PORT_HAS_SOCKETS, TMK_PORT_HAS_FILES   0 or 1 (see above)
 *   tmk_port_tls_get / tmk_port_tls_set   (functions or macros; see TLS below)
 * and, per group it switches on, the types below (tmk_port_thread, tmk_port_sock) and the
 * 32-bit atomics. It may define tmk_port_fast_ticks() (see Fast ticks). It must not include
 * anything of the agent, and it declares none of the functions of this file. */
#include "tmk_port_impl.h"

#if !defined(TMK_PORT_PLATFORM) || !defined(TMK_PORT_ARCH)
#error "tmk_port_impl.h must define TMK_PORT_PLATFORM and TMK_PORT_ARCH"
#endif
#if !defined(TMK_PORT_HAS_THREADS) || !defined(TMK_PORT_HAS_SOCKETS) || !defined(TMK_PORT_HAS_FILES)
#error "tmk_port_impl.h must define TMK_PORT_HAS_THREADS, TMK_PORT_HAS_SOCKETS, TMK_PORT_HAS_FILES"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Required: TLS ===========================================================================
 *   void* tmk_port_tls_get(void);    returns the calling thread's value, NULL until it set one
 *   void  tmk_port_tls_set(void* v); sets the calling thread's value
 * One pointer-sized value per thread, for the agent alone. Called on the hot path: make get
 * cheap (a __thread variable, TlsGetValue, a table indexed by a hardware thread id). A port
 * without threads may keep it in one static variable; if only one thread of execution ever
 * records (a bare-metal main loop), it also sets TMK_PORT_ONE_THREAD 1: the agent then keeps one
 * thread slot (desc.max_threads is ignored) and its loops over slots fold away. */
#ifndef TMK_PORT_ONE_THREAD
#define TMK_PORT_ONE_THREAD 0
#endif

/* ==== Zone times on a 32-bit board ============================================================
 * Nothing to implement. A board may build protocol/ -Os with -DTMK_PROTO_TIME32=1 (tmk_proto.h;
 * off by default) to encode zones with 32-bit arithmetic; then a zone must last less than
 * TMK_PROTO_TIME32_REACH (2^30) ticks of desc.clock, and a longer one is counted as
 * TMK_DROP_TOO_BIG instead of being sent. docs/PORTING.md, "Size (bare metal)". */

/* ==== Fast ticks ==============================================================================
 * tmk_port_fast_ticks() is read on the hot path when the game gives no desc.clock. A port may
 * define it in tmk_port_impl.h as a cheap counter (rdtsc, a timebase register), with
 * TMK_PORT_FAST_TICKS_NS 0, and implement tmk_port_fast_ticks_calibrate() to measure its rate.
 * Otherwise it is the monotonic clock in nanoseconds. */
#ifndef TMK_PORT_FAST_TICKS_NS
#define TMK_PORT_FAST_TICKS_NS 1
#define tmk_port_fast_ticks() tmk_port_monotonic_ns()
#endif
#if !TMK_PORT_FAST_TICKS_NS
/* Returns the rate of tmk_port_fast_ticks() in ticks per second. */
uint64_t tmk_port_fast_ticks_calibrate(void);
#endif

/* ==== Optional: threads (TMK_PORT_HAS_THREADS) ================================================ */
#if TMK_PORT_HAS_THREADS
/* tmk_port_impl.h defines the type tmk_port_thread (a handle the caller owns) and these 32-bit
 * atomics on uint32_t* p, as functions or macros:
 *   tmk_port_load32_relaxed(p), tmk_port_load32_acquire(p)          -> uint32_t
 *   tmk_port_store32_relaxed(p, v), tmk_port_store32_release(p, v)
 *   tmk_port_add32(p, v)                 adds, returns the new value (relaxed is enough)
 *   tmk_port_cas32(p, expected_ptr, v)   if *p == *expected_ptr stores v and returns nonzero
 *                                        (acquire-release), else loads *p into *expected_ptr
 *                                        and returns 0. No 64-bit atomics are needed. */

/* Starts fn(arg) on a new thread. Returns 0 or TMK_ESTATE. When fn returns, the hooks that
 * thread registered with tmk_port_on_thread_exit() run. */
int tmk_port_thread_start(tmk_port_thread* t, void (*fn)(void*), void* arg);
/* Waits for a thread started by tmk_port_thread_start to end. Returns 0 or TMK_ESTATE. */
int tmk_port_thread_join(tmk_port_thread* t);
/* Arranges for fn(arg) to run on the calling thread as it exits, for every thread that exits
 * (threads the game started itself included). One hook per thread: a second call replaces
 * arg. Returns 0, or TMK_ENOTSUP where the platform cannot tell that a thread ends; the game
 * then calls tmk_thread_exit() itself before such a thread ends, or its slot is never reused. */
int tmk_port_on_thread_exit(void (*fn)(void*), void* arg);
/* Gives up the CPU briefly (a spin loop's pause). */
void tmk_port_yield(void);
/* Sleeps about `us` microseconds (longer is fine). */
void tmk_port_sleep_us(uint32_t us);
#else
/* No threads: one thread of execution, so plain memory accesses are atomic enough. */
#define tmk_port_load32_relaxed(p) (*(p))
#define tmk_port_load32_acquire(p) (*(p))
#define tmk_port_store32_relaxed(p, v) ((void)(*(p) = (v)))
#define tmk_port_store32_release(p, v) ((void)(*(p) = (v)))
#define tmk_port_add32(p, v) (*(p) += (v))
static inline int tmk_port_cas32(uint32_t* p, uint32_t* expected, uint32_t v) {
  if (*p != *expected) {
    *expected = *p;
    return 0;
  }
  *p = v;
  return 1;
}
static inline void tmk_port_yield(void) {}
static inline void tmk_port_sleep_us(uint32_t us) { (void)us; }
#endif

/* ==== Optional: wake-ups (TMK_PORT_HAS_WAKE, with threads) ====================================
 * Lets a recording thread wake the flusher as soon as its ring passes a fill mark, instead of the
 * flusher finding out at its next 1 ms poll. The agent signals at most once per half ring
 * written, and only while the flusher is asleep, so tmk_port_wake_signal() may make a system
 * call; it must never block or lock. A signal sent before the wait makes the wait return at once
 * (a semaphore, a self-pipe, an auto-reset event). tmk_port_impl.h sets TMK_PORT_HAS_WAKE 1 and
 * defines the type tmk_port_wake; without the group the flusher polls every millisecond. */
#ifndef TMK_PORT_HAS_WAKE
#define TMK_PORT_HAS_WAKE 0
#endif
#if TMK_PORT_HAS_WAKE && TMK_PORT_HAS_THREADS
/* Prepares *w. Returns 0, or TMK_ESTATE (the agent then polls). */
int tmk_port_wake_open(tmk_port_wake* w);
/* Wakes the thread in tmk_port_wake_wait(), or makes its next wait return at once. Callable from
 * any thread; never blocks. */
void tmk_port_wake_signal(tmk_port_wake* w);
/* Waits up to timeout_us for a signal and consumes it. Returns 1 when signalled, 0 when the time
 * ran out. */
int tmk_port_wake_wait(tmk_port_wake* w, uint32_t timeout_us);
/* Releases what tmk_port_wake_open() took. */
void tmk_port_wake_close(tmk_port_wake* w);
#endif

/* ==== Optional: thread names (TMK_PORT_HAS_THREAD_NAME, with threads) ========================
 * Names the calling thread for the platform's tools (top -H, perf, a debugger); the flusher
 * calls it as it starts, with a name of at most 15 bytes. Without the group threads keep the
 * platform's default name. */
#ifndef TMK_PORT_HAS_THREAD_NAME
#define TMK_PORT_HAS_THREAD_NAME 0
#endif
#if TMK_PORT_HAS_THREAD_NAME && TMK_PORT_HAS_THREADS
void tmk_port_thread_name(const char* name);
#endif

/* ==== Optional: sockets (TMK_PORT_HAS_SOCKETS) ================================================ */
#if TMK_PORT_HAS_SOCKETS
/* tmk_port_impl.h defines the type tmk_port_sock. The agent never looks inside it: it only
 * zero-fills one (an all-zero tmk_port_sock is a closed socket) and passes it to these calls.
 * Every socket is non-blocking; no call here may wait except tmk_port_wait_writable. */

/* Opens a UDP socket to host:port (a name or a numeric address; prefer IPv4). Returns 0, or
 * TMK_ENOTFOUND (name does not resolve) / TMK_ESOCKET. */
int tmk_port_udp_open(tmk_port_sock* s, const char* host, uint16_t port);
/* Starts a TCP connection to host:port with Nagle off. Returns 0 when connected, TMK_EAGAIN
 * while in progress (poll tmk_port_tcp_poll_connect), or TMK_ENOTFOUND / TMK_ESOCKET. */
int tmk_port_tcp_connect(tmk_port_sock* s, const char* host, uint16_t port);
/* Returns 0 once the connection is up, TMK_EAGAIN while in progress, TMK_ESOCKET if it failed. */
int tmk_port_tcp_poll_connect(tmk_port_sock* s);
/* Sends up to len bytes (one datagram on UDP). Returns the count sent (may be short on TCP),
 * TMK_EAGAIN when the socket takes nothing now (also for UDP errors caused by an earlier
 * datagram, such as ICMP "port unreachable"), TMK_ECLOSED when the peer is gone, or
 * TMK_ESOCKET. Never raises a signal. */
int tmk_port_send(tmk_port_sock* s, const void* data, size_t len);
/* Receives up to cap bytes (one datagram on UDP). Returns the count, TMK_EAGAIN when nothing
 * waits (also for UDP errors caused by an earlier datagram), TMK_ECLOSED when a TCP peer
 * closed or reset, or TMK_ESOCKET. */
int tmk_port_recv(tmk_port_sock* s, void* buf, size_t cap);
/* Waits up to timeout_ms until the socket can take data. Returns 1, 0 on timeout, or
 * TMK_ECLOSED / TMK_ESOCKET. */
int tmk_port_wait_writable(tmk_port_sock* s, uint32_t timeout_ms);
/* Closes the socket and zero-fills *s; a closed (all-zero) socket is ignored. */
void tmk_port_close(tmk_port_sock* s);
#endif

/* ==== Optional: files (TMK_PORT_HAS_FILES) ==================================================== */
#if TMK_PORT_HAS_FILES
/* Creates or truncates a file for writing. Returns a handle, or NULL. */
void* tmk_port_file_create(const char* path);
/* Writes all len bytes. Returns 0 or TMK_EIO. */
int tmk_port_file_write(void* f, const void* data, size_t len);
/* Flushes and closes a handle from tmk_port_file_create (NULL is ignored). */
void tmk_port_file_close(void* f);
#endif

#ifdef __cplusplus
}
#endif
#endif /* TMK_PORT_H */
