"""Conversation owners on SQLite (store/owners.py): a row per id with its owner and expiry; every
`PRUNE_EVERY`th write also drops the expired rows."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import SQLiteStore

# an expired row is taken over by a new binding; a live one keeps its owner (ids are the upstream's)
_PUT = (
    "INSERT INTO response_owners (id, key_id, expires_at) VALUES (?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET key_id = excluded.key_id, expires_at = excluded.expires_at"
    " WHERE response_owners.expires_at <= ?"
)
_PRUNE = "DELETE FROM response_owners WHERE expires_at <= ?"
PRUNE_EVERY = 1000


class SQLiteOwners:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self._writes = 0

    async def owners(self, ids: Sequence[str], now: float) -> dict[str, str]:
        marks = ",".join("?" * len(ids))
        sql = f"SELECT id, key_id FROM response_owners WHERE id IN ({marks}) AND expires_at > ?"
        args = (*ids, now)
        rows = await self.store._run(lambda: self.store._db().execute(sql, args).fetchall())
        return {str(r[0]): str(r[1]) for r in rows}

    async def bind(self, key_id: str, ids: Sequence[str], expires_at: float) -> None:
        self._writes += 1
        prune = self._writes % PRUNE_EVERY == 0
        now = time.time()

        def _put(db: sqlite3.Connection) -> None:
            db.executemany(_PUT, [(i, key_id, expires_at, now) for i in ids])
            if prune:
                db.execute(_PRUNE, (now,))

        await self.store._write(_put)
