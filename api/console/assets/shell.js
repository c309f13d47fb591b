// The parts of the page around the current page: navigation, the token gate, the run report's
// link. The gate hides every page (and so every figure and button) until a token is given.

const $ = (id) => document.getElementById(id);

let locked = false;

export const isLocked = () => locked;

/** Mark `name`'s link as the current page. */
export function highlight(name) {
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.page === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

/** Show the run report's link or not (anything but a boolean leaves it as it is). */
export function setReportLink(available) {
  if (available === true || available === false) $("nav-report").hidden = !available;
}

/** Show or hide "Forget token" (only useful when a token is kept). */
export function setTokenKept(kept) {
  $("forget-token").hidden = !kept;
}

/**
 * Lock the console: empty the page, hide the navigation, show the token form with `message`
 * (as an error when a token was `refused`).
 * `onToken(value)` is called when a token is submitted (the gate is then unlocked).
 */
export function lock(message, onToken, { refused = false } = {}) {
  locked = true;
  $("main").replaceChildren();
  document.querySelector("header nav").hidden = true;
  setTokenKept(false);
  const gate = $("gate");
  const form = $("gate-form");
  const input = $("gate-token");
  $("gate-message").textContent = message;
  $("gate-message").className = refused ? "error" : "muted";
  gate.hidden = false;
  input.value = "";
  input.focus();
  form.onsubmit = (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    locked = false;
    gate.hidden = true;
    document.querySelector("header nav").hidden = false;
    onToken(value);
  };
}
