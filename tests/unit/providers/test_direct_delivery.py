"""`HttpStream.attach`: batches delivered inside the connection's protocol callback, against a real
socket upstream that writes exact chunk frames when the test says so.

What must hold: each read is delivered as one batch (however many upstream events it carries),
decoded exactly as `read()` would have; it runs with no task
(nothing woke the reader); a batch the deliverer refuses comes back from the next `read()` before
any bytes that arrived after it; a deliverer that raises has that raised from `read()`; after
`detach` bytes wait for `read()` again; a connection back in its pool carries no sink.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from tidegate.events import Event, Finished, RawFrame, TextDelta
from tidegate.providers.http.client import HttpClient
from tidegate.providers.http.transport import HttpStream
from tidegate.providers.openai.chat import OpenAIDecoder

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def frame(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
    return b"%x\r\n%b\r\n" % (len(data), data)


DONE = b"%x\r\ndata: [DONE]\n\n\r\n0\r\n\r\n" % len(b"data: [DONE]\n\n")


class Upstream:
    """One connection at a time; `send(bytes)` writes to the current one."""

    def __init__(self) -> None:
        self.writer: asyncio.StreamWriter | None = None
        self.connected = asyncio.Event()
        self.port = 0
        self.server: asyncio.base_events.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            await reader.readexactly(length)
            self.writer = writer
            writer.write(HEAD)
            self.connected.set()
            try:
                await reader.read(1)  # until the client goes (or sends the next request)
            except ConnectionError:
                return
            if reader.at_eof():
                return

    async def send(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)
        await self.writer.drain()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream()
    up.server = await asyncio.start_server(up._serve, "127.0.0.1", 0)
    up.port = up.server.sockets[0].getsockname()[1]
    yield up
    up.server.close()


async def open_stream(client: HttpClient, upstream: Upstream) -> HttpStream:
    response = await client.request("POST", upstream.url, {"content-type": "application/json"}, b"{}")
    await upstream.connected.wait()
    return HttpStream(response, OpenAIDecoder("emu", "m"), "emu")


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    c = HttpClient(5.0)
    yield c
    await c.aclose()


async def started(client: HttpClient, upstream: Upstream) -> HttpStream:
    """A stream whose first chunk ("a") was read the reader's way, as the relay reads it."""
    stream = await open_stream(client, upstream)
    await upstream.send(frame("a"))
    assert texts(await stream.read()) == ["a"]
    return stream


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.005)


def texts(batch: list[Event] | None) -> list[str]:
    return [e.text for e in batch or [] if isinstance(e, TextDelta)]


async def test_plain_batches_are_delivered_in_the_protocol_callback_in_order(
    upstream: Upstream, client: HttpClient
) -> None:
    stream = await started(client, upstream)  # the first batch comes the reader's way
    delivered: list[list[Event]] = []
    in_task: list[bool] = []

    def deliver(batch: list[Event]) -> bool:
        in_task.append(asyncio.current_task() is not None)
        delivered.append(batch)
        return True

    assert stream.attach(deliver)
    for word in ("b", "c", "d"):
        await upstream.send(frame(word))
        await settle()
    await upstream.send(frame("x") + frame("y"))  # one read, two upstream events: one batch, one write
    await settle()
    assert [texts(b) for b in delivered] == [["b"], ["c"], ["d"], ["x", "y"]]
    assert all(isinstance(b[0], RawFrame) for b in delivered)  # decoded exactly as `read()` decodes
    assert in_task == [False, False, False, False]  # no task ran them: the protocol callback did
    stream.detach()
    await upstream.send(frame("e"))
    assert texts(await stream.read()) == ["e"]  # detached: the reader's way again
    await stream.aclose()


async def test_a_refused_batch_comes_back_before_the_bytes_after_it(upstream: Upstream, client: HttpClient) -> None:
    stream = await started(client, upstream)

    def deliver(batch: list[Event]) -> bool:
        return not any(isinstance(e, Finished) for e in batch)  # endings go the reader's way

    assert stream.attach(deliver)
    reading = asyncio.ensure_future(stream.read())  # the relay waits on its next read meanwhile
    await settle()
    # the refused batch, and more bytes right behind it (in its read or the next)
    await upstream.send(frame(finish="stop"))
    await upstream.send(frame("after") + DONE)
    order: list[str] = []
    batch = await reading
    while batch is not None:
        order += [
            "finished" if isinstance(e, Finished) else e.text for e in batch if isinstance(e, Finished | TextDelta)
        ]
        batch = await stream.read()
    assert order == ["finished", "after"]  # whatever the reads: what came after it, after it
    assert client.idle_connections == 1  # [DONE] and the body's end were read


async def test_a_refused_batch_is_read_even_when_nobody_was_waiting(upstream: Upstream, client: HttpClient) -> None:
    stream = await started(client, upstream)
    assert stream.attach(lambda batch: not any(isinstance(e, Finished) for e in batch))
    await upstream.send(frame(finish="stop"))
    await settle()  # refused and kept; nobody reads
    await upstream.send(frame("late"))
    await settle()  # these bytes wait unread behind it
    kept = await stream.read()  # the reader comes back only now
    assert kept is not None and isinstance(kept[-1], Finished)
    assert texts(await stream.read()) == ["late"]
    await stream.aclose()


async def test_what_the_deliverer_raises_is_raised_to_the_reader(upstream: Upstream, client: HttpClient) -> None:
    stream = await started(client, upstream)

    def deliver(batch: list[Event]) -> bool:
        raise LookupError("the consumer's own bug")

    assert stream.attach(deliver)
    reading = asyncio.ensure_future(stream.read())
    await settle()
    await upstream.send(frame("b"))
    with pytest.raises(LookupError, match="own bug"):
        await asyncio.wait_for(reading, 5)
    await upstream.send(frame("c"))
    assert texts(await stream.read()) == ["c"]  # the delivery stopped; reading goes on
    await stream.aclose()


async def test_attach_is_refused_while_bytes_wait_and_a_pooled_connection_has_no_sink(
    upstream: Upstream, client: HttpClient
) -> None:
    stream = await open_stream(client, upstream)
    await upstream.send(frame("a"))
    await settle()  # the bytes arrived and wait unread
    assert not stream.attach(lambda batch: True)
    assert texts(await stream.read()) == ["a"]
    delivered: list[list[Event]] = []
    assert stream.attach(lambda batch: delivered.append(batch) is None)
    await upstream.send(frame(finish="stop") + DONE)
    await settle()
    # the finish chunk went to the deliverer (it takes everything); the body's end comes to `read()`
    assert delivered and isinstance(delivered[0][-1], Finished)
    assert await stream.read() is None
    assert client.idle_connections == 1
    pooled = client._idle[next(iter(client._idle))][0]
    assert pooled.sink is None and not pooled.nudged
