// plothover.js — a uPlot plugin that shows the value under the cursor (time and value) in a line
// under the plot, for the plots and the find-zone histogram.

export function hoverValues(fmtX, fmtY) {
  let out = null;
  return {
    hooks: {
      init: (u) => { out = document.createElement('div'); out.className = 'u-hover dim'; out.textContent = '\u00a0'; u.root.appendChild(out); },
      setCursor: (u) => {
        const i = u.cursor.idx;
        if (i == null || !out) { if (out) out.textContent = '\u00a0'; return; }
        out.textContent = `${fmtX(u.data[0][i])}: ${fmtY(u.data[1][i])}`;
        u.hoverIdx = i;
      },
    },
  };
}
