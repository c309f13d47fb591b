// Overview: is data flowing, where is the lag, how fresh is it, has each warehouse caught up.
// One GET /console/overview a second (GET /status on a service without it); pause and resume.

import { get, post, token } from "../api.js";
import { barChart, lineChart, windowFor } from "../chart.js";
import { empty, field, fill, h, refill, stat, table } from "../dom.js";
import * as f from "../format.js";
import { every } from "../poll.js";
import { setReportLink } from "../shell.js";

const PERIOD_MS = 1000;

const EXAMPLE = { int64: 1, int32: 1, float64: 1.5, float32: 1.5, bool: true, string: "text" };

/** An example event for `columns` ({name: type}), or a placeholder when they are not known. */
export function exampleEvent(columns) {
  const names = Object.keys(columns ?? {});
  if (!names.length) return { column: "value" };
  return Object.fromEntries(names.map((n) => [n, EXAMPLE[columns[n]] ?? "value"]));
}

function pushHint(streams, sources) {
  const stream = streams[0] ?? "<stream>";
  const auth = token() ? ` \\\n  -H "Authorization: Bearer $API__TOKEN"` : "";
  const body = JSON.stringify({ events: [exampleEvent(sources?.[stream])] });
  return empty(
    "No events yet: push some over HTTP (JSON objects with the stream's columns), or feed a run's bound inputs with `streamdi collect`.",
    h("code", null,
      `curl -X POST ${location.origin}/streams/${stream}/events \\\n  -H 'Content-Type: application/json'${auth} \\\n  -d '${body}'`),
  );
}

/** The columns of each source, from the dataflow graph (null when the service has none). */
async function sourceColumns() {
  try {
    const graph = await get("/console/dataflow");
    return Object.fromEntries(graph.nodes.filter((n) => n.kind === "source").map((n) => [n.name, n.columns]));
  } catch {
    return null;
  }
}

function stateOf(pipeline) {
  if (pipeline.state === "running" && pipeline.paused) return "paused";
  return pipeline.state;
}

