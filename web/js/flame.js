// flame.js — the canvas flame chart: one lane group per thread (collapsible), nested zones, frame
// boundaries, a ruler in the session's own time, wheel zoom, drag pan, shift-drag measure, hover
// tooltip and click-for-statistics. Draws the live store (store.js, through its level-of-detail
// indexes) where it has the data and what lod.js fetched from the relay before that, so the cost of
// a frame follows pixels, not zones, and the whole stored session can be browsed.

const ROW = 16;          // px per depth row
const HEAD = 18;         // px of thread header
const MIN_RANGE = 1000;  // 1 µs: deepest zoom

// Colour of a call site: its own colour, or a stable hue from its id.
const colourCache = new Map();
const mergedCache = new Map();
export function siteColour(site, s) {
  const key = site;
  let c = colourCache.get(key);
  if (c) return c;
  if (s && s.colour) c = '#' + s.colour.toString(16).padStart(6, '0');
  else {
    const h = (Math.imul(site, 2654435761) >>> 0) % 360;
    c = `hsl(${h},55%,58%)`;
  }
  colourCache.set(key, c);
  return c;
}

// Ruler label for absolute time t (ns) with ticks `step` ns apart: seconds with as many decimals
// as the step needs.
export function fmtAbs(t, step) {
  const dec = Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / 1e9) - 1e-9)));
  return (t / 1e9).toFixed(dec) + ' s';
}
// An offset that is a multiple of `step` (1, 2 or 5 × 10^k ns), in the largest unit it is whole in.
export function fmtStep(d, step) {
  if (step >= 1e9) return (d / 1e9).toFixed(0) + ' s';
  if (step >= 1e6) return (d / 1e6).toFixed(0) + ' ms';
  if (step >= 1e3) return (d / 1e3).toFixed(0) + ' µs';
  return d.toFixed(0) + ' ns';
}

export function fmtNs(ns) {
  const a = Math.abs(ns);
  if (a < 1e3) return ns.toFixed(0) + ' ns';
  if (a < 1e6) return (ns / 1e3).toFixed(a < 1e4 ? 2 : 1) + ' µs';
  if (a < 1e9) return (ns / 1e6).toFixed(a < 1e7 ? 2 : 1) + ' ms';
  return (ns / 1e9).toFixed(3) + ' s';
}

