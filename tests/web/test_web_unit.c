/* test_web_unit.c — unit tests of the dashboard side of the relay that need no server: the
 * embedded asset table (every page file present, bytes intact), loopback detection for --http,
 * and access-token generation. */
#include "tmk_test.h"

#include <ctype.h>
#include <string.h>

#include "tmk_relay_web.h"
#include "tmk_web_assets.h"

static void assets_are_embedded(void** state) {
  (void)state;
  const char* need[] = {"/index.html", "/style.css", "/js/main.js", "/js/flame.js", "/js/store.js",
                        "/js/stream.js", "/vendor/uPlot.iife.min.js", "/vendor/uPlot.min.css"};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
    const tmk_web_asset* a = tmk_web_asset_find(need[i]);
    assert_non_null(a);
    assert_true(a->size > 100);
    assert_int_equal(a->data[a->size], 0);
  }
  const tmk_web_asset* html = tmk_web_asset_find("/index.html");
  assert_non_null(strstr((const char*)html->data, "<title>telemark</title>"));
  assert_non_null(strstr(html->content_type, "text/html"));
  assert_non_null(strstr(tmk_web_asset_find("/js/main.js")->content_type, "javascript"));
  assert_non_null(strstr((const char*)tmk_web_asset_find("/vendor/uPlot.iife.min.js")->data, "uPlot"));
  assert_null(tmk_web_asset_find("/"));
  assert_null(tmk_web_asset_find("index.html"));
  assert_null(tmk_web_asset_find("/../index.html"));
  assert_null(tmk_web_asset_find(NULL));
  assert_true(tmk_web_asset_count() >= 8);
  assert_null(tmk_web_asset_at(tmk_web_asset_count()));
}

static void loopback_detection(void** state) {
  (void)state;
  assert_true(tmk_relay_web_is_loopback("127.0.0.1"));
  assert_true(tmk_relay_web_is_loopback("127.1.2.3"));
  assert_true(tmk_relay_web_is_loopback("localhost"));
  assert_true(tmk_relay_web_is_loopback("::1"));
  assert_true(tmk_relay_web_is_loopback("[::1]"));
  assert_false(tmk_relay_web_is_loopback("0.0.0.0"));
  assert_false(tmk_relay_web_is_loopback("192.168.1.10"));
  assert_false(tmk_relay_web_is_loopback("1270.0.0.1"));
  assert_false(tmk_relay_web_is_loopback("::"));
  assert_false(tmk_relay_web_is_loopback(""));
  assert_false(tmk_relay_web_is_loopback(NULL));
}

static void tokens_are_random_hex(void** state) {
  (void)state;
  char a[40], b[40];
  assert_int_equal(tmk_relay_web_make_token(a, sizeof a), 0);
  assert_int_equal(tmk_relay_web_make_token(b, sizeof b), 0);
  assert_int_equal(strlen(a), 32);
  for (size_t i = 0; i < 32; i++) assert_true(isxdigit((unsigned char)a[i]));
  assert_string_not_equal(a, b);
  assert_int_equal(tmk_relay_web_make_token(a, 10), TMK_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(assets_are_embedded),
      cmocka_unit_test(loopback_detection),
      cmocka_unit_test(tokens_are_random_hex),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
