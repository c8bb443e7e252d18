// lod.js — the page's view of what the relay stores beyond the live stream: a level-of-detail
// summary of the whole session (the "overview"), a finer one around the view, and full detail
// near the view when it holds few enough zones, all fetched from GET …/lod (docs/API.md, "Level
// of detail") by a worker as the user pans and zooms. Each is replaced, never accumulated, so
// what the page holds stays bounded (README, "Dashboard"): at most OVERVIEW_ROWS + VIEW_ROWS +
// DETAIL_ROWS rows of 24 bytes, besides the live store's own cap (store.js, maxZones).

export const OVERVIEW_BUCKETS = 4096;
export const VIEW_ROWS = 300000;
export const OVERVIEW_ROWS = 300000;
export const DETAIL_ROWS = 300000;   // full detail is fetched when the view holds fewer zones
const LIVE_REFRESH_MS = 2000;

// One lane (thread × depth) of a fetched answer: rows sorted by start. A row merges `count`
// zones shorter than the answer's resolution (count 1: one zone, whole). Same shape as a
// store.js Lane for drawing (start, dur, site, n, firstEndingAfter, levelFor).
export class LodLane {
  constructor(thread, depth, start, dur, site, count) {
    this.thread = thread; this.depth = depth;
    this.start = start; this.dur = dur; this.site = site; this.count = count;
    this.n = start.length;
    this.extra = null;
  }
  firstEndingAfter(t) {
    let lo = 0, hi = this.n;
    while (lo < hi) { const m = (lo + hi) >>> 1; if (this.start[m] + this.dur[m] <= t) lo = m + 1; else hi = m; }
    return lo;
  }
  levelFor() { return null; }
}

// One answer: [t0, t1] (page-relative ns), its resolution (0 = full detail) and lanes.
export class LodSet {
  constructor(m, full) {
    this.t0 = m.t0; this.t1 = m.t1; this.res = full ? 0 : m.res; this.full = full;
    this.zones = m.zones; this.rows = m.rows; this.truncated = m.truncated;
    this.threads = new Map(); // thread -> LodLane[] by depth
    this.bytes = 0;
    for (const l of m.lanes) {
      let a = this.threads.get(l.thread);
      if (!a) { a = []; this.threads.set(l.thread, a); }
      a[l.depth] = new LodLane(l.thread, l.depth, l.start, l.dur, l.site, l.count);
      this.bytes += l.start.byteLength * 3;
    }
  }
  lane(thread, depth) { const a = this.threads.get(thread); return a ? a[depth] : undefined; }
  depths(thread) { const a = this.threads.get(thread); return a ? a.length : 0; }
  covers(t0, t1) { return this.t0 <= t0 && this.t1 >= t1; }
  // Zones in [t0, t1] according to this answer (merged rows count all their zones).
  estimate(t0, t1) {
    let n = 0;
    for (const a of this.threads.values()) for (const l of a) {
      if (!l) continue;
      for (let i = l.firstEndingAfter(t0); i < l.n && l.start[i] < t1; i++) n += l.count[i];
    }
    return n;
  }
}

