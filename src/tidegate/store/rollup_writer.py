"""Ended records' console rollups summed in memory and written once a second (docs/console-api.md).

SQLite and Redis write them this way (PostgreSQL adds them in the record's final statement,
store/postgres/rollups.py): on SQLite their upserts in each record's own transaction took a request
from 3.5 to 7.2 WAL pages (tests/unit/store/test_sqlite_recovery.py); on Redis they were a pipeline
of ~22 commands per record, 7 % of a Redis-backed request's CPU. Every store's readers flush first,
so a process sees its own latest records at once, and another process sharing the store within a
second. A process killed outright loses at most its last second of rollups, never a record."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..records import GenerationRecord
from .console import Rollup, RollupBuffer

ROLL_S = 1.0
_log = logging.getLogger("tidegate.store")

# the summed rows, as `RollupBuffer.take` gives them, written by the store in one go
WriteRows = Callable[[list[tuple[Any, ...]]], Awaitable[None]]


class RollupWriter:
    """The buffer, and the task that writes it every `ROLL_S` while the store is open."""

    def __init__(self, write_rows: WriteRows) -> None:
        self.write_rows = write_rows
        self.buffer = RollupBuffer()
        self._task: asyncio.Task[None] | None = None

    def add(self, record: GenerationRecord) -> None:
        self.buffer.add(Rollup.of(record))

    def count(self, rollup: Rollup) -> None:
        """A rollup without a record behind it (a rejected request's): buffered like the rest."""
        self.buffer.add(rollup)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._every_second())

    async def flush(self) -> None:
        rows = self.buffer.take()
        if rows:
            await self.write_rows(rows)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()

    async def _every_second(self) -> None:
        while True:
            await asyncio.sleep(ROLL_S)
            try:
                await self.flush()
            except Exception:  # a locked or failing store: the next round writes what this one took
                _log.exception("the console's rollups could not be written")
