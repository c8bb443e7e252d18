// analysis.test.mjs — the analysis endpoints (GET …/stats, …/occurrences) checked against the
// raw zones of GET …/zones, their errors for bad parameters, and the dashboard's analysis views
// in Debian's Chromium: statistics panel, find zone, frame graph, plot and message hover/jumps,
// compare. What the page shows is asserted against the relay's API; screenshots go to
// build/screenshots/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startRelay, startDemo, stop, until, sleep, launchChromium, getJSON, BUILD, SRC } from './harness.mjs';

const { fmtStat, STAT_COLUMNS } = await import(path.join(SRC, 'web/js/stats.js'));
const { fmtNs } = await import(path.join(SRC, 'web/js/flame.js'));

let relay, demo, browser, page, session;
const pageErrors = [];
const shots = path.join(BUILD, 'screenshots');

before(async () => {
  relay = await startRelay();
  demo = startDemo(relay, ['--seconds', '6']);
  // a finished session: everything below compares fixed data
  session = await until(async () => {
    const r = await getJSON(relay, '/api/sessions');
    return r.json && r.json.find((s) => !s.live && s.stats.zones > 1000);
  }, 30000, 'the demo session to end');
  fs.mkdirSync(shots, { recursive: true });
});

after(async () => {
  if (browser) { await browser.close(); fs.rmSync(browser.userDataDir, { recursive: true, force: true }); }
  await stop(demo);
  await stop(relay);
  if (relay) fs.rmSync(relay.dataDir, { recursive: true, force: true });
});

const api = async (p) => { const r = await getJSON(relay, p); assert.equal(r.status, 200, `${p}: ${r.text}`); return r.json; };
const S = () => `/api/sessions/${session.id}`;

// Reference statistics from the raw zones: per site count/total/min/max/self, sorted durations.
function reference(zones, t0, t1) {
  const bySite = new Map();
  const get = (s) => { let a = bySite.get(s); if (!a) { a = { count: 0, total: 0, self: 0, min: Infinity, max: 0, ds: [], inRange: 0 }; bySite.set(s, a); } return a; };
  const byThread = new Map();
  for (const z of zones) { let l = byThread.get(z[2]); if (!l) byThread.set(z[2], l = []); l.push(z); }
  for (const list of byThread.values()) {
    list.sort((a, b) => a[0] - b[0] || a[4] - b[4]);
    const stack = [];
    for (const [start, dur, , site, depth, flags] of list) {
      const a = get(site);
      a.count++; a.total += dur; a.self += dur; a.ds.push(dur);
      a.min = Math.min(a.min, dur); a.max = Math.max(a.max, dur);
      a.inRange += Math.max(0, Math.min(start + dur, t1) - Math.max(start, t0));
      if (flags & 1) continue;
      const p = depth > 0 ? stack[depth - 1] : null;
      if (p && start >= p.start && start + dur <= p.end) get(p.site).self -= dur;
      stack[depth] = { site, start, end: start + dur };
    }
  }
  for (const a of bySite.values()) a.ds.sort((x, y) => x - y);
  return bySite;
}
const near = (got, exact) => Math.abs(got - exact) <= Math.max(1, exact / 64);

