/* test_vectors.c — golden vectors in tests/vectors/: each NAME.bin is a packet, NAME.txt its
 * decoded form (a header line, then one tmk_proto_format_record line per record). The test decodes
 * every .bin and compares with its .txt, re-encodes each scenario with the writer API and compares
 * bytes (the compressed vector by decoded form only: LZ4 output may change between versions), and
 * checks that this host's native encoding equals the vector of its byte order.
 *   tmk-test-proto-vectors DIR           run the tests against DIR
 *   tmk-test-proto-vectors --regen DIR   write the vectors (done once; the files are committed) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_util.h"
#include "tmk_proto.h"
#include "tmk_test.h"

#define SESSION 0x0123456789ABCDEFull
#define OUT_CAP (TMK_PROTO_MAX_BODY + 64)
#define TXT_CAP 65536

static const char* g_dir;

/* ---- scenarios --------------------------------------------------------------------------------- */

typedef struct site_def {
  uint32_t id;
  uint8_t kind, severity;
  uint32_t verbosity, color, line;
  const char *name, *file;
} site_def;

static const site_def k_sites[] = {
    {1, TMK_SITE_ZONE, TMK_SEV_INFO, 0x1, 0x3366CC, 120, "Game::Frame", "src/game.c"},
    {2, TMK_SITE_ZONE, TMK_SEV_INFO, 0x1, 0, 141, "Game::Update", "src/game.c"},
    {3, TMK_SITE_ZONE, TMK_SEV_DEBUG, 0x4, 0x22AA22, 57, "AI::Think", "src/ai/brain.c"},
    {4, TMK_SITE_ZONE, TMK_SEV_DEBUG, 0x8, 0xCC8800, 300, "Physics::Step", "src/physics/world.c"},
    {5, TMK_SITE_ZONE, TMK_SEV_TRACE, 0x2, 0xAA0000, 88, "Render::Draw", "src/render/draw.c"},
    {6, TMK_SITE_PLOT, TMK_SEV_INFO, 0x1, 0, 150, "entities", "src/game.c"},
    {7, TMK_SITE_PLOT, TMK_SEV_INFO, 0x2, 0, 151, "gpu ms", "src/render/gpu.c"},
    {8, TMK_SITE_MESSAGE, TMK_SEV_WARNING, 0x4, 0, 77, "path not found", "src/ai/path.c"},
    {9, TMK_SITE_MARKER, TMK_SEV_INFO, 0x10, 0x8800FF, 12, "Load level", "src/level.c"},
    {10, TMK_SITE_FRAME, TMK_SEV_INFO, 0x2, 0, 200, "GPU frame", "src/render/gpu.c"},
};

static void put_sites(tmk_proto_writer* w) {
  size_t i;
  for (i = 0; i < sizeof k_sites / sizeof k_sites[0]; i++) {
    tmk_proto_site s;
    memset(&s, 0, sizeof s);
    s.id = k_sites[i].id;
    s.kind = k_sites[i].kind;
    s.severity = k_sites[i].severity;
    s.verbosity = k_sites[i].verbosity;
    s.color = k_sites[i].color;
    s.line = k_sites[i].line;
    s.name.ptr = k_sites[i].name;
    s.name.len = (uint32_t)strlen(k_sites[i].name);
    s.file.ptr = k_sites[i].file;
    s.file.len = (uint32_t)strlen(k_sites[i].file);
    assert_int_equal(tmk_proto_put_site(w, &s), 0);
  }
}

/* One 60 fps frame on the main thread (site, depth, start offset, duration, in ns ticks). */
static const tmk_proto_zone k_main_frame[] = {
    {0, 16600000, 1, 0},     {40, 4100000, 2, 1},     {75, 1200000, 3, 2},
    {1200120, 2899000, 4, 2}, {1200160, 910000, 4, 3}, {2110200, 1988500, 4, 3},
    {4100300, 12000000, 5, 1}, {4100350, 81000, 5, 2},  {4181400, 80600, 5, 2},
    {4262050, 81250, 5, 2},  {4343350, 79900, 5, 2},  {16100400, 0, 2, 1},
};
static const tmk_proto_zone k_worker[] = {
    {100, 3000000, 4, 0}, {150, 1000000, 3, 1}, {1000200, 999000, 3, 1}, {3000500, 12345, 4, 0},
};