export function mount(root) {
  const v = {
    state: h("span"),
    rate: h("span"),
    total: h("span"),
    staged: h("span"),
    released: h("span"),
    clock: h("span"),
  };
  const problem = h("p", { class: "error", role: "alert" });
  const acted = h("span", { class: "muted", role: "status" });
  const pause = h("button", { type: "button", onclick: () => act("pause") }, "Pause ingest");
  const resume = h("button", { type: "button", onclick: () => act("resume") }, "Resume ingest");
  const hint = h("div");
  const freshness = h("div");
  const throughput = h("div");
  const watermarks = h("div");
  const streams = h("div");
  const recent = h("div");
  const error = h("p", { class: "error", role: "alert", hidden: true });
  fill(root,
    h("h1", null, "Overview"),
    h("p", { class: "lead" }, "Live, refreshed every second. Service clock: ", v.clock),
    problem,
    h("div", { class: "grid" },
      stat("Pipeline", v.state), stat("Throughput", v.rate), stat("Events since start", v.total),
      stat("Staged watermark", v.staged), stat("Released through", v.released)),
    h("div", { class: "actions" }, pause, resume, acted, error),
    hint,
    h("div", { class: "two" },
      h("section", { class: "card" }, h("h2", null, "Freshness, p50 and p99 per second"),
        h("div", { class: "legend" }, h("span", { class: "key-p50" }, "p50"), h("span", { class: "key-p99" }, "p99")),
        freshness),
      h("section", { class: "card" }, h("h2", null, "Events committed per second"), throughput)),
    h("section", { class: "card" }, h("h2", null, "Watermarks: staged, acknowledged and merged per warehouse"), watermarks),
    h("div", { class: "two" },
      h("section", { class: "card" }, h("h2", null, "Streams"), streams),
      h("section", { class: "card" }, h("h2", null, "Recent batches"), recent)));

  let sources;  // the sources' columns, asked once, and only for the empty state's example

  function render(o) {
    const state = stateOf(o.pipeline);
    fill(v.state, field("pipeline", state, state), o.pipeline.error ? h("span", { class: "muted" }, ` ${o.pipeline.error}`) : null);
    v.state.className = `state-${state}`;
    fill(v.rate, field("events-per-second", o.events_per_second, f.rate(o.events_per_second)));
    fill(v.total, field("events-total", o.events_total, f.events(o.events_total)));
    fill(v.staged, field("staged-watermark", o.staged_watermark, f.batch(o.staged_watermark)));
    fill(v.released, field("released-through", o.released_through, f.batch(o.released_through)));
    fill(v.clock, f.clock(o.at));
    pause.disabled = state !== "running";
    resume.disabled = !o.pipeline.paused;
    setReportLink(o.report);

    const names = Object.keys(o.streams);
    const idle = o.staged_watermark === 0 && !o.events_total;
    if (idle && sources === undefined) {
      sources = null;
      sourceColumns().then((found) => { sources = found; });
    }
    fill(hint, idle ? pushHint(names, sources) : null);
    const series = o.series ?? [];
    const span = windowFor(series, o.at, ["events", "batches"]);
    const fresh = series.filter((p) => p.freshness_p99_s !== null && p.freshness_p99_s !== undefined);
    const last = fresh.at(-1);
    fill(freshness, lineChart({
          points: series, now: o.at, window: span, unit: "s",
          lines: [{ key: "freshness_p50_s", className: "p50" }, { key: "freshness_p99_s", className: "p99" }],
          label: last ? `Freshness over the last ${span} s; latest p50 ${f.seconds(last.freshness_p50_s)}, p99 ${f.seconds(last.freshness_p99_s)}` : `Freshness over the last ${span} s: no batch committed`,
        }));
    if (!fresh.length) freshness.append(h("p", { class: "muted" }, "No batch committed lately."));
    fill(throughput, barChart({
      points: series, key: "events", now: o.at, window: span, unit: "ev/s",
      label: `Events committed per second over the last ${span} s; now ${f.rate(o.events_per_second)}`,
    }));
    refill(watermarks, table(
      [{ label: "Warehouse" }, { label: "Staged", num: true }, { label: "Acknowledged", num: true },
        { label: "Merged through", num: true }, { label: "Behind staged", num: true }, { label: "Lag", num: true },
        { label: "Mode" }, { label: "Readable" }],
      Object.entries(o.targets).map(([name, t]) => [
        name, f.batch(o.staged_watermark),
        field(`acknowledged-${name}`, t.acknowledged, f.batch(t.acknowledged)),
        field(`merged-${name}`, t.merged_through, f.batch(t.merged_through)),
        f.batches(t.lag_batches), f.seconds(t.lag_seconds), t.mode ?? "—",
        t.reachable === false ? h("span", { class: "bad" }, `unreachable: ${t.error ?? ""}`) : f.yesNo(t.readable),
      ]),
      { empty: empty("No warehouse targets: staged data stays in staging (set MIGRATION__TARGETS to migrate it).") }));
    refill(streams, table(
      [{ label: "Stream" }, { label: "Last batch", num: true }, { label: "Consumer lag", num: true }, { label: "Events", num: true }],
      names.map((name) => {
        const s = o.streams[name];
        return [name, field(`last-batch-${name}`, s.last_batch, f.batch(s.last_batch)), field(`lag-${name}`, s.lag_records, f.records(s.lag_records)), f.events(s.events)];
      }),
      { empty: empty("This dataflow reads no streams.") }));
    const batches = (o.recent_batches ?? []).slice(-5).reverse();
    refill(recent, batches.length
      ? table(
          [{ label: "Batch", num: true }, { label: "Events", num: true }, { label: "Engine", num: true }, { label: "Commit", num: true }, { label: "Freshness", num: true }],
          batches.map((b) => [f.num(b.batch_id), f.events(b.events), f.ms(b.executed_ms), f.ms(b.commit_ms), f.seconds(b.freshness_s)]))
      : null,
      h("p", null, h("a", { href: "#/batches" }, "The batch timeline")));
  }

  const poller = every(PERIOD_MS, async () => {
    try {
      render(await get("/console/overview"));
      problem.textContent = "";
    } catch (err) {
      if (err.status !== 401) problem.textContent = `Could not read the overview: ${err.message}`;
    }
  });

  async function act(what) {
    error.hidden = true;
    acted.textContent = what === "pause" ? "Pausing…" : "Resuming…";
    try {
      const status = await post(`/ingest/${what}`);
      acted.textContent = status.pipeline.paused ? "Ingest paused: events wait in Kafka." : "Ingest resumed.";
      await poller.now();
    } catch (err) {
      acted.textContent = "";
      if (err.status === 401) return;
      error.hidden = false;
      error.textContent = `${what} failed: ${err.message}`;
    }
  }

  return { stop: () => poller.stop() };
}