test('…/stats matches the raw zones of the same range exactly (median and p95 within 1/64)', async () => {
  const t0 = session.first_ns + 1e9, t1 = session.first_ns + 3e9;
  const z = await api(`${S()}/zones?t0=${t0}&t1=${t1}&limit=1000000`);
  assert.equal(z.truncated, false);
  const ref = reference(z.zones, t0, t1);
  const st = await api(`${S()}/stats?t0=${t0}&t1=${t1}&limit=10000`);
  assert.equal(st.t0_ns, t0); assert.equal(st.t1_ns, t1); assert.equal(st.range_ns, t1 - t0);
  assert.equal(st.complete, true);
  assert.equal(st.zones, z.zones.length, 'every zone of the range is counted once');
  assert.equal(st.sites.length, ref.size);
  for (const s of st.sites) {
    const r = ref.get(s.site);
    assert.ok(r, `site ${s.site} has zones`);
    assert.equal(s.count, r.count, s.name);
    assert.equal(s.total_ns, r.total, s.name);
    assert.equal(s.self_ns, r.self, `${s.name} self`);
    assert.equal(s.min_ns, r.min); assert.equal(s.max_ns, r.max);
    assert.ok(Math.abs(s.mean_ns - r.total / r.count) < 1e-6 * r.total);
    const n = r.ds.length;
    assert.ok(near(s.median_ns, r.ds[Math.floor(n / 2)]), `${s.name} median ${s.median_ns} vs ${r.ds[Math.floor(n / 2)]}`);
    assert.ok(near(s.p95_ns, r.ds[Math.min(n - 1, Math.floor(n * 0.95))]), `${s.name} p95`);
    assert.ok(Math.abs(s.range_pct - 100 * r.inRange / (t1 - t0)) < 1e-9);
  }
  for (let i = 1; i < st.sites.length; i++) assert.ok(st.sites[i - 1].total_ns >= st.sites[i].total_ns, 'by total, largest first');
  // self time is real: some parent's self is below its total
  assert.ok(st.sites.some((s) => s.self_ns < s.total_ns));
  // the whole session by default
  const all = await api(`${S()}/stats`);
  assert.equal(all.t0_ns, session.first_ns); assert.equal(all.t1_ns, session.last_ns);
  assert.equal(all.zones, session.stats.zones, 'the default range covers every stored zone');
});

test('…/stats honours severity, team, thread and name filters', async () => {
  const sites = (await api(`${S()}/sites`)).sites;
  const desc = new Map(sites.map((s) => [s.id, s]));
  const all = await api(`${S()}/stats?limit=10000`);
  const lv = await api(`${S()}/stats?level=2&limit=10000`);
  assert.ok(lv.sites.length < all.sites.length, 'level 2 leaves the info zones out');
  for (const s of lv.sites) assert.ok(desc.get(s.site).severity <= 2, s.name);
  for (const s of all.sites) if (desc.get(s.site).severity <= 2) assert.ok(lv.sites.some((x) => x.site === s.site), `${s.name} stays`);
  const bits = [...new Set(sites.flatMap((s) => [...Array(32).keys()].filter((b) => (s.verbosity >>> b) & 1)))];
  const mask = 1 << bits[0];
  const mk = await api(`${S()}/stats?mask=${mask >>> 0}&limit=10000`);
  for (const s of mk.sites) assert.ok(desc.get(s.site).verbosity & mask, s.name);
  const th = await api(`${S()}/stats?threads=0&limit=10000`);
  const z0 = await api(`${S()}/zones?thread=0&limit=1000000`);
  assert.equal(th.zones, z0.zones.length, 'threads=0 counts only thread 0');
  const nm = await api(`${S()}/stats?name=PHYS`);
  assert.ok(nm.sites.length > 0);
  for (const s of nm.sites) assert.match(s.name, /phys/i);
  const lim = await api(`${S()}/stats?limit=2`);
  assert.equal(lim.sites.length, 2); assert.equal(lim.truncated, true);
});

test('…/occurrences lists one site slowest first or by time, with a histogram of all of them', async () => {
  const z = await api(`${S()}/zones?limit=1000000`);
  const st = await api(`${S()}/stats?name=Physics`);
  const site = st.sites[0].site;
  const mine = z.zones.filter((r) => r[3] === site);
  const oc = await api(`${S()}/occurrences?site=${site}&limit=10&bins=16`);
  assert.equal(oc.total, mine.length);
  assert.equal(oc.count, Math.min(10, mine.length)); assert.equal(oc.truncated, mine.length > 10);
  const durs = mine.map((r) => r[1]).sort((a, b) => b - a);
  assert.deepEqual(oc.occurrences.map((o) => o[1]), durs.slice(0, 10), 'the slowest, in order');
  assert.equal(oc.max_ns, durs[0]); assert.equal(oc.min_ns, durs[durs.length - 1]);
  assert.equal(oc.histogram.counts.reduce((a, b) => a + b, 0), mine.length, 'the histogram holds every occurrence');
  assert.equal(oc.histogram.edges_ns.length, oc.histogram.counts.length + 1);
  const bt = await api(`${S()}/occurrences?site=${site}&sort=time&limit=5`);
  const starts = mine.map((r) => r[0]).sort((a, b) => a - b).slice(0, 5);
  assert.deepEqual(bt.occurrences.map((o) => o[0]), starts, 'the earliest, in order');
});

