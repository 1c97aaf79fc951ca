// What every page of the console shares: building DOM, calling the gateway's APIs with the session
// (anything but a read carries X-CSRF-Token), formatting, and the page lifecycle (timers and charts
// a page started end when another page is shown).

export const main = document.getElementById("main");
let csrf = "";
let leaving = [];
// bumped by leave(): a fetch answered after its page was left settles never, so the view that awaits
// it goes no further (it would draw over the page the user went to)
let navigation = 0;
const ABANDONED = () => new Promise(() => {});
let unauthorized = () => {};

export function setSession(token) { csrf = token; }
export function hasSession() { return csrf !== ""; }
export function onUnauthorized(fn) { unauthorized = fn; }

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
}

export async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  if (options.method && options.method !== "GET") headers["x-csrf-token"] = csrf;
  if (options.json !== undefined) {
    headers["content-type"] = "application/json";
    options = { ...options, body: JSON.stringify(options.json) };
  }
  const started = navigation;
  const r = await fetch(path, { ...options, headers, credentials: "same-origin" });
  return started === navigation ? r : ABANDONED();
}

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// the answer's JSON, or an ApiError with the contract's message; a 401 ends the session in the page
export async function getJson(path, options = {}) {
  const r = await api(path, options);
  const started = navigation;
  const body = await r.json().catch(() => null);
  if (started !== navigation) return ABANDONED();
  if (r.ok) return body;
  if (r.status === 401 && !options.headers?.authorization) unauthorized();
  throw new ApiError(r.status, body?.error?.message || `${r.status} ${r.statusText}`);
}

// the page lifecycle: a page registers what must stop when another page is built (leave)
export function onLeave(fn) { leaving.push(fn); }
export function every(fn, ms) {
  const id = setInterval(fn, ms);
  onLeave(() => clearInterval(id));
}

// what the page shown so far started ends: called before the next page is built
export function leave() {
  navigation++;
  for (const fn of leaving) fn();
  leaving = [];
}

export function show(...nodes) {
  // a page passes null for a part it has not (no "empty" note, no pager): replaceChildren would write "null"
  main.replaceChildren(...nodes.filter((n) => n != null));
  const heading = main.querySelector("h2");
  if (heading) {
    heading.tabIndex = -1;  // the page's heading takes the focus a followed link had: the next Tab is in the page
    heading.focus({ preventScroll: true });
  }
}

export function errorText(err) { return err instanceof ApiError ? err.message : String(err); }
export function errorBox(err) { return el("p", { class: "error", role: "alert", text: errorText(err) }); }

export const fmt = {
  ms: (v) => (v == null ? "" : `${Math.round(v)} ms`),
  cost: (v) => (v ? `$${v < 0.01 ? v.toFixed(6) : v.toFixed(4)}` : "$0"),
  usd: (v) => (v == null ? "unlimited" : `$${Number(v).toFixed(2)}`),
  int: (v) => (v == null ? "" : Math.round(v).toLocaleString("en-US")),
  pct: (v) => (v == null ? "" : `${(v * 100).toFixed(1)}%`),
  time: (t) => new Date(t * 1000).toLocaleTimeString(),
  when: (t) => (t ? new Date(t * 1000).toLocaleString() : ""),
  // a running generation's tokens are counted as they come (~4 characters a token until the
  // provider reports its usage): "~" says so
  tokens: (g) => (g.usage.total_tokens ? `${g.status === "in_progress" && g.usage_estimated ? "~" : ""}${g.usage.total_tokens}` : ""),
};

export function table(id, heads, rows) {
  const head = el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", { scope: "col", text: h }))));
  // a phone's width holds a few columns: the table scrolls sideways inside its box, the page does not
  return el("div", { class: "scroll", id: `${id}-box` }, el("table", { id }, head, el("tbody", { id: `${id}-rows` }, ...rows)));
}

export function cells(values) { return values.map((v) => (v instanceof Node ? el("td", {}, v) : el("td", { text: v == null ? "" : String(v) }))); }

// tiles of headline numbers: [label, value, name]
export function tiles(items) {
  return el("div", { class: "tiles" }, ...items.map(([label, value, name]) =>
    el("div", { class: "tile", "data-tile": name }, el("span", { class: "tile-label", text: label }), el("span", { class: "tile-value", text: value }))));
}

// the hash's path and its query: "#/logs?model=x" -> ["/logs", URLSearchParams]
export function here() {
  const [path, query] = (location.hash.slice(1) || "/overview").split("?");
  return [path, new URLSearchParams(query || "")];
}

export function go(path, params) {
  const query = params ? new URLSearchParams([...params].filter(([, v]) => v !== "" && v != null)).toString() : "";
  location.hash = query ? `${path}?${query}` : path;
}

// one key's name by its id, for records that name their key by id (the master key is no stored key)
const names = new Map();
export async function keyNames() {
  if (names.size === 0) {
    const list = await getJson("/api/v1/keys");
    for (const k of list.data) names.set(k.id, k.name);
  }
  return names;
}
export function forgetKeyNames() { names.clear(); }
export function keyLabel(id, known) {
  if (id === "master") return "the master key";
  return known.has(id) ? `${known.get(id)} (${id})` : id || "";
}
// a key as a chart's legend names it, where a full id per series would fill lines: its name, with
// the id's last characters only when another key has the same name; an unknown key by those alone
export function keyShort(id, known) {
  if (id === "master") return "master";
  const tail = `…${String(id || "").slice(-6)}`;
  if (!known.has(id)) return tail;
  const name = known.get(id);
  const twins = [...known.values()].filter((n) => n === name).length;
  return twins > 1 ? `${name} ${tail}` : name;
}
