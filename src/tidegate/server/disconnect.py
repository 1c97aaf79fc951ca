"""Watch the client connection while a response is produced: `http.disconnect` cancels it.

Only when there is something to cancel: a request with an Idempotency-Key keeps running when its
client goes away (docs/api-operations.md §7), so it has no watcher. The watcher is the server's `receive()`
coroutine stepped by hand from the done-callback of the future it waits on, not a task: a task per
request cost its creation, two turns to start and to take its cancellation at the end (the request
awaited that one), and a `CancelledError` built each time. Leaving the block closes the coroutine
(its own `finally` takes its waiter off the server's event) and nothing is awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from types import CoroutineType, TracebackType
from typing import Any, Protocol

from .http import Request


class Settable(Protocol):
    def set(self) -> None: ...


class DisconnectWatch:
    """`async with DisconnectWatch(req, signal)`: sets `signal` if the client disconnects meanwhile;
    with `signal=None` it watches nothing and starts nothing."""

    __slots__ = ("_coro", "_loop", "_on_disconnect", "_receive", "_task")

    def __init__(self, req: Request, on_disconnect: Settable | None) -> None:
        self._receive = req.receive
        self._on_disconnect = on_disconnect
        self._coro: Coroutine[Any, Any, Any] | None = None
        self._task: asyncio.Task[None] | None = None  # a server whose receive is no coroutine
        if on_disconnect is None:
            return
        self._loop = asyncio.get_running_loop()
        self._listen()

    def _listen(self) -> None:
        receiving = self._receive()
        if type(receiving) is not CoroutineType:
            self._task = self._loop.create_task(self._watch(receiving))
            return
        self._coro = receiving
        self._step()

    def _step(self, _done: object = None) -> None:
        """One step of `receive()`: on to the next wait, or its message."""
        coro = self._coro
        if coro is None:  # closed meanwhile (a done-callback already scheduled runs after the close)
            return
        try:
            waiting = coro.send(None)
        except StopIteration as stop:
            self._coro = None
            self._received(stop.value)
            return
        except (Exception, asyncio.CancelledError):  # the server's receive failed: nothing left to watch
            self._coro = None
            return
        if asyncio.isfuture(waiting):
            waiting._asyncio_future_blocking = False  # taken, as a task takes what it awaits
            waiting.add_done_callback(self._step)
        else:  # a bare yield (`asyncio.sleep(0)`): again on the next turn
            self._loop.call_soon(self._step)

    def _received(self, message: Any) -> None:
        if message["type"] == "http.disconnect":
            assert self._on_disconnect is not None
            self._on_disconnect.set()
        else:  # more body after the body was read: not expected; keep listening
            self._listen()

    async def _watch(self, receiving: Any) -> None:
        message = await receiving
        while message["type"] != "http.disconnect":
            message = await self._receive()
        assert self._on_disconnect is not None
        self._on_disconnect.set()

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        coro, self._coro = self._coro, None
        if coro is not None:
            coro.close()  # GeneratorExit at its wait: the waiter leaves the server's event
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
