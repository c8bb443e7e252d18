/* relay_session.c — the session registry and the thread-safe read side of tmk_relay.h: session
 * lifetime (create, register, evict, reference counts), the one packet-apply path shared by live
 * data and replay, per-session recording start/stop/flush, and opening files from the data dir. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "relay_internal.h"

const char* tmk_relay_version(void) { return TMK_RELAY_VERSION; }

typedef struct tmk__pending {
  struct tmk__pending* next;
  size_t len;
  uint8_t data[];
} tmk__pending;


/* ---------------------------------------------------------------------------------------------
 * Lifetime
 * ------------------------------------------------------------------------------------------- */
tmk__session* tmk__session_new(tmk_relay* r, uint64_t sid, const char* id, int replay) {
  tmk__session* s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->store = tmk__store_new(r->cfg.session_memory);
  if (!s->store || tmk__reorder_init(&s->ro, r->cfg.reorder_packets, r->cfg.reorder_ms)) {
    tmk__store_free(s->store);
    tmk__reorder_free(&s->ro);
    free(s);
    return NULL;
  }
  pthread_mutex_init(&s->mu, NULL);
  atomic_init(&s->refs, 1);
  s->relay = r;
  s->sid = sid;
  s->replay = replay;
  s->rec.fd = -1;
  if (id) snprintf(s->id, sizeof s->id, "%s", id);
  else snprintf(s->id, sizeof s->id, "%016llx", (unsigned long long)sid);
  snprintf(s->info.id, sizeof s->info.id, "%s", s->id);
  s->info.session_id = sid;
  s->info.live = !replay;
  s->info.recorded = replay;
  s->info.created_unix_ns = tmk__unix_ns();
  s->info.control_level = -1;
  s->last_packet_ms = tmk__now_ms();
  if (!replay && r->ch && tmk__ch_session_attach(r->ch, s) != 0) { /* history sink */
    tmk__session_unref(s);
    return NULL;
  }
  return s;
}

void tmk__session_ref(tmk__session* s) { atomic_fetch_add(&s->refs, 1); }

void tmk__session_unref(tmk__session* s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  if (s->recording) tmk__rec_close(&s->rec);
  for (tmk__pending* p = s->pending_head; p;) {
    tmk__pending* next = p->next;
    free(p);
    p = next;
  }
  tmk__store_free(s->store);
  tmk__reorder_free(&s->ro);
  pthread_mutex_destroy(&s->mu);
  free(s->hello);
  tmk__ch_sess_free(s->ch);
  free(s);
}

static uint32_t sid_bucket(uint64_t sid) {
  sid ^= sid >> 33;
  sid *= 0xff51afd7ed558ccdULL;
  sid ^= sid >> 33;
  return (uint32_t)(sid % 1024);
}

tmk__session* tmk__session_find_sid(tmk_relay* r, uint64_t sid) {
  for (tmk__session* s = r->by_sid[sid_bucket(sid)]; s; s = s->hnext)
    if (s->sid == sid) return s;
  return NULL;
}

static void unlink_sid(tmk_relay* r, tmk__session* s) {
  tmk__session** pp = &r->by_sid[sid_bucket(s->sid)];
  while (*pp) {
    if (*pp == s) {
      *pp = s->hnext;
      return;
    }
    pp = &(*pp)->hnext;
  }
}

static int session_live(tmk__session* s) {
  pthread_mutex_lock(&s->mu);
  int live = s->info.live;
  pthread_mutex_unlock(&s->mu);
  return live;
}

static const struct sockaddr* session_addr(const tmk__session* s) {
  if (s->conn) return (const struct sockaddr*)&s->conn->peer;
  return s->has_addr ? (const struct sockaddr*)&s->addr : NULL;
}

