// The live log (#/log: the newest 50 generations, every second) and the logs (#/logs: filtered by
// time, key, model, provider, status, session or generation id, paged by the API's keyset cursor).

import { cells, el, errorBox, every, fmt, getJson, go, keyLabel, keyNames, show, table } from "./lib.js";

function row(g, names) {
  const link = el("a", { href: `#/gen/${g.id}`, text: fmt.time(g.created_at) });
  // a refused request: its HTTP status and error code beside the status, the model as asked
  const refused = g.status === "rejected" && g.error ? ` ${g.error.status} ${g.error.code}` : "";
  const status = el("span", { class: `status status-${g.status}`, text: g.status + refused });
  const tds = [
    el("td", {}, link), el("td", { text: g.model || (g.error && g.error.model) || "" }), el("td", { "data-col": "provider", text: g.provider || "" }), el("td", {}, status),
    el("td", { text: g.attempts > 1 ? `yes (${g.attempts} tries)` : "" }), el("td", { class: "num", "data-col": "ttft", text: fmt.ms(g.ttft_ms) }),
    el("td", { class: "num", "data-col": "tokens", text: fmt.tokens(g) }), el("td", { text: g.usage_estimated ? "estimated" : "" }),
    el("td", { class: "num", text: fmt.cost(g.cost) }),
  ];
  if (names) tds.push(el("td", { "data-col": "key", text: keyLabel(g.key_id, names) }));
  return el("tr", { "data-id": g.id, "data-status": g.status }, ...tds);
}

const HEADS = ["time", "model", "provider", "status", "fallback", "TTFT", "tokens", "estimated", "cost"];

export async function logView() {
  const box = table("log", HEADS, []);
  show(el("h2", { text: "Live log" }), box);
  const body = box.querySelector("tbody");
  const refresh = async () => {
    const list = await getJson("/api/v1/generations?limit=50").catch(() => null);
    if (list) body.replaceChildren(...list.data.map((g) => row(g)));
  };
  await refresh();
  every(refresh, 1000);
}

const STATUSES = ["", "completed", "failed", "in_progress", "cancelled", "interrupted", "rejected"];
const FIELDS = ["since", "until", "key_id", "model", "provider", "status", "session", "id"];

function local(t) { return t ? new Date(t * 1000 - new Date().getTimezoneOffset() * 60000).toISOString().slice(0, 16) : ""; }

function filterForm(params, names) {
  const text = (name, label) => el("label", {}, label, el("input", { name, value: params.get(name) || "" }));
  const time = (name, label) => el("label", {}, label, el("input", { name, type: "datetime-local", value: local(Number(params.get(name)) || 0) }));
  const keys = el("select", { name: "key_id" }, el("option", { value: "", text: "any key" }),
    ...[...names].map(([id, name]) => el("option", { value: id, text: `${name} (${id})`, selected: params.get("key_id") === id })));
  const status = el("select", { name: "status" }, ...STATUSES.map((s) => el("option", { value: s, text: s || "any status", selected: (params.get("status") || "") === s })));
  const form = el("form", { id: "log-filter", class: "filters" }, time("since", "From"), time("until", "Until"), el("label", {}, "Key", keys),
    text("model", "Model"), text("provider", "Provider"), el("label", {}, "Status", status), text("session", "Agent session"), text("id", "Generation id"),
    el("button", { type: "submit", text: "Search" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const f of FIELDS) {
      const v = form.elements[f].value;
      if (!v) continue;
      next.set(f, f === "since" || f === "until" ? String(new Date(v).getTime() / 1000) : v);
    }
    go("/logs", next);
  });
  return form;
}

export async function logsView(params) {
  let names;
  try { names = await keyNames(); } catch (err) { return show(el("h2", { text: "Logs" }), errorBox(err)); }
  const query = new URLSearchParams({ limit: params.get("limit") || "50" });
  for (const f of [...FIELDS, "cursor"]) if (params.get(f)) query.set(f, params.get(f));
  let page;
  try { page = await getJson(`/api/v1/generations?${query}`); } catch (err) { return show(el("h2", { text: "Logs" }), filterForm(params, names), errorBox(err)); }
  const rows = page.data.map((g) => row(g, names));
  const nav = el("p", { class: "pager" });
  if (params.get("cursor")) {
    const first = new URLSearchParams(params);
    first.delete("cursor");
    nav.append(el("a", { href: `#/logs?${first}`, id: "first-page", text: "First page" }), " ");
  }
  if (page.next) {
    const next = new URLSearchParams(params);
    next.set("cursor", page.next);
    nav.append(el("a", { href: `#/logs?${next}`, id: "next-page", text: "Next page" }));
  }
  const empty = rows.length ? null : el("p", { class: "empty", text: "No generation matches." });
  show(el("h2", { text: "Logs" }), filterForm(params, names), table("logs", [...HEADS, "key"], rows), empty, nav);
}
