// stream.js — the live-data WebSocket: subscribes with filters (JSON text frames) and decodes the
// relay's binary batches (docs/API.md, "Live stream") into a SessionData.

const TD = new TextDecoder();

// Reader over one binary message: LEB128 varints, zigzag svarints, strings, little-endian f64.
class Reader {
  constructor(buf) { this.u8 = new Uint8Array(buf); this.dv = new DataView(buf); this.p = 0; }
  more() { return this.p < this.u8.length; }
  u8v() { if (this.p >= this.u8.length) throw new Error('truncated'); return this.u8[this.p++]; }
  varint() {
    // Numbers up to 2^53 are exact; the relay never sends larger values.
    let v = 0, mul = 1, b;
    for (let i = 0; i < 10; i++) {
      b = this.u8v();
      v += (b & 0x7f) * mul;
      if (!(b & 0x80)) return v;
      mul *= 128;
    }
    throw new Error('bad varint');
  }
  svarint() { const z = this.varint(); return (z % 2) ? -(z + 1) / 2 : z / 2; }
  str() {
    const n = this.varint();
    if (this.p + n > this.u8.length) throw new Error('truncated');
    const s = TD.decode(this.u8.subarray(this.p, this.p + n)); this.p += n; return s;
  }
  f64() { if (this.p + 8 > this.u8.length) throw new Error('truncated'); const v = this.dv.getFloat64(this.p, true); this.p += 8; return v; }
  u32() { if (this.p + 4 > this.u8.length) throw new Error('truncated'); const v = this.dv.getUint32(this.p, true); this.p += 4; return v; }
}

export const MSG = { DATA: 1, RESET: 2 };
export const REC = {
  SITE: 0x01, THREAD: 0x02, TEAM: 0x03,
  ZONES: 0x10, ZONE_X: 0x11,
  FRAME: 0x20, PLOT: 0x21, MESSAGE: 0x22, MARKER: 0x23,
  STATS: 0x30, GAP: 0x31, END: 0x32, HISTORY_DONE: 0x33,
};

// Decodes one binary message into `target(sessionId)` → SessionData. Returns a summary
// {session, zones, frames, messages, plots, gap, historyDone, stats}.
export function decodeMessage(buf, getSession) {
  const r = new Reader(buf);
  if (r.u8v() !== 0x54 || r.u8v() !== 0x57) throw new Error('bad magic');
  const ver = r.u8v();
  if (ver !== 1) throw new Error('unsupported stream version ' + ver);
  const type = r.u8v();
  const sid = r.str();
  const sum = { type, session: sid, zones: 0, frames: 0, messages: 0, plots: 0, gap: null, historyDone: false, stats: null, ended: false };
  if (type === MSG.RESET) { sum.origin = r.svarint(); getSession(sid, type, sum.origin); return sum; }
  if (type !== MSG.DATA) throw new Error('unknown message type ' + type);
  const sd = getSession(sid, type);
  const base = r.svarint();
  while (r.more()) {
    const tag = r.u8v();
    switch (tag) {
      case REC.SITE: {
        const id = r.varint(), kind = r.varint(), severity = r.varint(), verbosity = r.varint();
        const colour = r.varint(), line = r.varint(), name = r.str(), file = r.str();
        sd.sites.set(id, { id, kind, severity, verbosity, colour, line, name, file });
        break;
      }
      case REC.THREAD: { const t = r.varint(); sd.thread(t).name = r.str(); break; }
      case REC.TEAM: { const bit = r.varint(); sd.teams.set(bit, r.str()); break; }
      case REC.ZONES: {
        const thread = r.varint(), count = r.varint();
        let t = base;
        for (let i = 0; i < count; i++) {
          const site = r.varint(), depth = r.varint();
          t += r.svarint();
          const dur = r.varint();
          sd.addZone(thread, depth, t, dur, site);
        }
        sum.zones += count;
        break;
      }
      case REC.ZONE_X: {
        const thread = r.varint(), site = r.varint(), depth = r.varint();
        const t = base + r.svarint(), dur = r.varint(), extra = r.str();
        sd.addZone(thread, depth, t, dur, site, extra);
        sum.zones++;
        break;
      }
      case REC.FRAME: {
        // Site 0 is the main frame (boundaries and the frame-time graph); named frame sets
        // (render, physics…) are kept per site.
        const site = r.varint(), t = base + r.svarint();
        if (site === 0) { sd.addFrame(t); sum.frames++; } else sd.addFrameSet(site, t);
        break;
      }
      case REC.PLOT: { const site = r.varint(); const t = base + r.svarint(); sd.addPlot(site, t, r.f64()); sum.plots++; break; }
      case REC.MESSAGE: {
        const thread = r.varint(), site = r.varint(), severity = r.varint(), verbosity = r.varint();
        const t = base + r.svarint();
        let text = r.str();
        if (!text && sd.sites.has(site)) text = sd.sites.get(site).name;
        sd.addMessage({ t, thread, site, severity, verbosity, text });
        sum.messages++;
        break;
      }
      case REC.MARKER: {
        // Extra data of a marker zone: attached to the zone of that thread and site starting
        // (BEGIN) or ending (END) at this time, whichever arrives first.
        const thread = r.varint(), site = r.varint(), end = r.varint(), t = base + r.svarint(), text = r.str();
        sd.addMarkerPayload(thread, site, end === 1, t, text);
        break;
      }
      case REC.STATS: sum.stats = JSON.parse(r.str()); break;
      case REC.GAP: {
        const from = base + r.svarint(), to = base + r.svarint(), zones = r.varint(), other = r.varint();
        const g = { from, to, zones, other };
        sd.gaps.push(g); sum.gap = g;
        break;
      }
      case REC.END: sd.ended = true; sum.ended = true; break;
      case REC.HISTORY_DONE: sum.historyDone = true; break;
      default: throw new Error('unknown record 0x' + tag.toString(16));
    }
  }
  sd.finishBatch();
  return sum;
}

