// Building the page: elements from data, always as text (dead letters, query answers and table
// names are data a client sent: none of it may ever be parsed as markup).

const SVG_NS = "http://www.w3.org/2000/svg";

function apply(el, attrs) {
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "class") {
      el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    } else if (key === "value" && "value" in el) {
      el.value = value;
    } else if (key === "checked" || key === "selected") {
      el[key] = Boolean(value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** An HTML element: h("a", {href: "#/x", class: "c", onclick: fn}, "text", child, ...). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

/** An SVG element, the same way. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

/** Replace everything inside `el` with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/**
 * Like fill, for content redrawn on every poll: a scrolled table box keeps its scroll position,
 * and keeps the focus if it had it (keyboard users scroll wide tables on a narrow screen).
 */
export function refill(el, ...children) {
  const before = [...el.querySelectorAll(".scroll")];
  const state = before.map((box) => ({ left: box.scrollLeft, focused: box === document.activeElement }));
  fill(el, ...children);
  [...el.querySelectorAll(".scroll")].forEach((box, i) => {
    if (!state[i]) return;
    box.scrollLeft = state[i].left;
    if (state[i].focused) box.focus({ preventScroll: true });
  });
  return el;
}

/** A value with its raw number for tests and tools: <output data-field=.. data-value=..>. */
export function field(name, value, text) {
  return h("output", { "data-field": name, "data-value": value ?? "" }, text);
}

/**
 * A table: columns [{label, num?}], rows as arrays of cells (text or nodes), in a scroll box.
 * `caption` names it for screen readers; `empty` is shown in place of a table with no rows.
 */
export function table(columns, rows, { caption, empty, rowAttrs } = {}) {
  if (!rows.length && empty) return empty;
  const head = h("tr", null, columns.map((c) => h("th", { scope: "col", class: c.num && "num" }, c.label)));
  const body = rows.map((cells, i) =>
    h("tr", rowAttrs ? rowAttrs(i) : null,
      cells.map((cell, j) => h("td", { class: columns[j]?.num && "num" }, cell))),
  );
  return h("div", { class: "scroll" },
    h("table", null, caption && h("caption", null, caption), h("thead", null, head), h("tbody", null, body)));
}

/** A definition list of [term, value] pairs (null values are left out). */
export function facts(pairs) {
  return h("dl", { class: "facts" },
    pairs.filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => [h("dt", null, k), h("dd", null, v)]));
}

/** An empty state: what is missing and what to do next. */
export function empty(text, ...more) {
  return h("div", { class: "empty", "data-empty": "" }, h("p", null, text), ...more);
}

/** A stat card: label over a value. */
export function stat(label, value) {
  return h("div", { class: "stat" }, h("span", { class: "label" }, label), h("span", { class: "value" }, value));
}
