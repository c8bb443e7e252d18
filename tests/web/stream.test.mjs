// stream.test.mjs — the live-data WebSocket and the dashboard's serving rules, against a real
// relay and demo on 127.0.0.1: embedded assets only, subscribe/filters/bad commands, several
// browsers at once, access token and Origin checks. Decodes with the page's own web/js/stream.js.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startRelay, startDemo, stop, until, waitDemoSession, getJSON, SRC, TestSocket } from './harness.mjs';

const { decodeMessage, MSG } = await import(path.join(SRC, 'web/js/stream.js'));
const { SessionData } = await import(path.join(SRC, 'web/js/store.js'));

// A stream client: collects decoded data for one subscription.
function openStream(relay, opts = {}) {
  const q = relay.token && !opts.noToken ? '?token=' + (opts.token || relay.token) : '';
  const ws = new TestSocket(`ws://127.0.0.1:${relay.http}/api/stream${q}`, opts.headers);
  const c = { ws, sd: null, texts: [], resets: 0, historyDone: false, messages: 0, errors: [], closed: false, gaps: [], ack: true, bytes: 0 };
  c.sendAck = () => ws.send(JSON.stringify({ op: 'ack', bytes: c.bytes }));
  c.opened = new Promise((res, rej) => { ws.onopen = () => res(); ws.onerror = (e) => rej(new Error('websocket error')); });
  ws.onclose = () => { c.closed = true; };
  ws.onmessage = (ev) => {
    if (typeof ev.data === 'string') { c.texts.push(JSON.parse(ev.data)); return; }
    c.messages++;
    try {
      const sum = decodeMessage(ev.data, (sid, type) => {
        if (type === MSG.RESET) { c.sd = new SessionData(sid); c.resets++; c.historyDone = false; }
        return c.sd;
      });
      if (sum.historyDone) c.historyDone = true;
      if (sum.gap) c.gaps.push(sum.gap);
      c.bytes = (sum.type === MSG.RESET ? 0 : c.bytes) + ev.data.byteLength;
      if (c.ack) c.sendAck();
    } catch (e) { c.errors.push(e.message); }
  };
  c.send = (o) => ws.send(typeof o === 'string' ? o : JSON.stringify(o));
  return c;
}

