"""Chat streams from the embedded local model with an Idempotency-Key, read from a bare socket: the
idempotency and replay tests start one, leave it, and come back to it."""

from __future__ import annotations

import socket

import orjson

from tests.support.process import ServerProcess

LONG = [  # long enough that a stream is still running when the test comes back to it
    {"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}
]


def body(max_tokens: int = 24, stream: bool = True, messages: list[dict[str, str]] | None = None) -> dict[str, object]:
    return {
        "model": "local/smollm2",
        "stream": stream,
        "max_tokens": max_tokens,
        "seed": 7,
        "messages": messages or [{"role": "user", "content": "Name three colours."}],
    }


def open_stream(
    server: ServerProcess, payload: dict[str, object], headers: dict[str, str], path: str = "/v1/chat/completions"
) -> socket.socket:
    """A generation request (chat unless `path` says another door) on a bare socket, its response left
    unread: the test decides when the client reads, stops reading or goes away."""
    raw = orjson.dumps(payload)
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head}"
        f"Content-Length: {len(raw)}\r\n\r\n".encode()
        + raw
    )
    return sock


def read_until(sock: socket.socket, n_events: int) -> bytes:
    """What `sock` received until `n_events` SSE events arrived (or it closed)."""
    got = b""
    while got.count(b"\nid: ") + got.startswith(b"id: ") < n_events and got.count(b"data: ") < n_events:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got
