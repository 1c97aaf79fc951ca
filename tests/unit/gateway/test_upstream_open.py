"""A streaming request's upstream open (gateway/opening.py): its own task, finished in place.

The turn counts are the point: every turn of the event loop between the upstream's answer and the
relay seeing it is one pass over every other ready stream under load."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Generator

import pytest

from tests.support.loop import Turns
from tidegate.gateway.opening import UpstreamOpen
from tidegate.resume import Resume

EAGER = sys.version_info >= (3, 12)  # asyncio.create_eager_task_factory: the first step runs in place


async def test_the_first_step_runs_at_once_where_tasks_start_eagerly() -> None:
    """The upstream request is written in the caller's turn on Python 3.12+ (an eager task), on the
    next turn before (public asyncio only)."""
    steps: list[str] = []
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def open_upstream() -> str:
        steps.append("request written")
        return await gate

    opening = UpstreamOpen(open_upstream())
    assert steps == (["request written"] if EAGER else [])
    await asyncio.sleep(0)
    assert steps == ["request written"]
    assert not opening.done()
    gate.set_result("stream")
    await opening.wait()
    assert opening.future.result() == "stream"


async def test_the_relay_wakes_one_turn_after_the_open_does() -> None:
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[str] = loop.create_future()

    async def open_upstream() -> str:
        return await gate

    opening = UpstreamOpen(open_upstream())
    turns = Turns()
    answered_at: list[int] = []

    def answer() -> None:  # the upstream's answer, as the connection's protocol sets it
        gate.set_result("stream")
        answered_at.append(turns.count)

    loop.call_later(0.01, answer)
    await opening.wait()  # in place, as the relay waits
    woke_after = turns.count - answered_at[0]
    turns.stop()
    # turn 1: the open's task resumes, finishes and sets the waiter; turn 2: the relay runs. As
    # a plain task awaited through a done-callback it took three (the callback's turn between).
    assert woke_after <= 2, woke_after
    assert opening.future.result() == "stream"


async def test_an_open_that_finishes_or_fails_without_waiting_is_done_after_its_first_step() -> None:
    async def at_once() -> str:
        return "stream"

    async def refused() -> str:
        raise ConnectionRefusedError("nothing listens")

    done = UpstreamOpen(at_once())
    await done.wait()
    assert done.done() and done.future.result() == "stream"
    await asyncio.sleep(0)
    assert done.task.done() and not done.task.cancelled()
    failed = UpstreamOpen(refused())
    await failed.wait()
    with pytest.raises(ConnectionRefusedError):
        failed.future.result()


async def test_a_failure_after_the_first_step_lands_in_the_future_not_the_task() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def open_upstream() -> str:
        await gate
        raise ConnectionResetError("closed before the head")

    opening = UpstreamOpen(open_upstream())
    gate.set_result(None)
    await opening.wait()
    with pytest.raises(ConnectionResetError):
        opening.future.result()
    await opening.task  # the task itself ended cleanly: nothing logged as never retrieved
    assert opening.task.exception() is None


async def test_a_cancelled_wait_leaves_the_open_running() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def open_upstream() -> str:
        return await gate

    opening = UpstreamOpen(open_upstream())
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(opening.wait(), 0.02)
    assert not opening.done() and not gate.cancelled()
    gate.set_result("stream")
    await opening.wait()
    assert opening.future.result() == "stream"


def open_that_cleans_up() -> tuple[UpstreamOpen[str], asyncio.Future[str], list[str]]:
    """An open waiting on `gate` (the upstream's answer) whose cleanup is recorded in `cleaned`."""
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    cleaned: list[str] = []

    async def open_upstream() -> str:
        try:
            return await gate
        finally:
            cleaned.append("connection discarded")

    return UpstreamOpen(open_upstream()), gate, cleaned


async def test_cancel_reaches_the_open_and_its_cleanup_runs() -> None:
    opening, gate, cleaned = open_that_cleans_up()
    waiting = asyncio.ensure_future(opening.wait())
    await asyncio.sleep(0)
    opening.cancel()
    await waiting  # the waiter is woken when the open ends, cancelled or not
    assert cleaned == ["connection discarded"]
    assert opening.future.cancelled() and gate.cancelled()


async def test_an_open_cancelled_in_the_turn_it_started_ends_cancelled() -> None:
    """The relay may close a route in the turn it opened it (a cancel that came meanwhile): the open
    ends cancelled; its cleanup runs where its first step ran (an eager task), and where it never
    ran there is nothing to clean and its coroutine is closed (no "never awaited" warning)."""
    opening, _gate, cleaned = open_that_cleans_up()
    opening.cancel()  # no turn in between
    await opening.wait()
    assert opening.future.cancelled()
    assert cleaned == (["connection discarded"] if EAGER else [])
    await asyncio.sleep(0)
    assert opening.task.cancelled()


async def test_an_open_that_swallows_the_cancellation_keeps_its_result() -> None:
    """What is thrown into the task reaches the coroutine as it would in a task of its own."""
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def open_upstream() -> str:
        try:
            return await gate
        except asyncio.CancelledError:
            return "opened anyway"

    opening = UpstreamOpen(open_upstream())
    await asyncio.sleep(0)
    opening.cancel()
    await opening.wait()
    assert opening.future.result() == "opened anyway"


async def test_an_open_with_several_waits_is_resumed_through_each() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[int] = loop.create_future()
    second: asyncio.Future[int] = loop.create_future()

    async def open_upstream() -> int:
        a = await first
        await asyncio.sleep(0)  # a bare yield to the loop
        b = await second
        return a + b

    opening = UpstreamOpen(open_upstream())
    loop.call_soon(first.set_result, 2)
    loop.call_later(0.01, second.set_result, 3)
    await opening.wait()
    assert opening.future.result() == 5


def test_closing_the_resumed_open_closes_its_coroutine() -> None:
    """A task that is dropped while it waits closes its coroutine: the open's own finally runs."""
    cleaned: list[str] = []

    class Suspend:
        def __await__(self) -> Generator[str, None, None]:
            yield "suspended"

    async def open_upstream() -> str:
        try:
            await Suspend()
            return "unreachable"
        finally:
            cleaned.append("closed")

    coro = open_upstream()
    pending = coro.send(None)
    steps = Resume(coro, pending).__await__()
    assert next(steps) is pending
    steps.close()
    assert cleaned == ["closed"]


async def test_the_first_step_runs_as_the_open_task_not_the_callers() -> None:
    """What the first step binds to the current task (a connect's `asyncio.timeout`) binds to the
    open: its timeout ends the open with the open's own error and leaves the caller alone."""
    caller = asyncio.current_task()
    seen: list[asyncio.Task[object] | None] = []

    async def connect_that_never_completes() -> str:
        seen.append(asyncio.current_task())
        try:
            async with asyncio.timeout(0.05):
                await asyncio.get_running_loop().create_future()  # a TLS handshake nobody answers
        except TimeoutError:
            raise ConnectionError("no connection within 0.05 s") from None
        return "unreachable"

    opening = UpstreamOpen(connect_that_never_completes())
    assert asyncio.current_task() is caller
    await opening.wait()
    assert seen == [opening.task]  # the caller is not cancelled: it wakes when the open has failed
    with pytest.raises(ConnectionError, match=r"within 0\.05 s"):
        opening.future.result()
    assert caller is not None and caller.cancelling() == 0


async def timer_due_before_the_first_turn() -> tuple[str, bool]:
    """An open whose first step arms a timer (`asyncio.timeout(0.001)`) that is due before the open's
    task had its first turn (the loop was busy for longer: other streams' work): what the open
    returned, and whether its task was cancelled before it ever ran."""

    async def open_upstream() -> str:
        try:
            async with asyncio.timeout(0.001):
                await asyncio.get_running_loop().create_future()
        except TimeoutError:
            return "timed out"
        return "unreachable"

    opening = UpstreamOpen(open_upstream())
    time.sleep(0.005)  # noqa: ASYNC251 (the rest of a busy turn: the timer is due before the next one)
    await opening.wait()
    await asyncio.sleep(0)
    return opening.future.result(), opening.task.cancelled()


async def test_a_timer_the_first_step_armed_reaches_the_open() -> None:
    """asyncio's own loop runs due timers after the turn's ready callbacks: the task runs first."""
    assert await timer_due_before_the_first_turn() == ("timed out", False)


def test_a_timer_the_first_step_armed_reaches_the_open_on_uvloop() -> None:
    """uvloop runs due timers before the turn's ready callbacks: the timer the open's first step
    armed (in its own task) times the open out, not the task."""
    uvloop = pytest.importorskip("uvloop")
    loop = uvloop.new_event_loop()
    try:
        assert loop.run_until_complete(timer_due_before_the_first_turn()) == ("timed out", False)
    finally:
        loop.close()
