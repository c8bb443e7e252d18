/* bench_proto.c — tmk-bench-proto: encodes the game-like stream of bench/common the way an agent
 * does (per-thread batches each frame, descriptors re-sent every 2 s, 1200-byte packets, LZ4 when
 * built in), decodes every packet, checks that every record put comes out and that the decoded
 * zones are the stream's (same count, same multiset of fields), decodes them again with the batched
 * zone decoder (tmk_proto_next_zones, the relay's path) and checks it finds the same, and prints
 * throughput and size as `RESULT name=value` lines. Deterministic: same seed, same bytes.
 *   tmk-bench-proto [seconds-of-game (default 20)] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tmk_gamestream.h"
#include "tmk_proto.h"

#define PACKET 1200
#define REPEAT 10

typedef struct stream {
  tmk_proto_zone* zones;
  size_t nzones;
  tmk_gs_event* events;
  size_t nevents;
  struct {
    size_t z0, nz, e0, ne;
  } (*batches)[TMK_GS_THREADS];
  size_t nframes;
  char* text; /* message texts, 64 bytes per event */
} stream;

typedef struct encoded {
  uint8_t* data; /* packets back to back */
  size_t* off;   /* packet i is data[off[i], off[i+1]) */
  size_t npackets, cap_packets, bytes, cap_bytes;
  uint64_t records;
} encoded;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "tmk-bench-proto: out of memory\n");
    exit(1);
  }
  return p;
}

/* Generates `frames` frames into flat arrays, so that timing covers only encode and decode. */
static void generate(stream* s, size_t frames) {
  tmk_gamestream* g = tmk_gs_create(20261122);
  size_t cap_z = frames * 1400, cap_e = frames * 24, f;
  uint32_t t;
  if (!g) exit(1);
  memset(s, 0, sizeof *s);
  s->zones = (tmk_proto_zone*)xmalloc(cap_z * sizeof *s->zones);
  s->events = (tmk_gs_event*)xmalloc(cap_e * sizeof *s->events);
  s->text = (char*)xmalloc(cap_e * 64);
  s->batches = xmalloc(frames * sizeof *s->batches);
  for (f = 0; f < frames; f++) {
    const tmk_gs_frame* fr = tmk_gs_next_frame(g);
    for (t = 0; t < TMK_GS_THREADS; t++) {
      const tmk_gs_batch* b = &fr->batch[t];
      size_t i;
      if (s->nzones + b->nzones > cap_z || s->nevents + b->nevents > cap_e) {
        cap_z *= 2, cap_e *= 2;
        s->zones = (tmk_proto_zone*)realloc(s->zones, cap_z * sizeof *s->zones);
        s->events = (tmk_gs_event*)realloc(s->events, cap_e * sizeof *s->events);
        s->text = (char*)realloc(s->text, cap_e * 64);
        if (!s->zones || !s->events || !s->text) exit(1);
      }
      s->batches[f][t].z0 = s->nzones;
      s->batches[f][t].nz = b->nzones;
      s->batches[f][t].e0 = s->nevents;
      s->batches[f][t].ne = b->nevents;
      memcpy(s->zones + s->nzones, b->zones, b->nzones * sizeof *b->zones);
      for (i = 0; i < b->nevents; i++) {
        tmk_gs_event* e = &s->events[s->nevents + i];
        *e = b->events[i];
        if (e->text_len) {
          memcpy(s->text + (s->nevents + i) * 64, e->text, e->text_len);
          e->text = NULL; /* re-pointed at encode time: realloc may move s->text */
        }
      }
      s->nzones += b->nzones;
      s->nevents += b->nevents;
    }
  }
  s->nframes = frames;
  tmk_gs_destroy(g);
}

/* ---- encoding like an agent ------------------------------------------------------------------ */

typedef struct agent {
  tmk_proto_writer w;
  uint8_t body[PACKET - TMK_PROTO_MAX_HEADER];
  void* lz4;
  uint64_t seq;
  uint32_t thread;
  encoded* out;
} agent;