static void put_zones_at(tmk_proto_writer* w, const tmk_proto_zone* z, size_t n, uint64_t t0) {
  tmk_proto_zone tmp[32];
  size_t i;
  for (i = 0; i < n; i++) {
    tmp[i] = z[i];
    tmp[i].start += t0;
  }
  assert_int_equal(tmk_proto_put_zones(w, tmp, n), (int)n);
}

static void scenario_frame(tmk_proto_writer* w, int frames) {
  const uint64_t t0 = 5000000000ull; /* 5 s after boot at 1 GHz */
  int f;
  put_sites(w);
  assert_int_equal(tmk_proto_put_thread_name(w, 0, "main", 4), 0);
  assert_int_equal(tmk_proto_put_thread_name(w, 1, "worker 1", 8), 0);
  assert_int_equal(tmk_proto_put_team(w, 0, "engine", 6), 0);
  assert_int_equal(tmk_proto_put_team(w, 2, "ai", 2), 0);
  assert_int_equal(tmk_proto_put_clock(w, t0, 1763776800000000000ull), 0);
  for (f = 0; f < frames; f++) {
    uint64_t tf = t0 + (uint64_t)f * 16666667u;
    assert_int_equal(tmk_proto_put_thread(w, 0), 0);
    put_zones_at(w, k_main_frame, sizeof k_main_frame / sizeof k_main_frame[0], tf);
    assert_int_equal(tmk_proto_put_frame(w, 0, tf + 16666667u), 0);
    assert_int_equal(tmk_proto_put_plot_i(w, 6, tf + 16600100u, 250 + f), 0);
    assert_int_equal(tmk_proto_put_plot_d(w, 7, tf + 16600200u, 3.75 + f * 0.125), 0);
    assert_int_equal(tmk_proto_put_thread(w, 1), 0);
    put_zones_at(w, k_worker, sizeof k_worker / sizeof k_worker[0], tf);
    assert_int_equal(tmk_proto_put_message(w, 8, TMK_SEV_WARNING, 0x4, tf + 1000300u, "", 0), 0);
    assert_int_equal(tmk_proto_put_frame(w, 10, tf + 9000000u), 0);
  }
  assert_int_equal(tmk_proto_put_drops(w, TMK_DROP_RING_FULL, 12), 0);
}

static void scenario_events(tmk_proto_writer* w) {
  static const char payload[] = {'l', 'e', 'v', 'e', 'l', '2', 0, 1, (char)0xFE};
  const uint64_t t = 0xFFFFFFF0u;
  tmk_proto_zone z[3];
  assert_int_equal(tmk_proto_put_thread(w, 3), 0);
  assert_int_equal(tmk_proto_put_marker(w, 0, 9, t, payload, sizeof payload), 0);
  z[0].site = 1, z[0].depth = 0, z[0].start = t + 1, z[0].duration = 0x1F;
  z[1].site = 5, z[1].depth = 1, z[1].start = t + 2, z[1].duration = 0x20 - 4;
  z[2].site = 5, z[2].depth = 1, z[2].start = 0x100000000ull, z[2].duration = 0;
  assert_int_equal(tmk_proto_put_zones(w, z, 3), 3);
  assert_int_equal(tmk_proto_put_marker(w, 1, 9, 0x100000010ull, "done", 4), 0);
  assert_int_equal(tmk_proto_put_message(w, 0, TMK_SEV_ERROR, 0xFFFFFFFFu, t + 5,
                                         "asset \"tree.png\" missing\n\ttab", 29), 0);
  assert_int_equal(tmk_proto_put_message(w, 8, TMK_SEV_TRACE, 0, t - 5, "", 0), 0);
  assert_int_equal(tmk_proto_put_plot_i(w, 6, t, INT64_MIN), 0);
  assert_int_equal(tmk_proto_put_plot_i(w, 6, t, INT64_MAX), 0);
  assert_int_equal(tmk_proto_put_plot_d(w, 7, t, -0.0), 0);
  assert_int_equal(tmk_proto_put_plot_d(w, 7, t, 1e300), 0);
  assert_int_equal(tmk_proto_put_plot_d(w, 7, t, -2.5e-310), 0);
  assert_int_equal(tmk_proto_put_frame(w, 0, 0), 0);
  assert_int_equal(tmk_proto_put_frame(w, 0, ~(uint64_t)0), 0);
  assert_int_equal(tmk_proto_put_drops(w, TMK_DROP_SEND_FAILED, ~(uint64_t)0), 0);
  assert_int_equal(tmk_proto_put_drops(w, TMK_DROP_MISMATCH, 1), 0);
  assert_int_equal(tmk_proto_put_clock(w, ~(uint64_t)0, 0), 0);
  assert_int_equal(tmk_proto_put_team(w, 31, "audio team", 10), 0);
  assert_int_equal(tmk_proto_put_thread_name(w, 0xFFFFFFFFu, "thread \xC3\xA9", 9), 0);
}

