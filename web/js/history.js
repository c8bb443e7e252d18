// history.js — the history view: trends across builds and nights from the relay's ClickHouse
// sink. The page only picks parameters; the relay runs its fixed queries (GET /api/history/*,
// docs/CLICKHOUSE.md), the browser never talks to ClickHouse.

// GET path of one history query; empty parameters are left out.
export function historyPath(name, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return `/api/history/${encodeURIComponent(name)}${s ? '?' + s : ''}`;
}

// uPlot data for trend rows ({key, p50, p95, max, n}, in ns): x is the row index (builds are
// labels, not numbers), y in milliseconds.
export function trendData(rows) {
  const ms = (v) => Number(v) / 1e6;
  return {
    keys: rows.map((r) => String(r.key)),
    counts: rows.map((r) => Number(r.n)),
    data: [rows.map((_, i) => i), rows.map((r) => ms(r.p50)), rows.map((r) => ms(r.p95)), rows.map((r) => ms(r.max))],
  };
}

// Rows of the "changed most" table: medians in ms and the change in percent (b against a).
export function diffRows(rows) {
  return rows.map((r) => {
    const a = Number(r.a_p50), b = Number(r.b_p50);
    return { name: r.name, a: a / 1e6, b: b / 1e6, change: a > 0 ? (b - a) / a * 100 : Infinity, an: Number(r.a_n), bn: Number(r.b_n) };
  });
}

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
const fmtMs = (v) => (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toFixed(4)) + ' ms';

// The panel: program, what (frame time or a zone site), grouping (build or night), a uPlot chart
// of p50/p95/max, and the sites that changed most between two builds.
export class HistoryView {
  constructor(root, api) {
    this.root = root;
    this.api = api;
    this.chart = null;
    this.last = null; // last trend answer (tests read it)
    root.innerHTML = `
      <div class="toolbar">
        <label>program <select data-h="program"></select></label>
        <label>show <select data-h="what"><option value="frame">frame time</option><option value="zone">zone</option></select></label>
        <label>site <select data-h="site"></select></label>
        <label>per <select data-h="by"><option value="build">build</option><option value="night">night</option></select></label>
        <label>days <input data-h="days" type="number" min="1" max="3650" value="30"></label>
        <span class="grow"></span><span data-h="status" class="dim"></span>
      </div>
      <div data-h="chart" class="graph"></div>
      <div class="toolbar">
        <span>changed most:</span>
        <label>build <select data-h="a"></select></label> → <label><select data-h="b"></select></label>
      </div>
      <table data-h="diff" class="diff"></table>`;
    this.el = {};
    for (const e of root.querySelectorAll('[data-h]')) this.el[e.dataset.h] = e;
    for (const k of ['program']) this.el[k].addEventListener('change', () => this.loadProgram());
    for (const k of ['what']) this.el[k].addEventListener('change', () => { this.fillSites(); this.loadTrend(); });
    for (const k of ['site', 'by', 'days']) this.el[k].addEventListener('change', () => this.loadTrend());
    for (const k of ['a', 'b']) this.el[k].addEventListener('change', () => this.loadDiff());
  }

  status(text) { this.el.status.textContent = text; }

  async get(name, params) { return (await this.api('GET', historyPath(name, params))).rows; }

  // Called when the panel is shown.
  async open() {
    try {
      this.status('loading…');
      const progs = await this.get('programs', { days: this.el.days.value });
      const keep = this.el.program.value;
      this.el.program.innerHTML = progs.map((p) => `<option value="${esc(p.program)}">${esc(p.program)} (${p.builds} builds)</option>`).join('');
      if (keep && progs.some((p) => p.program === keep)) this.el.program.value = keep;
      if (!progs.length) { this.status('no sessions in ClickHouse yet'); return; }
      await this.loadProgram();
    } catch (e) { this.status(e.message); }
  }

