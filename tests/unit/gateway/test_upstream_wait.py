"""The relay waits on the upstream in place (gateway/cancel.py): deadlines, the cancel signal, and
bytes that reached the socket while the event loop was busy elsewhere.

Real sockets (a socketpair read through asyncio streams) stand in for the upstream connection."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import pytest
import uvloop

from tidegate.commit import Committed
from tidegate.config.model import Route
from tidegate.errors import TidegateError
from tidegate.events import Event, Finished, TextDelta
from tidegate.gateway.cancel import CANCELLED, TIMED_OUT, CancelSignal, UpstreamClock
from tidegate.gateway.opening import UpstreamOpen
from tidegate.gateway.relay import KEEPALIVE, Relay, RelaySettings
from tidegate.request import GenerationRequest

T = TypeVar("T")

_writers: list[asyncio.StreamWriter] = []  # a collected writer would close the transport


async def wait_upstream(step: Awaitable[T], deadline: float, signal: CancelSignal) -> object:
    """One wait on a clock of its own (the relay keeps one clock per route)."""
    clock = UpstreamClock(signal)
    try:
        return await clock.wait(step, deadline)
    finally:
        clock.close()


async def _pair() -> tuple[asyncio.StreamReader, socket.socket]:
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    _writers.append(writer)
    return reader, theirs


async def test_cancel_signal_interrupts_the_wait_at_once() -> None:
    reader, peer = await _pair()
    signal = CancelSignal()
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, signal.set)
    started = time.monotonic()
    outcome = await wait_upstream(reader.read(100), loop.time() + 30, signal)
    assert outcome is CANCELLED
    assert time.monotonic() - started < 1.0
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the signal's own cancel was taken back
    await asyncio.sleep(0)  # and nothing is left pending on the task
    peer.close()


async def test_a_set_signal_returns_before_waiting() -> None:
    reader, peer = await _pair()
    signal = CancelSignal()
    signal.set()
    outcome = await wait_upstream(reader.read(100), asyncio.get_running_loop().time() + 30, signal)
    assert outcome is CANCELLED
    peer.close()


async def test_an_outside_cancel_is_never_swallowed() -> None:
    reader, peer = await _pair()
    signal = CancelSignal()
    loop = asyncio.get_running_loop()

    async def waiter() -> object:
        return await wait_upstream(reader.read(100), loop.time() + 30, signal)

    task = asyncio.ensure_future(waiter())
    await asyncio.sleep(0.02)
    task.cancel()  # e.g. server shutdown
    signal.set()  # and the client went away in the same instant
    with pytest.raises(asyncio.CancelledError):
        await task
    peer.close()


async def test_deadline_and_result() -> None:
    reader, peer = await _pair()
    signal = CancelSignal()
    loop = asyncio.get_running_loop()
    assert await wait_upstream(reader.read(100), loop.time() + 0.05, signal) is TIMED_OUT
    peer.sendall(b"abc")
    assert await wait_upstream(reader.read(100), loop.time() + 5, signal) == b"abc"  # nothing lost
    peer.close()


async def test_a_streams_open_keeps_running_when_its_wait_ends() -> None:
    """A stream's open runs as a task that a keep-alive deadline must not cancel: the wait ends, the
    open goes on, and the next wait sees it finish."""
    loop = asyncio.get_running_loop()
    signal = CancelSignal()
    clock = UpstreamClock(signal)

    async def slow_open() -> str:
        await asyncio.sleep(0.2)
        return "opened"

    opening = UpstreamOpen(slow_open())
    try:
        assert await clock.wait(opening.wait(), loop.time() + 0.05) is TIMED_OUT
        assert not opening.done()  # not cancelled with the wait
        assert await clock.wait(opening.wait(), loop.time() + 5) is None
        assert opening.future.result() == "opened"
        assert await clock.wait(opening.wait(), loop.time() + 5) is None  # already done: at once
        second = UpstreamOpen(slow_open())
        loop.call_later(0.02, signal.set)
        assert await clock.wait(second.wait(), loop.time() + 5) is CANCELLED
        assert not second.done()  # the relay closes it itself (Relay._close)
        second.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert second.future.cancelled()
    finally:
        clock.close()


async def test_a_deadline_that_passed_while_the_loop_was_busy_still_polls_the_socket() -> None:
    reader, peer = await _pair()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 0.05
    peer.sendall(b"sent in time")
    time.sleep(0.2)  # noqa: ASYNC251 - the loop is busy (a slow client write, a big JSON) past the deadline
    assert await wait_upstream(reader.read(100), deadline, CancelSignal()) == b"sent in time"
    peer.close()


async def test_one_timer_per_deadline_not_per_read() -> None:
    """Reads that keep getting data move the deadline on without re-arming a timer each time; once
    the data stops, the wait still ends at its deadline."""
    reader, peer = await _pair()
    loop = asyncio.get_running_loop()
    clock = UpstreamClock(CancelSignal())
    handles = set()
    first_deadline = loop.time() + 0.3
    for i in range(10):
        loop.call_later(0.005, peer.sendall, b"x")
        assert await clock.wait(reader.read(1), loop.time() + 0.3) == b"x", i
        handles.add(id(clock._handle))
    assert len(handles) == 1  # armed once, for the first deadline
    started = loop.time()
    assert started + 0.35 > first_deadline
    assert await clock.wait(reader.read(1), started + 0.35) is TIMED_OUT
    assert 0.34 <= loop.time() - started < 0.6  # the first timer re-armed at the moved deadline
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    clock.close()
    peer.close()


class _SocketStream:
    """An upstream stream over a real socket: each line is one text event, `END` finishes."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.ended = False

    async def read(self) -> list[Event] | None:
        line = b"" if self.ended else await self.reader.readline()
        if not line:
            return None
        text = line.decode().rstrip("\n")
        self.ended = text == "END"
        return [Finished("stop")] if self.ended else [TextDelta(text)]

    async def aclose(self) -> None:
        pass


