/* bench_pages.c — tmk-bench-pages [MiB]: maps MiB (default 256) of fresh anonymous memory, writes
 * it all once, unmaps it, and times that per 16 bytes (one stored zone): four rounds each on
 * 4 KiB pages, on 4 KiB pages populated 256 KiB at a time (MADV_POPULATE_WRITE) and on 2 MiB
 * transparent huge pages (MADV_HUGEPAGE, as relay_slab.c maps the store's slabs), in that order,
 * each round right after the one before, so that a round gets back the memory the last one freed.
 * Prints RESULT fresh_write_ns_per_16b_small, _small_populated (medians of rounds 2-4),
 * _huge_first (the first huge round, on what the populated rounds freed) and _huge (the median of
 * rounds 2-4). Timings of one run on a shared machine. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define HUGE ((size_t)2 << 20)
#define ROUNDS 4

enum { SMALL, POPULATED, HUGEPAGES };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One round: ns per 16 bytes to map, write and unmap `bytes`; < 0 when mmap fails. */
static double round_ns(size_t bytes, int mode) {
  double t0 = now_s();
  uint8_t* m = mmap(NULL, bytes + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return -1;
  uint8_t* a = (uint8_t*)(((uintptr_t)m + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
#ifdef MADV_HUGEPAGE
  if (mode == HUGEPAGES) madvise(a, bytes, MADV_HUGEPAGE);
#endif
  for (size_t off = 0; off < bytes; off += (size_t)256 << 10) {
#ifdef MADV_POPULATE_WRITE
    if (mode == POPULATED) madvise(a + off, (size_t)256 << 10, MADV_POPULATE_WRITE);
#endif
    memset(a + off, 0x5a, (size_t)256 << 10);
  }
  double t1 = now_s();
  munmap(m, bytes + HUGE);
  return (t1 - t0) * 1e9 / (double)(bytes / 16);
}

static int cmp_double(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

int main(int argc, char** argv) {
  long mib = argc > 1 ? strtol(argv[1], NULL, 10) : 256;
  if (mib < 2 || mib > 65536) {
    fprintf(stderr, "usage: %s [MiB, 2..65536; default 256]\n", argv[0]);
    return 2;
  }
  size_t bytes = (size_t)mib << 20 & ~(HUGE - 1);
  static const char* names[] = {"small", "small_populated", "huge"};
  double r[3][ROUNDS];
  for (int mode = 0; mode < 3; mode++)
    for (int k = 0; k < ROUNDS; k++)
      if ((r[mode][k] = round_ns(bytes, mode)) < 0) {
        fprintf(stderr, "%s: cannot map %ld MiB\n", argv[0], mib);
        return 1;
      }
  for (int mode = 0; mode < 3; mode++) {
    printf("bench-pages: %s pages, %ld MiB a round:", names[mode], mib);
    for (int k = 0; k < ROUNDS; k++) printf(" %.2f", r[mode][k]);
    printf(" ns per 16 bytes\n");
  }
  double first_huge = r[HUGEPAGES][0];
  for (int mode = 0; mode < 3; mode++) qsort(r[mode] + 1, ROUNDS - 1, sizeof(double), cmp_double);
  printf("RESULT fresh_write_ns_per_16b_small=%.2f\n", r[SMALL][ROUNDS / 2]);
  printf("RESULT fresh_write_ns_per_16b_small_populated=%.2f\n", r[POPULATED][ROUNDS / 2]);
  printf("RESULT fresh_write_ns_per_16b_huge_first=%.2f\n", first_huge);
  printf("RESULT fresh_write_ns_per_16b_huge=%.2f\n", r[HUGEPAGES][ROUNDS / 2]);
  return 0;
}
