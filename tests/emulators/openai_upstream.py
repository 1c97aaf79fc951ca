"""A fault-injecting OpenAI-compatible upstream: a real aiohttp.web server on its own thread.

`POST /v1/chat/completions` answers in the exact Chat Completions streaming wire format (UPSTREAMS §4:
`data: <chunk JSON>` frames, `data: [DONE]`, the usage chunk with `choices: []` only when
`stream_options.include_usage` is true). The scenario is chosen per request by the model id the
route sends: `<scenario>` or `<scenario>:<number>` (a duration in seconds or a status parameter).
Chunk JSON is written with Python's `json.dumps` defaults (spaces after separators, non-ASCII escaped)
so a test can tell forwarded bytes from re-serialised ones.

Scenarios: text, reasoning, reasoning_content, reasoning_details, tools, no-usage, http-401, http-403,
http-429[:retry_after], http-500, http-503, http-400, slow-first-byte:s, late-text:s (text after s),
headers-then-silence:s,
silence:s (two chunks, s seconds of nothing, then the rest), error-first, error-mid, error-late:s
(headers, s seconds of nothing, then an error chunk), drop, no-done,
invalid-json, oversize, slow[:interval] (a chunk every interval until the client goes away).
parallel-tools (text, then two interleaved calls with the same names and arguments as the Anthropic
emulator's `tools` scenario: the cross-provider conformance suite compares them), eof-mid (three
chunks, then a clean end of the body: no finish chunk, no [DONE]), overbill:n (text whose usage
reports n completion tokens: a hostile or mistaken bill), echo-head (a debugging proxy's answer: the
request's headers, the provider key among them, as the text of one delta, that frame written in two
TCP writes split inside the key), mcp-agent (calls the tool the user
names, then answers with its result: the gateway's MCP loop), cut (text ended with finish_reason
`length`), no-finish (text, then [DONE] with no chunk saying a finish reason), big:n (n characters
of text, the last user message repeated, in 16 KiB deltas), prefix-cache (text whose usage
reports all 11 prompt tokens as `cached_tokens` once this emulator has seen the request's first
message: a provider's prompt cache).

Every request is recorded (body, headers, the data payloads sent, when the client connection closed)
and counted per scenario; `GET /_stats` returns the same as JSON.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

OVERSIZE_BYTES = 5 * 1024 * 1024
TEXT_PIECES = ["Hello", ", wor", "ld \u00e9\u2713", "!"]


@dataclass
class Recorded:
    n: int
    scenario: str
    arg: float | None
    body: dict[str, Any]
    headers: dict[str, str]
    received_at: float
    sent: list[bytes] = field(default_factory=list)  # data payloads, exactly as written
    done_sent: bool = False
    completed: bool = False
    closed_at: float | None = None  # when the client connection was seen closed
    cached: int | None = None  # `prefix-cache`: the cached prompt tokens its usage reports

    def stats(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "scenario": self.scenario,
            "body": self.body,
            "sent": len(self.sent),
            "done_sent": self.done_sent,
            "completed": self.completed,
            "closed_at": self.closed_at,
        }


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


class _Closed(Exception):
    pass


REFUSED_KEY = "sk-refused-by-upstream"  # the one key the emulator's model list answers 401 to


class OpenAIUpstream:
    """Start with `start()` (or as a context manager); `base_url` ends in `/v1`."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.prefixes: set[str] = set()  # the first messages `prefix-cache` has seen
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ---- lifecycle -------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> OpenAIUpstream:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_post("/v1/chat/completions", self._chat)
            app.router.add_get("/v1/models", self._models)
            app.router.add_get("/_stats", self._stats)
            runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.SockSite(runner, sock).start())
            self._runner = runner
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="openai-upstream", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the OpenAI emulator did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> OpenAIUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what tests read ------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._lock:
            for r in self.requests:
                out[r.scenario] = out.get(r.scenario, 0) + 1
        return out

    def last(self, scenario: str | None = None) -> Recorded:
        with self._lock:
            found = [r for r in self.requests if scenario is None or r.scenario == scenario]
        if not found:
            raise AssertionError(f"the emulator saw no request for {scenario!r}")
        return found[-1]

    def for_model(self, model: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.body.get("model") == model]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.prefixes.clear()

    # ---- handlers ---------------------------------------------------------------------------------
    async def _stats(self, request: web.Request) -> web.Response:
        with self._lock:
            reqs = [r.stats() for r in self.requests]
        return web.json_response({"counts": self.counts(), "requests": reqs})

    async def _models(self, request: web.Request) -> web.Response:
        """`GET /v1/models` (not recorded: no generation): the list OpenAI answers, or its 401 for the
        key `REFUSED_KEY`."""
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        if key == REFUSED_KEY:
            error = {"message": f"Incorrect API key provided: {key}.", "type": "invalid_request_error"}
            return web.json_response({"error": {**error, "param": None, "code": "invalid_api_key"}}, status=401)
        model = {"id": "text", "object": "model", "created": 1686935002, "owned_by": "emulator"}
        return web.json_response({"object": "list", "data": [model]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": {"message": "bad json", "type": "invalid_request_error"}}, status=400)
        model = str(body.get("model", ""))
        scenario, _, arg_text = model.partition(":")
        arg = float(arg_text) if arg_text else None
        with self._lock:
            rec = Recorded(
                n=len(self.requests) + 1,
                scenario=scenario,
                arg=arg,
                body=body,
                headers={k.lower(): v for k, v in request.headers.items()},
                received_at=time.monotonic(),
            )
            self.requests.append(rec)
        if scenario == "prefix-cache":  # a provider's prompt cache: text, cached when its prefix was seen
            rec.cached = self._cached_prefix(body)
            scenario = "text"
        if scenario.startswith("http-"):
            return self._http_error(rec, int(scenario[5:]))
        if scenario in ("slow-first-byte", "late-text"):
            if not await self._sleep(request, rec, arg if arg is not None else 30.0):
                return web.Response(status=499)
            if scenario == "late-text":  # a slow but working upstream: then the text scenario
                scenario = "text"
        # api.openai.com answers through Cloudflare, which sets a bot-management cookie on responses
        # (`Secure` there; left off here so that an HTTP client with a cookie jar would send it back).
        cookie = f"__cf_bm=emu-{rec.n}; path=/; HttpOnly; SameSite=None"
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Set-Cookie": cookie})
        await response.prepare(request)
        try:
            await self._play(request, response, rec, scenario, arg, model)
        except (_Closed, ConnectionResetError):
            rec.closed_at = rec.closed_at or time.monotonic()
        return response

    def _cached_prefix(self, body: dict[str, Any]) -> int:
        """The prompt tokens this upstream's cache holds: all 11 when it has seen the first message."""
        messages = body.get("messages") or [None]
        prefix = json.dumps(messages[0], sort_keys=True)
        with self._lock:
            seen = prefix in self.prefixes
            self.prefixes.add(prefix)
        return 11 if seen else 0

    def _http_error(self, rec: Recorded, status: int) -> web.Response:
        key = rec.headers.get("authorization", "").removeprefix("Bearer ")
        messages = {
            400: ("invalid_request_error", "Unrecognized request argument supplied: bogus"),
            401: ("invalid_request_error", f"Incorrect API key provided: {key}."),
            403: ("permission_error", "You are not allowed to use this model."),
            429: ("rate_limit_error", "Rate limit reached for requests"),
            500: ("server_error", "The server had an error while processing your request."),
            503: ("server_error", "The engine is currently overloaded, please try again later"),
        }
        kind, message = messages.get(status, ("server_error", "error"))
        headers = {}
        if status == 429:
            headers["Retry-After"] = str(int(rec.arg) if rec.arg is not None else 7)
        payload = {"error": {"message": message, "type": kind, "param": None, "code": None}}
        return web.Response(status=status, body=_dumps(payload), content_type="application/json", headers=headers)

    # ---- streaming --------------------------------------------------------------------------------
    @staticmethod
    def _gone(request: web.Request) -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    async def _sleep(self, request: web.Request, rec: Recorded, seconds: float) -> bool:
        """Sleep, watching the client connection; False (and `closed_at` set) if it went away."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._gone(request):
                rec.closed_at = time.monotonic()
                return False
            await asyncio.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
        return True

    async def _send(self, request: web.Request, response: web.StreamResponse, rec: Recorded, payload: bytes) -> None:
        if self._gone(request):
            rec.closed_at = time.monotonic()
            raise _Closed
        rec.sent.append(payload)
        await response.write(b"data: " + payload + b"\n\n")

    async def _done(self, response: web.StreamResponse, rec: Recorded) -> None:
        await response.write(b"data: [DONE]\n\n")
        rec.done_sent = True
        rec.completed = True
        await response.write_eof()

    def _chunk(self, rec: Recorded, model: str, delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": f"chatcmpl-emu{rec.n}",
            "object": "chat.completion.chunk",
            "created": 1700000000 + rec.n,
            "model": model,
            "system_fingerprint": "fp_emu",
        }
        if delta is None:
            chunk["choices"] = []
        else:
            chunk["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if self._include_usage(rec):
            chunk["usage"] = None
        return _dumps(chunk)

    @staticmethod
    def _include_usage(rec: Recorded) -> bool:
        opts = rec.body.get("stream_options")
        return isinstance(opts, dict) and opts.get("include_usage") is True

    def _usage_chunk(self, rec: Recorded, model: str, reasoning: int = 0, completion: int | None = None) -> bytes:
        completion = 7 + reasoning if completion is None else completion
        return _dumps(
            {
                "id": f"chatcmpl-emu{rec.n}",
                "object": "chat.completion.chunk",
                "created": 1700000000 + rec.n,
                "model": model,
                "system_fingerprint": "fp_emu",
                "choices": [],
                "usage": {
                    "prompt_tokens": 11,
                    "completion_tokens": completion,
                    "total_tokens": 11 + completion,
                    "prompt_tokens_details": {
                        "cached_tokens": 3 if rec.cached is None else rec.cached,
                        "audio_tokens": 0,
                    },
                    "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0},
                },
            }
        )

    def _text_chunks(self, rec: Recorded, model: str) -> list[bytes]:
        out = [self._chunk(rec, model, {"role": "assistant", "content": "", "refusal": None})]
        out += [self._chunk(rec, model, {"content": piece}) for piece in TEXT_PIECES]
        out.append(self._chunk(rec, model, {}, "stop"))
        return out

    def _agent_chunks(self, rec: Recorded, model: str) -> list[bytes]:
        """`mcp-agent`: a model that uses the tools it is given. The first user message `call NAME`
        (or `always call NAME`) names the tool; after a tool result it answers `Tool said: <result>`,
        unless told `always` (a model that never stops calling: the gateway's turn limit ends it)."""
        messages = rec.body.get("messages") or []
        ask = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        last = messages[-1] if messages else {}
        if last.get("role") == "tool" and not ask.startswith("always "):
            text = f"Tool said: {last.get('content')}"
            return [
                self._chunk(rec, model, {"role": "assistant", "content": text}),
                self._chunk(rec, model, {}, "stop"),
            ]
        name = ask.removeprefix("always ").removeprefix("call ").strip()
        turn = sum(1 for m in messages if m.get("role") == "tool")
        call = {"index": 0, "id": f"call_{turn}", "type": "function", "function": {"name": name, "arguments": ""}}
        return [
            self._chunk(rec, model, {"role": "assistant", "content": None, "tool_calls": [call]}),
            self._chunk(rec, model, {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 2, "b": 3}'}}]}),
            self._chunk(rec, model, {}, "tool_calls"),
        ]

    async def _play(
        self,
        request: web.Request,
        response: web.StreamResponse,
        rec: Recorded,
        scenario: str,
        arg: float | None,
        model: str,
    ) -> None:
        async def send_all(payloads: list[bytes], gap: float = 0.0) -> None:
            for p in payloads:
                await self._send(request, response, rec, p)
                if gap:
                    await asyncio.sleep(gap)

        usage_on = self._include_usage(rec)
        chunk = self._chunk
        if scenario in (
            "text",
            "no-usage",
            "no-done",
            "headers-then-silence",
            "silence",
            "overbill",
            "cut",
            "no-finish",
        ):
            payloads = self._text_chunks(rec, model)
            if scenario == "cut":  # the text, ended by the output cap
                payloads[-1] = self._chunk(rec, model, {}, "length")
            if scenario == "no-finish":  # no chunk says a finish reason: [DONE] alone ends the answer
                payloads.pop()
            if scenario == "headers-then-silence":
                if not await self._sleep(request, rec, arg if arg is not None else 30.0):
                    raise _Closed
            if scenario == "silence":
                await send_all(payloads[:2])
                if not await self._sleep(request, rec, arg if arg is not None else 30.0):
                    raise _Closed
                payloads = payloads[2:]
            await send_all(payloads)
            if usage_on and scenario != "no-usage":
                billed = int(arg) if scenario == "overbill" and arg is not None else None
                await self._send(request, response, rec, self._usage_chunk(rec, model, completion=billed))
            if scenario == "no-done":
                rec.completed = True
                await response.write_eof()
                return
            await self._done(response, rec)
        elif scenario in ("reasoning", "reasoning_content"):
            payloads = [chunk(rec, model, {"role": "assistant", "content": None})]
            for piece in ("Let me ", "think \u00fcber it."):
                payloads.append(chunk(rec, model, {scenario: piece}))
            payloads.append(chunk(rec, model, {"content": "42"}))
            payloads.append(chunk(rec, model, {}, "stop"))
            await send_all(payloads)
            if usage_on:
                await self._send(request, response, rec, self._usage_chunk(rec, model, reasoning=5))
            await self._done(response, rec)
        elif scenario == "reasoning_details":
            details_text = {"type": "reasoning.text", "text": "Thinking.", "signature": "sig-abc", "index": 0}
            details_enc = {"type": "reasoning.encrypted", "data": "b3BhcXVl", "index": 1}
            payloads = [
                chunk(rec, model, {"role": "assistant", "reasoning": "Thinking.", "reasoning_details": [details_text]}),
                chunk(rec, model, {"reasoning": None, "reasoning_details": [details_enc]}),
                chunk(rec, model, {"content": "Done."}),
                chunk(rec, model, {}, "stop"),
            ]
            await send_all(payloads)
            if usage_on:
                await self._send(request, response, rec, self._usage_chunk(rec, model, reasoning=3))
            await self._done(response, rec)
        elif scenario == "tools":
            call_a = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": ""}}
            call_b = {"index": 1, "id": "call_b", "type": "function", "function": {"name": "clock", "arguments": ""}}
            payloads = [
                chunk(rec, model, {"role": "assistant", "content": None, "tool_calls": [call_a]}),
                chunk(rec, model, {"tool_calls": [call_b]}),
                chunk(rec, model, {"tool_calls": [{"index": 0, "function": {"arguments": '{"q": "pa'}}]}),
                chunk(rec, model, {"tool_calls": [{"index": 1, "function": {"arguments": '{"tz": "UTC"}'}}]}),
                chunk(rec, model, {"tool_calls": [{"index": 0, "function": {"arguments": 'ris"}'}}]}),
                chunk(rec, model, {}, "tool_calls"),
            ]
            await send_all(payloads)
            if usage_on:
                await self._send(request, response, rec, self._usage_chunk(rec, model))
            await self._done(response, rec)
        elif scenario == "parallel-tools":
            call_a = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": ""}}
            call_b = {"index": 1, "id": "call_b", "type": "function", "function": {"name": "weather", "arguments": ""}}
            fragments = [(0, '{"q": "pa'), (1, '{"city": "Paris", '), (0, 'ris"}'), (1, '"days": 2}')]
            payloads = [
                chunk(rec, model, {"role": "assistant", "content": "Let me check."}),
                chunk(rec, model, {"tool_calls": [call_a]}),
                chunk(rec, model, {"tool_calls": [call_b]}),
            ]
            payloads += [
                chunk(rec, model, {"tool_calls": [{"index": i, "function": {"arguments": a}}]}) for i, a in fragments
            ]
            payloads.append(chunk(rec, model, {}, "tool_calls"))
            await send_all(payloads)
            if usage_on:
                await self._send(request, response, rec, self._usage_chunk(rec, model))
            await self._done(response, rec)
        elif scenario in ("error-first", "error-mid", "error-late"):
            if scenario == "error-late" and not await self._sleep(request, rec, arg if arg is not None else 1.0):
                raise _Closed
            if scenario == "error-mid":
                await send_all(self._text_chunks(rec, model)[:3], gap=0.05)
                await asyncio.sleep(0.05)
            err = {
                "error": {"message": "The server is overloaded", "type": "server_error", "param": None, "code": None}
            }
            await self._send(request, response, rec, _dumps(err))
            rec.completed = True
            await response.write_eof()
        elif scenario == "drop":
            await send_all(self._text_chunks(rec, model)[:3], gap=0.05)
            await asyncio.sleep(0.05)
            rec.completed = True
            transport = request.transport
            if transport is not None:
                transport.abort()
            raise _Closed
        elif scenario == "eof-mid":  # a clean end of the body mid-answer: no finish chunk, no [DONE]
            await send_all(self._text_chunks(rec, model)[:3], gap=0.05)
            await asyncio.sleep(0.05)
            rec.completed = True
            await response.write_eof()
        elif scenario in ("invalid-json", "oversize"):
            await send_all(self._text_chunks(rec, model)[:3], gap=0.05)
            await asyncio.sleep(0.05)
            if scenario == "invalid-json":
                bad = b'{"id": "chatcmpl-emu", "choices": [{"delta": {"content": "x"'
            else:
                bad = b'{"pad": "' + b"A" * OVERSIZE_BYTES + b'"}'
            await self._send(request, response, rec, bad)
            await asyncio.sleep(0.2)
            await self._done(response, rec)
        elif scenario == "big":  # `big:n`: n characters of text in 16 KiB deltas
            size = int(arg or 65536)
            text = (rec.body.get("messages") or [{}])[-1].get("content", "") or "x"
            body = (str(text) * (size // max(1, len(str(text))) + 1))[:size]
            pieces = [body[i : i + 16384] for i in range(0, size, 16384)]
            payloads = [chunk(rec, model, {"role": "assistant", "content": ""})]
            payloads += [chunk(rec, model, {"content": p}) for p in pieces]
            await send_all([*payloads, chunk(rec, model, {}, "stop")])
            if usage_on:
                await self._send(request, response, rec, self._usage_chunk(rec, model))
            await self._done(response, rec)
        elif scenario == "slow":
            interval = arg if arg is not None else 0.1
            await self._send(request, response, rec, chunk(rec, model, {"role": "assistant", "content": ""}))
            for i in range(int(120 / interval)):
                await self._send(request, response, rec, chunk(rec, model, {"content": f"tick{i} "}))
                if not await self._sleep(request, rec, interval):
                    raise _Closed
            await self._done(response, rec)
        elif scenario == "echo-head":
            said = " | ".join(f"{k}: {v}" for k, v in rec.headers.items())
            frame = b"data: " + chunk(rec, model, {"role": "assistant", "content": f"you sent {said}"}) + b"\n\n"
            key = rec.headers.get("authorization", "").removeprefix("Bearer ").encode()
            cut = frame.find(key) + len(key) // 2 if key else len(frame) // 2
            await response.write(frame[:cut])
            await asyncio.sleep(0.05)  # two reads on the gateway's side, the key split between them
            await response.write(frame[cut:])
            rec.sent.append(frame)
            if usage_on:
                await self._send(request, response, rec, self._usage_chunk(rec, model))
            await self._done(response, rec)
        elif scenario == "mcp-agent":
            await send_all(self._agent_chunks(rec, model))
            if usage_on:
                await self._send(request, response, rec, self._usage_chunk(rec, model))
            await self._done(response, rec)
        else:
            err = {"error": {"message": f"unknown scenario {scenario!r}", "type": "invalid_request_error"}}
            await self._send(request, response, rec, _dumps(err))
            await response.write_eof()


def tidegate_toml(
    store_url: str,
    providers: dict[str, dict[str, Any]],
    models: dict[str, list[tuple[str, str]]],
    server: dict[str, Any] | None = None,
) -> str:
    """A tidegate config: `providers` name → keys, `models` public id → [(provider, served model)]."""

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        return json.dumps(v)

    lines = ["[server]", 'host = "127.0.0.1"']
    lines += [f"{k} = {value(v)}" for k, v in (server or {}).items()]
    lines += ["[store]", f"url = {json.dumps(store_url)}"]
    for name, keys in providers.items():
        lines.append(f"[providers.{json.dumps(name)}]")
        lines += [f"{k} = {value(v)}" for k, v in keys.items()]
    for mid, routes in models.items():
        lines.append(f"[models.{json.dumps(mid)}]")
        rs = ", ".join(f"{{ provider = {json.dumps(p)}, model = {json.dumps(m)} }}" for p, m in routes)
        lines.append(f"routes = [{rs}]")
    return "\n".join(lines) + "\n"