/* Nesting deeper than TMK_PROTO_MAX_OPEN, siblings given out of order, a batch starting at depth 3. */
static void scenario_deep(tmk_proto_writer* w) {
  tmk_proto_zone z[64];
  size_t n = 0;
  uint32_t d;
  for (d = 0; d < 40; d++) {
    z[n].site = 1 + d % 5, z[n].depth = d, z[n].start = 1000 + 10 * (uint64_t)d;
    z[n].duration = 100000 - 20 * (uint64_t)d;
    n++;
  }
  assert_int_equal(tmk_proto_put_zones(w, z, n), (int)n);
  n = 0;
  z[n].site = 3, z[n].depth = 3, z[n].start = 200500, z[n].duration = 50, n++;
  z[n].site = 3, z[n].depth = 3, z[n].start = 200000, z[n].duration = 400, n++;
  z[n].site = 4, z[n].depth = 4, z[n].start = 200100, z[n].duration = 100, n++;
  assert_int_equal(tmk_proto_put_zones(w, z, n), (int)n);
}

typedef struct vector_def {
  const char* name;
  int scenario; /* 0 frame, 1 events, 2 deep, 3 frame x 20 compressed */
  int big_endian;
  uint64_t seq;
} vector_def;

static const vector_def k_data_vectors[] = {
    {"frame_le", 0, 0, 7},
    {"frame_be", 0, 1, 7},
    {"events", 1, 0, 0},
    {"deep", 2, 0, 123456789},
    {"compressed", 3, 0, 99},
};
#define N_DATA (sizeof k_data_vectors / sizeof k_data_vectors[0])

/* Encodes a data vector; big_endian -1 keeps the writer's default (the host's order).
 * Returns the packet length. */
static int encode_data(const vector_def* v, int big_endian, uint8_t* out, size_t cap) {
  pt_enc* e = pt_enc_new(v->scenario == 3 ? 60000 : 8000, big_endian, v->scenario == 3);
  int len;
  assert_non_null(e);
  switch (v->scenario) {
    case 0: scenario_frame(&e->w, 1); break;
    case 1: scenario_events(&e->w); break;
    case 2: scenario_deep(&e->w); break;
    default: scenario_frame(&e->w, 20); break;
  }
  len = pt_enc_finish(e, SESSION, v->seq);
  assert_true(len > 0 && (size_t)len <= cap);
  memcpy(out, e->pkt, (size_t)len);
  pt_enc_free(e);
  return len;
}

static tmk_proto_str mk(const char* s) {
  tmk_proto_str r;
  r.ptr = s;
  r.len = (uint32_t)strlen(s);
  return r;
}

static const char* const k_ctl_vectors[] = {"hello", "welcome", "reject", "control", "bye"};
#define N_CTL (sizeof k_ctl_vectors / sizeof k_ctl_vectors[0])

