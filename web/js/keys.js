// keys.js — keyboard shortcuts that work from anywhere on the page except while typing in a text
// field (or choosing in a list), and the "?" overlay that lists them.

export const SHORTCUTS = [
  ['Space', 'pause / resume live'],
  ['+ / = / w', 'zoom in'],
  ['- / s', 'zoom out'],
  ['← → / a d', 'pan'],
  ['↑ ↓ / PgUp PgDn', 'scroll lanes'],
  ['Home / f', 'fit all: the whole session the relay stores'],
  ['End / l', 'back to live (recordings: their end)'],
  ['c / e', 'collapse / expand all threads'],
  ['Esc', 'clear the measurement, close this help'],
  ['?', 'show / hide this help'],
  ['wheel', 'zoom at the pointer'],
  ['drag', 'pan (and scroll lanes)'],
  ['shift+drag', 'measure a range'],
  ['shift+wheel', 'scroll lanes'],
  ['click thread name', 'collapse / expand that thread'],
];

// True when a key press belongs to the element that has focus, not to the dashboard.
export function typingIn(el) {
  if (!el || el === document.body) return false;
  const tag = el.tagName;
  if (tag === 'TEXTAREA' || tag === 'SELECT' || el.isContentEditable) return true;
  if (tag === 'INPUT') {
    const type = (el.type || 'text').toLowerCase();
    return !['checkbox', 'radio', 'button', 'submit', 'reset', 'range', 'color'].includes(type);
  }
  return false;
}

// Installs the page-wide handler: `action(key)` returns true when it used the key.
export function installKeys(action, overlay) {
  overlay.innerHTML = '<div class="box"><h3>Keyboard and mouse</h3><table>' +
    SHORTCUTS.map(([k, v]) => `<tr><td><kbd>${k}</kbd></td><td>${v}</td></tr>`).join('') +
    '</table><div class="dim">Keys work anywhere on the page but in text fields. Press ? or Esc to close.</div></div>';
  overlay.addEventListener('click', () => { overlay.hidden = true; });
  window.addEventListener('keydown', (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (typingIn(e.target)) return;
    if (e.key === '?') { overlay.hidden = !overlay.hidden; e.preventDefault(); return; }
    if (e.key === 'Escape' && !overlay.hidden) { overlay.hidden = true; e.preventDefault(); return; }
    if (action(e.key)) {
      e.preventDefault();
      // a button keeps focus after a click; Space would also press it
      if (e.key === ' ' && e.target && e.target.tagName === 'BUTTON') e.target.blur();
    }
  });
}
