// Keys (#/keys, #/keys/<id>): every change goes through the keys admin API (docs/keys.md) with the
// session's CSRF token. A new key's secret is shown once, in the page only, until the page changes.

import { cells, el, errorBox, every, fmt, forgetKeyNames, getJson, leave, show, table } from "./lib.js";
import { timeChart } from "./chart.js";
import { DEFAULT_WINDOW, WINDOWS, windowPicker } from "./overview.js";

function state(k) {
  if (k.revoked) return "revoked";
  if (k.expires_at && k.expires_at * 1000 < Date.now()) return "expired";
  return "active";
}

function limitsText(l) {
  const parts = [["rpm", l?.rpm], ["tpm", l?.tpm], ["concurrent", l?.concurrent]].filter(([, v]) => v != null);
  return parts.length ? parts.map(([n, v]) => `${v} ${n}`).join(", ") : "none";
}

function budgetText(k) {
  if (k.credits == null) return "unlimited";
  return `${fmt.usd(k.credits)}${k.budget_period ? ` ${k.budget_period}` : ""}`;
}

// the key form: the fields of POST /api/v1/keys and PATCH /api/v1/keys/{id}; `k` fills it in
function keyForm(id, models, k, submitLabel) {
  const input = (name, label, attrs) => el("label", {}, label, el("input", { name, ...attrs }));
  const local = (t) => (t ? new Date(t * 1000 - new Date().getTimezoneOffset() * 60000).toISOString().slice(0, 16) : "");
  const period = el("select", { name: "budget_period" }, ...[["", "no period (a total)"], ["daily", "daily"], ["monthly", "monthly"]]
    .map(([v, t]) => el("option", { value: v, text: t, selected: (k?.budget_period || "") === v })));
  const allowed = el("select", { name: "models", multiple: true, size: Math.min(6, Math.max(2, models.length)) },
    ...models.map((m) => el("option", { value: m, text: m, selected: Boolean(k?.models?.includes(m)) })));
  const form = el("form", { id, class: "key-form" },
    input("name", "Name", { required: true, maxlength: 200, value: k?.name || "" }),
    input("credits", "Budget (USD, blank: unlimited)", { type: "number", min: 0, step: "any", value: k?.credits ?? "" }),
    el("label", {}, "Budget period", period),
    input("rpm", "Requests per minute", { type: "number", min: 1, step: 1, value: k?.limits?.rpm ?? "" }),
    input("tpm", "Tokens per minute", { type: "number", min: 1, step: 1, value: k?.limits?.tpm ?? "" }),
    input("concurrent", "Generations at once", { type: "number", min: 1, step: 1, value: k?.limits?.concurrent ?? "" }),
    el("label", {}, "Allowed models (none selected: all)", allowed),
    input("expires_at", "Expires (blank: never)", { type: "datetime-local", value: local(k?.expires_at) }),
    el("label", { class: "check" }, el("input", { name: "admin", type: "checkbox", checked: Boolean(k?.admin) }), "Admin (may use the admin API and the console)"),
    el("button", { type: "submit", text: submitLabel }),
    el("p", { class: "error", role: "alert", "data-form-error": "" }));
  return form;
}

function formBody(form) {
  const f = form.elements, num = (name) => (f[name].value === "" ? null : Number(f[name].value));
  const picked = [...f.models.selectedOptions].map((o) => o.value);
  return {
    name: f.name.value, credits: num("credits"), budget_period: f.budget_period.value || null,
    limits: { rpm: num("rpm"), tpm: num("tpm"), concurrent: num("concurrent") },
    models: picked.length ? picked : null,
    expires_at: f.expires_at.value ? new Date(f.expires_at.value).getTime() / 1000 : null,
    admin: f.admin.checked,
  };
}

function onSubmit(form, send) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = form.querySelector("[data-form-error]");
    error.textContent = "";
    try { await send(formBody(form)); } catch (err) { error.textContent = err.message; }
  });
}

async function catalog() {
  const models = await getJson("/v1/models");
  return models.data.map((m) => m.id);
}

