"""The upstream HTTP/1.1 client (`providers/http/client.py`, `providers/http/connect.py`) against real
sockets: scripted servers that write exact bytes, on asyncio and on uvloop (what the server runs)."""

from __future__ import annotations

import asyncio
import gzip
import socket
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
import trustme

from tidegate.providers.http import client as http_client
from tidegate.providers.http import connect
from tidegate.providers.http.client import HttpClient, UpstreamDisconnected, UpstreamHttpError
from tidegate.providers.http.connect import ConnectFailed, Connector, interleave
from tidegate.providers.http.upstream import Upstream

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Scripted:
    """A server whose connections run `handler`; it records every request head it read."""

    handler: Handler
    port: int = 0
    connections: int = 0
    heads: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    closed: list[float] = field(default_factory=list)
    server: asyncio.base_events.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed.append(time.monotonic())
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await reader.readexactly(length)
        self.bodies.append(body)
        return head

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[Handler], Awaitable[Scripted]]]:
    servers: list[Scripted] = []

    async def start(handler: Handler) -> Scripted:
        s = Scripted(handler)
        s.server = await asyncio.start_server(s._serve, "127.0.0.1", 0)
        s.port = s.server.sockets[0].getsockname()[1]
        servers.append(s)
        return s

    yield start
    for s in servers:
        assert s.server is not None
        s.server.close()


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def read_all(response: http_client.HttpResponse) -> bytes:
    out = b""
    while chunk := await response.read_chunk():
        out += chunk
    return out


# -- bodies and framing ------------------------------------------------------------------------------


