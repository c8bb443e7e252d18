/* fuzz_replay.c — runs a libFuzzer target's LLVMFuzzerTestOneInput over the files named on the
 * command line, without libFuzzer. Builds that cannot fuzz (gcc, cross targets under qemu) replay
 * the checked-in seeds this way, so the harnesses' checks also run on big-endian and 32-bit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int i;
  for (i = 1; i < argc; i++) {
    FILE* f = fopen(argv[i], "rb");
    uint8_t* buf;
    long n;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
      fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    buf = (uint8_t*)malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
      fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
  }
  printf("replayed %d inputs\n", argc - 1);
  return 0;
}
