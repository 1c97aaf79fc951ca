"""What a hostile client meets before the app (docs/api-edges.md §16), against a real `tidegate
serve` with small limits: head size and header count, head and body timeouts, idle connections, the
per-worker connection cap, and malformed HTTP answered in the contract's JSON shape.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, running_server
from tests.support.streams import RawStream

LIMITS = {
    "max_header_bytes": 8192,
    "max_headers": 20,
    "header_timeout_s": 1.0,
    "body_timeout_s": 1.0,
    "max_connections": 12,
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, emu: OpenAIUpstream) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("hostile-http")
    config = tidegate_toml(
        f"sqlite:///{tmp / 'g.db'}",
        {"emu": {"kind": "openai", "base_url": emu.base_url}},
        {"m": [("emu", "text")], "slow": [("emu", "slow:0.05")]},
        server=LIMITS,
    )
    with running_server(tmp / "gw", config) as server:
        yield server


def _connect(server: ServerProcess) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(10)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the gateway writes until it closes the connection."""
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return out
        if not data:
            return out
        out += data


def _status_and_error(answer: bytes) -> tuple[int, str]:
    """(status, error code) of an answer the guard wrote, which like every answer says `nosniff`."""
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"\r\nx-content-type-options: nosniff\r\n" in head.lower(), head
    return int(head.split()[1]), orjson.loads(body)["error"]["code"]


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_an_oversized_head_is_431_and_unfinished_ones_cannot_grow_the_gateway(gateway: ServerProcess) -> None:
    sock = _connect(gateway)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n")
    assert _status_and_error(_read_all(sock)) == (431, "request_header_fields_too_large")
    sock.close()
    before = _rss_kb(gateway.proc.pid)
    socks = []
    for _ in range(10):  # each tries to hold 4 MB of a head that never ends
        s = _connect(gateway)
        s.sendall(b"GET /healthz HTTP/1.1\r\nX-Endless: ")
        try:
            for _ in range(64):
                s.sendall(b"b" * 65536)
        except OSError:
            pass  # closed by the gateway once past the limit
        socks.append(s)
    grown = _rss_kb(gateway.proc.pid) - before
    for s in socks:
        s.close()
    assert grown < 8 * 1024, f"RSS grew {grown} KB"
    assert httpx.get(gateway.base_url + "/healthz").status_code == 200


def test_too_many_headers_are_431(gateway: ServerProcess) -> None:
    sock = _connect(gateway)
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(30))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    assert _status_and_error(_read_all(sock)) == (431, "request_header_fields_too_large")
    sock.close()


def test_a_head_sent_a_byte_at_a_time_is_cut_off_with_408(gateway: ServerProcess) -> None:
    sock = _connect(gateway)
    t0 = time.monotonic()
    closed = False
    for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 100:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            closed = True
            break
        time.sleep(0.2)
        if time.monotonic() - t0 > 4:
            break
    answer = _read_all(sock)
    took = time.monotonic() - t0
    assert closed or answer, "still open"
    assert took < 4
    if answer:
        assert _status_and_error(answer) == (408, "request_timeout")
    sock.close()


def test_a_connection_that_sends_nothing_is_closed(gateway: ServerProcess) -> None:
    sock = _connect(gateway)
    t0 = time.monotonic()
    answer = _read_all(sock)
    assert time.monotonic() - t0 < 3
    assert _status_and_error(answer) == (408, "request_timeout")
    sock.close()


def test_a_body_that_stalls_closes_the_connection(gateway: ServerProcess) -> None:
    sock = _connect(gateway)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + gateway.key.encode()
        + b'\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"model":'
    )
    t0 = time.monotonic()
    _read_all(sock)
    assert time.monotonic() - t0 < 4
    sock.close()


def test_an_idle_keep_alive_connection_closes_after_5_s(gateway: ServerProcess) -> None:
    sock = _connect(gateway)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    first = sock.recv(65536)
    while b'{"status":"ok"}' not in first:  # the head and the body may come as two writes
        more = sock.recv(65536)
        assert more, first
        first += more
    assert first.startswith(b"HTTP/1.1 200")
    t0 = time.monotonic()
    sock.settimeout(10)
    assert sock.recv(65536) == b""  # closed by the gateway
    assert 4 < time.monotonic() - t0 < 8
    sock.close()


def test_malformed_http_gets_the_json_error_shape(gateway: ServerProcess) -> None:
    sock = _connect(gateway)
    sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
    assert _status_and_error(_read_all(sock)) == (400, "invalid_request")
    sock.close()


