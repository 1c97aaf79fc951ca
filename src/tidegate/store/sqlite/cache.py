"""The response cache on SQLite (store/cache.py): a table of entries and one of hourly counters,
written with the store's other per-request statements (its group commit on the loop's connection).
The entries' total is a one-row table that each add and delete moves in the same transaction; a
purge or a prune counts it again."""

from __future__ import annotations

import sqlite3

from ..cache import CacheCounts, CacheEntry, CountRow, hour_of
from ..cache_sql import COLUMNS, count_rows, entry_from_row, entry_params, over_ceiling, purge_where
from .store import SQLiteStore

META = "entry_key, key_id, model, door, created_at, expires_at, generation_id, usage, cost, x'', size"
FULL = COLUMNS + ", size"
PUT_SQL = f"INSERT INTO cache_entries ({COLUMNS}, accessed_at, size) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
TOTAL_SQL = "UPDATE cache_total SET bytes = bytes + ? WHERE id = 0"
RECOUNT_SQL = "UPDATE cache_total SET bytes = (SELECT COALESCE(SUM(size), 0) FROM cache_entries) WHERE id = 0"
# oldest use first; the entry just written (used now) goes last
LRU_SQL = "SELECT entry_key, size FROM cache_entries ORDER BY accessed_at, entry_key"
COUNT_SQL = (
    "INSERT INTO cache_counts (hour, model, key_id, hits, misses, bypasses, bytes, saved_cost)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (hour, model, key_id) DO UPDATE SET"
    " hits = hits + excluded.hits, misses = misses + excluded.misses, bypasses = bypasses + excluded.bypasses,"
    " bytes = bytes + excluded.bytes, saved_cost = saved_cost + excluded.saved_cost"
)
COUNTS_SQL = (
    "SELECT model, key_id, SUM(hits), SUM(misses), SUM(bypasses), SUM(bytes), SUM(saved_cost)"
    " FROM cache_counts WHERE hour >= ? GROUP BY model, key_id"
)


def _delete(db: sqlite3.Connection, entry_key: str, expired_by: float | None) -> None:
    """Delete one entry (only if expired by `expired_by`, when given), taking its size off the total."""
    sql = "DELETE FROM cache_entries WHERE entry_key = ?" + (" AND expires_at <= ?" if expired_by is not None else "")
    args = (entry_key,) if expired_by is None else (entry_key, expired_by)
    for (size,) in db.execute(sql + " RETURNING size", args).fetchall():
        db.execute(TOTAL_SQL, (-int(size),))


class SQLiteCache:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def get(self, entry_key: str, now: float, *, events: bool = True) -> CacheEntry | None:
        sql = f"SELECT {FULL if events else META} FROM cache_entries WHERE entry_key = ?"
        row = await self.store._read(lambda db: db.execute(sql, (entry_key,)).fetchone())
        if row is None:
            return None
        if float(row[5]) <= now:
            await self.store._write(lambda db: _delete(db, entry_key, now))
            return None
        touch = "UPDATE cache_entries SET accessed_at = ? WHERE entry_key = ?"
        await self.store._write(lambda db: db.execute(touch, (now, entry_key)))
        return entry_from_row(row)

    async def put(self, entry: CacheEntry, max_total_bytes: int) -> int:
        size = len(entry.events)

        def write(db: sqlite3.Connection) -> int:
            _delete(db, entry.entry_key, None)
            db.execute(PUT_SQL, (*entry_params(entry), entry.created_at, size))
            db.execute(TOTAL_SQL, (size,))
            (total,) = db.execute("SELECT bytes FROM cache_total WHERE id = 0").fetchone()
            if total <= max_total_bytes:
                return 0
            oldest = db.execute(LRU_SQL)
            try:
                gone = over_ceiling(int(total), max_total_bytes, oldest)
            finally:
                oldest.close()
            for key in gone:
                _delete(db, key, None)
            return len(gone)

        evicted: int = await self.store._write(write)
        return evicted

    async def purge(self, *, model: str | None = None, key_id: str | None = None) -> int:
        where, values = purge_where(model, key_id, "?")

        def write(db: sqlite3.Connection) -> int:
            gone = db.execute("DELETE FROM cache_entries" + where, values).rowcount
            db.execute(RECOUNT_SQL)
            return int(gone)

        purged: int = await self.store._write(write)
        return purged

    async def prune(self, now: float) -> int:
        def write(db: sqlite3.Connection) -> int:
            gone = db.execute("DELETE FROM cache_entries WHERE expires_at <= ?", (now,)).rowcount
            db.execute(RECOUNT_SQL)
            return int(gone)

        pruned: int = await self.store._write(write)
        return pruned

    async def count(self, model: str, key_id: str, counts: CacheCounts, now: float) -> None:
        c = counts
        params = (hour_of(now), model, key_id, c.hits, c.misses, c.bypasses, c.bytes, c.saved_cost)
        await self.store._write(lambda db: db.execute(COUNT_SQL, params))

    async def counts(self, since: float) -> list[CountRow]:
        rows = await self.store._read(lambda db: db.execute(COUNTS_SQL, (hour_of(since),)).fetchall())
        return count_rows(rows)
