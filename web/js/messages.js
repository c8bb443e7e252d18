// messages.js — messages on the timeline: a strip above the flame chart with one tick per message
// in the flame chart's view (coloured by severity, hover shows the text, click centres the flame
// chart on it), and click-to-jump on the messages list.

import { fmtNs } from './flame.js';
import { SEVERITIES } from './store.js';

const COLOURS = ['#ff5252', '#ff8a80', '#ffd54f', '#8ab4f8', '#9aa0a6', '#6b7078'];
const HEIGHT = 16;

export class MessageTicks {
  constructor(el, ctx) {
    this.el = el;
    this.ctx = ctx;
    el.classList.add('msgticks');
    el.innerHTML = '<canvas></canvas>';
    this.cv = el.querySelector('canvas');
    this.ticks = [];   // [{x, m}] drawn (tests)
    this.sig = '';
    this.lastJump = null;
    this.cv.addEventListener('mousemove', (e) => {
      const m = this.at(e);
      const tip = ctx.tip;
      if (!m) { tip.style.display = 'none'; return; }
      tip.innerHTML = '';
      const b = document.createElement('b');
      b.textContent = `[${SEVERITIES[m.severity] || m.severity}] ${fmtNs(m.t)}`;
      tip.appendChild(b);
      tip.appendChild(document.createElement('br'));
      tip.appendChild(document.createTextNode(`t${m.thread} ${m.text}`));
      tip.style.display = 'block';
      tip.style.left = (e.clientX + 14) + 'px';
      tip.style.top = (e.clientY + 14) + 'px';
    });
    this.cv.addEventListener('mouseleave', () => { ctx.tip.style.display = 'none'; });
    this.cv.addEventListener('click', (e) => { const m = this.at(e); if (m) this.jump(m.t); });
    const loop = () => { this.tick(); requestAnimationFrame(loop); };
    requestAnimationFrame(loop);
  }
  // The message nearest to the pointer, within 4 px.
  at(e) {
    const x = e.clientX - this.cv.getBoundingClientRect().left;
    let best = null, bd = 5;
    for (const k of this.ticks) { const d = Math.abs(k.x - x); if (d < bd) { bd = d; best = k.m; } }
    return best;
  }
  // Centres the flame chart on time t (relative ns), keeping its zoom.
  jump(t) {
    const f = this.ctx.flame, span = f.t1 - f.t0;
    this.lastJump = t;
    f.setRange(t - span / 2, t + span / 2, true);
  }
  tick() {
    const sd = this.ctx.sd(), f = this.ctx.flame;
    const max = this.ctx.msgLevel();
    const dpr = window.devicePixelRatio || 1, W = this.el.clientWidth;
    const sig = `${sd && sd.version}:${f.t0}:${f.t1}:${max}:${W}`;
    if (sig === this.sig) return;
    this.sig = sig;
    if (this.cv.width !== Math.floor(W * dpr)) { this.cv.width = Math.floor(W * dpr); this.cv.height = Math.floor(HEIGHT * dpr); }
    const c = this.cv.getContext('2d');
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    c.fillStyle = '#16191e';
    c.fillRect(0, 0, W, HEIGHT);
    this.ticks = [];
    if (!sd) return;
    const span = f.t1 - f.t0 || 1;
    // messages are in arrival order, mostly by time: a scan is fine for the page's 20,000
    for (const m of sd.messages) {
      if (m.severity > max || m.t < f.t0 || m.t > f.t1) continue;
      const x = (m.t - f.t0) / span * W;
      c.fillStyle = COLOURS[m.severity] || '#9aa0a6';
      c.fillRect(Math.floor(x) - 1, m.severity <= 2 ? 1 : 5, 3, m.severity <= 2 ? HEIGHT - 2 : HEIGHT - 6);
      this.ticks.push({ x, m });
    }
  }
}

// Clicking a line of the messages list (rendered by main.js with data-t) jumps to it.
export function installMessageList(el, ticks) {
  el.addEventListener('click', (e) => {
    const row = e.target.closest('[data-t]');
    if (row) ticks.jump(+row.dataset.t);
  });
}
