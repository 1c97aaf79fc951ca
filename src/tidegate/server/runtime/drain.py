"""Rolling restarts (docs/api-operations.md §10): on SIGTERM or SIGINT, stop being ready, drain, then stop.

The drain runs before the server hears of the signal: the server's own shutdown closes its
listening socket and every idle connection at once, and a balancer probing `/readyz` then gets a
refused connection instead of the 503 that tells it to send traffic elsewhere. So this handler
takes the signal first: `/readyz` answers 503 (the app refuses new generations with 503 too), and
what is in flight gets `[server] drain_s` to finish. Then whatever still runs ends `interrupted`
(its door's failure ending, a final record), and once those endings are written the server's
handler runs: it stops listening and shuts down (the lease is released in the app's shutdown).

The whole stop is bounded: the process exits within `drain_s` + `EXIT_MARGIN_S` of the signal,
whatever its clients and proxies do (docs/api-operations.md §10). The endings get what is left of
the margin but `SERVER_RESERVE_S`; the server's graceful wait for its connections and the app's
shutdown get the rest (server.py reads `deadline()`), and a timer ends the process at the deadline
should anything still hold it, after logging what did.

SIGUSR2 hands off instead (`tidegate serve --workers N` sends it to the worker a reload replaces):
the server stops listening at once, so the other processes on the port take every new connection,
while what runs gets the same `drain_s` and the same endings. What reaches it before its socket
is closed is still served (the server's graceful shutdown waits for it), not refused.

A second SIGINT (Ctrl-C again) during the drain ends what runs at once, the same way: it is never
passed to the server, whose answer to a second Ctrl-C is to skip the app's shutdown and cancel the
requests' tasks (no ending written, the records failed, tracebacks). Signals after the handover are
not passed on either: the server is already stopping, within its graceful-shutdown timeout.

The handler is chained with `signal.signal`, the standard library's public interface, from the
app's startup: servers install theirs before the app starts (uvicorn does). Under a server that
installs none, nothing is chained and the drain is only what the server itself does.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger("tidegate.drain")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
HANDOFF = signal.SIGUSR2
EXIT_MARGIN_S = 2.0  # the process exits this long after `drain_s` at the latest (docs/api-operations.md §10)
# what the server's shutdown keeps of the margin: closing the connections and the app's shutdown
# (the lease, the store); measured 0.1-0.3 s with 50 streams through nginx on a loaded machine
SERVER_RESERVE_S = 0.5
_EXIT_LATENCY_S = 0.2  # the deadline's timer fires this early: a thread's wake-up and the exit itself
_POLL_S = 0.05


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class Drain:
    """`begin` (from the signal) marks not ready and waits for `in_flight()` to reach 0, at most
    `drain_s`; then `interrupt_all` and the server's own handler. `running()` counts generations."""

    def __init__(
        self,
        drain_s: float,
        not_ready: Callable[[], None],
        interrupt_all: Callable[[], int],
        running: Callable[[], int],
        in_flight: Callable[[], int],
    ) -> None:
        self.drain_s = drain_s
        self._not_ready = not_ready
        self._interrupt_all = interrupt_all
        self._running = running
        self._in_flight = in_flight
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._forced = False
        self._previous: dict[int, Any] = {}
        self._signum: int | None = None
        self._handed_over = False
        self._deadline: float | None = None  # time.monotonic() by which the process has exited
        self.draining = False
        self.refusing = False  # new generations get 503: a drain that keeps listening (not a hand-off)

    def install(self) -> None:
        """Chain this drain before the handlers the server installed (from the event loop's thread)."""
        self._loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            previous = signal.getsignal(sig)
            if not callable(previous):
                continue  # the server did not take this signal: its default stays
            try:
                signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread (an app run inside a test's thread)
                return
            self._previous[sig] = previous
        if signal.SIGTERM in self._previous:
            signal.signal(HANDOFF, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._loop is not None:  # the bound counts from the signal, not from the loop's next step
            self._loop.call_soon_threadsafe(self.begin, signum, time.monotonic())

    def begin(self, signum: int = signal.SIGTERM, signalled_at: float | None = None) -> None:
        if self.draining:
            if signum == signal.SIGINT and not self._forced and not self._handed_over:
                log.warning("Ctrl-C again: what still runs ends interrupted now")
                self._forced = True
            return
        self.draining = True
        self._deadline = (signalled_at or time.monotonic()) + self.drain_s + EXIT_MARGIN_S
        self._arm_deadline_timer(self._deadline)
        self._signum = signal.SIGTERM if signum == HANDOFF else signum
        self._not_ready()
        if signum == HANDOFF:
            self._hand_over()
        else:
            self.refusing = True
        generations, requests = self._running(), self._in_flight()
        if requests:
            others = requests - generations
            log.warning(
                "stopping: not ready; waiting up to %g s for %s in flight%s to finish, then what still runs"
                " ends interrupted; Ctrl-C again to end it now",
                self.drain_s,
                _plural(generations, "generation"),
                f" (and {_plural(others, 'other request')})" if others > 0 else "",
            )
        else:
            log.warning("stopping: nothing in flight")
        self._task = asyncio.ensure_future(self._drain())

    async def _wait_idle(self, seconds: float, forcible: bool) -> bool:
        """Until nothing is in flight (True), or `seconds` pass or, when `forcible`, the drain is
        forced (False). Polled: only while stopping, and a request's end costs nothing extra."""
        deadline = time.monotonic() + seconds
        while self._in_flight() > 0:
            if (forcible and self._forced) or time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)
        return True

    def remaining(self) -> float | None:
        """Seconds until the process must have exited; None while not stopping."""
        return None if self._deadline is None else self._deadline - time.monotonic()

    async def _drain(self) -> None:
        if not await self._wait_idle(self.drain_s, forcible=True):
            interrupted = self._interrupt_all()
            if interrupted:
                log.warning("drain over: %s still running ended interrupted", _plural(interrupted, "generation"))
            left = self.remaining() or 0.0
            if not await self._wait_idle(max(0.0, left - SERVER_RESERVE_S), forcible=False):
                log.error(
                    "stopping: %s not answered to the end when the server's shutdown began",
                    _plural(self._in_flight(), "request"),
                )
        self._hand_over()

    def _arm_deadline_timer(self, deadline: float) -> None:
        """A thread that ends the process at `deadline` if it is still running then: the bound holds
        even if a connection, a store call or a blocked loop keeps the shutdown from finishing."""
        timer = threading.Timer(max(0.0, deadline - _EXIT_LATENCY_S - time.monotonic()), self._overdue)
        timer.daemon = True
        timer.start()

    def _overdue(self) -> None:
        log.error(
            "stopping: still running %.1f s after the signal (drain_s = %g s + %g s): %s and %s in"
            " flight; exiting now; the threads' stacks follow",
            self.drain_s + EXIT_MARGIN_S,
            self.drain_s,
            EXIT_MARGIN_S,
            _plural(self._running(), "generation"),
            _plural(self._in_flight(), "request"),
        )
        faulthandler.dump_traceback(all_threads=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def _hand_over(self) -> None:
        """The server's own shutdown, as if the signal came now."""
        if self._handed_over:
            return
        self._handed_over = True
        signum = self._signum if self._signum is not None else signal.SIGTERM
        previous = self._previous.get(signum)
        if previous is not None:
            previous(signum, None)

    async def finish(self) -> None:
        """The app's shutdown: the server has waited for the connections; anything left ends now."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._interrupt_all()
