// lod.test.mjs — GET /api/sessions/{id}/lod (docs/API.md, "Level of detail") against a real relay
// and demo on 127.0.0.1: summaries account for every stored zone, full detail equals /zones, lanes
// never overlap, and hostile parameters get 4xx answers with JSON errors and bounded answers.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startRelay, startDemo, stop, until, getJSON } from './harness.mjs';

function isError(r, status, code) {
  assert.equal(r.status, status, `status ${r.status}: ${r.text}`);
  assert.ok(r.json && typeof r.json.error === 'string' && r.json.error.length > 0, `JSON error body: ${r.text}`);
  if (code) assert.equal(r.json.code, code);
}
const key = (r) => `${r[2]}:${r[4]}:${r[3]}:${r[0]}:${r[1]}`;

describe('level of detail', () => {
  let relay, s;
  before(async () => {
    relay = await startRelay();
    const demo = startDemo(relay, ['--seconds', '4']);
    await demo.exited;
    // the demo said BYE: its stored data no longer changes
    s = await until(async () => {
      const r = await getJSON(relay, '/api/sessions');
      const x = r.json && r.json.find((v) => !v.live && v.stats.zones > 1000);
      return x;
    }, 20000, 'the ended demo session');
  });
  after(async () => { await stop(relay); fs.rmSync(relay.dataDir, { recursive: true, force: true }); });

  test('the whole session by default: merged rows count every stored zone, lanes do not overlap', async () => {
    const r = await getJSON(relay, `/api/sessions/${s.id}/lod?buckets=500`);
    assert.equal(r.status, 200, r.text);
    const j = r.json;
    assert.equal(j.t0, s.first_ns);
    assert.equal(j.t1, s.last_ns);
    assert.equal(j.buckets, 500);
    assert.equal(j.res_ns, Math.floor((s.last_ns - s.first_ns) / 500) + 1);
    assert.equal(j.truncated, false);
    assert.equal(j.zones, s.stats.zones, 'every stored zone is in the range');
    assert.equal(j.rows.reduce((a, row) => a + row[5], 0), s.stats.zones, 'merged rows count all their zones');
    assert.ok(j.rows.length < s.stats.zones / 4, `a summary is smaller: ${j.rows.length} rows for ${s.stats.zones} zones`);
    const lanes = new Map();
    for (const row of j.rows) {
      if (row[5] > 1) assert.ok(row[0] + row[1] >= row[0]);
      else if (row[1] < j.res_ns) { /* a lone short zone in its bucket */ }
      const k = row[2] + ':' + row[4];
      if (!lanes.has(k)) lanes.set(k, []);
      lanes.get(k).push(row);
    }
    for (const [k, rows] of lanes) {
      rows.sort((a, b) => a[0] - b[0]);
      for (let i = 1; i < rows.length; i++) assert.ok(rows[i][0] >= rows[i - 1][0] + rows[i - 1][1], `lane ${k}: rows overlap at ${rows[i][0]}`);
    }
  });

  test('full=1 is exactly the zones of /zones for a range', async () => {
    const t0 = s.first_ns + Math.floor((s.last_ns - s.first_ns) * 0.4), t1 = t0 + 200e6;
    const a = await getJSON(relay, `/api/sessions/${s.id}/lod?t0=${t0}&t1=${t1}&full=1&limit=1000000`);
    const b = await getJSON(relay, `/api/sessions/${s.id}/zones?t0=${t0}&t1=${t1}&limit=1000000`);
    assert.equal(a.status, 200, a.text);
    assert.equal(a.json.res_ns, 0);
    assert.ok(a.json.rows.every((row) => row[5] === 1));
    assert.ok(b.json.count > 100, 'the range holds zones');
    assert.deepEqual(a.json.rows.map(key).sort(), b.json.zones.map(key).sort());
    assert.equal(a.json.zones, b.json.count);
  });

  test('level and mask leave out zones as the stream does', async () => {
    const sites = (await getJSON(relay, `/api/sessions/${s.id}/sites`)).json.sites;
    const all = (await getJSON(relay, `/api/sessions/${s.id}/lod?full=1&limit=1000000`)).json.rows;
    const bySite = new Map(sites.map((x) => [x.id, x]));
    for (const [level, mask] of [[2, 0xffffffff], [5, 1], [3, 6]]) {
      const r = await getJSON(relay, `/api/sessions/${s.id}/lod?full=1&limit=1000000&level=${level}&mask=${mask}`);
      assert.equal(r.status, 200, r.text);
      const want = all.filter((row) => { const x = bySite.get(row[3]); return !x || !x.known || (x.severity <= level && (x.verbosity & mask) !== 0); });
      assert.equal(r.json.count, want.length, `level ${level} mask ${mask}`);
      assert.ok(want.length < all.length, 'the filter leaves something out');
      const sum = (await getJSON(relay, `/api/sessions/${s.id}/lod?buckets=300&level=${level}&mask=${mask}`)).json;
      assert.equal(sum.zones, want.length);
    }
  });

  test('one thread, one bucket, a limit', async () => {
    const one = await getJSON(relay, `/api/sessions/${s.id}/lod?thread=0&buckets=1`);
    assert.equal(one.status, 200);
    assert.ok(one.json.rows.length > 0 && one.json.rows.every((row) => row[2] === 0));
    const lim = await getJSON(relay, `/api/sessions/${s.id}/lod?full=1&limit=7`);
    assert.equal(lim.json.count, 7);
    assert.equal(lim.json.truncated, true);
    const none = await getJSON(relay, `/api/sessions/${s.id}/lod?thread=4000`);
    assert.equal(none.status, 200);
    assert.equal(none.json.count, 0);
  });

  test('hostile parameters: 400 with a JSON error, 404, 405; extreme ranges stay bounded', async () => {
    const p = `/api/sessions/${s.id}/lod`;
    for (const q of ['buckets=0', 'buckets=16385', 'buckets=1e30', 'buckets=-1', 'limit=0', 'limit=1000001',
      'full=2', 'level=6', 'mask=4294967296', 'level=-1', 'thread=abc', 'thread=4294967296', 't0=-5', 't0=x', 't1=1&t0=2', 't0=99999999999999999999999'])
      isError(await getJSON(relay, `${p}?${q}`), 400);
    isError(await getJSON(relay, '/api/sessions/0123456789abcdef/lod'), 404, 'ENOTFOUND');
    isError(await getJSON(relay, p, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' }), 405);
    const wide = await getJSON(relay, `${p}?t0=0&t1=18446744073709551615&buckets=16384&limit=1000`);
    assert.equal(wide.status, 200, wide.text);
    assert.ok(wide.json.count <= 1000);
    const tiny = await getJSON(relay, `${p}?t0=${s.first_ns}&t1=${s.first_ns}&buckets=16384`);
    assert.equal(tiny.status, 200);
    assert.equal(tiny.json.res_ns, 1);
  });

  test('many at once: each answered whole or refused with 503 EAGAIN, and the relay goes on', async () => {
    const rs = await Promise.all(Array.from({ length: 16 }, (_, i) =>
      getJSON(relay, `/api/sessions/${s.id}/lod?buckets=16384${i % 2 ? '&full=1&limit=1000000' : ''}`)));
    for (const r of rs) {
      if (r.status === 503) { isError(r, 503, 'EAGAIN'); continue; }
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.truncated, false);
    }
    assert.equal((await getJSON(relay, `/api/sessions/${s.id}`)).status, 200);
  });

  test('after evictions the default range is what the relay still holds', async () => {
    const small = await startRelay(['--session-memory', '1M']);
    try {
      const demo = startDemo(small, ['--seconds', '6']);
      await demo.exited;
      const e = await until(async () => {
        const r = await getJSON(small, '/api/sessions');
        return r.json && r.json.find((v) => !v.live && v.stats.evicted > 0);
      }, 20000, 'an ended session with evictions');
      const r = await getJSON(small, `/api/sessions/${e.id}/lod?buckets=100`);
      assert.equal(r.status, 200, r.text);
      assert.ok(r.json.t0 > e.first_ns, `starts after the evicted part: ${r.json.t0} > ${e.first_ns}`);
      assert.equal(r.json.t1, e.last_ns);
      const held = await getJSON(small, `/api/sessions/${e.id}/zones?limit=1000000`);
      assert.equal(r.json.zones, held.json.count, 'every zone still held');
      assert.ok(held.json.count < e.stats.zones, 'some were evicted');
    } finally {
      await stop(small);
      fs.rmSync(small.dataDir, { recursive: true, force: true });
    }
  });
});
