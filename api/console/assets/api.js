// The service's JSON API, as the page calls it: the bearer token from sessionStorage on every
// call, errors as ApiError with the service's stable code, and a 401 handed to the token gate.

const TOKEN_KEY = "streamdi.console.token";

export class ApiError extends Error {
  constructor(status, code, reason, detail) {
    super(reason);
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

let unauthorized = () => {};

/** Called with the refused token (or null) whenever the service answers 401. */
export function onUnauthorized(callback) {
  unauthorized = callback;
}

export const token = () => sessionStorage.getItem(TOKEN_KEY);
export const setToken = (value) => sessionStorage.setItem(TOKEN_KEY, value);
export const forgetToken = () => sessionStorage.removeItem(TOKEN_KEY);

/** `path` with the defined, non-empty `params` as its query string. */
export function withParams(path, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params ?? {})) {
    if (v !== undefined && v !== null && v !== "") query.set(k, String(v));
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

/**
 * One call: resolves to the parsed JSON answer, rejects with an ApiError (status 0 when the
 * service did not answer at all). A 401 also calls the onUnauthorized callback.
 */
export async function request(method, path, body) {
  const headers = { Accept: "application/json" };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, "unreachable", `the service did not answer (${error.message})`);
  }
  const data = await response.json().catch(() => null);
  if (response.ok) return data;
  const error = data?.error ?? {};
  if (response.status === 401) unauthorized(bearer);
  throw new ApiError(
    response.status,
    error.code ?? `http_${response.status}`,
    error.reason ?? (response.statusText || `HTTP ${response.status}`),
    error.detail,
  );
}

export const get = (path, params) => request("GET", withParams(path, params));
export const post = (path, body) => request("POST", path, body);
