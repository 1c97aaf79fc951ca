"""Opening TCP (and TLS) connections to an upstream: cached name resolution and staggered attempts.

`Connector.open` resolves the host (answers cached for `DNS_TTL_S`, as aiohttp's `ttl_dns_cache`
did), tries the addresses with RFC 8305-style staggering (families interleaved; the next attempt
starts when the previous one fails or after `STAGGER_S`, so an unreachable IPv6 address never
costs the whole timeout); an attempt is the loop's own connect to the numeric address plus, for
`https`, the TLS handshake. Through an HTTP proxy (`upstream.Proxy`), the connection goes to the
proxy instead: as it is for an `http` upstream (the client then writes absolute-form requests), or,
for `https`, tunnelled with `CONNECT` and TLS with the upstream inside the tunnel (SNI and
verification for the upstream's name). The whole open (resolution, connect, proxy, handshake) is
bounded by the connect timeout; every failure is one `ConnectFailed` saying what went wrong, never
a secret. Attempt tasks are owned here: the losers are cancelled or closed before `open` returns.

The address rule (`addresses.py`: no link-local or metadata address, however spelled) is enforced
here, on every address a name resolves to, each time it is resolved: a name that points at
169.254.169.254 through a hosts entry or a DNS answer that changed since `check-config` refuses the
whole connection (`AddressRefused`) before any socket is opened, so no byte and no key is sent. The
connect then goes to the numeric address that was checked, never to the name again. Through a
proxy, the proxy's own addresses are checked here; the upstream's name is resolved by the proxy.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ...addresses import refused_address

if TYPE_CHECKING:
    from .upstream import Proxy

DNS_TTL_S: Final = 300.0
STAGGER_S: Final = 0.25
MAX_PROXY_HEAD: Final = 16 * 1024

P = TypeVar("P", bound=asyncio.Protocol)
_Address = tuple[int, Any]  # (family, sockaddr)


class ConnectFailed(OSError):
    """The upstream could not be reached: resolution, connect, TLS, the proxy or the connect timeout."""


class AddressRefused(ConnectFailed):
    """The name resolved to an address the address rule refuses: nothing was connected to."""


_TLS: ssl.SSLContext | None = None


def tls_context() -> ssl.SSLContext:
    """The system's trust store (honours SSL_CERT_FILE / SSL_CERT_DIR), HTTP/1.1 by ALPN. Built once:
    loading the trust store takes milliseconds."""
    global _TLS
    if _TLS is None:
        ctx = ssl.create_default_context()
        ctx.set_alpn_protocols(["http/1.1"])
        _TLS = ctx
    return _TLS


def interleave(infos: list[tuple[Any, ...]]) -> list[_Address]:
    """getaddrinfo answers in RFC 8305 order: first family first, then alternating, no duplicates."""
    by_family: dict[int, list[_Address]] = {}
    seen: set[Any] = set()
    for family, _type, _proto, _canon, sockaddr in infos:
        if sockaddr in seen:
            continue
        seen.add(sockaddr)
        by_family.setdefault(family, []).append((family, sockaddr))
    queues = list(by_family.values())
    out: list[_Address] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


class _ProxyAnswer(asyncio.Protocol):
    """Reads a proxy's answer to `CONNECT` (its head only; a tunnel's first bytes are the client's)."""

    def __init__(self) -> None:
        self.head = asyncio.get_running_loop().create_future()
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        if self.head.done():
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end != -1:
            self.head.set_result(self._buffer[:end])
        elif len(self._buffer) > MAX_PROXY_HEAD:
            self.head.set_exception(ConnectFailed("the proxy's answer to CONNECT is not HTTP"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_exception(ConnectFailed("the proxy closed the connection without answering CONNECT"))


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Connector:
    """One per HTTP client: its resolution cache, connect timeout and TLS context."""

    __slots__ = ("_dns", "_ssl", "timeout_s")

    def __init__(self, timeout_s: float, ssl_context: ssl.SSLContext | None = None) -> None:
        self.timeout_s = timeout_s
        self._ssl = ssl_context  # None: the shared system context, built when first needed
        self._dns: dict[tuple[str, int], tuple[float, list[_Address]]] = {}

    async def open(
        self, factory: Callable[[], P], host: str, port: int, tls: bool, proxy: Proxy | None = None
    ) -> tuple[asyncio.Transport, P]:
        try:
            async with asyncio.timeout(self.timeout_s):
                if proxy is None:
                    return await self._connect(factory, host, port, tls)
                if not tls:
                    return await self._via_proxy(factory, proxy)
                return await self._tunnel(factory, proxy, host, port)
        except TimeoutError:
            via = f" through proxy {proxy.shown}" if proxy is not None else ""
            raise ConnectFailed(f"no connection to {host}:{port}{via} within {self.timeout_s:g} s") from None

    async def _via_proxy(self, factory: Callable[[], P], proxy: Proxy) -> tuple[asyncio.Transport, P]:
        try:
            return await self._connect(factory, proxy.host, proxy.port, False)
        except ConnectFailed as exc:
            raise type(exc)(f"proxy {proxy.shown}: {exc}") from None

    async def _tunnel(
        self, factory: Callable[[], P], proxy: Proxy, host: str, port: int
    ) -> tuple[asyncio.Transport, P]:
        """`CONNECT host:port` through the proxy, then TLS with the upstream inside the tunnel."""
        raw, answer = await self._via_proxy(_ProxyAnswer, proxy)
        try:
            target = _authority(host, port)
            lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
            if proxy.authorization is not None:
                lines.append(f"Proxy-Authorization: {proxy.authorization}")
            raw.write(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8"))
            try:
                head = await answer.head
            except ConnectFailed as exc:
                raise ConnectFailed(f"proxy {proxy.shown}: {exc}") from None
            status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise ConnectFailed(f"proxy {proxy.shown}: its answer to CONNECT is not HTTP")
            if not 200 <= int(parts[1]) < 300:
                reason = parts[2][:80] if len(parts) > 2 else ""
                raise ConnectFailed(f"proxy {proxy.shown} refused CONNECT to {target}: {parts[1]} {reason}".rstrip())
            protocol = factory()
            loop = asyncio.get_running_loop()
            try:
                context = self._ssl or tls_context()
                transport = await loop.start_tls(raw, protocol, context, server_hostname=host)
            except ssl.SSLCertVerificationError as exc:
                raise ConnectFailed(f"TLS with {host}: {exc.verify_message or 'certificate not trusted'}") from None
            except ssl.SSLError as exc:
                raise ConnectFailed(f"TLS with {host} failed ({exc.reason or type(exc).__name__})") from None
            except ConnectionError as exc:
                raise ConnectFailed(f"TLS with {host} failed ({_describe(exc)})") from None
            assert transport is not None
            protocol.connection_made(transport)  # start_tls hands the protocol its transport, not this call
            return transport, protocol
        except BaseException:
            raw.abort()
            raise

    async def _resolve(self, host: str, port: int) -> list[_Address]:
        now = time.monotonic()
        cached = self._dns.get((host, port))
        if cached is not None and cached[0] > now:
            return cached[1]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except socket.gaierror as exc:
            raise ConnectFailed(f"could not resolve {host} ({exc.strerror or 'no address'})") from None
        addresses = interleave(infos)
        if not addresses:
            raise ConnectFailed(f"could not resolve {host} (no address)")
        refusal = refused_address(host, [str(sockaddr[0]) for _family, sockaddr in addresses])
        if refusal is not None:  # one refused address refuses the name: never cached, asked again next time
            raise AddressRefused(f"refused: {refusal}")
        if len(self._dns) > 1024:  # a bounded cache: hosts come from the config, this is a backstop
            self._dns.clear()
        self._dns[(host, port)] = (now + DNS_TTL_S, addresses)
        return addresses

    async def _connect(self, factory: Callable[[], P], host: str, port: int, tls: bool) -> tuple[asyncio.Transport, P]:
        addresses = await self._resolve(host, port)
        attempts: list[asyncio.Task[tuple[asyncio.Transport, P]]] = []
        errors: list[str] = []
        winner: tuple[asyncio.Transport, P] | None = None
        try:
            pending = list(addresses)
            while winner is None and (pending or any(not t.done() for t in attempts)):
                if pending:
                    family, sockaddr = pending.pop(0)
                    context = (self._ssl or tls_context()) if tls else None
                    attempts.append(asyncio.ensure_future(_attempt(factory, family, sockaddr, host, context)))
                running = [t for t in attempts if not t.done()]
                done, _ = await asyncio.wait(
                    running, timeout=STAGGER_S if pending else None, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    exc = task.exception()
                    if exc is None:
                        winner = task.result()
                        break
                    errors.append(_describe(exc))
        finally:
            for task in attempts:
                if not task.done():
                    task.cancel()
            if attempts:
                await asyncio.wait(attempts)  # a cancellation of this task still propagates from here
            for task in attempts:
                if not task.cancelled() and task.exception() is None and task.result() is not winner:
                    task.result()[0].close()
        if winner is None:
            self._dns.pop((host, port), None)  # an address that fails may have moved: resolve again next time
            reason = "; ".join(dict.fromkeys(errors))  # each distinct reason once, in order
            raise ConnectFailed(f"could not connect to {host}:{port} ({reason})")
        return winner


async def _attempt(
    factory: Callable[[], P], family: int, sockaddr: Any, host: str, context: ssl.SSLContext | None
) -> tuple[asyncio.Transport, P]:
    """One address: TCP (the loop's own connect on the numeric address: no socket object in Python,
    ~2.5x less CPU on uvloop than `sock_connect`), then TLS for `https`."""
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.create_connection(
            factory,
            sockaddr[0],
            sockaddr[1],
            family=family,
            proto=socket.IPPROTO_TCP,
            ssl=context,
            server_hostname=host if context is not None else None,
        )
    except ssl.SSLCertVerificationError as exc:
        raise ConnectFailed(f"TLS with {host}: {exc.verify_message or 'certificate not trusted'}") from None
    except ssl.SSLError as exc:
        raise ConnectFailed(f"TLS with {host} failed ({exc.reason or type(exc).__name__})") from None
    return transport, protocol  # both loops set TCP_NODELAY on TCP transports


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectFailed):
        return str(exc)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__
