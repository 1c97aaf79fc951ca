"""The response cache on SQLite (store/cache.py): a table of entries and one of hourly counters,
written with the store's other per-request statements (its group commit on the loop's connection)."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from .cache import CacheCounts, CacheEntry, CountRow, hour_of
from .sqlite import SQLiteStore

COLUMNS = "entry_key, key_id, model, door, created_at, expires_at, generation_id, usage, cost, events"
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
    )


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


class SQLiteCache:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def get(self, entry_key: str, now: float) -> CacheEntry | None:
        def read(db: sqlite3.Connection) -> Any:
            return db.execute(f"SELECT {COLUMNS} FROM cache_entries WHERE entry_key = ?", (entry_key,)).fetchone()

        row = await self.store._read(read)
        if row is None:
            return None
        if float(row[5]) <= now:
            await self.store._write(
                lambda db: db.execute(
                    "DELETE FROM cache_entries WHERE entry_key = ? AND expires_at <= ?", (entry_key, now)
                )
            )
            return None
        return entry_from_row(row)

    async def put(self, entry: CacheEntry) -> None:
        sql = f"INSERT OR REPLACE INTO cache_entries ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        await self.store._write(lambda db: db.execute(sql, entry_params(entry)))

    async def purge(self, *, model: str | None = None, key_id: str | None = None) -> int:
        where, values = purge_where(model, key_id, "?")
        cur = await self.store._write(lambda db: db.execute("DELETE FROM cache_entries" + where, values))
        return int(cur.rowcount)

    async def prune(self, now: float) -> int:
        cur = await self.store._write(lambda db: db.execute("DELETE FROM cache_entries WHERE expires_at <= ?", (now,)))
        return int(cur.rowcount)

    async def count(self, model: str, key_id: str, counts: CacheCounts, now: float) -> None:
        c = counts
        params = (hour_of(now), model, key_id, c.hits, c.misses, c.bypasses, c.bytes, c.saved_cost)
        await self.store._write(lambda db: db.execute(COUNT_SQL, params))

    async def counts(self, since: float) -> list[CountRow]:
        rows = await self.store._read(lambda db: db.execute(COUNTS_SQL, (hour_of(since),)).fetchall())
        return count_rows(rows)
