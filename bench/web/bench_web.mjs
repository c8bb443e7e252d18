// bench_web.mjs — tmk-bench-web: the dashboard in headless Chromium (playwright-core, Debian's
// Chromium) served by a real telemark-relay on 127.0.0.1.
//   heap_mb_10min    : tmk-web-game-feeder feeds the relay 10 minutes of game data (~43 M zones)
//                      as fast as it takes it while the page follows the session live; then the
//                      page's JS heap plus its array buffers after a garbage collection, in MiB.
//   fps_pan_10m      : then the view pans and zooms continuously over everything the relay stores
//                      (≥ 10 M zones) for several seconds; frames presented per second, from
//                      requestAnimationFrame timestamps (the page fetches from the relay meanwhile).
//   frame_ms_p95_10m : the 95th percentile of those frame intervals. The relay serves the page
//                      cross-origin isolated (COOP + COEP), so Chromium's timestamps have 5 µs
//                      resolution instead of 100 µs with jitter (which read 16.5–16.8 ms for a
//                      steady 60 Hz); the comment line says which applied.
//   latency_ms_p50   : a real agent (latency_emitter) ends a marker zone every 20 ms with its
//                      wall-clock time as extra data; the page notes when the first frame that
//                      draws it is painted; the median difference.
import path from 'node:path';
import fs from 'node:fs';
import { startRelay, stop, launchChromium, spawnLogged, until, sleep, BIN } from '../../tests/web/harness.mjs';

const FEED_S = +(process.env.TMK_BENCH_WEB_FEED_S || 600);
const PAN_S = +(process.env.TMK_BENCH_WEB_PAN_S || 8);
const PROBES = +(process.env.TMK_BENCH_WEB_PROBES || 150);

