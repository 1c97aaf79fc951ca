"""SQLite's console rollups (docs/console-api.md): an ended record's are summed in memory
(`RollupBuffer`) and written once a second, one upsert per (bucket, group), and before every read of
them in this process (sqlite_console.py). Written in each record's own final transaction, their
three upserts took a request from 3.5 to 7.2 WAL pages (tests/unit/store/test_sqlite_recovery.py)
and its write from 50 to 85 µs of CPU. A process killed outright loses at most its last second of
rollups, never a record; another process sharing the file sees this one's within a second."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from ..records import GenerationRecord
from .console import Rollup, RollupBuffer
from .console_sql import rollup_add


def _p(i: int) -> str:
    return f"?{i}"


ADD = rollup_add(_p)
ROLL_S = 1.0
_log = logging.getLogger("tidegate.store")


class SQLiteRollups:
    """The buffer, and the task that writes it every `ROLL_S` while the store is open."""

    def __init__(self, write: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]) -> None:
        self.write = write  # the store's committed write (store/sqlite.py `_write`)
        self.buffer = RollupBuffer()
        self._task: asyncio.Task[None] | None = None

    def add(self, record: GenerationRecord) -> None:
        self.buffer.add(Rollup.of(record))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._every_second())

    async def flush(self) -> None:
        rows = self.buffer.take()
        if rows:
            await self.write(lambda db: db.executemany(ADD, rows))

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
