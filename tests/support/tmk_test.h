/* tmk_test.h — include this instead of <cmocka.h>. Host builds use cmocka from Debian; cross
 * builds (powerpc, mipsel: no cmocka package) define TMK_TEST_MINI and get the same API subset
 * from mini_cmocka.h, so every test source runs unchanged under qemu-user. */
#ifndef TMK_TEST_H
#define TMK_TEST_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#if defined(TMK_TEST_MINI)
#include "mini_cmocka.h"
#else
#include <cmocka.h>
#endif
#endif
