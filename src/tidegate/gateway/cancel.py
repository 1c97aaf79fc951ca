"""Waiting on the upstream in place: no task per read, no watcher task per generation.

The relay awaits each upstream step (open, read) inside the task that consumes it, under one
lazily re-armed deadline (idle timeout or next keep-alive). The cancel signal (client gone, or
`POST /generations/{id}/cancel`) is a flag (`CancelSignal`) whose `set` also interrupts that wait by
cancelling the waiting task; the wait takes that cancellation back (`Task.uncancel`) and reports
CANCELLED. A cancellation that came from anywhere else (server shutdown, the door's task) is never
swallowed. Upstream steps must be cancel-safe: a read cancelled by a deadline loses nothing
(`HttpResponse.read_chunk` and `asyncio.Queue.get` consume data only after their wait returns).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Final, TypeVar

if TYPE_CHECKING:
    from ..providers.http.client import OpenProgress

T = TypeVar("T")


class _Outcome:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


TIMED_OUT: Final = _Outcome("TIMED_OUT")
CANCELLED: Final = _Outcome("CANCELLED")


class CancelSignal:
    """Set once to cancel a generation; wakes the relay's upstream wait at once.

    Not an `asyncio.Event`: nothing awaits it (the relay's wait is interrupted by cancelling the
    waiting task), and an Event's waiter deque and attribute dict cost ~0.8 KB per open stream."""

    __slots__ = ("_interrupted", "_set", "_waiting", "code")

    def __init__(self) -> None:
        self._set = False
        self._waiting: asyncio.Task[Any] | None = None
        self._interrupted: asyncio.Task[Any] | None = None
        # the failure code the generation ends with: `cancelled` (a client or the cancel endpoint),
        # `interrupted` (the gateway is shutting down and its drain time is over)
        self.code = "cancelled"

    def is_set(self) -> bool:
        return self._set

    def set(self, code: str = "cancelled") -> None:
        if self._set:
            return
        self._set = True
        self.code = code
        task = self._waiting
        if task is not None and not task.done():
            self._interrupted = task
            task.cancel()


# A deadline that passed while the consumer was away (writing to a slow client) still gets one poll
# of the sockets: bytes the upstream sent meanwhile may sit unread in the kernel, and silence is only
# silence once they were looked for.
MIN_WAIT_S: Final = 0.001


class UpstreamClock:
    """A relay's deadline for its upstream waits: one timer, re-armed lazily.

    `asyncio.timeout` arms and cancels a timer around every read; a stream that gets a chunk every
    20 ms with a 10 s keep-alive would pay that 50 times a second. Here the timer is armed once per
    deadline; when it fires and the deadline has moved on (data came), it re-arms at the new one, and
    it interrupts only a wait that is in progress (cancel, then `uncancel` in `wait`).
    """

    __slots__ = ("_armed_at", "_fired", "_handle", "_loop", "_progress", "_signal", "_task", "_waiting", "deadline")

    def __init__(self, signal: CancelSignal, progress: OpenProgress | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._signal = signal
        # the open this clock times: while it waits for a pool slot, a passed deadline waits on
        # (the slot wait has its own bound) until `postpone` moves the deadline by the wait
        self._progress = progress
        # When the wait in progress ends. Data that comes outside the wait (direct delivery) moves it
        # on, later only, by setting it in place (once per chunk: no method call); the armed timer
        # re-arms itself when it fires early, so no task wakes.
        self.deadline = math.inf
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = math.inf
        self._waiting: asyncio.Task[Any] | None = None
        self._fired = False
        self._task: asyncio.Task[Any] | None = None  # the consuming task, looked up once per route

    def _on_timer(self) -> None:
        self._handle = None
        self._armed_at = math.inf
        if self._loop.time() < self.deadline - MIN_WAIT_S:  # data moved the deadline on: re-arm
            self._arm(self.deadline)
            return
        progress = self._progress
        if progress is not None and progress.waiting_for_connection:
            return  # not started yet: `postpone` re-arms once the slot wait ends
        task = self._waiting
        if task is not None and not task.done() and not self._fired:
            self._fired = True
            task.cancel()

    def postpone(self, seconds: float) -> None:
        """Move the wait's deadline on by `seconds` (the time its open waited for a pool slot)."""
        self.deadline += seconds
        if self._handle is None and self._waiting is not None:
            self._arm(self.deadline)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(when, self._on_timer)
        self._armed_at = when

    async def wait(self, step: Awaitable[T], deadline: float) -> T | _Outcome:
        """`await step` until `deadline` (loop time; inf for none): its result, TIMED_OUT or CANCELLED."""
        signal = self._signal
        if signal._set:
            if asyncio.iscoroutine(step):
                step.close()
            return CANCELLED
        # One relay's reads are all awaited by the door's task; the lookup runs once per route. With
        # the loop given: no get_running_loop (a getpid syscall on 3.11).
        task = self._task
        if task is None:
            task = self._task = asyncio.current_task(self._loop)
            assert task is not None
        if deadline != math.inf:
            soonest = self._loop.time() + MIN_WAIT_S
            if deadline < soonest:
                deadline = soonest
            if self._armed_at > deadline + MIN_WAIT_S:  # never armed, or armed too late
                self._arm(deadline)
        self.deadline = deadline
        self._waiting = task
        signal._waiting = task
        self._fired = False
        try:
            return await step
        except asyncio.CancelledError:
            by_signal = signal._interrupted is task
            by_timer = self._fired
            if not (by_signal or by_timer):
                raise
            signal._interrupted = None
            self._fired = False
            outside = task.cancelling()
            if by_signal:
                outside = task.uncancel()
            if by_timer:
                outside = task.uncancel()
            if outside > 0:  # somebody else cancelled this task too: that one wins
                raise
            return CANCELLED if by_signal else TIMED_OUT
        finally:
            self._waiting = None
            signal._waiting = None
            # a step that swallowed our cancellation: undo it all the same
            if signal._interrupted is task:
                signal._interrupted = None
                task.uncancel()
            if self._fired:
                self._fired = False
                task.uncancel()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._armed_at = math.inf