describe('stream and serving (no token)', () => {
  let relay, demo, session;
  before(async () => {
    relay = await startRelay(['--team', '1=graphics']);
    demo = startDemo(relay, ['--seconds', '60']);
    session = await waitDemoSession(relay);
  });
  after(async () => { await stop(demo); await stop(relay); fs.rmSync(relay.dataDir, { recursive: true, force: true }); });

  test('serves the embedded dashboard and nothing else', async () => {
    let r = await fetch(relay.base + '/');
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /text\/html/);
    assert.match(await r.text(), /<title>telemark<\/title>/);
    for (const p of ['/index.html', '/style.css', '/js/main.js', '/js/flame.js', '/vendor/uPlot.iife.min.js', '/vendor/uPlot.min.css']) {
      r = await fetch(relay.base + p);
      assert.equal(r.status, 200, p);
      assert.ok((await r.arrayBuffer()).byteLength > 100, p);
    }
    assert.match((await fetch(relay.base + '/js/main.js')).headers.get('content-type'), /javascript/);
    for (const p of ['/nope.html', '/js/nope.js', '/../CMakeLists.txt', '/web/index.html', '/etc/passwd', '/CMakeLists.txt']) {
      r = await fetch(relay.base + p);
      assert.equal(r.status, 404, p);
    }
    r = await fetch(relay.base + '/index.html', { method: 'POST', body: 'x' });
    assert.equal(r.status, 405);
  });

  test('subscribe: reset, history, then live zones with sites and threads', async () => {
    const c = openStream(relay);
    await c.opened;
    c.send({ op: 'subscribe', session: session.id, seq: 7 });
    await until(() => c.historyDone && c.sd && c.sd.zoneCount > 100, 10000, 'history');
    assert.deepEqual(c.texts, [{ type: 'subscribed', seq: 7 }], 'a numbered subscription is echoed');
    const n0 = c.sd.zoneCount;
    await until(() => c.sd.zoneCount > n0, 10000, 'live zones');
    assert.equal(c.resets, 1);
    assert.deepEqual(c.errors, []);
    assert.ok(c.sd.sites.size > 3 && c.sd.threads.size >= 2 && c.sd.nFrames > 0);
    // team names: the agent's, with bit 1 renamed by the relay's --team flag
    await until(() => c.sd.teams.size >= 2, 5000, 'team names');
    assert.equal(c.sd.teams.get(1), 'graphics');
    assert.ok([...c.sd.teams.entries()].some(([b, n]) => b !== 1 && n.length > 0), 'agent names for the other bits');
    for (const th of c.sd.threads.values()) for (const l of th.lanes) for (let i = 0; i < l.n; i++)
      assert.ok(c.sd.sites.has(l.site[i]), 'every zone site is described');
    c.ws.close();
  });

  test('filters apply in the relay: level, mask, threads', async () => {
    const c = openStream(relay);
    await c.opened;
    // first learn the sites and teams
    c.send({ op: 'subscribe', session: session.id, history_s: 5 });
    await until(() => c.historyDone && c.sd.zoneCount > 0 && c.sd.teams.size > 0, 10000, 'history');
    const teams = [...c.sd.teams.keys()];
    const bit = teams[0];
    const mask = (0xffffffff & ~(1 << bit)) >>> 0;
    const threads = [...c.sd.threads.keys()].sort((a, b) => a - b);
    // level info: the demo's debug/trace zones and messages must not arrive, its info ones must
    // the thread with the most zones that these filters let through
    const passing = (t) => c.sd.countZones((site, th) => { const x = c.sd.sites.get(site); return th === t && x && x.severity <= 3 && (x.verbosity & mask) !== 0; });
    const mainThread = threads.reduce((a, b) => (passing(b) > passing(a) ? b : a));
    assert.ok(passing(mainThread) > 0);
    c.send({ op: 'subscribe', session: session.id, level: 3, mask, threads: [mainThread], history_s: 5 });
    await until(() => c.resets === 2 && c.historyDone, 10000, 'second history');
    const n0 = c.sd.zoneCount;
    await until(() => c.sd.zoneCount > n0 + 50, 10000, 'live zones');
    const sd = c.sd;
    for (const th of sd.threads.values()) {
      for (const l of th.lanes) {
        if (l.n) assert.equal(th.id, mainThread, 'only the asked thread');
        for (let i = 0; i < l.n; i++) {
          const s = sd.sites.get(l.site[i]);
          assert.ok(s.severity <= 3, 'zone severity within level');
          assert.ok((s.verbosity & mask) !== 0, 'zone team within mask');
        }
      }
    }
    for (const m of sd.messages) { assert.ok(m.severity <= 3); assert.ok((m.verbosity & mask) !== 0); }
    c.ws.close();
  });

  test('bad commands get an error and change nothing', async () => {
    const c = openStream(relay);
    await c.opened;
    const bad = ['not json', '{"op":"dance"}', '{"op":"subscribe"}', '{"op":"subscribe","session":"nope"}',
      `{"op":"subscribe","session":"${session.id}","level":9}`, `{"op":"subscribe","session":"${session.id}","mask":-1}`,
      `{"op":"subscribe","session":"${session.id}","threads":"all"}`, `{"op":"subscribe","session":"${session.id}","seq":-1}`,
      'x'.repeat(10000)];
    for (const b of bad) c.send(b);
    await until(() => c.texts.length >= bad.length, 10000, 'error replies');
    assert.ok(c.texts.every((t) => t.type === 'error' && typeof t.error === 'string'), JSON.stringify(c.texts));
    assert.equal(c.resets, 0);
    // still usable afterwards
    c.send({ op: 'subscribe', session: session.id, history_s: 1 });
    await until(() => c.historyDone, 10000, 'history after errors');
    c.ws.close();
  });

  test('a slow browser gets a gap notice and coalesced data; the others do not notice', async () => {
    // flow control: the slow one stops acknowledging, so the relay holds live data back from it
    const slow = openStream(relay), fast = openStream(relay);
    await Promise.all([slow.opened, fast.opened]);
    slow.ack = false;
    for (const c of [slow, fast]) c.send({ op: 'subscribe', session: session.id, history_s: 1, window: 32768 });
    await until(() => slow.historyDone && fast.historyDone, 10000, 'histories');
    const zFast = fast.sd.zoneCount, zSlow = slow.sd.zoneCount;
    await until(() => fast.sd.zoneCount > zFast + 40000, 20000, 'the fast browser getting more than the live ring holds');
    assert.ok(slow.sd.zoneCount - zSlow < 20000, 'the slow one was held back');
    assert.equal(slow.gaps.length, 0);
    slow.ack = true;
    slow.sendAck();
    await until(() => slow.gaps.length > 0, 10000, 'a GAP record for the slow browser');
    const g = slow.gaps[0];
    assert.ok(g.to > g.from && g.zones > 0, JSON.stringify(g));
    const z1 = slow.sd.zoneCount;
    // a message that fails to decode is never acknowledged, so it would hold the window shut:
    // stop on the first one rather than time out
    await until(() => slow.errors.length || slow.sd.zoneCount > z1, 10000, 'live data again after the gap');
    assert.deepEqual(slow.errors, [], 'every message to the slow browser decodes');
    assert.deepEqual(fast.errors, [], 'every message to the fast browser decodes');
    assert.equal(fast.gaps.length, 0, 'the fast browser lost nothing');
    slow.ws.close(); fast.ws.close();
  });

  test('many browsers at once each get their own stream', async () => {
    const cs = Array.from({ length: 8 }, () => openStream(relay));
    await Promise.all(cs.map((c) => c.opened));
    cs.forEach((c, i) => c.send({ op: 'subscribe', session: session.id, level: i % 2 ? 5 : 3, history_s: 2 }));
    await until(() => cs.every((c) => c.historyDone && c.sd.zoneCount > 0), 15000, 'all histories');
    const n0 = cs.map((c) => c.sd.zoneCount);
    await until(() => cs.every((c, i) => c.sd.zoneCount > n0[i]), 15000, 'live data on every stream');
    for (const [i, c] of cs.entries()) {
      assert.deepEqual(c.errors, []);
      if (i % 2 === 0) {
        for (const th of c.sd.threads.values()) for (const l of th.lanes) for (let k = 0; k < l.n; k++) assert.ok(c.sd.sites.get(l.site[k]).severity <= 3);
      }
    }
    cs.forEach((c) => c.ws.close());
  });
});

