// nav.test.mjs — dashboard navigation in Chromium at 1280×720 and 1920×1080 against a real relay
// and demo: bounded page store with the whole session browsable through GET …/lod, "fit all"
// covering what the relay stores, page-wide shortcuts and the ? overlay, ruler labels, shift-drag
// measure, collapsible threads, lane scrollbar, tooltip inside the window, recordings in their
// own time, and notices that explain evictions. Screenshots go to build/screenshots/.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startRelay, startDemo, stop, until, sleep, getJSON, launchChromium, BUILD } from './harness.mjs';

const SHOTS = path.join(BUILD, 'screenshots');
fs.mkdirSync(SHOTS, { recursive: true });
const SIZES = [[1280, 720], [1920, 1080]];

describe('dashboard navigation', () => {
  let relay, browser, page, s;
  const errors = [];
  const T = (fn, arg) => page.evaluate(fn, arg);
  const shot = async (name) => {
    const v = page.viewportSize();
    await page.screenshot({ path: path.join(SHOTS, `${name}-${v.width}x${v.height}.png`) });
  };

  before(async () => {
    relay = await startRelay();
    browser = await launchChromium();
    page = browser.pages()[0] || await browser.newPage();
    page.on('pageerror', (e) => errors.push(e.message));
    await page.setViewportSize({ width: 1280, height: 720 });
    await page.goto(relay.url);
    // a small page store, so that a short demo overflows it: older zones must come from the relay
    await page.waitForFunction(() => window.telemark);
    await T(() => { window.telemark.SessionData.maxZones = 20000; });
    const demo = startDemo(relay, ['--seconds', '6']);
    s = await until(async () => {
      const r = await getJSON(relay, '/api/sessions');
      return r.json && r.json.find((v) => v.stats.zones > 0);
    }, 15000, 'the demo session');
    await until(() => T(() => window.telemark.app.historyDone), 15000, 'history');
    await demo.exited;
    s = await until(async () => { const r = await getJSON(relay, `/api/sessions/${s.id}`); return !r.json.live && r.json; }, 20000, 'the demo to end');
    await until(() => T(() => window.telemark.lod.overview), 15000, 'the overview');
  });
  after(async () => {
    if (browser) { await browser.close(); fs.rmSync(browser.userDataDir, { recursive: true, force: true }); }
    await stop(relay);
    fs.rmSync(relay.dataDir, { recursive: true, force: true });
  });

  test('the page store is bounded; fit all is the whole stored session, older parts come from the relay', async () => {
    const st = await T(() => { const T = window.telemark; return { zones: T.sd.zoneCount, max: T.sd.maxZones, trimmed: T.sd.trimmed, origin: T.sd.origin }; });
    assert.ok(st.zones <= st.max, `page holds ${st.zones} zones, cap ${st.max}`);
    assert.ok(st.trimmed > 0, 'the demo overflowed the page store');
    // the page learns the stored range from GET /api/sessions (polled each second)
    await until(() => T((last) => { const r = window.telemark.flame.range(); return r && r[1] + window.telemark.sd.origin >= last; }, s.last_ns), 5000, 'the stored range');
    await page.keyboard.press('Home'); // a fresh page: no click first
    const r = await T(() => ({ t0: window.telemark.flame.t0, t1: window.telemark.flame.t1 }));
    assert.ok(r.t0 <= s.first_ns - st.origin + 1, `fit all starts at the first stored zone: ${r.t0} vs ${s.first_ns - st.origin}`);
    assert.ok(r.t1 >= s.last_ns - st.origin - 1, 'and ends at the last');
    // the view now needs what the page does not hold: the overview is refreshed up to the end
    await until(() => T((last) => { const l = window.telemark.lod; return l.overview.t1 + l.origin >= last; }, s.last_ns), 15000, 'the overview of everything stored');
    const ov = await T(() => ({ zones: window.telemark.lod.overview.zones }));
    assert.equal(ov.zones, s.stats.zones, 'the overview summarises every zone the relay stores');
    // zoom into the oldest second, which the page no longer holds: full detail comes from the relay
    const a = s.first_ns + 200e6, b = a + 50e6;
    await T(([a, b]) => window.telemark.flame.setRange(a, b, true), [a - st.origin, b - st.origin]);
    await until(() => T(([a, b]) => { const d = window.telemark.lod.detail; return d && d.t0 <= a && d.t1 >= b; }, [a - st.origin, b - st.origin]), 10000, 'full detail of the old range');
    const api = await getJSON(relay, `/api/sessions/${s.id}/zones?t0=${a}&t1=${b}&limit=1000000`);
    const shown = await T(([a, b]) => {
      const d = window.telemark.lod.detail; let n = 0;
      for (const lanes of d.threads.values()) for (const l of lanes) { if (!l) continue; for (let i = 0; i < l.n; i++) if (l.start[i] <= b && l.start[i] + l.dur[i] >= a) n++; }
      return n;
    }, [a - st.origin, b - st.origin]);
    assert.equal(shown, api.json.count, 'the page has every zone of the old range');
    // drawn on a later frame, which a loaded machine may delay
    assert.ok(await until(() => T(() => window.telemark.flame.drawn > 0), 5000, 'a drawing').catch(() => false), 'and draws them');
    for (const [w, h] of SIZES) { await page.setViewportSize({ width: w, height: h }); await sleep(300); await shot('old-range-detail'); }
    await page.keyboard.press('f');
    for (const [w, h] of SIZES) { await page.setViewportSize({ width: w, height: h }); await sleep(500); await shot('fit-all'); }
    await page.setViewportSize({ width: 1280, height: 720 });
  });

  test('shortcuts work from anywhere but text fields; ? shows them', async () => {
    const span = () => T(() => window.telemark.flame.t1 - window.telemark.flame.t0);
    const fg = await page.locator('#frames').boundingBox();
    await page.mouse.click(fg.x + fg.width / 2, fg.y + fg.height / 2); // the frame-time graph
    await sleep(100);
    const s0 = await span();
    await page.keyboard.press('-');
    assert.ok(await span() > s0 * 1.2, 'zoomed out after a click elsewhere');
    await page.focus('#severity');
    const s1 = await span();
    await page.keyboard.press('f');
    assert.equal(await span(), s1, 'keys in a list are the list\'s');
    await page.evaluate(() => document.activeElement.blur());
    assert.equal(await page.isVisible('#keyhelp'), false);
    await page.keyboard.press('?');
    assert.equal(await page.isVisible('#keyhelp'), true);
    assert.match(await page.textContent('#keyhelp'), /shift\+drag/);
    for (const [w, h] of SIZES) { await page.setViewportSize({ width: w, height: h }); await sleep(200); await shot('keys-help'); }
    await page.setViewportSize({ width: 1280, height: 720 });
    await page.keyboard.press('Escape');
    assert.equal(await page.isVisible('#keyhelp'), false);
  });

  test('ruler labels differ at every zoom and use s, ms, µs, ns', async () => {
    const origin = await T(() => window.telemark.sd.origin);
    const mid = (s.first_ns + s.last_ns) / 2 - origin;
    for (const [span, unit] of [[2e9, /ms| s$/], [5e6, /ms|µs/], [20e3, /µs|ns/], [1500, /ns/]]) {
      await T(([a, b]) => window.telemark.flame.setRange(a, b, true), [mid, mid + span]);
      await sleep(150);
      const labels = await T(() => window.telemark.flame.rulerLabels);
      assert.ok(labels.length >= 3, `${span}: ${labels}`);
      assert.equal(new Set(labels).size, labels.length, `labels differ: ${labels}`);
      assert.match(labels.slice(1).join(' '), unit, `${span} ns: ${labels}`);
      const first = parseFloat(labels[0]);
      assert.ok(Math.abs(first * 1e9 - (mid + origin)) <= span, `first label is the session's own time: ${labels[0]}`);
    }
    await until(() => T(() => { const l = window.telemark.lod; return !l.inflight && l.detail; }), 5000, 'detail for the screenshot');
    for (const [w, h] of SIZES) { await page.setViewportSize({ width: w, height: h }); await sleep(300); await shot('ruler-ns'); }
    await page.setViewportSize({ width: 1280, height: 720 });
  });

  test('shift-drag measures a range and shows its duration', async () => {
    await page.keyboard.press('Home');
    const box = await page.locator('#flame').boundingBox();
    const t = await T(() => ({ t0: window.telemark.flame.t0, t1: window.telemark.flame.t1 }));
    await page.keyboard.down('Shift');
    await page.mouse.move(box.x + 200, box.y + 100);
    await page.mouse.down();
    await page.mouse.move(box.x + 500, box.y + 120, { steps: 5 });
    await page.mouse.up();
    await page.keyboard.up('Shift');
    const m = await T(() => window.telemark.flame.measured());
    const want = 300 / box.width * (t.t1 - t.t0);
    assert.ok(Math.abs(m.dur - want) <= 2 / box.width * (t.t1 - t.t0), `measured ${m.dur} vs ${want}`);
    assert.match(await page.textContent('#measure'), /measured \d/);
    const t2 = await T(() => window.telemark.flame.t0);
    assert.equal(t2, t.t0, 'measuring does not pan');
    for (const [w, h] of SIZES) { await page.setViewportSize({ width: w, height: h }); await sleep(200); await shot('measure'); }
    await page.setViewportSize({ width: 1280, height: 720 });
    await page.keyboard.press('Escape');
    assert.equal(await T(() => window.telemark.flame.measured()), null);
  });

  test('threads collapse and expand; lanes scroll; all lanes reachable at 1280×720', async () => {
    await page.keyboard.press('e');
    await sleep(100);
    const L = await T(() => window.telemark.flame.layout.map((l) => ({ id: l.thread.id, y: l.y, rows: l.rows })));
    const box = await page.locator('#flame').boundingBox();
    assert.ok(L.length >= 2);
    await page.mouse.click(box.x + 40, box.y + L[0].y + 9); // thread 0's header
    // the layout is rebuilt on the next frame, which a loaded machine may delay
    const laidOut = (collapsed) => page.waitForFunction((c) => window.telemark.flame.layout[0].collapsed === c, collapsed, { timeout: 5000 }).catch(() => {});
    await laidOut(true);
    let L2 = await T(() => window.telemark.flame.layout.map((l) => ({ id: l.thread.id, rows: l.rows, collapsed: l.collapsed })));
    assert.equal(L2[0].collapsed, true);
    assert.equal(L2[0].rows, 0);
    await page.mouse.click(box.x + 40, box.y + L[0].y + 9);
    await laidOut(false);
    L2 = await T(() => window.telemark.flame.layout.map((l) => ({ rows: l.rows, collapsed: l.collapsed })));
    assert.equal(L2[0].collapsed, false);
    assert.equal(L2[0].rows, L[0].rows);
    // all expanded at 1280×720 the lanes do not fit: a scrollbar, and the last lane can be reached
    const h = await T(() => ({ content: window.telemark.flame.contentHeight, H: document.getElementById('flame').clientHeight }));
    assert.ok(h.content > h.H, `lanes taller than the chart: ${h.content} > ${h.H}`);
    assert.equal(await page.isVisible('#vscroll'), true);
    await page.evaluate(() => { const v = document.getElementById('vscroll'); v.scrollTop = v.scrollHeight; v.dispatchEvent(new Event('scroll')); });
    // the lanes move on the next layout, a later frame
    const lastLane = () => T(() => { const f = window.telemark.flame, l = f.layout[f.layout.length - 1]; return { bottom: l.y + 18 + l.rows * 16, H: f.cv.clientHeight, scrollY: f.scrollY }; });
    await until(async () => { const l = await lastLane(); return l.scrollY > 0 && l.bottom <= l.H; }, 5000, 'the last lane').catch(() => {});
    const last = await lastLane();
    assert.ok(last.scrollY > 0 && last.bottom <= last.H, `last lane visible: ${JSON.stringify(last)}`);
    await shot('lanes-scrolled');
    await page.setViewportSize({ width: 1920, height: 1080 });
    await sleep(200);
    await shot('lanes-scrolled');
    await page.keyboard.press('c');
    assert.ok(await until(() => T(() => window.telemark.flame.layout.every((l) => l.collapsed)), 5000, 'every lane collapsed').catch(() => false), 'c collapses every lane');
    for (const [w, h] of SIZES) { await page.setViewportSize({ width: w, height: h }); await sleep(200); await shot('lanes-collapsed'); }
    await page.keyboard.press('e');
    await T(() => window.telemark.flame.scrollTo(0));
  });

  test('names are cut with … and the tooltip stays inside the window', async () => {
    const cut = await T(() => { const f = window.telemark.flame; f.labelWidth.clear(); return f.fitName(f.ctx, 999999, { name: 'AVeryLongZoneNameThatCannotFit' }, 60); });
    assert.ok(cut.endsWith('…') && cut.length > 1, cut);
    for (const [w, hgt] of SIZES) {
      await page.setViewportSize({ width: w, height: hgt });
      // inside one long zone of the main thread, so that the right edge is over it
      const z = (await getJSON(relay, `/api/sessions/${s.id}/zones?min_dur=1000000&limit=500`)).json.zones.sort((a, b) => b[1] - a[1])[0];
      const origin = await T(() => window.telemark.sd.origin);
      await T(([a, b]) => window.telemark.flame.setRange(a, b, true), [z[0] - origin + z[1] * 0.3, z[0] - origin + z[1] * 0.6]);
      // only that zone's thread expanded, so its lane is on screen at any size
      await T((t) => { const f = window.telemark.flame; for (const l of f.layout) f.collapsed.add(l.thread.id); f.collapsed.delete(t); f.scrollTo(0); }, z[2]);
      // the layout is rebuilt on a later frame, which a loaded machine may delay (as above)
      await page.waitForFunction((t) => window.telemark.flame.layout.every((l) => l.collapsed === (l.thread.id !== t)), z[2], { timeout: 5000 }).catch(() => {});
      // the pointer's place from the chart's rectangle and layout as they are at each try: while
      // the machine is loaded the page above the chart may still reflow (a failure once found
      // the chart 8 px higher than where the place had been worked out)
      const at = () => T(([t, d]) => {
        const f = window.telemark.flame, r = f.cv.getBoundingClientRect(), l = f.layout.find((v) => v.thread.id === t);
        return l && { x: r.left + r.width - 16, y: r.top + l.y + 18 + d * 16 + 8 };
      }, [z[2], z[4]]);
      // the tooltip follows the mouse over what is drawn: hover again until the range is drawn
      let x = 0, y = 0;
      const shown = await until(async () => {
        const p = await at();
        if (!p) return false;
        ({ x, y } = p);
        await page.mouse.move(x - 4, y); await page.mouse.move(x, y); await sleep(100);
        return page.isVisible('#tip');
      }, 10000, 'the tooltip').catch(() => false);
      // what the chart had under the pointer, so that a failure says why there was no tooltip
      const why = shown ? '' : JSON.stringify(await T(([px, py, t]) => {
        const f = window.telemark.flame, r = f.cv.getBoundingClientRect(), cx = px - r.left, cy = py - r.top;
        const l = f.layout.find((v) => v.thread.id === t);
        return { rect: [r.left, r.top, r.width, r.height], at: [cx, cy], lane: l && { y: l.y, rows: l.rows, collapsed: l.collapsed },
          range: [f.t0, f.t1], t: f.xToT(cx), live: f.liveParts || null, plan: (f.plan || []).map((g) => [g.from, g.to]), hit: !!f.hit(cx, cy) };
      }, [x, y, z[2]]));
      assert.equal(shown, true, `tooltip over the zone ${JSON.stringify(z)}: ${why}`);
      const tip = await page.locator('#tip').boundingBox();
      assert.ok(tip.x >= 0 && tip.x + tip.width <= w && tip.y + tip.height <= hgt, `tooltip inside ${w}×${hgt}: ${JSON.stringify(tip)}`);
      await shot('tooltip');
    }
    await page.keyboard.press('e');
    await page.setViewportSize({ width: 1280, height: 720 });
  });

  test('a recording shows the session\'s own times and says "recording"', async () => {
    // record a fresh demo session, then open the file
    const demo = startDemo(relay, ['--seconds', '4']);
    const live = await until(async () => { const r = await getJSON(relay, '/api/sessions'); return r.json.find((v) => v.live && v.id !== s.id && v.stats.zones > 0); }, 15000, 'a second demo');
    const st = await getJSON(relay, `/api/sessions/${live.id}/record/start`, { method: 'POST', headers: { 'Content-Type': 'application/json' } });
    assert.equal(st.status, 200, st.text);
    await demo.exited;
    await until(async () => (await getJSON(relay, `/api/sessions/${live.id}`)).json.recording === false || (await getJSON(relay, `/api/sessions/${live.id}/record/stop`, { method: 'POST', headers: { 'Content-Type': 'application/json' } })).status === 200, 10000, 'recording stopped');
    const name = path.basename(st.json.path);
    const opened = await getJSON(relay, '/api/recordings/open', { method: 'POST', body: JSON.stringify({ name }), headers: { 'Content-Type': 'application/json' } });
    assert.equal(opened.status, 200, opened.text);
    await T((id) => window.telemark.selectSession(id), opened.json.id);
    await until(() => T(() => window.telemark.app.historyDone && window.telemark.lod.overview), 15000, 'the recording loaded');
    await until(async () => (await page.textContent('#conn')).trim() === 'recording', 10000, 'says recording').catch(() => {});
    await sleep(1200); // and still says so a moment later
    assert.equal((await page.textContent('#conn')).trim(), 'recording');
    assert.equal((await page.textContent('#live')).trim(), 'Recording');
    assert.equal(await page.isDisabled('#live'), true);
    const v = await T(() => ({ origin: window.telemark.sd.origin, t0: window.telemark.flame.t0, label: window.telemark.flame.rulerLabels[0], live: window.telemark.flame.live }));
    assert.equal(v.live, false, 'not following a live edge');
    assert.equal(v.origin, opened.json.first_ns, 'page time 0 is the recording\'s first stored time');
    assert.ok(opened.json.first_ns > 1e9, 'a session time well past 0');
    const label = parseFloat(v.label);
    assert.ok(Math.abs(label * 1e9 - opened.json.first_ns) < (opened.json.last_ns - opened.json.first_ns) + 1e9, `ruler shows session time: ${v.label} vs ${opened.json.first_ns / 1e9}`);
    await page.keyboard.press(' '); // no live edge: Space does nothing
    assert.equal(await T(() => window.telemark.flame.live), false);
    for (const [w, h] of SIZES) { await page.setViewportSize({ width: w, height: h }); await sleep(300); await shot('recording'); }
    await page.setViewportSize({ width: 1280, height: 720 });
  });

  test('evictions are explained, with what to change and a working link', async () => {
    const small = await startRelay(['--session-memory', '1M']);
    const p2 = await browser.newPage();
    try {
      await p2.setViewportSize({ width: 1280, height: 720 });
      await p2.goto(small.url);
      const demo = startDemo(small, ['--seconds', '8']);
      await until(async () => { const r = await getJSON(small, '/api/sessions'); return r.json.find((v) => v.stats.evicted > 0); }, 20000, 'evictions');
      await p2.waitForSelector('#notices .note[data-key="evicted"]', { timeout: 10000 });
      const text = await p2.textContent('#notices');
      assert.match(text, /forgot the oldest [\d,]+ zones/);
      assert.match(text, /--session-memory/);
      const href = await p2.getAttribute('#notices .note[data-key="evicted"] a', 'href');
      assert.match(href, /help\.html#evicted$/);
      const help = await fetch(new URL(href, small.url));
      assert.equal(help.status, 200);
      assert.match(await help.text(), /id="evicted"/);
      assert.equal(await p2.getAttribute('#counters .warn a.q', 'href').then((h) => /help\.html#/.test(h)), true, 'the counter links to its explanation');
      for (const [w, h] of SIZES) { await p2.setViewportSize({ width: w, height: h }); await sleep(300); await p2.screenshot({ path: path.join(SHOTS, `notices-${w}x${h}.png`) }); }
      await stop(demo);
    } finally {
      await p2.close();
      await stop(small);
      fs.rmSync(small.dataDir, { recursive: true, force: true });
    }
  });

  test('no page errors, no failed fetch from the relay', async () => {
    assert.deepEqual(errors, []);
    const l = await T(() => ({ requests: window.telemark.lod.requests, errors: window.telemark.lod.errors, last: window.telemark.lod.lastError }));
    assert.ok(l.requests > 3, `the page fetched from the relay (${l.requests})`);
    assert.equal(l.errors, 0, `failed fetches, last: ${l.last}`);
  });
});
