// store.test.mjs — the page store's memory bound (web/js/store.js) in Node, no browser: past
// maxZones the oldest zones are forgotten, what stays is intact (same zones, same order, level-of-
// detail entries consistent), and liveFrom() says where the complete part starts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const { SessionData, Lane } = await import(pathToFileURL(path.join(here, '../../web/js/store.js')).href);

// A frame of nested zones per thread, like a game: depth 0 frame, 20 children, 3 grandchildren each.
function feed(sd, frames, from = 0) {
  for (let f = from; f < from + frames; f++) {
    const t = f * 16.6e6;
    for (let th = 0; th < 3; th++) {
      sd.addZone(th, 0, t, 16e6, 1);
      for (let k = 0; k < 20; k++) {
        const s = t + k * 0.8e6;
        sd.addZone(th, 1, s, 0.7e6, 2 + k % 4);
        for (let j = 0; j < 3; j++) sd.addZone(th, 2, s + j * 0.2e6, 0.15e6, 10 + j);
      }
    }
    sd.addFrame(t);
    sd.finishBatch();
  }
}

function checkLane(l) {
  for (let i = 1; i < l.n; i++) assert.ok(l.start[i] >= l.start[i - 1], `sorted at ${i}`);
  for (const lv of l.levels) {
    for (let e = 0; e < lv.n; e++) {
      assert.ok(lv.first[e] <= lv.last[e] && lv.last[e] < l.n, `level ${lv.shift} entry ${e} in range`);
      if (e > 0) assert.ok(lv.first[e] > lv.last[e - 1], `level ${lv.shift} entries in order`);
      assert.ok(lv.end[e] >= l.start[lv.last[e]] + l.dur[lv.last[e]] - 1e-6, 'entry end covers its zones');
    }
    if (lv.n) assert.equal(lv.last[lv.n - 1], l.n - 1, `level ${lv.shift} reaches the last zone`);
  }
}

test('the store forgets its oldest zones past maxZones and stays consistent', () => {
  const saved = SessionData.maxZones;
  SessionData.maxZones = 20000;
  try {
    const sd = new SessionData('t');
    feed(sd, 400); // 400 × 3 × 81 = 97 200 zones
    assert.ok(sd.zoneCount <= 20000, `holds ${sd.zoneCount}`);
    assert.ok(sd.trimmed > 0);
    const from = sd.liveFrom();
    assert.ok(from > 0 && from < sd.maxTime);
    let n = 0;
    for (const th of sd.threads.values()) for (const l of th.lanes) {
      checkLane(l);
      n += l.n;
      if (l.n) assert.ok(l.start[0] >= from, 'nothing older than liveFrom is kept');
    }
    assert.equal(n, sd.zoneCount);
    // every frame after liveFrom is complete: 81 zones per thread
    const full = Math.ceil(from / 16.6e6) + 1;
    for (const th of sd.threads.values()) {
      const t0 = full * 16.6e6, t1 = t0 + 16.6e6;
      let c = 0;
      for (const l of th.lanes) for (let i = l.firstEndingAfter(t0); i < l.n && l.start[i] < t1; i++) if (l.start[i] >= t0) c++;
      assert.equal(c, 81, `frame ${full} of thread ${th.id} is whole`);
    }
    // and it keeps working as more arrives
    feed(sd, 100, 400);
    assert.ok(sd.zoneCount <= 20000);
    for (const th of sd.threads.values()) for (const l of th.lanes) checkLane(l);
  } finally { SessionData.maxZones = saved; }
});

test('dropFirst renumbers extra data and level entries', () => {
  const l = new Lane(0, 0);
  for (let i = 0; i < 1000; i++) l.add(i * 1000, i % 7 === 0 ? 5000 : 300, i % 5, i % 100 === 0 ? 'x' + i : undefined);
  // (the overlapping 5000 ns zones make the lane unsorted by end; add() keeps what it is given)
  const k = l.dropFirst(250);
  assert.equal(k, 250);
  assert.equal(l.n, 750);
  assert.equal(l.start[0], 250000);
  assert.equal(l.extra.get(50), 'x300');
  assert.equal(l.extra.has(0), false);
  for (const lv of l.levels) for (let e = 0; e < lv.n; e++) assert.ok(lv.last[e] < l.n && lv.first[e] <= lv.last[e]);
  assert.equal(l.dropFirst(10000), 750);
  assert.equal(l.n, 0);
});

test('uncovered: before what the page holds, and the ranges of slow-connection gaps', () => {
  const sd = new SessionData('u');
  assert.deepEqual(sd.uncovered(0, 100), [[0, 100]], 'nothing held yet');
  sd.addZone(0, 0, 50, 10, 1);
  sd.finishBatch();
  assert.deepEqual(sd.uncovered(0, 100), [[0, 50]]);
  sd.gaps.push({ from: 60, to: 70, zones: 1, other: 0 }, { from: 65, to: 80, zones: 1, other: 0 }, { from: 200, to: 300, zones: 1, other: 0 });
  assert.deepEqual(sd.uncovered(0, 100), [[0, 50], [60, 80]], 'overlapping gaps merge; far ones are left out');
  assert.deepEqual(sd.uncovered(55, 75), [[60, 75]]);
});
