// Dead letters: filter by stream and reason, open one, fix its event as JSON and replay it
// (POST /deadletters/replay), then watch it until the batch that applied it marks it replayed.

import { get, post } from "../api.js";
import { empty, facts, field, fill, h, table } from "../dom.js";
import * as f from "../format.js";

const PAGE = 50;
const WATCH_MS = 1000;
const WATCH_FOR_MS = 120_000;

function stateOf(letter, sent) {
  if (letter.replayed_in !== null && letter.replayed_in !== undefined) return "replayed";
  return sent.has(letter.id) ? "sent" : "pending";
}

function stateText(letter, sent) {
  const state = stateOf(letter, sent);
  if (state === "replayed") return `replayed: committed in batch ${f.num(letter.replayed_in)}`;
  return state === "sent" ? "replay sent: waiting for the batch that applies it" : "pending";
}

function eventTime(ts) {
  return ts === null || ts === undefined ? null : `${new Date(ts / 1000).toISOString()} (${f.num(ts)} µs)`;
}

export function mount(root, params) {
  const filters = { stream: params.stream ?? "", reason: params.reason ?? "", pending: params.pending === "1" };
  const sent = new Set();
  const pages = [0];
  let letters = [];
  let nextAfter = null;
  let alive = true;
  let watch = null;

  const stream = h("input", { id: "dl-stream", type: "text", value: filters.stream, list: "dl-streams", autocomplete: "off" });
  const streams = h("datalist", { id: "dl-streams" });
  const reason = h("input", { id: "dl-reason", type: "text", value: filters.reason, autocomplete: "off" });
  const pending = h("input", { id: "dl-pending", type: "checkbox", checked: filters.pending });
  const problem = h("p", { class: "error", role: "alert" });
  const list = h("div");
  const pager = h("div", { class: "actions" });
  const detail = h("section", { class: "card", hidden: true, "aria-live": "polite" });
  const form = h("form", { class: "inline card", role: "search", onsubmit: (e) => { e.preventDefault(); apply(); } },
    h("div", { class: "field" }, h("label", { for: "dl-stream" }, "Stream"), stream, streams),
    h("div", { class: "field" }, h("label", { for: "dl-reason" }, "Reason contains"), reason),
    h("div", { class: "field check" }, pending, h("label", { for: "dl-pending" }, "Not replayed yet")),
    h("button", { type: "submit" }, "Filter"),
    h("button", { type: "button", class: "quiet", onclick: () => { stream.value = ""; reason.value = ""; pending.checked = false; apply(); } }, "Clear"));
  fill(root,
    h("h1", null, "Dead letters"),
    h("p", { class: "lead" }, "Records and events that did not parse or pass a check, with the reason; fix one and replay it."),
    form, problem, list, pager, detail);

  function apply() {
    filters.stream = stream.value.trim();
    filters.reason = reason.value.trim();
    filters.pending = pending.checked;
    pages.splice(0, pages.length, 0);
    load();
  }

  async function load() {
    try {
      const after = pages.at(-1);
      const answer = await get("/deadletters", {
        stream: filters.stream, reason: filters.reason, pending: filters.pending ? "true" : "",
        after_id: after || "", limit: PAGE,
      });
      if (!alive) return;
      // the reason filter is also applied here, for a service that does not take it yet
      const needle = filters.reason.toLowerCase();
      letters = answer.filter((d) => !needle || (d.reason ?? "").toLowerCase().includes(needle));
      nextAfter = answer.length === PAGE ? answer.at(-1).id : null;
      renderList();
      problem.textContent = "";
    } catch (err) {
      if (err.status !== 401 && alive) problem.textContent = `Could not read the dead letters: ${err.message}`;
    }
  }

  function renderList() {
    fill(streams, [...new Set(letters.map((d) => d.stream).filter(Boolean))].map((name) => h("option", { value: name })));
    const filtered = filters.stream || filters.reason || filters.pending;
    fill(list, table(
      [{ label: "Id", num: true }, { label: "Batch", num: true }, { label: "Stream" }, { label: "Step" },
        { label: "Reason" }, { label: "State" }, { label: "" }],
      letters.map((d) => [
        f.num(d.id), f.num(d.batch_id), d.stream ?? "—", d.step ?? "—", d.reason ?? "—",
        field(`letter-${d.id}-state`, stateOf(d, sent), stateText(d, sent)),
        h("button", { type: "button", class: "quiet", "aria-label": `Open dead letter ${d.id}`, onclick: () => open(d) }, "Open"),
      ]),
      {
        caption: "Dead letters, oldest first",
        rowAttrs: (i) => ({ "data-letter": letters[i].id }),
        empty: filtered
          ? empty("No dead letter matches these filters: clear them to see all.")
          : empty("No dead letters: every record so far parsed and passed its checks. A rejected record lands here with its reason."),
      }));
    fill(pager,
      pages.length > 1 ? h("button", { type: "button", class: "quiet", onclick: () => { pages.pop(); load(); } }, "Previous page") : null,
      nextAfter !== null ? h("button", { type: "button", class: "quiet", onclick: () => { pages.push(nextAfter); load(); } }, "Next page") : null);
  }

  function open(letter) {
    const isObject = letter.event !== null && typeof letter.event === "object";
    const editor = h("textarea", { id: "dl-event", rows: 10, spellcheck: "false" });
    editor.value = isObject ? JSON.stringify(letter.event, null, 2) : letter.payload ?? "";
    const state = h("p", null, "State: ", field("letter-state", stateOf(letter, sent), stateText(letter, sent)));
    const result = h("p", { role: "status" });
    const failure = h("p", { class: "error", role: "alert" });
    const done = stateOf(letter, sent) !== "pending";
    const replayFixed = h("button", { type: "button", disabled: done || !letter.stream, onclick: () => replay("fixed") }, "Replay the fixed event");
    const replayStored = h("button", { type: "button", class: "quiet", disabled: done || !isObject, onclick: () => replay("stored") }, "Replay as stored");

    async function replay(how) {
      failure.textContent = "";
      let body;
      if (how === "fixed") {
        let event;
        try {
          event = JSON.parse(editor.value);
        } catch (err) {
          failure.textContent = `Not JSON: ${err.message}`;
          return;
        }
        if (event === null || typeof event !== "object" || Array.isArray(event)) {
          failure.textContent = "The event must be a JSON object with the stream's columns.";
          return;
        }
        body = { entries: [{ id: letter.id, stream: letter.stream, event }] };
      } else {
        body = { ids: [letter.id] };
      }
      replayFixed.disabled = replayStored.disabled = true;
      try {
        const answer = await post("/deadletters/replay", body);
        if (answer.refused.length) {
          failure.textContent = `Refused: ${answer.refused.map((r) => r.reason).join("; ")}`;
          replayFixed.disabled = !letter.stream;
          replayStored.disabled = !isObject;
          return;
        }
        sent.add(letter.id);
        result.textContent = `Sent ${f.events(answer.sent)} through Kafka.`;
        update(letter);
        follow(letter);
      } catch (err) {
        if (err.status === 401) return;
        failure.textContent = `Replay failed: ${err.message}`;
        replayFixed.disabled = !letter.stream;
        replayStored.disabled = !isObject;
      }
    }

    function update(current) {
      fill(state, "State: ", field("letter-state", stateOf(current, sent), stateText(current, sent)));
      const i = letters.findIndex((d) => d.id === current.id);
      if (i >= 0) letters[i] = current;
      renderList();
    }

    function follow(current) {
      clearTimeout(watch);
      const until = Date.now() + WATCH_FOR_MS;
      const tick = async () => {
        if (!alive) return;
        try {
          const [fresh] = await get("/deadletters", { stream: current.stream, after_id: current.id - 1 || "", limit: 1 });
          if (fresh?.id === current.id && fresh.replayed_in !== null) {
            update(fresh);
            return;
          }
        } catch (err) {
          if (err.status === 401) return;
        }
        if (Date.now() < until) watch = setTimeout(tick, WATCH_MS);
        else result.textContent = "No batch has applied the replay yet: is ingest paused?";
      };
      watch = setTimeout(tick, WATCH_MS);
    }

    detail.hidden = false;
    fill(detail,
      h("h2", { tabindex: "-1" }, `Dead letter ${letter.id}`),
      facts([
        ["Stream", letter.stream ?? "—"], ["Step", letter.step ?? "—"], ["Batch", f.batch(letter.batch_id)],
        ["Kafka", letter.topic ? `${letter.topic} [${letter.partition}] @ ${f.num(letter.offset)}` : "—"],
        ["Source position", f.num(letter.pos)], ["Event time", eventTime(letter.ts) ?? "—"],
        ["Reason", letter.reason ?? "—"], ["Encoding", `${letter.encoding}, ${f.num(letter.payload_bytes)} bytes`],
      ]),
      state,
      h("label", { for: "dl-event" }, isObject ? "Event to replay (JSON object; edit to fix it)" : "Stored payload (not a JSON object: write the event as one to replay it)"),
      editor,
      h("div", { class: "actions" }, replayFixed, replayStored),
      failure, result);
    detail.querySelector("h2").focus();
    if (stateOf(letter, sent) === "sent") follow(letter);
  }

  load();
  return { stop: () => { alive = false; clearTimeout(watch); } };
}
