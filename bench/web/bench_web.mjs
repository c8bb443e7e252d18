// bench_web.mjs — tmk-bench-web: the dashboard in headless Chromium (playwright-core, Debian's
// Chromium) served by a real telemark-relay on 127.0.0.1.
//   fps_10m        : 10 M zones loaded into the page's store; a scripted pan/zoom sequence is
//                    drawn frame by frame; 1000 / (95th percentile frame time in ms).
//   latency_ms_p50 : a real agent (latency_emitter) ends a marker zone every 20 ms with its
//                    wall-clock time as extra data; the page notes when the first frame that
//                    draws it is painted; the median difference.
import path from 'node:path';
import fs from 'node:fs';
import { startRelay, stop, launchChromium, spawnLogged, until, sleep, BIN } from '../../tests/web/harness.mjs';

const ZONES = +(process.env.TMK_BENCH_WEB_ZONES || 10_000_000);
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

  // ---- fps with 10 M zones -----------------------------------------------------------------
  const fps = await page.evaluate(async (N) => {
    const T = window.telemark;
    T.stream.close();
    const sd = new T.SessionData('bench-10m');
    const t0 = performance.now();
    // game-shaped synthetic session: 8 threads, 16.6 ms frames, 4 nesting levels, 48 sites
    for (let i = 1; i <= 48; i++) sd.sites.set(i, { id: i, kind: 0, severity: 3, verbosity: 1 << (i % 4), colour: 0, line: i, name: 'zone_' + i, file: 'bench.c' });
    let seed = 7;
    const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296;
    const FR = 16.6e6;
    let n = 0, frame = 0;
    while (n < N) {
      const f0 = frame * FR;
      for (let th = 0; th < 8 && n < N; th++) {
        sd.addZone(th, 0, f0, FR * 0.95, 1 + th); n++;
        const kids = 40 + Math.floor(rnd() * 20);
        const slot = FR * 0.95 / kids;
        for (let k = 0; k < kids && n < N; k++) {
          const s1 = f0 + k * slot, d1 = slot * (0.5 + 0.45 * rnd());
          sd.addZone(th, 1, s1, d1, 9 + (k % 16)); n++;
          let u = s1;
          for (let j = 0; j < 3 && n < N; j++) {
            const d2 = d1 / 3 * (0.3 + 0.6 * rnd());
            sd.addZone(th, 2, u, d2, 25 + ((j + th) % 12)); n++;
            if (j === 1 && n < N) { sd.addZone(th, 3, u, d2 * 0.5 * rnd(), 37 + (k % 12)); n++; }
            u += d1 / 3;
          }
        }
      }
      sd.addFrame(frame * FR);
      frame++;
    }
    sd.finishBatch();
    const loadMs = performance.now() - t0;
    const f = T.flame;
    f.setSession(sd);
    f.setLive(false);
    const span = sd.maxTime - sd.minTime;
    // pan/zoom script: from everything down to a few frames and back, panning all the while
    const steps = 600, times = [];
    let t1 = sd.minTime, w = span;
    await new Promise((done) => {
      let k = 0, last = performance.now(), rafTimes = [];
      const step = () => {
        const z = Math.sin((k / steps) * Math.PI * 2) * 0.5 + 0.5; // 0..1..0
        w = span * Math.pow(1e-5, z);               // 100% → 0.001% of the session
        const c = sd.minTime + span * (0.1 + 0.8 * (k / steps));
        f.setRange(c - w / 2, c + w / 2, false);
        const s = performance.now();
        f.draw();
        times.push(performance.now() - s);
        const now = performance.now();
        rafTimes.push(now - last); last = now;
        if (++k < steps) requestAnimationFrame(step); else { window.__raf = rafTimes; done(); }
      };
      requestAnimationFrame(step);
    });
    times.sort((a, b) => a - b);
    const raf = window.__raf.slice(1).sort((a, b) => a - b);
    return { zones: sd.zoneCount, loadMs, p50: times[times.length >> 1], p95: times[Math.floor(times.length * 0.95)],
      max: times[times.length - 1], rafP50: raf[raf.length >> 1] };
  }, ZONES);
  console.log(`# ${fps.zones} zones loaded in ${(fps.loadMs / 1000).toFixed(1)} s; frame draw p50 ${fps.p50.toFixed(2)} ms, p95 ${fps.p95.toFixed(2)} ms, max ${fps.max.toFixed(1)} ms; rAF interval p50 ${fps.rafP50.toFixed(1)} ms`);
  console.log(`# latency over ${lat.length} probes: p50 ${q(0.5).toFixed(1)} ms, p90 ${q(0.9).toFixed(1)} ms, max ${lat[lat.length - 1].toFixed(1)} ms`);
  console.log(`RESULT fps_10m=${(1000 / Math.max(fps.p95, 1e-3)).toFixed(0)}`);
  console.log(`RESULT frame_ms_p50_10m=${fps.p50.toFixed(2)}`);
  console.log(`RESULT latency_ms_p50=${q(0.5).toFixed(1)}`);
  console.log(`RESULT latency_ms_p90=${q(0.9).toFixed(1)}`);
} finally {
  if (emitter) await stop(emitter);
  await browser.close();
  fs.rmSync(browser.userDataDir, { recursive: true, force: true });
  await stop(relay);
  fs.rmSync(relay.dataDir, { recursive: true, force: true });
}
