// A generation's page (#/gen/<id>): its record, its answer (marked incomplete when it is), its
// reasoning apart, the request and answer bodies when the gateway kept them, and a replay at the
// pace it streamed.

import { el, errorBox, fmt, getJson, show } from "./lib.js";

// the bodies the record kept (null when body logging is off for its key or model, or past retention)
function bodies(g) {
  const shown = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));
  const parts = [];
  for (const [name, title] of [["request_body", "Request"], ["response_body", "Answer as sent"]]) {
    if (g[name] != null) parts.push(el("h3", { text: title }), el("pre", { id: name.replace("_", "-"), class: "body", text: shown(g[name]) }));
  }
  if (!parts.length && ("request_body" in g)) parts.push(el("p", { class: "muted", id: "no-bodies", text: "The request and answer bodies were not kept for this generation (body logging is off for its key or model, or they are past retention)." }));
  return parts;
}

export async function generationView(id) {
  let g;
  try { g = await getJson(`/api/v1/generations/${encodeURIComponent(id)}`); } catch (err) { return show(el("h2", { text: "Generation" }), errorBox(err)); }
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
  show(el("h2", { text: `Generation ${g.id}` }), list, label, ...parts, ...bodies(g));
  if (g.pace && g.pace.length > 1) replayAtPace(g, label, output, reasoning);
}

async function keyName(id) {
  // the record names its key by id; the admin API has its name (the master key is no stored key)
  if (id === "master") return "the master key";
  const k = await getJson(`/api/v1/keys/${encodeURIComponent(id)}`).catch(() => null);
  return k ? `${k.name} (${id})` : id;
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
