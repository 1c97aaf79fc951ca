"""The console's store on PostgreSQL (store/console.py). A record's final update and its rollups are
one statement (`final_update`): the update as a CTE, the buckets' upsert only from the row it
updated, so an ended record costs the round trip it always did."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .console import HIST_BUCKETS, RESOLUTIONS, AuditEntry, Bodies, Bucket, LogFilter, Rollup, SeriesQuery
from .console_sql import (
    AUDIT_COLUMNS,
    audit_sql,
    bucket_of,
    generations_sql,
    prune_rollups_sql,
    rollup_cutoffs,
    series_sql,
)
from .rows import record_from_row

if TYPE_CHECKING:
    from .base import GenerationRecord
    from .postgres import PostgresStore


def _p(i: int) -> str:
    return f"${i}"


def final_update(update_sql: str, first: int) -> str:
    """`update_sql` (an UPDATE of one record by id) and, when it updated the row, the record's
    rollups; its own parameters from `$first`: provider, error, input, output, cost, TTFT bucket."""
    p = [f"${first + i}" for i in range(6)]
    widths = ", ".join(f"({res})" for res in RESOLUTIONS)
    hist = ", ".join(f"CASE WHEN {p[5]}::int = {i} THEN 1 ELSE 0 END" for i in range(HIST_BUCKETS))
    sums = ("requests", "errors", "input_tokens", "output_tokens", "cost", *(f"h{i}" for i in range(HIST_BUCKETS)))
    adds = ", ".join(f"{c} = console_rollup.{c} + EXCLUDED.{c}" for c in sums)
    return (
        f"WITH u AS ({update_sql} RETURNING model, key_id, created_at),"
        f" r AS (INSERT INTO console_rollup (res, t, model, provider, key_id, {', '.join(sums)})"
        f" SELECT w.res, (floor(u.created_at / w.res) * w.res)::bigint, u.model, {p[0]}::text, u.key_id,"
        f" 1, {p[1]}::bigint, {p[2]}::bigint, {p[3]}::bigint, {p[4]}::float8, {hist}"
        f" FROM u CROSS JOIN (VALUES {widths}) AS w(res)"
        f" ON CONFLICT (res, t, model, provider, key_id) DO UPDATE SET {adds})"
        " SELECT count(*) FROM u"
    )


def final_params(record: GenerationRecord) -> tuple[Any, ...]:
    r = Rollup.of(record)
    return (r.provider, int(r.error), r.input_tokens, r.output_tokens, r.cost, r.ttft_bucket)


class PostgresConsole:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._session: bool | None = None

    async def series(self, query: SeriesQuery) -> list[Bucket]:
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


def _json(value: Any) -> str:
    """A body as JSON text; PostgreSQL's JSON holds no NUL, which a model's answer may."""
    return orjson.dumps(value).decode().replace("\\u0000", "\\ufffd")
