/* test_agent_nokey.c — the agent built with TMK_NO_KEY=1 (no packet authentication): a desc with
 * a key is TMK_ENOTSUP, one without works; agent_nokey_nm checks that no SipHash code is linked. */
#include "agent_test_util.h"

static void key_is_enotsup(void** state) {
  static const uint8_t key[16] = {1};
  receiver r;
  tmk_agent_desc d;
  int i;
  (void)state;
  recv_init_offline(&r);
  d = sink_desc(&r);
  d.key = key;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), TMK_ENOTSUP);
  d.key = NULL;
  assert_int_equal(tmk_agent_init(&d, test_arena, sizeof test_arena), 0);
  for (i = 0; i < 100; i++) {
    TMK_ZONE("plain", TMK_SEV_INFO, 1);
  }
  tmk_agent_pump();
  assert_int_equal(stats_now().keyed, 0);
  assert_int_equal(tmk_agent_shutdown(), 0);
  assert_int_equal(recv_zones_named(&r, "plain"), 100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      AGENT_TEST(key_is_enotsup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
