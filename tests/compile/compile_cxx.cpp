// compile_cxx.cpp — the public protocol headers compile as C++ (-pedantic -Werror) and link
// against the C library with C linkage; the program checks a few facts and exits 0.
#include "tmk_error.h"
#include "tmk_proto.h"

#include <cstdio>
#include <cstring>

int main() {
  tmk_proto_record rec;
  std::memset(&rec, 0, sizeof rec);
  rec.type = TMK_REC_PLOT;
  rec.u.plot.d = 1.5;
  uint8_t buf[TMK_PROTO_MAX_HEADER];
  int n = tmk_proto_encode_bye(buf, sizeof buf, 42u);
  tmk_proto_reader r;
  if (n <= 0 || tmk_proto_open(&r, buf, static_cast<size_t>(n), 0, 0) != 0) return 1;
  if (r.hdr.type != TMK_PKT_BYE || r.hdr.session_id != 42u) return 1;
  if (std::strcmp(tmk_err_name(TMK_ENEST), "ENEST") != 0) return 1;
  std::printf("C++: %s\n", tmk_strerror(TMK_ENOLZ4));
  return 0;
}
