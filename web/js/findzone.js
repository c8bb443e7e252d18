// findzone.js — find zone: a name substring lists the matching call sites (GET …/stats?name=);
// picking one lists its occurrences over everything the relay stores (GET …/occurrences),
// slowest first or by time or thread, with a duration histogram (uPlot); a click on an
// occurrence (or "slowest") moves the flame chart onto it.

import { fmtNs } from './flame.js';
import { esc, analysisQuery } from './stats.js';
import { hoverValues } from './plothover.js';

export class FindZone {
  constructor(el, ctx) {
    this.el = el;
    this.ctx = ctx;
    this.sites = null;   // last site list
    this.occ = null;     // last occurrences answer
    this.site = null;
    this.sort = 'duration';
    this.hist = null;
    this.lastJump = null;
    el.innerHTML = `
      <div class="arow"><input class="fz-name" placeholder="zone name (substring)" size="22"><button class="fz-go">Find</button><span class="fz-info dim"></span></div>
      <div class="tablewrap fz-sitewrap"><table class="fz-sites"><thead><tr><th>Site</th><th>Count</th><th>Total</th><th>Max</th></tr></thead><tbody></tbody></table></div>
      <div class="arow"><b class="fz-title"></b><span class="grow"></span>
        sort <select class="fz-sort"><option value="duration">slowest first</option><option value="time">by time</option><option value="thread">by thread</option></select>
        <button class="fz-slowest">Jump to slowest</button></div>
      <div class="fz-hist"></div>
      <div class="tablewrap fz-occwrap"><table class="fz-occ"><thead><tr><th>#</th><th>Duration</th><th>Time</th><th>Thread</th><th>Depth</th></tr></thead><tbody></tbody></table></div>`;
    this.q = (s) => el.querySelector(s);
    this.q('.fz-go').addEventListener('click', () => this.search());
    this.q('.fz-name').addEventListener('keydown', (e) => { if (e.key === 'Enter') this.search(); });
    this.q('.fz-sort').addEventListener('change', () => {
      const v = this.q('.fz-sort').value;
      // thread order is a client-side sort of the slowest occurrences; time asks the relay
      const needFetch = (v === 'time') !== (this.sort === 'time');
      this.sort = v;
      if (needFetch && this.site !== null) this.pick(this.site); else this.renderOcc();
    });
    this.q('.fz-slowest').addEventListener('click', () => this.jumpSlowest());
  }
  async search(name) {
    if (name !== undefined) this.q('.fz-name').value = name;
    const n = this.q('.fz-name').value.trim();
    const ctx = this.ctx;
    if (!ctx.session()) return null;
    try {
      const j = await ctx.api('GET', `/api/sessions/${encodeURIComponent(ctx.session())}/stats?${analysisQuery(ctx, null, null, { name: n, limit: 200 })}`);
      this.sites = j;
      const tb = this.q('.fz-sites tbody');
      tb.innerHTML = j.sites.map((s) => `<tr data-site="${s.site}"><td title="${esc(s.file)}:${s.line}">${esc(s.name)}</td><td>${s.count}</td><td>${fmtNs(s.total_ns)}</td><td>${fmtNs(s.max_ns)}</td></tr>`).join('');
      for (const tr of tb.querySelectorAll('tr')) tr.addEventListener('click', () => this.pick(+tr.dataset.site));
      this.q('.fz-info').textContent = `${j.sites.length} site${j.sites.length === 1 ? '' : 's'} match`;
      if (j.sites.length === 1) await this.pick(j.sites[0].site);
      return j;
    } catch (e) { this.q('.fz-info').textContent = e.message; return null; }
  }
  async pick(site) {
    const ctx = this.ctx;
    this.site = site;
    for (const tr of this.q('.fz-sites tbody').querySelectorAll('tr')) tr.classList.toggle('sel', +tr.dataset.site === site);
    const sort = this.sort === 'time' ? 'time' : 'duration';
    try {
      const j = await ctx.api('GET', `/api/sessions/${encodeURIComponent(ctx.session())}/occurrences?${analysisQuery(ctx, null, null, { site, sort, limit: 1000, bins: 40 })}`);
      if (this.site !== site) return null;
      this.occ = j;
      const s = this.sites && this.sites.sites.find((x) => x.site === site);
      this.q('.fz-title').textContent = `${s ? s.name : 'site ' + site}: ${j.total.toLocaleString()} occurrences${j.truncated ? `, ${j.count} listed` : ''}`;
      this.renderHist();
      this.renderOcc();
      return j;
    } catch (e) { this.q('.fz-info').textContent = e.message; return null; }
  }
  // Rows as shown, in the chosen order: [start_ns, dur_ns, thread, depth].
  rows() {
    if (!this.occ) return [];
    const r = this.occ.occurrences.slice();
    if (this.sort === 'thread') r.sort((a, b) => a[2] - b[2] || b[1] - a[1]);
    return r;
  }
  renderOcc() {
    const tb = this.q('.fz-occ tbody');
    const rows = this.rows();
    const name = (t) => this.ctx.threadName(t);
    tb.innerHTML = rows.map((o, i) => `<tr data-i="${i}"><td>${i + 1}</td><td>${fmtNs(o[1])}</td><td>${fmtNs(this.ctx.toRel(o[0]))}</td><td>${esc(name(o[2]))}</td><td>${o[3]}</td></tr>`).join('');
    for (const tr of tb.querySelectorAll('tr')) tr.addEventListener('click', () => this.jump(rows[+tr.dataset.i]));
  }
  renderHist() {
    const box = this.q('.fz-hist');
    if (this.hist) { this.hist.destroy(); this.hist = null; }
    box.innerHTML = '';
    const h = this.occ && this.occ.histogram;
    if (!h || !h.counts.length || typeof uPlot === 'undefined') return;
    // x: bin number (the bins are log-spaced from the fastest to the slowest), labelled by duration
    const xs = h.counts.map((_, i) => i), ys = h.counts.slice();
    const mid = (i) => Math.sqrt(Math.max(1, h.edges_ns[i]) * Math.max(1, h.edges_ns[Math.min(i + 1, h.edges_ns.length - 1)]));
    const ax = { stroke: '#9aa0a6', grid: { stroke: '#2b2f37' }, ticks: { stroke: '#2b2f37' } };
    this.hist = new uPlot({
      width: Math.max(300, box.clientWidth || 500), height: 130,
      scales: { x: { time: false, range: [-0.5, xs.length - 0.5] } },
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      plugins: [hoverValues((i) => `${fmtNs(h.edges_ns[i])} … ${fmtNs(h.edges_ns[i + 1])}`, (v) => `${v} occurrences`)],
      series: [{}, { label: 'occurrences', stroke: '#8ab4f8', fill: 'rgba(138,180,248,0.35)', points: { show: false }, paths: uPlot.paths.bars({ size: [0.9, 40] }) }],
      axes: [Object.assign({ values: (u, v) => v.map((i) => (Number.isInteger(i) && i >= 0 && i < xs.length ? fmtNs(mid(i)) : '')) }, ax), Object.assign({ size: 40 }, ax)],
    }, [xs, ys], box);
  }
  jump(o) {
    if (!o) return;
    const s = this.ctx.toRel(o[0]), d = o[1];
    const pad = Math.max(d * 0.25, 2000);
    this.lastJump = { start: s, dur: d, thread: o[2] };
    this.ctx.flame.setRange(s - pad, s + d + pad, true);
    this.ctx.flame.selected = this.site;
  }
  async jumpSlowest() {
    if (!this.occ || !this.occ.occurrences.length) return;
    let slowest = this.occ.occurrences.reduce((a, b) => (b[1] > a[1] ? b : a));
    if (this.occ.truncated && this.sort === 'time') { // the list holds the earliest ones: ask
      const ctx = this.ctx;
      const j = await ctx.api('GET', `/api/sessions/${encodeURIComponent(ctx.session())}/occurrences?${analysisQuery(ctx, null, null, { site: this.site, limit: 1, bins: 1 })}`);
      if (j.occurrences.length) slowest = j.occurrences[0];
    }
    this.jump(slowest);
  }
}
