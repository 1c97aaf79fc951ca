"""SQLite's console rollups (docs/console-api.md): summed in memory and written once a second by
`rollup_writer.RollupWriter`, one upsert per (bucket, group); read by sqlite/console.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from ..console_sql import rollup_add
from ..rollup_writer import RollupWriter


def _p(i: int) -> str:
    return f"?{i}"


ADD = rollup_add(_p)


def sqlite_rollups(write: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]) -> RollupWriter:
    """`write`: the store's committed write (store/sqlite/store.py `_write`)."""

    async def write_rows(rows: list[tuple[Any, ...]]) -> None:
        await write(lambda db: db.executemany(ADD, rows))

    return RollupWriter(write_rows)
