// framegraph.js — the frame-time graph: every frame of the session (the relay's stored frames,
// fetched once, plus the live ones as they arrive), drawn on a time axis with one bar per pixel
// column at most (level of detail: the slowest frame of the column). Shows the flame chart's view
// as a band, holds still while the flame chart is paused, a budget line with frames over it in
// red, hover with frame number and time, click to show a frame, drag to select frames.

import { fmtNs } from './flame.js';

const H = 130;
const FETCH_LIMIT = 1000000;

export class FrameGraph {
  constructor(el, ctx) {
    this.el = el;
    this.ctx = ctx;
    this.budget = 16.7e6;
    el.classList.add('framegraph');
    el.innerHTML = `<canvas></canvas><div class="fg-ctl">budget <select class="fg-budget"><option value="16.7">16.7 ms</option><option value="33.3">33.3 ms</option></select>
      <span class="fg-sel dim"></span><button class="fg-clear" hidden>clear selection</button></div><div class="fg-tip" hidden></div>`;
    this.cv = el.querySelector('canvas');
    this.tipEl = el.querySelector('.fg-tip');
    this.selEl = el.querySelector('.fg-sel');
    el.querySelector('.fg-budget').addEventListener('change', (e) => { this.budget = +e.target.value * 1e6; this.needs = true; });
    el.querySelector('.fg-clear').addEventListener('click', () => this.setSelection(null));
    this.reset(null);
    this.installInput();
    const loop = () => { this.tick(); requestAnimationFrame(loop); };
    requestAnimationFrame(loop);
  }
  // A new SessionData: forget frames, fetch the relay's once its origin is known.
  reset(sd) {
    this.sd = sd;
    this.times = new Float64Array(0); // frame starts, relative ns, sorted
    this.n = 0;
    this.fetched = false;
    this.fetching = false;
    this.liveSeen = 0;  // sd frames merged so far
    this.x0 = 0; this.x1 = 1;
    this.selection = null;
    this.hover = null;
    this.drag = null;
    this.needs = true;
    this.sig = '';
    if (this.selEl) { this.selEl.textContent = ''; this.el.querySelector('.fg-clear').hidden = true; }
  }
  async fetchHistory() {
    const ctx = this.ctx, sd = this.sd;
    if (this.fetching || this.fetched || !sd || !ctx.session() || !ctx.historyDone()) return;
    this.fetching = true;
    try {
      const j = await ctx.api('GET', `/api/sessions/${encodeURIComponent(ctx.session())}/events?type=frame&limit=${FETCH_LIMIT}`);
      if (this.sd !== sd) return;
      const t = j.events.filter((e) => e.site === 0).map((e) => e.time_ns - sd.origin);
      this.merge(t);
      this.fetched = true;
      this.truncated = j.truncated;
    } catch (e) { /* retried on the next tick */ } finally { this.fetching = false; }
  }
  merge(extra) {
    if (!extra.length) return;
    const all = Array.from(this.times.subarray(0, this.n)).concat(extra).sort((a, b) => a - b);
    const u = all.filter((v, i) => i === 0 || v !== all[i - 1]);
    this.times = Float64Array.from(u);
    this.n = u.length;
    this.needs = true;
  }
  // Frames that arrived on the stream since the last call.
  pullLive() {
    const sd = this.sd;
    if (!sd || sd.nFrames === this.liveSeen) return;
    if (sd.nFrames < this.liveSeen) this.liveSeen = 0;
    const last = this.n ? this.times[this.n - 1] : -Infinity;
    const add = [];
    let inOrder = true;
    for (let i = this.liveSeen; i < sd.nFrames; i++) { const t = sd.frameTimes[i]; add.push(t); if (t <= last) inOrder = false; }
    this.liveSeen = sd.nFrames;
    if (inOrder && add.every((v, i) => i === 0 || v > add[i - 1])) {
      const need = this.n + add.length;
      if (need > this.times.length) { const g = new Float64Array(Math.max(need, this.times.length * 2, 1024)); g.set(this.times.subarray(0, this.n)); this.times = g; }
      for (const t of add) this.times[this.n++] = t;
      this.needs = true;
    } else this.merge(add);
  }
  // Frame index i lasts from times[i] to times[i + 1].
  frames() { return Math.max(0, this.n - 1); }
  dur(i) { return this.times[i + 1] - this.times[i]; }
  // Index of the frame holding time t (or -1).
  frameAt(t) {
    let lo = 0, hi = this.n;
    while (lo < hi) { const m = (lo + hi) >>> 1; if (this.times[m] <= t) lo = m + 1; else hi = m; }
    const i = lo - 1;
    return i >= 0 && i < this.frames() ? i : -1;
  }
  tick() {
    const sd = this.ctx.sd();
    if (sd !== this.sd) this.reset(sd);
    if (!sd) return;
    if (!this.fetched) this.fetchHistory();
    this.pullLive();
    const flame = this.ctx.flame;
    // x range: the whole session while live; frozen while the flame chart is paused
    if (flame.live && this.n > 1 && !this.drag) {
      if (this.x0 !== this.times[0] || this.x1 !== this.times[this.n - 1]) { this.x0 = this.times[0]; this.x1 = this.times[this.n - 1]; this.needs = true; }
    }
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(1, Math.floor(this.el.clientWidth * dpr)), Hp = Math.floor(H * dpr);
    if (this.cv.width !== W || this.cv.height !== Hp) { this.cv.width = W; this.cv.height = Hp; this.needs = true; }
    const sig = `${flame.t0}:${flame.t1}`;
    if (sig !== this.sig) { this.sig = sig; this.needs = true; }
    if (!this.needs) return;
    this.needs = false;
    this.draw();
  }
  X(t) { return (t - this.x0) / (this.x1 - this.x0 || 1) * this.el.clientWidth; }
  T(x) { return this.x0 + x / (this.el.clientWidth || 1) * (this.x1 - this.x0); }
  // The slowest frame shown in pixel column x (level of detail), or -1.
  columnFrame(x) {
    const a = this.T(x), b = this.T(x + 1);
    let i = this.frameAt(a);
    let best = i, bd = i >= 0 ? this.dur(i) : -1;
    if (i < 0) { let lo = 0, hi = this.n; while (lo < hi) { const m = (lo + hi) >>> 1; if (this.times[m] < a) lo = m + 1; else hi = m; } i = lo; } else i++;
    for (; i < this.frames() && this.times[i] < b; i++) { const d = this.dur(i); if (d > bd) { bd = d; best = i; } }
    return best;
  }
  yMax() {
    // scale to the frames in range, but keep the budget line in view and spikes from flattening all
    let m = 0;
    const f0 = Math.max(0, this.frameAt(this.x0)), nf = this.frames();
    for (let i = f0; i < nf && this.times[i] <= this.x1; i++) { const d = this.dur(i); if (d > m) m = d; }
    return Math.min(Math.max(m * 1.1, this.budget * 1.5), this.budget * 6);
  }
  draw() {
    const ctx = this.cv.getContext('2d'), dpr = window.devicePixelRatio || 1;
    const W = this.el.clientWidth;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = '#101216';
    ctx.fillRect(0, 0, W, H);
    this.columns = 0; this.over = 0;
    if (this.frames() < 1) return;
    const ym = this.yMax(), top = 4, base = H - 14, scale = (base - top) / ym;
    this.ymax = ym;
    const bars = [];
    let prev = -2;
    for (let x = 0; x < W; x++) {
      const i = this.columnFrame(x);
      if (i < 0) continue;
      const d = this.dur(i);
      const h = Math.max(1, Math.min(d, ym) * scale);
      ctx.fillStyle = d > this.budget ? '#ff6b6b' : '#8ab4f8';
      ctx.fillRect(x, base - h, 1, h);
      if (d > ym) { ctx.fillStyle = '#ffd54f'; ctx.fillRect(x, top - 2, 1, 3); }
      if (i !== prev) { bars.push(i); if (d > this.budget) this.over++; prev = i; }
      this.columns++;
    }
    this.shown = bars; // frame indexes drawn, left to right (tests)
    // the flame chart's view
    const f = this.ctx.flame;
    const v0 = this.X(f.t0), v1 = this.X(f.t1);
    ctx.fillStyle = 'rgba(255,255,255,0.12)';
    ctx.fillRect(v0, 0, Math.max(1, v1 - v0), base);
    ctx.strokeStyle = 'rgba(255,255,255,0.6)';
    ctx.strokeRect(Math.round(v0) + 0.5, 0.5, Math.max(1, Math.round(v1 - v0)), base - 1);
    // selection
    const s = this.drag ? this.drag.sel : this.selection;
    if (s) {
      ctx.fillStyle = 'rgba(255,170,60,0.25)';
      const s0 = this.X(s.t0), s1 = this.X(s.t1);
      ctx.fillRect(s0, 0, Math.max(1, s1 - s0), base);
    }
    // budget line
    const by = base - this.budget * scale;
    ctx.strokeStyle = '#ffd54f';
    ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(0, Math.round(by) + 0.5); ctx.lineTo(W, Math.round(by) + 0.5); ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = '#ffd54f';
    ctx.font = '10px system-ui, sans-serif';
    ctx.fillText(`${(this.budget / 1e6).toFixed(1)} ms`, W - 46, by - 3);
    ctx.fillStyle = '#9aa0a6';
    ctx.fillText(fmtNs(this.x0), 2, H - 3);
    const endLabel = fmtNs(this.x1);
    ctx.fillText(endLabel, W - ctx.measureText(endLabel).width - 2, H - 3);
    ctx.fillText(`${this.frames().toLocaleString()} frames, ${this.over} shown over budget`, W / 2 - 70, H - 3);
  }
  // A frame range from two frame indexes (inclusive).
  rangeOf(a, b) {
    if (a > b) [a, b] = [b, a];
    return { f0: a, f1: b, t0: this.times[a], t1: this.times[b + 1], label: a === b ? `frame ${a}` : `frames ${a}–${b}` };
  }
  setSelection(sel) {
    this.selection = sel;
    this.selEl.textContent = sel ? `${sel.label} (${fmtNs(sel.t1 - sel.t0)})` : '';
    this.el.querySelector('.fg-clear').hidden = !sel;
    this.needs = true;
    if (this.ctx.onFrameSelection) this.ctx.onFrameSelection(sel);
  }
  installInput() {
    const cv = this.cv;
    const pos = (e) => { const r = cv.getBoundingClientRect(); return e.clientX - r.left; };
    cv.addEventListener('mousedown', (e) => {
      const i = this.columnFrame(Math.floor(pos(e)));
      if (i < 0) return;
      this.drag = { i0: i, x0: pos(e), moved: false, sel: null };
    });
    window.addEventListener('mousemove', (e) => {
      if (this.drag) {
        if (Math.abs(pos(e) - this.drag.x0) > 3) this.drag.moved = true;
        const x = Math.min(this.el.clientWidth - 1, Math.max(0, Math.floor(pos(e))));
        const i = this.columnFrame(x);
        if (this.drag.moved && i >= 0) { this.drag.sel = this.rangeOf(this.drag.i0, i); this.needs = true; }
      }
    });
    window.addEventListener('mouseup', () => {
      const d = this.drag;
      if (!d) return;
      this.drag = null;
      if (d.moved && d.sel) this.setSelection(d.sel);
      else { // click: show that frame in the flame chart
        const t0 = this.times[d.i0], t1 = this.times[d.i0 + 1];
        this.ctx.flame.setRange(t0, t1, true);
      }
      this.needs = true;
    });
    cv.addEventListener('mousemove', (e) => {
      const x = Math.floor(pos(e)), i = this.columnFrame(x);
      if (i < 0) { this.hideTip(); return; }
      this.hover = { frame: i, start: this.times[i], dur: this.dur(i) };
      this.tipEl.textContent = `frame ${i} · ${fmtNs(this.dur(i))} · at ${fmtNs(this.times[i])}`;
      this.tipEl.hidden = false;
      this.tipEl.style.left = Math.min(x + 12, this.el.clientWidth - 220) + 'px';
    });
    cv.addEventListener('mouseleave', () => this.hideTip());
  }
  hideTip() { this.hover = null; this.tipEl.hidden = true; }
}
