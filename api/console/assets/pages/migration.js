// Migration: per warehouse target its lag behind staging, what it merged, whether queries read
// it, and buttons for a push or pull round now. GET /migration asks every warehouse, so it is
// polled every 2 s, not every second.

import { get, post } from "../api.js";
import { empty, facts, field, fill, h, refill, table } from "../dom.js";
import * as f from "../format.js";
import { every } from "../poll.js";

function targetRow(name, t) {
  const state = !t.reachable ? h("span", { class: "bad" }, `unreachable: ${t.error ?? ""}`)
    : t.bootstrap && t.bootstrap.state !== "caught_up" ? `bootstrap ${t.bootstrap.state} (${f.num(t.bootstrap.relations_copied)} of ${f.num(t.bootstrap.relations_total)} relations)`
      : t.busy ? "migrating" : "idle";
  return [name, t.mode ?? "—", f.batch(t.acknowledged),
    field(`pending-${name}`, t.pending_batches, f.batches(t.pending_batches)),
    f.batch(t.merged_through), f.clock(t.merged_at), f.rows(t.unmerged_rows), f.yesNo(t.readable), state];
}

function roundReport(r) {
  return h("div", null,
    h("p", null, `${r.via} round: staging at ${f.batch(r.staged_watermark)}, released through ${f.batch(r.released_through)}, ${f.seconds(r.seconds)}.`),
    table([{ label: "Warehouse" }, { label: "From", num: true }, { label: "To", num: true }, { label: "Batches", num: true },
      { label: "Rows", num: true }, { label: "Merged rows", num: true }, { label: "Error" }],
    Object.entries(r.targets).map(([name, t]) => [name, f.batch(t.from), f.batch(t.watermark), f.batches(t.batches), f.rows(t.rows), f.rows(t.merged_rows), t.error ?? ""])));
}

export function mount(root) {
  const problem = h("p", { class: "error", role: "alert" });
  const head = h("div");
  const targets = h("div");
  const outcome = h("div", { role: "status" });
  const buttons = [];
  const button = (via, label, only) => {
    const b = h("button", { type: "button", class: only ? "quiet" : null, onclick: () => round(via, only) }, label);
    buttons.push(b);
    return b;
  };
  const perTarget = h("div", { class: "actions" });
  fill(root,
    h("h1", null, "Migration"),
    h("p", { class: "lead" }, "Staged batches move into each warehouse exactly once; refreshed every 2 s."),
    problem, head,
    h("div", { class: "actions" }, button("push", "Push now"), button("pull", "Pull now")),
    perTarget,
    h("section", { class: "card" }, h("h2", null, "Warehouses"), targets),
    h("section", { class: "card" }, h("h2", null, "Last round"), outcome));
  fill(outcome, h("p", { class: "muted" }, "No round asked from this page yet. The service migrates on its own (MIGRATION__PUSH_MS, MIGRATION__PUSH_BATCHES)."));

  let names = "";
  function render(m) {
    fill(head, facts([["Dataflow", m.stream], ["Staged watermark", field("migration-staged", m.staged_watermark, f.batch(m.staged_watermark))], ["Released through", f.batch(m.released_through)]]));
    const entries = Object.entries(m.targets);
    refill(targets, table(
      [{ label: "Warehouse" }, { label: "Mode" }, { label: "Acknowledged", num: true }, { label: "Behind staging", num: true },
        { label: "Merged through", num: true }, { label: "Merged at" }, { label: "Rows to merge", num: true }, { label: "Queries read it" }, { label: "State" }],
      entries.map(([name, t]) => targetRow(name, t)),
      { empty: empty("No warehouse targets: set MIGRATION__TARGETS (postgres, duckdb) and restart the service.") }));
    const now = entries.map(([n]) => n).join(",");
    if (now !== names) {  // rebuilt only when the targets change, so focus stays on a button
      names = now;
      fill(perTarget, entries.flatMap(([name]) => [button("push", `Push to ${name}`, name), button("pull", `Pull into ${name}`, name)]));
    }
  }

  async function round(via, only) {
    for (const b of buttons) b.disabled = true;
    fill(outcome, h("p", { class: "muted" }, `${via} round running…`));
    try {
      const r = await post(`/migration/${via}`, only ? { targets: [only] } : {});
      fill(outcome, roundReport(r));
      await poller.now();
    } catch (err) {
      if (err.status !== 401) fill(outcome, h("p", { class: "error" }, `${via} failed: ${err.message}`));
    } finally {
      for (const b of buttons) b.disabled = false;
    }
  }

  const poller = every(2000, async () => {
    try {
      render(await get("/migration"));
      problem.textContent = "";
    } catch (err) {
      if (err.status !== 401) problem.textContent = `Could not read the migration status: ${err.message}`;
    }
  });
  return { stop: () => poller.stop() };
}
