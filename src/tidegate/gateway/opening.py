"""A streaming request's upstream open: its own task, started in place, its waiter woken in place.

A stream may owe keep-alives before the upstream answers, so the relay cannot await the open
itself (the keep-alive tick interrupts the relay's wait, and that would cancel the open with it).
The open runs as a task the tick leaves alone. Run as a plain `asyncio.ensure_future` task awaited
through a done-callback, it cost two turns of the event loop more than needed on every stream's
time to first token: the task's first step waited for the next turn (so the upstream request went
out one turn late), and when the open was done its task's done-callback ran a turn later, before
the relay's waiter it set could wake the relay on the turn after that. Under load a turn is one
pass over every ready stream, so at the load's peaks each of those turns can cost milliseconds.

`UpstreamOpen` takes both out: the open's first step runs at once (the upstream request is written
before `UpstreamOpen(...)` returns), and the step that finishes the open sets the relay's waiter
itself. The rest of the open runs as a real task (cancellation, exceptions and the loop's task
bookkeeping are asyncio's own), and the first step already runs as that task's own, as 3.12's eager
tasks do: whatever it binds to the current task binds to the open. A connect's `asyncio.timeout` is
entered in that first step; bound to the caller's task it cancelled the request instead of the
connect, and a stream to an upstream whose connect never completed ended in a bare 500.
"""

from __future__ import annotations

import asyncio
from asyncio.tasks import _enter_task, _leave_task
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

from ..resume import Resume

T = TypeVar("T")


class UpstreamOpen(Generic[T]):
    """`coro` (an upstream open) running as its own task, started before the constructor returns.

    `future` holds the outcome (set by the open's last step, in place); `wait()` returns when it is
    done and is cancel-safe (a cancelled wait leaves the open running); `cancel()` cancels the open."""

    __slots__ = ("_coro", "_pending", "_started", "_waiter", "future", "task")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        loop = asyncio.get_running_loop()
        self.future: asyncio.Future[T] = loop.create_future()
        self._waiter: asyncio.Future[None] | None = None
        self._coro = coro
        self._pending: Any = None
        self._started = False  # the task's own first turn ran
        task = self.task = loop.create_task(self._rest())
        task.add_done_callback(self._task_done)
        caller = asyncio.current_task(loop)
        if caller is not None:
            _leave_task(loop, caller)
        _enter_task(loop, task)
        try:
            self._pending = coro.send(None)
        except StopIteration as stop:
            self.future.set_result(stop.value)
        except asyncio.CancelledError:
            self.future.cancel()
        except Exception as exc:
            self.future.set_exception(exc)
        except BaseException:
            self._started = True
            task.cancel()
            raise
        finally:
            _leave_task(loop, task)
            if caller is not None:
                _enter_task(loop, caller)
        if self.future.done():
            self._started = True  # nothing left for the task
            task.cancel()

    async def _rest(self) -> None:
        self._started = True
        future, pending = self.future, self._pending
        self._pending = None
        try:
            result: T = await Resume(self._coro, pending)
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
        """The task was cancelled before its first turn (a timer the first step armed on it fires
        before the task's first turn on uvloop): the cancellation goes into the open here."""
        if not self._started:
            self._throw_unstarted()

    def _throw_unstarted(self) -> None:
        """The cancellation into an open whose task never ran, as the task would have thrown it: its
        own handling runs (a connect timeout becomes its error); if it awaits again it is closed."""
        self._started = True
        self._pending = None
        future = self.future
        try:
            self._coro.throw(asyncio.CancelledError())
        except StopIteration as stop:
            future.set_result(stop.value)
        except asyncio.CancelledError:
            future.cancel()
        except Exception as exc:
            future.set_exception(exc)
        else:  # it awaits again: without its task it cannot go on
            self._coro.close()
            future.cancel()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def done(self) -> bool:
        return self.future.done()

    def cancel(self) -> None:
        task = self.task
        if task.done():
            return
        task.cancel()
        if not self._started:
            # Cancelled before the task's first turn: the cancellation is raised at the top of
            # `_rest`, whose body never runs. It goes into the open now (its own cleanup runs now).
            self._throw_unstarted()

    async def wait(self) -> None:
        """Until the open is done. A cancelled wait (a keep-alive tick) leaves the open running."""
        if self.future.done():
            return
        waiter = self._waiter = self.future.get_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None
