// For a service that does not answer the console's own routes yet (GET /console/overview and
// /console/batches answer 404 there): the same shapes, built from GET /status and the batch
// ledger (GET /batches). What those do not carry (freshness, per-step strategy, when each
// target took a batch) stays null, and the pages say so.

import { epoch } from "./format.js";

const WINDOW_S = 300;

/** An overview (the /console/overview shape) from a /status answer; `series` is the page's own
 * list of earlier points, extended here (one point per call). */
export function overviewFromStatus(status, series) {
  const at = Date.now() / 1000;
  series.push({
    t: at,
    events: null,
    batches: null,
    freshness_p50_s: null,
    freshness_p99_s: null,
    events_per_second: status.engine.events_per_second,
    staged_watermark: status.staging.watermark,
  });
  while (series.length && series[0].t < at - WINDOW_S) series.shift();
  const streams = {};
  for (const [name, s] of Object.entries(status.streams)) {
    streams[name] = { last_batch: s.last_batch, lag_records: s.lag_records, events: null };
  }
  const targets = {};
  for (const [name, t] of Object.entries(status.migration)) {
    targets[name] = { ...t, merged_through: null, readable: null, mode: null };
  }
  return {
    at,
    pipeline: status.pipeline,
    events_per_second: status.engine.events_per_second,
    events_total: null,
    staged_watermark: status.staging.watermark,
    released_through: status.staging.released_through,
    streams,
    targets,
    series,
    recent_batches: [],
    partial: true,
  };
}

/** Timeline entries (the /console/batches shape) from rows of the batch ledger. */
export function timelineFromLedger(rows) {
  return rows.map((b) => ({
    batch_id: b.batch_id,
    events: b.events,
    records: b.records,
    committed_txns: b.committed_txns,
    aborted_txns: b.aborted_txns,
    dead_letters: b.dead_letters,
    arrived_at: epoch(b.arrived_at),
    executed_ms: b.executed_ms,
    commit_ms: null,
    committed_at: epoch(b.committed_at),
    freshness_s: null,
    steps: [],
    targets: {},
  }));
}
