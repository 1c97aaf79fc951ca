"""The response cache on PostgreSQL (store/cache.py): the same tables as SQLite's, on the store's
pool, shared by every gateway on the database; a hit's read sets its last use in the same statement."""

from __future__ import annotations

from typing import Any

from ..cache import CacheCounts, CacheEntry, CountRow, hour_of
from ..cache_sql import COLUMNS, count_rows, entry_from_row, entry_params, over_ceiling, purge_where
from .store import PostgresStore

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


_OLD = "old.entry_key, old.key_id, old.model, old.door, old.created_at, old.expires_at, old.generation_id, old.usage"
_TOUCH = (
    "UPDATE cache_entries AS e SET accessed_at = $2 FROM cache_entries AS old"
    " WHERE e.entry_key = $1 AND old.entry_key = e.entry_key RETURNING "
)
GET_SQL = _TOUCH + _OLD + ", old.cost, old.events, old.size"
GET_META_SQL = _TOUCH + _OLD + ", old.cost, ''::bytea, old.size"
PUT_SQL = (
    f"INSERT INTO cache_entries ({COLUMNS}, accessed_at, size)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
)
RECOUNT_SQL = "UPDATE cache_total SET bytes = (SELECT COALESCE(SUM(size), 0) FROM cache_entries) WHERE id = 0"
LRU_SQL = "SELECT entry_key, size FROM cache_entries ORDER BY accessed_at, entry_key"


def _deleted(status: str) -> int:
    return int(status.split()[-1]) if status.startswith("DELETE") else 0


async def _lock_total(conn: Any) -> None:
    """Every transaction that changes entries locks the total's row first: instances change them one
    at a time, their totals add up, and no two wait on each other's locks in opposite orders."""
    await conn.execute("SELECT bytes FROM cache_total WHERE id = 0 FOR UPDATE")


async def _delete(conn: Any, where: str, *args: Any) -> None:
    """Delete entries, taking their sizes off the total (in the caller's transaction)."""
    await conn.execute(
        f"WITH gone AS (DELETE FROM cache_entries WHERE {where} RETURNING size)"
        " UPDATE cache_total SET bytes = bytes - (SELECT COALESCE(SUM(size), 0) FROM gone) WHERE id = 0",
        *args,
    )


class PostgresCache:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def get(self, entry_key: str, now: float, *, events: bool = True) -> CacheEntry | None:
        # the row and its last use in one statement (the old values come back: `expires_at` decides)
        row = await self.store.pool.fetchrow(GET_SQL if events else GET_META_SQL, entry_key, now)
        if row is None:
            return None
        if float(row[5]) <= now:
            async with self.store.pool.acquire() as conn, conn.transaction():
                await _lock_total(conn)
                await _delete(conn, "entry_key = $1 AND expires_at <= $2", entry_key, now)
            return None
        return entry_from_row(row)

    async def put(self, entry: CacheEntry, max_total_bytes: int) -> int:
        size = len(entry.events)
        async with self.store.pool.acquire() as conn, conn.transaction():
            await _lock_total(conn)
            await _delete(conn, "entry_key = $1", entry.entry_key)
            await conn.execute(PUT_SQL, *entry_params(entry), entry.created_at, size)
            total = await conn.fetchval("UPDATE cache_total SET bytes = bytes + $1 WHERE id = 0 RETURNING bytes", size)
            if total <= max_total_bytes:
                return 0
            oldest = await conn.fetch(LRU_SQL)
            gone = over_ceiling(int(total), max_total_bytes, ((r[0], r[1]) for r in oldest))
            if gone:
                await _delete(conn, "entry_key = ANY($1::text[])", gone)
            return len(gone)

    async def purge(self, *, model: str | None = None, key_id: str | None = None) -> int:
        where, values = purge_where(model, key_id, "$")
        async with self.store.pool.acquire() as conn, conn.transaction():
            await _lock_total(conn)
            gone = _deleted(await conn.execute("DELETE FROM cache_entries" + where, *values))
            await conn.execute(RECOUNT_SQL)
        return gone

    async def prune(self, now: float) -> int:
        async with self.store.pool.acquire() as conn, conn.transaction():
            await _lock_total(conn)
            gone = _deleted(await conn.execute("DELETE FROM cache_entries WHERE expires_at <= $1", now))
            await conn.execute(RECOUNT_SQL)
        return gone

    async def count(self, model: str, key_id: str, counts: CacheCounts, now: float) -> None:
        c = counts
        await self.store.pool.execute(
            COUNT_SQL, hour_of(now), model, key_id, c.hits, c.misses, c.bypasses, c.bytes, c.saved_cost
        )

    async def counts(self, since: float) -> list[CountRow]:
        return count_rows(await self.store.pool.fetch(COUNTS_SQL, hour_of(since)))
