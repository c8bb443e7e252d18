/* compile_c99.c — the public protocol headers compile as strict C99 (-std=c99 -pedantic -Werror)
 * and their types and enums are usable: the program checks a few facts and exits 0. */
#include "tmk_error.h"
#include "tmk_proto.h"

#include <stdio.h>
#include <string.h>

int main(void) {
  tmk_proto_record rec;
  tmk_proto_writer w;
  uint8_t body[128];
  memset(&rec, 0, sizeof rec);
  rec.type = TMK_REC_ZONE;
  rec.u.zone.site = 1;
  if (tmk_proto_writer_init(&w, body, sizeof body) != 0) return 1;
  if (strcmp(tmk_err_name(TMK_ETRUNC), "ETRUNC") != 0) return 1;
  if (TMK_PROTO_MAX_HEADER < 14 || TMK_PKT_F_KNOWN != 7) return 1; /* LZ4, BIG_ENDIAN, MAC */
  printf("C99: %s\n", tmk_strerror(TMK_EBOMB));
  return 0;
}
