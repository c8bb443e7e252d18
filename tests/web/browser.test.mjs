// browser.test.mjs — the dashboard in Debian's Chromium (playwright-core) against a real
// telemark-relay and telemark-demo on 127.0.0.1: page load, flame chart state, team and severity
// filters applied by the relay, record/stop/reopen, Chrome trace download; saves a screenshot.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startRelay, startDemo, stop, until, sleep, waitDemoSession, launchChromium, getJSON, BUILD } from './harness.mjs';

let relay, demo, browser, page, session;
const pageErrors = [];

before(async () => {
  relay = await startRelay();
  demo = startDemo(relay, ['--seconds', '120']);
  session = await waitDemoSession(relay);
  browser = await launchChromium();
  page = browser.pages()[0] || await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(relay.url);
});

after(async () => {
  if (browser) { await browser.close(); fs.rmSync(browser.userDataDir, { recursive: true, force: true }); }
  await stop(demo);
  await stop(relay);
  if (relay) fs.rmSync(relay.dataDir, { recursive: true, force: true });
});

const state = (fn, arg) => page.evaluate(fn, arg);
// Waits until the current subscription's history has arrived and some live data followed.
async function settled() {
  await page.waitForFunction(() => window.telemark.app.historyDone, null, { timeout: 15000 });
}

test('the page loads, picks the live demo session and connects the stream', async () => {
  assert.equal(await page.title(), 'telemark');
  await page.waitForFunction(() => window.telemark && window.telemark.app.connected, null, { timeout: 10000 });
  await page.waitForFunction((id) => window.telemark.app.current === id, session.id, { timeout: 10000 });
  const facts = await page.textContent('#facts');
  assert.match(facts, new RegExp(session.program));
  assert.deepEqual(pageErrors, []);
});

test('the flame chart holds and draws the demo zones', async () => {
  await settled();
  await page.waitForFunction(() => window.telemark.sd.zoneCount > 200 && window.telemark.flame.drawn > 0, null, { timeout: 15000 });
  const s = await state(() => {
    const T = window.telemark, sd = T.sd;
    return { zones: sd.zoneCount, threads: sd.threads.size, sites: sd.sites.size, drawn: T.flame.drawn,
      frames: sd.nFrames, names: Object.keys(T.zoneNames()), depthMax: Math.max(...[...sd.threads.values()].map((t) => t.lanes.length)) };
  });
  assert.ok(s.threads >= 2, `zones from several threads, got ${s.threads}`);
  assert.ok(s.depthMax >= 2, 'nested zones');
  assert.ok(s.frames > 10, 'frame boundaries arrive');
  assert.ok(s.names.every((n) => !n.startsWith('#')), 'every zone has its call site name');
  // the canvas is not just background: sample its pixels
  const coloured = await state(() => {
    const cv = document.getElementById('flame'), ctx = cv.getContext('2d');
    const d = ctx.getImageData(0, 0, cv.width, cv.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4 * 7) if (Math.abs(d[i] - 0x15) + Math.abs(d[i + 1] - 0x17) + Math.abs(d[i + 2] - 0x1c) > 60) n++;
    return n;
  });
  assert.ok(coloured > 500, `zones are painted (${coloured} coloured samples)`);
  // hover shows the tooltip with name, duration and file:line; click gives site statistics
  await page.click('#live'); // pause so the zone stays put
  // a zone wide enough to point at, its place worked out at each try from the chart as it is
  // then (a loaded machine may lay the chart out again after the pause)
  const pointAt = () => state(() => {
    const f = window.telemark.flame;
    for (const L of f.layout) for (const lane of L.thread.lanes) for (let i = lane.n - 1; i >= 0; i--) {
      const w = f.cv.clientWidth, x0 = (lane.start[i] - f.t0) / (f.t1 - f.t0) * w, x1 = (lane.start[i] + lane.dur[i] - f.t0) / (f.t1 - f.t0) * w;
      if (x1 - x0 > 6 && x0 > 0 && x1 < w) { const r = f.cv.getBoundingClientRect(); return { x: r.left + (x0 + x1) / 2, y: r.top + L.y + 18 + lane.depth * 16 + 8, site: lane.site[i] }; }
    }
    return null;
  });
  let target = null;
  await until(async () => {
    target = await pointAt();
    if (!target) return false;
    await page.mouse.move(target.x, target.y);
    await sleep(100);
    return page.isVisible('#tip');
  }, 10000, 'the tooltip').catch(() => {});
  assert.ok(target, 'a zone wide enough to point at');
  await page.waitForSelector('#tip', { state: 'visible', timeout: 3000 });
  const tip = await page.textContent('#tip');
  const site = await state((id) => window.telemark.sd.sites.get(id), target.site);
  assert.ok(tip.includes(site.name), `tooltip names the zone: ${tip}`);
  assert.match(tip, /\d+(\.\d+)? (ns|µs|ms|s)/);
  assert.ok(tip.includes(`${site.file}:${site.line}`), 'tooltip gives file:line');
  await page.mouse.click(target.x, target.y);
  const st = await state(() => window.telemark.app.lastStats);
  assert.equal(st.site, target.site);
  assert.ok(st.count >= 1 && st.max >= st.min && st.mean > 0);
  // keyboard: zoom in halves the range around the centre; End resumes live
  const before = await state(() => window.telemark.flame.t1 - window.telemark.flame.t0);
  await page.focus('#flame');
  await page.keyboard.press('+');
  const afterZoom = await state(() => window.telemark.flame.t1 - window.telemark.flame.t0);
  assert.ok(afterZoom < before, 'keyboard zoom');
  await page.keyboard.press('End');
  assert.equal(await state(() => window.telemark.flame.live), true);
});

