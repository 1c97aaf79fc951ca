"""The limits a hostile client meets before the app (CONTRACT §16), in front of uvicorn's protocol.

uvicorn with httptools enforces none of them: a 64 MB header, 100,000 headers, a head sent a byte
a second and a connection that never sends anything were all kept open. `GuardedHttpProtocol` is
the protocol `tidegate serve` names in uvicorn's `http` setting (an import string, as uvicorn takes
its own): it makes the ordinary httptools protocol and hands it the transport and every byte, after
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
import os
from dataclasses import dataclass
from typing import Any, cast

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True, slots=True)
class Limits:
    max_header_bytes: int = 65536
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 4096


_limits: Limits | None = None
_open = 0  # connections open on this worker


def limits() -> Limits:
    """This process's limits, from the config `tidegate serve` names in `$TIDEGATE_CONFIG`."""
    global _limits
    if _limits is None:
        from ..config import load_config

        server = load_config(os.environ.get("TIDEGATE_CONFIG") or None).server
        _limits = Limits(
            server.max_header_bytes,
            server.max_headers,
            server.header_timeout_s,
            server.body_timeout_s,
            server.max_connections,
        )
    return _limits


def _answer(status: int, reason: str, code: str, message: str) -> bytes:
    body = orjson.dumps({"error": {"code": code, "message": message, "type": "invalid_request_error"}})
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode() + body


TOO_LARGE = _answer(
    431, "Request Header Fields Too Large", "request_header_fields_too_large", "the request head is too large"
)
TIMEOUT = _answer(408, "Request Timeout", "request_timeout", "the request head did not arrive in time")
MALFORMED = _answer(400, "Bad Request", "invalid_request", "malformed HTTP request")
_NO_BODY = frozenset((b"GET", b"HEAD", b"OPTIONS", b"DELETE"))
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
        self.counted = False
        self.in_head = True  # reading a request head (or waiting for the first byte of one)
        self.awaiting_head = True  # the raw bytes before the head's blank line are counted
        self.head_bytes = 0
        self.lines = 0
        self.tail = b""  # the last bytes of the previous read (a blank line split across reads)
        self.requests = 0  # heads begun on this connection
        self.timer: asyncio.TimerHandle | None = None

    # --- the connection ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        global _open
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        if _open >= self.limits.max_connections:
            self._refuse(BUSY)  # at once, before the app sees anything
            return
        _open += 1
        self.counted = True
        self.inner.connection_made(self.transport)
        self._arm(self.limits.header_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        global _open
        self._disarm()
        if self.counted:
            _open -= 1
            self.counted = False
            self.inner.connection_lost(exc)

    def eof_received(self) -> None:
        if self.counted:
            self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self.awaiting_head:
            if self._head_too_large(data):
                self._refuse(TOO_LARGE)
                return
        elif self.timer is not None:  # body bytes came: the body's silence starts again
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

    def on_message_complete(self) -> None:
        self._disarm()
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

    def _body_timed_out(self) -> None:
        self.timer = None
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()  # the app is reading the body: it sees the client gone

    def _refuse(self, answer: bytes) -> None:
        """Answer (on a connection's first request: no response of the app can be on the wire) and
        close; on a later request only close."""
        self.closed = True
        self._disarm()
        if self.transport is not None and not self.transport.is_closing():
            if self.requests <= 1:
                self.transport.write(answer)
            self.transport.close()
