"""The upstream HTTP/1.1 client: keep-alive pools, one asyncio protocol per connection, httptools.

Why not aiohttp: its response, connection, parser and stream reader
held several times the memory per open stream and cost more CPU per upstream read and per request
than this client (measured in `bench/results/history.md`). It does only what the
upstream kinds need: `POST`/`GET` with a bytes body, `http` and `https` (system trust store),
keep-alive reuse, chunked / sized / until-close bodies, gzip and deflate decoding, and
back-pressure (reading pauses while `READ_HIGH_WATER` bytes wait unread).

A response is read with `read_chunk()`: whatever bytes have arrived, `b""` at the end of the body;
or, with `attach_sink`, handed to a callback as they arrive (the relay's direct delivery).
Reads are cancel-safe (data is consumed only after the wait returns), which the relay's deadlines
rely on (`gateway/cancel.py`). A connection goes back to its pool only when its body was read to
the end and the upstream allows keep-alive; a response closed early closes its connection, which
is how an upstream learns that the generation should stop. A `POST` is never retried on another
connection (RFC 9112 §9.3.1): a failure before the answer is a `ConnectFailed` for the caller's
fallback. Connections idle for longer than the provider's `pool_idle_timeout_s` are closed, as
aiohttp's keep-alive timeout did.

How a provider reaches its upstream (`upstream.Upstream`: proxy, TLS context, `max_connections`) is
decided when its client is built, and the proxy once per origin (cached with the origin): a request
pays one attribute test for it, and the limit is looked at only when a new connection is needed.
At `max_connections` open (idle, busy or connecting), a request that finds no idle connection
waits for one to come free, for at most the connect timeout, then fails as `ConnectFailed`. Such a
wait counts in `tidegate_upstream_pool_waits_total{provider}` and logs a warning naming the setting
(at most once a minute per provider), and the relay's `OpenProgress` says it is waiting: a request
still waiting for a connection has not started, so no keep-alive commits its response and the
idle timeout (`upstream_idle_timeout_s`) does not count the wait: it ends as the connect failure it is.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import Final, Protocol
from urllib.parse import quote, unquote, urlsplit

from ... import metrics
from .connect import AddressRefused, ConnectFailed, Connector
from .connection import READ_HIGH_WATER, Connection, UpstreamDisconnected, UpstreamHttpError
from .redact import Redactor, credentials
from .upstream import Proxy, Upstream

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_PATH_SAFE: Final = "/:@!$&'()*+,;=-._~%"
_QUERY_SAFE: Final = _PATH_SAFE + "?"

__all__ = [
    "READ_HIGH_WATER",
    "AddressRefused",
    "ConnectFailed",
    "HttpClient",
    "HttpResponse",
    "UpstreamDisconnected",
    "UpstreamHttpError",
]


class _Origin:
    """Where a URL points, parsed once per URL string."""

    __slots__ = ("authorization", "host", "host_header", "key", "port", "proxy", "proxy_authorization", "target", "tls")

    def __init__(self, url: str, upstream: Upstream | None = None, proxies: dict[str, str] | None = None) -> None:
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
        self.proxy: Proxy | None = upstream.proxy_for(scheme, host, port, proxies) if upstream and proxies else None
        self.proxy_authorization: str | None = None
        if self.proxy is not None and not self.tls:  # an http upstream through the proxy: absolute-form
            self.target = f"http://{self.host_header}{target}"
            self.proxy_authorization = self.proxy.authorization


_NOT_IN_NAME: Final = re.compile("[ \t\r\n:]")


def _check_header(name: str, value: str) -> None:
    if not name or _NOT_IN_NAME.search(name) or "\r" in value or "\n" in value:
        raise ValueError(f"header {name[:40]!r} has a character HTTP does not allow there")


def _fresh(conn: Connection, now: float, idle_timeout_s: float) -> bool:
    """An idle connection that may carry the next request."""
    return conn.reusable and now - conn.idle_since < idle_timeout_s


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

    def drop_headers(self) -> None:
        """Forget the head: a stream whose status was a success never reads it again, and the ~10
        name/value pairs a provider sends would otherwise stay for as long as the stream is open."""
        self._raw_headers = []
        self._headers = {}
        if self._conn is not None:
            self._conn.headers = []

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


_log = logging.getLogger("tidegate.upstream")
POOL_WARNING_INTERVAL_S: Final = 60.0


class PoolWaitListener(Protocol):
    def waited(self, seconds: float) -> None:
        """A wait for a connection slot ended (a slot, or the connect timeout) after `seconds`."""


class OpenProgress:
    """Where an upstream open is, for the relay that started it (set in `OPEN_PROGRESS` around the
    open, in the context it runs in): waiting for a connection slot, or past that. A request that
    waits for a slot has not started: that wait is bounded by the connect timeout alone, so the
    relay's idle clock stops while it lasts (`listener.waited` tells it how long it was)."""

    __slots__ = ("listener", "waiting_for_connection")

    def __init__(self, listener: PoolWaitListener | None = None) -> None:
        self.waiting_for_connection = False
        self.listener = listener


OPEN_PROGRESS: ContextVar[OpenProgress | None] = ContextVar("tidegate_open_progress", default=None)


