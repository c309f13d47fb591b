// Run report: what `streamdi tpcdi run --serve` measured (GET /console/report): the phases,
// their freshness, the audit's checks and TPC_DI_RPS. A service that serves no run says so.

import { ApiError, get } from "../api.js";
import { empty, facts, field, fill, h, table } from "../dom.js";
import * as f from "../format.js";

function render(r) {
  const audit = r.audit;
  const checks = audit?.checks ?? [];
  const failed = checks.filter((c) => !c.ok);
  return [
    h("div", { class: "grid" },
      h("div", { class: "stat" }, h("span", { class: "label" }, "TPC_DI_RPS"), h("span", { class: "value" }, field("tpc-di-rps", r.tpc_di_rps, f.num(r.tpc_di_rps)))),
      h("div", { class: "stat" }, h("span", { class: "label" }, "Scale factor"), h("span", { class: "value" }, r.sf === null || r.sf === undefined ? "—" : `SF ${f.num(r.sf, 2)}`)),
      h("div", { class: "stat" }, h("span", { class: "label" }, "Audit"), h("span", { class: ["value", audit && (audit.fail ? "bad" : "good")] }, audit ? `${f.num(audit.ok)} OK, ${f.num(audit.fail)} failed` : "not run")),
      h("div", { class: "stat" }, h("span", { class: "label" }, "Peak memory"), h("span", { class: "value" }, f.megabytes(r.peak_mem_mb)))),
    h("section", { class: "card" }, h("h2", null, "Phases"),
      table([{ label: "Phase" }, { label: "Wall time", num: true }, { label: "Rows", num: true }, { label: "Throughput", num: true }, { label: "Freshness", num: true }],
        Object.entries(r.phases ?? {}).map(([name, p]) => [name, f.seconds(p.seconds), f.rows(p.rows), f.rowRate(p.rows_per_second), f.seconds(p.freshness_s)]))),
    r.metric ? h("section", { class: "card" }, h("h2", null, "Metric (clauses 7.5, 7.6)"),
      facts(Object.entries(r.metric).map(([k, v]) => [k.toUpperCase(), typeof v === "number" ? f.num(v, 2) : String(v)]))) : null,
    h("section", { class: "card" }, h("h2", null, `Audit checks${audit ? ` (${f.seconds(audit.seconds)})` : ""}`),
      table([{ label: "Check" }, { label: "Clause" }, { label: "Result" }, { label: "Detail" }, { label: "Time", num: true }],
        [...failed, ...checks.filter((c) => c.ok)].map((c) => [c.name, c.clause ?? "—", h("span", { class: c.ok ? "good" : "bad" }, c.ok ? "OK" : "FAIL"), c.detail ?? "", f.seconds(c.seconds)]),
        { empty: empty("The audit did not run.") })),
    h("p", { class: "muted" }, `Target ${r.target ?? "—"}.`),
  ];
}

export function mount(root) {
  const body = h("div", null, h("p", { class: "muted" }, "Loading…"));
  fill(root, h("h1", null, "Run report"), h("p", { class: "lead" }, "The TPC-DI run this service hosts."), body);
  let alive = true;
  get("/console/report").then((r) => alive && fill(body, render(r))).catch((err) => {
    if (!alive || err.status === 401) return;
    fill(body, err instanceof ApiError && err.status === 404
      ? empty("This service hosts no TPC-DI run. `streamdi tpcdi run --serve` shows its report here.")
      : h("p", { class: "error", role: "alert" }, `Could not read the report: ${err.message}`));
  });
  return { stop: () => { alive = false; } };
}
