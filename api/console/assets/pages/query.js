// Query: one SELECT (SQL or structured) over staged and migrated rows, the plan and target
// chosen, the answer with its watermark, freshness and plan decision, paged at that watermark
// (POST /query, then GET /query/{answer_id}).

import { get, post } from "../api.js";
import { empty, facts, field, fill, h, table } from "../dom.js";
import * as f from "../format.js";
import { conditionRow, structuredQuery } from "./structured.js";

function select(id, options, value) {
  return h("select", { id }, options.map(([v, label]) => h("option", { value: v, selected: v === value }, label)));
}

function cell(v) {
  if (v === null || v === undefined) return h("span", { class: "muted" }, "null");
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

function summary(a) {
  const fresh = a.freshness ?? {};
  const decision = a.decision
    ? `${a.decision.rule}: ${f.percent(a.decision.staged_fraction)} of the rows staged; estimates ${Object.entries(a.decision.estimates)
        .map(([k, v]) => `${k} ${v === null ? "unknown" : f.seconds(v)}`).join(", ")}`
    : "—";
  return facts([
    ["Plan", `${a.plan} (asked: ${a.requested_plan})`],
    ["Plan decision", decision],
    ["Target", a.target ?? "none"],
    ["Watermark", h("span", null, field("answer-watermark", a.watermark, f.batch(a.watermark)),
      ` (warehouse through ${f.batch(a.warehouse_watermark)}, staged through ${f.batch(a.staged_watermark)})`)],
    ["Streams", Object.keys(a.streams).length
      ? Object.entries(a.streams).map(([s, b], i) => [i ? ", " : "", `${s} through `, field(`answer-stream-${s}`, b, f.batch(b))])
      : "—"],
    ["Freshness", fresh.committed_at
      ? `watermark committed at ${f.clock(fresh.committed_at)}, ${f.ms(fresh.committed_age_ms)} before the answer`
      : "—"],
    ["Newest event", fresh.newest_event_time ? `${f.clock(fresh.newest_event_time)}, ${f.ms(fresh.newest_event_age_ms)} old` : null],
    ["Rows", f.rows(a.total_rows)],
    ["Tables read", `${f.num(a.staged_rows)} staged changes above the warehouse, ${f.rows(a.warehouse_rows)} in the warehouse`],
    ["Time", `${f.seconds(a.seconds)}${Object.keys(a.timings).length ? ` (${Object.entries(a.timings).map(([k, v]) => `${k} ${f.num(v, 1)}`).join(", ")})` : ""}`],
  ]);
}

export function mount(root, params) {
  let tables = [];
  let answer = null;
  let alive = true;
  const mode = { value: "sql" };
  const sql = h("textarea", { id: "q-sql", rows: 5, spellcheck: "false" });
  sql.value = params.table ? `SELECT * FROM ${params.table} LIMIT 100` : params.sql ?? "";
  const tableSel = h("select", { id: "q-table" });
  const columns = h("input", { id: "q-columns", type: "text", placeholder: "all" });
  const conditions = h("div");
  const orderBy = h("input", { id: "q-order", type: "text" });
  const desc = h("input", { id: "q-desc", type: "checkbox" });
  const limit = h("input", { id: "q-limit", type: "number", min: 0 });
  const plan = select("q-plan", [["auto", "auto: the service chooses"], ["island", "island: staging ∪ warehouse here"], ["migrate", "migrate: push, then ask the warehouse"]], "auto");
  const target = select("q-target", [["", "any warehouse"], ["postgres", "postgres"], ["duckdb", "duckdb"]], "");
  const dialect = select("q-dialect", [["duckdb", "DuckDB"], ["postgres", "PostgreSQL"]], "duckdb");
  const staged = h("input", { id: "q-staged", type: "checkbox", checked: true });
  const pageSize = h("input", { id: "q-page-size", type: "number", min: 1, max: 100000, value: 100 });
  const problem = h("p", { class: "error", role: "alert" });
  const result = h("section", { class: "card", hidden: true, "aria-live": "polite" });
  const run = h("button", { type: "submit" }, "Run query");
  const sqlBox = h("div", { class: "field" }, h("label", { for: "q-sql" }, "SQL: one SELECT over the logical tables"), sql);
  const structuredBox = h("div", { hidden: true },
    h("div", { class: "row" },
      h("div", { class: "field" }, h("label", { for: "q-table" }, "Table"), tableSel),
      h("div", { class: "field" }, h("label", { for: "q-columns" }, "Columns (comma-separated)"), columns),
      h("div", { class: "field" }, h("label", { for: "q-order" }, "Order by column"), orderBy),
      h("div", { class: "field check" }, desc, h("label", { for: "q-desc" }, "descending")),
      h("div", { class: "field" }, h("label", { for: "q-limit" }, "Limit (rows)"), limit)),
    h("h2", null, "Conditions (all must hold)"), conditions,
    h("button", { type: "button", class: "quiet", onclick: () => conditions.append(conditionRow(conditions.children.length)) }, "Add a condition"));
  const modes = [["sql", "SQL"], ["structured", "Structured"]].map(([v, label]) =>
    h("div", { class: "field check" },
      h("input", { type: "radio", name: "q-mode", id: `q-mode-${v}`, value: v, checked: v === "sql", onchange: () => setMode(v) }),
      h("label", { for: `q-mode-${v}` }, label)));
  const form = h("form", { class: "card", onsubmit: (e) => { e.preventDefault(); ask(); } },
    h("fieldset", null, h("legend", null, "Query as"), h("div", { class: "actions" }, modes)),
    sqlBox, structuredBox,
    h("fieldset", null, h("legend", null, "Plan and target"),
      h("div", { class: "row" },
        h("div", { class: "field" }, h("label", { for: "q-plan" }, "Plan"), plan),
        h("div", { class: "field" }, h("label", { for: "q-target" }, "Warehouse"), target),
        h("div", { class: "field" }, h("label", { for: "q-dialect" }, "SQL dialect"), dialect),
        h("div", { class: "field" }, h("label", { for: "q-page-size" }, "Rows per page"), pageSize),
        h("div", { class: "field check" }, staged, h("label", { for: "q-staged" }, "Include rows still staged")))),
    h("div", { class: "actions" }, run));
  fill(root,
    h("h1", null, "Query"),
    h("p", { class: "lead" }, "Fresh and historical rows in one answer, at one batch watermark."),
    form, problem, result);

  function setMode(value) {
    mode.value = value;
    sqlBox.hidden = value !== "sql";
    structuredBox.hidden = value !== "structured";
    if (value === "structured" && !conditions.children.length) conditions.append(conditionRow(0));
  }

  async function ask() {
    problem.textContent = "";
    const body = { plan: plan.value, include_staged: staged.checked, dialect: dialect.value, page_size: Number(pageSize.value) || 100 };
    if (target.value) body.target = target.value;
    try {
      if (mode.value === "sql") {
        if (!sql.value.trim()) {
          problem.textContent = "Write a SELECT first, e.g. SELECT * FROM <table> LIMIT 10 (the Tables page lists them).";
          return;
        }
        body.sql = sql.value;
      } else {
        body.structured = structuredQuery({ table: tableSel.value, columns: columns.value, orderBy: orderBy.value, desc: desc.checked, limit: limit.value, conditions });
      }
    } catch (err) {
      problem.textContent = err.message;
      return;
    }
    run.disabled = true;
    try {
      show(await post("/query", body));
    } catch (err) {
      if (err.status !== 401) problem.textContent = `${err.code}: ${err.message}`;
    } finally {
      run.disabled = false;
    }
  }

  async function page(offset) {
    try {
      show(await get(`/query/${encodeURIComponent(answer.answer_id)}`, { offset, limit: Number(pageSize.value) || 100 }));
    } catch (err) {
      if (err.status === 401) return;
      problem.textContent = err.code === "answer_not_found"
        ? "This answer has expired (answers are kept a few minutes): run the query again."
        : `${err.code}: ${err.message}`;
    }
  }

  function show(a) {
    if (!alive) return;
    answer = a;
    const first = a.rows.length ? a.offset + 1 : 0;
    const size = Number(pageSize.value) || 100;
    result.hidden = false;
    fill(result,
      h("h2", null, "Answer"),
      summary(a),
      h("h2", null, field("answer-rows", a.total_rows, `${f.rows(a.total_rows)}`), a.truncated ? " (truncated)" : ""),
      table(a.columns.map((c) => ({ label: `${c.name} (${c.type})`, num: /int|float|double|decimal|numeric/i.test(c.type) })),
        a.rows.map((r) => r.map(cell)),
        { caption: `Rows ${f.num(first)}–${f.num(a.offset + a.rows.length)} of ${f.num(a.total_rows)}`,
          empty: empty(`No rows at ${f.batch(a.watermark)}: push events, or check the table's name and conditions.`) }),
      h("div", { class: "actions" },
        a.offset > 0 ? h("button", { type: "button", class: "quiet", onclick: () => page(Math.max(0, a.offset - size)) }, "Previous page") : null,
        a.next_offset !== null ? h("button", { type: "button", class: "quiet", onclick: () => page(a.next_offset) }, "Next page") : null,
        h("span", { class: "muted" }, `Every page is read at ${f.batch(a.watermark)}; this answer is kept ${f.seconds(a.expires_in_s)} more.`)));
  }

  get("/tables").then((list) => {
    if (!alive) return;
    tables = list;
    fill(tableSel, tables.map((t) => h("option", { value: t.name, selected: t.name === params.table }, t.name)));
  }).catch(() => {});
  return { stop: () => { alive = false; } };
}
