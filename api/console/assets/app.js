// The console's entry point: hash routing (#/page?key=value), one module per page, the token
// gate. A page module exports mount(root, params) -> {stop()}; only one page is mounted.

import { forgetToken, get, onUnauthorized, setToken, token } from "./api.js";
import { h } from "./dom.js";
import { highlight, isLocked, lock, setReportLink, setTokenKept } from "./shell.js";

const PAGES = {
  overview: () => import("./pages/overview.js"),
  batches: () => import("./pages/batches.js"),
  dataflow: () => import("./pages/dataflow.js"),
  tables: () => import("./pages/tables.js"),
  deadletters: () => import("./pages/deadletters.js"),
  query: () => import("./pages/query.js"),
  migration: () => import("./pages/migration.js"),
  report: () => import("./pages/report.js"),
};

let current = null;
let generation = 0;

/** {name, params} of the location's hash; an unknown page is the overview. */
export function parseHash(hash = location.hash) {
  const [path, query = ""] = hash.replace(/^#\/?/, "").split("?");
  const name = path in PAGES ? path : "overview";
  return { name, params: Object.fromEntries(new URLSearchParams(query)) };
}

function stopPage() {
  generation++;
  current?.stop();
  current = null;
}

async function route({ focus = true } = {}) {
  if (isLocked()) return;
  stopPage();
  const mine = generation;
  const { name, params } = parseHash();
  highlight(name);
  setTokenKept(Boolean(token()));
  const main = document.getElementById("main");
  const root = h("div", { class: "page", "data-page": name });
  main.replaceChildren(root);
  const module = await PAGES[name]();
  if (mine !== generation || isLocked()) return;
  current = module.mount(root, params);
  const heading = root.querySelector("h1");
  if (focus && heading) {
    heading.setAttribute("tabindex", "-1");
    heading.focus();
  }
}

function unlockWith(value) {
  setToken(value);
  route();
  probeReport();
}

onUnauthorized((refused) => {
  stopPage();
  forgetToken();
  lock(
    refused
      ? "The service refused that token. Enter the API__TOKEN this service was started with."
      : "This service is protected by API__TOKEN: enter it to open the console.",
    unlockWith,
    { refused: Boolean(refused) },
  );
});

/**
 * Whether the service serves a run report: the overview's answer says so (its "report" key), and
 * the Overview page sets the link from it; any other first page asks the overview once.
 */
async function probeReport() {
  if (parseHash().name === "overview") return;
  try {
    setReportLink((await get("/console/overview")).report);
  } catch {
    // a 401 brings the token form (which probes again once a token is given); else no link
  }
}

document.getElementById("forget-token").addEventListener("click", () => {
  forgetToken();
  location.reload();
});
window.addEventListener("hashchange", () => route());
route({ focus: false });
probeReport();
