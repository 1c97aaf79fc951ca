"""A fake tidegate for client tests: a real aiohttp.web server (background thread, free port) that
implements exactly the docs/api-operations.md §7 behaviours the client relies on, plus fault injection.

A generation is a scripted list of SSE frames (in its door's format) that "runs" on its own clock:
frame i is available `frame_interval` seconds after it started, whether or not a client reads. The
first connection of a generation can be cut after `cut_after` frames (abort mid-chunk or clean EOF).
- same key + `Last-Event-ID` -> resume: the frames after that id, following the generation live
  (`resume = "conflict"` answers 409 instead, like a gateway that cannot resume);
- same key without `Last-Event-ID`: running -> 409 `generation_in_progress` + Retry-After; completed
  -> the whole stream again with `Idempotent-Replayed: true`;
- `POST /api/v1/llm/responses/replay`: 200 result / 409 running / 404 unknown / 502 failed.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from aiohttp import web

from tidegate.sse import encode_comment, encode_event


@dataclass
class Script:
    """What the next generation will stream, and which fault to inject."""

    frames: list[bytes]
    result: dict[str, Any]
    failed: bool = False  # the generation ends failed (its last frame should be the failure ending)
    partial_output: str = ""
    cut_after: int | None = None
    cut_mode: Literal["abort", "eof"] = "abort"
    resume: Literal["honour", "conflict"] = "honour"
    frame_interval: float = 0.0
    keepalives_first: int = 0
    content_type: str = "text/event-stream; charset=utf-8"
    extra_headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None  # a whole JSON answer instead of a stream


@dataclass
class Generation:
    id: str
    script: Script
    started: float
    connections: int = 0

    def available(self) -> int:
        if self.script.frame_interval <= 0:
            return len(self.script.frames)
        return min(len(self.script.frames), int((time.monotonic() - self.started) / self.script.frame_interval) + 1)

    def wait_for(self, index: int) -> float:
        """Seconds until frame `index` is available on the generation's own clock."""
        if self.script.frame_interval <= 0:
            return 0.0
        return max(0.0, self.started + index * self.script.frame_interval - time.monotonic() + 0.001)

    @property
    def status(self) -> str:
        if self.available() < len(self.script.frames):
            return "in_progress"
        return "failed" if self.script.failed else "completed"


def chat_frames(texts: list[str], *, model: str = "fake/model", usage: bool = True) -> list[bytes]:
    chunks: list[dict[str, Any]] = []
    for i, t in enumerate(texts):
        delta: dict[str, Any] = {"content": t}
        if i == 0:
            delta["role"] = "assistant"
        chunks.append({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage:
        chunks.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(texts),
                                                "total_tokens": 3 + len(texts)}})  # fmt: skip
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": model}
    frames = [encode_event(orjson.dumps({**base, **c}), id=i) for i, c in enumerate(chunks)]
    frames.append(encode_event("[DONE]", id=len(frames)))
    return frames


def chat_failure_frame(index: int, code: str = "upstream_error", message: str = "the provider dropped") -> bytes:
    chunk = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake/model",
        "provider": "fake-provider",
        "error": {"code": code, "message": message},
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
    }
    return encode_event(orjson.dumps(chunk), id=index)


def native_result(gid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": gid,
        "status": "completed",
        "model": "fake/model",
        "provider": "fake-provider",
        "served_model": "fake-served",
        "output_text": text,
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}],
        "reasoning": None,
        "reasoning_details": [],
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
        **extra,
    }


