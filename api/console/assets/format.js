// Numbers as people read them, each with its unit. A missing number is an em dash.

const DASH = "—";
const missing = (v) => v === null || v === undefined || Number.isNaN(v);

/** 12,345.6 (at most `digits` decimals). */
export function num(v, digits = 0) {
  if (missing(v)) return DASH;
  return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits });
}

function counted(v, one, many, digits = 0) {
  if (missing(v)) return DASH;
  return `${num(v, digits)} ${Number(v) === 1 ? one : many}`;
}

export const events = (v) => counted(v, "event", "events");
export const rows = (v) => counted(v, "row", "rows");
export const batches = (v) => counted(v, "batch", "batches");
export const records = (v) => counted(v, "record", "records");
export const rate = (v) => (missing(v) ? DASH : `${num(v, v < 100 ? 1 : 0)} events/s`);
export const rowRate = (v) => (missing(v) ? DASH : `${num(v, v < 100 ? 1 : 0)} rows/s`);
export const batch = (v) => (missing(v) ? DASH : `batch ${num(v)}`);
export const megabytes = (v) => (missing(v) ? DASH : `${num(v, 1)} MB`);

/** Milliseconds: 0.42 ms, 12.3 ms, 1,234 ms. */
export function ms(v) {
  if (missing(v)) return DASH;
  return `${num(v, v < 10 ? 2 : v < 100 ? 1 : 0)} ms`;
}

/** Seconds: 0.048 s, 1.25 s, 312 s. */
export function seconds(v) {
  if (missing(v)) return DASH;
  return `${num(v, v < 1 ? 3 : v < 100 ? 2 : 0)} s`;
}

/** A wall-clock time (epoch seconds or ISO text) as local HH:MM:SS.mmm. */
export function clock(v) {
  if (missing(v)) return DASH;
  const date = typeof v === "string" ? new Date(v) : new Date(v * 1000);
  if (Number.isNaN(date.getTime())) return String(v);
  const hms = date.toLocaleTimeString("en-GB", { hour12: false });
  return `${hms}.${String(date.getMilliseconds()).padStart(3, "0")}`;
}

/** Epoch seconds of an ISO text (null stays null). */
export function epoch(iso) {
  if (missing(iso)) return null;
  const t = new Date(iso).getTime();
  return Number.isNaN(t) ? null : t / 1000;
}

/** A percentage of a fraction: 0.25 -> 25 %. */
export const percent = (v) => (missing(v) ? DASH : `${num(v * 100, 1)} %`);

/** yes / no / — */
export const yesNo = (v) => (missing(v) ? DASH : v ? "yes" : "no");
