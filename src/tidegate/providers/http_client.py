"""The upstream HTTP/1.1 client: keep-alive pools, one asyncio protocol per connection, httptools.

Why not aiohttp (DESIGN.md's Stack named it): measured on this machine in `docs/performance.md`
(round four), aiohttp's response, connection, parser and stream reader held ~10 KB per open stream
and cost ~12 µs more per paced upstream read and several hundred µs more per request than this
client. It does only what the upstream kinds need: `POST`/`GET` with a bytes body, `http` and
`https` (system trust store), keep-alive reuse, chunked / sized / until-close bodies, gzip and
deflate decoding, and back-pressure (reading pauses while `READ_HIGH_WATER` bytes wait unread).

A response is read with `read_chunk()`: whatever bytes have arrived, `b""` at the end of the body;
or, with `attach_sink`, handed to a callback as they arrive (the relay's direct delivery).
Reads are cancel-safe (data is consumed only after the wait returns), which the relay's deadlines
rely on (`gateway/cancel.py`). A connection goes back to its pool only when its body was read to
the end and the upstream allows keep-alive; a response closed early closes its connection, which
is how an upstream learns that the generation should stop. A `POST` is never retried on another
connection (RFC 9112 §9.3.1): a failure before the answer is a `ConnectFailed` for the caller's
fallback. Connections idle for longer than `IDLE_TIMEOUT_S` are closed, as aiohttp's keep-alive
timeout did.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Callable
from typing import Final
from urllib.parse import quote, unquote, urlsplit

from .connect import ConnectFailed, Connector
from .http_connection import READ_HIGH_WATER, Connection, UpstreamDisconnected, UpstreamHttpError

IDLE_TIMEOUT_S: Final = 15.0
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_PATH_SAFE: Final = "/:@!$&'()*+,;=-._~%"
_QUERY_SAFE: Final = _PATH_SAFE + "?"

__all__ = [
    "READ_HIGH_WATER",
    "ConnectFailed",
    "HttpClient",
    "HttpResponse",
    "UpstreamDisconnected",
    "UpstreamHttpError",
]


class _Origin:
    """Where a URL points, parsed once per URL string."""

    __slots__ = ("authorization", "host", "host_header", "key", "port", "target", "tls")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise ValueError(f"unsupported URL scheme {parts.scheme!r} (http or https)")
        host = parts.hostname
        if not host:
            raise ValueError("the URL has no host")
        port = parts.port or _DEFAULT_PORTS[scheme]
        self.tls = scheme == "https"
        self.host = host
        self.port = port
        shown = f"[{host}]" if ":" in host else host
        self.host_header = shown if port == _DEFAULT_PORTS[scheme] else f"{shown}:{port}"
        target = quote(parts.path or "/", safe=_PATH_SAFE)
        if parts.query:
            target += "?" + quote(parts.query, safe=_QUERY_SAFE)
        self.target = target
        self.key = (scheme, host, port)
        self.authorization: str | None = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self.authorization = "Basic " + base64.b64encode(pair).decode()


_NOT_IN_NAME: Final = re.compile("[ \t\r\n:]")


def _check_header(name: str, value: str) -> None:
    if not name or _NOT_IN_NAME.search(name) or "\r" in value or "\n" in value:
        raise ValueError(f"header {name[:40]!r} has a character HTTP does not allow there")


def _fresh(conn: Connection, now: float) -> bool:
    """An idle connection that may carry the next request."""
    return conn.reusable and now - conn.idle_since < IDLE_TIMEOUT_S


class HttpResponse:
    """An upstream's answer: status, headers (lower-cased names; repeats joined by ", "), body."""

    __slots__ = ("_client", "_conn", "_headers", "_raw_headers", "status")

    def __init__(self, client: HttpClient, conn: Connection) -> None:
        self._client = client
        self._conn: Connection | None = conn
        self.status = conn.status
        self._headers: dict[str, str] | None = None
        self._raw_headers = conn.headers

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            out: dict[str, str] = {}
            for name, value in self._raw_headers:
                key = name.decode("latin-1").lower()
                text = value.decode("latin-1")
                out[key] = f"{out[key]}, {text}" if key in out else text
            self._headers = out
        return self._headers

    async def read_chunk(self) -> bytes:
        """The bytes that have arrived (waiting for some), or b"" once the body has ended. Raises
        `UpstreamDisconnected` / `UpstreamHttpError` when the body cannot end properly."""
        while True:
            chunk = await self.next_chunk()
            if chunk is not None:
                return chunk

    def attach_sink(self, sink: Callable[[bytes], None]) -> bool:
        """From now on body bytes go to `sink` as each read delivers them (in the connection's
        protocol callback; `sink` must not raise). Refused (False) while bytes wait unread or once
        the body has ended: read those first."""
        conn = self._conn
        if conn is None or conn.buffered or conn.complete or conn.error is not None or conn.lost:
            return False
        conn.sink = sink
        return True

    def detach_sink(self) -> None:
        if self._conn is not None:
            self._conn.sink = None

    def nudge(self) -> None:
        """Wake a `next_chunk` waiting on this response: it returns None once."""
        if self._conn is not None:
            self._conn.nudge()

    async def next_chunk(self) -> bytes | None:
        """`read_chunk`, or None when the connection was nudged (a sink handed something back)."""
        conn = self._conn
        if conn is None:
            return b""
        while True:
            if conn.nudged:  # before any bytes: what the sink handed back came before them
                conn.nudged = False
                return None
            if conn.buffered:
                return conn.take()
            if conn.error is not None:
                self._drop()
                raise conn.error
            if conn.complete:
                self._release()
                return b""
            if conn.lost:
                self._drop()
                raise UpstreamDisconnected("the upstream closed the connection before the response ended")
            await conn.wait()

    async def read(self, limit: int) -> bytes:
        """The body up to `limit` bytes (more are not read: the connection is closed instead)."""
        parts: list[bytes] = []
        size = 0
        while size < limit:
            chunk = await self.read_chunk()
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
        if size >= limit:
            self.close()
        body = b"".join(parts)
        return body[:limit] if len(body) > limit else body

    def close(self) -> None:
        """Done with this response: a fully read body keeps its connection for the next request;
        anything else closes the connection now (the upstream sees the client go)."""
        conn = self._conn
        if conn is None:
            return
        if conn.complete and not conn.buffered:
            self._release()
        else:
            self._drop()

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.sink = None
            self._client._release(conn)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.sink = None
            self._client._discard(conn)