test('unticking a team removes its zones (filtered in the relay)', async () => {
  await page.waitForFunction(() => document.querySelectorAll('#teams input').length >= 2, null, { timeout: 10000 });
  const teams = await state(() => [...window.telemark.app.teamsKnown.keys()]);
  // a team whose zones exist now
  let bit = -1;
  for (const b of teams) if (await state((x) => window.telemark.zonesWithTeam(x), b) > 0) { bit = b; break; }
  assert.ok(bit >= 0, 'some team has zones');
  const sub0 = await state(() => window.telemark.app.subscription);
  await page.uncheck(`#teams input[data-bit="${bit}"]`);
  await page.waitForFunction((s) => window.telemark.app.subscription > s && window.telemark.app.historyDone, sub0, { timeout: 15000 });
  await sleep(1000); // let live data arrive too
  const r = await state(() => {
    const T = window.telemark, sd = T.sd, mask = T.app.mask;
    return { mask, outside: sd.countZones((site) => { const s = sd.sites.get(site); return !!(s && (s.verbosity & mask) === 0); }), total: sd.zoneCount };
  });
  assert.equal((r.mask >>> bit) & 1, 0);
  assert.equal(r.outside, 0, 'no zone left whose teams are all unticked');
  assert.ok(r.total > 0, 'the other teams still arrive');
  const sub1 = await state(() => window.telemark.app.subscription);
  await page.check(`#teams input[data-bit="${bit}"]`);
  // the next test starts from the full subscription's history, not from a store being refilled
  await page.waitForFunction((s) => window.telemark.app.subscription > s && window.telemark.app.historyDone,
    sub1, { timeout: 15000 });
});

