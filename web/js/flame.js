// flame.js — the canvas flame chart: one lane group per thread, nested zones, frame boundaries,
// wheel zoom, drag pan, keyboard shortcuts, hover tooltip and click-for-statistics. Draws through
// the level-of-detail indexes of store.js so that the cost of a frame follows pixels, not zones.

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
    this.opts = opts; // {onSelect(site, stats), onUserMove()}
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
    this.installInput();
    const loop = () => { this.tick(); requestAnimationFrame(loop); };
    requestAnimationFrame(loop);
  }
  setSession(sd) { colourCache.clear(); mergedCache.clear(); this.sd = sd; this.live = true; this.scrollY = 0; this.needs = true; this.lastVersion = -1; }
  setRange(t0, t1, fromUser) {
    if (t1 - t0 < MIN_RANGE) { const c = (t0 + t1) / 2; t0 = c - MIN_RANGE / 2; t1 = c + MIN_RANGE / 2; }
    this.t0 = t0; this.t1 = t1; this.needs = true;
    if (fromUser && this.live) { this.live = false; this.opts.onLiveChange && this.opts.onLiveChange(false); }
  }
  setLive(on) {
    this.live = on; this.needs = true;
    this.opts.onLiveChange && this.opts.onLiveChange(on);
  }
  fitAll() {
    const sd = this.sd;
    if (!sd || !(sd.maxTime > sd.minTime)) return;
    this.setRange(sd.minTime, sd.maxTime, true);
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
    if (!this.needs) return;
    this.needs = false;
    this.draw();
  }
  // x in CSS px → time
  xToT(x) { return this.t0 + (x / this.cv.clientWidth) * (this.t1 - this.t0); }

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
    const threads = [...sd.threads.values()].sort((a, b) => a.id - b.id);
    for (const th of threads) {
      this.layout.push({ thread: th, y });
      y += HEAD + th.lanes.length * ROW + 4;
    }
    this.contentHeight = y + this.scrollY;
    // frame boundaries (under the zones)
    this.drawFrames(ctx, W, H, k);
    for (const L of this.layout) {
      const th = L.thread;
      if (L.y > H || L.y + HEAD + th.lanes.length * ROW < 0) continue;
      ctx.fillStyle = '#8ab4f8';
      ctx.fillText((th.name || 'thread') + ' #' + th.id, 4, L.y + HEAD / 2);
      for (const lane of th.lanes) {
        const ly = L.y + HEAD + lane.depth * ROW;
        if (ly > H || ly + ROW < 0) continue;
        this.drawLane(ctx, lane, ly, t0, t1, k, nsPerPx, W);
      }
    }
    // gaps from a slow connection
    for (const g of sd.gaps) {
      if (g.to < t0 || g.from > t1) continue;
      const x0 = Math.max(0, (g.from - t0) * k), x1 = Math.min(W, (g.to - t0) * k);
      ctx.fillStyle = 'rgba(255,80,80,0.18)';
      ctx.fillRect(x0, 0, Math.max(1, x1 - x0), H);
    }
    this.drawRuler(ctx, W, k);
    if (this.selected) {
      ctx.strokeStyle = '#fff'; ctx.lineWidth = 1;
    }
  }
  drawRuler(ctx, W, k) {
    const span = this.t1 - this.t0;
    const step = Math.pow(10, Math.floor(Math.log10(span / 8)));
    const mult = span / step > 40 ? 5 : span / step > 16 ? 2 : 1;
    const st = step * mult;
    ctx.fillStyle = '#1e2128'; ctx.fillRect(0, 0, W, 16);
    ctx.fillStyle = '#9aa0a6'; ctx.strokeStyle = '#444';
    const first = Math.ceil(this.t0 / st) * st;
    for (let t = first; t < this.t1; t += st) {
      const x = (t - this.t0) * k;
      ctx.fillRect(x, 10, 1, 6);
      ctx.fillText(fmtNs(t), x + 3, 7);
    }
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
  drawLane(ctx, lane, y, t0, t1, k, nsPerPx, W) {
    const sd = this.sd, hidden = this.hidden;
    const lv = lane.levelFor(nsPerPx);
    let runX0 = -1, runX1 = -1, runCol = null;
    const flush = () => {
      if (runCol !== null) { ctx.fillStyle = runCol; ctx.fillRect(runX0, y, Math.max(1, runX1 - runX0), ROW - 1); this.drawn++; runCol = null; }
    };
    const piece = (x0, x1, site, merged, label) => {
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
      if (cx1 - cx0 > 30 && label) {
        ctx.fillStyle = '#111';
        const txt = s ? s.name : 'site ' + site;
        const tx = Math.max(cx0, 0) + 3;
        ctx.save(); ctx.beginPath(); ctx.rect(tx, y, cx1 - tx - 2, ROW); ctx.clip();
        ctx.fillText(txt, tx, y + ROW / 2); ctx.restore();
      }
    };
    if (lv && !hidden) {
      let i = lane.levelFirstEndingAfter(lv, t0);
      for (; i < lv.n; i++) {
        const a = lv.first[i];
        const s = lane.start[a];
        if (s >= t1) break;
        const x0 = (s - t0) * k, x1 = (lv.end[i] - t0) * k;
        const merged = lv.first[i] !== lv.last[i];
        piece(x0, x1, lane.site[a], merged, true);
      }
    } else {
      let i = lane.firstEndingAfter(t0);
      // With a client-side filter and a coarse zoom, skip raw zones that fall in an already-drawn pixel.
      for (; i < lane.n; i++) {
        const s = lane.start[i];
        if (s >= t1) break;
        const site = lane.site[i];
        if (hidden && hidden(site)) continue;
        const x0 = (s - t0) * k, x1 = (s + lane.dur[i] - t0) * k;
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
  hit(x, y) {
    const sd = this.sd;
    if (!sd) return null;
    for (const L of this.layout) {
      const th = L.thread;
      const rel = y - L.y - HEAD;
      if (rel < 0 || rel >= th.lanes.length * ROW) continue;
      const lane = th.lanes[Math.floor(rel / ROW)];
      const t = this.xToT(x), tol = (this.t1 - this.t0) / this.cv.clientWidth; // one px
      let i = lane.firstEndingAfter(t - tol);
      let best = -1;
      for (; i < lane.n && lane.start[i] <= t + tol; i++) {
        if (this.hidden && this.hidden(lane.site[i])) continue;
        best = i;
        if (lane.start[i] <= t && lane.start[i] + lane.dur[i] >= t) break;
      }
      if (best < 0) return null;
      return { thread: th, lane, i: best, site: lane.site[best], start: lane.start[best], dur: lane.dur[best],
        extra: sd.zoneExtra(th.id, lane, best) };
    }
    return null;
  }

  // ---- input --------------------------------------------------------------------------------
  installInput() {
    const cv = this.cv;
    cv.tabIndex = 0;
    cv.addEventListener('wheel', (e) => {
      e.preventDefault();
      if (e.shiftKey) { this.scrollY = Math.max(0, this.scrollY + e.deltaY); this.needs = true; return; }
      const r = cv.getBoundingClientRect();
      this.zoomAt(e.clientX - r.left, Math.pow(1.0015, e.deltaY));
    }, { passive: false });
    cv.addEventListener('mousedown', (e) => {
      cv.focus();
      this.drag = { x: e.clientX, y: e.clientY, t0: this.t0, t1: this.t1, sy: this.scrollY, moved: false };
    });
    window.addEventListener('mousemove', (e) => {
      const r = cv.getBoundingClientRect();
      if (this.drag) {
        const dx = e.clientX - this.drag.x, dy = e.clientY - this.drag.y;
        if (Math.abs(dx) + Math.abs(dy) > 3) this.drag.moved = true;
        if (this.drag.moved) {
          const dt = -dx * (this.drag.t1 - this.drag.t0) / cv.clientWidth;
          this.setRange(this.drag.t0 + dt, this.drag.t1 + dt, true);
          this.scrollY = Math.max(0, this.drag.sy - dy);
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
      if (!d || d.moved) return;
      const r = cv.getBoundingClientRect();
      const h = this.hit(e.clientX - r.left, e.clientY - r.top);
      if (h) this.select(h.site);
    });
    cv.addEventListener('keydown', (e) => this.key(e));
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
  key(e) {
    const W = this.cv.clientWidth, span = this.t1 - this.t0;
    switch (e.key) {
      case ' ': this.setLive(!this.live); break;
      case '+': case '=': case 'w': this.zoomAt(W / 2, 0.8); break;
      case '-': case 's': this.zoomAt(W / 2, 1.25); break;
      case 'ArrowLeft': case 'a': this.setRange(this.t0 - span * 0.1, this.t1 - span * 0.1, true); break;
      case 'ArrowRight': case 'd': this.setRange(this.t0 + span * 0.1, this.t1 + span * 0.1, true); break;
      case 'ArrowUp': this.scrollY = Math.max(0, this.scrollY - 40); this.needs = true; break;
      case 'ArrowDown': this.scrollY += 40; this.needs = true; break;
      case 'Home': case 'f': this.fitAll(); break;
      case 'End': case 'l': this.setLive(true); break;
      default: return;
    }
    e.preventDefault();
  }
  showTip(h, cx, cy) {
    this.hover = h;
    if (!h) { this.hideTip(); return; }
    const s = this.sd.sites.get(h.site);
    const esc = (v) => String(v).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
    let html = `<b>${esc(s ? s.name : 'site ' + h.site)}</b><br>${fmtNs(h.dur)}`;
    if (s) html += `<br><span class="dim">${esc(s.file)}:${s.line}</span>`;
    html += `<br><span class="dim">thread ${esc(h.thread.name || h.thread.id)}, depth ${h.lane.depth}, at ${fmtNs(h.start)}</span>`;
    if (h.extra) html += `<br>extra: <code>${esc(h.extra)}</code>`;
    this.tip.innerHTML = html;
    this.tip.style.display = 'block';
    this.tip.style.left = (cx + 14) + 'px';
    this.tip.style.top = (cy + 14) + 'px';
  }
  hideTip() { this.tip.style.display = 'none'; }
}