const relay = await startRelay();
const browser = await launchChromium();
let emitter = null;
try {
  const page = browser.pages()[0] || await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
  await page.goto(relay.url);
  await page.waitForFunction(() => window.telemark && window.telemark.app.connected);

  // ---- latency: zone end on the target → drawn --------------------------------------------
  emitter = spawnLogged(path.join(BIN, 'tmk-web-latency-emitter'), [String(relay.port), String(PROBES)], 'emitter');
  await page.evaluate(() => {
    const T = window.telemark, f = T.flame;
    window.__lat = [];
    const seen = new Set();
    const draw = f.draw.bind(f);
    f.draw = () => {
      draw();
      const sd = T.sd;
      if (!sd || !sd.markerText.size) return;
      const now = (performance.timeOrigin + performance.now()) * 1e6;
      for (const [k, v] of sd.markerText) {
        if (seen.has(k)) continue;
        seen.add(k);
        if (T.app.historyDone) window.__lat.push((now - Number(v)) / 1e6);
      }
    };
  });
  await until(async () => {
    const r = await fetch(relay.base + '/api/sessions');
    const list = await r.json();
    const s = list.find((x) => x.program === 'tmk-bench-web-latency');
    if (s) await page.evaluate((id) => window.telemark.selectSession(id), s.id);
    return s;
  }, 10000, 'the emitter session');
  await until(() => page.evaluate((n) => window.__lat.length >= n, Math.floor(PROBES * 0.6)), PROBES * 20 + 20000, 'latency probes');
  const lat = (await page.evaluate(() => window.__lat)).slice().sort((a, b) => a - b);
  await emitter.exited;
  emitter = null;
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(lat.length * p))];

  // ---- a 10-minute session, fed as fast as the relay takes it --------------------------------
  // tmk-web-game-feeder sends 10 minutes of the game-like stream (5 threads, 60 fps, ~72 k zones
  // per second) over TCP; the page follows it live from the first packet.
  const feeder = spawnLogged(path.join(BIN, 'tmk-web-game-feeder'), [String(relay.port), String(FEED_S)], 'feeder');
  let sid = null;
  await until(async () => {
    const list = await (await fetch(relay.base + '/api/sessions')).json();
    const s = list.find((x) => x.program === 'tmk-web-game-feeder');
    if (s) { sid = s.id; await page.evaluate((id) => window.telemark.selectSession(id), s.id); }
    return s;
  }, 20000, 'the feeder session');
  const feedT0 = Date.now();
  await feeder.exited;
  const fed = /FEED zones=(\d+) frames=(\d+) packets=(\d+)/.exec(feeder.output);
  if (!fed) throw new Error('feeder: ' + feeder.output);
  // until the relay has decoded every packet (its counter stops moving) and the page caught up
  let info = null, lastPk = -1;
  await until(async () => {
    info = (await (await fetch(relay.base + '/api/sessions/' + sid)).json());
    const still = info.stats.packets === lastPk;
    lastPk = info.stats.packets;
    return still && info.stats.packets >= Number(fed[3]) - 1;
  }, 300000, 'the relay to ingest the feed');
  await sleep(3000);
  const feedS = (Date.now() - feedT0) / 1000;
  const cdp = await browser.newCDPSession(page);
  await cdp.send('HeapProfiler.collectGarbage');
  const heap = await cdp.send('Runtime.getHeapUsage');
  const heapMb = (heap.usedSize + (heap.embedderHeapUsedSize || 0) + (heap.backingStorageSize || 0)) / 1048576;
  const pageZones = await page.evaluate(() => window.telemark.sd.zoneCount);
  const pageGaps = await page.evaluate(() => window.telemark.sd.gaps.length);

  // ---- continuous pan/zoom over everything the relay stores ---------------------------------
  // Every animation frame moves the view (as a user dragging and wheeling would): from the whole
  // session down to ~1 ms and back, twice, while panning across it. The frame rate is what
  // requestAnimationFrame timestamps say was presented; the page fetches from the relay meanwhile.
  const pan = await page.evaluate(async (seconds) => {
    const T = window.telemark, f = T.flame, lod = T.lod;
    f.setLive(false);
    const first = lod.first, last = lod.last, span = last - first;
    const stamps = [];
    await new Promise((done) => {
      let start = null;
      const step = (ts) => {
        if (start === null) start = ts;
        stamps.push(ts);
        const u = (ts - start) / (seconds * 1000);
        const z = 0.5 - 0.5 * Math.cos(u * Math.PI * 4);            // 0 → 1 → 0 → 1 → 0
        const w = span * Math.pow(1e6 / span, z);                     // whole session … 1 ms
        const c = first + span * (0.05 + 0.9 * u);
        f.setRange(c - w / 2, c + w / 2, true);
        if (u < 1) requestAnimationFrame(step); else done();
      };
      requestAnimationFrame(step);
    });
    const d = [];
    for (let i = 1; i < stamps.length; i++) d.push(stamps[i] - stamps[i - 1]);
    d.sort((a, b) => a - b);
    return { frames: stamps.length - 1, ms: stamps[stamps.length - 1] - stamps[0],
      p50: d[d.length >> 1], p95: d[Math.floor(d.length * 0.95)], max: d[d.length - 1],
      isolated: self.crossOriginIsolated === true,
      missed: d.filter((x) => x > 1.5 * d[d.length >> 1]).length, hist: d.map((x) => x.toFixed(2)).filter((v, i, a) => a.indexOf(v) === i),
      requests: lod.requests, errors: lod.errors, lastError: lod.lastError, log: lod.log.slice(-12) };
  }, PAN_S);
  const fps = pan.frames / (pan.ms / 1000);
  if (process.env.TMK_BENCH_WEB_VERBOSE) console.log(pan.log);
  console.log(`# fed ${fed[1]} zones (${FEED_S} s of game time) in ${feedS.toFixed(1)} s; the relay stores ${info.stats.zones - info.stats.evicted} zones (${info.stats.evicted} evicted by --session-memory), the page holds ${pageZones} of them (live stream; ${pageGaps} ranges coalesced while it fell behind)`);
  console.log(`# pan/zoom ${PAN_S} s over the stored session: ${pan.frames} frames, frame time p50 ${pan.p50.toFixed(2)} ms, p95 ${pan.p95.toFixed(2)} ms, max ${pan.max.toFixed(2)} ms, ${pan.missed} longer than 1.5 × the median (a missed refresh); distinct intervals ${pan.hist.join(' ')} (${pan.isolated ? 'cross-origin isolated page: 5 µs timestamps' : 'page NOT cross-origin isolated: timestamps coarsened to 100 µs'}); ${pan.requests} fetches from the relay (${pan.errors} failed${pan.errors ? ', last: ' + pan.lastError : ''})`);
  console.log(`# latency over ${lat.length} probes: p50 ${q(0.5).toFixed(1)} ms, p90 ${q(0.9).toFixed(1)} ms, max ${lat[lat.length - 1].toFixed(1)} ms`);
  console.log(`RESULT fps_pan_10m=${fps.toFixed(1)}`);
  console.log(`RESULT frame_ms_p95_10m=${pan.p95.toFixed(1)}`);
  console.log(`RESULT heap_mb_10min=${heapMb.toFixed(0)}`);
  console.log(`RESULT latency_ms_p50=${q(0.5).toFixed(1)}`);
  console.log(`RESULT latency_ms_p90=${q(0.9).toFixed(1)}`);
} finally {
  if (emitter) await stop(emitter);
  await browser.close();
  fs.rmSync(browser.userDataDir, { recursive: true, force: true });
  await stop(relay);
  fs.rmSync(relay.dataDir, { recursive: true, force: true });
}