@pytest.mark.parametrize("split", [1, 3, 7, 64])
async def test_a_chunked_body_split_anywhere_reads_whole_and_the_connection_is_reused(
    scripted: Callable[[Handler], Awaitable[Scripted]], split: int
) -> None:
    payload = chunked(b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n")

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            wire = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + payload
            for i in range(0, len(wire), split):
                writer.write(wire[i : i + split])
                await writer.drain()
                await asyncio.sleep(0)

    server = await scripted(handler)
    client = HttpClient(5.0)
    for _ in range(3):
        response = await client.request("POST", server.url, {"content-type": "application/json"}, b'{"a":1}')
        assert response.status == 200
        assert response.headers["content-type"] == "text/event-stream"
        assert await read_all(response) == b"data: one\n\ndata: two\n\ndata: [DONE]\n\n"
    assert server.connections == 1
    assert server.bodies == [b'{"a":1}'] * 3
    assert client.idle_connections == 1
    await client.aclose()


async def test_a_sized_body_and_repeated_headers(scripted: Callable[[Handler], Awaitable[Scripted]]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(
            b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 5\r\nVia: a\r\nVIA: b\r\nRetry-After: 3\r\n\r\nslow!"
        )
        await reader.read()

    server = await scripted(handler)
    client = HttpClient(5.0)
    response = await client.request("POST", server.url, {}, b"x")
    assert (response.status, response.headers["via"], response.headers["retry-after"]) == (429, "a, b", "3")
    assert await response.read(1000) == b"slow!"
    await client.aclose()


async def test_a_body_delimited_by_the_connection_end_is_complete_and_not_reused(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: a\n\n")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"data: b\n\n")
        await writer.drain()

    server = await scripted(handler)
    client = HttpClient(5.0)
    response = await client.request("POST", server.url, {}, b"x")
    assert await read_all(response) == b"data: a\n\ndata: b\n\n"
    assert client.idle_connections == 0 and client.open_connections == 0
    await client.aclose()


async def test_a_connection_that_drops_mid_body_is_an_error_never_an_end(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"5\r\nhello\r\n")
        await writer.drain()

    server = await scripted(handler)
    client = HttpClient(5.0)
    response = await client.request("POST", server.url, {}, b"x")
    assert await response.read_chunk() == b"hello"
    with pytest.raises(UpstreamDisconnected):
        await response.read_chunk()
    assert client.open_connections == 0
    # a sized body cut short is the same
    server.handler = _cut_sized
    response = await client.request("POST", server.url, {}, b"x")
    with pytest.raises(UpstreamDisconnected):
        await read_all(response)
    await client.aclose()


async def _cut_sized(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    await reader.readexactly(1)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
    await writer.drain()


@pytest.mark.parametrize(
    "wire",
    [
        b"HTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad\r\n",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
    ],
    ids=["status-line", "chunk-size", "header"],
)
async def test_bytes_that_are_not_http_are_an_http_error(
    scripted: Callable[[Handler], Awaitable[Scripted]], wire: bytes
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(wire)
        await reader.read()

    server = await scripted(handler)
    client = HttpClient(5.0)
    with pytest.raises(UpstreamHttpError):
        response = await client.request("POST", server.url, {}, b"x")
        await read_all(response)
    assert client.open_connections == 0
    await client.aclose()


async def test_an_endless_response_head_is_cut_off(scripted: Callable[[Handler], Awaitable[Scripted]]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(10_000):
            writer.write(b"X-Filler-%d: %s\r\n" % (i, b"y" * 100))
            await writer.drain()

    server = await scripted(handler)
    client = HttpClient(5.0)
    with pytest.raises(UpstreamHttpError, match="head exceeds"):
        await client.request("POST", server.url, {}, b"x")
    await client.aclose()


async def test_gzip_and_deflate_bodies_are_decoded_and_corrupt_ones_are_errors(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    plain = b'{"object":"list","data":[' + b",".join(b"%d" % i for i in range(5000)) + b"]}"
    bodies = {
        "/gzip": (b"gzip", gzip.compress(plain)),
        "/deflate": (b"deflate", zlib.compress(plain)),
        "/corrupt": (b"gzip", b"\x1f\x8b" + b"\x00" * 40),
        "/truncated": (b"gzip", gzip.compress(plain)[:-20]),
    }

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await server.read_request(reader)
            path = head.split(b" ")[1].decode()
            encoding, data = bodies[path]
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nTransfer-Encoding: chunked\r\n\r\n" % encoding)
            writer.write(chunked(*(data[i : i + 100] for i in range(0, len(data), 100))))
            await writer.drain()

    server = await scripted(handler)
    client = HttpClient(5.0)
    base = f"http://127.0.0.1:{server.port}"
    for path in ("/gzip", "/deflate"):
        response = await client.request("POST", base + path, {}, b"x")
        assert await read_all(response) == plain
    for path in ("/corrupt", "/truncated"):
        response = await client.request("POST", base + path, {}, b"x")
        with pytest.raises(UpstreamHttpError, match="compressed body"):
            await read_all(response)
    assert b"accept-encoding: gzip, deflate" in server.heads[0].lower()
    await client.aclose()


async def test_an_informational_answer_before_the_real_one_is_skipped(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        await reader.read()

    server = await scripted(handler)
    client = HttpClient(5.0)
    response = await client.request("POST", server.url, {}, b"x")
    assert response.status == 201 and "link" not in response.headers
    assert await read_all(response) == b"ok"
    await client.aclose()


# -- the request head ----------------------------------------------------------------------------------


async def test_the_request_head(scripted: Callable[[Handler], Awaitable[Scripted]]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")

    server = await scripted(handler)
    client = HttpClient(5.0)
    url = f"http://user:p%40ss@127.0.0.1:{server.port}/model/anthropic.claude-v2:0/invoke stream?a=b c"
    response = await client.request("POST", url, {"Content-Type": "application/json", "host": "ignored"}, b"{}")
    assert response.status == 204 and await read_all(response) == b""
    head = server.heads[0].decode()
    lines = head.split("\r\n")
    assert lines[0] == "POST /model/anthropic.claude-v2:0/invoke%20stream?a=b%20c HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}" in lines and "host: ignored" not in head.lower().replace("host: 127", "")
    assert "Content-Type: application/json" in lines and "Content-Length: 2" in lines
    assert "Authorization: Basic dXNlcjpwQHNz" in lines  # user:p@ss
    assert "user-agent" not in head.lower() and "cookie" not in head.lower()
    for bad in ({"x-evil": "a\r\nInjected: 1"}, {"bad name": "v"}):
        with pytest.raises(ValueError):
            await client.request("POST", server.url, bad, b"")
    with pytest.raises(ValueError):
        await client.request("POST", "ftp://127.0.0.1/x", {}, b"")
    await client.aclose()


def test_the_host_header_leaves_out_default_ports_and_brackets_ipv6() -> None:
    assert http_client._Origin("https://api.openai.com/v1/chat/completions").host_header == "api.openai.com"
    assert http_client._Origin("http://api.example:80/").host_header == "api.example"
    assert http_client._Origin("https://api.example:8443/x").host_header == "api.example:8443"
    assert http_client._Origin("http://[::1]:9000/x").host_header == "[::1]:9000"
    assert http_client._Origin("https://h/p%3Aq").target == "/p%3Aq"  # escapes stay as they are


# -- connections: reuse, close, back-pressure, idle ----------------------------------------------------


async def test_a_response_closed_early_closes_its_connection_and_the_upstream_sees_it_at_once(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            writer.write(chunked(b"data: x\n\n")[:-5])
            await writer.drain()
            await asyncio.sleep(0.01)

    server = await scripted(handler)
    client = HttpClient(5.0)
    response = await client.request("POST", server.url, {}, b"x")
    assert await response.read_chunk()
    closed_at = time.monotonic()
    response.close()
    for _ in range(100):
        if server.closed:
            break
        await asyncio.sleep(0.01)
    assert server.closed and server.closed[0] - closed_at < 0.5
    assert client.open_connections == 0 and client.idle_connections == 0
    await client.aclose()


async def test_reading_pauses_while_the_reader_does_not_read(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    sent = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(2000):  # 32 MB
            writer.write(chunked(b"z" * 16384)[:-5])
            sent += 16384
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    server = await scripted(handler)
    client = HttpClient(5.0)
    response = await client.request("POST", server.url, {}, b"x")
    await asyncio.sleep(0.5)  # nobody reads
    conn = response._conn
    assert conn is not None
    assert conn.buffered < http_client.READ_HIGH_WATER + 512 * 1024
    assert sent < 16 * 1024 * 1024  # the server is held back by TCP, not buffered in the client
    total = 0
    while chunk := await response.read_chunk():
        total += len(chunk)
    assert total == 2000 * 16384
    await client.aclose()


async def test_a_read_cancelled_while_waiting_loses_nothing(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    go = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
        await go.wait()
        writer.write(b"late")
        await reader.read()

    server = await scripted(handler)
    client = HttpClient(5.0)
    response = await client.request("POST", server.url, {}, b"x")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await response.read_chunk()
    go.set()
    assert await read_all(response) == b"late"
    await client.aclose()


async def test_connections_closed_by_the_upstream_or_idle_too_long_are_not_reused(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def closes_after_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        # keep-alive was allowed, but the server goes away while the connection is idle

    server = await scripted(closes_after_answer)
    client = HttpClient(5.0, Upstream(pool_idle_timeout_s=0.15))
    for _ in range(3):
        response = await client.request("POST", server.url, {}, b"x")
        assert await read_all(response) == b"ok"
        await asyncio.sleep(0.05)
    assert server.connections == 3  # each request found its idle connection closed and opened a new one

    async def keeps_open(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    server.handler = keeps_open
    server.connections = 0
    response = await client.request("POST", server.url, {}, b"x")
    assert await read_all(response) == b"ok" and client.idle_connections == 1
    await asyncio.sleep(0.4)  # the pruning timer closes it
    assert client.idle_connections == 0 and client.open_connections == 0
    response = await client.request("POST", server.url, {}, b"x")
    assert await read_all(response) == b"ok"
    assert server.connections == 2
    await client.aclose()


async def test_connection_close_and_http_1_0_answers_are_not_reused(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    answers = [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            writer.write(answers[(server.connections - 1) % 2])

    server = await scripted(handler)
    client = HttpClient(5.0)
    for _ in range(2):
        response = await client.request("POST", server.url, {}, b"x")
        assert await read_all(response) == b"ok"
        assert client.idle_connections == 0
    assert server.connections == 2
    await client.aclose()


async def test_an_upstream_that_closes_without_answering_is_a_connect_failure(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)

    server = await scripted(handler)
    client = HttpClient(5.0)
    with pytest.raises(ConnectFailed, match="without answering"):
        await client.request("POST", server.url, {}, b"x")
    await client.aclose()


async def test_aclose_closes_connections_carrying_a_response(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await reader.read()

    server = await scripted(handler)
    client = HttpClient(5.0)
    response = await client.request("POST", server.url, {}, b"x")
    await client.aclose()
    with pytest.raises(UpstreamDisconnected):
        await response.read_chunk()
    for _ in range(50):
        if server.closed:
            break
        await asyncio.sleep(0.01)
    assert server.closed


# -- connecting ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_refused_connect_is_a_connect_failure() -> None:
    client = HttpClient(5.0)
    with pytest.raises(ConnectFailed, match="refused"):
        await client.request("POST", f"http://127.0.0.1:{_free_port()}/x", {}, b"")


def _black_hole() -> tuple[socket.socket, list[socket.socket], int]:
    """A listener whose accept queue is full: the kernel drops further SYNs, so connects hang."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        fillers.append(s)
    time.sleep(0.05)
    return listener, fillers, port


async def test_a_silent_address_costs_the_stagger_not_the_timeout_and_the_timeout_bounds_the_rest(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    server = await scripted(handler)
    listener, fillers, hole = _black_hole()
    try:
        client = HttpClient(3.0)
        far = time.monotonic() + 60
        client._connector._dns[("upstream.test", 80)] = (
            far,
            [(socket.AF_INET, ("127.0.0.1", hole)), (socket.AF_INET, ("127.0.0.1", server.port))],
        )
        t0 = time.monotonic()
        response = await client.request("POST", "http://upstream.test/x", {}, b"x")
        assert await read_all(response) == b"ok"
        assert connect.STAGGER_S - 0.05 < time.monotonic() - t0 < 1.5
        assert b"Host: upstream.test\r\n" in server.heads[0]
        await client.aclose()

        only_hole = HttpClient(0.4)
        only_hole._connector._dns[("silent.test", 80)] = (far, [(socket.AF_INET, ("127.0.0.1", hole))])
        t0 = time.monotonic()
        with pytest.raises(ConnectFailed, match=r"within 0\.4 s"):
            await only_hole.request("POST", "http://silent.test/x", {}, b"")
        assert time.monotonic() - t0 < 1.0
    finally:
        for s in fillers:
            s.close()
        listener.close()


def test_addresses_interleave_families_in_resolver_order() -> None:
    v6a, v6b = ("::1", 1, 0, 0), ("::2", 1, 0, 0)
    v4a, v4b = ("10.0.0.1", 1), ("10.0.0.2", 1)
    infos = [
        (socket.AF_INET6, 1, 6, "", v6a),
        (socket.AF_INET6, 1, 6, "", v6b),
        (socket.AF_INET6, 1, 6, "", v6b),
        (socket.AF_INET, 1, 6, "", v4a),
        (socket.AF_INET, 1, 6, "", v4b),
    ]
    assert interleave(infos) == [
        (socket.AF_INET6, v6a),
        (socket.AF_INET, v4a),
        (socket.AF_INET6, v6b),
        (socket.AF_INET, v4b),
    ]


async def test_names_are_resolved_once_per_ttl(scripted: Callable[[Handler], Awaitable[Scripted]]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")

    server = await scripted(handler)
    connector = Connector(5.0)
    calls = 0
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo

    async def counting(host: object, *args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += host == "localhost"  # uvloop's sock_connect resolves the numeric address too
        return await real(host, *args, **kwargs)  # type: ignore[arg-type]

    loop.getaddrinfo = counting  # type: ignore[method-assign]
    try:
        for _ in range(3):
            transport, _ = await connector.open(asyncio.Protocol, "localhost", server.port, tls=False)
            transport.close()
    finally:
        del loop.getaddrinfo
    assert calls == 1


# -- TLS -------------------------------------------------------------------------------------------


async def test_https_verifies_the_certificate_and_speaks_http_over_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                heads.append(await reader.readuntil(b"\r\n\r\n"))
                await reader.readexactly(2)
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(b"secure"))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        # the system trust store does not know this CA: refused, and the reason says so
        monkeypatch.setattr(connect, "_TLS", None)
        untrusting = HttpClient(5.0)
        with pytest.raises(ConnectFailed, match="certificate"):
            await untrusting.request("POST", f"https://localhost:{port}/x", {}, b"{}")

        trusting = connect.tls_context()
        ca.configure_trust(trusting)
        client = HttpClient(5.0)
        for _ in range(2):
            response = await client.request("POST", f"https://localhost:{port}/x", {}, b"{}")
            assert await read_all(response) == b"secure"
        assert len(heads) == 2 and b"Host: localhost:%d" % port in heads[0]
        assert client.open_connections == 1  # kept alive over TLS too
        await client.aclose()
    finally:
        server.close()
        monkeypatch.setattr(connect, "_TLS", None)


async def test_a_tls_handshake_that_never_completes_is_bounded_by_the_connect_timeout(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    server = await scripted(silent)
    client = HttpClient(0.3)
    t0 = time.monotonic()
    with pytest.raises(ConnectFailed, match=r"within 0\.3 s"):
        await client.request("POST", f"https://127.0.0.1:{server.port}/x", {}, b"")
    assert time.monotonic() - t0 < 1.0
