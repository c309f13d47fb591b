// Dataflow: sources -> steps -> tables and sinks as a layered graph, per step its counts since
// the service started and whether its last batch ran compiled. Refreshed every 5 s.

import { get } from "../api.js";
import { empty, field, fill, h, refill, table } from "../dom.js";
import * as f from "../format.js";
import { graphSvg } from "../graph.js";
import { every } from "../poll.js";

/** How a step runs: compiled or interpreted (a transactional step's last batch), stateless. */
function runsText(n) {
  if (n.compiled === true) return "compiled";
  if (n.compiled === false) return "interpreted";
  if (!n.batches && !n.events) return "not run yet";
  return n.step_kind === "transact" ? "—" : "stateless";
}

/** The text lines of a node in the graph (its name first). */
export function nodeLines(n) {
  switch (n.kind) {
    case "source":
      return [n.name, `source · ${f.num(Object.keys(n.columns ?? {}).length)} columns`];
    case "step":
      return [n.name, `${n.step_kind ?? "step"} · ${runsText(n)}`,
        `${f.events(n.events)} · ${f.rows(n.rows_out)} out`,
        `${f.num(n.committed_txns)} committed · ${f.num(n.aborted_txns)} aborted`,
        `${f.num(n.dead_letters)} dead letters`];
    case "sink":
      return [n.name, `sink · ${f.rows(n.staged_rows)} staged`, `${f.rows(n.rows)} since start`];
    default:
      return [n.name, `${n.table_kind ?? n.kind} · ${f.rows(n.staged_rows)} staged`];
  }
}

export function mount(root) {
  const problem = h("p", { class: "error", role: "alert" });
  const graph = h("div", { class: "graph-box" });
  const steps = h("div");
  const other = h("div");
  const title = h("span");
  const details = h("div", null,
    h("section", { class: "card" }, h("h2", null, "Steps"), steps),
    h("section", { class: "card" }, h("h2", null, "Sources, tables and sinks"), other));
  fill(root,
    h("h1", null, "Dataflow ", title),
    h("p", { class: "lead" }, "Sources, steps, tables and sinks; counts since this service started, refreshed every 5 s."),
    problem,
    h("section", { class: "card" }, h("h2", null, "Graph"), graph),
    details);

  function render(d) {
    fill(title, h("span", { class: "muted" }, d.name));
    const label = `Dataflow ${d.name}: ${d.nodes.length} nodes, ${d.edges.length} edges`;
    refill(graph, d.nodes.length ? graphSvg({ nodes: d.nodes, edges: d.edges, lines: nodeLines, label }) : empty("This dataflow has no steps."));
    refill(steps, table(
      [{ label: "Step" }, { label: "Kind" }, { label: "Runs" }, { label: "Batches", num: true },
        { label: "Events in", num: true }, { label: "Rows out", num: true }, { label: "Committed txns", num: true },
        { label: "Aborted txns", num: true }, { label: "Dead letters", num: true }, { label: "Last strategy" }],
      d.nodes.filter((n) => n.kind === "step").map((n) => [
        n.name, n.step_kind ?? "—", field(`step-${n.name}-runs`, runsText(n), runsText(n)), f.batches(n.batches),
        field(`step-${n.name}-events`, n.events, f.events(n.events)), f.rows(n.rows_out),
        f.num(n.committed_txns), f.num(n.aborted_txns), f.num(n.dead_letters), n.last_strategy ?? "—"]),
      { empty: empty("No steps.") }));
    refill(other, table(
      [{ label: "Name" }, { label: "Kind" }, { label: "Columns or rows" }],
      d.nodes.filter((n) => n.kind !== "step").map((n) => [
        n.name, n.table_kind ?? n.kind,
        n.kind === "source"
          ? Object.entries(n.columns ?? {}).map(([c, t]) => `${c} ${t}`).join(", ")
          : `${f.rows(n.staged_rows)} staged${n.kind === "sink" ? `, ${f.rows(n.rows)} since start` : ""}`])));
  }

  // every 5 s: the row counts are a count per table and sink in staging (not free on large state)
  const poller = every(5000, async () => {
    try {
      render(await get("/console/dataflow"));
      problem.textContent = "";
    } catch (err) {
      if (err.status !== 401) problem.textContent = `Could not read the dataflow: ${err.message}`;
    }
  });
  return { stop: () => poller.stop() };
}
