// Batches: the timeline of the last batches, one poll a second. Per batch: events, engine time,
// each step's strategy and why, commit time, freshness, and when each warehouse took it.

import { get } from "../api.js";
import { empty, fill, h, s } from "../dom.js";
import * as f from "../format.js";
import { every } from "../poll.js";

const KEEP = 100;
const SHOWN_IN_CHART = 60;

function stepsCell(steps) {
  if (!steps?.length) return h("span", { class: "muted" }, "—");
  return h("ul", { class: "steps" }, steps.map((st) =>
    h("li", null, h("strong", null, st.step), `: ${st.strategy}`,
      st.compiled === true ? ", compiled" : st.compiled === false ? ", interpreted" : "",
      st.local_strategy ? ` (local: ${st.local_strategy})` : "",
      st.transactions !== undefined && st.transactions !== null ? `, ${f.num(st.transactions)} txns` : "",
      st.why ? h("span", { class: "muted" }, ` — ${st.why}`) : null,
      figuresOf(st.figures))));
}

function figureText(v) {
  if (typeof v === "number") return f.num(v, 3);
  if (v && typeof v === "object") return Object.entries(v).map(([k, x]) => `${k} ${f.num(x, 3)}`).join(", ");
  return String(v);
}

/** The figures the engine's decision recorded (statistics; timings in ms), folded away. */
function figuresOf(figures) {
  const entries = Object.entries(figures ?? {});
  if (!entries.length) return null;
  return h("details", null, h("summary", null, `${entries.length} figures`),
    h("dl", { class: "facts" }, entries.map(([k, v]) => [h("dt", null, k), h("dd", null, figureText(v))])));
}

function targetsCell(b) {
  const names = Object.keys(b.targets ?? {});
  if (!names.length) return h("span", { class: "muted" }, "—");
  return h("ul", { class: "took" }, names.map((name) => {
    const at = b.targets[name];
    if (at === null || at === undefined) return h("li", null, `${name}: not yet`);
    const after = b.committed_at ? `+${f.seconds(at - b.committed_at)}` : f.clock(at);
    return h("li", { title: f.clock(at) }, `${name} ${after}`);
  }));
}

/** Lanes over time: each batch from arrival to commit, and a tick when each target took it. */
function timeline(entries, targets) {
  const shown = entries.filter((b) => b.arrived_at && b.committed_at).slice(-SHOWN_IN_CHART);
  if (!shown.length) return null;
  const lanes = ["staging", ...targets];
  const start = Math.min(...shown.map((b) => b.arrived_at));
  const times = shown.flatMap((b) => [b.committed_at, ...Object.values(b.targets ?? {}).filter(Boolean)]);
  const span = Math.max(0.001, Math.max(...times) - start);
  const W = 1000, LEFT = 70, LANE = 22, top = 6;
  const x = (t) => LEFT + ((W - LEFT - 10) * (t - start)) / span;
  const height = top + lanes.length * LANE + 22;
  const parts = lanes.map((lane, i) => s("text", { x: LEFT - 6, y: top + i * LANE + 15, "text-anchor": "end" }, lane));
  for (const b of shown) {
    parts.push(s("rect", { class: "span", x: x(b.arrived_at), y: top + 4, width: Math.max(1.5, x(b.committed_at) - x(b.arrived_at)), height: LANE - 8 },
      s("title", null, `batch ${b.batch_id}: arrived ${f.clock(b.arrived_at)}, committed ${f.clock(b.committed_at)}`)));
    targets.forEach((name, i) => {
      const at = b.targets?.[name];
      if (at) parts.push(s("rect", { class: "took", x: x(at) - 1, y: top + (i + 1) * LANE + 4, width: 2.5, height: LANE - 8 },
        s("title", null, `batch ${b.batch_id} in ${name} at ${f.clock(at)}`)));
    });
  }
  parts.push(s("text", { x: LEFT, y: height - 6 }, f.clock(start)));
  parts.push(s("text", { x: W - 10, y: height - 6, "text-anchor": "end" }, `+${f.seconds(span)}`));
  const label = `Timeline of batches ${shown[0].batch_id} to ${shown.at(-1).batch_id}: arrival to commit, then when each warehouse took it`;
  return s("svg", { class: "chart", viewBox: `0 0 ${W} ${height}`, role: "img", "aria-label": label }, s("title", null, label), parts);
}

