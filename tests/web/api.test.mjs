// api.test.mjs — every JSON endpoint of the relay as the dashboard uses it, against a real relay
// and demo on 127.0.0.1: good requests, bad requests (4xx with a JSON error), and the access
// token (missing, wrong, as query or Bearer header) when the relay requires one.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startRelay, startDemo, stop, until, waitDemoSession, getJSON } from './harness.mjs';

function isError(r, status) {
  assert.equal(r.status, status, `status ${r.status}: ${r.text}`);
  assert.ok(r.json && typeof r.json.error === 'string' && r.json.error.length > 0, `JSON error body: ${r.text}`);
}

const post = (relay, p, body) => getJSON(relay, p, { method: 'POST', body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)), headers: { 'Content-Type': 'application/json' } });

describe('JSON API (token required)', () => {
  let relay, demo, s;
  const token = 'T0ken-for-the-api-test_1234';
  before(async () => {
    relay = await startRelay(['--token', token, '--team', '3=lighting']);
    demo = startDemo(relay, ['--seconds', '60']);
    s = await waitDemoSession(relay);
  });
  after(async () => { await stop(demo); await stop(relay); fs.rmSync(relay.dataDir, { recursive: true, force: true }); });

  test('every endpoint refuses a missing or wrong token with 401 and a JSON error', async () => {
    const eps = [['GET', '/api/sessions'], ['GET', '/api/relay'], ['GET', '/api/recordings'], ['POST', '/api/recordings/open'],
      ['GET', `/api/sessions/${s.id}`], ['GET', `/api/sessions/${s.id}/zones`], ['GET', `/api/sessions/${s.id}/events`],
      ['GET', `/api/sessions/${s.id}/sites`], ['POST', `/api/sessions/${s.id}/control`], ['POST', `/api/sessions/${s.id}/record/start`],
      ['POST', `/api/sessions/${s.id}/record/stop`], ['GET', '/api/stream'], ['GET', '/api/nope']];
    for (const [method, p] of eps) {
      isError(await getJSON(relay, p, { method, noToken: true }), 401);
      isError(await getJSON(relay, p + '?token=x' + token, { method, noToken: true }), 401);
      isError(await getJSON(relay, p, { method, noToken: true, headers: { Authorization: 'Bearer ' + token + 'x' } }), 401);
    }
    const ok = await getJSON(relay, '/api/sessions', { noToken: true, headers: { Authorization: 'Bearer ' + token } });
    assert.equal(ok.status, 200);
  });

  test('GET /api/sessions lists the demo with target facts and counters', async () => {
    const r = await getJSON(relay, '/api/sessions');
    assert.equal(r.status, 200);
    const d = r.json.find((x) => x.id === s.id);
    assert.ok(d);
    for (const k of ['id', 'program', 'live', 'platform', 'arch', 'byte_order', 'pointer_size', 'stats']) assert.ok(k in d, k);
    for (const k of ['records', 'lost', 'duplicated', 'malformed', 'dropped_by_agent', 'orphans']) assert.equal(typeof d.stats[k], 'number', k);
    assert.equal(d.live, true);
    assert.ok(d.stats.records > 0);
    isError(await post(relay, '/api/sessions', {}), 405);
  });

  test('GET /api/sessions/ID, its zones, events and sites', async () => {
    let r = await getJSON(relay, `/api/sessions/${s.id}`);
    assert.equal(r.status, 200);
    assert.equal(r.json.id, s.id);
    const info = r.json;
    r = await getJSON(relay, `/api/sessions/${s.id}/zones?limit=50`);
    assert.equal(r.status, 200);
    assert.ok(r.json.zones.length > 0 && r.json.zones.length <= 50);
    r = await getJSON(relay, `/api/sessions/${s.id}/zones?t0=${info.first_ns}&t1=${info.first_ns + 1000000}&limit=100000`);
    assert.equal(r.status, 200);
    r = await getJSON(relay, `/api/sessions/${s.id}/events?type=frame,message&limit=100`);
    assert.equal(r.status, 200);
    assert.ok(r.json.events.every((e) => e.type === 'frame' || e.type === 'message'));
    r = await getJSON(relay, `/api/sessions/${s.id}/sites`);
    assert.equal(r.status, 200);
    assert.ok(r.json.sites.length > 0 && Array.isArray(r.json.threads));
    // bad requests
    isError(await getJSON(relay, '/api/sessions/0000000000000000'), 404);
    isError(await getJSON(relay, '/api/sessions/0000000000000000/zones'), 404);
    isError(await getJSON(relay, `/api/sessions/${s.id}/zones?t0=abc`), 400);
    isError(await getJSON(relay, `/api/sessions/${s.id}/zones?limit=-5`), 400);
    isError(await getJSON(relay, `/api/sessions/${s.id}/events?type=bogus`), 400);
    isError(await getJSON(relay, `/api/sessions/${s.id}/nothing`), 404);
    isError(await post(relay, `/api/sessions/${s.id}/zones`, {}), 405);
    isError(await getJSON(relay, '/api/sessions/' + 'x'.repeat(200)), 404);
  });

  test('POST control: level and mask pushed to the target; bad bodies refused', async () => {
    let r = await post(relay, `/api/sessions/${s.id}/control`, { level: 4, mask: 0xff });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.level, 4);
    isError(await post(relay, `/api/sessions/${s.id}/control`, { level: 9, mask: 1 }), 400);
    isError(await post(relay, `/api/sessions/${s.id}/control`, { level: 1 }), 400);
    isError(await post(relay, `/api/sessions/${s.id}/control`, 'not json'), 400);
    isError(await post(relay, `/api/sessions/${s.id}/control`, { level: 1, mask: 2 ** 33 }), 400);
    isError(await post(relay, `/api/sessions/${s.id}/control`, 'x'.repeat(10000)), 413);
    isError(await post(relay, '/api/sessions/0000000000000000/control', { level: 1, mask: 1 }), 404);
    isError(await getJSON(relay, `/api/sessions/${s.id}/control`), 405);
    r = await post(relay, `/api/sessions/${s.id}/control`, { level: 5, mask: 0xffffffff });
    assert.equal(r.status, 200);
  });

  test('record start/stop, list and open the recording', async () => {
    let r = await post(relay, `/api/sessions/${s.id}/record/start`);
    assert.equal(r.status, 200, r.text);
    isError(await post(relay, `/api/sessions/${s.id}/record/start`), 409);
    await new Promise((res) => setTimeout(res, 1000));
    r = await post(relay, `/api/sessions/${s.id}/record/stop`);
    assert.equal(r.status, 200, r.text);
    isError(await post(relay, `/api/sessions/${s.id}/record/stop`), 409);
    isError(await post(relay, '/api/sessions/0000000000000000/record/start'), 404);
    const rec = await until(async () => {
      const l = await getJSON(relay, '/api/recordings');
      return l.json.find((x) => !x.open && x.size > 0);
    }, 5000, 'the recording');
    r = await post(relay, '/api/recordings/open', { name: rec.name });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.live, false);
    assert.ok(r.json.stats.zones > 0);
    const listed = await getJSON(relay, '/api/sessions');
    assert.ok(listed.json.some((x) => x.id === r.json.id));
    isError(await post(relay, '/api/recordings/open', { name: 'missing.tmkr' }), 404);
    isError(await post(relay, '/api/recordings/open', { name: '../etc/passwd' }), 400);
    isError(await post(relay, '/api/recordings/open', {}), 400);
    isError(await getJSON(relay, '/api/recordings/open'), 405);
  });

  test('GET /api/relay and unknown endpoints', async () => {
    const r = await getJSON(relay, '/api/relay');
    assert.equal(r.status, 200);
    assert.ok(r.json && typeof r.json === 'object');
    isError(await getJSON(relay, '/api/nope'), 404);
  });
});
