"""A started stream's body writes go straight to uvicorn's transport (`shortcuts.py`), on a real
uvicorn server: the bytes on the wire are exactly what uvicorn's own `send` writes for the same
messages, only the head and the last message go through `send` (httptools, as `tidegate serve`
runs it), and a server whose cycle is not known (h11) gets every message through `send`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.protocols.http import httptools_impl

from tests.support.loop import serving_asgi
from tidegate.server.http import Request
from tidegate.server.runtime import shortcuts
from tidegate.server.runtime.shortcuts import chunked_cycle

EVENTS = [b'id: 0\ndata: {"a":1}\n\n', b"x" * 70_000, b": keep-alive\n\n", b"id: 1\ndata: [DONE]\n\n"]


async def raw_response(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


def body_of(response: bytes) -> bytes:
    """The response after its head (the head carries a date, which moves)."""
    return response.split(b"\r\n\r\n", 1)[1]


async def through_request(scope: Any, receive: Any, send: Any, seen: dict[str, Any]) -> None:
    req = Request.from_scope(scope, receive, send)
    await req.start(200, "text/event-stream", body=EVENTS[0])
    seen["cycle"] = chunked_cycle(send)
    assert req.write_now(EVENTS[1])
    await req.write(EVENTS[2])
    await req.write(EVENTS[3], more=False)


async def through_send(scope: Any, receive: Any, send: Any) -> None:
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for i, event in enumerate(EVENTS):
        await send({"type": "http.response.body", "body": event, "more_body": i < len(EVENTS) - 1})


@pytest.fixture
def counted_sends(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The message types uvicorn's httptools cycle is sent (its own `send`, counted)."""
    sent: list[str] = []
    original = httptools_impl.RequestResponseCycle.send

    async def send(self: Any, message: Any) -> None:
        sent.append(f"{message['type']}{'' if message.get('more_body', True) else ' last'}")
        await original(self, message)

    monkeypatch.setattr(httptools_impl.RequestResponseCycle, "send", send)
    return sent


async def test_the_bytes_are_uvicorns_and_only_the_head_and_the_end_go_through_send(counted_sends: list[str]) -> None:
    seen: dict[str, Any] = {}
    async with serving_asgi(lambda *a: through_request(*a, seen), "httptools") as port:
        direct = await raw_response(port)
    assert isinstance(seen["cycle"], httptools_impl.RequestResponseCycle)
    assert counted_sends == ["http.response.start", "http.response.body", "http.response.body last"]
    counted_sends.clear()
    async with serving_asgi(through_send, "httptools") as port:
        sent = await raw_response(port)
    assert len(counted_sends) == 1 + len(EVENTS)
    assert body_of(direct) == body_of(sent)
    assert body_of(direct) == b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"


async def test_a_server_whose_cycle_is_not_known_gets_every_message_through_send() -> None:
    seen: dict[str, Any] = {}
    async with serving_asgi(lambda *a: through_request(*a, seen), "h11") as port:
        direct = await raw_response(port)
    assert seen["cycle"] is None
    assert body_of(direct) == b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"


async def test_a_response_with_a_length_is_not_written_directly() -> None:
    cycles: list[Any] = []

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"5")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        cycles.append(chunked_cycle(send))
        await send({"type": "http.response.body", "body": b"hello"})

    async with serving_asgi(handler, "httptools") as port:
        response = await raw_response(port)
    assert cycles == [None]
    assert body_of(response) == b"hello"


async def test_switched_off_every_message_goes_through_send_and_the_bytes_are_the_same(
    counted_sends: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shortcuts, "ENABLED", False)
    seen: dict[str, Any] = {}
    async with serving_asgi(lambda *a: through_request(*a, seen), "httptools") as port:
        plain = await raw_response(port)
    assert seen["cycle"] is None
    assert counted_sends == ["http.response.start", *["http.response.body"] * 3, "http.response.body last"]
    assert body_of(plain) == b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"


def test_the_switch_and_the_tested_range(monkeypatch: pytest.MonkeyPatch) -> None:
    on, status = shortcuts._decide()
    assert on and status.startswith("on (uvicorn 0.")  # this suite runs on the pinned range
    monkeypatch.setenv("TIDEGATE_SERVER_SHORTCUTS", "off")
    assert shortcuts._decide() == (False, "off: TIDEGATE_SERVER_SHORTCUTS=off")
    monkeypatch.delenv("TIDEGATE_SERVER_SHORTCUTS")
    monkeypatch.setattr(shortcuts, "version", lambda name: "0.99.1")
    off, why = shortcuts._decide()
    assert not off and "uvicorn 0.99.1 is outside the tested range" in why
