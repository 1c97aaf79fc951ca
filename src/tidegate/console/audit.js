// Audit (#/audit): who changed what, when, from GET /api/v1/audit (newest first, keyset pages).
// Every change made through the keys admin API is there: the console's own included.

import { cells, el, errorBox, fmt, getJson, show, table } from "./lib.js";

function target(t) {
  return typeof t === "string" && t.startsWith("key_") ? el("a", { href: `#/keys/${t}`, text: t }) : t || "";
}

export async function auditView(params) {
  const query = new URLSearchParams({ limit: "50" });
  if (params.get("cursor")) query.set("cursor", params.get("cursor"));
  let page;
  try { page = await getJson(`/api/v1/audit?${query}`); } catch (err) { return show(el("h2", { text: "Audit" }), errorBox(err)); }
  const rows = page.data.map((e) => el("tr", { "data-action": e.action, "data-target": e.target || "" }, ...cells([fmt.when(e.at),
    e.actor ? `${e.actor.name ?? ""}${e.actor.key_id ? ` (${e.actor.key_id})` : ""}` : "", e.action, target(e.target),
    el("code", { text: e.detail && Object.keys(e.detail).length ? JSON.stringify(e.detail) : "" })])));
  const nav = el("p", { class: "pager" });
  if (params.get("cursor")) nav.append(el("a", { href: "#/audit", id: "first-page", text: "First page" }), " ");
  if (page.next) nav.append(el("a", { href: `#/audit?cursor=${encodeURIComponent(page.next)}`, id: "next-page", text: "Next page" }));
  const empty = rows.length ? null : el("p", { class: "empty", text: "Nothing has been changed yet." });
  show(el("h2", { text: "Audit" }), table("audit", ["when", "who", "what", "target", "detail"], rows), empty, nav);
}
