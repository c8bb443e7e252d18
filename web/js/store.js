// store.js — the browser-side copy of one session: call sites, threads, zones per lane (thread ×
// depth) with level-of-detail indexes, frames, plots and messages. Everything the flame chart,
// graphs and exports read. Times are float64 nanoseconds relative to the session origin.

// Growable typed array helper.
function grow(arr, need) {
  if (need <= arr.length) return arr;
  let cap = Math.max(need, arr.length * 2, 256);
  const out = new arr.constructor(cap);
  out.set(arr);
  return out;
}

// Level-of-detail: level k merges, in one pass over a lane, consecutive "small" zones (duration
// below 2^shift ns) whose gaps are below 2^shift ns into one run. Big zones stay single. In a window
// of W ns a level holds at most about 2·W/2^shift entries, so drawing at a zoom of ~2^shift ns per
// pixel touches O(pixels) entries however many zones are loaded. Entries store raw indexes only.
// Levels start at 16 µs: finer views draw raw zones, which are few there, and each level costs up
// to ~17 bytes a zone, so fewer levels keep the page's memory bound.
export const LOD_SHIFTS = [14, 16, 18, 20, 22, 24, 26, 28, 30, 32];

class LodLevel {
  constructor(shift) {
    this.shift = shift;
    this.span = Math.pow(2, shift);
    this.n = 0;
    this.first = new Uint32Array(64); // raw index of the first zone of the entry
    this.last = new Uint32Array(64);  // raw index of the last zone (== first for a single zone)
    this.end = new Float64Array(64);  // end of the entry, ns (max end of its zones)
    this.merged = new Uint8Array(64); // 1 when the entry is a run that may absorb more zones
  }
  push(i, start, end, small) {
    const n = this.n;
    if (n > 0 && small && this.merged[n - 1] && start - this.end[n - 1] < this.span) {
      this.last[n - 1] = i;
      if (end > this.end[n - 1]) this.end[n - 1] = end;
      return;
    }
    if (n >= this.first.length) {
      this.first = grow(this.first, n + 1);
      this.last = grow(this.last, n + 1);
      this.end = grow(this.end, n + 1);
      this.merged = grow(this.merged, n + 1);
    }
    this.first[n] = i; this.last[n] = i; this.end[n] = end; this.merged[n] = small ? 1 : 0;
    this.n = n + 1;
  }
}

