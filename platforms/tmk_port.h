/* tmk_port.h — the one interface between the telemark agent and the platform it runs on:
 * clock, thread-local storage, atomics, threads, sleep, sockets, files. One folder per platform
 * (platforms/posix/ now) implements it; CMake picks the folder and puts it on the include path. */
#ifndef TMK_PORT_H
#define TMK_PORT_H

#include <stddef.h>
#include <stdint.h>

/* The platform's inline part: TMK_PORT_TLS, TMK_PORT_HAS_THREADS, TMK_PORT_ARCH,
 * TMK_PORT_PLATFORM, the tmk_port_thread and tmk_port_sock types, 32-bit/pointer atomics and
 * tmk_port_fast_ticks(). */
#include "tmk_port_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Clock -------------------------------------------------------------------------------- */
/* Returns a monotonic time in nanoseconds (arbitrary origin). */
uint64_t tmk_port_monotonic_ns(void);
/* Returns the wall-clock time in nanoseconds since 1970, or 0 if the platform has none. */
uint64_t tmk_port_unix_ns(void);
/* Returns the frequency of tmk_port_fast_ticks() in ticks per second, measuring it against
 * tmk_port_monotonic_ns() when the counter is not a clock of known rate (rdtsc). */
uint64_t tmk_port_fast_ticks_calibrate(void);

/* ---- Threads ------------------------------------------------------------------------------ */
/* Starts fn(arg) on a new thread. Returns 0, or TMK_ESTATE where the platform has no threads. */
int tmk_port_thread_start(tmk_port_thread* t, void (*fn)(void*), void* arg);
/* Waits for a thread started by tmk_port_thread_start. Returns 0 or a negative TMK_E* code. */
int tmk_port_thread_join(tmk_port_thread* t);
/* Arranges for fn(arg) to run when the calling thread exits (once per thread; a later call
 * replaces arg). Returns 0, or TMK_ESTATE where the platform cannot tell. */
int tmk_port_on_thread_exit(void (*fn)(void*), void* arg);
/* Gives up the CPU briefly. */
void tmk_port_yield(void);
/* Sleeps about `us` microseconds. */
void tmk_port_sleep_us(uint32_t us);
/* Returns 64 random bits (session ids); good enough, not cryptographic. */
uint64_t tmk_port_random64(void);

/* ---- Wake-ups (optional: a port sets TMK_PORT_HAS_WAKE 1 and defines tmk_port_wake) ------
 * Lets a recording thread wake the flusher as soon as its ring passes a fill mark, instead of
 * the flusher finding out at its next 1 ms poll. The agent signals at most once per half ring
 * written, and only while the flusher is asleep, so tmk_port_wake_signal() may make a system
 * call; it must never block or lock. A signal sent before the wait makes the wait return at
 * once (a semaphore, a self-pipe, an auto-reset event). Without the group the flusher polls. */
#ifndef TMK_PORT_HAS_WAKE
#define TMK_PORT_HAS_WAKE 0
#endif
#if TMK_PORT_HAS_WAKE
/* Prepares *w. Returns 0, or TMK_ESTATE (the agent then polls). */
int tmk_port_wake_open(tmk_port_wake* w);
/* Wakes the thread in tmk_port_wake_wait(), or makes its next wait return at once. Callable
 * from any thread; never blocks. */
void tmk_port_wake_signal(tmk_port_wake* w);
/* Waits up to timeout_us for a signal and consumes it. Returns 1 when signalled, 0 when the
 * time ran out. */
int tmk_port_wake_wait(tmk_port_wake* w, uint32_t timeout_us);
/* Releases what tmk_port_wake_open() took. */
void tmk_port_wake_close(tmk_port_wake* w);
#endif

/* ---- Sockets (all non-blocking) ----------------------------------------------------------- */
/* Opens a UDP socket connected to host:port. Returns 0 or TMK_ESOCKET / TMK_ENOTFOUND. */
int tmk_port_udp_open(tmk_port_sock* s, const char* host, uint16_t port);
/* Starts a TCP connection to host:port. Returns 0 when connected, TMK_EAGAIN while in
 * progress (poll tmk_port_tcp_poll_connect), or a negative TMK_E* code. */
int tmk_port_tcp_connect(tmk_port_sock* s, const char* host, uint16_t port);
/* Returns 0 once the connection started by tmk_port_tcp_connect is up, TMK_EAGAIN while still
 * in progress, or a negative TMK_E* code when it failed. */
int tmk_port_tcp_poll_connect(tmk_port_sock* s);
/* Sends up to len bytes. Returns the number sent (may be short on TCP), TMK_EAGAIN when the
 * socket cannot take any now, or TMK_ESOCKET / TMK_ECLOSED. */
int tmk_port_send(tmk_port_sock* s, const void* data, size_t len);
/* Receives up to cap bytes (one datagram on UDP). Returns the count, TMK_EAGAIN when nothing
 * is waiting, TMK_ECLOSED when a TCP peer closed, or TMK_ESOCKET. */
int tmk_port_recv(tmk_port_sock* s, void* buf, size_t cap);
/* Waits up to timeout_ms until the socket is writable. Returns 1 writable, 0 timeout, or a
 * negative TMK_E* code. */
int tmk_port_wait_writable(tmk_port_sock* s, uint32_t timeout_ms);
/* Closes a socket (no-op when it is not open). */
void tmk_port_close(tmk_port_sock* s);
/* Test hook: with on != 0, tmk_port_udp_open fails as on a platform without UDP (the Wii
 * case), so the agent's automatic TCP fallback can be exercised. */
void tmk_port_test_fail_udp(int on);

/* ---- Files (the file transport) ----------------------------------------------------------- */
/* Creates or truncates a file for writing. Returns a handle or NULL. */
void* tmk_port_file_create(const char* path);
/* Writes len bytes. Returns 0 or TMK_EIO. */
int tmk_port_file_write(void* f, const void* data, size_t len);
/* Flushes and closes a file handle (NULL is ignored). */
void tmk_port_file_close(void* f);

#ifdef __cplusplus
}
#endif
#endif /* TMK_PORT_H */