class HttpClient:
    """One per provider: idle keep-alive connections per origin, and every connection it opened
    (closed by `aclose`)."""

    def __init__(self, connect_timeout_s: float = 10.0) -> None:
        self._connector = Connector(connect_timeout_s)
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._open: set[Connection] = set()
        self._origins: dict[str, _Origin] = {}
        self._prune_handle: asyncio.TimerHandle | None = None

    def _origin(self, url: str) -> _Origin:
        origin = self._origins.get(url)
        if origin is None:
            origin = _Origin(url)
            if len(self._origins) > 256:  # URLs come from the config; a backstop against unbounded growth
                self._origins.clear()
            self._origins[url] = origin
        return origin

    async def request(self, method: str, url: str, headers: dict[str, str], body: bytes = b"") -> HttpResponse:
        """Send one request and wait for the response head. Raises `ConnectFailed` (nothing answered:
        unreachable, refused, closed before the head) or `UpstreamHttpError` (an answer that is not HTTP)."""
        origin = self._origin(url)
        head = self._head(method, origin, headers, len(body))
        conn = self._idle_connection(origin.key)
        if conn is None:
            _, conn = await self._connector.open(lambda: Connection(origin.key), origin.host, origin.port, origin.tls)
            self._open.add(conn)
        conn.begin()
        try:
            assert conn.transport is not None
            conn.transport.write(head + body if body else head)
            while not conn.headers_done:
                if conn.error is not None:
                    raise conn.error
                if conn.lost:
                    raise ConnectFailed(f"{origin.host_header} closed the connection without answering")
                await conn.wait()
        except BaseException:
            self._discard(conn)
            raise
        return HttpResponse(self, conn)

    @staticmethod
    def _head(method: str, origin: _Origin, headers: dict[str, str], length: int) -> bytes:
        lines = [f"{method} {origin.target} HTTP/1.1", f"Host: {origin.host_header}"]
        given = set()
        for name, value in headers.items():
            _check_header(name, value)
            lower = name.lower()
            if lower == "host":
                continue
            given.add(lower)
            lines.append(f"{name}: {value}")
        if "content-length" not in given and (length or method not in ("GET", "HEAD")):
            lines.append(f"Content-Length: {length}")
        if "accept" not in given:
            lines.append("Accept: */*")
        if "accept-encoding" not in given:
            lines.append("Accept-Encoding: gzip, deflate")
        if "authorization" not in given and origin.authorization is not None:
            lines.append(f"Authorization: {origin.authorization}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("utf-8")

    def _idle_connection(self, key: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to have been closed
            if _fresh(conn, now):
                return conn
            self._discard(conn)
        return None

    def _release(self, conn: Connection) -> None:
        conn.in_use = False
        if not conn.reusable:
            self._discard(conn)
            return
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.key, []).append(conn)
        if self._prune_handle is None:
            self._prune_handle = asyncio.get_running_loop().call_later(IDLE_TIMEOUT_S, self._prune)

    def _discard(self, conn: Connection) -> None:
        """Close a connection and stop tracking it."""
        self._open.discard(conn)
        conn.abort()

    def _prune(self) -> None:
        """Close connections idle for too long or closed by the upstream (runs while any are idle)."""
        self._prune_handle = None
        now = time.monotonic()
        for key, idle in list(self._idle.items()):
            keep: list[Connection] = []
            for conn in idle:
                if _fresh(conn, now):
                    keep.append(conn)
                else:
                    self._discard(conn)
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]
        if self._idle:
            self._prune_handle = asyncio.get_running_loop().call_later(IDLE_TIMEOUT_S / 3, self._prune)

    @property
    def open_connections(self) -> int:
        return len(self._open)

    @property
    def idle_connections(self) -> int:
        return sum(len(v) for v in self._idle.values())

    async def aclose(self) -> None:
        """Close every connection (idle or carrying a response); the client can be used again."""
        if self._prune_handle is not None:
            self._prune_handle.cancel()
            self._prune_handle = None
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()
