// The tidegate console: plain DOM code, no framework and no build step (docs/console.md says why).
// It calls the gateway's own APIs with the session cookie; anything but a read carries X-CSRF-Token.

const main = document.getElementById("main");
let csrf = "";
let timer = null;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  if (options.method && options.method !== "GET") headers["x-csrf-token"] = csrf;
  return fetch(path, { ...options, headers, credentials: "same-origin" });
}

function show(...nodes) {
  if (timer) clearInterval(timer);
  timer = null;
  main.replaceChildren(...nodes);
}

function loginView(message = "") {
  document.getElementById("nav").hidden = true;
  const key = el("input", { id: "key", type: "password", placeholder: "master or admin key", autocomplete: "off" });
  const error = el("p", { class: "error", id: "login-error", text: message });
  const form = el("form", { class: "login" }, el("h2", { text: "Log in" }), key, el("button", { type: "submit", id: "login", text: "Log in" }), error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const r = await fetch("/ui/login", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ key: key.value }) });
    key.value = "";
    if (!r.ok) {
      error.textContent = (await r.json()).error.message;
      return;
    }
    await start(await r.json());
  });
  show(form);
}

async function start(session) {
  csrf = session.csrf;
  document.getElementById("who").textContent = session.name;
  document.getElementById("nav").hidden = false;
  route();
}

const fmt = {
  ms: (v) => (v == null ? "" : `${Math.round(v)} ms`),
  cost: (v) => (v ? `$${v.toFixed(6)}` : ""),
  time: (t) => new Date(t * 1000).toLocaleTimeString(),
  when: (t) => new Date(t * 1000).toLocaleString(),
  // a running generation's tokens are counted as they come (~4 characters a token until the
  // provider reports its usage): "~" says so
  tokens: (g) => (g.usage.total_tokens ? `${g.status === "in_progress" && g.usage_estimated ? "~" : ""}${g.usage.total_tokens}` : ""),
};

async function logView() {
  const body = el("tbody", { id: "log-rows" });
  const heads = ["time", "model", "provider", "status", "fallback", "TTFT", "tokens", "estimated", "cost"];
  const table = el("table", { id: "log" }, el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", { text: h })))), body);
  // a phone's width holds a few columns: the table scrolls sideways inside its box, the page does not
  show(el("h2", { text: "Live log" }), el("div", { class: "scroll", id: "log-box" }, table));
  const refresh = async () => {
    const r = await api("/api/v1/generations?limit=50");
    if (r.status === 401) return loginView("The session ended: log in again.");
    const rows = (await r.json()).data.map((g) => {
      const link = el("a", { href: `#/gen/${g.id}`, text: fmt.time(g.created_at) });
      const status = el("span", { class: `status status-${g.status}`, text: g.status });
      const cells = [
        el("td", {}, link), el("td", { text: g.model }), el("td", { "data-col": "provider", text: g.provider || "" }), el("td", {}, status),
        el("td", { text: g.attempts > 1 ? `yes (${g.attempts} tries)` : "" }), el("td", { class: "num", "data-col": "ttft", text: fmt.ms(g.ttft_ms) }),
        el("td", { class: "num", "data-col": "tokens", text: fmt.tokens(g) }), el("td", { text: g.usage_estimated ? "estimated" : "" }),
        el("td", { class: "num", text: fmt.cost(g.cost) }),
      ];
      return el("tr", { "data-id": g.id, "data-status": g.status }, ...cells);
    });
    body.replaceChildren(...rows);
  };
  await refresh();
  timer = setInterval(refresh, 1000);
}

async function generationView(id) {
  const r = await api(`/api/v1/generations/${encodeURIComponent(id)}`);
  if (!r.ok) return show(el("p", { class: "error", text: (await r.json()).error.message }));
  const g = await r.json();
  const facts = [["status", g.status], ["created", fmt.when(g.created_at)], ["key", await keyName(g.key_id)],
    ["model", g.model], ["provider", g.provider], ["served model", g.served_model], ["route reason", g.route_reason],
    ["attempts", g.attempts], ["finish reason", g.finish_reason], ["TTFT", fmt.ms(g.ttft_ms)], ["duration", fmt.ms(g.duration_ms)],
    ["prompt tokens", g.usage.prompt_tokens], ["completion tokens", g.usage.completion_tokens],
    ["usage", g.usage_estimated ? "estimated" : "reported by the provider"], ["cost", fmt.cost(g.cost)],
    ["error", g.error ? `${g.error.code}: ${g.error.message}` : ""]];
  const list = el("dl", { id: "facts" }, ...facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { "data-fact": k, text: v == null ? "" : String(v) })]));
  const complete = g.status === "completed";
  const partial = complete ? "" : "incomplete";
  const output = el("pre", { id: "output", class: partial, text: g.output_text });
  const reasoning = g.reasoning_text ? el("pre", { id: "reasoning", class: `reasoning ${partial}`, text: g.reasoning_text }) : null;
  const label = el("p", { id: "completeness", text: complete ? "Complete answer" : `Incomplete (${g.status}): the partial text below is all that was produced` });
  const parts = reasoning ? [el("h3", { text: "Reasoning" }), reasoning, el("h3", { text: "Answer" }), output] : [output];
  show(el("h2", { text: `Generation ${g.id}` }), list, label, ...parts);
  if (g.pace && g.pace.length > 1) replayAtPace(g, label, output, reasoning);
}

async function keyName(id) {
  // the record names its key by id; the admin API has its name (the master key is no stored key)
  if (id === "master") return "the master key";
  const r = await api(`/api/v1/keys/${encodeURIComponent(id)}`);
  return r.ok ? `${(await r.json()).name} (${id})` : id;
}