test('unticking a thread leaves it out', async () => {
  await page.waitForFunction(() => document.querySelectorAll('#threads input').length >= 2, null, { timeout: 10000 });
  const t = await state(() => Math.max(...[...window.telemark.app.threadsKnown.keys()]));
  // (waits: the thread's zones may still be on their way after the last subscription change)
  await page.waitForFunction((x) => window.telemark.sd.countZones((s, th) => th === x) > 0, t,
    { timeout: 10000 });
  const sub0 = await state(() => window.telemark.app.subscription);
  await page.uncheck(`#threads input[data-thread="${t}"]`);
  await page.waitForFunction((s) => window.telemark.app.subscription > s && window.telemark.app.historyDone, sub0, { timeout: 15000 });
  await sleep(1000);
  assert.equal(await state((x) => window.telemark.sd.countZones((s, th) => th === x), t), 0);
  assert.ok(await state(() => window.telemark.sd.zoneCount) > 0, 'the other threads still arrive');
  const sub1 = await state(() => window.telemark.app.subscription);
  await page.check(`#threads input[data-thread="${t}"]`);
  await page.waitForFunction((s) => window.telemark.app.subscription > s && window.telemark.app.historyDone, sub1, { timeout: 15000 });
});

test('after quick filter changes the page shows the last one only', async () => {
  // the relay may still be sending an earlier subscription's history when the next one is sent
  await page.waitForFunction(() => document.querySelectorAll('#threads input').length >= 2, null, { timeout: 10000 });
  const t = await state(() => Math.max(...[...window.telemark.app.threadsKnown.keys()]));
  const sub0 = await state(() => window.telemark.app.subscription);
  // each change is sent once the previous one's RESET is in, so its history is on the way
  const nextReset = async (change) => {
    await state(() => { window.__sd = window.telemark.sd; });
    await change();
    await page.waitForFunction(() => window.telemark.sd !== window.__sd, null, { timeout: 15000 });
  };
  await nextReset(() => page.uncheck(`#threads input[data-thread="${t}"]`));
  await nextReset(() => page.check(`#threads input[data-thread="${t}"]`));
  await page.uncheck(`#threads input[data-thread="${t}"]`);
  await page.waitForFunction((s) => window.telemark.app.subscription === s + 3 && window.telemark.app.historyDone, sub0, { timeout: 15000 });
  assert.equal(await state((x) => window.telemark.sd.countZones((s, th) => th === x), t), 0);
  assert.ok(await state(() => window.telemark.sd.zoneCount) > 0, 'the other threads arrive');
  const sub1 = await state(() => window.telemark.app.subscription);
  await page.check(`#threads input[data-thread="${t}"]`);
  await page.waitForFunction((s) => window.telemark.app.subscription > s && window.telemark.app.historyDone, sub1, { timeout: 15000 });
});

test('a lower severity level reduces what arrives', async () => {
  await settled();
  // they arrive as the demo makes them: polled, as a loaded machine may be slow to
  const at5of = () => state(() => ({ msgs: window.telemark.app.received.bySeverity.slice(), above: window.telemark.zonesWithSeverityAbove(2) }));
  const some = (v) => v.msgs[3] + v.msgs[4] + v.msgs[5] > 0 || v.above > 0;
  await until(async () => some(await at5of()), 10000, 'info/debug/trace items').catch(() => {});
  const at5 = await at5of();
  assert.ok(some(at5), 'at trace level, info/debug/trace items arrive');
  const sub0 = await state(() => window.telemark.app.subscription);
  await page.selectOption('#severity', '2');
  await page.waitForFunction((s) => window.telemark.app.subscription > s && window.telemark.app.historyDone, sub0, { timeout: 15000 });
  await sleep(1500);
  const at2 = await state(() => ({ msgs: window.telemark.app.received.bySeverity.slice(), above: window.telemark.zonesWithSeverityAbove(2), zones: window.telemark.sd.zoneCount }));
  assert.equal(at2.msgs[3] + at2.msgs[4] + at2.msgs[5], 0, 'no info/debug/trace message arrives at level warning');
  assert.equal(at2.above, 0, 'no zone above warning arrives');
  await page.selectOption('#severity', '5');
  await settled();
});

