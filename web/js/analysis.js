// analysis.js — wires the analysis views into the page: the panel with the statistics, find-zone
// and compare tabs, the frame graph, message ticks on the timeline and message-list jumps.
// main.js hands over a context of accessors (session, SessionData, filters, flame chart, API).

import { StatsPanel } from './stats.js';
import { FindZone } from './findzone.js';
import { ComparePanel } from './compare.js';
import { FrameGraph } from './framegraph.js';
import { MessageTicks, installMessageList } from './messages.js';

// ctx: {api, flame, tip, session(), sd(), historyDone(), filters(), threadName(t), msgLevel(),
// sessions()}. Returns the views (window.telemark.analysis).
export function installAnalysis(ctx, els) {
  ctx.toAbs = (rel) => (ctx.sd() ? ctx.sd().origin : 0) + rel;
  ctx.toRel = (abs) => abs - (ctx.sd() ? ctx.sd().origin : 0);
  const panel = els.panel;
  panel.innerHTML = `<div class="tabs"><button data-tab="stats" class="on">Statistics</button><button data-tab="find">Find zone</button><button data-tab="compare">Compare</button></div>
    <div class="tab" data-tab="stats"></div><div class="tab" data-tab="find" hidden></div><div class="tab" data-tab="compare" hidden></div>`;
  const tab = (n) => panel.querySelector(`div.tab[data-tab=${n}]`);
  const views = {};
  views.showTab = (n) => {
    for (const b of panel.querySelectorAll('.tabs button')) b.classList.toggle('on', b.dataset.tab === n);
    for (const t of panel.querySelectorAll('div.tab')) t.hidden = t.dataset.tab !== n;
    if (n === 'stats' && !views.stats.last) views.stats.refresh();
  };
  for (const b of panel.querySelectorAll('.tabs button')) b.addEventListener('click', () => views.showTab(b.dataset.tab));
  views.frames = new FrameGraph(els.frames, ctx);
  ctx.selection = () => views.frames.selection;
  views.stats = new StatsPanel(tab('stats'), ctx);
  views.find = new FindZone(tab('find'), ctx);
  views.compare = new ComparePanel(tab('compare'), ctx);
  views.ticks = new MessageTicks(els.ticks, ctx);
  installMessageList(els.messages, views.ticks);
  ctx.onFrameSelection = (sel) => { if (sel) { views.showTab('stats'); views.stats.setKind('selection'); } };
  ctx.findSite = (site) => { views.showTab('find'); const s = views.stats.last && views.stats.last.sites.find((x) => x.site === site); views.find.search(s ? s.name : ''); };
  // a new session or new filters: the statistics of the whole session again
  let seen = '';
  setInterval(() => {
    views.compare.syncSessions(ctx.sessions(), ctx.session());
    const f = ctx.filters();
    const sig = `${ctx.session()}|${ctx.historyDone()}|${f.level}|${f.mask}|${f.threads}`;
    if (sig !== seen && ctx.historyDone()) { seen = sig; views.stats.refresh(); }
  }, 500);
  return views;
}
