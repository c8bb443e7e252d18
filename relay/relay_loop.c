/* relay_loop.c — the relay object and its loop: tmk_relay_create turns a desc into a relay with
 * bound sockets and a running HTTP server, tmk_relay_run drives ingest, ticks and commands on
 * one libuv loop until tmk_relay_stop, tmk_relay_get_stats sums the counters. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "relay_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Desc -> configuration
 * ------------------------------------------------------------------------------------------- */
static int copy_str(char* dst, size_t cap, const char* src, const char* dflt) {
  const char* s = src ? src : dflt;
  if (strlen(s) >= cap) return TMK_EINVAL;
  memcpy(dst, s, strlen(s) + 1);
  return 0;
}

static int config_from_desc(const tmk_relay_desc* d, tmk_relay_config* c) {
  memset(c, 0, sizeof *c);
  if (copy_str(c->listen_host, sizeof c->listen_host, d->listen_host, "127.0.0.1") ||
      copy_str(c->http_host, sizeof c->http_host, d->http_host, "127.0.0.1") ||
      copy_str(c->data_dir, sizeof c->data_dir, d->data_dir, "./telemark-data"))
    return TMK_EINVAL;
  if (d->listen_port < 0 || d->listen_port > 65535 || d->http_port < 0 || d->http_port > 65535)
    return TMK_EINVAL;
  c->listen_port = d->listen_port;
  c->http_port = d->http_host ? d->http_port : -1;
  c->record_all = d->record_all != 0;
  c->max_sessions = d->max_sessions ? d->max_sessions : 64;
  c->session_memory = d->session_memory ? d->session_memory : (size_t)256 << 20;
  c->reorder_packets = d->reorder_packets ? d->reorder_packets : 256;
  c->reorder_ms = d->reorder_ms ? d->reorder_ms : 100;
  if (c->reorder_packets < 2 || c->reorder_packets > 65536 || c->reorder_ms > 60000)
    return TMK_EINVAL;
  c->stats_interval_ms = d->stats_interval_ms ? d->stats_interval_ms : 10000;
  c->session_idle_ms = d->session_idle_ms ? d->session_idle_ms : 10000;
  if (copy_str(c->clickhouse_url, sizeof c->clickhouse_url, d->clickhouse.url, ""))
    return TMK_EINVAL;
  if (d->clickhouse.spill_dir) {
    if (copy_str(c->clickhouse_spill_dir, sizeof c->clickhouse_spill_dir, d->clickhouse.spill_dir, ""))
      return TMK_EINVAL;
  } else if ((size_t)snprintf(c->clickhouse_spill_dir, sizeof c->clickhouse_spill_dir,
                              "%s/clickhouse-spill", c->data_dir) >= sizeof c->clickhouse_spill_dir) {
    return TMK_EINVAL;
  }
  c->clickhouse_spill_max = d->clickhouse.spill_max;
  c->clickhouse_memory_max = d->clickhouse.memory_max;
  if (d->clickhouse.senders > TMK__CH_SENDERS_MAX) return TMK_EINVAL;
  c->clickhouse_senders = d->clickhouse.senders;
  c->udp_queue_bytes = d->udp_queue_bytes ? d->udp_queue_bytes : TMK__UDP_QUEUE_DEFAULT;
  if (c->udp_queue_bytes < TMK__UDP_QUEUE_MIN) return TMK_EINVAL;
  c->ingest_nice = d->ingest_nice ? d->ingest_nice : TMK__INGEST_NICE_DEFAULT;
  if (c->ingest_nice < -1 || c->ingest_nice > 19) return TMK_EINVAL;
  for (int i = 0; i < TMK_RELAY_MAX_HOOKS; i++) {
    c->hook_fn[i] = d->http_hooks[i].fn;
    c->hook_ud[i] = d->http_hooks[i].ud;
  }
  if (d->nkeys > TMK_RELAY_MAX_KEYS || (d->nkeys && !d->keys)) return -1;
  for (uint32_t i = 0; i < d->nkeys; i++) {
    const char* prog = d->keys[i].program;
    if (!memchr(prog, 0, TMK_RELAY_KEY_PROGRAM_MAX) || !prog[0]) return -1;
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(d->keys[j].program, prog) == 0) return -1; /* one key per program */
    c->keys[i] = d->keys[i];
  }
  c->nkeys = d->nkeys;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Counters
 * ------------------------------------------------------------------------------------------- */