static void emit(agent* a) {
  encoded* o = a->out;
  int len;
  if (o->npackets + 2 > o->cap_packets) {
    o->cap_packets *= 2;
    o->off = (size_t*)realloc(o->off, o->cap_packets * sizeof *o->off);
  }
  if (o->bytes + PACKET > o->cap_bytes) {
    o->cap_bytes *= 2;
    o->data = (uint8_t*)realloc(o->data, o->cap_bytes);
  }
  if (!o->off || !o->data) exit(1);
  len = tmk_proto_finish(&a->w, 0xC0FFEE, a->seq++, o->data + o->bytes, PACKET, a->lz4);
  if (len <= 0 || len > PACKET) {
    fprintf(stderr, "tmk-bench-proto: finish failed (%d)\n", len);
    exit(1);
  }
  o->records += a->w.records;
  o->off[o->npackets++] = o->bytes;
  o->bytes += (size_t)len;
  o->off[o->npackets] = o->bytes;
  tmk_proto_writer_reset(&a->w);
}

/* Runs put; on a full packet sends it, switches back to the current thread and retries. */
#define PUT(a, call)                                                       \
  do {                                                                     \
    int rc_ = (call);                                                      \
    if (rc_ == TMK_ENOSPC) {                                               \
      emit(a);                                                             \
      if (tmk_proto_put_thread(&(a)->w, (a)->thread) != 0) exit(1);        \
      rc_ = (call);                                                        \
    }                                                                      \
    if (rc_ != 0) {                                                        \
      fprintf(stderr, "tmk-bench-proto: %s failed: %s\n", #call, tmk_strerror(rc_)); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

static void set_thread(agent* a, uint32_t t) {
  a->thread = t;
  PUT(a, tmk_proto_put_thread(&a->w, t));
}

static void put_descriptors(agent* a, uint64_t ticks) {
  size_t n, i;
  const tmk_proto_site* sites = tmk_gs_sites(&n);
  uint32_t t;
  set_thread(a, 0);
  PUT(a, tmk_proto_put_clock(&a->w, ticks, 1763776800000000000ull + ticks));
  for (i = 0; i < n; i++) PUT(a, tmk_proto_put_site(&a->w, &sites[i]));
  for (t = 0; t < TMK_GS_THREADS; t++) {
    const char* name = tmk_gs_thread_name(t);
    PUT(a, tmk_proto_put_thread_name(&a->w, t, name, strlen(name)));
  }
  for (t = 0; tmk_gs_team_name(t); t++)
    PUT(a, tmk_proto_put_team(&a->w, t, tmk_gs_team_name(t), strlen(tmk_gs_team_name(t))));
}

static void encode(const stream* s, encoded* o, void* lz4) {
  agent* a = (agent*)xmalloc(sizeof *a);
  size_t f;
  uint32_t t;
  o->npackets = o->bytes = 0;
  o->records = 0;
  a->lz4 = lz4;
  a->seq = 0;
  a->thread = 0;
  a->out = o;
  if (tmk_proto_writer_init(&a->w, a->body, sizeof a->body) != 0) exit(1);
  for (f = 0; f < s->nframes; f++) {
    if (f % 120 == 0) put_descriptors(a, s->zones[s->batches[f][0].z0].start);
    for (t = 0; t < TMK_GS_THREADS; t++) {
      const tmk_proto_zone* z = s->zones + s->batches[f][t].z0;
      size_t nz = s->batches[f][t].nz, done = 0, i;
      set_thread(a, t);
      while (done < nz) {
        int k = tmk_proto_put_zones(&a->w, z + done, nz - done);
        if (k < 0) exit(1);
        done += (size_t)k;
        if (done < nz) {
          emit(a);
          set_thread(a, t);
        }
      }
      for (i = 0; i < s->batches[f][t].ne; i++) {
        size_t ei = s->batches[f][t].e0 + i;
        const tmk_gs_event* e = &s->events[ei];
        switch (e->kind) {
          case TMK_GS_FRAME: PUT(a, tmk_proto_put_frame(&a->w, e->site, e->time)); break;
          case TMK_GS_PLOT_I: PUT(a, tmk_proto_put_plot_i(&a->w, e->site, e->time, e->i)); break;
          case TMK_GS_PLOT_D: PUT(a, tmk_proto_put_plot_d(&a->w, e->site, e->time, e->d)); break;
          default:
            PUT(a, tmk_proto_put_message(&a->w, e->site, e->severity, e->verbosity, e->time,
                                         s->text + ei * 64, e->text_len));
        }
      }
    }
  }
  if (!tmk_proto_writer_empty(&a->w)) emit(a);
  free(a);
}

/* Decodes every packet (the timed loop); returns the number of records, counts the zones and sums
 * a cheap checksum of them so that the work cannot be skipped. */
static uint64_t decode(const encoded* o, uint64_t* zones, uint64_t* checksum) {
  static uint8_t scratch[TMK_PROTO_MAX_BODY];
  tmk_proto_reader r;
  tmk_proto_record rec;
  uint64_t n = 0, nz = 0, sum = 0;
  size_t i;
  int rc;
  for (i = 0; i < o->npackets; i++) {
    if (tmk_proto_open(&r, o->data + o->off[i], o->off[i + 1] - o->off[i], scratch, sizeof scratch) != 0) {
      fprintf(stderr, "tmk-bench-proto: packet %u does not open\n", (unsigned)i);
      exit(1);
    }
    while ((rc = tmk_proto_next(&r, &rec)) == 1) {
      n++;
      if (rec.type == TMK_REC_ZONE) {
        nz++;
        sum += rec.u.zone.start * 3 + rec.u.zone.duration * 5 + rec.u.zone.site + rec.u.zone.depth * 7;
      }
    }
    if (rc != 0) {
      fprintf(stderr, "tmk-bench-proto: packet %u: %s\n", (unsigned)i, tmk_strerror(rc));
      exit(1);
    }
  }
  *zones = nz;
  *checksum = sum;
  return n;
}

/* The same packets through the batched zone decoder (tmk_proto_next_zones for runs of zones,
 * tmk_proto_next for the other records), as the relay's store decodes them. Same checksum. */
static uint64_t decode_batched(const encoded* o, uint64_t* zones, uint64_t* checksum) {
  static uint8_t scratch[TMK_PROTO_MAX_BODY];
  static tmk_proto_zone z[4096];
  tmk_proto_reader r;
  tmk_proto_record rec;
  uint64_t n = 0, nz = 0, sum = 0;
  size_t i;
  int rc, k;
  uint32_t thread;
  for (i = 0; i < o->npackets; i++) {
    if (tmk_proto_open(&r, o->data + o->off[i], o->off[i + 1] - o->off[i], scratch, sizeof scratch) != 0) {
      fprintf(stderr, "tmk-bench-proto: packet %u does not open\n", (unsigned)i);
      exit(1);
    }
    for (;;) {
      rc = tmk_proto_next_zones(&r, z, sizeof z / sizeof z[0], &thread);
      if (rc > 0) {
        for (k = 0; k < rc; k++)
          sum += z[k].start * 3 + z[k].duration * 5 + z[k].site + z[k].depth * 7;
        n += (uint64_t)rc;
        nz += (uint64_t)rc;
        continue;
      }
      if (rc == 0 && (rc = tmk_proto_next(&r, &rec)) == 1) {
        n++;
        if (rec.type == TMK_REC_ZONE) {
          nz++;
          sum += rec.u.zone.start * 3 + rec.u.zone.duration * 5 + rec.u.zone.site + rec.u.zone.depth * 7;
        }
        continue;
      }
      break;
    }
    if (rc != 0) {
      fprintf(stderr, "tmk-bench-proto: packet %u: %s\n", (unsigned)i, tmk_strerror(rc));
      exit(1);
    }
  }
  *zones = nz;
  *checksum = sum;
  return n;
}

/* A zone's fields mixed into 64 bits (splitmix64 steps), so that a sum over zones does not depend
 * on their order but does change when fields move between zones. */
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
static uint64_t zone_hash(const tmk_proto_zone* z) {
  return mix(z->start ^ mix(z->duration ^ mix((uint64_t)z->site | (uint64_t)z->depth << 32)));
}

/* Exits 1 unless the packets decode to exactly the stream's zones (in any order). Untimed. */
static void verify(const stream* s, const encoded* o, const char* what) {
  static uint8_t scratch[TMK_PROTO_MAX_BODY];
  tmk_proto_reader r;
  tmk_proto_record rec;
  uint64_t nz = 0, got = 0, want = 0;
  size_t i;
  for (i = 0; i < o->npackets; i++) {
    if (tmk_proto_open(&r, o->data + o->off[i], o->off[i + 1] - o->off[i], scratch, sizeof scratch) != 0)
      exit(1);
    while (tmk_proto_next(&r, &rec) == 1)
      if (rec.type == TMK_REC_ZONE) nz++, got += zone_hash(&rec.u.zone);
  }
  for (i = 0; i < s->nzones; i++) want += zone_hash(&s->zones[i]);
  if (nz != s->nzones || got != want) {
    fprintf(stderr, "tmk-bench-proto: %s: decoded %llu zones (hash %llx), encoded %llu (%llx)\n",
            what, (unsigned long long)nz, (unsigned long long)got, (unsigned long long)s->nzones,
            (unsigned long long)want);
    exit(1);
  }
}

/* One zone in a tight loop: a ~45 ns body and ~12 ns between iterations, each off by a tick or
 * two. */
static void generate_loop(stream* s, size_t frames, size_t per_frame) {
  uint64_t rng = 7, t = 5000000000ull;
  size_t f, i;
  memset(s, 0, sizeof *s);
  s->zones = (tmk_proto_zone*)xmalloc(frames * per_frame * sizeof *s->zones);
  s->events = (tmk_gs_event*)xmalloc(sizeof *s->events);
  s->text = (char*)xmalloc(64);
  s->batches = xmalloc(frames * sizeof *s->batches);
  memset(s->batches, 0, frames * sizeof *s->batches);
  for (f = 0; f < frames; f++) {
    s->batches[f][0].z0 = s->nzones;
    s->batches[f][0].nz = per_frame;
    for (i = 0; i < per_frame; i++) {
      tmk_proto_zone* z = &s->zones[s->nzones++];
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      z->site = 2;
      z->depth = 0;
      z->start = t;
      z->duration = 44 + rng % 3;
      t += z->duration + 11 + (rng >> 8) % 3;
    }
  }
  s->nframes = frames;
}

/* The same stream as a Wii-like target would time it: a 60.75 MHz timebase instead of 1 GHz. */
static uint64_t to_timebase(uint64_t ns) { return ns / 1000000000ull * 60750000ull + ns % 1000000000ull * 6075ull / 100000ull; }

static void rescale(stream* s) {
  size_t i;
  for (i = 0; i < s->nzones; i++) {
    uint64_t end = to_timebase(s->zones[i].start + s->zones[i].duration);
    s->zones[i].start = to_timebase(s->zones[i].start);
    s->zones[i].duration = end - s->zones[i].start;
  }
  for (i = 0; i < s->nevents; i++) s->events[i].time = to_timebase(s->events[i].time);
}

int main(int argc, char** argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 20.0;
  size_t frames = (size_t)(seconds * 60.0), i;
  stream s;
  encoded enc, raw;
  void* lz4 = NULL;
  double t, best_enc = 1e30, best_dec = 1e30, best_batch = 1e30;
  uint64_t nz = 0, sum = 0, nrec = 0, bn = 0;
  int r;
  if (frames < 1) frames = 1;
  seconds = (double)frames / 60.0; /* what is actually encoded */
  generate(&s, frames);
  if (tmk_proto_lz4_state_size() > 0) lz4 = xmalloc(tmk_proto_lz4_state_size());
  memset(&enc, 0, sizeof enc);
  enc.cap_packets = 1024;
  enc.cap_bytes = 1 << 20;
  enc.off = (size_t*)xmalloc(enc.cap_packets * sizeof *enc.off);
  enc.data = (uint8_t*)xmalloc(enc.cap_bytes);
  raw = enc;
  raw.off = (size_t*)xmalloc(raw.cap_packets * sizeof *raw.off);
  raw.data = (uint8_t*)xmalloc(raw.cap_bytes);

  encode(&s, &raw, NULL);
  for (r = 0; r < REPEAT; r++) {
    t = now();
    encode(&s, &enc, lz4);
    t = now() - t;
    if (t < best_enc) best_enc = t;
  }
  for (r = 0; r < REPEAT; r++) {
    t = now();
    nrec = decode(&enc, &nz, &sum);
    t = now() - t;
    if (t < best_dec) best_dec = t;
  }
  for (r = 0; r < REPEAT; r++) {
    uint64_t bz = 0, bsum = 0;
    t = now();
    bn = decode_batched(&enc, &bz, &bsum);
    t = now() - t;
    if (t < best_batch) best_batch = t;
    if (bn != nrec || bz != nz || bsum != sum) {
      fprintf(stderr, "tmk-bench-proto: the batched decoder found %llu records (%llu zones, sum "
              "%llx), tmk_proto_next %llu (%llu, %llx)\n", (unsigned long long)bn,
              (unsigned long long)bz, (unsigned long long)bsum, (unsigned long long)nrec,
              (unsigned long long)nz, (unsigned long long)sum);
      return 1;
    }
  }
  verify(&s, &enc, "LZ4 packets");
  verify(&s, &raw, "plain packets");
  if (nrec != enc.records) {
    fprintf(stderr, "tmk-bench-proto: decoded %llu records, put %llu\n", (unsigned long long)nrec,
            (unsigned long long)enc.records);
    return 1;
  }
  printf("tmk-bench-proto: %g s of game at 60 fps: %u frames, %llu zones, %llu records, "
         "%u threads, %u call sites, %u-byte packets, LZ4 %s\n",
         seconds, (unsigned)frames, (unsigned long long)s.nzones, (unsigned long long)enc.records,
         TMK_GS_THREADS, (unsigned)(tmk_gs_sites(&i), i), PACKET, lz4 ? "on" : "off (not built in)");
  printf("RESULT encode_records_per_s=%.0f\n", (double)enc.records / best_enc);
  printf("RESULT decode_records_per_s=%.0f\n", (double)nrec / best_dec);
  printf("RESULT decode_records_per_s_batched=%.0f\n", (double)nrec / best_batch);
  printf("RESULT encode_zones_per_s=%.0f\n", (double)s.nzones / best_enc);
  printf("RESULT bytes_per_zone=%.3f\n", (double)enc.bytes / (double)s.nzones);
  printf("RESULT bytes_per_zone_raw=%.3f\n", (double)raw.bytes / (double)s.nzones);
  printf("RESULT zones_per_packet=%.1f\n", (double)s.nzones / (double)enc.npackets);
  printf("RESULT zones_per_packet_raw=%.1f\n", (double)s.nzones / (double)raw.npackets);
  printf("RESULT packets_per_s=%.1f\n", (double)enc.npackets / seconds);
  printf("RESULT wire_kbytes_per_s=%.1f\n", (double)enc.bytes / seconds / 1000.0);
  rescale(&s);
  encode(&s, &enc, lz4);
  verify(&s, &enc, "60.75 MHz stream");
  printf("RESULT bytes_per_zone_60mhz_timer=%.3f\n", (double)enc.bytes / (double)s.nzones);
  {
    stream loop;
    double best_loop = 1e30;
    generate_loop(&loop, 1000, 1000);
    for (r = 0; r < REPEAT; r++) {
      t = now();
      encode(&loop, &enc, lz4);
      t = now() - t;
      if (t < best_loop) best_loop = t;
    }
    verify(&loop, &enc, "tight loop");
    printf("RESULT bytes_per_zone_tight_loop=%.3f\n", (double)enc.bytes / (double)loop.nzones);
    printf("RESULT encode_zones_per_s_tight_loop=%.0f\n", (double)loop.nzones / best_loop);
    free(loop.zones), free(loop.events), free(loop.text), free(loop.batches);
  }
  free(lz4);
  free(enc.off), free(enc.data), free(raw.off), free(raw.data);
  free(s.zones), free(s.events), free(s.text), free(s.batches);
  return 0;
}
