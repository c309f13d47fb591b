// A dataflow as a layered SVG graph: sources on the left, then the steps in dependency order,
// tables and sinks on the right. Each node is placed in the layer of its longest path from a
// source; within a layer, nodes follow the mean position of their inputs (fewer crossings).

import { s } from "./dom.js";

const NODE_W = 230;
const COL_W = 300;
const LINE_H = 17;
const GAP_Y = 22;
const PAD = 16;

/** Layer of each node id: 0 for nodes without inputs, else 1 + the deepest input. */
export function layers(nodes, edges) {
  const layer = new Map(nodes.map((n) => [n.id, 0]));
  for (let round = 0; round < nodes.length; round++) {
    let changed = false;
    for (const e of edges) {
      if (!layer.has(e.from) || !layer.has(e.to)) continue;
      const want = layer.get(e.from) + 1;
      if (want > layer.get(e.to)) {
        layer.set(e.to, want);
        changed = true;
      }
    }
    if (!changed) break;
  }
  return layer;
}

/** Positions {id: {x, y, w, h}} and the canvas size, for nodes with `lines(node)` text lines. */
export function layout(nodes, edges, lines) {
  const layer = layers(nodes, edges);
  const columns = [];
  for (const n of nodes) (columns[layer.get(n.id)] ??= []).push(n);
  const place = new Map();
  let height = 0;
  columns.forEach((column, i) => {
    const rank = (n) => {
      const inputs = edges.filter((e) => e.to === n.id && place.has(e.from)).map((e) => place.get(e.from).y);
      return inputs.length ? inputs.reduce((a, b) => a + b, 0) / inputs.length : 0;
    };
    column.sort((a, b) => rank(a) - rank(b) || a.name.localeCompare(b.name));
    let y = PAD;
    for (const n of column) {
      const h = 16 + LINE_H * lines(n).length;
      place.set(n.id, { x: PAD + i * COL_W, y, w: NODE_W, h });
      y += h + GAP_Y;
    }
    height = Math.max(height, y);
  });
  const width = PAD * 2 + Math.max(0, columns.length - 1) * COL_W + NODE_W;
  return { place, width, height: height - GAP_Y + PAD };
}

/** The <svg> of the graph; `lines(node)` gives each node's text lines (the first is its name). */
export function graphSvg({ nodes, edges, lines, label }) {
  const { place, width, height } = layout(nodes, edges, lines);
  // drawn at its own size (1:1): a wide dataflow scrolls in its box rather than shrinking
  const svg = s("svg", { class: "graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label },
    s("title", null, label),
    s("defs", null,
      s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
        s("path", { class: "arrow", d: "M0,0 L10,5 L0,10 z" }))));
  for (const e of edges) {
    const a = place.get(e.from);
    const b = place.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + a.w;
    const y1 = a.y + a.h / 2;
    const x2 = b.x;
    const y2 = b.y + b.h / 2;
    const bend = Math.max(30, (x2 - x1) / 2);
    svg.append(s("path", { class: `edge edge-${e.kind}`, d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" },
      s("title", null, `${e.from} ${e.kind} ${e.to}`)));
  }
  for (const n of nodes) {
    const p = place.get(n.id);
    const text = lines(n).map((line, i) => s("text", { x: p.x + 10, y: p.y + 20 + i * LINE_H, class: i ? "detail" : "name" }, line));
    svg.append(s("g", { class: `node ${n.kind}`, "data-node": n.id }, s("rect", { x: p.x, y: p.y, width: p.w, height: p.h, rx: 6 }), text));
  }
  return svg;
}