int tmk__session_evict(tmk_relay* r, const struct sockaddr* src) {
  /* Victims: not recording, no TCP link, not live. Ended ones (BYE, link closed) go before
   * merely idle ones (a target stopped in a debugger is idle, not ended: issue 15 item 8);
   * the oldest first within each. */
  tmk__session* victim = NULL;
  uint32_t at = 0;
  int best = 2;
  pthread_mutex_lock(&r->reg_mu);
  for (uint32_t i = 0; i < r->nsessions && best > 0; i++) {
    tmk__session* c = r->sessions[i];
    if (c->recording || c->conn || session_live(c)) continue;
    if (src) {
      const struct sockaddr* a = session_addr(c);
      if (c->replay || !a || !tmk__same_ip(a, src)) continue;
    }
    int cls = c->replay || c->ended ? 0 : 1;
    if (cls < best) {
      best = cls;
      victim = c;
      at = i;
    }
  }
  if (!victim) {
    pthread_mutex_unlock(&r->reg_mu);
    return TMK_ENOSPC;
  }
  memmove(&r->sessions[at], &r->sessions[at + 1], (r->nsessions - at - 1) * sizeof victim);
  r->nsessions--;
  pthread_mutex_unlock(&r->reg_mu);
  tmk_relay__log(&r->log, TMK_LOG_INFO, "session %s: removed from memory to make room (%s)", victim->id,
           src ? "sessions per source: half of --max-sessions" : "--max-sessions");
  for (tmk__conn* c = r->conns; c; c = c->next) /* none should, but never leave one dangling */
    if (c->session == victim) c->session = NULL;
  if (!victim->replay) unlink_sid(r, victim);
  if (r->ch) tmk__ch_session_final(r->ch, victim); /* history sink: last counters */
  tmk__session_unref(victim);
  return 0;
}

int tmk__session_register(tmk_relay* r, tmk__session* s) {
  pthread_mutex_lock(&r->reg_mu);
  int full = r->nsessions >= r->cfg.max_sessions;
  pthread_mutex_unlock(&r->reg_mu);
  if (full && tmk__session_evict(r, NULL) != 0) return TMK_ENOSPC;
  pthread_mutex_lock(&r->reg_mu);
  if (r->nsessions == r->sessions_cap) {
    uint32_t ncap = r->sessions_cap ? r->sessions_cap * 2 : 16;
    tmk__session** ns = realloc(r->sessions, ncap * sizeof *ns);
    if (!ns) {
      pthread_mutex_unlock(&r->reg_mu);
      return TMK_ENOMEM;
    }
    r->sessions = ns;
    r->sessions_cap = ncap;
  }
  r->sessions[r->nsessions++] = s;
  pthread_mutex_unlock(&r->reg_mu);
  if (!s->replay) {
    uint32_t b = sid_bucket(s->sid);
    s->hnext = r->by_sid[b];
    r->by_sid[b] = s;
  }
  return 0;
}

tmk__session* tmk__session_get(tmk_relay* r, const char* id) {
  tmk__session* found = NULL;
  pthread_mutex_lock(&r->reg_mu);
  for (uint32_t i = 0; i < r->nsessions; i++) {
    if (strcmp(r->sessions[i]->id, id) == 0) {
      found = r->sessions[i];
      tmk__session_ref(found);
      break;
    }
  }
  pthread_mutex_unlock(&r->reg_mu);
  return found;
}

/* ---------------------------------------------------------------------------------------------
 * The apply path (live after reordering, and replay)
 * ------------------------------------------------------------------------------------------- */
static void copy_str(char* dst, size_t cap, const tmk_proto_str* s) {
  size_t n = s->len < cap - 1 ? s->len : cap - 1;
  if (n) memcpy(dst, s->ptr, n); /* an absent HELLO field (§6.1 build/label) has ptr NULL */
  dst[n] = 0;
}


#define PENDING_MAX (8u << 20) /* beyond this the loop waits for the lock rather than drop */

/* The part of applying a packet that touches reader-visible state. Caller holds s->mu. */
/* The type of a packet whose header the caller parsed already (§2: byte 5): a packet is parsed
 * once on its way in, not again at every step. */
static int packet_type(const uint8_t* packet, size_t len) { return len >= 14 ? packet[5] : -1; }