// One WebSocket, reconnecting, with a current subscription.
export class Stream {
  constructor(url, handlers) {
    this.url = url;
    this.h = handlers; // {onOpen, onClose, onBinary(buf), onText(obj)}
    this.ws = null;
    this.sub = null;
    this.closed = false;
    this.retry = 250;
    this.connect();
  }
  connect() {
    const ws = new WebSocket(this.url);
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => { this.retry = 250; if (this.sub) ws.send(JSON.stringify(this.sub)); this.h.onOpen && this.h.onOpen(); };
    // Keep-alive (docs/API.md): the relay closes a stream that sends nothing for --ws-idle
    // seconds (default 60), and a page looking at an idle session has nothing to ack.
    clearInterval(this.keepAlive);
    this.keepAlive = setInterval(() => this.send({ op: 'ping' }), 10000);
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') { try { this.h.onText(JSON.parse(ev.data)); } catch (e) { console.warn('stream text', e); } }
      else {
        this.h.onBinary(ev.data);
        this.ackAfter(ev.data);
      }
    };
    ws.onclose = () => {
      this.h.onClose && this.h.onClose();
      if (this.closed) return;
      setTimeout(() => this.connect(), this.retry);
      this.retry = Math.min(this.retry * 2, 4000);
    };
    this.ws = ws;
  }
  // Flow control (docs/API.md): acknowledge the bytes decoded since the last RESET, so the relay
  // holds live data back while this page is busy instead of piling it up in the browser.
  ackAfter(buf) {
    const u8 = new Uint8Array(buf, 0, Math.min(4, buf.byteLength));
    if (u8[3] === MSG.RESET) { this.acked = 0; this.bytes = 0; }
    this.bytes = (this.bytes || 0) + buf.byteLength;
    const now = performance.now();
    if (this.bytes - (this.acked || 0) > 262144 || now - (this.lastAck || 0) > 20) this.flushAck();
    else if (!this.ackTimer) this.ackTimer = setTimeout(() => this.flushAck(), 25);
  }
  flushAck() {
    clearTimeout(this.ackTimer); this.ackTimer = null;
    if (this.bytes === this.acked) return;
    this.acked = this.bytes; this.lastAck = performance.now();
    this.send({ op: 'ack', bytes: this.bytes });
  }
  subscribe(sub) {
    this.sub = Object.assign({ op: 'subscribe' }, sub);
    if (this.ws && this.ws.readyState === 1) this.ws.send(JSON.stringify(this.sub));
  }
  send(obj) { if (this.ws && this.ws.readyState === 1) this.ws.send(JSON.stringify(obj)); }
  close() { this.closed = true; clearInterval(this.keepAlive); if (this.ws) this.ws.close(); }
}
