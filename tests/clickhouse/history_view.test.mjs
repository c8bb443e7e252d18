// history_view.test.mjs — the dashboard's history view (web/js/history.js) in Chromium against
// a relay whose sink writes into a real clickhouse-server (chserver.py, temporary directory):
// two builds of the demo, the trend chart shows one point per build, the diff table fills.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startRelay, startDemo, stop, until, getJSON, launchChromium } from '../web/harness.mjs';
import { historyPath, trendData, diffRows } from '../../web/js/history.js';

const here = path.dirname(fileURLToPath(import.meta.url));
let ch, chDir, relay, browser;

test('pure helpers: paths, chart data, diff rows', () => {
  assert.equal(historyPath('trend', { program: 'a b', site: '', by: 'build' }), '/api/history/trend?program=a+b&by=build');
  const t = trendData([{ key: '41', p50: 1e6, p95: 2e6, max: 3e6, n: 5 }, { key: '42', p50: 2e6, p95: 4e6, max: 5e6, n: 7 }]);
  assert.deepEqual(t.keys, ['41', '42']);
  assert.deepEqual(t.data, [[0, 1], [1, 2], [2, 4], [3, 5]]);
  const d = diffRows([{ name: 'x', a_p50: 2e6, b_p50: 3e6, a_n: 1, b_n: 2 }, { name: 'y', a_p50: 0, b_p50: 1, a_n: 1, b_n: 1 }]);
  assert.equal(d[0].change, 50);
  assert.equal(d[1].change, Infinity);
});

before(async () => {
  if (!fs.existsSync('/usr/sbin/clickhouse-server')) return;
  chDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tmk-chview-'));
  ch = spawn('python3', [path.join(here, 'chserver.py'), chDir], { stdio: ['pipe', 'pipe', 'inherit'] });
  const port = await new Promise((res, rej) => {
    let out = '';
    ch.stdout.on('data', (d) => { out += d; const m = /http (\d+)/.exec(out); if (m) res(Number(m[1])); });
    ch.on('exit', (c) => rej(new Error('chserver.py exited ' + c)));
  });
  relay = await startRelay(['--clickhouse', `http://127.0.0.1:${port}/?database=telemark`]);
  const demos = [startDemo(relay, ['--seconds', '1.5', '--build', '900', '--label', 'old']),
    startDemo(relay, ['--seconds', '1.5', '--build', '901', '--label', 'new'])];
  for (const d of demos) await d.exited;
  await until(async () => {
    const r = (await getJSON(relay, '/api/relay')).json.clickhouse;
    const s = (await getJSON(relay, '/api/sessions')).json;
    return r.up && r.batches_pending === 0 && s.every((x) => !x.live) && r.rows_sent > 0;
  }, 20000, 'sink drained');
  await new Promise((r) => setTimeout(r, 1200)); // the final sessions rows (1 s tick)
  browser = await launchChromium();
});

after(async () => {
  if (browser) await browser.close();
  await stop(relay);
  if (ch) { ch.stdin.end(); await new Promise((r) => ch.on('exit', r)); }
  if (relay) fs.rmSync(relay.dataDir, { recursive: true, force: true });
  if (chDir) fs.rmSync(chDir, { recursive: true, force: true });
});

test('history view: trend per build and the sites that changed most', { skip: !fs.existsSync('/usr/sbin/clickhouse-server') && 'no clickhouse-server' }, async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(relay.url);
  await page.click('#historyToggle');
  await page.waitForFunction(() => window.telemark.historyView.last && window.telemark.historyView.last.rows.length > 0, null, { timeout: 15000 });
  const last = await page.evaluate(() => window.telemark.historyView.last);
  assert.equal(last.params.program, 'telemark-demo');
  assert.equal(last.params.what, 'frame');
  assert.deepEqual(last.rows.map((r) => r.key).sort(), ['900', '901']); // by first session: both start together
  for (const r of last.rows) assert.ok(r.p50 > 0 && r.p50 <= r.p95 && r.p95 <= r.max, JSON.stringify(r));
  assert.equal(await page.locator('#history .uplot').count(), 1, 'one uPlot chart');
  assert.equal(await page.isHidden('main'), true, 'the session view is hidden');
  // a zone site, per night
  await page.selectOption('#history [data-h=what]', 'zone');
  await page.selectOption('#history [data-h=site]', 'Render::frame');
  await page.selectOption('#history [data-h=by]', 'night');
  await page.waitForFunction(() => window.telemark.historyView.last.params.site === 'Render::frame' && window.telemark.historyView.last.params.by === 'night', null, { timeout: 10000 });
  const night = await page.evaluate(() => window.telemark.historyView.last.rows);
  assert.equal(night.length, 1);
  assert.equal(night[0].sessions, 2);
  // diff table between 900 and 901
  await page.waitForFunction(() => document.querySelectorAll('#history table.diff tr').length > 2, null, { timeout: 10000 });
  // A and B default to the last two builds in first-session order; both demos start together,
  // so either may be first: the header follows the pickers
  const picked = await page.evaluate(() => [window.telemark.historyView.el.a.value, window.telemark.historyView.el.b.value]);
  assert.deepEqual([...picked].sort(), ['900', '901']);
  const head = await page.textContent('#history table.diff tr');
  assert.match(head, new RegExp(`${picked[0]} p50.*${picked[1]} p50`));
  assert.deepEqual(errors, []);
});
