"""The relay: the only place that knows about time.

It walks a model's routes (fallback), owns the commit point, keep-alive ticks, the upstream idle
timeout, cancellation (client disconnect or the cancel endpoint) and the "no terminal event" check.
Doors consume its items: `Committed` (send the 200 and headers now), `KEEPALIVE` (write a comment)
and batches of canonical events (one per upstream read). Before the commit point a failed route
moves to the next; when every route failed, `run` raises the docs/api.md §4 error. After the commit
point every failure ends a batch with one `Failed` event and the iteration ends. The commit point
(the first upstream event, or the first keep-alive on a stream) holds for non-stream requests too:
once events reached the door, no other route is tried. The upstream is closed before a terminal
`Failed` is handed out, so a door that stops reading there never keeps the upstream connection open.
Each upstream step is awaited in place by the consuming task under a deadline (`cancel.py`): no
task per read, and the cancel signal interrupts the wait. After the commit point a door may take
plain batches directly (`attach`): the upstream stream hands them over inside the protocol callback
that read them, and the consuming task wakes only for what is not plain (endings, failures, a
cancel, a write held up by the client), which still goes through this loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from .. import metrics, tracing
from ..commit import Committed, RouteFailure
from ..config.model import Breaker, Route
from ..errors import (
    InvalidRequest,
    NoProviderAvailable,
    ProviderFailure,
    TidegateError,
)
from ..events import Event, Failed, Finished, Started
from ..providers.base import ChatProvider, DirectStream, UpstreamStream
from ..providers.fidelity import dropped_tools, refusal_message, refused_field
from ..providers.http.client import OPEN_PROGRESS, OpenProgress
from ..providers.kinds import KINDS
from ..request import GenerationRequest
from .attempt import Attempt
from .cancel import CANCELLED, MIN_WAIT_S, TIMED_OUT, CancelSignal, UpstreamClock
from .fallback import ANSWER_NOW, END_STREAM, after_failure, answer_now, final_error
from .health import Health, route_key
from .opening import UpstreamOpen


class _KeepAlive:
    __slots__ = ()

    def __repr__(self) -> str:
        return "KEEPALIVE"


KEEPALIVE: Final = _KeepAlive()

# Events come in batches: the events of one upstream read, handed over in one step (a generator
# step per event cost more than the event itself). A batch is never empty.
RelayItem = Committed | _KeepAlive | list[Event]
# batches with these are never delivered directly (a set of the exact types: events are final classes,
# and a set lookup per event costs less than `isinstance` with a tuple)
_ENDINGS: Final = frozenset((Failed, Finished))


class GenerationCancelled(TidegateError):
    """Cancelled before anything was written (client gone or cancel endpoint)."""

    status = 499
    code = "cancelled"


class GenerationInterrupted(TidegateError):
    """The gateway shut down (its drain time over) before anything was written."""

    status = 503
    code = "interrupted"


def cancel_error(code: str) -> TidegateError:
    """The error for a generation stopped before its response started (`CancelSignal.code`)."""
    if code == "interrupted":
        return GenerationInterrupted("the gateway is shutting down; retry on another instance")
    return GenerationCancelled("the generation was cancelled")


def cancel_failure(code: str, provider: str) -> Failed:
    """The in-stream failure for a generation stopped after its response started."""
    if code == "interrupted":
        return Failed("interrupted", "the gateway shut down before the answer finished", provider, False)
    return Failed("cancelled", "the generation was cancelled", provider, False)


@dataclass(slots=True)
class RelaySettings:
    streaming: bool
    keepalive_s: float = 10.0
    idle_timeout_for: Callable[[str], float] = field(default=lambda _name: 90.0)
    regions: dict[str, str] = field(default_factory=dict)  # provider name → region


class Relay:
    __slots__ = (
        "_attempt",
        "_clock",
        "_direct_data_at",
        "_direct_span",
        "_route_done",
        "_stream",
        "accepted",
        "attempts",
        "breakers",
        "cancel",
        "committed",
        "dropped",
        "excluded",
        "failures",
        "generation_id",
        "health",
        "on_commit",
        "provider",
        "request",
        "route_index",
        "routes",
        "served_model",
        "settings",
        "skipped",
        "trace",
    )  # one per stream: no instance dict

    def __init__(
        self,
        request: GenerationRequest,
        routes: list[tuple[ChatProvider, Route]],
        settings: RelaySettings,
        cancel: CancelSignal,
        health: Health | None = None,
        breakers: list[tuple[str, Breaker]] | None = None,
        excluded: str | None = None,
    ) -> None:
        self.request = request
        self.routes = routes
        self.generation_id: str | None = None  # the generation it serves (its routes' last failures name it)
        # per-route (key, breaker) pairs (parallel to `routes`) and where attempts are reported: once per
        # attempt (its start, its commit or failure, its end), never per chunk
        self.health = health
        self.breakers = breakers
        self.skipped: list[str] = []  # routes passed over because their breaker was open
        # the residency rules that left other routes out: no fallback past them, and the final
        # error (503) names them
        self.excluded = excluded
        self.route_index = -1  # the index in `routes` of the route tried last (the one that served)
        # the last route whose upstream accepted the request (answered 2xx): it took the prompt,
        # and bills it even when it fails before its first event
        self.accepted = -1
        self.settings = settings
        self.cancel = cancel
        self.attempts = 0
        # told who serves when the answer commits (the recorder logs it: gateway/recorder.py)
        self.on_commit: Callable[[str, str, int], None] | None = None
        self.failures: list[RouteFailure] = []
        self.committed = False
        self.provider: str | None = None
        self.served_model: str | None = None
        self.dropped: tuple[str, ...] = ()  # hosted tools the serving route left out (X-Tidegate-Dropped)
        self._route_done = False
        # the current route's open stream, for direct delivery (`attach`)
        self._stream: UpstreamStream | None = None
        self._clock: UpstreamClock | None = None
        self._direct_span = math.inf  # how far past its data a route's wait may run
        self._direct_data_at = -math.inf  # when the direct delivery last took a batch
        self._attempt: tuple[str, Breaker, float] | None = None  # route key, breaker, start (loop time)
        self.trace: Any = None  # the generation's span when tracing is on: each attempt is a child

    async def run(self) -> AsyncGenerator[RelayItem, None]:
        health, breakers = self.health, self.breakers
        for i, (provider, route) in enumerate(self.routes):
            # docs/api-edges.md §15: never silently dropped (what the provider speaks it takes as sent)
            kind = KINDS.get(provider.kind)  # (None: a provider of no registered kind, a test's)
            refused = refused_field(kind.fidelity if kind else None, self.request, provider.speaks)
            if refused is not None:  # this route cannot serve the request as asked: the next may
                message = refusal_message(refused, provider.name, provider.kind)
                self.failures.append(RouteFailure(provider.name, "unsupported_parameter", message, 400))
                continue
            key = ""
            if health is not None and breakers is not None:
                key, breaker = breakers[i]
                if not health.enter(key, breaker):
                    self.skipped.append(key)
                    continue
                self._attempt = (key, breaker, asyncio.get_running_loop().time())
            self.attempts += 1
            self.route_index = i
            self._route_done = False
            failed_before = len(self.failures)
            span = (
                None
                if self.trace is None
                else tracing.start_attempt(
                    self.trace, provider.name, kind.otel_name if kind else provider.kind, route.model
                )
            )
            try:
                async with contextlib.aclosing(self._try_route(provider, route)) as items:
                    async for item in items:
                        yield item
            finally:
                if key:
                    self._attempt = None
                    health.end(key)  # type: ignore[union-attr]
                if span is not None:
                    failed = self.failures[failed_before].code if len(self.failures) > failed_before else None
                    tracing.end_attempt(span, self.committed and self.route_index == i, failed)
            if self._route_done:
                return
        if self.skipped and not self.failures:
            raise NoProviderAvailable(
                f"every allowed route's circuit breaker is open: {', '.join(self.skipped)}; retry later"
                + (f" ({self.excluded})" if self.excluded else "")
            )
        error = final_error(self.failures)
        if self.excluded and not isinstance(error, InvalidRequest):
            raise NoProviderAvailable(f"{error.message}; no fallback outside what was allowed: {self.excluded}")
        raise error

    def _report_commit(self) -> None:
        if self.on_commit is not None:
            self.on_commit(self.provider or "", self.served_model or "", self.attempts)
        attempt = self._attempt
        if attempt is not None and self.health is not None:
            self.health.succeeded(attempt[0], asyncio.get_running_loop().time() - attempt[2])
            self._attempt = None

    def _report_failure(self, retry_after: float | None) -> None:
        attempt = self._attempt
        if attempt is not None and self.health is not None:
            self.health.failed(attempt[0], attempt[1], retry_after)
            self._attempt = None

    def _attempt_for(self, provider: ChatProvider, route: Route) -> Attempt:
        """Start the route's attempt: a stream's open as its own task (a keep-alive may be owed before
        the upstream answers), a JSON request's left to be awaited in place."""
        opening: UpstreamOpen[UpstreamStream] | None = None
        progress = OpenProgress()
        if self.settings.streaming:
            token = OPEN_PROGRESS.set(progress)
            try:
                opening = UpstreamOpen(provider.open_chat(self.request, route.model))
            finally:
                OPEN_PROGRESS.reset(token)
        idle = self.settings.idle_timeout_for(provider.name)
        keepalive = self.settings.keepalive_s if self.settings.streaming else math.inf
        now = asyncio.get_running_loop().time()
        attempt = Attempt(
            provider, route.model, idle, keepalive, UpstreamClock(self.cancel, progress), progress, opening, now, now
        )
        progress.listener = attempt  # a wait for a pool slot moves its clocks (unset when the attempt ends)
        self._direct_data_at = -math.inf
        self._clock, self._direct_span = attempt.clock, (idle if idle < keepalive else keepalive)
        return attempt

    async def _try_route(self, provider: ChatProvider, route: Route) -> AsyncGenerator[RelayItem, None]:
        """One route: wait for the upstream's next step (its open, then each read) under the nearest
        deadline, and hand out what it means. An attempt that ends closes its upstream before its
        last item is handed out (a consumer that stops reading must not keep the connection)."""
        a = self._attempt_for(provider, route)
        try:
            while True:
                idle_deadline, ka_deadline = a.deadlines(self._direct_data_at)
                step: Awaitable[Any]
                if a.stream is not None:
                    step = a.stream.read()
                elif a.opening is not None:
                    step = a.opening.wait()
                else:
                    step = a.open_in_place(self.request)
                try:
                    outcome: Any = await a.clock.wait(
                        step, idle_deadline if idle_deadline < ka_deadline else ka_deadline
                    )
                    if a.stream is None and a.opening is not None and a.opening.done() and not self.cancel.is_set():
                        outcome = a.opening.future.result()  # the open's own failure raises here
                except (asyncio.CancelledError, GeneratorExit):
                    raise
                except Exception as exc:
                    items, over = self._upstream_raised(a, exc), True
                else:
                    if outcome is CANCELLED or self.cancel.is_set():
                        items, over = [self._cancelled(a, outcome)], True  # raises before the commit point
                    elif outcome is TIMED_OUT:
                        items, over = self._timed_out(a)
                    elif a.stream is None:
                        self._opened(a, outcome)
                        continue
                    else:
                        items, over = self._read(a, outcome)
                    del outcome  # not kept alive while the next read waits (memory per stream)
                if over:
                    ending = items.pop() if items else None
                    for item in items:
                        yield item
                    await self._close(a.stream, a.opening)
                    if ending is not None:
                        yield ending
                    return
                for item in items:
                    yield item
                del items
        finally:
            self._stream = self._clock = None
            a.clock.close()
            a.progress.listener = None
            await self._close(a.stream, a.opening)

    def _upstream_raised(self, a: Attempt, exc: Exception) -> list[RelayItem]:
        """The open or a read failed: the route's failure (none to hand out before the commit point)."""
        if isinstance(exc, ProviderFailure):
            failure = Failed(
                "upstream_timeout" if exc.code == "upstream_timeout" else "upstream_error",
                exc.message,
                a.provider.name,
                exc.retriable,
                exc.status,
            )
            failed = self._fail(a.provider.name, failure, exc.code, exc.retry_after)
        else:
            failure = Failed("upstream_error", f"{type(exc).__name__} from provider", a.provider.name)
            failed = self._fail(a.provider.name, failure, "upstream_error", None)
        return [failed] if failed else []

    def _cancelled(self, a: Attempt, outcome: Any) -> RelayItem:
        """The cancel signal: after the commit point the stream's cancel ending, before it an error."""
        if a.stream is None and a.opening is None and outcome is not CANCELLED and outcome is not TIMED_OUT:
            a.stream = outcome  # opened just as the cancel came: closed with the attempt
        if not self.committed:
            raise cancel_error(self.cancel.code)
        self._route_done = True
        return [cancel_failure(self.cancel.code, a.provider.name)]

    def _timed_out(self, a: Attempt) -> tuple[list[RelayItem], bool]:
        """A deadline passed: wait on, owe a keep-alive (committing the stream if it is the first
        byte), or end the route idle. (items, whether the attempt is over)"""
        idle_deadline, ka_deadline = a.deadlines(self._direct_data_at)  # the direct delivery may have moved them
        now = asyncio.get_running_loop().time()
        due = now + MIN_WAIT_S  # the clock may fire up to MIN_WAIT_S before a deadline
        in_place = a.opens_in_place
        if not in_place and due < idle_deadline and due < ka_deadline:
            return [], False
        if not in_place and due >= idle_deadline and not a.idle_checked:
            # The loop may have been busy past the deadline with the upstream's bytes already on
            # the socket (timers run before I/O): look once more first.
            a.idle_checked = True
            return [], False
        if in_place or due >= idle_deadline:
            failure = Failed("upstream_timeout", f"no data from the upstream for {a.idle:g} s", a.provider.name)
            failed = self._fail(a.provider.name, failure, "upstream_timeout", None)
            return ([failed] if failed else []), True
        a.last_keepalive = now
        if a.progress.waiting_for_connection:  # not started: no keep-alive commits it
            return [], False
        if self.committed:
            return [KEEPALIVE], False
        return [self._commit(a, a.route_model), KEEPALIVE], False

    def _opened(self, a: Attempt, stream: UpstreamStream) -> None:
        a.last_data = asyncio.get_running_loop().time()
        a.idle_checked = False
        a.stream, a.opening = stream, None  # the finished open task is not kept for the stream's life
        self.accepted = self.route_index
        self._stream = stream

    def _read(self, a: Attempt, batch: list[Event] | None) -> tuple[list[RelayItem], bool]:
        """One upstream read's events: the commit point on the first, the stream's end or failure on
        the last. (items, whether the attempt is over)"""
        a.last_data = asyncio.get_running_loop().time()
        a.idle_checked = False
        name = a.provider.name
        if batch is None:
            if a.finished:
                self._route_done = True
                return [], True
            failure = Failed("upstream_error", "the upstream ended the stream without its terminal event", name)
            failed = self._fail(name, failure, "upstream_error", None)
            return ([failed] if failed else []), True
        if not batch:  # bytes arrived that carried no event (ping, comment)
            return [], False
        items: list[RelayItem] = []
        if not self.committed:
            # The commit point: the first upstream event. An in-band error that arrives before
            # anything was written to the client still moves to the next route.
            early_failure = next((e for e in batch if isinstance(e, Failed)), None)
            if early_failure is not None:
                failed = self._fail(name, early_failure, early_failure.code, None)
                return ([failed] if failed else []), True
            started = next((e for e in batch if isinstance(e, Started)), None)
            items.append(self._commit(a, started.served_model if started else a.route_model))
        for i, event in enumerate(batch):
            if isinstance(event, Failed):
                self._route_done = True
                metrics.UPSTREAM_FAILURES.labels(name, event.code).inc()
                if not event.provider or event.retriable_before_commit:
                    event = Failed(event.code, event.message, event.provider or name, False, event.status)
                items.append([*batch[:i], event])
                return items, True
            if isinstance(event, Finished):
                a.finished = True
        items.append(batch)
        return items, False

    def _commit(self, a: Attempt, served_model: str) -> Committed:
        """The commit point: this route serves the generation, whatever follows."""
        provider = a.provider
        self.committed = True
        self.provider = provider.name
        self.served_model = served_model
        self._report_commit()
        dropped = dropped_tools(self.request, provider.speaks)
        self.dropped = dropped
        return Committed(
            provider.name,
            served_model,
            self.attempts,
            tuple(self.failures),
            self.settings.regions.get(provider.name),
            dropped,
        )

    def attach(self, handler: Callable[[list[Event]], bool]) -> bool:
        """Direct delivery, after the commit point: the route's upstream stream hands each batch to
        `handler` inside the protocol callback that read it, instead of waking the consuming task
        per read. Only plain batches: one with a `Failed` or `Finished` in it, and everything after
        a cancel, comes through `run` as before (the endings, the failure rules and the record stay
        there). Data taken this way moves the idle and keep-alive deadlines on. `handler` returns
        False to stop the delivery after the batch it took (its write has to wait for the client).
        False: not now (the stream cannot deliver directly, or not yet: try after the next batch)."""
        stream, clock = self._stream, self._clock
        if stream is None or clock is None or not self.committed or self.cancel.is_set():
            return False
        attach = getattr(stream, "attach", None)
        if attach is None:
            return False
        direct: DirectStream = stream  # type: ignore[assignment]
        cancel, loop, span = self.cancel, asyncio.get_running_loop(), self._direct_span

        def deliver(batch: list[Event]) -> bool:
            if cancel._set:
                return False
            for event in batch:
                if type(event) in _ENDINGS:
                    return False
            now = loop.time()
            self._direct_data_at = now
            if now + span > clock.deadline:  # the wait in progress ends later (never earlier)
                clock.deadline = now + span
            if not handler(batch):
                direct.detach()
            return True

        return direct.attach(deliver)

    @staticmethod
    async def _close(stream: UpstreamStream | None, opening: UpstreamOpen[UpstreamStream] | None) -> None:
        """Close the upstream now (before a terminal item is handed out: a consumer that stops reading
        must not keep the upstream connection open). Idempotent."""
        if opening is not None and not opening.done():
            opening.cancel()
        if stream is not None:
            await stream.aclose()
        elif opening is not None and opening.done():
            future = opening.future
            if not future.cancelled() and future.exception() is None:
                await future.result().aclose()

    def _fail(self, provider: str, failure: Failed, code: str, retry_after: float | None) -> list[Event]:
        """The batch to hand out. Before the commit point: none (remember the failure and let `run`
        try the next route). After: the one `Failed` that ends the stream."""
        metrics.UPSTREAM_FAILURES.labels(provider, code).inc()
        if self.health is not None and 0 <= self.route_index < len(self.routes):
            route = self.routes[self.route_index][1]
            self.health.note_failure(
                route_key(route.provider, route.model), self.generation_id, self.committed, code, failure.message
            )
        action = after_failure(code, failure.retriable_before_commit, self.committed)  # gateway/fallback.py
        if action == END_STREAM:
            self._route_done = True
            return [failure]
        route_failure = RouteFailure(provider, code, failure.message, failure.status, retry_after)
        self.failures.append(route_failure)
        self._report_failure(retry_after)
        if action == ANSWER_NOW:
            self._route_done = True
            raise answer_now(route_failure)
        return []