class _SocketProvider:
    name = "sock"
    kind = "test"
    speaks: frozenset[str] = frozenset()

    def __init__(self, reader: asyncio.StreamReader, open_s: float = 0.0) -> None:
        self.reader = reader
        self.open_s = open_s  # how long the upstream takes to answer with its headers

    async def open_chat(self, request: GenerationRequest, served_model: str) -> _SocketStream:
        if self.open_s:
            await asyncio.sleep(self.open_s)
        return _SocketStream(self.reader)

    async def aclose(self) -> None:
        pass


async def _collect(relay: Relay) -> AsyncIterator[object]:
    """The relay's items with its event batches flattened (a batch is never empty)."""
    async for item in relay.run():
        if isinstance(item, list):
            assert item, "an empty batch"
            for event in item:
                yield event
        else:
            yield item


@pytest.mark.parametrize("streaming", [True, False])
async def test_relay_reads_bytes_that_arrived_while_the_loop_was_blocked(streaming: bool) -> None:
    """The idle deadline passes while the loop is blocked, with the upstream's next line already on
    the socket: timers run before I/O, so the relay must look once more before calling it silence."""
    reader, peer = await _pair()
    request = GenerationRequest(model="m", messages=[{"role": "user", "content": "hi"}], stream=streaming)
    settings = RelaySettings(streaming=streaming, keepalive_s=10.0, idle_timeout_for=lambda _n: 0.2)
    relay = Relay(request, [(_SocketProvider(reader), Route(provider="sock", model="m"))], settings, CancelSignal())
    loop = asyncio.get_running_loop()
    peer.sendall(b"one\n")

    def busy() -> None:
        peer.sendall(b"two\nEND\n")
        time.sleep(0.4)  # past the 0.2 s idle deadline, with "two" unread

    items = []
    async for item in _collect(relay):
        items.append(item)
        if isinstance(item, TextDelta) and item.text == "one":
            loop.call_later(0.01, busy)
    texts = [i.text for i in items if isinstance(i, TextDelta)]
    assert texts == ["one", "two"], items
    assert isinstance(items[0], Committed) and isinstance(items[-1], Finished)
    assert KEEPALIVE not in items
    peer.close()


def test_an_idle_deadline_never_commits_a_stream_with_a_keepalive_still_far_off() -> None:
    """Headers, then silence past the idle timeout, keep-alive 30 s away: the route fails before the
    commit point and the next one serves. On uvloop (what the server runs) timers have millisecond
    resolution, so the clock may fire a hair before a deadline; the relay must still read that as the
    idle deadline, never as a keep-alive that commits the stream."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_idle_deadline_attempts())


async def _idle_deadline_attempts() -> None:
    for attempt in range(15):
        silent_reader, silent_peer = await _pair()
        good_reader, good_peer = await _pair()
        good_peer.sendall(b"hello\nEND\n")
        request = GenerationRequest(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        settings = RelaySettings(streaming=True, keepalive_s=30.0, idle_timeout_for=lambda _n: 0.05)
        routes = [
            # headers after 1.1-4.6 ms: the deadline moves on by that much after the timer was armed
            (_SocketProvider(silent_reader, 0.0011 + attempt * 0.00025), Route(provider="sock", model="silent")),
            (_SocketProvider(good_reader), Route(provider="sock", model="good")),
        ]
        relay = Relay(request, routes, settings, CancelSignal())  # type: ignore[arg-type]
        items = [item async for item in _collect(relay)]
        assert isinstance(items[0], Committed), (attempt, items)
        assert items[0].attempts == 2 and items[0].failed_routes[0].code == "upstream_timeout", (attempt, items)
        assert KEEPALIVE not in items
        silent_peer.close()
        good_peer.close()


class _CountingSilentProvider:
    """An upstream that never answers with its headers; counts the requests it was sent."""

    name = "silent"
    kind = "test"
    speaks: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.opened = 0

    async def open_chat(self, request: GenerationRequest, served_model: str) -> _SocketStream:
        self.opened += 1
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


async def test_a_json_request_whose_upstream_never_answers_is_sent_to_it_once() -> None:
    """A JSON request opens its upstream in place; the idle deadline cancels that open. Looking once
    more (as a stream read does) would send the upstream request a second time."""
    silent = _CountingSilentProvider()
    request = GenerationRequest(model="m", messages=[{"role": "user", "content": "hi"}], stream=False)
    settings = RelaySettings(streaming=False, keepalive_s=10.0, idle_timeout_for=lambda _n: 0.05)
    relay = Relay(request, [(silent, Route(provider="silent", model="m"))], settings, CancelSignal())  # type: ignore[list-item]
    with pytest.raises(TidegateError):
        async for _item in _collect(relay):
            pass
    assert silent.opened == 1
    assert relay.failures[0].code == "upstream_timeout"