static int encode_ctl(size_t i, uint8_t* out, size_t cap) {
  tmk_proto_hello h;
  tmk_proto_welcome wl;
  tmk_proto_reject rj;
  tmk_proto_control c;
  switch (i) {
    case 0:
      memset(&h, 0, sizeof h);
      h.proto_version = TMK_PROTO_VERSION;
      h.agent_version = mk("0.1.0");
      h.program = mk("spacegame");
      h.platform = mk("wii");
      h.arch = mk("ppc");
      h.big_endian = 1;
      h.pointer_size = 4;
      h.timer_freq = 60750000;
      h.caps = TMK_CAP_CONTROL;
      h.max_packet = 1200;
      return tmk_proto_encode_hello(out, cap, SESSION, &h);
    case 1:
      wl.proto_version = TMK_PROTO_VERSION;
      wl.relay_version = mk("telemark-relay 0.1.0");
      return tmk_proto_encode_welcome(out, cap, SESSION, &wl);
    case 2:
      rj.reason = TMK_REJECT_VERSION;
      rj.text = mk("relay speaks protocol 1, agent 2: update the relay");
      return tmk_proto_encode_reject(out, cap, SESSION, &rj);
    case 3:
      c.seq = 3;
      c.severity = TMK_SEV_DEBUG;
      c.verbosity = 0x5;
      return tmk_proto_encode_control(out, cap, SESSION, &c);
    default: return tmk_proto_encode_bye(out, cap, SESSION);
  }
}

/* ---- decoded form ------------------------------------------------------------------------------ */

static size_t esc(char* o, size_t cap, tmk_proto_str s) {
  size_t n = 0;
  uint32_t i;
  if (cap < 8) return 0;
  o[n++] = '"';
  for (i = 0; i < s.len && n + 6 < cap; i++) {
    unsigned char c = (unsigned char)s.ptr[i];
    if (c == '"' || c == '\\') o[n++] = '\\', o[n++] = (char)c;
    else if (c >= 0x20 && c < 0x7F) o[n++] = (char)c;
    else n += (size_t)sprintf(o + n, "\\x%02x", c);
  }
  o[n++] = '"';
  o[n] = 0;
  return n;
}

/* Appends the decoded form of a packet to txt (NUL-terminated). Returns 0 or the decoder's code. */
static int describe_body(const uint8_t* pkt, size_t len, char* txt, size_t cap) {
  static uint8_t scratch[TMK_PROTO_MAX_BODY];
  tmk_proto_reader r;
  tmk_proto_record rec;
  size_t n = 0;
  int rc;
  char a[2200], b[2200], c[2200], d[2200];
  txt[0] = 0;
  rc = tmk_proto_open(&r, pkt, len, scratch, sizeof scratch);
  if (rc < 0) return rc;
  n += (size_t)snprintf(txt + n, cap - n,
                        "packet %s version=%u flags=0x%02x session=0x%016llx seq=%llu base=%llu "
                        "raw_len=%u\n",
                        tmk_proto_packet_type_name(r.hdr.type), r.hdr.version, r.hdr.flags,
                        (unsigned long long)r.hdr.session_id, (unsigned long long)r.hdr.seq,
                        (unsigned long long)r.hdr.base_time, (unsigned)r.hdr.raw_len);
  switch (r.hdr.type) {
    case TMK_PKT_DATA:
      while ((rc = tmk_proto_next(&r, &rec)) == 1) {
        char line[4096];
        tmk_proto_format_record(&rec, line, sizeof line);
        n += (size_t)snprintf(txt + n, cap - n, "%s\n", line);
        if (n >= cap) return TMK_ENOSPC;
      }
      return rc;
    case TMK_PKT_HELLO: {
      tmk_proto_hello h;
      if ((rc = tmk_proto_read_hello(&r, &h)) < 0) return rc;
      esc(a, sizeof a, h.agent_version), esc(b, sizeof b, h.program), esc(c, sizeof c, h.platform);
      esc(d, sizeof d, h.arch);
      snprintf(txt + n, cap - n,
               "hello proto=%u agent=%s program=%s platform=%s arch=%s big_endian=%u "
               "pointer_size=%u timer_freq=%llu caps=0x%x max_packet=%u\n",
               h.proto_version, a, b, c, d, h.big_endian, h.pointer_size,
               (unsigned long long)h.timer_freq, h.caps, h.max_packet);
      return 0;
    }
    case TMK_PKT_WELCOME: {
      tmk_proto_welcome w;
      if ((rc = tmk_proto_read_welcome(&r, &w)) < 0) return rc;
      esc(a, sizeof a, w.relay_version);
      snprintf(txt + n, cap - n, "welcome proto=%u relay=%s\n", w.proto_version, a);
      return 0;
    }
    case TMK_PKT_REJECT: {
      tmk_proto_reject rj;
      if ((rc = tmk_proto_read_reject(&r, &rj)) < 0) return rc;
      esc(a, sizeof a, rj.text);
      snprintf(txt + n, cap - n, "reject reason=%u text=%s\n", rj.reason, a);
      return 0;
    }
    case TMK_PKT_CONTROL: {
      tmk_proto_control ct;
      if ((rc = tmk_proto_read_control(&r, &ct)) < 0) return rc;
      snprintf(txt + n, cap - n, "control seq=%u severity=%u verbosity=0x%x\n", ct.seq,
               ct.severity, ct.verbosity);
      return 0;
    }
    default: snprintf(txt + n, cap - n, "bye\n"); return 0;
  }
}