// One lane: the zones of one thread at one depth. Zones at one depth of one thread never overlap,
// so sorted by start they are also sorted by end, which makes range lookups binary searches.
export class Lane {
  constructor(thread, depth) {
    this.thread = thread;
    this.depth = depth;
    this.n = 0;
    this.start = new Float64Array(256);
    this.dur = new Float64Array(256);
    this.site = new Uint32Array(256);
    this.extra = null; // Map raw index -> payload string
    this.levels = LOD_SHIFTS.map((s) => new LodLevel(s));
    this.sorted = true;
    this.sortedUpTo = 0;
  }
  add(start, dur, site, extra) {
    const n = this.n;
    if (n >= this.start.length) {
      this.start = grow(this.start, n + 1);
      this.dur = grow(this.dur, n + 1);
      this.site = grow(this.site, n + 1);
    }
    if (this.sorted && n > 0 && start <= this.start[n - 1]) { this.sorted = false; this.sortedUpTo = n; }
    this.start[n] = start; this.dur[n] = dur; this.site[n] = site;
    if (extra) { if (!this.extra) this.extra = new Map(); this.extra.set(n, extra); }
    this.n = n + 1;
    if (this.sorted) {
      const end = start + dur;
      const lv = this.levels;
      for (let k = 0; k < lv.length; k++) lv[k].push(n, start, end, dur < lv[k].span);
    }
  }
  // Restores order after out-of-order arrivals (history and live overlapping, trees split across
  // packets) and drops exact duplicates. Only the tail from the first misplaced zone is re-sorted
  // and re-indexed, so a late zone costs little however long the lane is.
  fix() {
    if (this.sorted) return;
    // smallest start among zones appended since the lane was last in order
    let minS = Infinity;
    for (let i = this.sortedUpTo; i < this.n; i++) if (this.start[i] < minS) minS = this.start[i];
    let cut = 0, hi = this.sortedUpTo;
    while (cut < hi) { const m = (cut + hi) >>> 1; if (this.start[m] < minS) cut = m + 1; else hi = m; }
    // LOD entries reaching into the tail are rebuilt too
    for (const l of this.levels) {
      while (l.n > 0 && l.last[l.n - 1] >= cut) { l.n--; if (l.first[l.n] < cut) cut = l.first[l.n]; }
    }
    for (const l of this.levels) {
      while (l.n > 0 && l.last[l.n - 1] >= cut) l.n--;
    }
    const m = this.n - cut;
    const idx = new Uint32Array(m);
    for (let i = 0; i < m; i++) idx[i] = cut + i;
    const st = this.start, du = this.dur, si = this.site;
    idx.sort((a, b) => (st[a] - st[b]) || (du[a] - du[b]) || (si[a] - si[b]));
    const s = new Float64Array(m), d = new Float64Array(m), t = new Uint32Array(m), ex = [];
    for (let j = 0; j < m; j++) {
      const i = idx[j];
      s[j] = st[i]; d[j] = du[i]; t[j] = si[i];
      ex.push(this.extra ? this.extra.get(i) : undefined);
    }
    if (this.extra) for (let i = cut; i < this.n; i++) this.extra.delete(i);
    this.n = cut;
    this.sorted = true;
    let removed = 0;
    for (let j = 0; j < m; j++) {
      if (j > 0 && s[j] === s[j - 1] && d[j] === d[j - 1] && t[j] === t[j - 1]) { removed++; continue; }
      this.add(s[j], d[j], t[j], ex[j]);
    }
    this.sortedUpTo = this.n;
    return removed;
  }
  // Forgets the first k zones (the oldest): arrays shift down, LOD entries are renumbered.
  dropFirst(k) {
    const n = this.n;
    if (k <= 0) return 0;
    if (k > n) k = n;
    this.start.copyWithin(0, k, n); this.dur.copyWithin(0, k, n); this.site.copyWithin(0, k, n);
    if (this.extra) {
      const ex = new Map();
      for (const [i, v] of this.extra) if (i >= k) ex.set(i - k, v);
      this.extra = ex.size ? ex : null;
    }
    for (const l of this.levels) {
      let e = 0;
      while (e < l.n && l.last[e] < k) e++;
      l.first.copyWithin(0, e, l.n); l.last.copyWithin(0, e, l.n); l.end.copyWithin(0, e, l.n); l.merged.copyWithin(0, e, l.n);
      l.n -= e;
      for (let i = 0; i < l.n; i++) { l.first[i] = Math.max(l.first[i], k) - k; l.last[i] -= k; }
    }
    this.n = n - k;
    this.sortedUpTo = Math.max(0, this.sortedUpTo - k);
    return k;
  }
  // First index whose start is at or after t.
  firstStartingAt(t) {
    let lo = 0, hi = this.n;
    while (lo < hi) { const m = (lo + hi) >>> 1; if (this.start[m] < t) lo = m + 1; else hi = m; }
    return lo;
  }
  // First raw index whose end is after t.
  firstEndingAfter(t) {
    let lo = 0, hi = this.n;
    while (lo < hi) {
      const m = (lo + hi) >>> 1;
      if (this.start[m] + this.dur[m] <= t) lo = m + 1; else hi = m;
    }
    return lo;
  }
  // Best level for a zoom of nsPerPx, or null for raw zones.
  levelFor(nsPerPx) {
    let best = null;
    for (const l of this.levels) { if (l.span <= nsPerPx) best = l; else break; }
    return best;
  }
  levelFirstEndingAfter(l, t) {
    let lo = 0, hi = l.n;
    while (lo < hi) {
      const m = (lo + hi) >>> 1;
      if (l.end[m] <= t) lo = m + 1; else hi = m;
    }
    return lo;
  }
}

export const SEVERITIES = ['critical', 'error', 'warning', 'info', 'debug', 'trace'];