void tmk_relay_get_stats(tmk_relay* r, tmk_relay_totals* out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&r->reg_mu);
  for (uint32_t i = 0; i < r->nsessions; i++) {
    tmk__session* s = r->sessions[i];
    pthread_mutex_lock(&s->mu);
    tmk_relay_session_info info = s->info;
    tmk__store_fill_info(s->store, &info);
    pthread_mutex_unlock(&s->mu);
    const tmk_relay_stats* a = &info.stats;
    tmk_relay_stats* t = &out->sum;
#define ADD(f) t->f += a->f;
    ADD(packets) ADD(records) ADD(bytes) ADD(zones) ADD(lost) ADD(duplicated) ADD(reordered)
    ADD(late) ADD(malformed) ADD(dropped_by_agent) ADD(spoofed) ADD(evicted) ADD(mem_bytes)
    ADD(unresolved_sites) ADD(orphans)
#undef ADD
    out->sessions++;
    out->live_sessions += info.live ? 1u : 0u;
  }
  pthread_mutex_unlock(&r->reg_mu);
  out->garbage = atomic_load(&r->garbage);
  tmk__rxq_counters q;
  tmk__udp_rx_counters(r->udp_rx, &q);
  out->udp_queue_drops = q.drops;
  out->udp_queue_peak = q.peak;
  out->rx_cpu_ns = q.cpu_ns;
  out->ingest_cpu_ns = q.cpu_ns + atomic_load(&r->loop_cpu_ns);
  tmk__populate_stats(&out->populated_bytes, &out->populate_cpu_ns);
  tmk__pool_stats(&out->pool_bytes, &out->pool_reused_bytes);
  tmk__pages_counters pc;
  tmk__pages_stats(&pc);
  out->populated_huge_bytes = pc.huge_bytes;
  out->rejected_sessions = atomic_load(&r->rejected_sessions);
  out->unauthenticated = atomic_load(&r->unauthenticated);
  out->bad_mac = atomic_load(&r->bad_mac);
}

int tmk_relay_listen_port(const tmk_relay* r) { return r->bound_port; }
int tmk_relay_http_port(const tmk_relay* r) { return r->http ? r->http_port_bound : 0; }

static void stats_line(tmk_relay* r, uint64_t now) {
  uint64_t records = 0, lost = 0, packets = 0;
  uint32_t live = 0;
  for (uint32_t i = 0; i < r->nsessions; i++) {
    tmk__session* s = r->sessions[i];
    if (s->replay) continue;
    /* A reader holds the lock for one query slice at most; rather than wait for it, the line
     * waits for the next tick (and only after a second of that for the lock: issue 15 item 7). */
    if (now - r->last_stats_ms < r->cfg.stats_interval_ms + 1000) {
      if (pthread_mutex_trylock(&s->mu) != 0) return;
    } else {
      pthread_mutex_lock(&s->mu);
    }
    tmk_relay_session_info info = s->info;
    tmk__store_fill_info(s->store, &info);
    pthread_mutex_unlock(&s->mu);
    records += info.stats.records;
    lost += info.stats.lost;
    packets += info.stats.packets;
    live += info.live ? 1u : 0u;
  }
  double secs = (double)(now - r->last_stats_ms) / 1000.0;
  if (secs <= 0) secs = 1;
  uint64_t d_rec = records - r->records_at_last_stats, d_lost = lost - r->lost_at_last_stats;
  uint64_t d_pk = packets - r->packets_at_last_stats;
  uint64_t garbage = atomic_load(&r->garbage);
  uint64_t unauth = atomic_load(&r->unauthenticated), bad_mac = atomic_load(&r->bad_mac);
  tmk__rxq_counters q;
  tmk__udp_rx_counters(r->udp_rx, &q);
  char queue[160] = ""; /* only when the receive queue overflowed */
  if (q.drops != r->queue_drops_at_last_stats)
    snprintf(queue, sizeof queue, ", %llu datagrams dropped by a full receive queue (%llu MiB)",
             (unsigned long long)(q.drops - r->queue_drops_at_last_stats),
             (unsigned long long)(q.capacity >> 20));
  r->queue_drops_at_last_stats = q.drops;
  char auth[160] = ""; /* only with keys, or when someone sends keyed packets */
  if (r->cfg.nkeys || unauth + bad_mac)
    snprintf(auth, sizeof auth, ", %llu refused by --key (in all %llu without MAC, %llu bad MAC)",
             (unsigned long long)(unauth + bad_mac - r->auth_at_last_stats),
             (unsigned long long)unauth, (unsigned long long)bad_mac);
  tmk_relay__log(&r->log, TMK_LOG_INFO,
           "stats: %u sessions (%u live), %.0f records/s, %.0f packets/s, lost %llu of %llu "
           "packets (%.3f%%), %llu bad packets%s%s",
           r->nsessions, live, (double)d_rec / secs, (double)d_pk / secs,
           (unsigned long long)d_lost, (unsigned long long)(d_pk + d_lost),
           d_pk + d_lost ? 100.0 * (double)d_lost / (double)(d_pk + d_lost) : 0.0,
           (unsigned long long)(garbage - r->garbage_at_last_stats), queue, auth);
  r->auth_at_last_stats = unauth + bad_mac;
  r->records_at_last_stats = records;
  r->lost_at_last_stats = lost;
  r->packets_at_last_stats = packets;
  r->garbage_at_last_stats = garbage;
  r->last_stats_ms = now;
}

