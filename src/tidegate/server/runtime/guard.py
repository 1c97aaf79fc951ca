"""The limits a hostile client meets before the app (docs/api-edges.md §16), in front of uvicorn's protocol.

uvicorn with httptools enforces none of them: a 64 MB header, 100,000 headers, a head sent a byte
a second and a connection that never sends anything were all kept open. `GuardedHttpProtocol` is
the protocol class `tidegate serve` gives uvicorn's `http` setting (by its import string in uvicorn's
own multiprocess mode): it makes the ordinary httptools protocol and hands it the transport and every byte, after
reading the request heads itself with a parser of its own (httptools, the same parser):
- a head over `max_header_bytes` or with more than `max_headers` headers: 431, closed, nothing more
  read (what a connection can make the gateway hold is bounded by these);
- a head not complete within `header_timeout_s` of its first byte (of the connection, for the
  first request): 408, closed; a body that sends nothing for `body_timeout_s`: closed (the app
  already runs: it sees the client gone);
- more than `max_connections` open on this worker: a new one gets 503 and is closed at once;
- malformed HTTP: 400 in the contract's JSON error shape (uvicorn's answer is plain text).
Only what the client sends passes through here; a response's bytes never do, so nothing of this
runs per streamed chunk. Idle keep-alive connections are uvicorn's own `timeout_keep_alive` (5 s).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ...config.server import ServerConfig


@dataclass(frozen=True, slots=True)
class Limits:
    max_header_bytes: int
    max_headers: int
    header_timeout_s: float
    body_timeout_s: float
    max_connections: int
    body_min_bytes_per_s: int

    @classmethod
    def of(cls, server: ServerConfig) -> Limits:
        return cls(
            server.max_header_bytes,
            server.max_headers,
            server.header_timeout_s,
            server.body_timeout_s,
            server.max_connections,
            server.body_min_bytes_per_s,
        )

    @property
    def body_share(self) -> int:
        """How many connections may be reading a body at once before a new body closes the slowest:
        the rest stay for new clients and for requests without one."""
        return max(1, self.max_connections * 3 // 4)


_limits: Limits | None = None
_open = 0  # connections open on this worker
_reading: set[GuardedHttpProtocol] = set()  # the connections reading a request body


def use_limits(server: ServerConfig) -> None:
    """This process's limits: the worker's `[server]` settings, from the config it loaded for its app
    (server/runtime/factory.py), set before uvicorn makes the first protocol."""
    global _limits
    _limits = Limits.of(server)


def limits() -> Limits:
    if _limits is None:
        raise RuntimeError("the guard's limits are set from the worker's config (use_limits) before it serves")
    return _limits


def _answer(status: int, reason: str, code: str, message: str) -> bytes:
    """An answer the guard writes itself, before the app: `nosniff` as on every answer of the app's
    (server/http.py), so no browser reads its JSON as anything else."""
    body = orjson.dumps({"error": {"code": code, "message": message, "type": "invalid_request_error"}})
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "x-content-type-options: nosniff\r\nconnection: close\r\n\r\n"
    ).encode() + body


TOO_LARGE = _answer(
    431, "Request Header Fields Too Large", "request_header_fields_too_large", "the request head is too large"
)
TIMEOUT = _answer(408, "Request Timeout", "request_timeout", "the request head did not arrive in time")
MALFORMED = _answer(400, "Bad Request", "invalid_request", "malformed HTTP request")
# how much a refused client may still send, and for how long, before the connection is cut
LINGER_BYTES = 1024 * 1024
LINGER_S = 2.0
_NO_BODY = frozenset((b"GET", b"HEAD", b"OPTIONS", b"DELETE"))
SLOW_BODY = _answer(408, "Request Timeout", "request_timeout", "the request body arrived too slowly")
BUSY = _answer(503, "Service Unavailable", "no_provider_available", "this gateway has too many open connections")


class GuardedHttpProtocol(asyncio.Protocol):
    """uvicorn's httptools protocol behind the limits above (constructed as uvicorn constructs it)."""

    def __init__(self, **uvicorn_arguments: Any) -> None:
        self.inner = HttpToolsProtocol(**uvicorn_arguments)
        self.limits = limits()
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.counted = False  # holds a slot of `max_connections`
        self.inner_open = False  # uvicorn's protocol was told of the connection (and not of its end)
        self.in_head = True  # reading a request head (or waiting for the first byte of one)
        self.awaiting_head = True  # the raw bytes before the head's blank line are counted
        self.head_bytes = 0
        self.lines = 0
        self.tail = b""  # the last bytes of the previous read (a blank line split across reads)
        self.requests = 0  # heads begun on this connection
        self.timer: asyncio.TimerHandle | None = None
        self.body_started = 0.0  # when the body being read began (its head's end)
        self.body_bytes = 0  # bytes read since then
        self.dropped = 0  # bytes read and dropped after a refusal

    # --- the connection ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        global _open
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        if _open >= self.limits.max_connections:
            self._refuse(BUSY)  # at once, before the app sees anything
            return
        _open += 1
        self.counted = self.inner_open = True
        self.inner.connection_made(self.transport)
        self._arm(self.limits.header_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._release()
        if self.inner_open:
            self.inner_open = False
            self.inner.connection_lost(exc)

    def _release(self) -> None:
        """The connection no longer holds a slot of `max_connections`."""
        global _open
        _reading.discard(self)
        if self.counted:
            _open -= 1
            self.counted = False

    def eof_received(self) -> None:
        if self.inner_open and not self.closed:
            self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            self._discard(len(data))
            return
        if self.awaiting_head:
            if self._head_too_large(data):
                self._refuse(TOO_LARGE)
                return
        elif self.timer is not None:  # body bytes came: the body's silence starts again
            if self._too_slow(len(data)):
                return
            self._arm(self.limits.body_timeout_s, self._body_timed_out)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # the inner protocol answers upgrades (there are none here)
        except httptools.HttpParserError:
            self._refuse(MALFORMED)
        if not self.closed:
            self.inner.data_received(data)

    # --- the parser's callbacks: where requests begin and end (only these three: each callback the
    # parser finds is a Python call per request; the head's size and lines are counted on raw bytes)
    def on_message_begin(self) -> None:
        self.in_head = True
        self.requests += 1
        if self.timer is None:  # a request on a kept-alive connection: its head gets the same time
            self._arm(self.limits.header_timeout_s, self._head_timed_out)

    def on_headers_complete(self) -> None:
        self.in_head = False
        self._disarm()
        if self.parser.get_method() not in _NO_BODY:  # until the body is complete (often in this read)
            self._arm(self.limits.body_timeout_s, self._body_timed_out)
            self.body_started, self.body_bytes = self.loop.time(), 0
            _reading.add(self)
            if len(_reading) > self.limits.body_share:
                _slowest_reader(self, self.body_started).drop_slow_body()

    def on_message_complete(self) -> None:
        self._disarm()
        _reading.discard(self)
        self.awaiting_head, self.head_bytes, self.lines, self.tail = True, 0, 0, b""  # the next request's head

    def _head_too_large(self, data: bytes) -> bool:
        """Counts the bytes of the head being read, up to its blank line, on the raw bytes: the
        parser holds a header line whole until its end, so its callbacks cannot bound a line that
        never ends."""
        window = self.tail + data
        end = window.find(b"\r\n\r\n")
        if end < 0:
            self.head_bytes += len(data)
            self.lines += data.count(b"\n")
            self.tail = window[-3:]
        else:
            self.head_bytes += end + 4 - len(self.tail)
            self.lines += window.count(b"\n", len(self.tail), end + 2)
            self.awaiting_head, self.tail = False, b""
        # the request line and its headers, a line each
        return self.head_bytes > self.limits.max_header_bytes or self.lines > self.limits.max_headers + 1

    # --- timers and refusals ---------------------------------------------------------------------------
    def _arm(self, seconds: float, callback: Any) -> None:
        self._disarm()
        self.timer = self.loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _head_timed_out(self) -> None:
        self.timer = None
        if self.in_head:
            self._refuse(TIMEOUT)

    def _too_slow(self, more: int) -> bool:
        """After the body's first `body_timeout_s`, it must keep an average of `body_min_bytes_per_s`
        (a byte every few seconds would otherwise hold a connection, and a key's slot, for hours)."""
        self.body_bytes += more
        late = self.loop.time() - self.body_started - self.limits.body_timeout_s
        if late > 0 and self.body_bytes < self.limits.body_min_bytes_per_s * late:
            self.drop_slow_body()
            return True
        return False

    def rate(self, now: float) -> float:
        return self.body_bytes / max(now - self.body_started, 1e-3)

    def drop_slow_body(self) -> None:
        """408 where the app has not answered yet (it is reading this body), then closed: the app
        sees the client gone."""
        _reading.discard(self)
        self._refuse(SLOW_BODY)

    def _body_timed_out(self) -> None:
        self.timer = None
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()  # the app is reading the body: it sees the client gone

    def _refuse(self, answer: bytes) -> None:
        """Answer (on a connection's first request: no response of the app can be on the wire) and
        close; on a later request only close.

        A client still sending (a head too large, a body too slow) would get a TCP reset if the
        socket closed with its bytes unread, and a reset can destroy the answer before the client
        reads it: so the answer goes out with a FIN (`write_eof`), and what the client sends after
        it is read and dropped, up to `LINGER_BYTES` or `LINGER_S`, before the connection closes
        (without counting against `max_connections` meanwhile)."""
        self.closed = True
        self._disarm()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.requests <= 1:
            transport.write(answer)
        self._release()  # while it lingers it holds no slot of `max_connections`
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.timer = self.loop.call_later(LINGER_S, transport.close)

    def _discard(self, size: int) -> None:
        self.dropped += size
        if self.dropped > LINGER_BYTES and self.transport is not None:
            self.transport.abort()


def _slowest_reader(new: GuardedHttpProtocol, now: float) -> GuardedHttpProtocol:
    """The body reader with the lowest rate so far, other than the one just begun (a scan, only
    while bodies hold their share)."""
    return min((p for p in _reading if p is not new), key=lambda p: p.rate(now))
