"""The console's store on PostgreSQL (store/console.py). A record's final update and its rollups are
one statement (postgres/rollups.py); this module reads them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ..console import AuditEntry, Bodies, Bucket, LogFilter, Rollup, SeriesQuery
from ..console_sql import (
    AUDIT_COLUMNS,
    audit_sql,
    bucket_of,
    generations_sql,
    prune_rollups_sql,
    rollup_cutoffs,
    series_sql,
)
from ..rows import record_from_row

if TYPE_CHECKING:
    from ...records import GenerationRecord
    from .store import PostgresStore


def _p(i: int) -> str:
    return f"${i}"


class PostgresConsole:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._session: bool | None = None

    async def series(self, query: SeriesQuery) -> list[Bucket]:
        await self.store.rollups.flush()  # this process's counted rejections, summed but not yet written
        sql, args = series_sql(query, _p)
        return [bucket_of(r) for r in await self.store.pool.fetch(sql, *args)]

    async def generations(self, where: LogFilter, limit: int) -> list[GenerationRecord]:
        pool = self.store.pool
        if self._session is None:
            self._session = bool(
                await pool.fetchval(
                    "SELECT count(*) FROM information_schema.columns WHERE table_name = 'generations'"
                    " AND column_name = 'agent_session' AND table_schema = current_schema()"
                )
            )
        sql, args = generations_sql(where, limit, _p, self._session)
        return [record_from_row(r) for r in await pool.fetch(sql, *args)]

    def count(self, rollup: Rollup) -> None:
        self.store.rollups.count(rollup)

    async def add_audit(self, entry: AuditEntry) -> None:
        await self.store.pool.execute(
            f"INSERT INTO console_audit ({AUDIT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)",
            entry.id, entry.at, entry.actor_key_id, entry.actor_name, entry.action, entry.target,
            orjson.dumps(entry.detail).decode(),
        )  # fmt: skip

    async def audit(self, limit: int, before: str | None) -> list[AuditEntry]:
        args: tuple[Any, ...] = (limit, before) if before is not None else (limit,)
        rows = await self.store.pool.fetch(audit_sql(before, _p), *args)
        return [AuditEntry(r[0], r[1], r[2], r[3], r[4], r[5], orjson.loads(r[6])) for r in rows]

    async def save_bodies(self, generation_id: str, at: float, bodies: Bodies, ttl_s: float) -> None:
        await self.store.pool.execute(
            "INSERT INTO generation_bodies (generation_id, at, request, response) VALUES ($1, $2, $3::jsonb, $4::jsonb)"
            " ON CONFLICT (generation_id) DO UPDATE SET at = EXCLUDED.at, request = EXCLUDED.request,"
            " response = EXCLUDED.response",
            generation_id, at, _json(bodies.request), _json(bodies.response),
        )  # fmt: skip

    async def bodies(self, generation_id: str) -> Bodies | None:
        row = await self.store.pool.fetchrow(
            "SELECT request, response FROM generation_bodies WHERE generation_id = $1", generation_id
        )
        if row is None:
            return None
        return Bodies(orjson.loads(row[0]) if row[0] else None, orjson.loads(row[1]) if row[1] else None)

    async def prune(self, now: float, body_retention_s: float) -> int:
        async with self.store.pool.acquire() as conn, conn.transaction():
            status = await conn.execute("DELETE FROM generation_bodies WHERE at < $1", now - body_retention_s)
            for res, cutoff in rollup_cutoffs(now):
                await conn.execute(prune_rollups_sql(_p), res, cutoff)
        return int(status.rsplit(" ", 1)[-1])

    async def session_secret(self, candidate: bytes) -> bytes:
        async with self.store.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO console_secret (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING", candidate
            )
            return bytes(await conn.fetchval("SELECT secret FROM console_secret WHERE id = 1"))


def _json(value: Any) -> str:
    """A body as JSON text; PostgreSQL's JSON holds no NUL, which a model's answer may."""
    return orjson.dumps(value).decode().replace("\\u0000", "\\ufffd")