static void apply_locked(tmk__session* s, const uint8_t* packet, size_t len, void* scratch) {
  const int type = packet_type(packet, len);
  if (type == TMK_PKT_DATA) {
    s->info.stats.packets++;
    s->info.stats.bytes += len;
    (void)tmk__store_packet(s->store, packet, len, scratch);
  } else if (type == TMK_PKT_HELLO) {
    tmk_proto_reader rd;
    tmk_proto_hello h;
    if (tmk_proto_open(&rd, packet, len, scratch, TMK_PROTO_MAX_BODY) < 0 ||
        tmk_proto_read_hello(&rd, &h) < 0)
      return;
    tmk_relay_session_info* in = &s->info;
    in->has_hello = 1;
    copy_str(in->program, sizeof in->program, &h.program);
    copy_str(in->platform, sizeof in->platform, &h.platform);
    copy_str(in->arch, sizeof in->arch, &h.arch);
    copy_str(in->agent_version, sizeof in->agent_version, &h.agent_version);
    copy_str(in->build, sizeof in->build, &h.build);
    copy_str(in->label, sizeof in->label, &h.label);
    in->big_endian = h.big_endian;
    in->pointer_size = h.pointer_size;
    in->timer_freq = h.timer_freq;
    in->caps = h.caps;
    tmk__store_set_freq(s->store, h.timer_freq);
  } else if (type == TMK_PKT_BYE) {
    s->info.live = 0;
  }
}

void tmk__session_flush_pending(tmk__session* s, int force) {
  if (!s->pending_head) return;
  if (force) pthread_mutex_lock(&s->mu);
  else if (pthread_mutex_trylock(&s->mu) != 0) return;
  tmk__pending* p = s->pending_head;
  while (p) {
    tmk__pending* next = p->next;
    apply_locked(s, p->data, p->len, s->relay->scratch);
    free(p);
    p = next;
  }
  pthread_mutex_unlock(&s->mu);
  s->pending_head = s->pending_tail = NULL;
  s->pending_bytes = 0;
}

/* A write to the recording failed (disk full, file system gone): the file keeps every chunk
 * written so far and stays readable (RECORDING.md §4); the session goes on without recording. */
static void recording_failed(tmk__session* s, int err) {
  tmk_relay__log(&s->relay->log, TMK_LOG_ERROR, "session %s: writing %s failed (%s); recording stopped, the file "
           "keeps what was written before", s->id, s->rec.path, strerror(err));
  tmk__rec_close(&s->rec);
  s->recording = 0;
  pthread_mutex_lock(&s->mu);
  s->info.recording = 0;
  pthread_mutex_unlock(&s->mu);
}

void tmk__session_apply(tmk__session* s, const uint8_t* packet, size_t len, void* scratch) {
  const int type = packet_type(packet, len); /* the header was checked by the caller */
  if (type != TMK_PKT_DATA && type != TMK_PKT_HELLO && type != TMK_PKT_BYE) return;
  if (s->replay) { /* a worker thread builds it before anyone can read it */
    pthread_mutex_lock(&s->mu);
    apply_locked(s, packet, len, scratch);
    pthread_mutex_unlock(&s->mu);
    return;
  }
  if (type == TMK_PKT_DATA) s->delivered++;
  if (type == TMK_PKT_HELLO) {
    uint8_t* copy = malloc(len);
    if (copy) {
      memcpy(copy, packet, len);
      free(s->hello);
      s->hello = copy;
      s->hello_len = len;
    }
  }
  if (s->recording && tmk__rec_packet(&s->rec, packet, len) < 0) recording_failed(s, errno);
  tmk__session_flush_pending(s, s->pending_bytes > PENDING_MAX);
  if (!s->pending_head && pthread_mutex_trylock(&s->mu) == 0) {
    apply_locked(s, packet, len, scratch);
    pthread_mutex_unlock(&s->mu);
    return;
  }
  tmk__pending* p = malloc(sizeof *p + len);
  if (!p) { /* no memory to queue: wait for the lock instead of losing the packet */
    tmk__session_flush_pending(s, 1);
    pthread_mutex_lock(&s->mu);
    apply_locked(s, packet, len, scratch);
    pthread_mutex_unlock(&s->mu);
    return;
  }
  p->next = NULL;
  p->len = len;
  memcpy(p->data, packet, len);
  if (s->pending_tail) s->pending_tail->next = p;
  else s->pending_head = p;
  s->pending_tail = p;
  s->pending_bytes += len;
}

