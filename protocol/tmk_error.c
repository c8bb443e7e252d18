/* tmk_error.c — tmk_strerror() and tmk_err_name(), generated from TMK_ERRNO_MAP. */
#include "tmk_error.h"

const char* tmk_strerror(int err) {
  switch (err) {
    case TMK_OK:
      return "success";
#define TMK__ERR_MSG(name, value, msg) \
  case TMK_##name:                     \
    return msg;
    TMK_ERRNO_MAP(TMK__ERR_MSG)
#undef TMK__ERR_MSG
    default:
      return "unknown error";
  }
}

const char* tmk_err_name(int err) {
  switch (err) {
    case TMK_OK:
      return "OK";
#define TMK__ERR_NAME(name, value, msg) \
  case TMK_##name:                      \
    return #name;
    TMK_ERRNO_MAP(TMK__ERR_NAME)
#undef TMK__ERR_NAME
    default:
      return "EUNKNOWN";
  }
}
