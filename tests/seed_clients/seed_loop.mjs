// The JavaScript `fetch` stream loop of the seed document `003` ("Parsing the stream").
//
// Changed, and only this: the base URL, the API key and the model come from the command line / the
// environment (`node seed_loop.mjs <base_url ending in /v1> <model>`, key in TIDEGATE_API_KEY), and
// the seed's two TypeScript annotations (`res.body!`, `let nl: number`) are dropped so plain node runs
// it. The loop throws on a failure before the stream, on a failure chunk and on an end without
// [DONE]; an uncaught throw at the top level exits non-zero, so the exit status is 0 exactly when the
// loop judged the answer complete.
const [baseUrl, model] = process.argv.slice(2);

const res = await fetch(`${baseUrl}/chat/completions`, {
  method: "POST",
  headers: {
    Authorization: `Bearer ${process.env.TIDEGATE_API_KEY}`,
    "Content-Type": "application/json",
  },
  body: JSON.stringify({
    model: model,
    messages: [{ role: "user", content: "Hallo!" }],
    stream: true,
  }),
});

// Failures BEFORE the first byte are plain JSON with a real status code.
if (!res.ok) {
  const { error } = await res.json();
  throw new Error(`${error.code}: ${error.message}`);
}
console.log("generation:", res.headers.get("X-Generation-Id"));

const reader = res.body.getReader();
const decoder = new TextDecoder();
let buffer = "";
let complete = false;

// A labelled loop, so `break read` can leave both loops from the inner one.
read: while (true) {
  const { done, value } = await reader.read();
  if (done) break;
  buffer += decoder.decode(value, { stream: true });

  let nl;
  while ((nl = buffer.indexOf("\n")) !== -1) {
    const line = buffer.slice(0, nl).trim();
    buffer = buffer.slice(nl + 1);

    if (line === "" || line.startsWith(":")) continue; // blank or keep-alive
    if (!line.startsWith("data:")) continue;

    const payload = line.slice(5).trim();
    if (payload === "[DONE]") { complete = true; break; }

    const chunk = JSON.parse(payload);

    // Failures AFTER the first byte arrive here; the status was already 200.
    if (chunk.error) {
      throw new Error(`${chunk.error.code}: ${chunk.error.message} (partial answer)`);
    }
    if (chunk.usage) console.error("usage:", chunk.usage);

    const delta = chunk.choices?.[0]?.delta;
    if (delta?.reasoning) process.stderr.write(delta.reasoning); // thinking
    if (delta?.content) process.stdout.write(delta.content);     // answer
  }
  if (complete) break read;
}

// EOF is not success. A connection that dropped before `[DONE]` leaves a
// truncated answer that looks exactly like a short one.
if (!complete) throw new Error("stream ended without [DONE]: answer is incomplete");