def test_past_the_connection_cap_new_connections_are_refused_and_running_streams_go_on(
    gateway: ServerProcess,
) -> None:
    stream = RawStream(
        gateway.base_url,
        "/v1/chat/completions",
        {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        gateway.headers,
    )
    stream.read_events(2)
    holders = []
    for _ in range(LIMITS["max_connections"] + 3):
        s = _connect(gateway)
        holders.append(s)
    time.sleep(0.2)
    refused = 0
    for s in holders:
        s.settimeout(0.3)
        try:
            data = s.recv(65536)
        except TimeoutError:
            continue
        if data.startswith(b"HTTP/1.1 503"):
            refused += 1
    assert refused >= 3  # the ones past the cap, at once
    before = len(stream.events)
    stream.read_events(before + 5, timeout=5)  # the running stream is unaffected
    assert len(stream.events) >= before + 5
    for s in holders:
        s.close()
    time.sleep(0.3)
    assert httpx.get(gateway.base_url + "/healthz").status_code == 200  # serving again
    stream.close()


def _slow_body(server: ServerProcess, key: str, first: bytes = b'{"mo') -> socket.socket:
    """A chat request whose 100 kB body has begun and goes on a few bytes at a time."""
    sock = _connect(server)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + key.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        + first
    )
    return sock


def test_a_body_trickled_below_the_minimum_rate_is_cut_with_408(gateway: ServerProcess) -> None:
    """Never silent for `body_timeout_s`, but far below `body_min_bytes_per_s`: cut once the first
    `body_timeout_s` has passed."""
    sock = _slow_body(gateway, gateway.key)
    t0 = time.monotonic()
    answer = b""
    while time.monotonic() - t0 < 6:
        try:
            sock.sendall(b"      ")
        except OSError:
            break
        sock.settimeout(0.4)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        if not data:
            break
        answer += data
    sock.settimeout(2)
    answer += _read_all(sock)
    took = time.monotonic() - t0
    sock.close()
    assert took < 3, f"a trickled body held its connection {took:.1f} s"
    assert _status_and_error(answer) == (408, "request_timeout")


def test_slow_bodies_cannot_lock_new_clients_out(gateway: ServerProcess) -> None:
    """Slow bodies on every connection the worker allows: a new body closes the slowest of them once
    bodies hold 3/4 of `max_connections`, so a new client still connects and is answered."""
    holders = [_slow_body(gateway, gateway.key) for _ in range(LIMITS["max_connections"])]
    try:
        r = httpx.post(
            gateway.base_url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers=gateway.headers,
            timeout=10,
        )
        assert r.status_code == 200, r.text
        refused = 0
        for s in holders:
            s.settimeout(0.5)
            try:
                refused += s.recv(65536).startswith(b"HTTP/1.1 408")
            except (TimeoutError, ConnectionResetError):
                pass
        assert refused >= 3  # the slowest bodies, closed for the new ones
    finally:
        for s in holders:
            s.close()


def test_unfinished_bodies_count_against_the_keys_concurrent_limit(gateway: ServerProcess) -> None:
    created = httpx.post(
        gateway.base_url + "/api/v1/keys",
        json={"name": "slow", "limits": {"concurrent": 2}},
        headers=gateway.headers,
    )
    assert created.status_code == 201, created.text
    secret = created.json()["key"]
    holders = [_slow_body(gateway, secret) for _ in range(2)]
    try:
        time.sleep(0.2)  # both authenticated and reading their bodies
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        third = httpx.post(
            gateway.base_url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}
        )
        assert third.status_code == 429, third.text
        assert third.json()["error"]["code"] == "rate_limited" and third.headers["retry-after"]
        other = httpx.post(gateway.base_url + "/v1/chat/completions", json=body, headers=gateway.headers)
        assert other.status_code == 200  # another key is not held up
    finally:
        for s in holders:
            s.close()
    time.sleep(0.2)
    again = httpx.post(
        gateway.base_url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}
    )
    assert again.status_code == 200, again.text


def test_a_431_reaches_a_client_still_sending_its_head(gateway: ServerProcess) -> None:
    """The answer goes out with a FIN and what the client sends after it is read and dropped: a
    client still writing its oversized head reads the 431 and then the end of the stream, never a
    reset (a reset can destroy an answer the client has not read yet)."""
    sock = _connect(gateway)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000)
    answer = b""
    while b"}}" not in answer:
        data = sock.recv(65536)
        assert data, answer
        answer += data
    assert answer.startswith(b"HTTP/1.1 431")
    for _ in range(8):  # 512 kB more, as a client that writes its whole head before reading would
        sock.sendall(b"a" * 65536)
        time.sleep(0.02)
    sock.settimeout(5)
    assert sock.recv(65536) == b""  # the end of the stream, not ECONNRESET
    sock.close()
