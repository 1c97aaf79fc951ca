// Routes (#/routes): each model's routes from GET /api/v1/routes, every 2 s: breaker state, TTFT p50,
// error rate, in flight, fallbacks, and the last failures with their upstream error. A route whose
// breaker is not closed, or that failed at least half of its last attempts, is shown failing (red).

import { cells, el, errorBox, every, fmt, getJson, show } from "./lib.js";

function health(r) {
  const state = r.state || r.breaker;
  if (state && state !== "closed") return "failing";
  if (r.error_rate >= 0.5) return "failing";
  return r.error_rate > 0 ? "degraded" : "ok";
}

function failures(r) {
  const list = r.last_failures || [];
  if (!list.length) return null;
  return el("ul", { class: "failures", "data-failures": r.route }, ...list.map((f) => el("li", {},
    el("span", { class: "muted", text: `${fmt.when(f.at)} ` }),
    f.generation_id ? el("a", { href: `#/gen/${f.generation_id}`, text: f.generation_id }) : "",
    ` ${f.status}${f.code ? ` (${f.code})` : ""}: `, el("span", { class: "upstream-error", text: f.upstream_error || "" }))));
}

function modelSection(model, routes) {
  const rows = routes.flatMap((r) => {
    const state = r.state || r.breaker || "";
    const row = el("tr", { "data-route": r.route, "data-health": health(r), class: `health-${health(r)}` }, ...cells([
      `${r.provider} / ${r.served_model}`, el("span", { class: "badge", text: state }),
      fmt.ms(r.ttft_p50_ms ?? r.ttft_ms_p50), fmt.pct(r.error_rate), r.in_flight, r.fallbacks ?? "",
      r.last_failures?.[0]?.upstream_error || ""]));
    const more = failures(r);
    return more ? [row, el("tr", { class: "failures-row" }, el("td", { colspan: 7 }, more))] : [row];
  });
  const head = el("thead", {}, el("tr", {}, ...["route", "breaker", "TTFT p50", "error rate", "in flight", "fallbacks", "last error"].map((h) => el("th", { scope: "col", text: h }))));
  return el("section", { "data-model": model }, el("h3", { text: model }),
    el("div", { class: "scroll" }, el("table", { class: "routes" }, head, el("tbody", {}, ...rows))));
}

function sections(data) {
  const byModel = new Map();
  for (const r of data.data) byModel.set(r.model, [...(byModel.get(r.model) || []), r]);
  return [...byModel].map(([m, routes]) => modelSection(m, routes));
}

export async function routesView() {
  const slot = el("div", { id: "routes" });
  let data;
  try { data = await getJson("/api/v1/routes"); } catch (err) { return show(el("h2", { text: "Routes" }), errorBox(err)); }
  slot.replaceChildren(...sections(data));
  show(el("h2", { text: "Routes" }), slot);
  every(async () => {
    const next = await getJson("/api/v1/routes").catch(() => null);
    if (next) slot.replaceChildren(...sections(next));
  }, 2000);
}