export class SessionData {
  constructor(id) {
    this.id = id;
    this.origin = 0;          // absolute ns of time 0 (from the stream's RESET)
    this.sites = new Map();   // id -> {id, kind, severity, verbosity, colour, line, name, file}
    this.threads = new Map(); // thread -> {id, name, lanes: Lane[]}
    this.teams = new Map();   // bit -> name
    this.frameTimes = new Float64Array(1024); this.nFrames = 0; this.framesSorted = true;
    this.plots = new Map();   // site -> {t: number[], v: number[]}
    this.frameSets = new Map(); // site -> times of a named frame set (FRAME with a site)
    this.messages = [];       // {t, thread, site, severity, verbosity, text}
    this.maxMessages = 20000;
    this.zoneCount = 0;
    this.minTime = Infinity;
    this.maxTime = -Infinity;
    this.gaps = [];           // {from, to, zones, other} from a slow connection
    this.version = 0;         // bumped on every change, so views know when to redraw
    this.ended = false;
    this.markerText = new Map(); // "thread:site:start" or "thread:site:end@t" -> payload
    // Bounded memory (README, "Dashboard"): past maxZones the oldest zones are forgotten down to
    // 70 % of it; coverFrom is then where the zones held start (older ones come from lod.js).
    this.maxZones = SessionData.maxZones;
    this.maxPlotPoints = 100000;
    this.maxFrames = 500000;
    this.maxMarkers = 50000;
    this.trimmed = 0;         // zones forgotten so far
    this.coverFrom = -Infinity;
  }
  // Start of the range the zones held cover completely (Infinity before any zone arrived).
  liveFrom() { return this.trimmed ? this.coverFrom : this.minTime; }
  // The parts of [t0, t1] the zones held do not cover in full: before liveFrom(), and the ranges
  // of a slow connection's GAPs (only long zones arrived there). Sorted, disjoint [a, b] pairs.
  uncovered(t0, t1) {
    const out = [];
    const lf = this.liveFrom();
    let a = t0;
    if (lf > t0) { const b = Math.min(t1, lf); out.push([t0, b]); a = b; }
    if (this.gaps.length) {
      const gs = this.gaps.filter((g) => g.to > a && g.from < t1).map((g) => [Math.max(a, g.from), Math.min(t1, g.to)]).sort((x, y) => x[0] - y[0]);
      for (const g of gs) {
        const last = out[out.length - 1];
        if (last && g[0] <= last[1]) { if (g[1] > last[1]) last[1] = g[1]; } else out.push(g);
      }
    }
    return out;
  }
  trim() {
    if (this.zoneCount > this.maxZones) {
      const lo = this.trimmed ? this.coverFrom : this.minTime;
      const keep = 0.7 * this.maxZones / this.zoneCount;
      const cut = this.maxTime - (this.maxTime - lo) * keep;
      for (const th of this.threads.values()) for (const l of th.lanes) {
        const k = l.firstStartingAt(cut);
        this.zoneCount -= l.dropFirst(k);
        this.trimmed += k;
      }
      this.coverFrom = cut;
    }
    for (const p of this.plots.values()) {
      if (p.t.length > this.maxPlotPoints * 1.25) { const k = p.t.length - this.maxPlotPoints; p.t.splice(0, k); p.v.splice(0, k); }
    }
    if (this.nFrames > this.maxFrames * 1.25) {
      const k = this.nFrames - this.maxFrames;
      this.frameTimes.copyWithin(0, k, this.nFrames); this.nFrames -= k;
    }
    for (const f of this.frameSets.values()) if (f.length > this.maxFrames * 1.25) f.splice(0, f.length - this.maxFrames);
    if (this.markerText.size > this.maxMarkers * 1.25) {
      let k = this.markerText.size - this.maxMarkers;
      for (const key of this.markerText.keys()) { if (k-- <= 0) break; this.markerText.delete(key); }
    }
  }
  addMarkerPayload(thread, site, isEnd, t, text) {
    const k = `${thread}:${site}:${isEnd ? 'e' : 'b'}:${t}`;
    const old = this.markerText.get(k);
    this.markerText.set(k, old ? old + ' ' + text : text);
  }
  // Extra data of a zone: its own payload, or the BEGIN/END payloads of the marker it came from.
  zoneExtra(thread, lane, i) {
    if (lane.extra && lane.extra.has(i)) return lane.extra.get(i);
    if (!this.markerText.size) return undefined;
    const s = lane.start[i], site = lane.site[i];
    const b = this.markerText.get(`${thread}:${site}:b:${s}`);
    const e = this.markerText.get(`${thread}:${site}:e:${s + lane.dur[i]}`);
    if (b && e) return b + ' … ' + e;
    return b || e;
  }
  thread(t) {
    let th = this.threads.get(t);
    if (!th) { th = { id: t, name: '', lanes: [] }; this.threads.set(t, th); }
    return th;
  }
  addZone(thread, depth, start, dur, site, extra) {
    const th = this.thread(thread);
    while (th.lanes.length <= depth) th.lanes.push(new Lane(thread, th.lanes.length));
    th.lanes[depth].add(start, dur, site, extra);
    this.zoneCount++;
    if (start < this.minTime) this.minTime = start;
    if (start + dur > this.maxTime) this.maxTime = start + dur;
  }
  addFrame(t) {
    const n = this.nFrames;
    this.frameTimes = grow(this.frameTimes, n + 1);
    if (n > 0 && t < this.frameTimes[n - 1]) this.framesSorted = false;
    this.frameTimes[n] = t; this.nFrames = n + 1;
    this.touch(t);
  }
  addFrameSet(site, t) {
    let f = this.frameSets.get(site);
    if (!f) { f = []; this.frameSets.set(site, f); }
    f.push(t);
    this.touch(t);
  }
  addPlot(site, t, v) {
    let p = this.plots.get(site);
    if (!p) { p = { t: [], v: [] }; this.plots.set(site, p); }
    p.t.push(t); p.v.push(v);
    this.touch(t);
  }
  addMessage(m) {
    this.messages.push(m);
    if (this.messages.length > this.maxMessages * 1.25) this.messages.splice(0, this.messages.length - this.maxMessages);
    this.touch(m.t);
  }
  touch(t) {
    if (t < this.minTime) this.minTime = t;
    if (t > this.maxTime) this.maxTime = t;
  }
  // Called after a batch: restores order where something arrived out of order.
  finishBatch() {
    for (const th of this.threads.values()) for (const l of th.lanes) {
      if (!l.sorted) this.zoneCount -= l.fix();
    }
    this.trim();
    if (!this.framesSorted) {
      const f = Array.from(this.frameTimes.subarray(0, this.nFrames)).sort((a, b) => a - b);
      const u = f.filter((v, i) => i === 0 || v !== f[i - 1]);
      this.frameTimes = new Float64Array(Math.max(1024, u.length));
      this.frameTimes.set(u); this.nFrames = u.length; this.framesSorted = true;
    }
    this.version++;
  }
  // Zones per team bit, and per site, for tests and the status line.
  countZones(pred) {
    let c = 0;
    for (const th of this.threads.values()) for (const l of th.lanes) {
      for (let i = 0; i < l.n; i++) if (pred(l.site[i], th.id, l.depth)) c++;
    }
    return c;
  }
  // Statistics of one site's zones whose start is within [t0, t1).
  siteStats(site, t0, t1) {
    const ds = [];
    for (const th of this.threads.values()) for (const l of th.lanes) {
      let i = l.firstEndingAfter(t0);
      for (; i < l.n && l.start[i] < t1; i++) if (l.site[i] === site && l.start[i] >= t0) ds.push(l.dur[i]);
    }
    ds.sort((a, b) => a - b);
    const n = ds.length;
    let sum = 0; for (const d of ds) sum += d;
    return {
      site, count: n, total: sum, mean: n ? sum / n : 0,
      min: n ? ds[0] : 0, max: n ? ds[n - 1] : 0,
      p50: n ? ds[Math.floor(n * 0.5)] : 0, p95: n ? ds[Math.min(n - 1, Math.floor(n * 0.95))] : 0,
    };
  }
  // Frame durations as [frame start, duration] pairs (ns).
  frameDurations() {
    const n = Math.max(0, this.nFrames - 1);
    const t = new Float64Array(n), d = new Float64Array(n);
    for (let i = 0; i < n; i++) { t[i] = this.frameTimes[i]; d[i] = this.frameTimes[i + 1] - this.frameTimes[i]; }
    return { t, d };
  }
}