class HttpClient:
    """One per provider: idle keep-alive connections per origin, and every connection it opened
    (closed by `aclose`). `upstream` (default: the proxy environment, the system trust store) says
    how it connects; without it `connect_timeout_s` bounds the connect."""

    def __init__(self, connect_timeout_s: float = 10.0, upstream: Upstream | None = None) -> None:
        if upstream is None:
            upstream = Upstream(connect_timeout_s=connect_timeout_s)
        self.upstream = upstream
        self.name = upstream.name
        self._connector = Connector(upstream.connect_timeout_s, upstream.ssl_context())
        self._proxies = upstream.proxies()  # the environment, read once
        self._idle_timeout_s = upstream.pool_idle_timeout_s
        self._max = upstream.max_connections
        self._connecting = 0
        self._waiters: deque[asyncio.Future[None]] = deque()  # requests waiting for a connection slot
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._open: set[Connection] = set()
        self._origins: dict[str, _Origin] = {}
        self._prune_handle: asyncio.TimerHandle | None = None
        self._warned_at = -POOL_WARNING_INTERVAL_S

    def _origin(self, url: str) -> _Origin:
        origin = self._origins.get(url)
        if origin is None:
            origin = _Origin(url, self.upstream, self._proxies)
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
            conn = await self._connection(origin)
        conn.begin(self._redactor(origin, headers))
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

    async def _connection(self, origin: _Origin) -> Connection:
        """An idle connection that came free while waiting, or a new one once a slot is free."""
        if len(self._open) + self._connecting >= self._max:
            conn = await self._waited_slot(origin)
            if conn is not None:
                return conn
        self._connecting += 1
        try:
            _, conn = await self._connector.open(
                lambda: Connection(origin.key), origin.host, origin.port, origin.tls, origin.proxy
            )
        except BaseException:
            self._connecting -= 1
            self._wake_one()
            raise
        self._connecting -= 1
        self._open.add(conn)
        return conn

    async def _waited_slot(self, origin: _Origin) -> Connection | None:
        """`_wait_for_slot`, counted, logged and told to the relay (`OpenProgress`)."""
        metrics.UPSTREAM_POOL_WAITS.labels(self.name).inc()
        now = time.monotonic()
        if now - self._warned_at >= POOL_WARNING_INTERVAL_S:
            self._warned_at = now
            _log.warning(
                "provider %s: all %d connections are in use, requests wait for one to come free (raise"
                " providers.%s.max_connections; docs/operations.md, Upstream connections)",
                self.name,
                self._max,
                self.name,
            )
        progress = OPEN_PROGRESS.get()
        if progress is None:
            return await self._wait_for_slot(origin)
        progress.waiting_for_connection = True
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            return await self._wait_for_slot(origin)
        finally:
            progress.waiting_for_connection = False
            if progress.listener is not None:
                progress.listener.waited(loop.time() - started)

    async def _wait_for_slot(self, origin: _Origin) -> Connection | None:
        """Wait (within the connect timeout) until this origin has an idle connection (returned) or
        fewer than `max_connections` are open (None: open one)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._connector.timeout_s
        while True:
            for key, idle in self._idle.items():  # an idle connection to another origin gives up its slot
                if idle:
                    self._discard(idle.pop(0))  # the longest idle
                    if not idle:
                        del self._idle[key]
                    return None
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except BaseException as exc:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, but leaving anyway: the next waiter gets the turn
                else:
                    self._waiters.remove(waiter)
                if isinstance(exc, TimeoutError):
                    raise ConnectFailed(
                        f"all {self._max} connections (max_connections) are busy; none came free within "
                        f"{self._connector.timeout_s:g} s"
                    ) from None
                raise
            conn = self._idle_connection(origin.key)
            if conn is not None:
                return conn
            if len(self._open) + self._connecting < self._max:
                return None

    def _wake_one(self) -> None:
        """A connection slot or an idle connection came free: the longest waiting request looks."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    @staticmethod
    def _redactor(origin: _Origin, headers: dict[str, str]) -> Redactor | None:
        """What masks this request's credentials in its answer (per request: a signed request's
        credentials change each time)."""
        sent = list(headers.items())
        if origin.authorization is not None:
            sent.append(("authorization", origin.authorization))
        if origin.proxy_authorization is not None:
            sent.append(("proxy-authorization", origin.proxy_authorization))
        secrets = credentials(sent)
        return Redactor(secrets) if secrets else None

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
        if origin.proxy_authorization is not None:
            lines.append(f"Proxy-Authorization: {origin.proxy_authorization}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("utf-8")

    def _idle_connection(self, key: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to have been closed
            if _fresh(conn, now, self._idle_timeout_s):
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
        if self._waiters:
            self._wake_one()
        if self._prune_handle is None:
            self._prune_handle = asyncio.get_running_loop().call_later(self._idle_timeout_s, self._prune)

    def _discard(self, conn: Connection) -> None:
        """Close a connection and stop tracking it."""
        if conn in self._open:
            self._open.discard(conn)
            if self._waiters:
                self._wake_one()
        conn.abort()

    def _prune(self) -> None:
        """Close connections idle for too long or closed by the upstream (runs while any are idle)."""
        self._prune_handle = None
        now = time.monotonic()
        for key, idle in list(self._idle.items()):
            keep: list[Connection] = []
            for conn in idle:
                if _fresh(conn, now, self._idle_timeout_s):
                    keep.append(conn)
                else:
                    self._discard(conn)
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]
        if self._idle:
            self._prune_handle = asyncio.get_running_loop().call_later(self._idle_timeout_s / 3, self._prune)

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
