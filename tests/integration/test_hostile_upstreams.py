"""Hostile upstreams: garbage bytes, endless lines, a 10 MB event, a response head that
never ends, a TLS server with a certificate nobody trusts, an upstream that accepts and never answers.
Each ends as the contract's failure (docs/api.md §4: a JSON error before the response starts, the
failure chunk and no `[DONE]` after it) and leaves the generation's record final.

The upstreams are raw sockets on loopback writing exact bytes (a thread each); the gateway is a real
`tidegate serve`.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import trustme

from tests.emulators.openai_upstream import tidegate_toml
from tests.support.process import ServerProcess, start_server
from tests.support.records import wait_record
from tests.support.streams import stream_sse

CHAT = "/v1/chat/completions"
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
IDLE_TIMEOUT_S = 2.0


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _read_request(conn: socket.socket) -> None:
    """Reads one request's head and its body (Content-Length), as a server would before answering."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return
        buf += data
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return
        rest += data


class RawUpstream:
    """A loopback server whose every connection runs `script(conn)` after reading the request."""

    def __init__(self, script: Callable[[socket.socket], None], tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.closed = threading.Event()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            _read_request(conn)
            self.script(conn)
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


def _until_closed(conn: socket.socket, seconds: float = 30.0) -> None:
    conn.settimeout(seconds)
    try:
        while conn.recv(65536):
            pass
    except OSError:
        pass


def garbage(conn: socket.socket) -> None:
    conn.sendall(b"\x16\x03\x01\x00\xa5 this is not HTTP at all \x00\xff" * 50)


def endless_line(conn: socket.socket) -> None:
    conn.sendall(SSE_HEAD + _chunk(b"data: "))
    block = _chunk(b"x" * 65536)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # a line that never ends (the gateway's cap is 4 MiB)
        conn.sendall(block)


def ten_mb_event(conn: socket.socket) -> None:
    conn.sendall(SSE_HEAD)
    first = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "hi"}}],
    }
    conn.sendall(_chunk(b"data: " + orjson.dumps(first) + b"\n\n"))
    big = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "y" * 10_000_000}}],
    }
    payload = b"data: " + orjson.dumps(big) + b"\n\n"
    for i in range(0, len(payload), 65536):
        conn.sendall(_chunk(payload[i : i + 65536]))
    _until_closed(conn)


def endless_head(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    deadline = time.monotonic() + 30
    i = 0
    while time.monotonic() < deadline:  # header lines forever, never the blank line
        conn.sendall(b"X-Filler-%d: %s\r\n" % (i, b"z" * 1000))
        i += 1


def silent(conn: socket.socket) -> None:
    _until_closed(conn)  # accepts, reads the request, never answers


@pytest.fixture
def gateway_for(tmp_path: Path) -> Iterator[Callable[[str], ServerProcess]]:
    servers: list[ServerProcess] = []

    def start(base_url: str) -> ServerProcess:
        config = tidegate_toml(
            f"sqlite:///{tmp_path / 'g.db'}",
            {"bad": {"kind": "openai", "base_url": base_url}},
            {"m": [("bad", "m")]},
            server={"upstream_idle_timeout_s": IDLE_TIMEOUT_S, "keepalive_s": 30, "connect_timeout_s": 3},
        )
        server = start_server(tmp_path / f"gw{len(servers)}", config)
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("script", "status", "code"),
    [
        (garbage, 502, "upstream_error"),
        (endless_line, 502, "upstream_error"),
        (endless_head, 502, "upstream_error"),
        (silent, 504, "upstream_timeout"),
    ],
    ids=["garbage", "endless-line", "endless-head", "never-answers"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_hostile_upstream_before_the_first_event_is_a_json_error_and_a_final_record(
    gateway_for: Callable[[str], ServerProcess],
    script: Callable[[socket.socket], None],
    status: int,
    code: str,
    stream: bool,
) -> None:
    upstream = RawUpstream(script)
    try:
        server = gateway_for(f"http://127.0.0.1:{upstream.port}/v1")
        t0 = time.monotonic()
        resp = httpx.post(server.base_url + CHAT, json={**BODY, "stream": stream}, headers=server.headers, timeout=60)
        took = time.monotonic() - t0
        assert resp.status_code == status, resp.text
        assert resp.json()["error"]["code"] == code
        assert took < IDLE_TIMEOUT_S + 10
        record = wait_record(server, resp.headers["x-generation-id"])
        assert record["status"] == "failed", record
        assert server.proc.poll() is None
    finally:
        upstream.close()


def test_a_10_mb_event_after_the_first_chunk_ends_the_stream_with_the_failure_chunk(
    gateway_for: Callable[[str], ServerProcess],
) -> None:
    upstream = RawUpstream(ten_mb_event)
    try:
        server = gateway_for(f"http://127.0.0.1:{upstream.port}/v1")
        result = stream_sse(server.base_url + CHAT, {**BODY, "stream": True}, server.headers, timeout=60)
        assert result.status == 200
        assert not result.done
        last = orjson.loads(result.events[-1].data)
        assert last["error"]["code"] == "upstream_protocol_error"
        assert last["choices"][0]["finish_reason"] == "error"
        record = wait_record(server, result.headers["x-generation-id"])
        assert record["status"] == "failed" and record["output_text"] == "hi"
    finally:
        upstream.close()


def test_a_tls_upstream_with_an_untrusted_certificate_is_refused(
    gateway_for: Callable[[str], ServerProcess],
) -> None:
    ca = trustme.CA()  # a CA the gateway's trust store does not have
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(tls)
    served: list[bool] = []
    upstream = RawUpstream(lambda conn: served.append(True), tls=tls)
    try:
        server = gateway_for(f"https://127.0.0.1:{upstream.port}/v1")
        resp = httpx.post(server.base_url + CHAT, json=BODY, headers=server.headers, timeout=30)
        # like any route that could not be reached: 503, naming the provider and why
        assert resp.status_code == 503, resp.text
        error = resp.json()["error"]
        assert error["code"] == "no_provider_available" and "bad (connect_error)" in error["message"]
        assert not served  # nothing was sent over a connection that failed verification
        assert wait_record(server, resp.headers["x-generation-id"])["status"] == "failed"
    finally:
        upstream.close()
