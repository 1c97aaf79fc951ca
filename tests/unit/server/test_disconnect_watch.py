"""`DisconnectWatch` on a real uvicorn server (httptools, as `tidegate serve` runs it): the client
going away sets the signal, the watch starts no task, and leaving the block takes its waiter off
the server's event without awaiting anything (a late disconnect then sets nothing)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from tests.support.loop import serving_asgi
from tidegate.server.disconnect import DisconnectWatch
from tidegate.server.http import Request

App = Callable[[Request], Awaitable[None]]
REQUEST = b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"


@asynccontextmanager
async def serving(handler: App) -> AsyncIterator[int]:
    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        req = Request.from_scope(scope, receive, send)
        await req.body(1024)
        await handler(req)

    async with serving_asgi(asgi) as port:
        yield port


async def test_the_client_going_away_sets_the_signal_and_no_task_is_started() -> None:
    disconnected = asyncio.Event()
    tasks: list[int] = []

    async def handler(req: Request) -> None:
        before = len(asyncio.all_tasks())
        async with DisconnectWatch(req, disconnected):
            tasks.append(len(asyncio.all_tasks()) - before)
            await asyncio.wait_for(disconnected.wait(), 10)
        await req.respond_json(200, {})  # (to nobody)

    async with serving(handler) as port:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        await asyncio.sleep(0.1)
        writer.close()
        await asyncio.wait_for(disconnected.wait(), 10)
    assert tasks == [0]


async def test_leaving_the_block_stops_watching_at_once() -> None:
    late = asyncio.Event()
    left = asyncio.Event()
    waiters: list[int] = []

    async def handler(req: Request) -> None:
        watch = DisconnectWatch(req, late)
        async with watch:
            await asyncio.sleep(0)
        waiters.append(len(receive_event(req)._waiters))  # type: ignore[attr-defined]
        left.set()
        await asyncio.sleep(0.5)  # the client goes away meanwhile: nothing watches any more
        await req.respond_json(200, {})

    async with serving(handler) as port:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        await asyncio.wait_for(left.wait(), 10)
        writer.close()
        await asyncio.sleep(0.7)
    assert waiters == [0] and not late.is_set()


async def test_without_a_signal_nothing_is_watched() -> None:
    seen: list[int] = []

    async def handler(req: Request) -> None:
        async with DisconnectWatch(req, None):
            seen.append(len(receive_event(req)._waiters))  # type: ignore[attr-defined]
        await req.respond_json(200, {})

    async with serving(handler) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)).startswith(b"HTTP/1.1 200")
        writer.close()
    assert seen == [0]


def receive_event(req: Request) -> asyncio.Event:
    """uvicorn's per-request event its `receive` waits on (the bound method's cycle)."""
    cycle = req.receive.__self__  # type: ignore[attr-defined]
    event: asyncio.Event = cycle.message_event
    return event


async def test_a_server_whose_receive_is_no_coroutine_gets_a_task() -> None:
    """An ASGI server may hand out `receive` returning any awaitable (here a future): the watch then
    awaits it in a task of its own, and leaving the block cancels that task."""
    loop = asyncio.get_running_loop()
    messages: list[asyncio.Future[dict[str, Any]]] = []

    def receive() -> asyncio.Future[dict[str, Any]]:
        messages.append(loop.create_future())
        return messages[-1]

    async def send(message: Any) -> None:
        return None

    req = Request.from_scope({"type": "http", "headers": []}, receive, send)  # type: ignore[arg-type]
    disconnected = asyncio.Event()
    async with DisconnectWatch(req, disconnected):
        messages[-1].set_result({"type": "http.request", "body": b"", "more_body": False})
        await asyncio.sleep(0.01)
        assert not disconnected.is_set() and len(messages) == 2  # listening again
        messages[-1].set_result({"type": "http.disconnect"})
        await asyncio.wait_for(disconnected.wait(), 5)
    quiet = asyncio.Event()
    async with DisconnectWatch(req, quiet):
        await asyncio.sleep(0)  # the task awaits the server's message
        pending = messages[-1]
    assert pending.cancelled() and not quiet.is_set()  # the task was cancelled with its wait