void tmk__session_sync_stats(tmk__session* s) {
  if (pthread_mutex_trylock(&s->mu) != 0) return; /* next tick */
  s->info.stats.lost = s->ro.lost;
  s->info.stats.duplicated = s->ro.duplicated + s->ro.stale;
  s->info.stats.reordered = s->ro.reordered;
  s->info.stats.late = s->ro.late;
  s->info.stats.spoofed = s->spoofed + s->ro.refused;
  pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------------------------------------
 * Recording
 * ------------------------------------------------------------------------------------------- */
static int ensure_dir(const char* dir) {
  struct stat st;
  if (stat(dir, &st) == 0) return S_ISDIR(st.st_mode) ? 0 : -1;
  return mkdir(dir, 0755);
}

int tmk__session_record_start(tmk__session* s, char* path_out, size_t cap, char* err,
                              size_t ecap) {
  tmk_relay* r = s->relay;
  if (s->replay) {
    snprintf(err, ecap, "session %s is a recording; only live sessions can be recorded", s->id);
    return TMK_ESTATE;
  }
  if (s->recording) {
    snprintf(err, ecap, "session %s is already being recorded to %s", s->id, s->rec.path);
    return TMK_ESTATE;
  }
  if (ensure_dir(r->cfg.data_dir) != 0) {
    snprintf(err, ecap, "data directory %s cannot be created: %s", r->cfg.data_dir,
             strerror(errno));
    return TMK_EIO;
  }
  char stamp[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  char path[512];
  tmk__rec_session rs;
  memset(&rs, 0, sizeof rs);
  rs.session_id = s->sid;
  pthread_mutex_lock(&s->mu);
  rs.created_unix_ns = s->info.created_unix_ns;
  snprintf(rs.transport, sizeof rs.transport, "%s", s->info.transport);
  snprintf(rs.source, sizeof rs.source, "%s", s->info.source);
  pthread_mutex_unlock(&s->mu);
  snprintf(rs.relay_version, sizeof rs.relay_version, "%s", TMK_RELAY_VERSION);
  int rc = TMK_EIO;
  for (int k = 0; k < 100 && rc != 0; k++) {
    if (k == 0) snprintf(path, sizeof path, "%s/%s-%s.tmkr", r->cfg.data_dir, s->id, stamp);
    else snprintf(path, sizeof path, "%s/%s-%s-%d.tmkr", r->cfg.data_dir, s->id, stamp, k);
    rc = tmk__rec_create(&s->rec, path, &rs);
    if (rc != 0 && errno != EEXIST) break;
  }
  if (rc != 0) {
    snprintf(err, ecap, "cannot create a recording in %s: %s", r->cfg.data_dir, strerror(errno));
    return TMK_EIO;
  }
  s->recording = 1;
  if (s->hello) tmk__rec_packet(&s->rec, s->hello, s->hello_len);
  pthread_mutex_lock(&s->mu);
  s->info.recording = 1;
  snprintf(s->info.recording_path, sizeof s->info.recording_path, "%s", path);
  pthread_mutex_unlock(&s->mu);
  if (path_out) snprintf(path_out, cap, "%s", path);
  tmk_relay__log(&r->log, TMK_LOG_INFO, "session %s: recording to %s", s->id, path);
  return 0;
}

static void write_stats(tmk__session* s) {
  tmk__rec_stats st = {s->ro.lost, s->ro.duplicated + s->ro.stale, s->ro.reordered, s->ro.late,
                       0, 0};
  pthread_mutex_lock(&s->mu);
  st.spoofed = s->spoofed + s->ro.refused;
  st.malformed_unparsed = s->info.stats.malformed;
  pthread_mutex_unlock(&s->mu);
  tmk__rec_write_stats(&s->rec, &st);
}

int tmk__session_record_stop(tmk__session* s, char* err, size_t ecap) {
  if (!s->recording) {
    snprintf(err, ecap, "session %s is not being recorded", s->id);
    return TMK_ESTATE;
  }
  write_stats(s);
  int rc = tmk__rec_close(&s->rec);
  s->recording = 0;
  pthread_mutex_lock(&s->mu);
  s->info.recording = 0;
  pthread_mutex_unlock(&s->mu);
  if (rc) {
    snprintf(err, ecap, "closing %s failed: %s", s->rec.path, strerror(errno));
    tmk_relay__log(&s->relay->log, TMK_LOG_ERROR, "session %s: %s", s->id, err);
    return TMK_EIO;
  }
  tmk_relay__log(&s->relay->log, TMK_LOG_INFO, "session %s: recording %s closed (%llu packets)", s->id, s->rec.path,
           (unsigned long long)s->rec.packets);
  return 0;
}

typedef struct sync_req {
  uv_fs_t req;
  uv_file fd;
} sync_req;

static void sync_done(uv_fs_t* req) {
  sync_req* sr = (sync_req*)req;
  uv_fs_req_cleanup(req);
  close(sr->fd);
  free(sr);
}

/* fdatasync on the libuv thread pool, on a dup of the descriptor: the loop never waits for the
 * disk, and closing the recording meanwhile cannot pull the descriptor from under the sync. */
static void sync_async(tmk_relay* r, tmk__session* s) {
  sync_req* sr = malloc(sizeof *sr);
  if (!sr) return;
  sr->fd = dup(s->rec.fd);
  if (sr->fd < 0 || uv_fs_fdatasync(r->loop, &sr->req, sr->fd, sync_done) != 0) {
    if (sr->fd >= 0) close(sr->fd);
    free(sr);
  }
}

void tmk__sessions_periodic(tmk_relay* r, uint64_t now_ms, int sync) {
  /* Only the loop changes r->sessions, so the loop reads it without the registry lock. */
  for (uint32_t i = 0; i < r->nsessions; i++) {
    tmk__session* s = r->sessions[i];
    if (s->replay) continue;
    if (s->recording) {
      if (sync) write_stats(s);
      if (tmk__rec_flush(&s->rec, 0) < 0) {
        recording_failed(s, errno);
      } else if (sync) {
        sync_async(r, s);
      }
    }
    if (!s->conn && now_ms - s->last_packet_ms > r->cfg.session_idle_ms) {
      pthread_mutex_lock(&s->mu);
      if (s->info.live) {
        s->info.live = 0;
        tmk_relay__log(&r->log, TMK_LOG_INFO, "session %s: idle for %.1f s, no longer live",
                       s->id, r->cfg.session_idle_ms / 1000.0);
      }
      pthread_mutex_unlock(&s->mu);
    }
  }
}

static void deliver_cb(void* ud, const uint8_t* p, size_t len, uint64_t seq) {
  (void)seq;
  tmk__session* s = ud;
  tmk__session_apply(s, p, len, s->relay->scratch);
}

void tmk__sessions_shutdown(tmk_relay* r) {
  for (uint32_t i = 0; i < r->nsessions; i++) {
    tmk__session* s = r->sessions[i];
    if (s->replay) continue;
    tmk__reorder_tick(&s->ro, tmk__now_ms(), 1, deliver_cb, s);
    tmk__session_flush_pending(s, 1);
    tmk__session_sync_stats(s);
    if (s->recording) {
      char err[256];
      tmk__session_record_stop(s, err, sizeof err);
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * Opening files
 * ------------------------------------------------------------------------------------------- */
static int valid_name(const char* name) {
  size_t n = strlen(name);
  if (n == 0 || n > 200 || name[0] == '.') return 0;
  for (size_t i = 0; i < n; i++)
    if (name[i] == '/' || name[i] == '\\' || (unsigned char)name[i] < 0x20) return 0;
  return 1;
}

typedef struct replay_ctx {
  tmk__session* s;
  void* scratch;
  int first;
} replay_ctx;

static int replay_packet(void* ud, const uint8_t* p, size_t len) {
  replay_ctx* c = ud;
  tmk_proto_header h;
  if (tmk_proto_parse_header(p, len, &h) < 0) {
    pthread_mutex_lock(&c->s->mu);
    c->s->info.stats.malformed++;
    pthread_mutex_unlock(&c->s->mu);
    return 0;
  }
  if (c->first) {
    c->first = 0;
    c->s->sid = h.session_id;
    c->s->info.session_id = h.session_id;
  }
  tmk__session_apply(c->s, p, len, c->scratch);
  return 0;
}

int tmk__session_replay_file(tmk_relay* r, const char* name, tmk__session** out, char* err,
                             size_t ecap) {
  *out = NULL;
  if (!valid_name(name)) {
    snprintf(err, ecap, "'%s' is not a file name in the data directory", name);
    return TMK_EINVAL;
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", r->cfg.data_dir, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, ecap, "cannot open %s: %s", path, strerror(errno));
    return TMK_ENOTFOUND;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
    close(fd);
    snprintf(err, ecap, "%s is not a telemark recording (too small)", path);
    return TMK_ECORRUPT;
  }
  size_t len = (size_t)st.st_size;
  uint8_t* data = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (data == MAP_FAILED) {
    snprintf(err, ecap, "cannot map %s: %s", path, strerror(errno));
    return TMK_EIO;
  }
  char id[TMK_RELAY_ID_MAX];
  snprintf(id, sizeof id, "%s", name);
  char* dot = strrchr(id, '.');
  if (dot && dot != id) *dot = 0;
  tmk__session* s = tmk__session_new(r, 0, id, 1);
  replay_ctx c = {s, malloc(TMK_PROTO_MAX_BODY), 1};
  if (!s || !c.scratch) {
    munmap(data, len);
    free(c.scratch);
    if (s) tmk__session_unref(s);
    snprintf(err, ecap, "out of memory opening %s", path);
    return TMK_ENOMEM;
  }
  tmk__rec_read_result res;
  int rc = tmk__rec_read(data, len, replay_packet, &c, &res);
  munmap(data, len);
  free(c.scratch);
  if (rc < 0) {
    tmk__session_unref(s);
    snprintf(err, ecap, "%s is neither a relay recording (TMKREC01) nor an agent file (TMKFILE1)",
             path);
    return TMK_ECORRUPT;
  }
  pthread_mutex_lock(&s->mu);
  snprintf(s->info.transport, sizeof s->info.transport, "file");
  snprintf(s->info.source, sizeof s->info.source, "%s", name);
  if (res.have_session) {
    s->sid = res.session.session_id;
    s->info.session_id = res.session.session_id;
    s->info.created_unix_ns = res.session.created_unix_ns;
  }
  if (res.have_stats) {
    s->info.stats.lost = res.stats.lost;
    s->info.stats.duplicated = res.stats.duplicated;
    s->info.stats.reordered = res.stats.reordered;
    s->info.stats.late = res.stats.late;
    s->info.stats.spoofed = res.stats.spoofed;
    s->info.stats.malformed += res.stats.malformed_unparsed;
  }
  s->info.live = 0;
  pthread_mutex_unlock(&s->mu);
  if (res.tail_error)
    tmk_relay__log(&r->log, TMK_LOG_WARN,
             "%s: torn or corrupt tail (%s) after %llu good bytes; %llu bytes skipped", path,
             tmk_strerror(res.tail_error), (unsigned long long)res.valid_bytes,
             (unsigned long long)res.torn_bytes);
  else if (res.clean_end && res.torn_bytes) /* nothing follows END (RECORDING.md §3.4) */
    tmk_relay__log(&r->log, TMK_LOG_WARN, "%s: %llu bytes after the END chunk ignored", path,
                   (unsigned long long)res.torn_bytes);
  tmk_relay__log(&r->log, TMK_LOG_INFO, "opened %s: %llu packets%s", path, (unsigned long long)res.packets,
           res.agent_file ? " (agent file)" : res.clean_end ? "" : " (no clean end)");
  *out = s;
  return 0;
}

int tmk_relay_recordings(tmk_relay* r, tmk_relay_recording_info* out, size_t cap) {
  DIR* d = opendir(r->cfg.data_dir);
  if (!d) return 0;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (!valid_name(e->d_name)) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", r->cfg.data_dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    char magic[8];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t got = read(fd, magic, 8);
    close(fd);
    if (got != 8) continue;
    int agent = memcmp(magic, TMK__AGENT_FILE_MAGIC, 8) == 0;
    if (!agent && memcmp(magic, TMK__REC_MAGIC, 8) != 0) continue;
    if ((size_t)n < cap) {
      tmk_relay_recording_info* ri = &out[n];
      memset(ri, 0, sizeof *ri);
      snprintf(ri->name, sizeof ri->name, "%s", e->d_name);
      ri->size = (uint64_t)st.st_size;
      ri->mtime_unix_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
      ri->agent_file = agent;
      pthread_mutex_lock(&r->reg_mu);
      for (uint32_t i = 0; i < r->nsessions; i++) {
        tmk__session* s = r->sessions[i];
        pthread_mutex_lock(&s->mu);
        if (s->info.recording && strcmp(s->info.recording_path, path) == 0) ri->open = 1;
        pthread_mutex_unlock(&s->mu);
      }
      pthread_mutex_unlock(&r->reg_mu);
    }
    n++;
  }
  closedir(d);
  return n;
}

/* ---------------------------------------------------------------------------------------------
 * Thread-safe reads (tmk_relay.h)
 * ------------------------------------------------------------------------------------------- */
static void fill_info(tmk__session* s, tmk_relay_session_info* out) {
  pthread_mutex_lock(&s->mu);
  *out = s->info;
  tmk__store_fill_info(s->store, out);
  pthread_mutex_unlock(&s->mu);
}

int tmk_relay_sessions(tmk_relay* r, tmk_relay_session_info* out, size_t cap) {
  pthread_mutex_lock(&r->reg_mu);
  int n = (int)r->nsessions;
  for (uint32_t i = 0; i < r->nsessions && i < cap; i++) fill_info(r->sessions[i], &out[i]);
  pthread_mutex_unlock(&r->reg_mu);
  return n;
}

int tmk_relay_session(tmk_relay* r, const char* id, tmk_relay_session_info* out) {
  tmk__session* s = tmk__session_get(r, id);
  if (!s) return TMK_ENOTFOUND;
  fill_info(s, out);
  tmk__session_unref(s);
  return 0;
}

#define WITH_SESSION(expr)                   \
  tmk__session* s = tmk__session_get(r, id); \
  if (!s) return TMK_ENOTFOUND;              \
  pthread_mutex_lock(&s->mu);                \
  int rc = (expr);                           \
  pthread_mutex_unlock(&s->mu);              \
  tmk__session_unref(s);                     \
  return rc

/* Zone and event queries run in slices (the session lock is held for one slice, the caller's
 * callback runs without it) and at most TMK__QUERY_SLOTS at a time: however many heavy queries
 * the API gets, the loop thread gets the lock and a CPU when it needs them (issue 15 item 7). */
#define SLICE_ZONES 4096
#define SLICE_TEXT 65536

static void query_slot_take(tmk_relay* r) {
  pthread_mutex_lock(&r->query_mu);
  while (r->queries_running >= TMK__QUERY_SLOTS) pthread_cond_wait(&r->query_cv, &r->query_mu);
  r->queries_running++;
  pthread_mutex_unlock(&r->query_mu);
}

static void query_slot_give(tmk_relay* r) {
  pthread_mutex_lock(&r->query_mu);
  r->queries_running--;
  pthread_cond_signal(&r->query_cv);
  pthread_mutex_unlock(&r->query_mu);
}

int tmk_relay_query_zones(tmk_relay* r, const char* id, const tmk_relay_query* q,
                          tmk_relay_zone_fn fn, void* ud) {
  tmk__session* s = tmk__session_get(r, id);
  if (!s) return TMK_ENOTFOUND;
  tmk_relay_zone* buf = malloc(SLICE_ZONES * sizeof *buf);
  if (!buf) {
    tmk__session_unref(s);
    return TMK_ENOMEM;
  }
  size_t limit = q->limit ? q->limit : 100000, n = 0;
  tmk__store_cursor cur;
  memset(&cur, 0, sizeof cur);
  int stop = 0;
  query_slot_take(r);
  while (!stop && !cur.done && n < limit) {
    size_t want = limit - n < SLICE_ZONES ? limit - n : SLICE_ZONES;
    pthread_mutex_lock(&s->mu);
    int k = tmk__store_zones_slice(s->store, q, &cur, buf, want);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k && !stop; i++) {
      n++;
      stop = fn(ud, &buf[i]) != 0;
    }
  }
  query_slot_give(r);
  free(buf);
  tmk__session_unref(s);
  return (int)n;
}

int tmk_relay_query_events(tmk_relay* r, const char* id, const tmk_relay_query* q,
                           unsigned type_mask, tmk_relay_event_fn fn, void* ud) {
  tmk__session* s = tmk__session_get(r, id);
  if (!s) return TMK_ENOTFOUND;
  tmk_relay_event* buf = malloc(SLICE_ZONES * sizeof *buf);
  char* text = malloc(SLICE_TEXT);
  if (!buf || !text) {
    free(buf);
    free(text);
    tmk__session_unref(s);
    return TMK_ENOMEM;
  }
  size_t limit = q->limit ? q->limit : 100000, n = 0;
  tmk__store_cursor cur;
  memset(&cur, 0, sizeof cur);
  int stop = 0;
  query_slot_take(r);
  while (!stop && !cur.done && n < limit) {
    size_t want = limit - n < SLICE_ZONES ? limit - n : SLICE_ZONES;
    pthread_mutex_lock(&s->mu);
    int k = tmk__store_events_slice(s->store, q, type_mask, &cur, buf, want, text, SLICE_TEXT);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k && !stop; i++) {
      n++;
      stop = fn(ud, &buf[i]) != 0;
    }
  }
  query_slot_give(r);
  free(text);
  free(buf);
  tmk__session_unref(s);
  return (int)n;
}

int tmk_relay_query_sites(tmk_relay* r, const char* id, tmk_relay_site_fn fn, void* ud) {
  WITH_SESSION(tmk__store_sites(s->store, fn, ud));
}

int tmk_relay_query_threads(tmk_relay* r, const char* id, tmk_relay_thread_fn fn, void* ud) {
  WITH_SESSION(tmk__store_threads(s->store, fn, ud));
}

int tmk_relay_query_teams(tmk_relay* r, const char* id, tmk_relay_thread_fn fn, void* ud) {
  WITH_SESSION(tmk__store_teams(s->store, fn, ud));
}

int tmk_relay_live_attach(tmk_relay* r, const char* id, uint64_t* cursor) {
  WITH_SESSION(tmk__store_live_attach(s->store, cursor));
}

int tmk_relay_live_attach_cut(tmk_relay* r, const char* id, uint64_t* cursor, tmk_relay_cut** cut) {
  *cut = NULL;
  tmk__session* s = tmk__session_get(r, id);
  if (!s) return TMK_ENOTFOUND;
  pthread_mutex_lock(&s->mu); /* the loop stores under it: nothing comes between the two */
  int rc = tmk__store_live_attach(s->store, cursor);
  if (rc == 0) *cut = tmk__store_cut(s->store);
  pthread_mutex_unlock(&s->mu);
  tmk__session_unref(s);
  return rc;
}

void tmk_relay_live_detach(tmk_relay* r, const char* id) {
  tmk__session* s = tmk__session_get(r, id);
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  tmk__store_live_detach(s->store);
  pthread_mutex_unlock(&s->mu);
  tmk__session_unref(s);
}

int tmk_relay_live_read(tmk_relay* r, const char* id, uint64_t* cursor, tmk_relay_live_item* out,
                        size_t cap, uint64_t* skipped) {
  WITH_SESSION(tmk__store_live_read(s->store, cursor, out, cap, skipped));
}

void tmk_relay_set_data_listener(tmk_relay* r, tmk_relay_data_fn fn, void* ud) {
  pthread_mutex_lock(&r->reg_mu);
  r->data_fn = fn;
  r->data_ud = ud;
  pthread_mutex_unlock(&r->reg_mu);
}