function replayAtPace(g, label, output, reasoning) {
  // the record keeps [ms since the request, answer characters, reasoning characters] at each of the
  // gateway's flusher rounds (0.2 s) while it streamed: the stream is shown again at that pace, from
  // the request on (its time to first token and its pauses included)
  const pace = g.pace, answer = Array.from(g.output_text), thought = Array.from(g.reasoning_text || "");
  const button = el("button", { type: "button", id: "replay", text: "Replay at its pace" });
  const clock = el("span", { id: "replay-clock" });
  label.after(el("p", {}, button, " ", clock));
  button.addEventListener("click", () => {
    const began = performance.now(), end = pace[pace.length - 1][0];
    button.disabled = true;
    // a timer, not animation frames: those are throttled in a tab that is not in front
    const ticker = setInterval(() => {
      const t = performance.now() - began;
      const [a, r] = charactersAt(pace, t);
      output.textContent = answer.slice(0, a).join("");
      if (reasoning) reasoning.textContent = thought.slice(0, r).join("");
      clock.textContent = `${(Math.min(t, end) / 1000).toFixed(1)} s of ${(end / 1000).toFixed(1)} s`;
      if (t >= end) {
        clearInterval(ticker);
        button.disabled = false;
      }
    }, 40);
  });
}

function charactersAt(pace, t) {
  // linear between the two samples around `t`: a flat stretch (a pause) stays flat
  if (t < pace[0][0]) return [0, 0];
  let i = 0;
  while (i + 1 < pace.length && pace[i + 1][0] <= t) i++;
  if (i + 1 === pace.length) return [pace[i][1], pace[i][2]];
  const [t0, a0, r0] = pace[i], [t1, a1, r1] = pace[i + 1];
  const f = t1 > t0 ? (t - t0) / (t1 - t0) : 1;
  return [Math.floor(a0 + (a1 - a0) * f), Math.floor(r0 + (r1 - r0) * f)];
}

function barChart(id, title, rows, value) {
  const width = 640, bar = 22, height = rows.length * bar + 30;
  const max = Math.max(1e-12, ...rows.map(value));
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  // drawn on a 640-wide grid, shown at most as wide as the page (a phone's is narrower)
  const attributes = { id, class: "chart", viewBox: `0 0 ${width} ${height}`, width, role: "img", "aria-label": title };
  for (const [k, v] of Object.entries(attributes)) svg.setAttribute(k, v);
  const add = (tag, attrs, text) => {
    const n = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text != null) n.textContent = text;
    svg.append(n);
  };
  add("text", { x: 8, y: 16 }, title);
  rows.forEach((r, i) => {
    const y = 26 + i * bar;
    add("text", { x: 8, y: y + 14 }, String(r.group ?? "(none)"));
    add("rect", { x: 180, y, width: Math.max(1, (value(r) / max) * 360), height: bar - 6 });
    add("text", { x: 548, y: y + 14 }, String(Math.round(value(r) * 1e6) / 1e6));
  });
  return svg;
}

async function usageView() {
  const charts = [];
  for (const group of ["day", "model", "provider", "key"]) {
    const r = await api(`/api/v1/usage?group_by=${group}`);
    if (!r.ok) return show(el("p", { class: "error", text: (await r.json()).error.message }));
    const rows = (await r.json()).data;
    charts.push(barChart(`tokens-by-${group}`, `Tokens by ${group}`, rows, (x) => x.prompt_tokens + x.completion_tokens));
    charts.push(barChart(`cost-by-${group}`, `Cost (USD) by ${group}`, rows, (x) => x.cost));
  }
  show(el("h2", { text: "Usage" }), ...charts);
}

async function playgroundView() {
  // router models (`tidegate/auto`) answer on the chat door like chat models
  const models = (await (await api("/v1/models")).json()).data.filter((m) => !m.type || m.type === "chat" || m.type === "router");
  const select = el("select", { id: "model" }, ...models.map((m) => el("option", { value: m.id, text: m.id })));
  const prompt = el("textarea", { id: "prompt", placeholder: "Ask something" });
  const send = el("button", { type: "button", id: "send", text: "Send" });
  const state = el("p", { id: "stream-state" });
  const reply = el("pre", { id: "reply" });
  show(el("h2", { text: "Playground" }), select, prompt, send, state, reply);
  send.addEventListener("click", async () => {
    reply.textContent = "";
    reply.className = "";
    state.textContent = "streaming";
    const body = { model: select.value, messages: [{ role: "user", content: prompt.value }], stream: true };
    const r = await api("/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    if (!r.ok) {
      state.textContent = `refused: ${(await r.json()).error.message}`;
      return;
    }
    state.dataset.generation = r.headers.get("x-generation-id") || "";
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", done = false, failure = null;
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of block.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") { done = true; continue; }
          const chunk = JSON.parse(data);
          if (chunk.error) failure = chunk.error;
          const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
          if (delta && delta.content) reply.textContent += delta.content;
        }
      }
    }
    if (done) state.textContent = "completed";
    else {
      reply.className = "incomplete";
      state.textContent = `incomplete: ${failure ? `${failure.code}: ${failure.message}` : "the stream ended early"}`;
    }
  });
}

function route() {
  const hash = location.hash || "#/log";
  if (hash.startsWith("#/gen/")) return generationView(hash.slice(6));
  if (hash === "#/usage") return usageView();
  if (hash === "#/playground") return playgroundView();
  return logView();
}

window.addEventListener("hashchange", () => csrf && route());
document.getElementById("logout").addEventListener("click", async () => {
  await api("/ui/logout", { method: "POST" });
  csrf = "";
  loginView("Logged out.");
});

const session = await fetch("/ui/session", { credentials: "same-origin" });
if (session.ok) await start(await session.json());
else loginView();
