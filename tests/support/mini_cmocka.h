/* mini_cmocka.h — the subset of the cmocka API telemark's tests use, for targets where Debian
 * ships no cmocka (powerpc, mipsel). In the style of libuv's test runner: each test runs in turn,
 * a failed assertion prints both sides and longjmps out; the summary ends with
 * "N passed, N failed". Only included through tmk_test.h. */
#ifndef TMK_MINI_CMOCKA_H
#define TMK_MINI_CMOCKA_H
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*CMUnitTestFunction)(void** state);
typedef int (*CMFixtureFunction)(void** state);
struct CMUnitTest {
  const char* name;
  CMUnitTestFunction test_func;
  CMFixtureFunction setup_func;
  CMFixtureFunction teardown_func;
  void* initial_state;
};
#define cmocka_unit_test(f) {#f, f, NULL, NULL, NULL}
#define cmocka_unit_test_setup_teardown(f, s, t) {#f, f, s, t, NULL}

static jmp_buf tmk__mini_jmp;
static int tmk__mini_skipped;

static void tmk__mini_fail(const char* file, int line, const char* what) {
  fprintf(stderr, "%s:%d: error: %s\n", file, line, what);
  longjmp(tmk__mini_jmp, 1);
}
static void tmk__mini_fail_ull(const char* file, int line, const char* op, unsigned long long a,
                               unsigned long long b) {
  char msg[160];
  snprintf(msg, sizeof msg, "%llu (%#llx) %s %llu (%#llx)", a, a, op, b, b);
  tmk__mini_fail(file, line, msg);
}

#define assert_true(c) \
  do { if (!(c)) tmk__mini_fail(__FILE__, __LINE__, "assertion failed: " #c); } while (0)
#define assert_false(c) \
  do { if (c) tmk__mini_fail(__FILE__, __LINE__, "assertion failed: !(" #c ")"); } while (0)
#define assert_non_null(p) \
  do { if ((p) == NULL) tmk__mini_fail(__FILE__, __LINE__, #p " is NULL"); } while (0)
#define assert_null(p) \
  do { if ((p) != NULL) tmk__mini_fail(__FILE__, __LINE__, #p " is not NULL"); } while (0)
#define assert_int_equal(a, b)                                                            \
  do { unsigned long long tmk__a = (unsigned long long)(a), tmk__b = (unsigned long long)(b); \
       if (tmk__a != tmk__b) tmk__mini_fail_ull(__FILE__, __LINE__, "!=", tmk__a, tmk__b); } while (0)
#define assert_int_not_equal(a, b)                                                        \
  do { unsigned long long tmk__a = (unsigned long long)(a), tmk__b = (unsigned long long)(b); \
       if (tmk__a == tmk__b) tmk__mini_fail_ull(__FILE__, __LINE__, "==", tmk__a, tmk__b); } while (0)
#define assert_uint_equal assert_int_equal
#define assert_in_range(v, lo, hi)                                                        \
  do { unsigned long long tmk__v = (unsigned long long)(v);                               \
       if (tmk__v < (unsigned long long)(lo) || tmk__v > (unsigned long long)(hi))        \
         tmk__mini_fail_ull(__FILE__, __LINE__, "not in range, low", tmk__v, (unsigned long long)(lo)); } while (0)
#define assert_string_equal(a, b)                                                         \
  do { const char *tmk__a = (a), *tmk__b = (b);                                           \
       if (strcmp(tmk__a, tmk__b) != 0) {                                                 \
         fprintf(stderr, "\"%s\" != \"%s\"\n", tmk__a, tmk__b);                           \
         tmk__mini_fail(__FILE__, __LINE__, "strings differ"); } } while (0)
#define assert_memory_equal(a, b, n)                                                      \
  do { if (memcmp((a), (b), (n)) != 0) tmk__mini_fail(__FILE__, __LINE__, "memory differs: " #a " vs " #b); } while (0)
#define fail() tmk__mini_fail(__FILE__, __LINE__, "fail()")
#define fail_msg(...)                                                                     \
  do { char tmk__m[512]; snprintf(tmk__m, sizeof tmk__m, __VA_ARGS__);                    \
       tmk__mini_fail(__FILE__, __LINE__, tmk__m); } while (0)
#define skip() do { tmk__mini_skipped = 1; longjmp(tmk__mini_jmp, 2); } while (0)
#define print_message(...) printf(__VA_ARGS__)

static int tmk__mini_run(const char* group, const struct CMUnitTest* tests, size_t n,
                         CMFixtureFunction setup, CMFixtureFunction teardown) {
  size_t i;
  volatile int passed = 0, failed = 0, skipped = 0;
  void* group_state = NULL;
  printf("[==========] %s: Running %u test(s).\n", group, (unsigned)n);
  if (setup && setup(&group_state) != 0) {
    printf("[  ERROR   ] group setup failed\n");
    return 1;
  }
  for (i = 0; i < n; i++) {
    void* state = tests[i].initial_state ? tests[i].initial_state : group_state;
    volatile int rc;
    printf("[ RUN      ] %s\n", tests[i].name);
    fflush(stdout);
    tmk__mini_skipped = 0;
    rc = setjmp(tmk__mini_jmp);
    if (rc == 0) {
      if (tests[i].setup_func && tests[i].setup_func(&state) != 0) {
        printf("[  ERROR   ] %s setup failed\n", tests[i].name);
        failed++;
        continue;
      }
      tests[i].test_func(&state);
      if (tests[i].teardown_func) tests[i].teardown_func(&state);
      printf("[       OK ] %s\n", tests[i].name);
      passed++;
    } else if (rc == 2) {
      printf("[  SKIPPED ] %s\n", tests[i].name);
      skipped++;
    } else {
      printf("[  FAILED  ] %s\n", tests[i].name);
      failed++;
    }
    fflush(stdout);
  }
  if (teardown) teardown(&group_state);
  printf("[==========] %s: %u test(s) run.\n", group, (unsigned)n);
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed;
}
#define cmocka_run_group_tests(tests, setup, teardown) \
  tmk__mini_run(#tests, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)
#define cmocka_run_group_tests_name(name, tests, setup, teardown) \
  tmk__mini_run(name, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)

#endif
