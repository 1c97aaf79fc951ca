"""Minimal ASGI plumbing: the request, body reading with a size cap, JSON and error responses."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from types import CoroutineType
from typing import Any
from urllib.parse import parse_qs

import orjson

from ..errors import InvalidRequest, PayloadTooLarge, TidegateError
from ..resume import Resume
from .runtime.shortcuts import chunked_cycle, write_chunk

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
# ASGI scope entries a refused request leaves for its record and access-log line (server/rejections.py):
# the body's `model` as sent, and the error answered
ASKED_MODEL = "tidegate.asked_model"
ERROR = "tidegate.error"
# no browser may read a JSON error or a stream as a script or a page (the console is served here too)
_NOSNIFF = (b"x-content-type-options", b"nosniff")


@dataclass(slots=True)
class Request:
    scope: Scope
    receive: Receive
    send: Send
    generation_id: str | None = None
    path_params: dict[str, str] = field(default_factory=dict)
    started: bool = False  # response start sent
    status: int = 0  # the status sent (0: none yet), for the request metric
    _headers: dict[str, str] | None = None  # decoded on first use, dropped when a stream starts
    _unfinished: Awaitable[Any] | None = None  # a `write_now` the client's flow control held up
    _chunked: Any = None  # the server's request cycle once a chunked body started (`shortcuts.py`)
    # headers every answer to this request carries from here on (a key's X-RateLimit-*, docs/api-operations.md §11)
    extra_headers: dict[str, str] | None = None
    # called once the body is read (or reading it failed): frees the key's unfinished-body slot
    body_read: Callable[[], None] | None = None
    # the error body of a door that speaks another API's shape (server/doors/messages/: Anthropic's)
    error_shape: Callable[[TidegateError], dict[str, Any]] | None = None

    @classmethod
    def from_scope(cls, scope: Scope, receive: Receive, send: Send) -> Request:
        return cls(scope=scope, receive=receive, send=send)

    def header(self, name: str, default: str | None = None) -> str | None:
        """One request header (`name` in lower case); repeated ones joined with ", ". The headers are
        decoded once, on the first call (a request reads ~5 before it answers), and the copy is
        dropped when a response starts (a stream would keep it for its whole life)."""
        headers = self._headers
        if headers is None:
            raw = self.scope.get("headers", ())
            if not isinstance(raw, list | tuple):
                raw = list(raw)
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
            if len(headers) != len(raw):  # a name came more than once: its values joined, in order
                headers = {}
                for k, v in raw:
                    key = k.decode("latin-1").lower()
                    value = v.decode("latin-1")
                    headers[key] = f"{headers[key]}, {value}" if key in headers else value
            self._headers = headers
        return headers.get(name, default)

    def query(self, name: str) -> str | None:
        """One query-string parameter (the first when repeated), decoded; None when absent."""
        raw = self.scope.get("query_string", b"")
        if not raw:
            return None
        values = parse_qs(raw.decode("latin-1"), keep_blank_values=True).get(name)
        return values[0] if values else None

    @property
    def method(self) -> str:
        return str(self.scope["method"])

    @property
    def path(self) -> str:
        return str(self.scope["path"])

    @property
    def client_host(self) -> str:
        client = self.scope.get("client")
        return str(client[0]) if client else ""

    async def body(self, limit: int) -> bytes:
        """The whole body, or 413 as soon as it exceeds `limit` (chunked bodies included)."""
        try:
            return await self._read_body(limit)
        finally:
            if self.body_read is not None:
                self.body_read()
                self.body_read = None

    async def _read_body(self, limit: int) -> bytes:
        declared = self.header("content-length")
        if declared is not None:
            try:
                if int(declared) > limit:
                    raise PayloadTooLarge(f"the request body is {declared} bytes; the limit is {limit} bytes")
            except ValueError:
                raise InvalidRequest("Content-Length is not a number") from None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise InvalidRequest("the client disconnected while sending the body")
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(f"the request body exceeds the limit of {limit} bytes")
                chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def json(self, limit: int) -> Any:
        raw = await self.body(limit)
        if not raw.strip():
            raise InvalidRequest("the request body is empty; send a JSON object")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InvalidRequest(f"the request body is not valid JSON: {exc.msg} at position {exc.pos}") from None
        if type(data) is dict and type(model := data.get("model")) is str:
            self.scope[ASKED_MODEL] = model  # (one dict write: a refusal's record names what was asked)
        return data

    def base_headers(self, extra: dict[str, str] | None = None) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        if self.generation_id is not None:
            out.append((b"x-generation-id", self.generation_id.encode()))
        for k, v in (extra or {}).items():
            out.append((k.lower().encode("latin-1"), v.encode("latin-1")))
        if self.extra_headers:
            for k, v in self.extra_headers.items():
                out.append((k.encode("latin-1"), v.encode("latin-1")))
        return out

    async def start(
        self, status: int, content_type: str, extra: dict[str, str] | None = None, body: bytes = b""
    ) -> None:
        """Start a response whose body follows in `write`s; `body` is the first of it."""
        headers = [(b"content-type", content_type.encode()), *self.base_headers(extra)]
        if content_type.startswith("text/event-stream"):
            headers += [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
        await self._send_head(status, headers, body, True)

    async def write(self, data: bytes, more: bool = True) -> None:
        if self._unfinished is not None:  # the bytes `write_now` could not write go first
            unfinished, self._unfinished = self._unfinished, None
            await unfinished
        elif more and data and self._chunked is not None and write_chunk(self._chunked, data):
            return
        await self.send({"type": "http.response.body", "body": data, "more_body": more})

    def write_now(self, data: bytes) -> bool:
        """Write body bytes without a task (from a protocol callback: the relay's direct delivery).
        The server's `send` runs by hand (or its transport takes the chunk, `shortcuts.py`); it
        writes at once unless the client's flow control holds it up: then False, and the rest of
        that write runs in the request's task, first thing in its next `write` (so the bytes keep
        their order)."""
        if self._unfinished is not None:
            raise RuntimeError("an earlier write is still held up: `write` it first")
        if data and self._chunked is not None and write_chunk(self._chunked, data):
            return True
        sending = self.send({"type": "http.response.body", "body": data, "more_body": True})
        if type(sending) is not CoroutineType:  # a server whose send is not a coroutine: its task awaits it
            self._unfinished = sending
            return False
        try:
            pending = sending.send(None)
        except StopIteration:
            return True
        self._unfinished = Resume(sending, pending)
        return False

    @property
    def write_held(self) -> bool:
        """Whether a `write_now` waits for the client (the next `write` finishes it first)."""
        return self._unfinished is not None

    async def respond_bytes(
        self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None
    ) -> None:
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
            *self.base_headers(extra),
        ]
        await self._send_head(status, headers, body, False)

    async def _send_head(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, more: bool) -> None:
        """The head and, unless it is empty and more follows, a first body message."""
        self.status = status
        self._headers = None
        headers.append(_NOSNIFF)  # every answer, once in its head: a stream's chunks never pass here
        start = {"type": "http.response.start", "status": status, "headers": headers}
        if more and not body:
            await self.send(start)
            self.started = True
        else:
            await self.send(start)
            self.started = True
            await self.send({"type": "http.response.body", "body": body, "more_body": more})
        if more:
            self._chunked = chunked_cycle(self.send)

    async def respond_json(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
        await self.respond_bytes(status, orjson.dumps(payload), "application/json", extra)

    async def respond_error(self, error: TidegateError, extra: dict[str, str] | None = None) -> None:
        headers = dict(extra or {})
        if error.headers:
            headers.update(error.headers)
        if error.retry_after is not None:  # whole seconds, up: a client that waits that long gets in
            headers["retry-after"] = str(max(1, math.ceil(error.retry_after - 1e-6)))
        body = error.body() if self.error_shape is None else self.error_shape(error)
        self.scope[ERROR] = error
        await self.respond_json(error.status, body, headers)


Handler = Callable[[Request], Awaitable[None]]
