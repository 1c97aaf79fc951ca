"""A streaming request's upstream open: its own task, whose last step wakes the relay in place.

A stream may owe keep-alives before the upstream answers, so the relay cannot await the open
itself (the keep-alive tick interrupts the relay's wait, and that would cancel the open with it).
The open runs as a task the tick leaves alone, and the step that finishes it sets the relay's waiter
itself: awaited through the task's done-callback, the relay woke one turn of the event loop later
(under load a turn is one pass over every ready stream).

On Python 3.12 and later the task starts eagerly (`asyncio.create_eager_task_factory`, public API):
its first step, which writes the upstream request, runs before `UpstreamOpen(...)` returns instead
of on the loop's next turn. The first step is the task's own either way, so a connect's
`asyncio.timeout` entered there binds to the open, not to the caller (bound to the caller's task it
cancelled the request instead of the connect). Earlier versions of this module ran the first step
in place through asyncio's private task bookkeeping; only public interfaces are used now
(docs/architecture.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")

TaskFactory = Callable[[asyncio.AbstractEventLoop, Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


def _task_factory() -> TaskFactory:
    eager = getattr(asyncio, "create_eager_task_factory", None)  # Python 3.12+
    if eager is not None:
        factory: TaskFactory = eager(asyncio.Task)
        return factory
    return lambda loop, coro: loop.create_task(coro)


_start_task = _task_factory()


class UpstreamOpen(Generic[T]):
    """`coro` (an upstream open) running as its own task.

    `future` holds the outcome (set by the open's last step); `wait()` returns when it is done and is
    cancel-safe (a cancelled wait leaves the open running); `cancel()` cancels the open."""

    __slots__ = ("_coro", "_waiter", "future", "task")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        loop = asyncio.get_running_loop()
        self.future: asyncio.Future[T] = loop.create_future()
        self._waiter: asyncio.Future[None] | None = None
        self._coro = coro
        self.task: asyncio.Task[None] = _start_task(loop, self._run())
        self.task.add_done_callback(self._task_done)

    async def _run(self) -> None:
        future = self.future
        try:
            result: T = await self._coro
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            future.set_result(result)
        finally:
            self._wake()  # the relay wakes on the next turn, not two turns later

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A task cancelled before its first turn never ran `_run`: the open never started."""
        if not self.future.done():
            self._coro.close()
            self.future.cancel()
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def done(self) -> bool:
        return self.future.done()

    def cancel(self) -> None:
        if not self.task.done():
            self.task.cancel()

    async def wait(self) -> None:
        """Until the open is done. A cancelled wait (a keep-alive tick) leaves the open running."""
        if self.future.done():
            return
        waiter = self._waiter = self.future.get_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None