export class FlameChart {
  constructor(canvas, tooltip, opts) {
    this.cv = canvas;
    this.ctx = canvas.getContext('2d', { alpha: false });
    this.tip = tooltip;
    this.opts = opts; // {lod, onSelect(site, stats), onLiveChange(live), canLive(), onMeasure(m), onLayout(content, scrollY, height)}
    this.sd = null;
    this.t0 = 0; this.t1 = 1e8; // visible range, ns
    this.live = true;
    this.scrollY = 0;
    this.layout = [];           // [{thread, y, lanes}] computed per draw
    this.hidden = null;         // predicate(site) → true to hide (client-side team filter)
    this.drawn = 0;             // rectangles in the last frame (for tests and the bench)
    this.frameCount = 0;
    this.needs = true;
    this.hover = null;
    this.drag = null;
    this.selected = null;
    this.lod = opts.lod || null;  // lod.js LodCache: what the relay stores before the live store
    this.origin = 0;              // absolute ns of time 0 (labels show the session's own time)
    this.range = null;            // () => [first, last] the relay stores (page-relative), or null
    this.collapsed = new Set();   // thread ids shown as their header only
    this.measure = null;          // {a, b} shift-drag measurement (ns)
    this.rulerLabels = [];
    this.labelWidth = new Map();  // site -> [name width px, name]
    this.installInput();
    const loop = () => { this.tick(); requestAnimationFrame(loop); };
    requestAnimationFrame(loop);
  }
  setSession(sd) { colourCache.clear(); mergedCache.clear(); this.labelWidth.clear(); this.sd = sd; this.live = true; this.scrollY = 0; this.measure = null; this.needs = true; this.lastVersion = -1; }
  setRange(t0, t1, fromUser) {
    if (t1 - t0 < MIN_RANGE) { const c = (t0 + t1) / 2; t0 = c - MIN_RANGE / 2; t1 = c + MIN_RANGE / 2; }
    this.t0 = t0; this.t1 = t1; this.needs = true;
    if (this.hover && !this.drag) this.hideTip(); // what it described has moved
    if (fromUser && this.live) { this.live = false; this.opts.onLiveChange && this.opts.onLiveChange(false); }
  }
  setLive(on) {
    this.live = on; this.needs = true;
    this.opts.onLiveChange && this.opts.onLiveChange(on);
  }
  // The whole session: everything the relay stores (lod.js knows its range), else what is loaded.
  fitAll() {
    const sd = this.sd;
    if (!sd) return;
    let a = sd.minTime, b = sd.maxTime;
    const r = this.range && this.range();
    if (r && r[1] > r[0]) { a = Math.min(r[0], a); b = Math.max(r[1], b > -Infinity ? b : r[1]); }
    if (!(b > a)) return;
    this.setRange(a, b, true);
  }
  tick() {
    const sd = this.sd;
    if (sd && this.live && sd.maxTime > -Infinity) {
      const w = this.t1 - this.t0;
      if (this.t1 !== sd.maxTime) { this.t1 = sd.maxTime; this.t0 = sd.maxTime - w; this.needs = true; }
    }
    if (sd && sd.version !== this.lastVersion) { this.lastVersion = sd.version; this.needs = true; }
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(1, Math.floor(this.cv.clientWidth * dpr)), H = Math.max(1, Math.floor(this.cv.clientHeight * dpr));
    if (this.cv.width !== W || this.cv.height !== H) { this.cv.width = W; this.cv.height = H; this.needs = true; }
    if (this.lod && sd) this.lod.update(this.t0, this.t1, this.cv.clientWidth, sd.uncovered(this.t0, this.t1));
    if (!this.needs) return;
    this.needs = false;
    this.draw();
  }
  // x in CSS px → time
  xToT(x) { return this.t0 + (x / this.cv.clientWidth) * (this.t1 - this.t0); }

