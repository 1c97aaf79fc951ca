"""Test plumbing for code that runs on an event loop: counting its turns, a bare ASGI lifespan."""

from __future__ import annotations

import asyncio
from typing import Any


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
