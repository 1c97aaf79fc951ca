// The "Stream Responses in JavaScript" loop of the seed document `000` ("Streaming responses"),
// run with node and the official `openai` npm package.
//
// Changed, and only this: the base URL, the API key and the model come from the command line / the
// environment (`node responses_loop.mjs <base_url ending in /v1> <model>`, key in TIDEGATE_API_KEY).
// The client and the randomUUID import are the ones the seed takes "from the JavaScript guide". The
// loop throws on an `error` / `response.failed` / `response.incomplete` event and when the stream ends
// without `response.completed`; an uncaught throw at the top level exits non-zero, so the exit status
// is 0 exactly when the loop judged the answer complete.
import OpenAI from "openai";
import { randomUUID } from "node:crypto";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.TIDEGATE_API_KEY });

const requestId = randomUUID();
const stream = await client.responses.create({
  model: model, input: "Explain a safe release process.", stream: true,
}, { headers: { "Idempotency-Key": requestId } });
let completed = false;
for await (const event of stream) {
  if (event.type === "response.output_text.delta") process.stdout.write(event.delta);
  if (event.type === "response.completed") completed = true;
  if (["error", "response.failed", "response.incomplete"].includes(event.type)) {
    throw new Error(`Stream did not complete: ${requestId}`);
  }
}
if (!completed) throw new Error(`Interrupted stream: ${requestId}`);