describe('access token and Origin', () => {
  let relay;
  const token = 'a1b2c3d4e5f60718293a4b5c6d7e8f90';
  before(async () => { relay = await startRelay(['--token', token]); });
  after(async () => { await stop(relay); fs.rmSync(relay.dataDir, { recursive: true, force: true }); });

  test('the API needs the token', async () => {
    let r = await getJSON(relay, '/api/sessions', { noToken: true });
    assert.equal(r.status, 401);
    assert.ok(r.json && typeof r.json.error === 'string');
    r = await fetch(`${relay.base}/api/sessions?token=wrong${token.slice(5)}`);
    assert.equal(r.status, 401);
    r = await fetch(`${relay.base}/api/sessions?token=${token}`);
    assert.equal(r.status, 200);
    r = await fetch(`${relay.base}/api/sessions`, { headers: { Authorization: `Bearer ${token}` } });
    assert.equal(r.status, 200);
    r = await fetch(`${relay.base}/api/sessions`, { headers: { Authorization: 'Bearer nope' } });
    assert.equal(r.status, 401);
  });

  test('the page itself loads without the token (it holds no data)', async () => {
    const r = await fetch(relay.base + '/');
    assert.equal(r.status, 200);
  });

  test('the WebSocket needs the token and a matching Origin', async () => {
    const noTok = openStream(relay, { noToken: true });
    await assert.rejects(noTok.opened);
    const wrong = openStream(relay, { token: 'nope' });
    await assert.rejects(wrong.opened);
    const ok = openStream(relay);
    await ok.opened;
    ok.ws.close();
    // with the token, an unknown session is a clean error
    const e = openStream(relay);
    await e.opened;
    e.send({ op: 'subscribe', session: 'none' });
    await until(() => e.texts.length > 0, 5000, 'an error reply');
    assert.match(e.texts[0].error, /no session/);
    e.ws.close();
    // a browser's Origin must name the relay's host
    const good = openStream(relay, { headers: { Origin: `http://127.0.0.1:${relay.http}` } });
    await good.opened;
    good.ws.close();
    for (const origin of ['http://evil.example', `http://127.0.0.1:${relay.http + 1}`, 'null']) {
      const bad = openStream(relay, { headers: { Origin: origin } });
      await assert.rejects(bad.opened, origin);
    }
  });
});
