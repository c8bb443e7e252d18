/* relay_control.c — commands from the web side to the loop (a mutex-protected queue woken with
 * uv_async_send, replies through a condition variable), and the CONTROL packets that carry a new
 * severity level and verbosity mask to an agent (TCP, or UDP repeated a few times, §6.4). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "relay_internal.h"

enum { CMD_RECORD = 1, CMD_CONTROL = 2, CMD_OPEN = 3 };

struct tmk__cmd {
  int type;
  tmk_relay* relay;
  char id[TMK_RELAY_ID_MAX];
  char name[256];
  int on, level;
  uint32_t mask;
  /* reply */
  int rc;
  char err[256];
  char out[512];
  int done, abandoned;
  pthread_cond_t cv;
  uv_work_t work;
  tmk__session* opened;
  tmk__cmd* next;
};

/* ---------------------------------------------------------------------------------------------
 * Caller side (any thread)
 * ------------------------------------------------------------------------------------------- */
static tmk__cmd* cmd_new(tmk_relay* r, int type, const char* id) {
  tmk__cmd* c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->type = type;
  c->relay = r;
  if (id) snprintf(c->id, sizeof c->id, "%s", id);
  pthread_cond_init(&c->cv, NULL);
  return c;
}

static void cmd_free(tmk__cmd* c) {
  pthread_cond_destroy(&c->cv);
  free(c);
}

/* Queues the command, wakes the loop and waits for the reply. Copies the reply text into
 * out/err and frees the command, except on timeout, when the loop frees it later. Returns the
 * command's rc (TMK_EAGAIN on timeout). The caller must not touch `c` afterwards. */
static int cmd_call(tmk_relay* r, tmk__cmd* c, int timeout_s, char* out, size_t ocap, char* err,
                    size_t ecap) {
  pthread_mutex_lock(&r->cmd_mu);
  if (r->stopping) {
    pthread_mutex_unlock(&r->cmd_mu);
    if (err && ecap) snprintf(err, ecap, "the relay is shutting down");
    cmd_free(c);
    return TMK_ESTATE;
  }
  if (r->cmd_tail) r->cmd_tail->next = c;
  else r->cmd_head = c;
  r->cmd_tail = c;
  uv_async_send(&r->cmd_async);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_s;
  while (!c->done) {
    if (pthread_cond_timedwait(&c->cv, &r->cmd_mu, &deadline) == ETIMEDOUT && !c->done) {
      c->abandoned = 1; /* the loop frees it when it gets there */
      pthread_mutex_unlock(&r->cmd_mu);
      if (err && ecap) snprintf(err, ecap, "the relay did not answer in %d s", timeout_s);
      return TMK_EAGAIN;
    }
  }
  pthread_mutex_unlock(&r->cmd_mu);
  int rc = c->rc;
  if (err && ecap) snprintf(err, ecap, "%s", c->err);
  if (out && ocap) snprintf(out, ocap, "%s", rc == 0 ? c->out : "");
  cmd_free(c);
  return rc;
}

int tmk_relay_record(tmk_relay* r, const char* id, int on, char* path_out, size_t path_cap,
                     char* err, size_t err_cap) {
  tmk__cmd* c = cmd_new(r, CMD_RECORD, id);
  if (!c) return TMK_ENOMEM;
  c->on = on;
  return cmd_call(r, c, 5, path_out, path_cap, err, err_cap);
}

int tmk_relay_control(tmk_relay* r, const char* id, int level, uint32_t mask, char* err,
                      size_t err_cap) {
  if (level < 0 || level >= TMK_SEV_COUNT) {
    if (err && err_cap)
      snprintf(err, err_cap, "level must be 0..5 (critical..trace), got %d", level);
    return TMK_ERANGE;
  }
  tmk__cmd* c = cmd_new(r, CMD_CONTROL, id);
  if (!c) return TMK_ENOMEM;
  c->level = level;
  c->mask = mask;
  return cmd_call(r, c, 5, NULL, 0, err, err_cap);
}

int tmk_relay_open_recording(tmk_relay* r, const char* name, char* id_out, size_t id_cap,
                             char* err, size_t err_cap) {
  tmk__cmd* c = cmd_new(r, CMD_OPEN, NULL);
  if (!c) return TMK_ENOMEM;
  snprintf(c->name, sizeof c->name, "%s", name);
  return cmd_call(r, c, 120, id_out, id_cap, err, err_cap);
}

/* ---------------------------------------------------------------------------------------------
 * Loop side
 * ------------------------------------------------------------------------------------------- */
static void cmd_finish(tmk_relay* r, tmk__cmd* c) {
  pthread_mutex_lock(&r->cmd_mu);
  if (c->abandoned) {
    pthread_mutex_unlock(&r->cmd_mu);
    if (c->opened) tmk__session_unref(c->opened);
    cmd_free(c);
    return;
  }
  c->done = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&r->cmd_mu);
}

static tmk__session* loop_session(tmk_relay* r, tmk__cmd* c) {
  for (uint32_t i = 0; i < r->nsessions; i++)
    if (strcmp(r->sessions[i]->id, c->id) == 0) return r->sessions[i];
  snprintf(c->err, sizeof c->err, "no session '%s' (GET /api/sessions lists them)", c->id);
  c->rc = TMK_ENOTFOUND;
  return NULL;
}

