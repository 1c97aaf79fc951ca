// Cache and agent sessions (#/cache): the response cache's hit rate and saved cost
// (GET /api/v1/cache/stats) and the agent sessions (GET /api/v1/sessions), over the chosen window.
// A gateway without these endpoints answers 404: the page says "no data yet".

import { ApiError, cells, el, errorBox, fmt, getJson, keyLabel, keyNames, show, table, tiles } from "./lib.js";
import { windowPicker } from "./overview.js";

const SPAN = { hour: 3600, day: 86400, month: 30 * 86400 };
const WINDOW = "day";  // sessions last longer than an hour: this page opens on the last day

async function optional(path) {
  try { return await getJson(path); } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
}

function cacheSection(stats, names) {
  if (!stats) return el("p", { class: "empty", id: "cache-empty", text: "no data yet" });
  const asked = stats.hits + stats.misses;
  const rows = (list, label) => (list || []).map((r) => el("tr", {}, ...cells([label(r), fmt.int(r.hits), fmt.int(r.misses), fmt.cost(r.saved_cost)])));
  const heads = (first) => [first, "hits", "misses", "saved"];
  return el("div", { id: "cache" }, tiles([
    ["hit rate", asked ? fmt.pct(stats.hits / asked) : "–", "hit-rate"], ["saved cost", fmt.cost(stats.saved_cost), "saved"],
    ["hits", fmt.int(stats.hits), "hits"], ["misses", fmt.int(stats.misses), "misses"], ["bypasses", fmt.int(stats.bypasses), "bypasses"],
    ["stored", `${fmt.int((stats.bytes || 0) / 1024)} KiB`, "bytes"]]),
  table("cache-models", heads("model"), rows(stats.by_model, (r) => r.model ?? r.group)),
  table("cache-keys", heads("key"), rows(stats.by_key, (r) => keyLabel(r.key_id ?? r.group, names))));
}

// a session whose requests failed says so (a failed request often has no token: it would read as a
// quiet success), and links to those requests in the logs
function outcome(s) {
  const failed = s.failed || 0;
  if (!failed) return el("span", { class: "status status-completed", text: "ok" });
  const text = failed >= s.requests ? "failed" : `${failed} of ${s.requests} failed`;
  return el("a", { class: "status status-failed", href: `#/logs?session=${encodeURIComponent(s.session)}&status=failed`, text });
}

function sessionsSection(list) {
  if (!list) return el("p", { class: "empty", id: "sessions-empty", text: "no data yet" });
  const rows = list.data.map((s) => el("tr", { "data-session": s.session, "data-outcome": s.failed ? "failed" : "ok" },
    ...cells([el("a", { href: `#/logs?session=${encodeURIComponent(s.session)}`, text: s.session }), s.agent || "", outcome(s),
      fmt.int(s.requests), fmt.int(s.input_tokens), fmt.int(s.output_tokens), fmt.cost(s.cost), fmt.when(s.first_at), fmt.when(s.last_at), (s.models || []).join(", ")])));
  if (!rows.length) return el("p", { class: "empty", id: "sessions-empty", text: "no agent session in this window" });
  return table("sessions", ["session", "agent", "outcome", "requests", "input tokens", "output tokens", "cost", "first", "last", "models"], rows);
}

export async function cacheView(params) {
  const since = Date.now() / 1000 - SPAN[params.get("window") || WINDOW];
  let stats, sessions, names;
  try {
    [stats, sessions, names] = await Promise.all([optional(`/api/v1/cache/stats?since=${since}`),
      optional(`/api/v1/sessions?since=${since}&limit=100`), keyNames()]);
  } catch (err) { return show(el("h2", { text: "Cache and agent sessions" }), errorBox(err)); }
  show(el("h2", { text: "Cache and agent sessions" }), windowPicker("/cache", params, WINDOW),
    el("h3", { text: "Response cache" }), cacheSection(stats, names), el("h3", { text: "Agent sessions" }), sessionsSection(sessions));
}
