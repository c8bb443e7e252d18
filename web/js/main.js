// main.js — the dashboard's wiring: session picker, filters, record/open/download, graphs and the
// messages panel around the flame chart; the live stream feeds one SessionData at a time.
// window.telemark exposes the app state (used by the browser tests and the benchmark).

import { SessionData, toChromeTrace, SEVERITIES } from './store.js';
import { Stream, decodeMessage, MSG } from './stream.js';
import { FlameChart, fmtNs, fmtAbs } from './flame.js';
import { installAnalysis } from './analysis.js';
import { hoverValues } from './plothover.js';
import { LodCache } from './lod.js';
import { installKeys } from './keys.js';
import { Notices } from './notices.js';
import { HistoryView } from './history.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const token = params.get('token') || '';

// ---- HTTP API ------------------------------------------------------------------------------
function withToken(path) {
  if (!token) return path;
  return path + (path.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(token);
}
async function api(method, path, body) {
  const opt = { method, headers: {} };
  if (body !== undefined) opt.body = JSON.stringify(body);
  if (method !== 'GET') opt.headers['Content-Type'] = 'application/json'; // the relay requires it of a POST
  const r = await fetch(withToken(path), opt);
  let j = null;
  try { j = await r.json(); } catch (e) { j = null; }
  if (!r.ok) throw new Error((j && j.error) || `${method} ${path}: HTTP ${r.status}`);
  return j;
}

// ---- state ---------------------------------------------------------------------------------
const app = {
  sessions: [],
  current: null,       // session id shown
  sd: null,            // its SessionData
  info: null,          // its /api/sessions item
  level: 5,
  mask: 0xffffffff,
  teamsKnown: new Map(), // bit -> name (union over the session's TEAM records)
  threadsKnown: new Map(), // thread id -> name (union over what arrived)
  threadsOff: new Set(),   // thread ids unticked (the relay sends only the others)
  received: { zones: 0, messages: 0, frames: 0, plots: 0, bySeverity: [0, 0, 0, 0, 0, 0] }, // what the stream delivered (tests read it)
  historyDone: false,
  subscription: 0,     // number of the latest subscription sent (its "seq")
  streamSeq: -1,       // the subscription the relay is sending for (its "subscribed" reply)
  connected: false,
  lastStats: null,
  lastPush: null,
  fitted: false,       // a recording was fitted to its whole range once
};

// What the relay stores beyond the live stream, fetched as the view moves (lod.js).
const lod = new LodCache({
  url: (id, q) => withToken(`/api/sessions/${encodeURIComponent(id)}/lod?${q}`),
  onChange: () => { flame.needs = true; },
});
const isRecording = () => !!(app.info && app.info.recorded);
const flame = new FlameChart($('flame'), $('tip'), {
  lod,
  onSelect: (site, st) => showStats(site, st),
  onLiveChange: () => setLiveButton(),
  canLive: () => !isRecording(),
  onMeasure: (m) => { $('measure').textContent = m ? `measured ${fmtNs(m.dur)}` : ''; },
  onLayout: (content, scrollY, H) => syncScrollbar(content, scrollY, H),
});
flame.range = () => (lod.last > lod.first ? [lod.first, lod.last] : null);
flame.threadFilter = (t) => !app.threadsOff.has(t);
const notices = new Notices($('notices'), withToken);
installKeys((k) => flame.action(k), $('keyhelp'));
$('helpbtn').addEventListener('click', () => { $('keyhelp').hidden = !$('keyhelp').hidden; });

// The lanes' scrollbar: a native one beside the canvas, kept in step with flame.scrollY.
const vscroll = $('vscroll');
let scrollSync = false;
function syncScrollbar(content, scrollY, H) {
  vscroll.firstElementChild.style.height = Math.ceil(content) + 'px';
  vscroll.hidden = content <= H;
  if (Math.abs(vscroll.scrollTop - scrollY) > 1) { scrollSync = true; vscroll.scrollTop = scrollY; }
}
vscroll.addEventListener('scroll', () => {
  if (scrollSync) { scrollSync = false; return; }
  flame.scrollTo(vscroll.scrollTop);
});
function setLiveButton() {
  const b = $('live');
  if (isRecording()) { b.textContent = 'Recording'; b.disabled = true; b.title = 'an opened recording has no live edge'; return; }
  b.disabled = false; b.title = '';
  b.textContent = flame.live ? 'Pause' : 'Resume live';
}

// ---- stream --------------------------------------------------------------------------------
const wsUrl = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + withToken('/api/stream');
const stream = new Stream(wsUrl, {
  onOpen: () => { app.connected = true; setConn(); },
  onClose: () => { app.connected = false; setConn(); },
  onText: (m) => {
    if (m.type === 'error') showNotice('stream: ' + m.error);
    else if (m.type === 'subscribed') app.streamSeq = m.seq;
  },
  onBinary: (buf) => {
    // Until the relay says it is sending for the latest subscription, what arrives (RESET,
    // history, HISTORY_DONE) belongs to an earlier one: decoded into a throwaway, not shown.
    const current = app.streamSeq === app.subscription;
    let sum;
    try {
      sum = decodeMessage(buf, (sid, type, origin) => {
        if (!current) return new SessionData(sid);
        if (type === MSG.RESET) {
          if (sid === app.current) {
            newSessionData(sid); app.sd.origin = origin; app.sd.originKnown = true; flame.origin = origin;
            lod.reset(sid); lod.setInfo(app.info, origin);
          }
          return app.sd;
        }
        return sid === app.current && app.sd ? app.sd : new SessionData(sid); // stale: decoded into a throwaway
      });
    } catch (e) {
      showNotice('stream decode error: ' + e.message);
      return;
    }
    if (!current || sum.session !== app.current || sum.type !== MSG.DATA) return;
    app.received.zones += sum.zones; app.received.frames += sum.frames;
    app.received.messages += sum.messages; app.received.plots += sum.plots;
    if (sum.historyDone) app.historyDone = true;
    if (sum.gap) notices.fromGap(sum.gap, (t) => fmtAbs(t + app.sd.origin, 1e6));
    if (sum.historyDone && isRecording() && !app.fitted) { app.fitted = true; flame.setLive(false); flame.fitAll(); }
    if (sum.ended && !isRecording()) showNotice('Session ended.');
    dirty = true;
  },
});

function newSessionData(sid) {
  app.sd = new SessionData(sid);
  app.received = { zones: 0, messages: 0, frames: 0, plots: 0, bySeverity: [0, 0, 0, 0, 0, 0] };
  app.historyDone = false;
  app.fitted = false;
  flame.setSession(app.sd);
  if (isRecording()) flame.live = false;
  lod.reset(sid);
  const addMessage = app.sd.addMessage.bind(app.sd);
  app.sd.addMessage = (m) => { app.received.bySeverity[m.severity]++; addMessage(m); };
  resetGraphs();
}

function subscribe() {
  if (!app.current) return;
  app.subscription++;
  app.historyDone = false; // until this subscription's HISTORY_DONE
  const sub = { session: app.current, level: app.level, mask: app.mask >>> 0, window: 8 << 20, seq: app.subscription };
  if (app.threadsOff.size) sub.threads = [...app.threadsKnown.keys()].filter((t) => !app.threadsOff.has(t));
  stream.subscribe(sub);
  lod.setFilter(app.level, app.mask >>> 0);
}

function selectSession(id) {
  if (app.current === id) return;
  app.current = id;
  app.teamsKnown = new Map();
  app.threadsKnown = new Map();
  app.threadsOff = new Set();
  app.mask = 0xffffffff;
  $('session').value = id;
  notices.reset();
  app.info = app.sessions.find((x) => x.id === id) || null;
  newSessionData(id);
  if (isRecording()) flame.setLive(false);
  setLiveButton();
  renderTeams();
  renderThreads();
  subscribe();
  refreshInfo();
}

// ---- session list, counters ----------------------------------------------------------------
function setConn() {
  const c = $('conn'), s = app.info;
  if (!app.connected) { c.textContent = 'disconnected'; c.className = 'badge bad'; return; }
  if (s && s.recorded) { c.textContent = 'recording'; c.className = 'badge rec'; c.title = 'an opened recording: not live'; return; }
  if (s && !s.live) { c.textContent = 'session ended'; c.className = 'badge'; c.title = ''; return; }
  c.textContent = 'live'; c.className = 'badge ok'; c.title = 'live stream connected';
}
function showNotice(text) { const n = $('notice'); n.textContent = text; n.hidden = false; clearTimeout(showNotice.t); showNotice.t = setTimeout(() => { n.hidden = true; }, 8000); }

async function refreshSessions() {
  try {
    const list = await api('GET', '/api/sessions');
    app.sessions = list;
    const sel = $('session');
    const want = app.current;
    sel.innerHTML = '';
    for (const s of list) {
      const o = document.createElement('option');
      o.value = s.id;
      o.textContent = `${s.live ? '● ' : ''}${s.program || '(unknown)'} — ${s.id}${s.recorded ? ' (recording)' : ''}`;
      sel.appendChild(o);
    }
    if (want) sel.value = want;
    if (!app.current && list.length) {
      const pick = list.find((s) => s.live) || list[list.length - 1];
      selectSession(pick.id);
    }
    refreshInfo();
  } catch (e) { showNotice(e.message); }
}
async function refreshRecordings() {
  try {
    const list = await api('GET', '/api/recordings');
    const sel = $('recordings');
    const keep = sel.value;
    sel.innerHTML = '';
    for (const r of list.slice().sort((a, b) => (b.mtime_unix_ns || 0) - (a.mtime_unix_ns || 0))) {
      const o = document.createElement('option');
      o.value = r.name; o.textContent = `${r.name} (${(r.size / 1024).toFixed(0)} KiB)${r.open ? ' ●' : ''}`;
      sel.appendChild(o);
    }
    if (keep) sel.value = keep;
  } catch (e) { /* the session list shows the error */ }
}
function refreshInfo() {
  const s = app.sessions.find((x) => x.id === app.current);
  app.info = s || null;
  // an opened recording has no live edge: shown whole, in its own time, once loaded
  if (s && s.recorded) {
    if (flame.live) flame.setLive(false);
    if (!app.fitted && app.historyDone) { app.fitted = true; flame.fitAll(); }
  }
  setConn();
  setLiveButton();
  if (s && lod.session === s.id && app.sd && app.sd.originKnown) lod.setInfo(s, app.sd.origin);
  notices.fromSession(s, app.relay);
  if (!s) { $('facts').textContent = ''; $('counters').innerHTML = ''; return; }
  $('facts').textContent = [s.program, s.build ? 'build ' + s.build : '', s.label, s.platform, s.arch, s.big_endian ? 'big-endian' : 'little-endian',
    s.pointer_size ? s.pointer_size * 8 + '-bit' : '', s.transport, s.source].filter(Boolean).join(' · ');
  const st = s.stats || {};
  const rows = [['records', st.records], ['zones', st.zones], ['packets', st.packets], ['lost', st.lost, 1], ['orphans', st.orphans, 'lost'],
    ['duplicated', st.duplicated], ['reordered', st.reordered], ['malformed', st.malformed, 1],
    ['dropped by agent', st.dropped_by_agent, 'dropped'], ['evicted', st.evicted, 'evicted'],
    ['memory', st.mem_bytes !== undefined ? (st.mem_bytes / 1048576).toFixed(1) + ' MiB' : '']];
  // counters that need attention are amber, with a link to what they mean and what to change
  const help = (h) => (typeof h === 'string' ? ` <a class="q" href="${withToken('help.html')}#${h}" target="_blank" rel="noopener" title="what this means">?</a>` : '');
  $('counters').innerHTML = rows.map(([k, v, bad]) => `<span>${k}</span><span class="${bad && v ? 'warn' : ''}">${v === undefined ? '–' : v}${bad && v ? help(bad) : ''}</span>`).join('');
  const rec = $('record');
  rec.textContent = s.recording ? 'Stop recording' : 'Record';
  rec.classList.toggle('on', !!s.recording);
  rec.disabled = !!s.recorded;
}

// ---- teams and severity --------------------------------------------------------------------
function renderTeams() {
  const box = $('teams');
  const bits = [...app.teamsKnown.keys()].sort((a, b) => a - b);
  box.innerHTML = '';
  for (const b of bits) {
    const l = document.createElement('label');
    const c = document.createElement('input');
    c.type = 'checkbox'; c.dataset.bit = b; c.checked = !!((app.mask >>> b) & 1);
    c.addEventListener('change', () => {
      if (c.checked) app.mask = (app.mask | (1 << b)) >>> 0; else app.mask = (app.mask & ~(1 << b)) >>> 0;
      subscribe();
    });
    l.appendChild(c);
    l.appendChild(document.createTextNode(' ' + app.teamsKnown.get(b) + ` (bit ${b})`));
    box.appendChild(l);
  }
}
function syncTeams() {
  if (!app.sd) return;
  let changed = false;
  for (const [b, n] of app.sd.teams) if (app.teamsKnown.get(b) !== n) { app.teamsKnown.set(b, n); changed = true; }
  if (changed) renderTeams();
  changed = false;
  for (const th of app.sd.threads.values()) {
    const name = th.name || `thread ${th.id}`;
    if (app.threadsKnown.get(th.id) !== name) { app.threadsKnown.set(th.id, name); changed = true; }
  }
  if (changed) renderThreads();
}
// Thread checkboxes: unticked threads are left out by the relay (subscribe "threads").
function renderThreads() {
  const box = $('threads');
  box.innerHTML = '';
  for (const t of [...app.threadsKnown.keys()].sort((a, b) => a - b)) {
    const l = document.createElement('label');
    const c = document.createElement('input');
    c.type = 'checkbox'; c.dataset.thread = t; c.checked = !app.threadsOff.has(t);
    c.addEventListener('change', () => {
      if (c.checked) app.threadsOff.delete(t); else app.threadsOff.add(t);
      subscribe();
    });
    l.appendChild(c);
    l.appendChild(document.createTextNode(` ${app.threadsKnown.get(t)} (thread ${t})`));
    box.appendChild(l);
  }
}

$('severity').addEventListener('change', () => { app.level = +$('severity').value; subscribe(); });
$('session').addEventListener('change', () => selectSession($('session').value));
$('push').addEventListener('click', async () => {
  try {
    const r = await api('POST', `/api/sessions/${encodeURIComponent(app.current)}/control`, { level: app.level, mask: app.mask >>> 0 });
    app.lastPush = r;
    $('pushResult').textContent = `sent level ${SEVERITIES[app.level]}, mask 0x${(app.mask >>> 0).toString(16)}`;
  } catch (e) { $('pushResult').textContent = e.message; app.lastPush = { error: e.message }; }
});
$('record').addEventListener('click', async () => {
  const on = !(app.info && app.info.recording);
  try {
    await api('POST', `/api/sessions/${encodeURIComponent(app.current)}/record/${on ? 'start' : 'stop'}`);
  } catch (e) { showNotice(e.message); }
  await refreshSessions(); refreshRecordings();
});
$('open').addEventListener('click', async () => {
  const name = $('recordings').value;
  if (!name) return;
  try {
    const r = await api('POST', '/api/recordings/open', { name });
    await refreshSessions();
    selectSession(r.id);
  } catch (e) { showNotice(e.message); }
});
$('download').addEventListener('click', () => {
  if (!app.sd) return;
  const json = JSON.stringify(toChromeTrace(app.sd, app.info && app.info.program));
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([json], { type: 'application/json' }));
  a.download = `telemark-${app.current}.json`;
  document.body.appendChild(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
});
$('live').addEventListener('click', () => flame.setLive(!flame.live));
$('msgsev').addEventListener('change', () => { dirty = true; });

function showStats(site, st) {
  const s = app.sd.sites.get(site);
  app.lastStats = Object.assign({ name: s ? s.name : '' }, st);
  $('stats').innerHTML = `<b>${s ? s.name.replace(/</g, '&lt;') : 'site ' + site}</b><br>` +
    `${st.count} zones in view, total ${fmtNs(st.total)}<br>mean ${fmtNs(st.mean)} · p50 ${fmtNs(st.p50)} · p95 ${fmtNs(st.p95)}<br>min ${fmtNs(st.min)} · max ${fmtNs(st.max)}`;
}

// ---- graphs (uPlot) ------------------------------------------------------------------------
let plotGraphs = new Map();
function resetGraphs() {
  for (const g of plotGraphs.values()) g.destroy();
  plotGraphs = new Map();
  $('plots').innerHTML = '';
}
const GRAPH_POINTS = 3000;
// Compact numbers for plot axes: 12.3k, 4.5M, 1.2G.
function compact(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + 'G';
  if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
  return String(+v.toFixed(3));
}
function axisStyle() { return { stroke: '#9aa0a6', grid: { stroke: '#2b2f37' }, ticks: { stroke: '#2b2f37' } }; }
function updateGraphs() {
  const sd = app.sd;
  if (!sd || typeof uPlot === 'undefined') return;
  for (const [site, p] of sd.plots) {
    const n = p.t.length, f = Math.max(0, n - GRAPH_POINTS);
    const data = [p.t.slice(f).map((v) => v / 1e9), p.v.slice(f)];
    let g = plotGraphs.get(site);
    if (!g) {
      const s = sd.sites.get(site);
      const div = document.createElement('div');
      $('plots').appendChild(div);
      g = new uPlot({
        width: 330, height: 110, scales: { x: { time: false } }, title: s ? s.name : 'plot ' + site,
        legend: { show: false }, plugins: [hoverValues((x) => x.toFixed(3) + ' s', compact)],
        series: [{}, { label: s ? s.name : 'value', stroke: '#f6ae2d', width: 1 }],
        axes: [Object.assign({ values: (u, v) => v.map((x) => x.toFixed(1) + 's') }, axisStyle()), Object.assign({ size: 62, values: (u, v) => v.map(compact) }, axisStyle())],
      }, data, div);
      plotGraphs.set(site, g);
    } else g.setData(data);
  }
}

// ---- messages ------------------------------------------------------------------------------
function renderMessages() {
  const sd = app.sd;
  if (!sd) return;
  const max = +$('msgsev').value;
  const out = [];
  let shown = 0;
  for (let i = sd.messages.length - 1; i >= 0 && out.length < 300; i--) {
    const m = sd.messages[i];
    if (m.severity > max) continue;
    out.push(m);
  }
  for (const m of sd.messages) if (m.severity <= max) shown++;
  const esc = (v) => String(v).replace(/[&<>]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;' }[c]));
  $('messages').innerHTML = out.map((m) => `<div class="s${m.severity}" data-t="${m.t}">${fmtAbs(m.t + sd.origin, 1e3)} [${SEVERITIES[m.severity] || m.severity}] t${m.thread} ${esc(m.text)}</div>`).join('');
  $('msgcount').textContent = `${shown} of ${sd.messages.length}`;
}

// ---- periodic UI refresh -------------------------------------------------------------------
let dirty = false;
setInterval(() => {
  if (!dirty) return;
  dirty = false;
  syncTeams();
  updateGraphs();
  renderMessages();
  const sd = app.sd;
  if (sd) $('zcount').textContent = `${sd.zoneCount.toLocaleString()} zones loaded · ${flame.drawn} rects`;
}, 250);
setInterval(() => {
  const o = flame.origin, span = flame.t1 - flame.t0, step = Math.max(1, Math.pow(10, Math.floor(Math.log10(span / 1000))));
  $('range').textContent = `${fmtAbs(flame.t0 + o, step)} … ${fmtAbs(flame.t1 + o, step)} (${fmtNs(span)})`;
}, 200);
(async () => { try { app.relay = await api('GET', '/api/relay'); } catch (e) { app.relay = null; } })();
setInterval(refreshSessions, 1000);
setInterval(refreshRecordings, 3000);
refreshSessions();
refreshRecordings();

// ---- history view (history.js): shown instead of the session view ----------------------------
const historyView = new HistoryView($('history'), api);
$('historyToggle').addEventListener('click', () => {
  const show = $('history').hidden;
  $('history').hidden = !show;
  document.querySelector('main').hidden = show;
  $('historyToggle').classList.toggle('on', show);
  if (show) historyView.open();
});

// ---- analysis: statistics, find zone, compare, frame graph, message ticks (analysis.js) ------
const analysis = installAnalysis({
  api, flame, tip: $('tip'),
  session: () => app.current, sd: () => app.sd, historyDone: () => app.historyDone, sessions: () => app.sessions,
  filters: () => ({ level: app.level, mask: app.mask >>> 0,
    threads: app.threadsOff.size ? [...app.threadsKnown.keys()].filter((t) => !app.threadsOff.has(t)) : null }),
  threadName: (t) => app.threadsKnown.get(t) || `thread ${t}`,
  msgLevel: () => +$('msgsev').value,
}, { panel: $('analysis'), frames: $('frames'), ticks: $('msgticks'), messages: $('messages') });

// ---- test/bench hooks ----------------------------------------------------------------------
window.telemark = {
  app, flame, stream, SessionData, analysis, plotGraphs: () => plotGraphs, lod, notices, historyView,
  get sd() { return app.sd; },
  selectSession, subscribe,
  setLevel(l) { $('severity').value = String(l); $('severity').dispatchEvent(new Event('change')); },
  // Zones loaded whose call site has any of the given team bits.
  zonesWithTeam(bit) { const sd = app.sd; return sd ? sd.countZones((site) => { const s = sd.sites.get(site); return !!(s && ((s.verbosity >>> bit) & 1)); }) : 0; },
  zonesWithSeverityAbove(level) { const sd = app.sd; return sd ? sd.countZones((site) => { const s = sd.sites.get(site); return !!(s && s.severity > level); }) : 0; },
  zoneNames() { const sd = app.sd, c = {}; if (!sd) return c; sd.countZones((site) => { const s = sd.sites.get(site); const n = s ? s.name : '#' + site; c[n] = (c[n] || 0) + 1; return false; }); return c; },
  // One key per loaded zone in absolute time, to compare sessions (live vs its recording).
  zoneKeys() {
    const sd = app.sd, out = [];
    if (!sd) return out;
    for (const th of sd.threads.values()) for (const l of th.lanes) for (let i = 0; i < l.n; i++)
      out.push(`${th.id}:${l.depth}:${l.site[i]}:${sd.origin + l.start[i]}:${l.dur[i]}`);
    return out;
  },
  chromeTrace() { return toChromeTrace(app.sd, app.info && app.info.program); },
};
