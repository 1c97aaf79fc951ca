"""Drive a `StreamSession` (the client's sans-I/O core) with bytes split at every offset."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from tidegate.client.session import Mode, StreamSession
from tidegate.client.types import StreamEvent

SSE_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "x-generation-id": "01J0000000000000000000GEN1",
    "x-provider": "prov-a",
    "x-served-model": "served-1",
}


def session(door: str = "chat", *, recover: bool = False, key: str = "key-1") -> StreamSession:
    body: dict[str, Any] = {"model": "m/x", "stream": True}
    return StreamSession(door, body, {"Authorization": "Bearer k"}, key, max_resumes=3 if recover else -1)


def chat_frames(chunks: list[dict[str, Any] | str], *, comments_at: tuple[int, ...] = ()) -> bytes:
    out = bytearray()
    for i, c in enumerate(chunks):
        if i in comments_at:
            out += b": TIDEGATE PROCESSING\n\n"
        data = c if isinstance(c, str) else orjson.dumps(c).decode()
        out += f"id: {i}\ndata: {data}\n\n".encode()
    return bytes(out)


def named_frames(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    out = bytearray()
    for i, (name, data) in enumerate(events):
        out += f"id: {i}\nevent: {name}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"
    return bytes(out)


def splits(data: bytes) -> Iterator[list[bytes]]:
    """The whole stream, then every two-part split, then byte by byte."""
    yield [data]
    for i in range(1, len(data)):
        yield [data[:i], data[i:]]
    yield [data[i : i + 1] for i in range(len(data))]


def run(
    door: str, parts: list[bytes], *, headers: dict[str, str] | None = None, recover: bool = False
) -> tuple[list[StreamEvent], BaseException | None, StreamSession]:
    s = session(door, recover=recover)
    events: list[StreamEvent] = []
    s.request()
    try:
        assert s.on_head(200, headers or SSE_HEADERS) is Mode.STREAM
        for p in parts:
            events.extend(s.on_bytes(p))
            s.raise_failure()
            if s.finished:
                break
        else:
            s.on_end("the stream ended without its terminal event")
    except Exception as exc:
        return events, exc, s
    return events, None, s


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m/x",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
        **extra,
    }


def usage_chunk(prompt: int = 3, completion: int = 5) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m/x",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    }