/* ---- files ------------------------------------------------------------------------------------- */

static long read_file(const char* name, const char* ext, void* out, size_t cap) {
  char path[1024];
  FILE* f;
  size_t n;
  snprintf(path, sizeof path, "%s/%s.%s", g_dir, name, ext);
  f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return -1;
  }
  n = fread(out, 1, cap, f);
  fclose(f);
  return (long)n;
}

static int write_file(const char* dir, const char* name, const char* ext, const void* p, size_t n) {
  char path[1024];
  FILE* f;
  snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
  f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", path);
    if (f) fclose(f);
    return -1;
  }
  fclose(f);
  printf("wrote %s (%u bytes)\n", path, (unsigned)n);
  return 0;
}

static void print_diff(const char* want, const char* got) {
  int line = 1;
  while (*want && *got && *want == *got) {
    if (*want == '\n') line++;
    want++, got++;
  }
  fprintf(stderr, "decoded form differs at line %d:\n  want: %.120s\n  got:  %.120s\n", line, want, got);
}

/* The decoded form; a keyed packet (§2.1) ends with "mac tag=0x…", the tag as the 64-bit
 * number whose bytes, least significant first, are the packet's last 8. */
static int describe(const uint8_t* pkt, size_t len, char* txt, size_t cap) {
  int rc = describe_body(pkt, len, txt, cap);
  if (rc == 0 && len >= 22 && (pkt[4] & TMK_PKT_F_MAC)) {
    uint64_t tag = 0;
    size_t n = strlen(txt);
    int k;
    for (k = 7; k >= 0; k--) tag = (tag << 8) | pkt[len - 8 + (size_t)k];
    snprintf(txt + n, cap - n, "mac tag=0x%016llx\n", (unsigned long long)tag);
  }
  return rc;
}

/* The keyed vector (§2.1): frame_le sealed with KEYED_KEY. */
static const uint8_t KEYED_KEY[16] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                      0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f};
static int encode_keyed(uint8_t* out, size_t cap) {
  int len = encode_data(&k_data_vectors[0], 0, out, cap);
  return tmk_proto_mac_seal(out, (size_t)len, cap, KEYED_KEY);
}

/* Loads NAME.bin and NAME.txt and checks the decoded form. Returns the packet length. */
static long check_decoded(const char* name, uint8_t* bin, size_t bin_cap) {
  char* want = (char*)calloc(1, TXT_CAP);
  char* got = (char*)calloc(1, TXT_CAP);
  long n, t;
  int rc;
  assert_non_null(want);
  assert_non_null(got);
  n = read_file(name, "bin", bin, bin_cap);
  t = read_file(name, "txt", want, TXT_CAP - 1);
  assert_true(n > 0 && t > 0);
  rc = describe(bin, (size_t)n, got, TXT_CAP);
  if (rc == TMK_ENOLZ4 && strcmp(name, "compressed") == 0 && tmk_proto_lz4_state_size() == 0) {
    /* a build without LZ4 must say so rather than misread the body */
    free(want);
    free(got);
    return n;
  }
  if (rc != 0) fail_msg("%s.bin: decoder says %s", name, tmk_err_name(rc));
  if (strcmp(want, got) != 0) {
    print_diff(want, got);
    fail_msg("%s.bin does not decode to %s.txt", name, name);
  }
  free(want);
  free(got);
  return n;
}

/* ---- tests ------------------------------------------------------------------------------------- */