// Zones a page holds in full before forgetting the oldest (tests lower it).
SessionData.maxZones = 800000;

// Chrome trace event format (the "JSON Array/Object Format" read by chrome://tracing and
// Perfetto): complete events ("ph":"X") in microseconds, instant events for messages and frames.
export function toChromeTrace(sd, program) {
  const ev = [];
  const pid = 1;
  ev.push({ name: 'process_name', ph: 'M', pid, tid: 0, args: { name: program || sd.id } });
  for (const th of sd.threads.values()) {
    ev.push({ name: 'thread_name', ph: 'M', pid, tid: th.id, args: { name: th.name || `thread ${th.id}` } });
    for (const l of th.lanes) {
      for (let i = 0; i < l.n; i++) {
        const s = sd.sites.get(l.site[i]);
        const e = { name: s ? s.name : `site ${l.site[i]}`, cat: 'zone', ph: 'X', pid, tid: th.id,
          ts: l.start[i] / 1000, dur: l.dur[i] / 1000 };
        const args = {};
        if (s) { args.file = s.file; args.line = s.line; }
        const x = sd.zoneExtra(th.id, l, i);
        if (x !== undefined) args.extra = x;
        e.args = args;
        ev.push(e);
      }
    }
  }
  for (let i = 0; i < sd.nFrames; i++) ev.push({ name: 'frame', cat: 'frame', ph: 'i', s: 'g', pid, tid: 0, ts: sd.frameTimes[i] / 1000 });
  for (const [site, times] of sd.frameSets) {
    const s = sd.sites.get(site);
    for (const t of times) ev.push({ name: s ? s.name : `frame set ${site}`, cat: 'frame', ph: 'i', s: 'g', pid, tid: 0, ts: t / 1000 });
  }
  for (const m of sd.messages) ev.push({ name: m.text, cat: 'message', ph: 'i', s: 't', pid, tid: m.thread, ts: m.t / 1000, args: { severity: SEVERITIES[m.severity] || m.severity } });
  for (const [site, p] of sd.plots) {
    const s = sd.sites.get(site);
    const name = s ? s.name : `plot ${site}`;
    for (let i = 0; i < p.t.length; i++) ev.push({ name, ph: 'C', pid, tid: 0, ts: p.t[i] / 1000, args: { value: p.v[i] } });
  }
  return { traceEvents: ev, displayTimeUnit: 'ns', otherData: { session: sd.id, program: program || '' } };
}