test('clicking a frame in the frame-time graph jumps the flame chart to it', async () => {
  await settled();
  await sleep(500); // the graph is (re)built on the next UI refresh
  const over = await page.waitForSelector('#frames canvas', { timeout: 10000 });
  const box = await over.boundingBox();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
  await page.mouse.click(box.x + box.width * 0.6, box.y + box.height / 2);
  const r = await state(() => {
    const f = window.telemark.flame, sd = window.telemark.sd;
    let match = -1;
    for (let i = 0; i + 1 < sd.nFrames; i++) if (sd.frameTimes[i] === f.t0 && sd.frameTimes[i + 1] === f.t1) match = i;
    return { live: f.live, match };
  });
  assert.equal(r.live, false, 'jumping pauses the live view');
  assert.ok(r.match >= 0, 'the view is exactly one frame');
  await page.click('#live');
});

test('the severity level and team mask can be pushed to the target', async () => {
  await page.selectOption('#severity', '4');
  await page.click('#push');
  await page.waitForFunction(() => window.telemark.app.lastPush, null, { timeout: 10000 });
  const push = await state(() => window.telemark.app.lastPush);
  assert.equal(push.level, 4, JSON.stringify(push));
  const info = await getJSON(relay, `/api/sessions/${session.id}`);
  assert.equal(info.json.control.level, 4);
  await page.selectOption('#severity', '5');
  await page.click('#push');
  await page.waitForFunction(() => window.telemark.app.lastPush && window.telemark.app.lastPush.level === 5, null, { timeout: 10000 });
  await settled();
});

test('record, stop, reopen: the recording shows the same zones', async () => {
  await page.click('#record');
  await page.waitForFunction(() => window.telemark.app.info && window.telemark.app.info.recording, null, { timeout: 10000 });
  await sleep(2000);
  await page.click('#record');
  await page.waitForFunction(() => window.telemark.app.info && !window.telemark.app.info.recording, null, { timeout: 10000 });
  await sleep(500);
  // keys of every live zone, in absolute time
  await state(() => { window.__liveKeys = new Set(window.telemark.zoneKeys()); });
  const rec = await until(async () => {
    const r = await getJSON(relay, '/api/recordings');
    return r.json && r.json.find((x) => !x.open && x.size > 0);
  }, 10000, 'the recording in /api/recordings');
  await page.waitForFunction((n) => [...document.querySelectorAll('#recordings option')].some((o) => o.value === n), rec.name, { timeout: 10000 });
  await page.selectOption('#recordings', rec.name);
  await page.click('#open');
  await page.waitForFunction((live) => window.telemark.app.current && window.telemark.app.current !== live && window.telemark.app.historyDone,
    session.id, { timeout: 15000 });
  const cmp = await state(() => {
    const keys = window.telemark.zoneKeys();
    let missing = 0;
    for (const k of keys) if (!window.__liveKeys.has(k)) missing++;
    return { n: keys.length, missing, example: keys[0] };
  });
  assert.ok(cmp.n > 50, `the recording holds zones (${cmp.n})`);
  assert.equal(cmp.missing, 0, 'every recorded zone is one the live view showed');
});

test('Chrome trace JSON download parses and holds the zones', async () => {
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 10000 }), page.click('#download')]);
  const file = await dl.path();
  const trace = JSON.parse(fs.readFileSync(file, 'utf8'));
  const expect = await state(() => ({ zones: window.telemark.sd.zoneCount, names: window.telemark.zoneNames() }));
  const x = trace.traceEvents.filter((e) => e.ph === 'X');
  assert.equal(x.length, expect.zones);
  const names = {};
  for (const e of x) { names[e.name] = (names[e.name] || 0) + 1; assert.ok(e.dur >= 0 && Number.isFinite(e.ts)); }
  assert.deepEqual(names, expect.names);
});

test('screenshot of the live dashboard', async () => {
  await page.selectOption('#session', session.id);
  await settled();
  await state(() => { const f = window.telemark.flame; f.setRange(f.t1 - 5e7, f.t1, false); f.setLive(true); });
  await sleep(1500);
  const out = path.join(BUILD, 'web-dashboard.png');
  await page.screenshot({ path: out });
  assert.ok(fs.statSync(out).size > 10000);
  assert.deepEqual(pageErrors, []);
});
