"""The response cache on SQLite (store/cache.py): a table of entries and one of hourly counters,
written with the store's other per-request statements (its group commit on the loop's connection).
The entries' total is a one-row table that each add and delete moves in the same transaction; a
purge or a prune counts it again."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

import orjson

from .cache import CacheCounts, CacheEntry, CountRow, hour_of
from .sqlite import SQLiteStore

COLUMNS = "entry_key, key_id, model, door, created_at, expires_at, generation_id, usage, cost, events"
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


def entry_from_row(row: Any) -> CacheEntry:
    return CacheEntry(
        entry_key=row[0],
        key_id=row[1],
        model=row[2],
        door=row[3],
        created_at=float(row[4]),
        expires_at=float(row[5]),
        generation_id=row[6],
        usage=orjson.loads(row[7]),
        cost=float(row[8]),
        events=bytes(row[9]),
        size=int(row[10]) if len(row) > 10 else len(row[9]),
    )


def over_ceiling(total: int, max_total_bytes: int, oldest_first: Iterable[Any]) -> list[str]:
    """The least recently used entries to evict so that `total` comes down to `max_total_bytes`."""
    gone: list[str] = []
    for entry_key, size in oldest_first:
        if total <= max_total_bytes:
            break
        gone.append(str(entry_key))
        total -= int(size)
    return gone


def entry_params(e: CacheEntry) -> tuple[Any, ...]:
    usage = orjson.dumps(e.usage).decode()
    return (
        e.entry_key,
        e.key_id,
        e.model,
        e.door,
        e.created_at,
        e.expires_at,
        e.generation_id,
        usage,
        e.cost,
        e.events,
    )


def purge_where(model: str | None, key_id: str | None, mark: str) -> tuple[str, list[str]]:
    """The WHERE clause (with `mark` as each placeholder: `?`, or `$` for numbered ones) and its values."""
    clauses, values = [], []
    for column, value in (("model", model), ("key_id", key_id)):
        if value is not None:
            values.append(value)
            clauses.append(f"{column} = " + (f"${len(values)}" if mark == "$" else "?"))
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", values


def count_rows(rows: list[Any]) -> list[CountRow]:
    return [CountRow(r[0], r[1], CacheCounts(int(r[2]), int(r[3]), int(r[4]), int(r[5]), float(r[6]))) for r in rows]


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