/* ---------------------------------------------------------------------------------------------
 * Loop
 * ------------------------------------------------------------------------------------------- */
static void on_tick(uv_timer_t* t) {
  tmk_relay* r = t->data;
  uint64_t now = uv_now(r->loop);
  atomic_store(&r->loop_cpu_ns, tmk__own_cpu_ns());
  tmk__ingest_tick(r, now);
  tmk__control_tick(r, now);
  if (r->ch) tmk__ch_tick(r->ch, r, now);
  if (now - r->last_second_ms >= 1000) {
    int sync = now - r->last_sync_ms >= 5000;
    if (sync) r->last_sync_ms = now;
    tmk__sessions_periodic(r, now, sync);
    r->last_second_ms = now;
  }
  if (now - r->last_stats_ms >= r->cfg.stats_interval_ms) stats_line(r, now);
}

static void on_stop(uv_async_t* h) {
  tmk_relay* r = h->data;
  if (r->stopping) return;
  tmk_relay__log(&r->log, TMK_LOG_INFO, "stopping (flushing recordings)");
  tmk__ingest_stop(r);
  tmk__serial_stop(r);
  tmk__control_drain(r);
  tmk__sessions_shutdown(r);
  if (r->ch) tmk__ch_shutdown(r->ch, r, 3000); /* send for up to 3 s, spill the rest */
  tmk__http_stop(r);
  uv_timer_stop(&r->tick);
  uv_close((uv_handle_t*)&r->tick, NULL);
  tmk__control_close(r);
  uv_close((uv_handle_t*)&r->stop_async, NULL);
}

void tmk_relay_stop(tmk_relay* r) { uv_async_send(&r->stop_async); }

