"""Waiting on the upstream in place: no task per read, no watcher task per generation.

The relay awaits each upstream step (open, read) inside the task that consumes it, under an
`asyncio.timeout_at` deadline (idle timeout or next keep-alive). The cancel signal (client gone, or
`POST /generations/{id}/cancel`) is an `asyncio.Event` whose `set` also interrupts that wait by
cancelling the waiting task; the wait takes that cancellation back (`Task.uncancel`) and reports
CANCELLED. A cancellation that came from anywhere else (server shutdown, the door's task) is never
swallowed. Upstream steps must be cancel-safe: a read cancelled by a deadline loses nothing
(aiohttp's `readany` and `asyncio.Queue.get` consume data only after their wait returns).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

T = TypeVar("T")


class _Outcome:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


TIMED_OUT: Final = _Outcome("TIMED_OUT")
CANCELLED: Final = _Outcome("CANCELLED")


class CancelSignal(asyncio.Event):
    """Set once to cancel a generation; wakes the relay's upstream wait at once."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: asyncio.Task[Any] | None = None
        self._interrupted: asyncio.Task[Any] | None = None

    def set(self) -> None:
        if self.is_set():
            return
        super().set()
        task = self._waiting
        if task is not None and not task.done():
            self._interrupted = task
            task.cancel()

    def _took_back(self, task: asyncio.Task[Any]) -> bool:
        """True when this signal's own cancel of `task` was the only one pending (now undone)."""
        if self._interrupted is not task:
            return False
        self._interrupted = None
        return task.uncancel() == 0


# A deadline that passed while the consumer was away (writing to a slow client) still gets one poll
# of the sockets: bytes the upstream sent meanwhile may sit unread in the kernel, and silence is only
# silence once they were looked for.
MIN_WAIT_S: Final = 0.001


async def wait_upstream(step: Awaitable[T], deadline: float, signal: CancelSignal) -> T | _Outcome:
    """`await step` until `deadline` (loop time; inf for none): its result, TIMED_OUT or CANCELLED."""
    if signal.is_set():
        if asyncio.iscoroutine(step):
            step.close()
        return CANCELLED
    task = asyncio.current_task()
    assert task is not None
    signal._waiting = task
    loop = asyncio.get_running_loop()
    scope = asyncio.timeout_at(None if math.isinf(deadline) else max(deadline, loop.time() + MIN_WAIT_S))
    try:
        async with scope:
            return await step
    except TimeoutError:
        if scope.expired():
            return TIMED_OUT
        raise
    except asyncio.CancelledError:
        if signal._took_back(task):
            return CANCELLED
        raise
    finally:
        signal._waiting = None
        if signal._interrupted is task:  # the step swallowed the cancellation: undo it all the same
            signal._interrupted = None
            task.uncancel()