static void test_decode_vectors(void** state) {
  uint8_t* bin = (uint8_t*)malloc(OUT_CAP);
  size_t i;
  (void)state;
  assert_non_null(bin);
  for (i = 0; i < N_DATA; i++) check_decoded(k_data_vectors[i].name, bin, OUT_CAP);
  for (i = 0; i < N_CTL; i++) check_decoded(k_ctl_vectors[i], bin, OUT_CAP);
  free(bin);
}

/* keyed.bin: decodes like frame_le plus its MAC line, its MAC checks with the key of the README
 * and with no other, and the encoder and SipHash reproduce it byte for byte. */
static void test_keyed_vector(void** state) {
  uint8_t* bin = (uint8_t*)malloc(OUT_CAP);
  uint8_t* enc = (uint8_t*)malloc(OUT_CAP);
  uint8_t other[16];
  long n;
  int len;
  (void)state;
  assert_true(bin && enc);
  n = check_decoded("keyed", bin, OUT_CAP);
  assert_int_equal(bin[4], TMK_PKT_F_MAC);
  assert_int_equal(tmk_proto_mac_check(bin, (size_t)n, KEYED_KEY), 0);
  memcpy(other, KEYED_KEY, 16);
  other[7] ^= 0x10;
  assert_int_equal(tmk_proto_mac_check(bin, (size_t)n, other), TMK_EAUTH);
  len = encode_keyed(enc, OUT_CAP);
  assert_int_equal(len, n);
  assert_memory_equal(bin, enc, (size_t)len);
  free(bin);
  free(enc);
}

static void test_encode_vectors(void** state) {
  uint8_t* bin = (uint8_t*)malloc(OUT_CAP);
  uint8_t* enc = (uint8_t*)malloc(OUT_CAP);
  char* a = (char*)malloc(TXT_CAP);
  char* b = (char*)malloc(TXT_CAP);
  size_t i;
  (void)state;
  assert_true(bin && enc && a && b);
  for (i = 0; i < N_DATA; i++) {
    const vector_def* v = &k_data_vectors[i];
    long n = read_file(v->name, "bin", bin, OUT_CAP);
    int len = encode_data(v, v->big_endian, enc, OUT_CAP);
    assert_true(n > 0);
    if (v->scenario == 3) {
      /* compare what the packets say, not the LZ4 bytes */
      if (tmk_proto_lz4_state_size() == 0) continue;
      assert_true(enc[4] & TMK_PKT_F_LZ4);
      assert_int_equal(describe(bin, (size_t)n, a, TXT_CAP), 0);
      assert_int_equal(describe(enc, (size_t)len, b, TXT_CAP), 0);
      if (strcmp(a, b) != 0) {
        print_diff(a, b);
        fail_msg("compressed vector decodes differently");
      }
      continue;
    }
    if (len != n || memcmp(bin, enc, (size_t)len) != 0) {
      long k = 0;
      while (k < n && k < len && bin[k] == enc[k]) k++;
      fail_msg("%s: encoder output (%d bytes) differs from %s.bin (%ld bytes) at offset %ld",
               v->name, len, v->name, n, k);
    }
  }
  /* Control packets are written in the host's byte order (their only fixed-width field is the
   * session id); the vectors are little-endian, so a big-endian host expects the BIG_ENDIAN flag
   * and the session id's bytes reversed, and nothing else changed. */
  for (i = 0; i < N_CTL; i++) {
    long n = read_file(k_ctl_vectors[i], "bin", bin, OUT_CAP);
    int len = encode_ctl(i, enc, OUT_CAP);
    assert_true(n > 14 && len > 0);
    assert_int_equal(bin[4], 0);
    if (tmk_proto_host_big_endian()) {
      int k;
      bin[4] = TMK_PKT_F_BIG_ENDIAN;
      for (k = 0; k < 4; k++) {
        uint8_t t = bin[6 + k];
        bin[6 + k] = bin[13 - k];
        bin[13 - k] = t;
      }
    }
    if (len != n || memcmp(bin, enc, (size_t)len) != 0)
      fail_msg("%s: encoder output differs from %s.bin", k_ctl_vectors[i], k_ctl_vectors[i]);
  }
  free(bin);
  free(enc);
  free(a);
  free(b);
}