function secretBox(created) {
  const secret = el("code", { id: "new-secret", text: created.key });
  const copied = el("span", { id: "copied", role: "status" });
  const copy = el("button", { type: "button", id: "copy-secret", text: "Copy" });
  copy.addEventListener("click", async () => {
    await navigator.clipboard.writeText(created.key);
    copied.textContent = "copied";
  });
  return el("div", { class: "secret", id: "secret-box", role: "region", "aria-label": "the new key's secret" },
    el("p", {}, el("strong", { text: `Key ${created.name} created. ` }), "Its secret is shown this once: copy it now."),
    el("p", {}, secret, " ", copy, " ", copied), el("p", {}, el("a", { href: `#/keys/${created.id}`, text: "Open its page" })));
}

function keyRows(list) {
  return list.data.sort((a, b) => b.created_at - a.created_at).map((k) =>
    el("tr", { "data-key": k.id, "data-state": state(k) }, ...cells([el("a", { href: `#/keys/${k.id}`, text: k.name }), k.id, state(k),
      budgetText(k), fmt.cost(k.spent), limitsText(k.limits), k.models ? k.models.join(", ") : "all", k.admin ? "yes" : "", fmt.when(k.expires_at)])));
}

export async function keysView() {
  let list, models;
  try { [list, models] = await Promise.all([getJson("/api/v1/keys"), catalog()]); } catch (err) { return show(el("h2", { text: "Keys" }), errorBox(err)); }
  const form = keyForm("create-key", models, null, "Create key");
  const slot = el("div", { id: "created" });
  const keys = table("keys", ["name", "id", "state", "budget", "spent", "limits", "models", "admin", "expires"], keyRows(list));
  onSubmit(form, async (body) => {
    const created = await getJson("/api/v1/keys", { method: "POST", json: body });
    forgetKeyNames();
    form.reset();
    slot.replaceChildren(secretBox(created));
    slot.querySelector("#copy-secret").focus();
    // the list as the API has it now, the new key first: the secret box stays where it is
    const fresh = await getJson("/api/v1/keys").catch(() => null);
    if (fresh) keys.querySelector("tbody").replaceChildren(...keyRows(fresh));
  });
  const create = el("details", { id: "new-key" }, el("summary", { text: "New key" }), form);
  show(el("h2", { text: "Keys" }), create, slot, keys);
}

function confirmRevoke(k, onYes) {
  const dialog = el("dialog", { id: "revoke-dialog", "aria-labelledby": "revoke-title" },
    el("h3", { id: "revoke-title", text: `Revoke ${k.name}?` }),
    el("p", { text: "Its requests get 401 from now on, and its console sessions end. This cannot be undone." }),
    el("form", { method: "dialog" }, el("button", { value: "cancel", id: "revoke-cancel", text: "Cancel" }), " ",
      el("button", { value: "revoke", id: "revoke-confirm", class: "danger", text: "Revoke" })));
  dialog.addEventListener("close", () => { if (dialog.returnValue === "revoke") onYes(); dialog.remove(); });
  document.body.append(dialog);
  dialog.showModal();
}

// spend vs budget: the key's cost over the window, added up, against its credits
function spendChart(stats, k) {
  const points = stats.series[0]?.points || [];
  let total = 0;
  const spent = points.map((p) => (total += p.cost));
  const series = [{ label: "spent", values: spent }];
  // the budget's line once the spend is a fifth of it; below that it would flatten the climb to nothing
  const near = k.credits != null && total >= k.credits / 5;
  if (near) series.push({ label: "budget", values: points.map(() => k.credits), color: "#c0392b", dash: true });
  const budget = k.credits == null ? "no budget" : `budget ${fmt.usd(k.credits)}${near ? ", dashed" : ""}`;
  const title = `Spend over the ${(WINDOWS[stats.window] || stats.window).toLowerCase()} (${budget})`;
  return timeChart("chart-spend", title, { t: points.map((p) => p.t), series }, { format: fmt.cost, axis: (v) => `$${Math.round(v * 1e4) / 1e4}`, fill: true });
}