static void close_any(uv_handle_t* h, void* ud) {
  (void)ud;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* Frees what create made; the loop must have no active handles left but closing ones. */
static void relay_free(tmk_relay* r) {
  tmk__http_stop(r);
  uv_walk(r->loop, close_any, NULL);
  uv_run(r->loop, UV_RUN_DEFAULT);
  uv_loop_close(r->loop);
  tmk__serial_free(r);
  tmk__udp_rx_free(r->udp_rx);
  tmk__ch_free(r->ch); /* joins the sink thread (after tmk__ch_shutdown it has drained) */
  for (uint32_t i = 0; i < r->nsessions; i++) tmk__session_unref(r->sessions[i]);
  free(r->sessions);
  free(r->scratch);
  pthread_mutex_destroy(&r->reg_mu);
  pthread_mutex_destroy(&r->cmd_mu);
  pthread_mutex_destroy(&r->query_mu);
  pthread_cond_destroy(&r->query_cv);
  tmk__logger_free(&r->log);
  free(r);
  tmk__pool_detach(); /* the last relay of the process: the pool's memory goes back */
}

int tmk_relay_create(const tmk_relay_desc* desc, tmk_relay** out) {
  *out = NULL;
  tmk_relay_desc zero;
  memset(&zero, 0, sizeof zero);
  const tmk_relay_desc* d = desc ? desc : &zero;
  tmk_relay_config cfg;
  if (config_from_desc(d, &cfg) != 0 || d->log.level < 0 || d->log.level > TMK_LOG_DEBUG)
    return TMK_EINVAL;
  tmk_relay* r = calloc(1, sizeof *r);
  if (!r) return TMK_ENOMEM;
  r->cfg = cfg;
  /* memory the process keeps for reuse when a queue block or a session's slab is freed, while
   * this relay exists (relay_free detaches) */
  tmk__pool_attach((uint64_t)cfg.udp_queue_bytes + cfg.session_memory);
  r->scratch = malloc(TMK_PROTO_MAX_BODY);
  if (!r->scratch || uv_loop_init(&r->loop_storage) != 0) {
    free(r->scratch);
    free(r);
    tmk__pool_detach();
    return TMK_ENOMEM;
  }
  tmk__logger_init(&r->log, d->log.fn, d->log.ud, d->log.level);
  if (cfg.nkeys) {
    char names[512] = "";
    size_t at = 0;
    for (uint32_t i = 0; i < cfg.nkeys && at < sizeof names; i++)
      at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "",
                             cfg.keys[i].program);
    tmk_relay__log(&r->log, TMK_LOG_INFO, "authenticated ingest: keys for %u program(s): %s",
                   cfg.nkeys, names);
  }
  r->loop = &r->loop_storage;
  pthread_mutex_init(&r->reg_mu, NULL);
  pthread_mutex_init(&r->cmd_mu, NULL);
  pthread_mutex_init(&r->query_mu, NULL);
  pthread_cond_init(&r->query_cv, NULL);
  uv_async_init(r->loop, &r->stop_async, on_stop);
  r->stop_async.data = r;
  if (cfg.clickhouse_url[0]) { /* the history sink, before any session exists */
    char err[300];
    tmk__ch_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.url = cfg.clickhouse_url;
    cd.spill_dir = cfg.clickhouse_spill_dir;
    cd.spill_max = cfg.clickhouse_spill_max;
    cd.queue_max = cfg.clickhouse_memory_max;
    cd.senders = cfg.clickhouse_senders;
    cd.log = &r->log;
    r->ch = tmk__ch_new(&cd, err, sizeof err);
    if (!r->ch) {
      tmk_relay__log(&r->log, TMK_LOG_ERROR, "%s", err);
      relay_free(r);
      return TMK_EINVAL;
    }
  }
  if (tmk__ingest_start(r) != 0 || tmk__http_start(r) != 0) {
    tmk__ingest_stop(r);
    relay_free(r);
    return TMK_ESOCKET;
  }
  int src = tmk__serial_start(r, d->serial, TMK_RELAY_MAX_SERIAL);
  if (src != 0) {
    tmk__ingest_stop(r);
    tmk__serial_stop(r);
    relay_free(r);
    return src;
  }
  tmk__control_init(r);
  uv_timer_init(r->loop, &r->tick);
  r->tick.data = r;
  uv_timer_start(&r->tick, on_tick, TMK__TICK_MS, TMK__TICK_MS);
  r->last_stats_ms = r->last_second_ms = r->last_sync_ms = uv_now(r->loop);
  *out = r;
  return 0;
}

/* The loop decodes at a lower priority than the machine's other threads, so that a game on the
 * same machine (and its agent's flusher) keeps its cores; the receive thread keeps the normal
 * one and queues what arrives meanwhile. Linux sets nice per thread; elsewhere it would lower
 * the whole process, so it is left alone there. */
static void lower_loop_priority(tmk_relay* r) {
#ifdef __linux__
  if (r->cfg.ingest_nice < 0) return;
  const id_t tid = (id_t)syscall(SYS_gettid);
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, tid);
  if (errno == 0 && now >= r->cfg.ingest_nice) return;
  if (setpriority(PRIO_PROCESS, tid, r->cfg.ingest_nice) != 0)
    tmk_relay__log(&r->log, TMK_LOG_WARN, "cannot lower the ingest loop's priority to nice %d: %s",
                   r->cfg.ingest_nice, strerror(errno));
  else
    tmk_relay__log(&r->log, TMK_LOG_DEBUG, "ingest loop at nice %d (--ingest-nice)",
                   r->cfg.ingest_nice);
#else
  (void)r;
#endif
}

int tmk_relay_run(tmk_relay* r) {
  lower_loop_priority(r);
  uv_run(r->loop, UV_RUN_DEFAULT);
  atomic_store(&r->loop_cpu_ns, tmk__own_cpu_ns());
  tmk_relay__log(&r->log, TMK_LOG_INFO, "stopped");
  return 0;
}

void tmk_relay_destroy(tmk_relay* r) {
  if (!r) return;
  if (!r->stopping) {
    /* never run: stop here, on this thread, as run would have */
    on_stop(&r->stop_async);
    uv_run(r->loop, UV_RUN_DEFAULT);
  }
  relay_free(r);
}