export class LodCache {
  // opts: {url(sessionId, params) → string, onChange()}
  constructor(opts) {
    this.opts = opts;
    this.worker = null;
    this.nextId = 1;
    this.requests = 0; this.errors = 0; this.lastError = ''; // since the page loaded
    this.reset(null);
  }
  reset(sessionId) {
    this.session = sessionId;
    this.origin = null;      // absolute ns of page time 0; null until the stream's RESET
    this.first = 0; this.last = 0; // the relay's stored range, page-relative ns
    this.live = false;
    this.overview = null; this.view = null; this.detail = null;
    this.inflight = null;
    this.overviewAt = 0; this.overviewMs = 0;
    this.storedFirst = -Infinity; // page time of the oldest data the relay still holds
    this.failed = null;      // {span, at}: full detail was too big at this zoom; wait before retrying
    this.log = [];           // the last fetches: {kind, ms, rows, zones} (tests, bench)
  }
  // Session facts from GET /api/sessions: the stored range and whether it is live.
  setInfo(info, origin) {
    if (!info || info.id !== this.session || origin === null || origin === undefined) return;
    if (this.origin !== origin) { this.origin = origin; this.overview = this.view = this.detail = null; this.storedFirst = -Infinity; }
    // the relay's first_ns stays put when it evicts; the overview says where stored data starts
    this.first = Math.max(info.first_ns - origin, this.storedFirst); this.last = info.last_ns - origin;
    this.live = !!info.live;
  }
  bytes() {
    return (this.overview ? this.overview.bytes : 0) + (this.view ? this.view.bytes : 0) + (this.detail ? this.detail.bytes : 0);
  }
  // The severity level and team mask the live stream uses; the relay applies them to summaries too.
  setFilter(level, mask) {
    if (this.level === level && this.mask === mask) return;
    this.level = level; this.mask = mask;
    this.overview = this.view = this.detail = null;
    if (this.inflight) this.inflight.stale = true;
  }
  request(kind, params) {
    if (this.level !== undefined && this.level < 5) params.level = this.level;
    if (this.mask !== undefined && this.mask !== 0xffffffff) params.mask = this.mask;
    if (!this.worker) {
      this.worker = new Worker(new URL('./lod_worker.js', import.meta.url));
      this.worker.onmessage = (ev) => this.answer(ev.data);
    }
    const id = this.nextId++;
    const q = Object.entries(params).map(([k, v]) => `${k}=${v}`).join('&');
    this.inflight = { id, kind, session: this.session, origin: this.origin, at: performance.now() };
    this.requests++;
    this.worker.postMessage({ id, url: this.opts.url(this.session, q), origin: this.origin });
  }
  answer(m) {
    const f = this.inflight;
    if (!f || f.id !== m.id) return;
    this.inflight = null;
    if (f.session !== this.session || f.origin !== this.origin || f.stale) return; // a session or filter ago
    this.log.push({ kind: f.kind, ms: performance.now() - f.at, rows: m.rows, zones: m.zones, error: m.error });
    if (this.log.length > 50) this.log.shift();
    if (m.error) { this.errors++; this.lastError = m.error; return; }
    if (f.kind === 'overview') {
      this.overview = new LodSet(m, false); this.overviewAt = performance.now(); this.overviewMs = this.overviewAt - f.at;
      if (m.t1 > m.t0) { this.storedFirst = m.t0; this.first = Math.max(this.first, m.t0); this.last = Math.max(this.last, m.t1); }
    }
    else if (f.kind === 'view') this.view = new LodSet(m, false);
    else if (m.truncated) { this.detail = null; this.failed = { span: f.span, at: performance.now() }; }
    else this.detail = new LodSet(m, true);
    this.opts.onChange && this.opts.onChange();
  }
  abs(t) { return Math.max(0, Math.round(t + this.origin)); }
  // Called every animation frame with the view and the start of what the live store covers;
  // starts at most one fetch at a time.
  update(t0, t1, width, uncovered) {
    if (!this.session || this.origin === null || this.inflight || !(this.last > this.first)) return;
    const now = performance.now();
    const ov = this.overview;
    if (!ov) { this.request('overview', { buckets: OVERVIEW_BUCKETS, limit: OVERVIEW_ROWS }); return; } // all the relay holds
    if (!uncovered.length) return; // the live store covers the view: nothing to fetch
    // the stored range grows while the session is live (or the relay still ingests): refresh the
    // overview now and then while the view needs it, no more often than 10× what it costs
    const stale = ov.t1 < this.last - (this.last - this.first) * 0.01 && now - this.overviewAt > Math.max(LIVE_REFRESH_MS, 10 * this.overviewMs);
    if (stale) { this.request('overview', { buckets: OVERVIEW_BUCKETS, limit: OVERVIEW_ROWS }); return; }
    // only what the relay stores: a view past either end asks for nothing there
    const u0 = Math.max(uncovered[0][0], this.first), u1 = Math.min(uncovered[uncovered.length - 1][1], this.last);
    if (!(u1 > u0)) return;
    const span = t1 - t0, nsPerPx = span / Math.max(1, width);
    // full detail when the view holds few enough zones
    const d = this.detail;
    if (!(d && d.covers(u0, u1))) {
      const est = (this.view && this.view.covers(u0, u1) ? this.view : ov).estimate(u0, u1);
      const fl = this.failed;
      const blocked = fl && span >= fl.span * 0.5 && now - fl.at < 3000;
      if (est <= DETAIL_ROWS / 2 && !blocked) {
        const a = Math.max(this.first, u0 - span / 2), b = Math.min(this.last, u1 + span / 2);
        this.request('detail', { t0: this.abs(a), t1: this.abs(b), full: 1, limit: DETAIL_ROWS });
        this.inflight.span = span;
        return;
      }
    } else return;
    if (ov.res <= nsPerPx * 2) return; // the overview is fine enough
    const v = this.view;
    if (v && v.covers(u0, u1) && v.res <= nsPerPx * 2 && v.res >= nsPerPx / 4) return;
    const a = Math.max(this.first, t0 - span), b = Math.min(this.last, t1 + span);
    if (!(b > a)) return;
    const buckets = Math.max(1, Math.min(16384, Math.ceil((b - a) / nsPerPx)));
    this.request('view', { t0: this.abs(a), t1: this.abs(b), buckets, limit: VIEW_ROWS });
  }
  // What to draw for [t0, end), a part the live store does not cover: [{from, to, set}].
  plan(t0, end) {
    const out = [];
    if (!(end > t0)) return out;
    const d = this.detail, v = this.view, ov = this.overview;
    // full detail where it reaches, a summary elsewhere
    let a = t0;
    if (d && d.t1 > a && d.t0 < end) {
      if (d.t0 > a) out.push({ from: a, to: d.t0, set: null });
      out.push({ from: Math.max(a, d.t0), to: Math.min(end, d.t1), set: d });
      a = Math.min(end, d.t1);
    }
    if (a < end) out.push({ from: a, to: end, set: null });
    for (const s of out) {
      if (s.set) continue;
      s.set = (v && v.t0 <= s.from && v.t1 >= s.to && v.res < (ov ? ov.res : Infinity)) ? v : ov;
    }
    return out.filter((s) => s.set);
  }
}
