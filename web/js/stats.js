// stats.js — the statistics panel: one row per call site (count, total, self, mean, median, p95,
// max, % of range) for the whole session, the flame chart's view or a frame selection, computed
// by the relay (GET …/stats, docs/API.md "Analysis") so it covers everything the relay stores.
// Sortable by any column, filterable by name; honours the severity/team/thread filters.

import { fmtNs } from './flame.js';

export const esc = (v) => String(v).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));

export const STAT_COLUMNS = [
  ['name', 'Name'], ['count', 'Count'], ['total_ns', 'Total'], ['self_ns', 'Self'], ['mean_ns', 'Mean'],
  ['median_ns', 'Median'], ['p95_ns', 'p95'], ['max_ns', 'Max'], ['range_pct', '% range'],
];

// Formats one statistics cell as the panel shows it (tests compare against this).
export function fmtStat(key, v) {
  if (key === 'name') return String(v);
  if (key === 'count') return String(v);
  if (key === 'range_pct') return v.toFixed(2) + '%';
  return fmtNs(v);
}

// Query string of the analysis endpoints for a range (absolute ns) and the dashboard's filters.
export function analysisQuery(ctx, t0, t1, extra) {
  const f = ctx.filters();
  const q = new URLSearchParams();
  if (t0 !== undefined && t0 !== null) q.set('t0', String(Math.max(0, Math.floor(t0))));
  if (t1 !== undefined && t1 !== null) q.set('t1', String(Math.ceil(t1)));
  if (f.level !== 5) q.set('level', String(f.level));
  if ((f.mask >>> 0) !== 0xffffffff) q.set('mask', String(f.mask >>> 0));
  if (f.threads) q.set('threads', f.threads.join(','));
  for (const [k, v] of Object.entries(extra || {})) if (v !== undefined && v !== '') q.set(k, String(v));
  return q.toString();
}

// Describes a range choice: {kind: 'session'|'view'|'selection', t0, t1 (absolute ns or null)}.
export function rangeOf(ctx, kind) {
  if (kind === 'view') return { kind, t0: ctx.toAbs(ctx.flame.t0), t1: ctx.toAbs(ctx.flame.t1) };
  if (kind === 'selection' && ctx.selection()) { const s = ctx.selection(); return { kind, t0: ctx.toAbs(s.t0), t1: ctx.toAbs(s.t1), label: s.label }; }
  return { kind: 'session', t0: null, t1: null };
}

export class StatsPanel {
  constructor(el, ctx) {
    this.el = el;
    this.ctx = ctx;
    this.kind = 'session';
    this.sortKey = 'total_ns';
    this.sortDesc = true;
    this.last = null;      // the relay's last answer (tests read it)
    this.lastQuery = '';
    this.busy = false;
    el.innerHTML = `
      <div class="arow">
        <label><input type="radio" name="srange" value="session" checked> session</label>
        <label><input type="radio" name="srange" value="view"> flame view</label>
        <label><input type="radio" name="srange" value="selection"> frame selection</label>
        <button class="refresh">Refresh</button>
      </div>
      <div class="arow"><input class="filter" placeholder="filter by name" size="18"><span class="info dim"></span></div>
      <div class="tablewrap"><table class="stats"><thead></thead><tbody></tbody></table></div>`;
    this.info = el.querySelector('.info');
    this.filter = el.querySelector('.filter');
    this.tbody = el.querySelector('tbody');
    this.thead = el.querySelector('thead');
    for (const r of el.querySelectorAll('input[name=srange]')) r.addEventListener('change', () => { this.kind = r.value; this.refresh(); });
    el.querySelector('.refresh').addEventListener('click', () => this.refresh());
    this.filter.addEventListener('input', () => this.render());
    this.renderHead();
  }
  setKind(kind) {
    this.kind = kind;
    const r = this.el.querySelector(`input[name=srange][value=${kind}]`);
    if (r) r.checked = true;
    return this.refresh();
  }
  renderHead() {
    this.thead.innerHTML = '<tr>' + STAT_COLUMNS.map(([k, n]) =>
      `<th data-key="${k}" class="${k === this.sortKey ? (this.sortDesc ? 'desc' : 'asc') : ''}">${n}</th>`).join('') + '</tr>';
    for (const th of this.thead.querySelectorAll('th')) th.addEventListener('click', () => {
      const k = th.dataset.key;
      if (k === this.sortKey) this.sortDesc = !this.sortDesc; else { this.sortKey = k; this.sortDesc = k !== 'name'; }
      this.renderHead();
      this.render();
    });
  }
  async refresh() {
    const ctx = this.ctx;
    if (!ctx.session()) return null;
    const r = rangeOf(ctx, this.kind);
    const q = analysisQuery(ctx, r.t0, r.t1);
    this.lastQuery = q;
    this.busy = true;
    this.info.textContent = 'computing…';
    try {
      const j = await ctx.api('GET', `/api/sessions/${encodeURIComponent(ctx.session())}/stats?${q}`);
      if (this.lastQuery !== q) return null; // a newer request is on its way
      this.last = j;
      this.range = r;
      this.render();
      return j;
    } catch (e) {
      this.info.textContent = e.message;
      return null;
    } finally { this.busy = false; }
  }
  // Rows as shown: filtered by the name box and sorted by the chosen column.
  rows() {
    if (!this.last) return [];
    const f = this.filter.value.toLowerCase();
    const k = this.sortKey, d = this.sortDesc ? -1 : 1;
    return this.last.sites.filter((s) => !f || s.name.toLowerCase().includes(f))
      .sort((a, b) => (k === 'name' ? a.name.localeCompare(b.name) : a[k] - b[k]) * d || a.site - b.site);
  }
  render() {
    const j = this.last;
    if (!j) return;
    const rows = this.rows();
    const label = this.range && this.range.kind === 'selection' ? this.range.label : this.kind;
    this.info.textContent = `${label}: ${fmtNs(j.range_ns)}, ${j.zones.toLocaleString()} zones, ${rows.length} sites${j.truncated ? ' (first ' + j.count + ')' : ''}${j.complete ? '' : ' (incomplete)'}`;
    this.tbody.innerHTML = rows.map((s) => `<tr data-site="${s.site}">` +
      STAT_COLUMNS.map(([k]) => `<td class="${k}"${k === 'name' ? ` title="${esc(s.file)}:${s.line}"` : ''}>${esc(fmtStat(k, s[k]))}</td>`).join('') + '</tr>').join('');
    for (const tr of this.tbody.querySelectorAll('tr')) tr.addEventListener('dblclick', () => this.ctx.findSite && this.ctx.findSite(+tr.dataset.site));
  }
}
