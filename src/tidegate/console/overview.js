// Overview (#/overview): requests, tokens, cost, error rate and TTFT over the last hour, day or 30
// days, by model, provider or key, from GET /api/v1/stats/series (the store's rollups: every bucket
// present, zeros where nothing ran, so the charts keep real axes).

import { el, errorBox, fmt, getJson, go, keyLabel, keyNames, keyShort, show, table, tiles, cells } from "./lib.js";
import { color, timeChart } from "./chart.js";

export const WINDOWS = { hour: "Last hour", day: "Last day", month: "Last 30 days" };
const GROUPS = { none: "everything", model: "model", provider: "provider", key: "key" };

// the window a page opens on when its address names none: the overview and a key's page open on the
// last hour (one-minute buckets: a few minutes of fresh traffic are a line, not one hour's dot)
export const DEFAULT_WINDOW = "hour";

export function windowPicker(path, params, fallback = DEFAULT_WINDOW) {
  const current = params.get("window") || fallback;
  const buttons = Object.entries(WINDOWS).map(([w, label]) =>
    el("button", { type: "button", "data-window": w, "aria-pressed": String(w === current), onclick: () => { params.set("window", w); go(path, params); } }, label));
  return el("div", { class: "picker", role: "group", "aria-label": "time window" }, ...buttons);
}

const sum = (points, f) => points.reduce((a, p) => a + f(p), 0);

function charts(stats, short) {
  const t = stats.series[0] ? stats.series[0].points.map((p) => p.t) : [];
  const each = (f) => stats.series.map((s, i) => ({ label: short(s.group), values: s.points.map(f), color: color(i) }));
  // the group's name once, on its p50 line; its p95 (same colour, dashed) is just "p95"
  const ttft = stats.series.flatMap((s, i) => [
    { label: short(s.group), values: s.points.map((p) => p.ttft_p50_ms), color: color(i) },
    { label: "p95", values: s.points.map((p) => p.ttft_p95_ms), color: color(i), dash: true },
  ]);
  const compact = (v) => (v >= 1e6 ? `${(v / 1e6).toFixed(1)}M` : v >= 1e3 ? `${(v / 1e3).toFixed(1)}k` : String(Math.round(v * 100) / 100));
  const fill = stats.series.length === 1;
  return el("div", { class: "charts" },
    timeChart("chart-requests", "Requests", { t, series: each((p) => p.requests) }, { format: fmt.int, axis: compact, fill }),
    timeChart("chart-tokens", "Tokens (input + output)", { t, series: each((p) => p.input_tokens + p.output_tokens) }, { format: fmt.int, axis: compact, fill }),
    timeChart("chart-cost", "Cost (USD)", { t, series: each((p) => p.cost) }, { format: fmt.cost, axis: (v) => `$${v >= 1000 ? compact(v) : Number(v.toPrecision(3))}`, fill }),
    timeChart("chart-errors", "Error rate", { t, series: each((p) => (p.requests ? p.errors / p.requests : null)) }, { format: fmt.pct, axis: (v) => `${Math.round(v * 100)}%` }),
    timeChart("chart-ttft", "Time to first token (p50, p95 dashed)", { t, series: ttft }, { format: fmt.ms, axis: (v) => (v >= 1000 ? `${Number((v / 1000).toPrecision(3))} s` : `${Math.round(v)} ms`) }));
}

function groupTable(stats, labels) {
  const rows = stats.series.map((s) => {
    const requests = sum(s.points, (p) => p.requests), errors = sum(s.points, (p) => p.errors);
    return el("tr", { "data-group": s.group }, ...cells([labels(s.group), fmt.int(requests), fmt.int(sum(s.points, (p) => p.input_tokens)),
      fmt.int(sum(s.points, (p) => p.output_tokens)), fmt.cost(sum(s.points, (p) => p.cost)), requests ? fmt.pct(errors / requests) : ""]));
  });
  return table("groups", ["group", "requests", "input tokens", "output tokens", "cost", "error rate"], rows);
}

export async function overviewView(params) {
  const window = params.get("window") || DEFAULT_WINDOW, by = params.get("by") || "model";
  const select = el("select", { id: "by", "aria-label": "group by" },
    ...Object.entries(GROUPS).map(([g, label]) => el("option", { value: g, text: `by ${label}`, selected: g === by })));
  select.addEventListener("change", () => { params.set("by", select.value); go("/overview", params); });
  const head = [el("h2", { text: "Overview" }), el("div", { class: "controls" }, windowPicker("/overview", params), select)];
  let stats, names = new Map();
  try {
    const query = new URLSearchParams({ window, by });
    for (const f of ["model", "provider", "key_id"]) if (params.get(f)) query.set(f, params.get(f));
    [stats, names] = await Promise.all([getJson(`/api/v1/stats/series?${query}`), by === "key" ? keyNames() : names]);
  } catch (err) {
    return show(...head, errorBox(err));
  }
  const labels = (g) => (by === "key" && g !== "other" ? keyLabel(g, names) : String(g));
  const short = (g) => (by === "key" && g !== "other" ? keyShort(g, names) : String(g));
  const tot = stats.totals;
  const summary = tiles([
    ["requests", fmt.int(tot.requests), "requests"],
    ["tokens", fmt.int(tot.input_tokens + tot.output_tokens), "tokens"],
    ["cost", fmt.cost(tot.cost), "cost"],
    ["error rate", tot.requests ? fmt.pct(tot.errors / tot.requests) : "–", "error-rate"],
    ["TTFT p50 / p95", tot.ttft_p50_ms == null ? "–" : `${fmt.ms(tot.ttft_p50_ms)} / ${fmt.ms(tot.ttft_p95_ms)}`, "ttft"],
  ]);
  show(...head, summary, charts(stats, short), el("h3", { text: `By ${GROUPS[by]}` }), groupTable(stats, labels));
}
