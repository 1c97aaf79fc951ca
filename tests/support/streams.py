"""Reading a gateway's answers: a whole SSE response through tidegate's own decoder, and a raw
HTTP/1.1 stream on a socket for tests that must control the connection."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from tidegate.sse import SSEDecoder, SSEEvent


@dataclass
class SSEResult:
    status: int
    headers: httpx.Headers
    events: list[SSEEvent]
    comments: int
    raw: bytes

    def json_events(self) -> list[Any]:
        return [orjson.loads(e.data) for e in self.events if e.data != "[DONE]"]

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1].data == "[DONE]"


def stream_sse(
    url: str,
    body: dict[str, Any] | bytes,
    headers: dict[str, str],
    timeout: float = 60.0,
    client: httpx.Client | None = None,
) -> SSEResult:
    """POST and read the whole SSE response with tidegate's own decoder (raw bytes kept). `client`:
    one to reuse (a test that sends many requests from each thread: a new client per request loads
    the system's certificates each time)."""
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    raw = bytearray()
    send = client.stream if client is not None else httpx.stream
    with send(
        "POST", url, content=content, headers={"content-type": "application/json", **headers}, timeout=timeout
    ) as resp:
        for chunk in resp.iter_raw():
            raw += chunk
            events.extend(decoder.feed(chunk))
        return SSEResult(resp.status_code, resp.headers, events, decoder.comments_seen, bytes(raw))


class RawStream:
    """A raw HTTP/1.1 streaming request on a socket (tests that must control the connection)."""

    def __init__(self, base_url: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        raw = orjson.dumps(body)
        host, port = base_url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)))
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head}"
            f"Content-Length: {len(raw)}\r\n\r\n".encode()
            + raw
        )
        self._buf = b""
        self.headers: dict[str, str] = {}
        self.status = 0
        self.decoder = SSEDecoder()
        self.events: list[SSEEvent] = []
        self.body = b""
        self.ended = False
        while b"\r\n\r\n" not in self._buf:
            self._recv()
        head_bytes, self._buf = self._buf.split(b"\r\n\r\n", 1)
        lines = head_bytes.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        self._buf += chunk

    def _dechunk(self) -> None:
        while True:
            if b"\r\n" not in self._buf:
                return
            size_line, rest = self._buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                self.ended = True
                return
            if len(rest) < size + 2:
                return
            data, self._buf = rest[:size], rest[size + 2 :]
            self.body += data
            self.events.extend(self.decoder.feed(data))

    def read_events(self, n: int, timeout: float = 30.0) -> list[SSEEvent]:
        """Read until at least `n` SSE events arrived (or the response ended)."""
        self.sock.settimeout(timeout)
        self._dechunk()
        while len(self.events) < n and not self.ended:
            try:
                self._recv()
            except ConnectionError:
                break
            self._dechunk()
        return self.events

    def read_to_end(self, timeout: float = 30.0) -> bytes:
        self.read_events(10**9, timeout)
        return self.body

    def close(self) -> None:
        self.sock.close()
