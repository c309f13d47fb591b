// Small SVG charts over time (no library): lines with gaps, and bars. The x axis is the last
// `window` seconds up to `now`; the y axis starts at 0 and ends at a round number.

import { s } from "./dom.js";
import { num } from "./format.js";

const W = 640;
const M = { left: 64, right: 14, top: 10, bottom: 26 };

/** A round upper bound above `max` whose quarters are round too (1, 2, 4, 8, 10 times a power
 * of ten: ticks at 0.25, 0.5, 1, 2, 2.5 times it). */
export function niceCeiling(max) {
  if (!(max > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  for (const f of [1, 2, 4, 8, 10]) if (f * power >= max * (1 - 1e-9)) return f * power;
  return 10 * power;
}

/**
 * The window to draw: the last 300 s, or less while the data is younger (60, 120, ... s), so a
 * service that just started shows its first seconds legibly. `points` oldest first.
 */
export function windowFor(points, now, keys) {
  const first = points.find((p) => keys.some((k) => p[k] !== null && p[k] !== undefined && p[k] !== 0));
  const span = first ? now - first.t + 5 : 0;
  for (const w of [60, 120, 180, 240]) if (span <= w) return w;
  return 300;
}

function frame({ height, top, unit, window, label }) {
  const h = height - M.top - M.bottom;
  const x = (ago) => M.left + (W - M.left - M.right) * (1 - ago / window);
  const y = (v) => M.top + h * (1 - v / top);
  const parts = [];
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    parts.push(s("line", { class: i ? "grid-line" : "axis", x1: M.left, x2: W - M.right, y1: y(v), y2: y(v) }));
    parts.push(s("text", { x: M.left - 6, y: y(v) + 4, "text-anchor": "end" }, `${num(v, 3)} ${unit}`));
  }
  const step = window >= 240 ? 60 : window >= 120 ? 30 : 15;
  for (let ago = 0; ago <= window; ago += step) {
    parts.push(s("text", { x: x(ago), y: height - 8, "text-anchor": "middle" }, ago ? `-${ago} s` : "now"));
  }
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${W} ${height}`, role: "img", "aria-label": label }, s("title", null, label), parts);
  return { svg, x, y };
}

/**
 * Lines over time. `points`: [{t, ...}] oldest first (t in epoch seconds); `lines`:
 * [{key, className}] (a null value is a gap). Returns an <svg>.
 */
export function lineChart({ points, lines, now, window = 300, height = 180, unit, label }) {
  const values = points.flatMap((p) => lines.map((l) => p[l.key])).filter((v) => v !== null && v !== undefined);
  const top = niceCeiling(Math.max(0, ...values));
  const { svg, x, y } = frame({ height, top, unit, window, label });
  for (const line of lines) {
    let d = "";
    let open = false;
    const dots = [];
    points.forEach((p, i) => {
      const v = p[line.key];
      const ago = now - p.t;
      if (v === null || v === undefined || ago > window || ago < 0) {
        open = false;
        return;
      }
      d += `${open ? "L" : "M"}${x(ago).toFixed(1)},${y(v).toFixed(1)}`;
      const next = points[i + 1]?.[line.key];
      if (!open && (next === null || next === undefined)) dots.push([x(ago), y(v)]);
      open = true;
    });
    if (d) svg.append(s("path", { class: `line ${line.className}`, d }));
    for (const [cx, cy] of dots) svg.append(s("circle", { class: line.className, cx, cy, r: 2.5, fill: "currentColor" }));
  }
  return svg;
}

/** Bars over time: one per point at `key` (t in epoch seconds, one point per second). */
export function barChart({ points, key, now, window = 300, height = 180, unit, label }) {
  const top = niceCeiling(Math.max(0, ...points.map((p) => p[key] ?? 0)));
  const { svg, x, y } = frame({ height, top, unit, window, label });
  const width = Math.max(1, (W - M.left - M.right) / window - 0.5);
  for (const p of points) {
    const v = p[key];
    const ago = now - p.t;
    if (!v || ago > window || ago < 0) continue;
    svg.append(s("rect", { class: "bar", x: x(ago) - width, y: y(v), width, height: y(0) - y(v) }));
  }
  return svg;
}
