"""The load generator's streaming client: HTTP/1.1 keep-alive connections as asyncio protocols.

Each connection parses its response with httptools and hands each read's body bytes, with the time
they arrived, straight to the stream's `SSEStats` inside `data_received`: no task wakes up per chunk
(one per stream, when its response ends). aiohttp's stream reader cost ~38 µs of CPU per paced
chunk here, which put the emulator + load generator core near its ceiling at 256 streams and gave
the *direct* column TTFT p99 of 36-89 ms: the harness, not the target, was being measured. The
SSE rules are the ones `load.py` always applied (line by line, comments counted when they arrive).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httptools

OPENAI_CONTENT = re.compile(rb'"content": ?"[^"]')


class SSEStats:
    """One stream's SSE, parsed as it arrives, into the load generator's per-stream record."""

    __slots__ = (
        "anthropic", "buf", "gemini", "last_any", "last_content", "measured", "payload", "rec", "responses", "run", "t0"
    )  # fmt: skip

    def __init__(self, run: Any, rec: Any, anthropic: bool, measured: bool, t0: float, api: str = "") -> None:
        self.run = run
        self.rec = rec
        self.anthropic = anthropic
        self.gemini = api == "gemini"  # no terminal event: the chunk with finishReason ends the answer
        self.responses = api == "responses"
        self.measured = measured
        self.t0 = t0
        self.buf = b""
        self.payload: bytes | None = None
        self.last_content: float | None = None
        self.last_any = t0

    def feed(self, data: bytes, now: float) -> None:
        buf = self.buf + data if self.buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        if b"\n" not in buf:
            self.buf = buf
            return
        *lines, self.buf = buf.split(b"\n")
        rec = self.rec
        for line in lines:
            if line:
                if line.startswith(b"data:"):
                    part = line[5:].lstrip(b" ") if line[5:6] == b" " else line[5:]
                    self.payload = part if self.payload is None else self.payload + b"\n" + part
                elif line.startswith(b":"):  # a keep-alive comment counts when it arrives
                    self.run.keepalive_ms.append((now - self.last_any) * 1000.0)
                    self.last_any = now
                continue
            if self.payload is None:
                continue
            self.last_any = now
            event, self.payload = self.payload, None
            if self.anthropic:
                if b'"message_stop"' in event:
                    rec.done = True
                is_content = b'"text_delta"' in event
                is_error = b'"type":"error"' in event
            elif self.responses:
                if b'"response.completed"' in event:
                    rec.done = True
                is_content = b'"response.output_text.delta"' in event
                is_error = b'"response.failed"' in event
            elif self.gemini:
                if b'"finishReason"' in event:
                    rec.done = True
                is_content = b'"text":"' in event and b'"text":""' not in event
                is_error = event.startswith(b'{"error"')
            else:
                if event == b"[DONE]":
                    rec.done = True
                    continue
                is_content = OPENAI_CONTENT.search(event) is not None
                is_error = b'"finish_reason":"error"' in event or event.startswith(b'{"error"')
            rec.chunks += 1
            if is_error:
                rec.error = "stream_error"
            if is_content:
                rec.content += 1
                if rec.ttft_ms is None:
                    rec.ttft_ms = (now - self.t0) * 1000.0
                elif self.last_content is not None and self.measured:
                    self.run.gaps_ms.append((now - self.last_content) * 1000.0)
                self.last_content = now


class Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time. `request` resolves when the response has
    ended (or raises when the connection broke first)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.stats: SSEStats | None = None
        self.parts: list[bytes] = []  # this read's body bytes (one per HTTP chunk)
        self.done: asyncio.Future[None] | None = None
        self.now = 0.0
        self.status = 0
        self.opened_at = 0.0
        self.ended_at = 0.0
        self.complete = False
        self.keep_alive = False
        self.lost = False
        self.on_open: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def request(self, head: bytes, stats: SSEStats, on_open: Any) -> asyncio.Future[None]:
        assert self.transport is not None
        self.parser = httptools.HttpResponseParser(self)
        self.stats = stats
        self.on_open = on_open
        self.status = 0
        self.parts = []
        self.complete = False
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(head)
        return self.done

    @property
    def reusable(self) -> bool:
        transport = self.transport
        open_ = transport is not None and not transport.is_closing()
        return self.complete and self.keep_alive and not self.lost and open_

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol

    def data_received(self, data: bytes) -> None:
        self.now = time.perf_counter()
        if self.parser is None:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._end(exc)
            return
        self._flush()

    def _flush(self) -> None:
        """One read's body (all its HTTP chunks) to the SSE parser at once, as a stream reader would."""
        parts = self.parts
        if parts:
            self.parts = []
            if self.stats is not None:
                self.stats.feed(parts[0] if len(parts) == 1 else b"".join(parts), self.now)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.complete:
            self._end(exc or ConnectionResetError("the server closed the connection"))

    # -- httptools callbacks

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        self.status = self.parser.get_status_code()
        self.opened_at = self.now
        if self.on_open is not None:
            self.on_open(self.status, self.now)

    def on_body(self, body: bytes) -> None:
        if self.status == 200:
            self.parts.append(body)

    def on_message_complete(self) -> None:
        assert self.parser is not None
        self._flush()
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self.ended_at = self.now
        self._end(None)

    def _end(self, exc: BaseException | None) -> None:
        done, self.done = self.done, None
        self.stats = None
        if done is not None and not done.done():
            if exc is None:
                done.set_result(None)
            else:
                done.set_exception(exc)


class Pool:
    """Idle keep-alive connections to one host (the most recently used first)."""

    def __init__(self, host: str, port: int, connect_timeout_s: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[Connection] = []

    async def acquire(self) -> Connection:
        while self.idle:
            conn = self.idle.pop()
            if conn.reusable:
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(Connection, self.host, self.port), self.connect_timeout_s
        )
        return conn

    def release(self, conn: Connection) -> None:
        if conn.reusable:
            self.idle.append(conn)
        else:
            conn.close()


def request_head(method: str, host: str, port: int, path: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: */*"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