  // Threads to show: those of the live store and of the fetched summaries, with their depth.
  threadList() {
    const sd = this.sd, m = new Map();
    for (const th of sd.threads.values()) m.set(th.id, { id: th.id, th, depth: th.lanes.length });
    if (this.lod) for (const set of [this.lod.overview, this.lod.view, this.lod.detail]) {
      if (!set) continue;
      for (const [t, a] of set.threads) {
        if (this.threadFilter && !this.threadFilter(t)) continue;
        const e = m.get(t) || { id: t, th: sd.thread(t), depth: 0 };
        e.depth = Math.max(e.depth, a.length);
        m.set(t, e);
      }
    }
    return [...m.values()].sort((a, b) => a.id - b.id);
  }
  draw() {
    const ctx = this.ctx, dpr = window.devicePixelRatio || 1;
    const W = this.cv.clientWidth, H = this.cv.clientHeight;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = '#15171c';
    ctx.fillRect(0, 0, W, H);
    this.frameCount++;
    this.drawn = 0;
    const sd = this.sd;
    this.layout = [];
    if (!sd) return;
    const t0 = this.t0, t1 = this.t1, span = t1 - t0, k = W / span, nsPerPx = span / W;
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    // thread layout
    let y = 20 - this.scrollY;
    for (const e of this.threadList()) {
      const collapsed = this.collapsed.has(e.id);
      const rows = collapsed ? 0 : e.depth;
      this.layout.push({ thread: e.th, y, rows, collapsed });
      y += HEAD + rows * ROW + 4;
    }
    this.contentHeight = y + this.scrollY;
    const maxScroll = Math.max(0, this.contentHeight - H + 8);
    if (this.scrollY > maxScroll) { this.scrollY = maxScroll; this.needs = true; }
    if (this.opts.onLayout) this.opts.onLayout(this.contentHeight, this.scrollY, H);
    // frame boundaries (under the zones)
    this.drawFrames(ctx, W, H, k);
    // the live store where it holds everything, what lod.js fetched elsewhere
    const unc = sd.uncovered(t0, t1), live = [];
    let plan = [];
    let a = t0;
    for (const [u0, u1] of unc) {
      if (u0 > a) live.push([a, u0]);
      if (this.lod) plan = plan.concat(this.lod.plan(u0, u1));
      a = u1;
    }
    if (a < t1) live.push([a, t1]);
    this.plan = plan;
    this.liveParts = live;
    for (const L of this.layout) {
      const th = L.thread;
      if (L.y > H || L.y + HEAD + L.rows * ROW < 0) continue;
      ctx.fillStyle = '#8ab4f8';
      const label = (L.collapsed ? '▸ ' : '▾ ') + (th.name || 'thread') + ' #' + th.id;
      ctx.fillText(label, 4, L.y + HEAD / 2);
      for (let d = 0; d < L.rows; d++) {
        const ly = L.y + HEAD + d * ROW;
        if (ly > H || ly + ROW < 0) continue;
        for (const seg of plan) {
          const lane = seg.set.lane(th.id, d);
          if (lane) this.drawLane(ctx, lane, ly, t0, t1, k, nsPerPx, W, seg.from, seg.to);
        }
        const lane = th.lanes[d];
        if (lane) for (const [p0, p1] of live) this.drawLane(ctx, lane, ly, t0, t1, k, nsPerPx, W, p0, p1);
      }
    }
    // gaps from a slow connection
    for (const g of sd.gaps) {
      if (g.to < t0 || g.from > t1) continue;
      const x0 = Math.max(0, (g.from - t0) * k), x1 = Math.min(W, (g.to - t0) * k);
      ctx.fillStyle = 'rgba(255,80,80,0.18)';
      ctx.fillRect(x0, 0, Math.max(1, x1 - x0), H);
    }
    this.drawMeasure(ctx, W, H, k);
    this.drawRuler(ctx, W, k);
  }
  drawMeasure(ctx, W, H, k) {
    const m = this.measure;
    if (!m) return;
    const a = Math.min(m.a, m.b), b = Math.max(m.a, m.b);
    const x0 = (a - this.t0) * k, x1 = (b - this.t0) * k;
    ctx.fillStyle = 'rgba(138,180,248,0.16)';
    ctx.fillRect(x0, 16, Math.max(1, x1 - x0), H);
    ctx.fillStyle = '#8ab4f8';
    ctx.fillRect(x0, 16, 1, H); ctx.fillRect(x1, 16, 1, H);
    const txt = fmtNs(b - a);
    const w = ctx.measureText(txt).width + 10;
    const cx = Math.min(Math.max((x0 + x1) / 2 - w / 2, 2), W - w - 2);
    ctx.fillStyle = '#0b0c0f'; ctx.fillRect(cx, 20, w, 16);
    ctx.fillStyle = '#e3e3e3'; ctx.fillText(txt, cx + 5, 28);
  }
  // Ticks every 1, 2 or 5 × 10^k ns, as close as the labels allow. The first label is the
  // session's own time with enough digits for the step; the others are offsets from it in the
  // step's unit (s, ms, µs, ns), so neighbours always read differently.
  drawRuler(ctx, W, k) {
    const span = this.t1 - this.t0, o = this.origin;
    ctx.fillStyle = '#1e2128'; ctx.fillRect(0, 0, W, 16);
    let st = 1;
    const minPx = 70;
    for (let e = 0; e < 20; e++) {
      const p = Math.pow(10, e);
      let done = false;
      for (const m of [1, 2, 5]) { if (m * p * k >= minPx) { st = m * p; done = true; break; } }
      if (done) break;
    }
    const first = Math.ceil((this.t0 + o) / st) * st - o;
    const labels = [];
    ctx.fillStyle = '#9aa0a6';
    const base = first + o;
    const baseTxt = fmtAbs(base, st);
    const baseW = ctx.measureText(baseTxt).width;
    for (let t = first, i = 0; t < this.t1 && i < 200; t += st, i++) {
      const x = (t - this.t0) * k;
      ctx.fillRect(x, 10, 1, 6);
      const txt = i === 0 ? baseTxt : (st >= 1e9 ? fmtAbs(t + o, st) : '+' + fmtStep(t - first, st));
      if (i > 0 && i * st * k < baseW + 8 && st < 1e9) continue; // keep clear of the long first label
      ctx.fillText(txt, x + 3, 7);
      labels.push(txt);
    }
    this.rulerLabels = labels;
    this.rulerStep = st;
  }
  drawFrames(ctx, W, H, k) {
    const sd = this.sd, f = sd.frameTimes, n = sd.nFrames;
    if (!n) return;
    let lo = 0, hi = n;
    while (lo < hi) { const m = (lo + hi) >>> 1; if (f[m] < this.t0) lo = m + 1; else hi = m; }
    let hi2 = lo, lo2 = n;
    while (hi2 < lo2) { const m = (hi2 + lo2) >>> 1; if (f[m] <= this.t1) hi2 = m + 1; else lo2 = m; }
    if (hi2 - lo > W / 4) return; // frames closer than 4 px: the lines would only be noise
    let lastX = -10;
    ctx.fillStyle = 'rgba(255,255,255,0.13)';
    for (let i = lo; i < n && f[i] <= this.t1; i++) {
      const x = (f[i] - this.t0) * k;
      if (x - lastX < 3) continue; // too dense: one line per few px
      ctx.fillRect(Math.floor(x), 16, 1, H);
      lastX = x;
    }
  }
  // Draws one lane. Consecutive pieces narrower than a pixel that touch within a pixel are merged
  // into one rectangle; at a coarse zoom the LOD level already merged them.
  // Only zones starting in [c0, c1) are drawn — whole, so a zone that crosses into the next
  // source's range is not cut — and those starting before c0 only when c0 is the view's start.
  drawLane(ctx, lane, y, t0, t1, k, nsPerPx, W, c0, c1) {
    const sd = this.sd, hidden = this.hidden;
    const lv = lane.levelFor(nsPerPx);
    const counted = !!lane.count;
    const clipX0 = Math.max(0, (c0 - t0) * k), clipX1 = W;
    if (!(Math.min(W, (c1 - t0) * k) > clipX0) && c1 < t1) return;
    const from = Math.max(t0, c0), to = Math.min(t1, c1);
    const startMin = c0 > t0 ? c0 : -Infinity;
    let runX0 = -1, runX1 = -1, runCol = null;
    const flush = () => {
      if (runCol !== null) { ctx.fillStyle = runCol; ctx.fillRect(runX0, y, Math.max(1, runX1 - runX0), ROW - 1); this.drawn++; runCol = null; }
    };
    const piece = (x0, x1, site, merged, label) => {
      if (x0 < clipX0) x0 = clipX0;
      if (x1 > clipX1) x1 = clipX1;
      if (x1 <= x0) return;
      if (x1 - x0 < 2 || merged) {
        const col = merged ? this.mergedColour(site) : siteColour(site, sd.sites.get(site));
        if (runCol !== null && x0 <= runX1 + 1) { if (x1 > runX1) runX1 = x1; return; }
        flush(); runX0 = x0; runX1 = x1; runCol = col;
        return;
      }
      flush();
      const s = sd.sites.get(site);
      ctx.fillStyle = siteColour(site, s);
      const cx0 = Math.max(x0, -1), cx1 = Math.min(x1, W + 1);
      ctx.fillRect(cx0, y, cx1 - cx0 - 0.5, ROW - 1);
      this.drawn++;
      if (cx1 - cx0 > 24 && label) {
        ctx.fillStyle = '#111';
        const tx = Math.max(cx0, 0) + 3;
        const txt = this.fitName(ctx, site, s, cx1 - tx - 3);
        if (txt) ctx.fillText(txt, tx, y + ROW / 2);
      }
    };
    if (lv && !hidden) {
      let i = lane.levelFirstEndingAfter(lv, from);
      for (; i < lv.n; i++) {
        const a = lv.first[i];
        const s = lane.start[a];
        if (s >= to) break;
        if (s < startMin) continue;
        const x0 = (s - t0) * k, x1 = (lv.end[i] - t0) * k;
        const merged = lv.first[i] !== lv.last[i];
        piece(x0, x1, lane.site[a], merged, true);
      }
    } else {
      let i = lane.firstEndingAfter(from);
      // With a client-side filter and a coarse zoom, skip raw zones that fall in an already-drawn pixel.
      for (; i < lane.n; i++) {
        const s = lane.start[i];
        if (s >= to) break;
        if (s < startMin) continue;
        const site = lane.site[i];
        if (hidden && hidden(site)) continue;
        const x0 = (s - t0) * k, x1 = (s + lane.dur[i] - t0) * k;
        if (counted && lane.count[i] > 1) { piece(x0, x1, site, true, false); continue; }
        if (x1 - x0 < 1 && runCol !== null && x1 <= runX1 + 1) {
          // inside the current merged pixel run: skip ahead to the first zone past this pixel
          const tNext = t0 + (runX1 + 1) / k;
          let lo = i + 1, hi = lane.n;
          while (lo < hi) { const m = (lo + hi) >>> 1; if (lane.start[m] + lane.dur[m] <= tNext) lo = m + 1; else hi = m; }
          i = lo - 1;
          continue;
        }
        piece(x0, x1, site, false, true);
      }
    }
    flush();
  }
  // A zone's name cut to fit `avail` px, ending in "…" when cut; '' when not even that fits.
  fitName(ctx, site, s, avail) {
    let e = this.labelWidth.get(site);
    if (!e) { const name = s ? s.name : 'site ' + site; e = [ctx.measureText(name).width, name]; this.labelWidth.set(site, e); }
    const [w, name] = e;
    if (w <= avail) return name;
    const per = w / Math.max(1, name.length);
    const n = Math.floor((avail - per) / per);
    if (n < 1) return '';
    return name.slice(0, n) + '…';
  }
  // Runs of merged sub-pixel zones: the first zone's colour, darkened, so they read as "many".
  mergedColour(site) {
    let c = mergedCache.get(site);
    if (c) return c;
    const base = siteColour(site, this.sd.sites.get(site));
    if (base.startsWith('hsl(')) c = base.replace(/,(\d+)%\)$/, ',38%)');
    else {
      const v = parseInt(base.slice(1), 16);
      const f = (x) => Math.round(x * 0.62 + 0x15 * 0.38);
      c = `rgb(${f(v >> 16)},${f((v >> 8) & 255)},${f(v & 255)})`;
    }
    mergedCache.set(site, c);
    return c;
  }

  // ---- hit testing --------------------------------------------------------------------------
  // The lane source drawn at time t: the live store where it covers t, else the plan's segment.
  laneAt(th, depth, t) {
    for (const [a, b] of this.liveParts || []) if (t >= a && t <= b) return th.lanes[depth] || null;
    for (const seg of this.plan || []) if (t >= seg.from && t < seg.to) return seg.set.lane(th.id, depth) || null;
    return null;
  }
  // The thread whose header row is at y, or null.
  headerAt(y) {
    for (const L of this.layout) if (y >= L.y && y < L.y + HEAD) return L.thread;
    return null;
  }
  hit(x, y) {
    const sd = this.sd;
    if (!sd) return null;
    for (const L of this.layout) {
      const th = L.thread;
      const rel = y - L.y - HEAD;
      if (rel < 0 || rel >= L.rows * ROW) continue;
      const t = this.xToT(x), tol = (this.t1 - this.t0) / this.cv.clientWidth; // one px
      const lane = this.laneAt(th, Math.floor(rel / ROW), t);
      if (!lane) return null;
      let i = lane.firstEndingAfter(t - tol);
      let best = -1;
      for (; i < lane.n && lane.start[i] <= t + tol; i++) {
        if (this.hidden && this.hidden(lane.site[i])) continue;
        best = i;
        if (lane.start[i] <= t && lane.start[i] + lane.dur[i] >= t) break;
      }
      if (best < 0) return null;
      const count = lane.count ? lane.count[best] : 1;
      return { thread: th, lane, i: best, site: lane.site[best], start: lane.start[best], dur: lane.dur[best], count,
        extra: lane.count ? undefined : sd.zoneExtra(th.id, lane, best) };
    }
    return null;
  }

  // ---- input --------------------------------------------------------------------------------
  installInput() {
    const cv = this.cv;
    cv.tabIndex = 0;
    cv.addEventListener('wheel', (e) => {
      e.preventDefault();
      if (e.shiftKey) { this.scrollTo(this.scrollY + e.deltaY); return; }
      const r = cv.getBoundingClientRect();
      this.zoomAt(e.clientX - r.left, Math.pow(1.0015, e.deltaY));
    }, { passive: false });
    cv.addEventListener('mousedown', (e) => {
      cv.focus();
      const r = cv.getBoundingClientRect();
      if (e.shiftKey) {
        const t = this.xToT(e.clientX - r.left);
        this.measure = { a: t, b: t };
        this.drag = { measuring: true };
        this.needs = true;
        return;
      }
      this.drag = { x: e.clientX, y: e.clientY, t0: this.t0, t1: this.t1, sy: this.scrollY, moved: false };
    });
    window.addEventListener('mousemove', (e) => {
      const r = cv.getBoundingClientRect();
      if (this.drag && this.drag.measuring) {
        this.measure.b = this.xToT(Math.min(Math.max(e.clientX - r.left, 0), r.width));
        this.needs = true;
        this.opts.onMeasure && this.opts.onMeasure(this.measured());
        this.hideTip();
        return;
      }
      if (this.drag) {
        const dx = e.clientX - this.drag.x, dy = e.clientY - this.drag.y;
        if (Math.abs(dx) + Math.abs(dy) > 3) this.drag.moved = true;
        if (this.drag.moved) {
          const dt = -dx * (this.drag.t1 - this.drag.t0) / cv.clientWidth;
          this.setRange(this.drag.t0 + dt, this.drag.t1 + dt, true);
          this.scrollTo(this.drag.sy - dy);
        }
        this.hideTip();
        return;
      }
      const x = e.clientX - r.left, y = e.clientY - r.top;
      if (x < 0 || y < 0 || x > r.width || y > r.height) { this.hideTip(); return; }
      this.showTip(this.hit(x, y), e.clientX, e.clientY);
    });
    window.addEventListener('mouseup', (e) => {
      const d = this.drag;
      this.drag = null;
      if (d && d.measuring) {
        if (this.measure && this.measure.a === this.measure.b) this.measure = null;
        this.opts.onMeasure && this.opts.onMeasure(this.measured());
        this.needs = true;
        return;
      }
      if (!d || d.moved) return;
      const r = cv.getBoundingClientRect();
      const th = this.headerAt(e.clientY - r.top);
      if (th) { this.toggleThread(th.id); return; }
      const h = this.hit(e.clientX - r.left, e.clientY - r.top);
      if (h) this.select(h.site);
    });
  }
  // The measured range {t0, t1, dur} (ns), or null.
  measured() {
    const m = this.measure;
    if (!m) return null;
    const a = Math.min(m.a, m.b), b = Math.max(m.a, m.b);
    return { t0: a, t1: b, dur: b - a };
  }
  toggleThread(id) {
    if (this.collapsed.has(id)) this.collapsed.delete(id); else this.collapsed.add(id);
    this.needs = true;
  }
  scrollTo(y) {
    const H = this.cv.clientHeight;
    this.scrollY = Math.max(0, Math.min(y, Math.max(0, (this.contentHeight || 0) - H + 8)));
    this.needs = true;
  }
  select(site) {
    this.selected = site;
    const st = this.sd.siteStats(site, this.t0, this.t1);
    this.opts.onSelect && this.opts.onSelect(site, st);
  }
  zoomAt(x, f) {
    const t = this.xToT(x);
    const n0 = t - (t - this.t0) * f, n1 = t + (this.t1 - t) * f;
    this.setRange(n0, n1, true);
  }
  // Keyboard actions (keys.js routes keys here from anywhere on the page). Returns true if used.
  action(key) {
    const W = this.cv.clientWidth, span = this.t1 - this.t0;
    switch (key) {
      case ' ': if (this.opts.canLive && !this.opts.canLive()) return true; this.setLive(!this.live); break;
      case '+': case '=': case 'w': this.zoomAt(W / 2, 0.8); break;
      case '-': case '_': case 's': this.zoomAt(W / 2, 1.25); break;
      case 'ArrowLeft': case 'a': this.setRange(this.t0 - span * 0.1, this.t1 - span * 0.1, true); break;
      case 'ArrowRight': case 'd': this.setRange(this.t0 + span * 0.1, this.t1 + span * 0.1, true); break;
      case 'ArrowUp': this.scrollTo(this.scrollY - 40); break;
      case 'ArrowDown': this.scrollTo(this.scrollY + 40); break;
      case 'PageUp': this.scrollTo(this.scrollY - this.cv.clientHeight * 0.8); break;
      case 'PageDown': this.scrollTo(this.scrollY + this.cv.clientHeight * 0.8); break;
      case 'Home': case 'f': this.fitAll(); break;
      case 'End': case 'l': if (this.opts.canLive && !this.opts.canLive()) { this.fitEnd(); break; } this.setLive(true); break;
      case 'c': for (const L of this.layout) this.collapsed.add(L.thread.id); this.needs = true; break;
      case 'e': this.collapsed.clear(); this.needs = true; break;
      case 'Escape': this.measure = null; this.needs = true; this.opts.onMeasure && this.opts.onMeasure(null); break;
      default: return false;
    }
    return true;
  }
  // Recordings have no live edge: End shows their last moments at the current zoom.
  fitEnd() {
    const r = this.range && this.range();
    const end = Math.max(r ? r[1] : -Infinity, this.sd ? this.sd.maxTime : -Infinity);
    if (end > -Infinity) { const w = this.t1 - this.t0; this.setRange(end - w, end, true); }
  }
  showTip(h, cx, cy) {
    this.hover = h;
    if (!h) { this.hideTip(); return; }
    const s = this.sd.sites.get(h.site);
    const esc = (v) => String(v).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
    let html = h.count > 1
      ? `<b>${h.count.toLocaleString()} zones</b> merged at this zoom (longest: ${esc(s ? s.name : 'site ' + h.site)})<br>${fmtNs(h.dur)} span`
      : `<b>${esc(s ? s.name : 'site ' + h.site)}</b><br>${fmtNs(h.dur)}`;
    if (s && h.count <= 1) html += `<br><span class="dim">${esc(s.file)}:${s.line}</span>`;
    html += `<br><span class="dim">thread ${esc(h.thread.name || h.thread.id)}, depth ${h.lane.depth}, at ${fmtAbs(h.start + this.origin, 1)}</span>`;
    if (h.extra) html += `<br>extra: <code>${esc(h.extra)}</code>`;
    const tip = this.tip;
    tip.innerHTML = html;
    tip.style.display = 'block';
    // kept inside the window: flipped to the left of / above the pointer when it would overflow
    const w = tip.offsetWidth, hh = tip.offsetHeight, vw = window.innerWidth, vh = window.innerHeight;
    let left = cx + 14, top = cy + 14;
    if (left + w > vw - 4) left = Math.max(4, cx - 14 - w);
    if (top + hh > vh - 4) top = Math.max(4, cy - 14 - hh);
    tip.style.left = left + 'px';
    tip.style.top = top + 'px';
  }
  hideTip() { this.hover = null; this.tip.style.display = 'none'; }
}
