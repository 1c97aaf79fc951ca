// Playground (#/playground): a chat completion streamed through the gateway itself, with the session
// or with a key pasted for it, to any chat or router model of the catalog.

import { api, el, errorBox, getJson, show } from "./lib.js";

export async function playgroundView() {
  // router models (`tidegate/auto`) answer on the chat door like chat models
  let catalog;
  try { catalog = await getJson("/v1/models"); } catch (err) { return show(el("h2", { text: "Playground" }), errorBox(err)); }
  const models = catalog.data.filter((m) => !m.type || m.type === "chat" || m.type === "router");
  const select = el("select", { id: "model" }, ...models.map((m) => el("option", { value: m.id, text: m.id })));
  const prompt = el("textarea", { id: "prompt", placeholder: "Ask something", "aria-label": "prompt" });
  // another key to stream as (its budget, limits and models apply); it stays in this field only
  const asKey = el("input", { id: "as-key", type: "password", autocomplete: "off", placeholder: "blank: this session" });
  const send = el("button", { type: "button", id: "send", text: "Send" });
  const state = el("p", { id: "stream-state" });
  const reply = el("pre", { id: "reply" });
  show(el("h2", { text: "Playground" }), el("label", {}, "Model ", select), el("label", { class: "wide" }, "API key to stream with ", asKey), prompt, send, state, reply);
  send.addEventListener("click", async () => {
    reply.textContent = "";
    reply.className = "";
    state.textContent = "streaming";
    const body = { model: select.value, messages: [{ role: "user", content: prompt.value }], stream: true };
    const headers = { "content-type": "application/json" };
    if (asKey.value) headers.authorization = `Bearer ${asKey.value}`;
    const r = await api("/v1/chat/completions", { method: "POST", headers, body: JSON.stringify(body) });
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
