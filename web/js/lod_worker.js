// lod_worker.js — fetches level-of-detail and full-detail ranges from the relay
// (GET /api/sessions/{id}/lod, docs/API.md "Level of detail") off the main thread: parses the
// JSON, groups rows per lane (thread × depth), sorts them by start and hands back typed arrays
// (transferred, not copied), so panning never waits for a parse.

self.onmessage = async (ev) => {
  const { id, url, origin } = ev.data;
  try {
    const r = await fetch(url);
    const j = await r.json();
    if (!r.ok) { self.postMessage({ id, error: (j && j.error) || `HTTP ${r.status}`, status: r.status }); return; }
    const rows = j.rows;
    // count per lane
    const lanes = new Map();
    for (const row of rows) {
      const key = row[2] * 4096 + row[4];
      let l = lanes.get(key);
      if (!l) { l = { thread: row[2], depth: row[4], n: 0, idx: [] }; lanes.set(key, l); }
      l.idx.push(row);
    }
    const out = [], transfer = [];
    for (const l of lanes.values()) {
      l.idx.sort((a, b) => a[0] - b[0]);
      const n = l.idx.length;
      const start = new Float64Array(n), dur = new Float64Array(n);
      const site = new Uint32Array(n), count = new Uint32Array(n);
      for (let i = 0; i < n; i++) {
        const row = l.idx[i];
        start[i] = row[0] - origin; dur[i] = row[1]; site[i] = row[3]; count[i] = row[5];
      }
      out.push({ thread: l.thread, depth: l.depth, start, dur, site, count });
      transfer.push(start.buffer, dur.buffer, site.buffer, count.buffer);
    }
    self.postMessage({ id, t0: j.t0 - origin, t1: j.t1 - origin, res: j.res_ns, zones: j.zones,
      rows: j.count, truncated: j.truncated, lanes: out }, transfer);
  } catch (e) {
    self.postMessage({ id, error: String(e && e.message || e) });
  }
};
