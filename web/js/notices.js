// notices.js — notices that explain themselves: what was dropped, evicted, lost or coalesced,
// why, and what to change, each with a link to its section of the dashboard's help page
// (help.html, served by the relay like the page). One notice per cause, updated in place,
// dismissable; a dismissed notice comes back only when its count grows.

const esc = (v) => String(v).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
const n = (v) => Number(v || 0).toLocaleString('en-US');
const mib = (b) => (b / 1048576).toFixed(0) + ' MiB';

export class Notices {
  constructor(box, withToken) {
    this.box = box;
    this.withToken = withToken;
    this.items = new Map();     // key -> {html, count, help}
    this.dismissed = new Map(); // key -> count when dismissed
  }
  reset() { this.items.clear(); this.dismissed.clear(); this.render(); }
  set(key, count, html, help) {
    const old = this.items.get(key);
    if (old && old.count === count && old.html === html) return;
    this.items.set(key, { count, html, help });
    this.render();
  }
  // Session counters from GET /api/sessions (docs/API.md) and the relay's settings.
  fromSession(s, relay) {
    if (!s) return;
    const st = s.stats || {}, by = s.dropped_by_reason || {};
    if (st.dropped_by_agent > 0) {
      const parts = [['ring full', by.ring_full], ['no thread slot', by.no_thread], ['too big', by.too_big], ['send failed (packets)', by.send_failed]]
        .filter(([, v]) => v > 0).map(([k, v]) => `${k} ${n(v)}`).join(', ');
      let why = 'its per-thread rings filled faster than its flusher sent them';
      let fix = 'give <code>tmk_agent_init</code> a bigger arena, or raise <code>ring_bytes</code>; pump more often with <code>manual_pump</code>';
      if (by.no_thread > 0 && !(by.ring_full > 0)) { why = 'more threads recorded than it has slots for'; fix = 'raise <code>max_threads</code> (and the arena with it)'; }
      this.set('dropped', st.dropped_by_agent,
        `The agent dropped <b>${n(st.dropped_by_agent)}</b> records (${esc(parts)}): ${why}. To keep them: ${fix}.`, 'dropped');
    }
    if (st.evicted > 0) {
      const budget = relay && relay.session_memory ? ` of ${mib(relay.session_memory)}` : '';
      this.set('evicted', st.evicted,
        `The relay forgot the oldest <b>${n(st.evicted)}</b> zones and events of this session to stay within its memory budget${budget} per session. ` +
        `To keep more history, start the relay with a larger <code>--session-memory</code> (e.g. <code>--session-memory 1G</code>) or record the session to a file.`, 'evicted');
    }
    if (st.lost > 0) {
      this.set('lost', st.lost,
        `<b>${n(st.lost)}</b> packets from the target never arrived (UDP loss between target and relay). ` +
        `Use the TCP transport, a quieter network, or a larger <code>--reorder-window</code> if they arrive late.`, 'lost');
    }
    if (st.orphans > 0) {
      this.set('orphans', st.orphans,
        `<b>${n(st.orphans)}</b> zones were not kept because the packet holding their parent zone was lost: a zone is not shown without its parent. ` +
        `Avoid the loss (TCP transport, quieter network, larger <code>--reorder-window</code>).`, 'lost');
    }
  }
  // A GAP record of the live stream (docs/API.md, "Slow browsers").
  fromGap(g, fmt) {
    this.set('gap', g.zones,
      `This browser fell behind the live stream, so for ${esc(fmt(g.from))} … ${esc(fmt(g.to))} (marked red) the relay sent only the zones long enough to see ` +
      `(${n(g.zones)} zones and ${n(g.other)} events coalesced). Nothing is lost: zoom in there and full detail comes from the relay. ` +
      `If it keeps happening, close other tabs or untick threads you do not need.`, 'slow');
  }
  render() {
    const box = this.box;
    const shown = [...this.items].filter(([k, v]) => !(this.dismissed.has(k) && this.dismissed.get(k) >= v.count));
    box.hidden = shown.length === 0;
    box.innerHTML = shown.map(([k, v]) =>
      `<div class="note" data-key="${k}"><span>${v.html} <a href="${esc(this.withToken('help.html'))}#${v.help}" target="_blank" rel="noopener">What to change</a></span>` +
      `<button class="x" title="dismiss" data-key="${k}">×</button></div>`).join('');
    for (const b of box.querySelectorAll('button.x')) {
      b.addEventListener('click', () => { const k = b.dataset.key; this.dismissed.set(k, this.items.get(k).count); this.render(); });
    }
  }
}
