"""One owned task visits every running generation each round (at least every 250 ms): it samples
the generation's pace (how much had come by then: the console replays it) and flushes the event logs
of those that keep them.

A task per generation would wake 5 times a second per open stream: at thousands of slow streams that
is tens of thousands of wake-ups a second for nothing. Here one loop visits the registered recorders
and flushes those with something pending; a slow store delays the next round, never a stream. Nothing
here runs per chunk: a visit reads two list lengths.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from .. import metrics

FLUSH_INTERVAL_S = 0.2
log = logging.getLogger("tidegate.flusher")


class Flushable(Protocol):
    @property
    def has_pending(self) -> bool: ...

    async def flush(self) -> None: ...

    def sample_pace(self, now: float) -> None: ...


class LogFlusher:
    def __init__(self, interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._members: dict[str, Flushable] = {}
        self._task: asyncio.Task[None] | None = None

    def register(self, key: str, member: Flushable) -> None:
        self._members[key] = member
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._loop())

    def unregister(self, key: str) -> None:
        self._members.pop(key, None)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval_s)
            started, flushed = loop.time(), False
            now = time.monotonic()  # the recorders' clock
            for key, member in list(self._members.items()):
                member.sample_pace(now)
                if not member.has_pending:
                    continue
                flushed = True
                try:
                    await member.flush()
                except Exception:  # a failing store never stalls the streams; retried next round
                    log.warning("event log flush failed for %s", key, exc_info=True)
            if flushed:  # once a round (5 a second at most), never per chunk
                metrics.LOG_FLUSH.observe(loop.time() - started)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
