"""A Gemini upstream emulator: `streamGenerateContent?alt=sse` on Google AI and on Vertex AI, byte for
byte as the Gemini API reference describes it (ai.google.dev/api/generate-content: each SSE `data:` is
a whole `GenerateContentResponse`; `usageMetadata` fields as in the google-genai SDK's types;
`FunctionCallingConfig`, `ThinkingConfig` and `FunctionDeclaration.parametersJsonSchema` as in the
REST reference; errors in Google's `{"error": {"code", "message", "status"}}` envelope).

- `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`: Google AI, checks `x-goog-api-key`.
- `POST /v1/projects/{p}/locations/{r}/publishers/google/models/{model}:streamGenerateContent?alt=sse`:
  Vertex AI, checks `Authorization: Bearer`.
- `POST /v1beta/models/{model}:batchEmbedContents` (ai.google.dev/api/embeddings): one
  `{"values": [...]}` per request, `vector_for(text, dims)` (default 4 dimensions), no token count.

Scenario per request: `[[name]]` in the last user turn's text, else `--name` at the end of the model
id, else `text`. Scenarios: text, thinking, tools (text, then two parallel calls), error (an error
chunk after a partial answer), safety (stopped mid-answer),
blocked (the prompt blocked: no candidates), truncated (no finishReason), malformed
(MALFORMED_FUNCTION_CALL), 400/429/500 (HTTP errors before the body), readfile (Gemini CLI's
`read_file`, or Claude Code's `Read` when only that is declared, called with `{"file_path"}` on the `.txt`
path the user turns name; once the last user turn is its `functionResponse`, the text
`Tool said: <the line with READ_MARKER>` of its `output` (or `result`, tidegate's key for a translated
tool result)), shell (Codex CLI's `exec_command` called with `{"cmd": SHELL_COMMAND}`; once the last user
turn is its `functionResponse`, `Tool said: <the last line of its output>`). Every request is recorded.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from tests.emulators.anthropic_upstream import SHELL_COMMAND, read_answer, read_path

THOUGHT = "Let me think about it."
SIGNATURE = "c2lnbmF0dXJlLWVtdQ=="
_GOOGLE_AI = re.compile(r"^/v1beta/models/([^/:]+):streamGenerateContent$")
_EMBED = re.compile(r"^/v1beta/models/([^/:]+):batchEmbedContents$")
_VERTEX = re.compile(
    r"^/v1/projects/([^/]+)/locations/([^/]+)/publishers/google/models/([^/:]+):streamGenerateContent$"
)
PAUSE = {"pause_s": 0.3}  # a script entry: the emulator waits, so what came before is read on its own
USAGE = {"promptTokenCount": 20, "candidatesTokenCount": 5, "totalTokenCount": 25, "cachedContentTokenCount": 8}


@dataclass
class Recorded:
    dialect: str  # google-ai | vertex | embed
    model: str
    headers: dict[str, str]
    body: dict[str, Any]
    scenario: str


def _chunk(
    parts: list[dict[str, Any]] | None, finish: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"index": 0}
    if parts is not None:
        candidate["content"] = {"parts": parts, "role": "model"}
    if finish is not None:
        candidate["finishReason"] = finish
    data: dict[str, Any] = {"candidates": [candidate], "modelVersion": "{model}", "responseId": "resp_emu"}
    if usage is not None:
        data["usageMetadata"] = usage
    return data


def scenario_chunks(name: str, model: str) -> list[dict[str, Any]]:
    """The scripted chunks; `modelVersion` is the model the URL named (as the API answers)."""
    return [orjson.loads(orjson.dumps(c).replace(b"{model}", model.encode())) for c in _script(name)]


def _script(name: str) -> list[dict[str, Any]]:
    if name == "thinking":
        return [
            _chunk([{"text": THOUGHT, "thought": True}]),
            _chunk([{"text": "The answer", "thoughtSignature": SIGNATURE}]),
            _chunk([{"text": " is 4."}], "STOP", {**USAGE, "thoughtsTokenCount": 12, "totalTokenCount": 37}),
        ]
    if name == "tools":
        calls = [
            {"functionCall": {"name": "lookup", "args": {"q": "paris"}}},
            {"functionCall": {"name": "weather", "args": {"city": "Paris", "days": 2}}},
        ]
        return [_chunk([{"text": "Let me check."}]), _chunk(calls, "STOP", USAGE)]
    if name == "safety":
        return [_chunk([{"text": "Partial"}]), _chunk(None, "SAFETY", USAGE)]
    if name == "blocked":
        return [
            {
                "promptFeedback": {"blockReason": "SAFETY"},
                "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
            }
        ]
    if name == "error":  # an error sent in the stream after a partial answer
        err = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
        return [_chunk([{"text": "Partial"}]), PAUSE, _chunk([{"text": " answer"}]), err]
    if name == "truncated":
        return [_chunk([{"text": "Partial"}])]
    if name == "malformed":
        return [_chunk(None, "MALFORMED_FUNCTION_CALL", USAGE)]
    return [
        _chunk([{"text": "Hello"}], usage={"promptTokenCount": 20, "totalTokenCount": 20}),
        _chunk([{"text": " from Gemini."}]),
        _chunk([{"text": ""}], "STOP", USAGE),
    ]


def readfile_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """`readfile`: a call of `read_file`, then, after its functionResponse, what it returned."""
    contents = body.get("contents") or []
    last = contents[-1].get("parts") or [] if contents else []
    answered = [p["functionResponse"] for p in last if isinstance(p, dict) and "functionResponse" in p]
    if answered:
        response = answered[0].get("response") or {}
        output = str(response.get("output", response.get("result", "")))
        return [_chunk([{"text": "Tool said: "}]), _chunk([{"text": read_answer(output)}], "STOP", USAGE)]
    texts = [str(p.get("text") or "") for c in contents if c.get("role") == "user" for p in c.get("parts") or []]
    declared = {str(f.get("name")) for t in body.get("tools") or [] for f in t.get("functionDeclarations") or []}
    name = "Read" if "Read" in declared and "read_file" not in declared else "read_file"  # Claude Code's, or CLI's
    call = {"functionCall": {"name": name, "args": {"file_path": read_path(texts)}}}
    return [_chunk([call], "STOP", USAGE)]


def shell_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """`shell`: a call of `exec_command` (Codex CLI's shell tool) with SHELL_COMMAND, then, after its
    functionResponse, `Tool said: <the last line of its output>`."""
    contents = body.get("contents") or []
    last = contents[-1].get("parts") or [] if contents else []
    answered = [p["functionResponse"] for p in last if isinstance(p, dict) and "functionResponse" in p]
    if answered:
        response = answered[0].get("response") or {}
        output = str(response.get("output", response.get("result", "")))
        said = (output.strip().splitlines() or [""])[-1]
        return [_chunk([{"text": "Tool said: "}]), _chunk([{"text": said}], "STOP", USAGE)]
    call = {"functionCall": {"name": "exec_command", "args": {"cmd": SHELL_COMMAND}}}
    return [_chunk([call], "STOP", USAGE)]


def vector_for(text: str, dims: int) -> list[float]:
    """A deterministic vector per text, so a test can say which input each one belongs to."""
    return [round((len(text) + i) / 10, 3) for i in range(dims)]


def pick_scenario(body: dict[str, Any], model: str) -> str:
    for content in reversed(body.get("contents") or []):
        if content.get("role") == "user":
            for part in content.get("parts") or []:
                found = re.search(r"\[\[([a-z0-9]+)\]\]", str(part.get("text") or ""))
                if found:
                    return found.group(1)
            break
    return model.rsplit("--", 1)[1] if "--" in model else "text"


class GeminiEmulator:
    def __init__(
        self, *, api_key: str = "gemini-emu-key", token: str = "ya29.gemini-emu", project: str = "emu-project"
    ) -> None:
        self.api_key, self.token, self.project = api_key, token, project
        self.requests: list[Recorded] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> GeminiEmulator:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_post("/{tail:.*}", self._dispatch)
            runner = web.AppRunner(app, handle_signals=False)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.SockSite(runner, self._sock).start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="gemini-emulator", daemon=True)
        self._thread.start()
        assert ready.wait(10), "the Gemini emulator did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    @staticmethod
    def _error(status: int, gstatus: str, message: str) -> web.Response:
        body = {"error": {"code": status, "message": message, "status": gstatus}}
        return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")

    async def _embed(self, request: web.Request, model: str) -> web.Response:
        if request.headers.get("x-goog-api-key") != self.api_key:
            return self._error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
        body = orjson.loads(await request.read())
        self.requests.append(Recorded("embed", model, dict(request.headers), body, "embed"))
        embeddings = []
        for one in body.get("requests") or []:
            if one.get("model") != f"models/{model}":
                return self._error(400, "INVALID_ARGUMENT", "each request's model must match the URL's")
            text = "".join(p.get("text", "") for p in one["content"]["parts"])
            embeddings.append({"values": vector_for(text, int(one.get("outputDimensionality") or 4))})
        return web.Response(body=orjson.dumps({"embeddings": embeddings}), content_type="application/json")

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if (embed := _EMBED.match(request.path)) is not None:
            return await self._embed(request, embed.group(1))
        if (found := _GOOGLE_AI.match(request.path)) is not None:
            dialect, model = "google-ai", found.group(1)
            if request.headers.get("x-goog-api-key") != self.api_key:
                return self._error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
        elif (found := _VERTEX.match(request.path)) is not None:
            dialect, model = "vertex", found.group(3)
            if found.group(1) != self.project:
                return self._error(403, "PERMISSION_DENIED", f"Permission denied on project {found.group(1)}")
            if request.headers.get("authorization") != f"Bearer {self.token}":
                return self._error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
        else:
            return self._error(404, "NOT_FOUND", f"no route for {request.path}")
        if request.query.get("alt") != "sse":
            return self._error(400, "INVALID_ARGUMENT", "this emulator streams with alt=sse only")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return self._error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        if not isinstance(body, dict) or not body.get("contents") or "model" in body:
            return self._error(400, "INVALID_ARGUMENT", "contents is required; the model is in the URL")
        scenario = pick_scenario(body, model)
        self.requests.append(Recorded(dialect, model, dict(request.headers), body, scenario))
        if scenario in ("400", "429", "500"):
            gstatus = {"400": "INVALID_ARGUMENT", "429": "RESOURCE_EXHAUSTED", "500": "INTERNAL"}[scenario]
            return self._error(int(scenario), gstatus, f"emulated {gstatus}")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        agent = {"readfile": readfile_chunks, "shell": shell_chunks}.get(scenario)
        chunks = agent(body) if agent is not None else scenario_chunks(scenario, model)
        for chunk in chunks:
            if "pause_s" in chunk:
                await asyncio.sleep(chunk["pause_s"])
                continue
            await response.write(b"data: " + orjson.dumps(chunk) + b"\r\n\r\n")
        await response.write_eof()
        return response
