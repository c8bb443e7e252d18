// harness.mjs — shared by the dashboard tests and bench: free loopback ports, a real
// telemark-relay and telemark-demo as child processes (always cleaned up), HTTP helpers, and
// Debian's Chromium through playwright-core.
import { spawn } from 'node:child_process';
import net from 'node:net';
import dgram from 'node:dgram';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const SRC = path.resolve(here, '../..');
export const BUILD = process.env.TMK_BUILD_DIR || path.join(SRC, 'build');
export const BIN = path.join(BUILD, 'bin');

const children = new Set();
function killAll() { for (const c of children) { try { c.kill('SIGKILL'); } catch (e) { /* gone */ } } }
process.on('exit', killAll);
for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => { killAll(); process.exit(130); });

// A port free for TCP and UDP on 127.0.0.1 (the relay listens on both).
export async function freePort() {
  for (let i = 0; i < 50; i++) {
    const port = await new Promise((res, rej) => {
      const s = net.createServer();
      s.once('error', rej);
      s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); });
    });
    const ok = await new Promise((res) => {
      const u = dgram.createSocket('udp4');
      u.once('error', () => res(false));
      u.bind(port, '127.0.0.1', () => u.close(() => res(true)));
    });
    if (ok) return port;
  }
  throw new Error('no free port');
}

export function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// Polls fn until it returns a truthy value; bounded by `ms`.
export async function until(fn, ms, what) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what}${last instanceof Error ? ': ' + last.message : ''}`);
}

export function spawnLogged(bin, args, name) {
  const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(p);
  p.output = '';
  const add = (d) => { p.output += d.toString(); if (p.output.length > 1e6) p.output = p.output.slice(-5e5); };
  p.stdout.on('data', add);
  p.stderr.on('data', add);
  p.exited = new Promise((res) => p.on('exit', (code, sig) => { children.delete(p); res({ code, sig }); }));
  p.name = name;
  return p;
}

// Stops a child (or a startRelay() result): SIGTERM, then SIGKILL after 5 s.
export async function stop(p) {
  if (p && p.proc) p = p.proc;
  if (!p || p.exitCode !== null || p.signalCode !== null) return;
  p.kill('SIGTERM');
  const t = setTimeout(() => p.kill('SIGKILL'), 5000);
  await p.exited;
  clearTimeout(t);
}

// Starts telemark-relay on free loopback ports; resolves when its HTTP API answers.
export async function startRelay(extra = []) {
  const port = await freePort(), http = await freePort();
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tmk-web-'));
  const args = ['--listen', `127.0.0.1:${port}`, '--http', `127.0.0.1:${http}`, '--data-dir', dataDir,
    '--log-level', 'info', ...extra];
  const p = spawnLogged(path.join(BIN, 'telemark-relay'), args, 'relay');
  const base = `http://127.0.0.1:${http}`;
  const tokenArg = extra.indexOf('--token');
  const token = tokenArg >= 0 ? extra[tokenArg + 1] : '';
  await until(async () => {
    if (p.exitCode !== null) throw new Error('relay exited: ' + p.output);
    const r = await fetch(base + '/api/sessions' + (token ? '?token=' + token : ''));
    return r.status === 200;
  }, 10000, 'the relay HTTP API');
  return { proc: p, port, http, base, dataDir, token, url: base + '/' + (token ? '?token=' + token : '') };
}

export function startDemo(relay, extra = []) {
  return spawnLogged(path.join(BIN, 'telemark-demo'), ['--relay', `127.0.0.1:${relay.port}`, ...extra], 'demo');
}

export async function getJSON(relay, p, opt = {}) {
  const url = relay.base + p + (relay.token && !opt.noToken ? (p.includes('?') ? '&' : '?') + 'token=' + relay.token : '');
  const r = await fetch(url, { method: opt.method || 'GET', body: opt.body, headers: opt.headers || {} });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { json = null; }
  return { status: r.status, json, text, headers: r.headers };
}

// Waits for the demo's live session to be listed and returns it.
export async function waitDemoSession(relay, ms = 15000) {
  return until(async () => {
    const r = await getJSON(relay, '/api/sessions');
    return r.json && r.json.find((s) => s.live && s.stats && s.stats.records > 0);
  }, ms, 'a live demo session');
}

