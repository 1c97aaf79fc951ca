"""The response cache on PostgreSQL (store/cache.py): the same two tables as SQLite's, on the
store's pool, shared by every gateway on the database."""

from __future__ import annotations

from typing import Any

from .cache import CacheCounts, CacheEntry, CountRow, hour_of
from .postgres import PostgresStore
from .sqlite_cache import COLUMNS, count_rows, entry_from_row, entry_params, purge_where

COUNT_SQL = (
    "INSERT INTO cache_counts AS c (hour, model, key_id, hits, misses, bypasses, bytes, saved_cost)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (hour, model, key_id) DO UPDATE SET"
    " hits = c.hits + excluded.hits, misses = c.misses + excluded.misses,"
    " bypasses = c.bypasses + excluded.bypasses, bytes = c.bytes + excluded.bytes,"
    " saved_cost = c.saved_cost + excluded.saved_cost"
)
COUNTS_SQL = (
    "SELECT model, key_id, SUM(hits), SUM(misses), SUM(bypasses), SUM(bytes), SUM(saved_cost)"
    " FROM cache_counts WHERE hour >= $1 GROUP BY model, key_id"
)


def _deleted(status: str) -> int:
    return int(status.split()[-1]) if status.startswith("DELETE") else 0


class PostgresCache:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def get(self, entry_key: str, now: float) -> CacheEntry | None:
        pool: Any = self.store.pool
        row = await pool.fetchrow(f"SELECT {COLUMNS} FROM cache_entries WHERE entry_key = $1", entry_key)
        if row is None:
            return None
        if float(row[5]) <= now:
            await pool.execute("DELETE FROM cache_entries WHERE entry_key = $1 AND expires_at <= $2", entry_key, now)
            return None
        return entry_from_row(row)

    async def put(self, entry: CacheEntry) -> None:
        sql = (
            f"INSERT INTO cache_entries ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            " ON CONFLICT (entry_key) DO UPDATE SET key_id = excluded.key_id, model = excluded.model,"
            " door = excluded.door, created_at = excluded.created_at, expires_at = excluded.expires_at,"
            " generation_id = excluded.generation_id, usage = excluded.usage, cost = excluded.cost,"
            " events = excluded.events"
        )
        await self.store.pool.execute(sql, *entry_params(entry))

    async def purge(self, *, model: str | None = None, key_id: str | None = None) -> int:
        where, values = purge_where(model, key_id, "$")
        return _deleted(await self.store.pool.execute("DELETE FROM cache_entries" + where, *values))

    async def prune(self, now: float) -> int:
        return _deleted(await self.store.pool.execute("DELETE FROM cache_entries WHERE expires_at <= $1", now))

    async def count(self, model: str, key_id: str, counts: CacheCounts, now: float) -> None:
        c = counts
        await self.store.pool.execute(
            COUNT_SQL, hour_of(now), model, key_id, c.hits, c.misses, c.bypasses, c.bytes, c.saved_cost
        )

    async def counts(self, since: float) -> list[CountRow]:
        return count_rows(await self.store.pool.fetch(COUNTS_SQL, hour_of(since)))
