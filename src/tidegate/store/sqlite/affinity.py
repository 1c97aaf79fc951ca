"""Prompt-cache affinity on SQLite (store/affinity.py): a row per key with its expiry; an expired
row is replaced by the next `remember` of its key, and every `PRUNE_EVERY`th write also drops
the expired rows (sessions end: their keys are never written again)."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import SQLiteStore

_GET = "SELECT route FROM route_affinity WHERE affinity_key = ? AND expires_at > ?"
_PUT = "INSERT OR REPLACE INTO route_affinity (affinity_key, route, expires_at) VALUES (?, ?, ?)"
_PRUNE = "DELETE FROM route_affinity WHERE expires_at <= ?"
PRUNE_EVERY = 1000


class SQLiteAffinity:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self._writes = 0

    async def route_for(self, key: str, now: float) -> str | None:
        row = await self.store._run(lambda: self.store._db().execute(_GET, (key, now)).fetchone())
        return str(row[0]) if row else None

    async def remember(self, key: str, route: str, expires_at: float) -> None:
        self._writes += 1
        prune = self._writes % PRUNE_EVERY == 0
        now = time.time()

        def _put(db: sqlite3.Connection) -> None:
            db.execute(_PUT, (key, route, expires_at))
            if prune:
                db.execute(_PRUNE, (now,))

        await self.store._write(_put)