  async loadProgram() {
    const program = this.el.program.value;
    try {
      const [sites, builds] = await Promise.all([this.get('sites', { program, days: this.el.days.value }), this.get('builds', { program, days: this.el.days.value })]);
      this.sites = sites;
      this.fillSites();
      const opts = builds.map((b) => `<option value="${esc(b.build)}">${esc(b.build || '(none)')}</option>`).join('');
      this.el.a.innerHTML = opts;
      this.el.b.innerHTML = opts;
      if (builds.length > 1) { this.el.a.selectedIndex = builds.length - 2; this.el.b.selectedIndex = builds.length - 1; }
      await Promise.all([this.loadTrend(), this.loadDiff()]);
    } catch (e) { this.status(e.message); }
  }

  fillSites() {
    const what = this.el.what.value;
    const list = (this.sites || []).filter((s) => s.what === what);
    this.el.site.innerHTML = (what === 'frame' ? '<option value="">(all frames)</option>' : '') +
      list.map((s) => `<option value="${esc(s.name)}">${esc(s.name)}</option>`).join('');
  }

  async loadTrend() {
    const p = { program: this.el.program.value, what: this.el.what.value, site: this.el.site.value, by: this.el.by.value, days: this.el.days.value };
    if (!p.program || (p.what === 'zone' && !p.site)) return;
    const seq = this.trendSeq = (this.trendSeq || 0) + 1; // only the latest request's answer is shown
    try {
      const rows = await this.get('trend', p);
      if (seq !== this.trendSeq) return;
      this.last = { params: p, rows };
      this.draw(rows);
      this.status(`${rows.length} ${p.by === 'night' ? 'nights' : 'builds'}, ${rows.reduce((a, r) => a + Number(r.n), 0)} samples`);
    } catch (e) { if (seq === this.trendSeq) this.status(e.message); }
  }

  draw(rows) {
    const t = trendData(rows), el = this.el.chart;
    if (this.chart) { this.chart.destroy(); this.chart = null; }
    if (typeof uPlot === 'undefined' || !rows.length) return;
    const axis = { stroke: '#9aa0a6', grid: { stroke: '#2b2f37' }, ticks: { stroke: '#2b2f37' } };
    this.chart = new uPlot({
      width: Math.max(300, el.clientWidth), height: 220, scales: { x: { time: false } },
      series: [{ label: this.el.by.value, value: (u, i) => (i == null ? '' : t.keys[Math.round(i)] || '') },
        { label: 'p50 ms', stroke: '#8ab4f8', width: 2, points: { show: true } },
        { label: 'p95 ms', stroke: '#f6ae2d', width: 1, points: { show: true } },
        { label: 'max ms', stroke: '#e06c75', width: 1, dash: [4, 4] }],
      axes: [Object.assign({ values: (u, v) => v.map((i) => (Number.isInteger(i) && t.keys[i] !== undefined ? t.keys[i] : '')) }, axis),
        Object.assign({ size: 50 }, axis)],
    }, t.data, el);
  }

  async loadDiff() {
    const a = this.el.a.value, b = this.el.b.value, program = this.el.program.value;
    const table = this.el.diff;
    if (!a || !b || a === b) { table.innerHTML = '<tr><td class="dim">pick two different builds</td></tr>'; return; }
    const seq = this.diffSeq = (this.diffSeq || 0) + 1;
    try {
      const rows = diffRows(await this.get('diff', { program, a, b, limit: 20, days: this.el.days.value }));
      if (seq !== this.diffSeq) return;
      table.innerHTML = `<tr><th>site</th><th>${esc(a)} p50</th><th>${esc(b)} p50</th><th>change</th></tr>` +
        rows.map((r) => `<tr><td>${esc(r.name)}</td><td>${fmtMs(r.a)}</td><td>${fmtMs(r.b)}</td>` +
          `<td class="${r.change > 0 ? 'bad' : ''}">${Number.isFinite(r.change) ? (r.change > 0 ? '+' : '') + r.change.toFixed(1) + '%' : 'new'}</td></tr>`).join('');
    } catch (e) { table.innerHTML = `<tr><td>${esc(e.message)}</td></tr>`; }
  }
}
