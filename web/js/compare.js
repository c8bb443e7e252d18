// compare.js — two ranges side by side (a slow frame against a typical one, or two sessions /
// recordings): the relay's statistics of each (GET …/stats) joined by call site (name, file,
// line — ids may differ between sessions) with the difference B − A per site.

import { fmtNs } from './flame.js';
import { esc, analysisQuery, rangeOf } from './stats.js';

const key = (s) => `${s.name}\u0000${s.file}\u0000${s.line}`;

// Joins two /stats answers: one row per site in either, B − A differences.
export function joinStats(a, b) {
  const m = new Map();
  for (const s of a.sites) m.set(key(s), { name: s.name, a: s, b: null });
  for (const s of b.sites) { const r = m.get(key(s)); if (r) r.b = s; else m.set(key(s), { name: s.name, a: null, b: s }); }
  const z = { count: 0, total_ns: 0, mean_ns: 0, self_ns: 0 };
  return [...m.values()].map((r) => {
    const A = r.a || z, B = r.b || z;
    return { name: r.name, a: r.a, b: r.b, d_count: B.count - A.count, d_total: B.total_ns - A.total_ns, d_mean: B.mean_ns - A.mean_ns, d_self: B.self_ns - A.self_ns };
  }).sort((x, y) => Math.abs(y.d_total) - Math.abs(x.d_total) || x.name.localeCompare(y.name));
}

const signed = (v) => (v > 0 ? '+' : v < 0 ? '−' : '') + fmtNs(Math.abs(v));

export class ComparePanel {
  constructor(el, ctx) {
    this.el = el;
    this.ctx = ctx;
    this.sides = { A: null, B: null }; // {session, t0, t1, label}
    this.rows = null;
    this.answers = null;
    const side = (n) => `<div class="arow"><b>${n}</b> <select class="cmp-sess" data-side="${n}"></select>
      <select class="cmp-kind" data-side="${n}"><option value="session">whole session</option><option value="view">flame view</option><option value="selection">frame selection</option></select>
      <button class="cmp-set" data-side="${n}">Set ${n}</button> <span class="cmp-label dim" data-side="${n}"></span></div>`;
    el.innerHTML = side('A') + side('B') + `<div class="arow"><button class="cmp-go">Compare</button><span class="cmp-info dim"></span></div>
      <div class="tablewrap"><table class="cmp"><thead><tr><th>Name</th><th>A count</th><th>B count</th><th>A mean</th><th>B mean</th><th>Δ mean</th><th>A total</th><th>B total</th><th>Δ total</th></tr></thead><tbody></tbody></table></div>`;
    for (const b of el.querySelectorAll('.cmp-set')) b.addEventListener('click', () => this.set(b.dataset.side));
    el.querySelector('.cmp-go').addEventListener('click', () => this.compare());
  }
  // Keeps the session pickers in step with the session list.
  syncSessions(list, current) {
    for (const sel of this.el.querySelectorAll('.cmp-sess')) {
      const keep = sel.value || current;
      const ids = list.map((s) => s.id).join(',');
      if (sel.dataset.ids !== ids) {
        sel.dataset.ids = ids;
        sel.innerHTML = list.map((s) => `<option value="${esc(s.id)}">${esc((s.program || '?') + ' — ' + s.id)}</option>`).join('');
      }
      sel.value = list.some((s) => s.id === keep) ? keep : current;
    }
  }
  // Captures side n's range now (the flame view and selection move on).
  set(n, kind) {
    const q = (c) => this.el.querySelector(`${c}[data-side=${n}]`);
    if (kind) q('.cmp-kind').value = kind;
    const session = q('.cmp-sess').value || this.ctx.session();
    const k = q('.cmp-kind').value;
    // view and selection are ranges of the session shown; for another session, take the same times
    const r = rangeOf(this.ctx, k);
    this.sides[n] = { session, t0: r.t0, t1: r.t1, label: `${session}: ${r.kind === 'session' ? 'whole session' : r.label || r.kind} ${r.t0 !== null ? '(' + fmtNs(r.t1 - r.t0) + ')' : ''}` };
    q('.cmp-label').textContent = this.sides[n].label;
    return this.sides[n];
  }
  async compare() {
    const ctx = this.ctx;
    for (const n of ['A', 'B']) if (!this.sides[n]) this.set(n);
    const get = (s) => ctx.api('GET', `/api/sessions/${encodeURIComponent(s.session)}/stats?${analysisQuery(ctx, s.t0, s.t1, { limit: 10000 })}`);
    try {
      const [a, b] = await Promise.all([get(this.sides.A), get(this.sides.B)]);
      this.answers = { a, b };
      this.rows = joinStats(a, b);
      this.render();
      return this.rows;
    } catch (e) { this.el.querySelector('.cmp-info').textContent = e.message; return null; }
  }
  render() {
    const { a, b } = this.answers;
    this.el.querySelector('.cmp-info').textContent = `A: ${fmtNs(a.range_ns)}, ${a.zones} zones · B: ${fmtNs(b.range_ns)}, ${b.zones} zones`;
    const c = (s, k) => (s ? (k === 'count' ? String(s[k]) : fmtNs(s[k])) : '–');
    const cls = (v) => (v > 0 ? 'worse' : v < 0 ? 'better' : '');
    this.el.querySelector('tbody').innerHTML = this.rows.map((r) => `<tr><td>${esc(r.name)}</td><td>${c(r.a, 'count')}</td><td>${c(r.b, 'count')}</td>` +
      `<td>${c(r.a, 'mean_ns')}</td><td>${c(r.b, 'mean_ns')}</td><td class="${cls(r.d_mean)}">${signed(r.d_mean)}</td>` +
      `<td>${c(r.a, 'total_ns')}</td><td>${c(r.b, 'total_ns')}</td><td class="${cls(r.d_total)}">${signed(r.d_total)}</td></tr>`).join('');
  }
}
