// The structured query form's pieces: a condition row and the query object POST /query takes
// ({table, columns, where, order_by, limit}). Values typed as JSON (42, true, "text") keep their
// type; anything else is a string.

import { h } from "../dom.js";

const OPS = ["=", "!=", "<", "<=", ">", ">=", "in", "like", "is_null", "not_null"];

/** One condition row: column, operator, value, and a button that removes it. */
export function conditionRow(i) {
  const id = `q-cond-${i}-${Math.random().toString(36).slice(2, 7)}`;
  const row = h("div", { class: "row condition" },
    h("div", { class: "field" }, h("label", { for: `${id}-col` }, "Column"), h("input", { id: `${id}-col`, type: "text", "data-part": "column" })),
    h("div", { class: "field" }, h("label", { for: `${id}-op` }, "Operator"),
      h("select", { id: `${id}-op`, "data-part": "op" }, OPS.map((op) => h("option", { value: op }, op)))),
    h("div", { class: "field" }, h("label", { for: `${id}-val` }, "Value (a list for in: 1, 2, 3)"), h("input", { id: `${id}-val`, type: "text", "data-part": "value" })),
    h("button", { type: "button", class: "quiet", onclick: () => row.remove() }, "Remove"));
  return row;
}

/** A typed value: JSON when it parses (numbers, true, null, "quoted"), else the text itself. */
export function typed(text) {
  const t = text.trim();
  try {
    return JSON.parse(t);
  } catch {
    return t;
  }
}

/** The structured query of the form's fields; throws an Error naming what is missing. */
export function structuredQuery({ table, columns, orderBy, desc, limit, conditions }) {
  if (!table) throw new Error("Choose a table (the Tables page lists them).");
  const query = { table };
  const cols = columns.split(",").map((c) => c.trim()).filter(Boolean);
  if (cols.length) query.columns = cols;
  query.where = [];
  for (const row of conditions.querySelectorAll(".condition")) {
    const column = row.querySelector('[data-part="column"]').value.trim();
    const op = row.querySelector('[data-part="op"]').value;
    const raw = row.querySelector('[data-part="value"]').value;
    if (!column) continue;
    const condition = { column, op };
    if (op === "in") condition.value = raw.split(",").map(typed);
    else if (op !== "is_null" && op !== "not_null") condition.value = typed(raw);
    query.where.push(condition);
  }
  if (orderBy.trim()) query.order_by = [{ column: orderBy.trim(), descending: desc }];
  if (limit !== "") query.limit = Number(limit);
  return query;
}
