"""Watch the client connection while a response is produced: `http.disconnect` cancels it.

One small task per request, and only when there is something to cancel: a request with an
Idempotency-Key keeps running when its client goes away (CONTRACT §7), so it has no watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Protocol

from .http import Request


class Settable(Protocol):
    def set(self) -> None: ...


async def _watch(req: Request, on_disconnect: Settable) -> None:
    while True:
        message = await req.receive()
        if message["type"] == "http.disconnect":
            on_disconnect.set()
            return


class DisconnectWatch:
    """`async with DisconnectWatch(req, signal)`: sets `signal` if the client disconnects meanwhile;
    with `signal=None` it watches nothing and starts nothing."""

    __slots__ = ("_task",)

    def __init__(self, req: Request, on_disconnect: Settable | None) -> None:
        self._task = asyncio.ensure_future(_watch(req, on_disconnect)) if on_disconnect is not None else None

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
