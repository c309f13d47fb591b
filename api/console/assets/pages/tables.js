// Tables: every logical table (state tables, histories, windows, sinks' outputs) with its
// schema, rows staged, changes pending migration, and per warehouse its watermark and rows.
// GET /tables counts rows in every warehouse, so it is read when asked, not polled.

import { get } from "../api.js";
import { empty, facts, fill, h, table } from "../dom.js";
import * as f from "../format.js";

function tableCard(t) {
  const targets = Object.entries(t.targets ?? {});
  return h("section", { class: "card", "data-table": t.name },
    h("h2", null, t.name, " ", h("span", { class: "muted" }, `(${t.kind})`)),
    facts([
      ["Rows staged", f.rows(t.staged_rows)],
      ["Changes pending migration", f.rows(t.pending_changes)],
      ["Row id", t.row_id?.length ? t.row_id.join(", ") : "—"],
    ]),
    h("div", { class: "actions" }, h("a", { href: `#/query?table=${encodeURIComponent(t.name)}` }, `Query ${t.name}`)),
    h("div", { class: "two" },
      table([{ label: "Column" }, { label: "Type" }], t.columns.map((c) => [c.name, c.type]), { caption: "Schema" }),
      table(
        [{ label: "Warehouse" }, { label: "Rows", num: true }, { label: "Watermark", num: true }, { label: "Merged through", num: true }, { label: "Note" }],
        targets.map(([name, w]) => [name, f.rows(w.rows), f.batch(w.watermark), f.batch(w.merged_through), w.error ?? ""]),
        { caption: "Rows per warehouse", empty: h("p", { class: "muted" }, "No warehouse targets.") })));
}

export function mount(root) {
  const problem = h("p", { class: "error", role: "alert" });
  const list = h("div", null, h("p", { class: "muted" }, "Loading…"));
  const refresh = h("button", { type: "button", onclick: () => load() }, "Refresh");
  const when = h("span", { class: "muted", role: "status" });
  let alive = true;
  fill(root,
    h("h1", null, "Tables"),
    h("p", { class: "lead" }, "Schema, rows staged and rows in each warehouse."),
    h("div", { class: "actions" }, refresh, when),
    problem, list);

  async function load() {
    refresh.disabled = true;
    try {
      const tables = await get("/tables");
      if (!alive) return;
      fill(list, tables.length
        ? tables.map(tableCard)
        : empty("This dataflow defines no tables: add flow.table(...) or a sink to it."));
      when.textContent = `Read at ${f.clock(Date.now() / 1000)}.`;
      problem.textContent = "";
    } catch (err) {
      if (err.status !== 401 && alive) problem.textContent = `Could not read the tables: ${err.message}`;
    } finally {
      refresh.disabled = false;
    }
  }

  load();
  return { stop: () => { alive = false; } };
}