test('bad analysis parameters get a clear 400 / 404', async () => {
  const bad = [
    ['stats?t0=5&t1=3', 400, /before/], ['stats?level=9', 400, /level/], ['stats?mask=99999999999', 400, /mask/],
    ['stats?threads=a,b', 400, /threads/], ['stats?threads=' + Array(300).fill(1).join(','), 400, /threads/],
    ['stats?name=' + 'x'.repeat(200), 400, /name/], ['stats?limit=0', 400, /limit/], ['stats?limit=20000', 400, /limit/],
    ['stats?t0=-1', 400, /t0/], ['stats?t1=99999999999999999999999', 400, /t1/],
    ['occurrences', 400, /site/], ['occurrences?site=1&sort=fast', 400, /sort/], ['occurrences?site=1&bins=5000', 400, /bins/],
    ['occurrences?site=1&limit=1000000', 400, /limit/],
  ];
  for (const [q, status, re] of bad) {
    const r = await getJSON(relay, `${S()}/${q}`);
    assert.equal(r.status, status, `${q}: ${r.text}`);
    assert.match(r.json.error, re, q);
  }
  const nf = await getJSON(relay, '/api/sessions/nosuch/stats');
  assert.equal(nf.status, 404);
  const post = await getJSON(relay, `${S()}/stats`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
  assert.equal(post.status, 405);
  // many at once: all answered, each correct or told to come back (503), never wrong
  const many = await Promise.all(Array.from({ length: 12 }, () => getJSON(relay, `${S()}/stats?limit=1`)));
  for (const r of many) assert.ok(r.status === 200 || r.status === 503, r.text);
  assert.ok(many.some((r) => r.status === 200));
});

// ---- the page ------------------------------------------------------------------------------
const state = (fn, arg) => page.evaluate(fn, arg);
async function shot(name) { await page.screenshot({ path: path.join(shots, name + '.png') }); }

test('the statistics panel shows the relay\'s statistics, sortable and filterable', async () => {
  browser = await launchChromium();
  page = browser.pages()[0] || await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(relay.url);
  await page.waitForFunction((id) => window.telemark && window.telemark.app.current === id && window.telemark.app.historyDone, session.id, { timeout: 15000 });
  await page.waitForFunction(() => window.telemark.analysis.stats.last && document.querySelectorAll('#analysis table.stats tbody tr').length > 3, null, { timeout: 15000 });
  const want = await api(`${S()}/stats`);
  const shown = await state(() => [...document.querySelectorAll('#analysis table.stats tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent)));
  assert.equal(shown.length, want.sites.length);
  want.sites.forEach((s, i) => assert.deepEqual(shown[i], STAT_COLUMNS.map(([k]) => fmtStat(k, s[k])), `row ${i}`));
  // sort by count (click the header): counts never increase down the table
  await page.click('#analysis table.stats th[data-key=count]');
  const counts = await state(() => [...document.querySelectorAll('#analysis table.stats tbody td.count')].map((td) => +td.textContent));
  assert.deepEqual(counts, want.sites.map((s) => s.count).sort((a, b) => b - a));
  await page.click('#analysis table.stats th[data-key=count]');
  const up = await state(() => [...document.querySelectorAll('#analysis table.stats tbody td.count')].map((td) => +td.textContent));
  assert.deepEqual(up, counts.slice().reverse());
  await page.fill('#analysis .filter', 'update');
  const names = await state(() => [...document.querySelectorAll('#analysis table.stats tbody td.name')].map((td) => td.textContent));
  assert.deepEqual(names.sort(), want.sites.filter((s) => /update/i.test(s.name)).map((s) => s.name).sort());
  await page.fill('#analysis .filter', '');
  // the page's thread and team filters go to the relay with the statistics request
  const q0 = await state(() => window.telemark.analysis.stats.lastQuery);
  await page.uncheck('#threads input[data-thread="0"]');
  const bit = await state(() => [...window.telemark.app.teamsKnown.keys()].sort((a, b) => a - b).pop());
  await page.uncheck(`#teams input[data-bit="${bit}"]`);
  await page.waitForFunction((q) => { const s = window.telemark.analysis.stats; return s.lastQuery !== q && /threads=/.test(s.lastQuery) && /mask=/.test(s.lastQuery) && !s.busy && s.last; }, q0, { timeout: 15000 });
  await page.waitForFunction(() => { const s = window.telemark.analysis.stats; return !s.busy && document.querySelectorAll('#analysis table.stats tbody tr').length === s.rows().length; }, null, { timeout: 5000 });
  const fq = await state(() => window.telemark.analysis.stats.lastQuery);
  assert.ok(!/(^|&)threads=([^&]*%2C)?0(%2C|&|$)/.test(fq), `thread 0 is left out: ${fq}`);
  const wf = await api(`${S()}/stats?${fq}`);
  const mask = new URLSearchParams(fq).get('mask');
  assert.equal(+mask, (0xffffffff & ~(1 << bit)) >>> 0);
  const shownF = await state(() => [...document.querySelectorAll('#analysis table.stats tbody tr')].map((tr) => tr.dataset.site + ':' + tr.querySelector('td.count').textContent));
  assert.deepEqual(shownF.sort(), wf.sites.map((s) => s.site + ':' + s.count).sort());
  assert.ok(wf.zones < want.zones, 'fewer zones without thread 0');
  await page.check('#threads input[data-thread="0"]');
  await page.check(`#teams input[data-bit="${bit}"]`);
  await page.waitForFunction(() => { const s = window.telemark.analysis.stats; return !/threads=|mask=/.test(s.lastQuery) && !s.busy && window.telemark.app.historyDone; }, null, { timeout: 15000 });
  // the flame chart's view: the same range through the API
  await state(() => { const f = window.telemark.flame; f.setLive(false); f.setRange(f.sd.minTime + 1e9, f.sd.minTime + 1.5e9, true); });
  await page.check('#analysis input[name=srange][value=view]');
  await page.waitForFunction(() => window.telemark.analysis.stats.range && window.telemark.analysis.stats.range.kind === 'view' && !window.telemark.analysis.stats.busy, null, { timeout: 10000 });
  const v = await state(() => { const s = window.telemark.analysis.stats; return { t0: s.last.t0_ns, t1: s.last.t1_ns, ft0: window.telemark.flame.t0, origin: window.telemark.sd.origin }; });
  assert.equal(v.t0, Math.floor(v.origin + v.ft0));
  const wv = await api(`${S()}/stats?t0=${v.t0}&t1=${v.t1}`);
  const shownV = await state(() => [...document.querySelectorAll('#analysis table.stats tbody tr')].map((tr) => tr.querySelector('td.total_ns').textContent));
  assert.deepEqual(shownV.sort(), wv.sites.map((s) => fmtNs(s.total_ns)).sort());
  await shot('analysis-stats');
});

test('find zone: sites by substring, occurrences slowest first, histogram, jump to the slowest', async () => {
  await page.click('#analysis .tabs button[data-tab=find]');
  await page.fill('#analysis .fz-name', 'physics');
  await page.click('#analysis .fz-go');
  const st = await api(`${S()}/stats?name=physics`);
  await page.waitForFunction((n) => document.querySelectorAll('#analysis .fz-sites tbody tr').length === n, st.sites.length, { timeout: 10000 });
  const listed = await state(() => [...document.querySelectorAll('#analysis .fz-sites tbody tr')].map((tr) => +tr.dataset.site));
  assert.deepEqual(listed, st.sites.map((s) => s.site));
  await page.click('#analysis .fz-sites tbody tr:first-child');
  await page.waitForFunction(() => window.telemark.analysis.find.occ, null, { timeout: 10000 });
  const site = await state(() => window.telemark.analysis.find.site);
  const oc = await api(`${S()}/occurrences?site=${site}&limit=1000&bins=40`);
  const rows = await state(() => [...document.querySelectorAll('#analysis .fz-occ tbody tr')].map((tr) => tr.children[1].textContent));
  assert.deepEqual(rows, oc.occurrences.map((o) => fmtNs(o[1])), 'durations as the relay lists them, slowest first');
  const hist = await state(() => { const u = window.telemark.analysis.find.hist; return u ? u.data[1].slice() : null; });
  assert.deepEqual(hist, oc.histogram.counts);
  assert.equal(await page.locator('#analysis .fz-hist canvas').count() > 0, true, 'the histogram is drawn');
  await page.click('#analysis .fz-slowest');
  const j = await state(() => { const f = window.telemark.flame, sd = window.telemark.sd; return { t0: f.t0 + sd.origin, t1: f.t1 + sd.origin, live: f.live }; });
  const slow = oc.occurrences[0];
  assert.equal(j.live, false);
  assert.ok(j.t0 <= slow[0] && j.t1 >= slow[0] + slow[1], 'the slowest occurrence is in view');
  // a click on another row jumps there; by time asks the relay for the earliest
  await page.selectOption('#analysis .fz-sort', 'time');
  await page.waitForFunction(() => { const o = window.telemark.analysis.find.occ; return o && o.occurrences.length > 1 && o.occurrences[0][0] < o.occurrences[1][0]; }, null, { timeout: 10000 });
  const bt = await api(`${S()}/occurrences?site=${site}&sort=time&limit=1000&bins=40`);
  await page.click('#analysis .fz-occ tbody tr:nth-child(2)');
  const j2 = await state(() => { const f = window.telemark.flame, sd = window.telemark.sd; return { t0: f.t0 + sd.origin, t1: f.t1 + sd.origin }; });
  assert.ok(j2.t0 <= bt.occurrences[1][0] && j2.t1 >= bt.occurrences[1][0] + bt.occurrences[1][1]);
  await shot('analysis-findzone');
});

test('frame graph: every stored frame, view band, hover, budget, click and drag-select into the statistics', async () => {
  const ev = await api(`${S()}/events?type=frame&limit=1000000`);
  const frames = ev.events.filter((e) => e.site === 0).map((e) => e.time_ns);
  await page.waitForFunction((n) => window.telemark.analysis.frames.n === n, frames.length, { timeout: 10000 });
  const g = await state(() => { const f = window.telemark.analysis.frames; return { times: Array.from(f.times.subarray(0, f.n)), origin: window.telemark.sd.origin, over: f.over }; });
  assert.deepEqual(g.times.map((t) => t + g.origin), frames);
  // budget: frames drawn red are exactly the frames over the budget (when all fit one per column)
  const durs = frames.slice(1).map((t, i) => t - frames[i]);
  await page.selectOption('#frames .fg-budget', '33.3');
  await page.waitForFunction(() => Math.round(window.telemark.analysis.frames.budget) === 33300000, null, { timeout: 2000 });
  // the count is redrawn on a later frame
  const overs = () => state(() => { const f = window.telemark.analysis.frames; return [f.shown.filter((i) => f.dur(i) > f.budget).length, f.over]; });
  await until(async () => { const [a, b] = await overs(); return a === b; }, 5000, 'the count over budget').catch(() => {});
  const [over33, shownOver] = await overs();
  assert.equal(over33, shownOver);
  await page.selectOption('#frames .fg-budget', '16.7');
  // hover: frame number and duration of the frame under the pointer
  const box = await page.locator('#frames canvas').boundingBox();
  await page.mouse.move(box.x + box.width * 0.4, box.y + box.height * 0.8);
  const hov = await state(() => window.telemark.analysis.frames.hover);
  assert.ok(hov, 'hovering a frame');
  assert.equal(hov.dur, durs[hov.frame]);
  assert.equal(await page.textContent('#frames .fg-tip'), `frame ${hov.frame} · ${fmtNs(durs[hov.frame])} · at ${fmtNs(frames[hov.frame] - g.origin)}`);
  // click: the flame chart shows exactly that frame, and the graph's band follows it
  await page.mouse.click(box.x + box.width * 0.4, box.y + box.height * 0.8);
  const fl = await state(() => ({ t0: window.telemark.flame.t0, t1: window.telemark.flame.t1, live: window.telemark.flame.live }));
  assert.equal(fl.t0 + g.origin, frames[hov.frame]); assert.equal(fl.t1 + g.origin, frames[hov.frame + 1]);
  // drag: a frame range, handed to the statistics panel
  await page.mouse.move(box.x + box.width * 0.2, box.y + 60);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.35, box.y + 60, { steps: 5 });
  await page.mouse.up();
  const sel = await state(() => window.telemark.analysis.frames.selection);
  assert.ok(sel && sel.f1 > sel.f0, 'a range of frames');
  assert.equal(sel.t0 + g.origin, frames[sel.f0]); assert.equal(sel.t1 + g.origin, frames[sel.f1 + 1]);
  await page.waitForFunction(() => { const s = window.telemark.analysis.stats; return s.range && s.range.kind === 'selection' && !s.busy && s.last && s.last.t0_ns === s.range.t0; }, null, { timeout: 10000 });
  const sst = await state(() => window.telemark.analysis.stats.last);
  assert.equal(sst.t0_ns, frames[sel.f0]); assert.equal(sst.t1_ns, frames[sel.f1 + 1]);
  const want = await api(`${S()}/stats?t0=${frames[sel.f0]}&t1=${frames[sel.f1 + 1]}`);
  const shownCounts = await state(() => [...document.querySelectorAll('#analysis table.stats tbody tr')].map((tr) => tr.dataset.site + ':' + tr.querySelector('td.count').textContent));
  assert.deepEqual(shownCounts.sort(), want.sites.map((s) => s.site + ':' + s.count).sort());
  await shot('analysis-framegraph');
});

test('plots show the value under the cursor; messages are ticks on the timeline and jump when clicked', async () => {
  // plots: the hover line names the sample under the cursor, as the relay stored it
  const div = page.locator('#plots .uplot').first();
  await div.waitFor({ timeout: 10000 });
  const over = await div.locator('.u-over').boundingBox();
  await page.mouse.move(over.x + over.width * 0.5, over.y + over.height * 0.5);
  await page.waitForFunction(() => { const el = document.querySelector('#plots .u-hover'); return el && el.textContent.includes(':'); }, null, { timeout: 5000 });
  const hv = await state(() => { const u = [...window.telemark.plotGraphs().values()][0]; const i = u.hoverIdx; return { t: u.data[0][i], v: u.data[1][i], text: u.root.querySelector('.u-hover').textContent, site: [...window.telemark.plotGraphs().keys()][0], origin: window.telemark.sd.origin }; });
  const plots = await api(`${S()}/events?type=plot&limit=1000000`);
  const sample = plots.events.find((e) => e.site === hv.site && Math.abs((e.time_ns - hv.origin) / 1e9 - hv.t) < 1e-9);
  assert.ok(sample, 'the hovered sample is one the relay stored');
  assert.equal(sample.value, hv.v);
  assert.match(hv.text, new RegExp(hv.t.toFixed(3)));
  // messages: one tick per message in the flame chart's view, at the message's time
  const msgs = (await api(`${S()}/events?type=message&limit=1000000`)).events;
  assert.ok(msgs.length > 0, 'the demo logs messages');
  const m = msgs[Math.floor(msgs.length / 2)];
  await state((t) => { const f = window.telemark.flame; f.setRange(t - 5e8 - window.telemark.sd.origin, t + 5e8 - window.telemark.sd.origin, true); }, m.time_ns);
  await sleep(300);
  const ticks = await state(() => { const k = window.telemark.analysis.ticks, f = window.telemark.flame, o = window.telemark.sd.origin; return { n: k.ticks.length, times: k.ticks.map((x) => x.m.t + o), t0: f.t0 + o, t1: f.t1 + o }; });
  const inView = msgs.filter((e) => e.time_ns >= ticks.t0 && e.time_ns <= ticks.t1).map((e) => e.time_ns);
  assert.deepEqual(ticks.times.sort((a, b) => a - b), inView.sort((a, b) => a - b));
  // click a message line in the list: the flame chart centres on it
  const row = page.locator('#messages > div').nth(Math.min(3, msgs.length - 1)); // the demo logs slow frames only
  const t = +(await row.getAttribute('data-t'));
  await row.click();
  const c = await state(() => (window.telemark.flame.t0 + window.telemark.flame.t1) / 2);
  assert.ok(Math.abs(c - t) < 1, `centred on the message (${c} vs ${t})`);
  // click a tick on the strip: same
  const strip = await page.locator('#msgticks canvas').boundingBox();
  const tk = await state(() => window.telemark.analysis.ticks.ticks[0]);
  await page.mouse.click(strip.x + tk.x + 1, strip.y + 8);
  const jt = await state(() => window.telemark.analysis.ticks.lastJump);
  assert.equal(jt, tk.m.t);
  await shot('analysis-messages');
});

test('compare: two ranges side by side with the difference per site', async () => {
  await page.click('#analysis .tabs button[data-tab=compare]');
  const frames = (await api(`${S()}/events?type=frame&limit=1000000`)).events.filter((e) => e.site === 0).map((e) => e.time_ns);
  // A: one frame; B: the whole session
  await state(() => { const f = window.telemark.analysis.frames; f.setSelection(f.rangeOf(10, 10)); window.telemark.analysis.showTab('compare'); });
  await page.selectOption('#analysis .cmp-kind[data-side=A]', 'selection');
  await page.click('#analysis .cmp-set[data-side=A]');
  await page.selectOption('#analysis .cmp-kind[data-side=B]', 'session');
  await page.click('#analysis .cmp-set[data-side=B]');
  await page.click('#analysis .cmp-go');
  await page.waitForFunction(() => window.telemark.analysis.compare.rows, null, { timeout: 10000 });
  const a = await api(`${S()}/stats?t0=${frames[10]}&t1=${frames[11]}&limit=10000`);
  const b = await api(`${S()}/stats?limit=10000`);
  const rows = await state(() => [...document.querySelectorAll('#analysis table.cmp tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent)));
  assert.equal(rows.length, new Set([...a.sites, ...b.sites].map((s) => s.name + s.file + s.line)).size);
  for (const r of rows) {
    const sa = a.sites.find((s) => s.name === r[0]), sb = b.sites.find((s) => s.name === r[0]);
    assert.equal(r[1], sa ? String(sa.count) : '–', r[0]);
    assert.equal(r[2], sb ? String(sb.count) : '–', r[0]);
    const d = (sb ? sb.total_ns : 0) - (sa ? sa.total_ns : 0);
    assert.equal(r[8], (d > 0 ? '+' : d < 0 ? '−' : '') + fmtNs(Math.abs(d)), `${r[0]} Δ total`);
  }
  await shot('analysis-compare');
  assert.deepEqual(pageErrors, []);
});

test('while paused the frame graph holds still; live it follows the session', async () => {
  const demo2 = startDemo(relay, ['--seconds', '20']);
  try {
    const live = await until(async () => { const r = await getJSON(relay, '/api/sessions'); return r.json && r.json.find((s) => s.live && s.stats.zones > 100); }, 15000, 'a second demo session');
    await state((id) => window.telemark.selectSession(id), live.id);
    await page.waitForFunction(() => window.telemark.app.historyDone && window.telemark.analysis.frames.n > 20, null, { timeout: 15000 });
    await sleep(500);
    const a = await state(() => { const f = window.telemark.analysis.frames; return { x0: f.x0, x1: f.x1, n: f.n }; });
    assert.ok(a.x1 > a.x0);
    await page.click('#live'); // pause
    const p = await state(() => { const f = window.telemark.analysis.frames; return { x0: f.x0, x1: f.x1, n: f.n }; });
    await sleep(1500);
    // more frames within 1.5 s as a rule; a loaded machine may take longer
    await page.waitForFunction((n) => window.telemark.analysis.frames.n > n, p.n, { timeout: 10000 }).catch(() => {});
    const q = await state(() => { const f = window.telemark.analysis.frames; return { x0: f.x0, x1: f.x1, n: f.n }; });
    assert.ok(q.n > p.n, 'frames keep arriving');
    assert.deepEqual([q.x0, q.x1], [p.x0, p.x1], 'the graph does not slide while paused');
    await page.click('#live'); // resume
    await page.waitForFunction((x1) => window.telemark.analysis.frames.x1 > x1, q.x1, { timeout: 5000 });
    await shot('analysis-live');
  } finally { await stop(demo2); }
  assert.deepEqual(pageErrors, []);
});