export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-quic', '--no-first-run', '--disable-component-update', '--disable-sync'];

export async function launchChromium() {
  const { chromium } = await import(path.join(SRC, 'web/node_modules/playwright-core/index.mjs'));
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tmk-chromium-'));
  const ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS,
    viewport: { width: 1600, height: 1000 }, acceptDownloads: true,
  });
  ctx.userDataDir = userDataDir;
  return ctx;
}

// A small WebSocket client (RFC 6455) for tests, so they do not depend on the Node version's
// built-in WebSocket: text frames out (masked), text and binary frames in.
import http from 'node:http';
import crypto from 'node:crypto';
export class TestSocket {
  constructor(url, headers = {}) {
    const u = new URL(url);
    this.onopen = null; this.onmessage = null; this.onclose = null; this.onerror = null;
    this.readyState = 0;
    const key = crypto.randomBytes(16).toString('base64');
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname + u.search, headers: Object.assign({
      Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': key }, headers) });
    req.on('upgrade', (res, sock, head) => {
      this.sock = sock; this.readyState = 1;
      let buf = head && head.length ? Buffer.from(head) : Buffer.alloc(0);
      let frag = [], fragOp = 0;
      sock.on('data', (d) => {
        buf = buf.length ? Buffer.concat([buf, d]) : d;
        for (;;) {
          if (buf.length < 2) break;
          const fin = buf[0] & 0x80, op = buf[0] & 0x0f;
          let len = buf[1] & 0x7f, p = 2;
          if (len === 126) { if (buf.length < 4) break; len = buf.readUInt16BE(2); p = 4; }
          else if (len === 127) { if (buf.length < 10) break; len = Number(buf.readBigUInt64BE(2)); p = 10; }
          if (buf[1] & 0x80) p += 4; // servers do not mask; skip a key if one is there
          if (buf.length < p + len) break;
          const payload = buf.subarray(p, p + len);
          buf = buf.subarray(p + len);
          if (op === 8) { this.close(); continue; }
          if (op === 9) { this.frame(10, payload); continue; }
          if (op === 10) continue;
          if (op !== 0) { fragOp = op; frag = []; }
          frag.push(Buffer.from(payload));
          if (!fin) continue;
          const all = Buffer.concat(frag);
          const data = fragOp === 1 ? all.toString('utf8') : all.buffer.slice(all.byteOffset, all.byteOffset + all.length);
          if (this.onmessage) this.onmessage({ data });
        }
      });
      sock.on('close', () => { this.readyState = 3; if (this.onclose) this.onclose(); });
      sock.on('error', () => {});
      if (this.onopen) this.onopen();
    });
    req.on('response', (res) => { res.resume(); this.status = res.statusCode; this.readyState = 3; if (this.onerror) this.onerror(new Error('HTTP ' + res.statusCode)); if (this.onclose) this.onclose(); });
    req.on('error', (e) => { this.readyState = 3; if (this.onerror) this.onerror(e); if (this.onclose) this.onclose(); });
    req.end();
  }
  frame(op, payload) {
    if (!this.sock || this.readyState !== 1) return;
    const mask = crypto.randomBytes(4), n = payload.length;
    const hdr = n < 126 ? Buffer.from([0x80 | op, 0x80 | n]) : n < 65536 ? Buffer.from([0x80 | op, 0x80 | 126, n >> 8, n & 255]) : (() => { const h = Buffer.alloc(10); h[0] = 0x80 | op; h[1] = 0x80 | 127; h.writeBigUInt64BE(BigInt(n), 2); return h; })();
    const body = Buffer.alloc(n);
    for (let i = 0; i < n; i++) body[i] = payload[i] ^ mask[i & 3];
    this.sock.write(Buffer.concat([hdr, mask, body]));
  }
  send(text) { this.frame(1, Buffer.from(text, 'utf8')); }
  close() { if (this.sock && this.readyState === 1) { this.frame(8, Buffer.alloc(0)); this.readyState = 2; this.sock.end(); } }
}
