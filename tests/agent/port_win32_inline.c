/* port_win32_inline.c — compile test: platforms/win32's inline part (types, TLS, atomics) with
 * every atomic used once; tests/agent/CMakeLists.txt compiles it with clang in MSVC mode. */
#include "tmk_port.h"

int port_win32_inline(void);

int port_win32_inline(void) {
  static uint32_t x;
  uint32_t e = 0;
  tmk_port_sock s;
  tmk_port_thread t;
  tmk_port_store32_relaxed(&x, 1u);
  tmk_port_store32_release(&x, 2u);
  tmk_port_add32(&x, 1u);
  tmk_port_tls_set(&x);
  s.open = 0;
  t.handle = 0;
  return tmk_port_cas32(&x, &e, 3u) + (int)tmk_port_load32_acquire(&x) +
         (int)tmk_port_load32_relaxed(&x) + s.open + (t.handle != 0) +
         (tmk_port_tls_get() != 0);
}