static void do_control(tmk_relay* r, tmk__cmd* c) {
  tmk__session* s = loop_session(r, c);
  if (!s) return;
  if (s->replay || (!s->conn && !s->has_addr) || !s->info.live) {
    snprintf(c->err, sizeof c->err, "session %s is not live; CONTROL needs a connected agent",
             s->id);
    c->rc = TMK_ESTATE;
    return;
  }
  tmk_proto_control ctl;
  ctl.seq = ++s->control_seq;
  ctl.severity = (uint8_t)c->level;
  ctl.verbosity = c->mask;
  int n = tmk_proto_encode_control(s->control_packet, sizeof s->control_packet - TMK_PROTO_MAC_LEN,
                                   s->sid, &ctl);
  if (n > 0) n = tmk__auth_seal(s, s->control_packet, (size_t)n, sizeof s->control_packet);
  if (n < 0) {
    snprintf(c->err, sizeof c->err, "encoding CONTROL failed: %s", tmk_strerror(n));
    c->rc = n;
    return;
  }
  s->control_len = (size_t)n;
  int rc = tmk__ingest_send(r, s, s->control_packet, s->control_len);
  if (rc < 0) {
    snprintf(c->err, sizeof c->err, "sending CONTROL to %s failed: %s", s->id, tmk_strerror(rc));
    c->rc = rc;
    return;
  }
  /* UDP may lose it: repeat a few times; the change number makes repeats harmless (§6.4). */
  s->control_left = s->conn ? 0 : TMK__CONTROL_REPEATS - 1;
  s->control_next_ms = uv_now(r->loop) + TMK__CONTROL_REPEAT_MS;
  pthread_mutex_lock(&s->mu);
  s->info.control_level = c->level;
  s->info.control_mask = c->mask;
  pthread_mutex_unlock(&s->mu);
  tmk_relay__log(&r->log, TMK_LOG_INFO, "session %s: CONTROL #%u level %s mask 0x%08x over %s", s->id,
           ctl.seq, tmk_proto_severity_name((unsigned)c->level), c->mask,
           s->conn ? "tcp" : "udp");
  c->rc = 0;
}

static void open_work(uv_work_t* w) {
  tmk__cmd* c = w->data;
  c->rc = tmk__session_replay_file(c->relay, c->name, &c->opened, c->err, sizeof c->err);
}

static void open_done(uv_work_t* w, int status) {
  tmk__cmd* c = w->data;
  tmk_relay* r = c->relay;
  (void)status;
  if (c->rc == 0 && c->opened) {
    tmk__session* existing = NULL;
    for (uint32_t i = 0; i < r->nsessions; i++)
      if (strcmp(r->sessions[i]->id, c->opened->id) == 0) existing = r->sessions[i];
    if (existing) { /* already open: keep the first, answer with its id */
      snprintf(c->out, sizeof c->out, "%s", existing->id);
      tmk__session_unref(c->opened);
    } else if (tmk__session_register(r, c->opened) != 0) {
      tmk__session_unref(c->opened);
      snprintf(c->err, sizeof c->err,
               "no room for another session (--max-sessions %u, all live or recording)",
               r->cfg.max_sessions);
      c->rc = TMK_ENOSPC;
    } else {
      snprintf(c->out, sizeof c->out, "%s", c->opened->id);
    }
    c->opened = NULL;
  }
  cmd_finish(r, c);
}

static void run_cmd(tmk_relay* r, tmk__cmd* c) {
  c->rc = 0;
  if (c->type == CMD_RECORD) {
    tmk__session* s = loop_session(r, c);
    if (s)
      c->rc = c->on ? tmk__session_record_start(s, c->out, sizeof c->out, c->err, sizeof c->err)
                    : tmk__session_record_stop(s, c->err, sizeof c->err);
  } else if (c->type == CMD_CONTROL) {
    do_control(r, c);
  } else if (c->type == CMD_OPEN) {
    c->work.data = c;
    if (uv_queue_work(r->loop, &c->work, open_work, open_done) == 0) return;
    snprintf(c->err, sizeof c->err, "cannot start a worker to open %.200s", c->name);
    c->rc = TMK_EIO;
  }
  cmd_finish(r, c);
}

static tmk__cmd* take_all(tmk_relay* r) {
  pthread_mutex_lock(&r->cmd_mu);
  tmk__cmd* c = r->cmd_head;
  r->cmd_head = r->cmd_tail = NULL;
  pthread_mutex_unlock(&r->cmd_mu);
  return c;
}

static void on_async(uv_async_t* a) {
  tmk_relay* r = a->data;
  tmk__cmd* c = take_all(r);
  while (c) {
    tmk__cmd* next = c->next;
    run_cmd(r, c);
    c = next;
  }
}

int tmk__control_init(tmk_relay* r) {
  r->cmd_async.data = r;
  return uv_async_init(r->loop, &r->cmd_async, on_async);
}

void tmk__control_drain(tmk_relay* r) {
  pthread_mutex_lock(&r->cmd_mu);
  r->stopping = 1;
  pthread_mutex_unlock(&r->cmd_mu);
  tmk__cmd* c = take_all(r);
  while (c) {
    tmk__cmd* next = c->next;
    c->rc = TMK_ESTATE;
    snprintf(c->err, sizeof c->err, "the relay is shutting down");
    cmd_finish(r, c);
    c = next;
  }
}

void tmk__control_close(tmk_relay* r) { uv_close((uv_handle_t*)&r->cmd_async, NULL); }

void tmk__control_tick(tmk_relay* r, uint64_t now_ms) {
  for (uint32_t i = 0; i < r->nsessions; i++) {
    tmk__session* s = r->sessions[i];
    if (s->control_left <= 0 || now_ms < s->control_next_ms) continue;
    tmk__ingest_send(r, s, s->control_packet, s->control_len);
    s->control_left--;
    s->control_next_ms = now_ms + TMK__CONTROL_REPEAT_MS;
  }
}