function facts(k) {
  const left = k.credits == null ? "unlimited" : fmt.usd(Math.max(0, k.credits - k.spent - k.reserved));
  const rows = [["state", state(k)], ["budget", budgetText(k)], ["spent", fmt.cost(k.spent)], ["reserved", fmt.cost(k.reserved)], ["left", left],
    ["limits", limitsText(k.limits)], ["models", k.models ? k.models.join(", ") : "all"], ["admin", k.admin ? "yes" : "no"],
    ["expires", fmt.when(k.expires_at) || "never"], ["created", fmt.when(k.created_at)]];
  const meter = k.credits ? el("meter", { id: "spend-meter", min: 0, max: k.credits, value: k.spent, "aria-label": "spent of the budget" }) : null;
  return [el("dl", { id: "key-facts" }, ...rows.flatMap(([n, v]) => [el("dt", { text: n }), el("dd", { "data-fact": n, text: v })])), meter];
}

function recentTable(gens) {
  const rows = gens.data.map((g) => el("tr", { "data-id": g.id, "data-status": g.status }, ...cells([el("a", { href: `#/gen/${g.id}`, text: fmt.when(g.created_at) }),
    g.model, g.provider || "", el("span", { class: `status status-${g.status}`, text: g.status }), fmt.tokens(g), fmt.cost(g.cost)])));
  return table("key-generations", ["time", "model", "provider", "status", "tokens", "cost"], rows);
}

export async function keyView(id, params) {
  const window = params.get("window") || DEFAULT_WINDOW;
  const load = () => Promise.all([getJson(`/api/v1/keys/${encodeURIComponent(id)}`),
    getJson(`/api/v1/stats/series?window=${window}&by=none&key_id=${encodeURIComponent(id)}`).catch(() => null),
    getJson(`/api/v1/generations?key_id=${encodeURIComponent(id)}&limit=20`)]);
  let k, stats, gens, models;
  try { [[k, stats, gens], models] = await Promise.all([load(), catalog()]); } catch (err) { return show(el("h2", { text: "Key" }), errorBox(err)); }
  const chartSlot = el("div", { id: "spend" }, stats ? spendChart(stats, k) : el("p", { class: "empty", text: "no data yet" }));
  const factSlot = el("div", { id: "facts-slot" }, ...facts(k));
  const recentSlot = el("div", {}, recentTable(gens));
  const edit = keyForm("edit-key", models, k, "Save changes");
  onSubmit(edit, async (body) => {
    await getJson(`/api/v1/keys/${encodeURIComponent(id)}`, { method: "PATCH", json: body });
    forgetKeyNames();
    leave();
    await keyView(id, params);
  });
  const revoke = el("button", { type: "button", id: "revoke", class: "danger", text: "Revoke key", disabled: k.revoked });
  revoke.addEventListener("click", () => confirmRevoke(k, async () => {
    await getJson(`/api/v1/keys/${encodeURIComponent(id)}`, { method: "DELETE" });
    forgetKeyNames();
    leave();
    await keyView(id, params);
  }));
  show(el("h2", { text: `Key ${k.name}` }), el("p", { class: "muted", text: k.id }), factSlot, el("p", {}, revoke),
    windowPicker(`/keys/${id}`, params), chartSlot,
    el("details", { id: "edit" }, el("summary", { text: "Edit name, budget and limits" }), edit),
    el("h3", { text: "Recent generations" }), recentSlot);
  // the spend climbs while the key streams: its numbers, its chart and its generations follow
  let last = JSON.stringify([k.spent, k.reserved, k.revoked, gens.data.map((g) => [g.id, g.status])]);
  every(async () => {
    const [k2, stats2, gens2] = await load().catch(() => [null]);
    if (!k2) return;
    const now = JSON.stringify([k2.spent, k2.reserved, k2.revoked, gens2.data.map((g) => [g.id, g.status])]);
    if (now === last) return;
    last = now;
    factSlot.replaceChildren(...facts(k2));
    if (stats2) chartSlot.replaceChildren(spendChart(stats2, k2));
    recentSlot.replaceChildren(recentTable(gens2));
  }, 2000);
}