/* The writer's default byte order is the host's: on x86 and mipsel the packet equals
 * frame_le.bin, on powerpc it equals frame_be.bin byte for byte — the packet a big-endian target
 * sends natively is the checked-in vector that every host decodes (test_decode_vectors). */
static void test_native_encoding(void** state) {
  uint8_t* bin = (uint8_t*)malloc(OUT_CAP);
  uint8_t* enc = (uint8_t*)malloc(OUT_CAP);
  const vector_def* v = &k_data_vectors[tmk_proto_host_big_endian() ? 1 : 0];
  long n;
  int len;
  (void)state;
  assert_true(bin && enc);
  assert_int_equal(v->big_endian, tmk_proto_host_big_endian());
  n = read_file(v->name, "bin", bin, OUT_CAP);
  len = encode_data(v, -1, enc, OUT_CAP);
  assert_int_equal(len, n);
  assert_memory_equal(bin, enc, (size_t)len);
  print_message("native encoding on this %s-endian host equals %s.bin\n",
                tmk_proto_host_big_endian() ? "big" : "little", v->name);
  free(bin);
  free(enc);
}

/* Both byte orders carry the same records: the .txt files differ only in the header's flags. */
static void test_byte_orders_agree(void** state) {
  uint8_t* bin = (uint8_t*)malloc(OUT_CAP);
  char* le = (char*)malloc(TXT_CAP);
  char* be = (char*)malloc(TXT_CAP);
  long n;
  (void)state;
  assert_true(bin && le && be);
  n = read_file("frame_le", "bin", bin, OUT_CAP);
  assert_int_equal(describe(bin, (size_t)n, le, TXT_CAP), 0);
  n = read_file("frame_be", "bin", bin, OUT_CAP);
  assert_int_equal(describe(bin, (size_t)n, be, TXT_CAP), 0);
  assert_int_equal(bin[4], TMK_PKT_F_BIG_ENDIAN);
  assert_true(strchr(le, '\n') != NULL && strchr(be, '\n') != NULL);
  assert_string_equal(strchr(le, '\n'), strchr(be, '\n'));
  free(bin);
  free(le);
  free(be);
}

static int regen(const char* dir) {
  uint8_t* pkt = (uint8_t*)malloc(OUT_CAP);
  char* txt = (char*)malloc(TXT_CAP);
  size_t i;
  int len, rc;
  if (!pkt || !txt) return 1;
  if (tmk_proto_lz4_state_size() == 0) {
    fprintf(stderr, "--regen needs a build with LZ4 (for compressed.bin)\n");
    return 1;
  }
  for (i = 0; i < N_DATA + N_CTL; i++) {
    const char* name = i < N_DATA ? k_data_vectors[i].name : k_ctl_vectors[i - N_DATA];
    len = i < N_DATA ? encode_data(&k_data_vectors[i], k_data_vectors[i].big_endian, pkt, OUT_CAP)
                     : encode_ctl(i - N_DATA, pkt, OUT_CAP);
    if (len <= 0) return 1;
    rc = describe(pkt, (size_t)len, txt, TXT_CAP);
    if (rc != 0) {
      fprintf(stderr, "%s: does not decode: %s\n", name, tmk_err_name(rc));
      return 1;
    }
    if (write_file(dir, name, "bin", pkt, (size_t)len) || write_file(dir, name, "txt", txt, strlen(txt)))
      return 1;
  }
  len = encode_keyed(pkt, OUT_CAP);
  if (len <= 0 || describe(pkt, (size_t)len, txt, TXT_CAP) != 0 ||
      write_file(dir, "keyed", "bin", pkt, (size_t)len) ||
      write_file(dir, "keyed", "txt", txt, strlen(txt)))
    return 1;
  free(pkt);
  free(txt);
  return 0;
}

int main(int argc, char** argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_vectors),
      cmocka_unit_test(test_encode_vectors),
      cmocka_unit_test(test_native_encoding),
      cmocka_unit_test(test_byte_orders_agree),
      cmocka_unit_test(test_keyed_vector),
  };
  if (argc == 3 && strcmp(argv[1], "--regen") == 0) return regen(argv[2]);
  if (argc != 2) {
    fprintf(stderr, "usage: %s VECTOR_DIR | --regen VECTOR_DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  return cmocka_run_group_tests_name("proto-vectors", tests, NULL, NULL);
}