class FakeGateway:
    def __init__(self, api_key: str = "fake-key") -> None:
        self.api_key = api_key
        self.scripts: list[Script] = []  # consumed one per new generation
        self.generations: dict[str, Generation] = {}  # by idempotency key
        self.requests: list[dict[str, Any]] = []
        self.created = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.base_url = f"http://127.0.0.1:{self.port}"

    # -- lifecycle
    def start(self) -> FakeGateway:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        app = web.Application()
        for path in ("/v1/chat/completions", "/v1/responses", "/api/v1/llm/responses"):
            app.router.add_post(path, self._create)
        app.router.add_post("/api/v1/llm/responses/replay", self._replay)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> FakeGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- handlers
    def _auth(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(401, "unauthorized", "missing or unknown API key", "01JFAKEAUTH")
        return None

    @staticmethod
    def _error(status: int, code: str, message: str, gid: str, **headers: str) -> web.Response:
        body = orjson.dumps({"error": {"code": code, "message": message, "type": "x"}})
        return web.Response(
            status=status,
            body=body,
            content_type="application/json",
            headers={"X-Generation-Id": gid, **headers},
        )

    async def _create(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        key = request.headers.get("Idempotency-Key")
        last = request.headers.get("Last-Event-ID")
        self.requests.append({"path": request.path, "key": key, "last_event_id": last, "body": body})
        denied = self._auth(request)
        if denied is not None:
            return denied
        gen = self.generations.get(key) if key else None
        if gen is not None and not (gen.status == "failed" and last is None):
            if last is None:
                if gen.status == "in_progress":
                    return self._error(409, "generation_in_progress", "still running", gen.id, **{"Retry-After": "1"})
                return await self._stream(request, gen, 0, replayed=True)
            if gen.script.resume == "conflict":
                return self._error(409, "generation_in_progress", "cannot resume", gen.id, **{"Retry-After": "1"})
            return await self._stream(request, gen, int(last) + 1, replayed=gen.status != "in_progress")
        script = self.scripts.pop(0)
        self.created += 1
        gen = Generation(f"01JFAKEGEN{self.created:016d}", script, time.monotonic())
        if key:
            self.generations[key] = gen
        if script.body is not None:
            return web.Response(
                body=script.body,
                content_type="application/json",
                headers={"X-Generation-Id": gen.id, **script.extra_headers},
            )
        return await self._stream(request, gen, 0)

    async def _stream(
        self, request: web.Request, gen: Generation, start: int, replayed: bool = False
    ) -> web.StreamResponse:
        gen.connections += 1
        first = gen.connections == 1
        script = gen.script
        headers = {
            "Content-Type": script.content_type,
            "X-Generation-Id": gen.id,
            "X-Provider": "fake-provider",
            "X-Served-Model": "fake-served",
            **script.extra_headers,
        }
        if replayed:
            headers["Idempotent-Replayed"] = "true"
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        if first:
            for _ in range(script.keepalives_first):
                await resp.write(encode_comment("TIDEGATE PROCESSING"))
        sent = 0
        for i in range(start, len(script.frames)):
            await asyncio.sleep(gen.wait_for(i))
            frame = script.frames[i]
            if first and script.cut_after is not None and sent == script.cut_after:
                if script.cut_mode == "eof":
                    await resp.write_eof()
                    return resp
                await resp.write(frame[: len(frame) // 2])  # half an event, then the line goes dead
                assert request.transport is not None
                request.transport.close()
                return resp
            await resp.write(frame)
            sent += 1
        await resp.write_eof()
        return resp

    async def _replay(self, request: web.Request) -> web.Response:
        key = request.headers.get("Idempotency-Key")
        self.requests.append({"path": request.path, "key": key, "last_event_id": None, "body": await request.read()})
        denied = self._auth(request)
        if denied is not None:
            return denied
        gen = self.generations.get(key or "")
        if gen is None:
            return self._error(404, "generation_not_found", "no generation for this key", "01JFAKEREPLAY")
        if gen.status == "in_progress":
            return self._error(409, "generation_in_progress", "still running", gen.id, **{"Retry-After": "1"})
        if gen.status == "failed":
            body = {
                "error": {"code": "upstream_error", "message": "the provider dropped"},
                "status": "failed",
                "partial_output": gen.script.partial_output,
            }
            return web.Response(status=502, body=orjson.dumps(body), content_type="application/json",
                                headers={"X-Generation-Id": gen.id})  # fmt: skip
        return web.Response(body=orjson.dumps({**gen.script.result, "id": gen.id}), content_type="application/json",
                            headers={"X-Generation-Id": gen.id})  # fmt: skip
