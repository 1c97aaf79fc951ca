"""How a provider reaches its upstream (docs/api-edges.md §15; `providers/http/upstream.py`, `connect.py`,
`client.py`): a real forward proxy (`proxy.py`, tests/support/forward_proxy.py), TLS servers with
`trustme` certificates, the proxy environment, `max_connections`; on asyncio and on uvloop."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme

from tests.support.forward_proxy import PASSWORD, ForwardProxy
from tidegate.config.load import parse_config
from tidegate.errors import ProviderFailure
from tidegate.gateway.router import build_provider
from tidegate.providers.http.client import HttpClient, HttpResponse
from tidegate.providers.http.connect import ConnectFailed
from tidegate.providers.http.transport import UpstreamHttpRequest, send_request
from tidegate.providers.http.upstream import Upstream, no_proxy_matches
from tidegate.providers.kinds import build_embedding_provider, build_image_provider

PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")


@pytest.fixture(autouse=True)
def clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    p = ForwardProxy(tmp_path_factory.mktemp("proxy"))
    yield p
    p.stop()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def read_all(response: HttpResponse) -> bytes:
    out = b""
    while chunk := await response.read_chunk():
        out += chunk
    return out


@dataclass
class Served:
    """An upstream on loopback (TLS when given a context) answering every request with `body`."""

    port: int = 0
    heads: list[bytes] = field(default_factory=list)
    connections: int = 0
    client_certs: list[object] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.client_certs.append(writer.get_extra_info("peercert"))
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                lines = head.lower().split(b"\r\n")
                sizes = [int(ln.split(b":")[1]) for ln in lines if ln.startswith(b"content-length")]
                length = sizes[0] if sizes else 0
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(b"hello ", b"there"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    servers: list[asyncio.base_events.Server] = []

    async def start(tls: ssl.SSLContext | None = None) -> Served:
        u = Served()
        server = await asyncio.start_server(u.serve, "127.0.0.1", 0, ssl=tls)
        u.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        return u

    yield start
    for s in servers:
        s.close()


def server_tls(ca: trustme.CA, *names: str, client_ca: trustme.CA | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*(names or ("localhost", "127.0.0.1"))).configure_cert(ctx)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(ctx)
    return ctx


# -- through a proxy ---------------------------------------------------------------------------------


async def test_https_goes_through_a_connect_tunnel_with_tls_for_the_upstream_inside(
    proxy: ForwardProxy, ca: trustme.CA, ca_file: str, upstream: Callable[..., Awaitable[Served]]
) -> None:
    u = await upstream(server_tls(ca, "localhost"))  # the certificate names the upstream, not the proxy
    client = HttpClient(5.0, Upstream(name="p1", proxy=proxy.url, ca_file=ca_file))
    for _ in range(2):
        response = await client.request("POST", f"https://localhost:{u.port}/v1/x", {}, b"{}")
        assert response.status == 200 and await read_all(response) == b"hello there"
    assert u.connections == 1 and len(u.heads) == 2  # one tunnel, kept alive
    assert all(b"Proxy-Authorization" not in h and b"Host: localhost:%d" % u.port in h for h in u.heads)
    await client.aclose()
    await proxy.await_log(f"CONNECT localhost:{u.port}")


async def test_http_goes_to_the_proxy_as_absolute_form_requests_with_proxy_auth(
    proxy: ForwardProxy, upstream: Callable[..., Awaitable[Served]]
) -> None:
    u = await upstream()
    client = HttpClient(5.0, Upstream(proxy=proxy.url))
    response = await client.request("POST", f"http://127.0.0.1:{u.port}/v1/plain?q=1", {"X-A": "b"}, b"{}")
    assert await read_all(response) == b"hello there"
    assert len(u.heads) == 1 and u.heads[0].startswith(b"POST /v1/plain?q=1 HTTP/1.1")
    assert b"X-A: b" in u.heads[0] and b"Proxy-Authorization" not in u.heads[0]
    await client.aclose()
    await proxy.await_log(f"POST 127.0.0.1:{u.port}/v1/plain?q=1")


async def test_the_environment_proxy_is_used_and_no_proxy_bypasses_it(
    proxy: ForwardProxy,
    ca: trustme.CA,
    ca_file: str,
    upstream: Callable[..., Awaitable[Served]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    u = await upstream(server_tls(ca, "localhost"))
    url = f"https://localhost:{u.port}/x"
    dead = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("https_proxy", proxy.url)
    client = HttpClient(5.0, Upstream(ca_file=ca_file))
    assert await read_all(await client.request("POST", url, {}, b"")) == b"hello there"
    await client.aclose()
    await proxy.await_log(f"CONNECT localhost:{u.port}")

    # a proxy that is not there: the environment is honoured (upper-case too), so the request fails...
    monkeypatch.delenv("https_proxy")
    monkeypatch.setenv("HTTPS_PROXY", dead)
    with pytest.raises(ConnectFailed, match=r"proxy 127\.0\.0\.1:\d+: could not connect"):
        await HttpClient(5.0, Upstream(ca_file=ca_file)).request("POST", url, {}, b"")
    # ...unless NO_PROXY names the host (a domain suffix, a host:port, or *), or the provider says proxy = false
    for no_proxy in ("example.com, .localhost", f"localhost:{u.port}", "*"):
        monkeypatch.setenv("NO_PROXY", no_proxy)
        direct = HttpClient(5.0, Upstream(ca_file=ca_file))
        assert await read_all(await direct.request("POST", url, {}, b"")) == b"hello there"
        await direct.aclose()
    monkeypatch.setenv("NO_PROXY", "localhost:1")  # another port: the proxy again
    with pytest.raises(ConnectFailed, match="proxy"):
        await HttpClient(5.0, Upstream(ca_file=ca_file)).request("POST", url, {}, b"")
    monkeypatch.delenv("NO_PROXY")
    direct = HttpClient(5.0, Upstream(ca_file=ca_file, proxy=False))
    assert await read_all(await direct.request("POST", url, {}, b"")) == b"hello there"
    await direct.aclose()


def test_no_proxy_matches_as_curl_and_requests_do() -> None:
    assert no_proxy_matches("*", "api.openai.com", 443)
    assert no_proxy_matches("openai.com", "api.openai.com", 443)
    assert no_proxy_matches(".openai.com", "api.openai.com", 443)
    assert no_proxy_matches(" OpenAI.com ", "openai.com", 443)
    assert not no_proxy_matches("openai.com", "notopenai.com", 443)
    assert no_proxy_matches("api.example:8443", "api.example", 8443)
    assert not no_proxy_matches("api.example:8443", "api.example", 443)
    assert no_proxy_matches("10.0.0.0/8", "10.2.3.4", 80)
    assert not no_proxy_matches("10.0.0.0/8", "11.2.3.4", 80)
    assert no_proxy_matches("127.0.0.1", "127.0.0.1", 80)
    assert no_proxy_matches("::1", "::1", 80) and no_proxy_matches("fd00::/8", "fd12::1", 80)
    assert not no_proxy_matches("", "localhost", 80) and not no_proxy_matches(",,", "localhost", 80)


async def test_a_proxy_refusing_connect_is_a_connect_failure_with_its_status_and_no_secret(
    proxy: ForwardProxy, ca_file: str
) -> None:
    wrong = proxy.url.replace(PASSWORD, "wrong-" + PASSWORD)
    for url in (proxy.bare_url, wrong):
        client = HttpClient(5.0, Upstream(name="p1", proxy=url, ca_file=ca_file))
        req = UpstreamHttpRequest("POST", "https://localhost:9/x", {"Authorization": "Bearer sk-abcdefgh12345"}, b"")
        with pytest.raises(ProviderFailure) as info:
            await send_request(client, req)
        failure = info.value
        assert failure.code == "connect_error" and failure.retriable
        assert f"provider p1: proxy 127.0.0.1:{proxy.port} refused CONNECT to localhost:9: 407" in failure.message
        assert PASSWORD not in failure.message and "proxyuser" not in failure.message and "sk-" not in failure.message


async def test_a_proxy_that_closes_answers_garbage_or_stays_silent_fails_within_the_connect_timeout(
    ca_file: str,
) -> None:
    async def closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    async def bad_gateway(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    cases = [
        (closes, "closed the connection without answering CONNECT"),
        (garbage, "its answer to CONNECT is not HTTP"),
        (bad_gateway, "refused CONNECT to localhost:9: 502 Bad Gateway"),
        (silent, r"no connection to localhost:9 through proxy 127\.0\.0\.1:\d+ within 0\.3 s"),
    ]
    for handler, message in cases:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = HttpClient(0.3, Upstream(connect_timeout_s=0.3, proxy=f"http://127.0.0.1:{port}", ca_file=ca_file))
        t0 = time.monotonic()
        with pytest.raises(ConnectFailed, match=message):
            await client.request("POST", "https://localhost:9/x", {}, b"")
        assert time.monotonic() - t0 < 1.5
        server.close()


async def test_an_unsupported_proxy_scheme_in_the_environment_is_a_clear_failure_without_its_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks5://u:s3cret@proxy.example:1080")
    client = HttpClient(1.0, Upstream(name="p1"))
    with pytest.raises(ProviderFailure) as info:
        await send_request(client, UpstreamHttpRequest("POST", "https://api.example/v1/x", {}, b""))
    assert "provider p1" in info.value.message and "'socks5' is not supported" in info.value.message
    assert "s3cret" not in info.value.message and info.value.retriable


# -- TLS per provider ----------------------------------------------------------------------------------


async def test_a_wrong_ca_is_a_tls_failure_and_verify_false_accepts_it(
    ca_file: str, upstream: Callable[..., Awaitable[Served]], tmp_path: Path
) -> None:
    other = trustme.CA()
    u = await upstream(server_tls(other, "localhost"))
    url = f"https://localhost:{u.port}/x"
    with pytest.raises(ProviderFailure) as info:
        await send_request(p1_client(ca_file), UpstreamHttpRequest("POST", url, {}, b""))
    assert info.value.code == "connect_error"
    assert "provider p1" in info.value.message and "TLS with localhost" in info.value.message
    assert "certificate verify failed" in info.value.message or "unable to get local issuer" in info.value.message
    client = HttpClient(5.0, Upstream(ca_file=ca_file, verify=False))
    assert await read_all(await client.request("POST", url, {}, b"")) == b"hello there"
    await client.aclose()
    other_file = tmp_path / "other.pem"
    other.cert_pem.write_to_path(str(other_file))
    client = HttpClient(5.0, Upstream(ca_file=str(other_file)))  # its own bundle: trusted
    assert await read_all(await client.request("POST", url, {}, b"")) == b"hello there"
    await client.aclose()


async def test_mtls_without_a_client_certificate_fails_and_with_one_succeeds(
    ca: trustme.CA, ca_file: str, upstream: Callable[..., Awaitable[Served]], tmp_path: Path, proxy: ForwardProxy
) -> None:
    client_ca = trustme.CA()
    u = await upstream(server_tls(ca, "localhost", client_ca=client_ca))
    url = f"https://localhost:{u.port}/x"
    with pytest.raises(ProviderFailure) as info:
        await send_request(p1_client(ca_file), UpstreamHttpRequest("POST", url, {}, b""))
    assert info.value.code == "connect_error" and "provider p1" in info.value.message

    issued = client_ca.issue_cert("tidegate@example.com")
    cert, key, both = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "both.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    issued.private_key_and_cert_chain_pem.write_to_path(str(both))
    for options in (
        Upstream(ca_file=ca_file, client_cert=str(cert), client_key=str(key)),
        Upstream(ca_file=ca_file, client_cert=str(both)),
        Upstream(ca_file=ca_file, client_cert=str(both), proxy=proxy.url),  # inside a tunnel too
    ):
        client = HttpClient(5.0, options)
        assert await read_all(await client.request("POST", url, {}, b"")) == b"hello there"
        await client.aclose()
    assert u.client_certs[-1]  # the server saw the certificate


# -- max_connections -----------------------------------------------------------------------------------


async def _held_upstream(release: asyncio.Event) -> tuple[asyncio.base_events.Server, list[int]]:
    """Each answer sends its first part, then waits for `release` before ending."""
    connections = [0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
                await writer.drain()
                await release.wait()
                writer.write(b"4\r\nlast\r\n0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0), connections


async def test_past_max_connections_a_request_waits_for_a_free_connection() -> None:
    release = asyncio.Event()
    server, connections = await _held_upstream(release)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
    client = HttpClient(5.0, Upstream(connect_timeout_s=5.0, max_connections=1))
    first = await client.request("POST", url, {}, b"")
    assert await first.read_chunk() == b"first"
    second = asyncio.ensure_future(client.request("POST", url, {}, b""))
    await asyncio.sleep(0.3)
    assert not second.done() and client.open_connections == 1
    release.set()
    assert await read_all(first) == b"last"
    response = await second
    assert await read_all(response) == b"firstlast"
    assert connections[0] == 1  # the second stream took the first one's connection
    await client.aclose()
    server.close()


async def test_a_request_waiting_beyond_the_connect_timeout_fails_and_a_freed_slot_serves_again() -> None:
    release = asyncio.Event()
    server, connections = await _held_upstream(release)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
    client = HttpClient(0.4, Upstream(name="p1", connect_timeout_s=0.4, max_connections=1))
    first = await client.request("POST", url, {}, b"")
    t0 = time.monotonic()
    with pytest.raises(ProviderFailure) as info:
        await send_request(client, UpstreamHttpRequest("POST", url, {}, b""))
    assert 0.35 < time.monotonic() - t0 < 2.0
    assert info.value.code == "connect_error" and info.value.retriable
    assert "provider p1" in info.value.message and "max_connections" in info.value.message
    first.close()  # closed early: its connection goes, and with it the slot
    release.set()
    assert await read_all(await client.request("POST", url, {}, b"")) == b"firstlast"
    assert connections[0] == 2 and client.open_connections == 1
    await client.aclose()
    server.close()


def test_every_http_kind_connects_with_its_providers_options() -> None:
    """Chat (every HTTP kind), embeddings and images: one client, built from the provider's options."""
    opts = {"max_connections": 7, "pool_idle_timeout_s": 2.5, "proxy": "http://u:pw@proxy.example:3128"}
    config = parse_config(
        {
            "server": {"connect_timeout_s": 3.0},
            "providers": {
                "o": {"kind": "openai", "base_url": "https://api.example/v1", **opts},
                "a": {"kind": "anthropic", **opts},
                "b": {"kind": "bedrock", "region": "us-east-1", **opts},
                "v": {"kind": "vertex", "region": "us-central1", "project": "p", "access_token_env": "T", **opts},
            },
        }
    )
    clients = [build_provider(p, 3.0).client for p in config.providers.values()]
    clients += [build_embedding_provider(config.providers[n], 3.0)._http.client for n in ("o", "b", "v")]  # type: ignore[attr-defined]
    clients.append(build_image_provider(config.providers["o"], config.server).client)
    for client in clients:
        assert client.upstream.max_connections == 7 and client.upstream.pool_idle_timeout_s == 2.5
        assert client.upstream.proxy == opts["proxy"] and client.upstream.connect_timeout_s == 3.0
        assert "pw" not in repr(client.upstream)


def p1_client(ca_file: str) -> HttpClient:
    return HttpClient(5.0, Upstream(name="p1", ca_file=ca_file))


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
