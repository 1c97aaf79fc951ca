"""Rolling restarts (docs/api.md §10): on SIGTERM or SIGINT, stop being ready and drain.

The server's own handler still runs (it stops accepting and waits for the open connections, up to
its graceful-shutdown timeout, which `tidegate serve` sets above `drain_s`); before it, this one
turns `/readyz` to 503 at once and starts the drain clock. Running streams get `[server] drain_s` to
finish; whatever still runs then ends `interrupted`: its door's failure ending (no `[DONE]`, no
`done`) and a final record. The lease is released after that, in the app's shutdown.

The handler is chained with `signal.signal`, the standard library's public interface, from the
app's startup: servers install theirs before the app starts (uvicorn does), and the previous
handler is called after this one. Under a server that installs none, nothing is chained and the
drain is only what the server itself does.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger("tidegate.drain")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Drain:
    """`begin` (from the signal) marks not ready and, after `drain_s`, calls `interrupt_all`."""

    def __init__(self, drain_s: float, not_ready: Callable[[], None], interrupt_all: Callable[[], int]) -> None:
        self.drain_s = drain_s
        self._not_ready = not_ready
        self._interrupt_all = interrupt_all
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._previous: dict[int, Any] = {}
        self.draining = False

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

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.begin)
        previous = self._previous.get(signum)
        if previous is not None:
            previous(signum, frame)

    def begin(self) -> None:
        if self.draining:
            return
        self.draining = True
        self._not_ready()
        log.warning("shutting down: not ready; running generations get %gs to finish", self.drain_s)
        self._task = asyncio.ensure_future(self._deadline())

    async def _deadline(self) -> None:
        await asyncio.sleep(self.drain_s)
        interrupted = self._interrupt_all()
        if interrupted:
            log.warning("drain time over: %d generation(s) still running end interrupted", interrupted)

    async def finish(self) -> None:
        """The app's shutdown: the server has waited for the connections; anything left ends now."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._interrupt_all()