export function mount(root) {
  const problem = h("p", { class: "error", role: "alert" });
  const chart = h("div");
  const list = h("div");
  fill(root,
    h("h1", null, "Batches"),
    h("p", { class: "lead" }, `The last ${KEEP} batches this service committed, newest first; refreshed every second.`),
    problem,
    h("section", { class: "card" }, h("h2", null, "Timeline"), chart),
    h("section", { class: "card" }, h("h2", null, "Batches"), list));

  const entries = new Map();

  function since() {
    const ids = [...entries.keys()].sort((a, b) => a - b);
    const pending = ids.find((id) => Object.values(entries.get(id).targets ?? {}).some((t) => t === null));
    return pending !== undefined ? pending - 1 : ids.at(-1) ?? 0;
  }

  const COLUMNS = [{ label: "Batch", num: true }, { label: "Events", num: true },
    { label: "Txns ok / aborted", num: true }, { label: "Dead letters", num: true },
    { label: "Engine", num: true }, { label: "Commit", num: true }, { label: "Freshness", num: true },
    { label: "Committed at" }, { label: "Taken by (after commit)" }, { label: "Steps: strategy and why" }];
  const tbody = h("tbody");
  const grid = h("div", { class: "scroll" }, h("table", null, h("caption", null, "Batches, newest first"),
    h("thead", null, h("tr", null, COLUMNS.map((c) => h("th", { scope: "col", class: c.num && "num" }, c.label)))), tbody));
  const nothing = empty("No batch committed since this service started: push events (see the Overview) and they appear here within a second.");
  const rows = new Map();  // batch id -> {sig, tr}: a row is rebuilt only when its batch changed

  function row(b) {
    const cells = [f.num(b.batch_id), h("span", { title: f.records(b.records) }, f.events(b.events)),
      `${f.num(b.committed_txns)} / ${f.num(b.aborted_txns)}`, f.num(b.dead_letters),
      f.ms(b.executed_ms), f.ms(b.commit_ms), f.seconds(b.freshness_s), f.clock(b.committed_at),
      targetsCell(b), stepsCell(b.steps)];
    return h("tr", { "data-batch": b.batch_id }, cells.map((c, j) => h("td", { class: COLUMNS[j].num && "num" }, c)));
  }

  /** Update the table in place (an open figures list, or the focus, stays where it is). */
  function render() {
    const ordered = [...entries.values()].sort((a, b) => a.batch_id - b.batch_id);
    const targets = [...new Set(ordered.flatMap((b) => Object.keys(b.targets ?? {})))].sort();
    fill(chart, timeline(ordered, targets) ?? h("p", { class: "muted" }, "No batch timings yet."));
    if (!ordered.length) {
      fill(list, nothing);
      return;
    }
    if (list.firstChild !== grid) fill(list, grid);
    for (const [id, kept] of rows) {
      if (!entries.has(id)) {
        kept.tr.remove();
        rows.delete(id);
      }
    }
    let newer = null;  // the row above the one being placed (rows run newest first)
    for (const b of ordered.slice().reverse()) {
      const sig = JSON.stringify(b);
      const kept = rows.get(b.batch_id);
      if (kept && kept.sig === sig) {
        newer = kept.tr;
        continue;
      }
      const tr = row(b);
      if (kept) kept.tr.replaceWith(tr);
      else if (newer) newer.after(tr);
      else tbody.prepend(tr);
      rows.set(b.batch_id, { sig, tr });
      newer = tr;
    }
  }

  const poller = every(1000, async () => {
    try {
      for (const b of await get("/console/batches", { after: since(), limit: 1000 })) entries.set(b.batch_id, b);
      const ids = [...entries.keys()].sort((a, b) => a - b);
      for (const id of ids.slice(0, Math.max(0, ids.length - KEEP))) entries.delete(id);
      render();
      problem.textContent = "";
    } catch (err) {
      if (err.status !== 401) problem.textContent = `Could not read the batches: ${err.message}`;
    }
  });
  return { stop: () => poller.stop() };
}
