"""Test plumbing for code that runs on an event loop: counting its turns, a bare ASGI lifespan, a
real uvicorn server in the test's own loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

AsgiHandler = Callable[[Any, Any, Any], Awaitable[None]]


class Turns:
    """Counts turns of the running loop (a callback that puts itself back once per turn)."""

    def __init__(self) -> None:
        self.count = 0
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


async def answer_lifespan(receive: Any, send: Any) -> None:
    """An ASGI app's lifespan scope answered: started, then shut down when told."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


@asynccontextmanager
async def serving_asgi(handler: AsgiHandler, http: str = "httptools") -> AsyncIterator[int]:
    """`handler(scope, receive, send)` served by uvicorn (its lifespan answered) on a free loopback
    port, in the running loop; yields the port, and stops the server on leaving."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        await handler(scope, receive, send)

    server = uvicorn.Server(uvicorn.Config(app, http=http, log_level="error", lifespan="on"))
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    task = asyncio.ensure_future(server.serve(sockets=[listening]))
    try:
        yield listening.getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
