"""One upstream HTTP/1.1 connection as an asyncio protocol: httptools parses the response, each
read's body bytes wait in a list until `take()`, and reading pauses while `READ_HIGH_WATER` bytes
wait unread (TCP holds the upstream back), or, while a sink is attached, go to the sink as they
arrive. The connection carries one request at a time;
`http_client.HttpClient` pools them and `HttpResponse` reads from them.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Any, Final

import httptools

from .redact import Redactor

READ_HIGH_WATER: Final = 64 * 1024
MAX_HEAD_BYTES: Final = 64 * 1024


class UpstreamDisconnected(ConnectionError):
    """The connection closed before the response was complete."""


class UpstreamHttpError(Exception):
    """The upstream's bytes are not HTTP/1.1 (a bad status line, framing, encoding or oversized head)."""


class Connection(asyncio.Protocol):
    """One upstream connection; it carries one request at a time."""

    __slots__ = (
        "_chunks",
        "_decoder",
        "_head_bytes",
        "_informational",
        "_parser",
        "_paused",
        "buffered",
        "complete",
        "error",
        "headers",
        "headers_done",
        "idle_since",
        "in_use",
        "keep_alive",
        "key",
        "loop",
        "lost",
        "nudged",
        "redactor",
        "sink",
        "status",
        "transport",
        "until_close",
        "waiter",
    )
    # the answer in progress (reset by `_new_answer` for every request)
    status: int
    headers: list[tuple[bytes, bytes]]
    headers_done: bool
    complete: bool
    keep_alive: bool
    until_close: bool
    _head_bytes: int
    # While set, each read's body bytes go to `sink` at the end of the protocol callback that read
    # them, all at once, instead of waking the reader: the relay's direct delivery (`HttpStream.attach`).
    sink: Callable[[bytes], None] | None
    nudged: bool  # `nudge()` woke the reader without bytes (the sink handed something back)
    # masks the request's own credentials in the answer's body (`redact.py`); None: it carried none
    redactor: Redactor | None

    def __init__(self, key: tuple[str, str, int]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        # kept: asyncio.get_running_loop() costs a getpid syscall on Python 3.11, and `wait` runs per read
        self.loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self._chunks: list[bytes] = []
        self._decoder: Any = None
        self.waiter: asyncio.Future[None] | None = None  # what `wait` / `HttpResponse.read_chunk` sleep on
        self._paused = False
        self._informational = False
        self.buffered = 0
        self.lost = False
        self.error: Exception | None = None
        self.in_use = False
        self.idle_since = 0.0
        self._new_answer()

    # -- asyncio.Protocol --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.in_use or self.complete:  # nothing was asked: an idle connection must stay silent
            self._fail(UpstreamHttpError("the upstream sent bytes that answer no request"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            detail = str(exc).strip() or type(exc).__name__
            self._fail(self.error or UpstreamHttpError(f"the upstream sent malformed HTTP ({detail[:120]})"))
            return
        if not self.headers_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._fail(UpstreamHttpError(f"the upstream's response head exceeds {MAX_HEAD_BYTES} bytes"))
        elif self.sink is not None and self._chunks and self.error is None:
            self.sink(self.take())  # the whole read at once (one body part per upstream event inside it)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.until_close and self.headers_done and not self.complete and self.error is None:
            self._finish_body()  # a body delimited by the connection's end has ended
        self._wake()

    # -- httptools callbacks ----------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second answer to one request (or pipelined garbage)
            self._fail(UpstreamHttpError("the upstream sent bytes that answer no request"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.error is not None:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # 100 Continue / 103 Early Hints: the real answer follows
            self._informational = True
            self.headers = []
            return
        self.status = status
        self.headers_done = True
        chunked = length = False
        for name, value in self.headers:
            lname = name.lower()
            if lname == b"content-length":
                length = True
            elif lname == b"transfer-encoding" and value.lower().find(b"chunked") != -1:  # (`in` builds a TypeError)
                chunked = True
            elif lname == b"content-encoding":
                encoding = value.strip().lower()
                if encoding in (b"gzip", b"x-gzip", b"deflate"):
                    self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header
        self.until_close = not (chunked or length) and status not in (204, 304)
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.error is not None:
            return
        if self._decoder is not None:
            try:
                body = self._decoder.decompress(body)
            except zlib.error:
                self._fail(UpstreamHttpError("the upstream's compressed body is corrupt"))
                return
            if not body:
                return
        if self.redactor is not None:
            body = self.redactor.feed(body)
            if not body:
                return
        self._chunks.append(body)
        self.buffered += len(body)
        if self.buffered >= READ_HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        waiter = self.waiter  # `_wake()` inline: once per upstream read
        if waiter is not None and self.sink is None:  # (with a sink: `data_received` hands the read over)
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def on_message_complete(self) -> None:
        if self.error is not None:
            return
        if self._informational:
            self._informational = False
            return
        self.keep_alive = self._parser.should_keep_alive()  # llhttp forgets it once the next message starts
        self._finish_body()
        self._wake()

    # -- used by HttpResponse / HttpClient -------------------------------------------------------------

    def _finish_body(self) -> None:
        if self._decoder is not None:
            try:
                rest = self._decoder.flush()
            except zlib.error:
                rest = b""
            if not self._decoder.eof:
                self.error = UpstreamHttpError("the upstream's compressed body is truncated")
            elif rest:
                if self.redactor is not None:
                    rest = self.redactor.feed(rest)
                self._chunks.append(rest)
                self.buffered += len(rest)
            self._decoder = None
        if self.redactor is not None and (held := self.redactor.end()):
            self._chunks.append(held)
            self.buffered += len(held)
        self.complete = True

    def _fail(self, error: Exception) -> None:
        if self.error is None:
            self.error = error
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def nudge(self) -> None:
        """Wake the reader without bytes: `HttpResponse.next_chunk` returns None once."""
        self.nudged = True
        self._wake()

    def wait(self) -> asyncio.Future[None]:
        """A future that the next parser event resolves; awaited directly (no coroutine layer: a paced
        stream waits once per chunk). A cancelled one is simply replaced by the next `wait`."""
        waiter = self.waiter = self.loop.create_future()
        return waiter

    def take(self) -> bytes:
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self.buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def begin(self, redactor: Redactor | None = None) -> None:
        """A request goes out on this connection: its answer starts from nothing."""
        self.in_use = True
        self._new_answer()
        self.redactor = redactor

    def _new_answer(self) -> None:
        self.status = 0
        self.headers = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.until_close = False
        self._head_bytes = 0
        self.sink = None
        self.nudged = False
        self.redactor = None

    @property
    def reusable(self) -> bool:
        transport = self.transport
        return (
            not self.lost
            and self.error is None
            and transport is not None
            and not transport.is_closing()
            and not self._chunks
            and self.keep_alive
        )

    def abort(self) -> None:
        self.in_use = False
        if self.transport is not None:
            self.transport.abort()
