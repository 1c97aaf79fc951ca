"""A response's head leaves with its first body bytes: one TCP segment, seen on the wire.

The segments a real tidegate server sends to its client are read off the loopback interface with a
packet socket (AF_PACKET, which needs CAP_NET_RAW: root, as on this project's machines and CI),
filtered by the connection's two ports. A head written on its own is a segment of its own; the
tests ask that the first segment from the server carry the head and the first event of a stream,
the whole answer of a non-stream request or an error, and the first keep-alive of a stream whose
upstream is slow to answer.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from helpers import ServerProcess, sqlite_url, start_server

PACKET_HOST = 0  # sll_pkttype of a packet received (an IPv4-only packet socket sees no outgoing copy)
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(emu: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("response-writes")
    config = tidegate_toml(
        sqlite_url(workdir),
        {"emu": {"kind": "openai", "base_url": emu.base_url}},
        {"w/text": [("emu", "text")], "w/slow": [("emu", "slow-first-byte:1")]},
        server={"keepalive_s": 0.2},
    )
    srv = start_server(workdir, config)
    yield srv
    srv.stop()


class LoopbackCapture:
    """TCP payloads sent from `port` on the loopback interface, in the order they were sent."""

    def __init__(self) -> None:
        try:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0800))
        except PermissionError:
            pytest.skip("reading packets off the loopback interface needs CAP_NET_RAW")
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind(("lo", 0))

    def segments(self, src_port: int, dst_port: int) -> list[bytes]:
        out: list[bytes] = []
        self.sock.setblocking(False)
        while True:
            try:
                frame, addr = self.sock.recvfrom(70000)
            except BlockingIOError:
                break
            if addr[2] != PACKET_HOST:
                continue
            ip = frame[14:]
            if ip[0] >> 4 != 4 or ip[9] != socket.IPPROTO_TCP:
                continue
            total = struct.unpack("!H", ip[2:4])[0]
            tcp = ip[(ip[0] & 0x0F) * 4 : total]
            sport, dport = struct.unpack("!HH", tcp[:4])
            payload = tcp[(tcp[12] >> 4) * 4 :]
            if (sport, dport) == (src_port, dst_port) and payload:
                out.append(payload)
        return out

    def close(self) -> None:
        self.sock.close()


def exchange(server: ServerProcess, path: str, body: dict[str, Any], key: str | None = None) -> list[bytes]:
    """One request on a fresh connection (`connection: close`, read to the end); the server's
    segments to it."""
    port = int(server.base_url.rsplit(":", 1)[1])
    capture = LoopbackCapture()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            raw = orjson.dumps(body)
            conn.sendall(
                f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n"
                f"authorization: Bearer {key or server.key}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(raw)}\r\n\r\n".encode()
                + raw
            )
            received = b""
            while chunk := conn.recv(65536):
                received += chunk
            local_port = conn.getsockname()[1]
        time.sleep(0.05)  # the capture socket's queue holds every packet already
        segments = capture.segments(port, local_port)
    finally:
        capture.close()
    assert b"".join(segments) == received, "the capture missed bytes the client read"
    return segments


def split_head(segment: bytes) -> tuple[bytes, bytes]:
    head, sep, rest = segment.partition(b"\r\n\r\n")
    assert sep, f"the first segment does not hold the whole head: {segment[:200]!r}"
    return head, rest


def test_a_stream_head_leaves_with_its_first_event(server: ServerProcess) -> None:
    body = {"model": "w/text", "messages": HI, "stream": True}
    segments = exchange(server, "/v1/chat/completions", body)
    head, rest = split_head(segments[0])
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding: chunked" in head
    assert b"data: {" in rest, f"the head left alone: {segments[0][-120:]!r}"
    assert segments[-1].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")


def test_a_non_stream_answer_is_one_segment(server: ServerProcess) -> None:
    segments = exchange(server, "/v1/chat/completions", {"model": "w/text", "messages": HI})
    assert len(segments) == 1
    head, rest = split_head(segments[0])
    assert head.startswith(b"HTTP/1.1 200 ")
    length = int(next(line for line in head.split(b"\r\n") if line.startswith(b"content-length:")).split(b":")[1])
    assert len(rest) == length
    assert orjson.loads(rest)["choices"][0]["message"]["content"]


def test_an_error_answer_is_one_segment(server: ServerProcess) -> None:
    segments = exchange(server, "/v1/chat/completions", {"model": "w/text", "messages": HI}, key="tg-wrong")
    assert len(segments) == 1
    head, rest = split_head(segments[0])
    assert head.startswith(b"HTTP/1.1 401 ")
    assert orjson.loads(rest)["error"]["code"]


def test_a_stream_committed_by_a_keepalive_sends_it_with_the_head(server: ServerProcess) -> None:
    body = {"model": "w/slow", "messages": HI, "stream": True}
    segments = exchange(server, "/v1/chat/completions", body)
    _, rest = split_head(segments[0])
    lines = rest.split(b"\r\n")
    assert len(lines) > 1 and lines[1].startswith(b":"), f"no keep-alive comment after the head: {rest[:80]!r}"
    assert b"data: {" not in rest
    assert segments[-1].endswith(b"\r\n0\r\n\r\n")  # (the emulator's late answer is an error chunk)
