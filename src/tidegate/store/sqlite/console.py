"""The console's store on SQLite (store/console.py); its rollups are written by sqlite/rollups.py."""

from __future__ import annotations

import sqlite3
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
from ..group_commit import immediate
from ..rows import record_from_row

if TYPE_CHECKING:
    from ...records import GenerationRecord
    from .store import SQLiteStore


def _p(i: int) -> str:
    return f"?{i}"


def has_session_column(db: sqlite3.Connection) -> bool:
    return any(row[1] == "agent_session" for row in db.execute("PRAGMA table_info(generations)"))


def audit_from_row(row: Any) -> AuditEntry:
    detail = row[6]
    return AuditEntry(row[0], row[1], row[2], row[3], row[4], row[5], orjson.loads(detail) if detail else {})


class SQLiteConsole:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self._session: bool | None = None

    async def series(self, query: SeriesQuery) -> list[Bucket]:
        await self.store.rollups.flush()  # this process's latest records, summed but not yet written
        sql, args = series_sql(query, _p)
        rows = await self.store._run(lambda: self.store._db().execute(sql, args).fetchall())
        return [bucket_of(r) for r in rows]

    async def generations(self, where: LogFilter, limit: int) -> list[GenerationRecord]:
        def _query() -> list[Any]:
            db = self.store._db()
            if self._session is None:
                self._session = has_session_column(db)
            sql, args = generations_sql(where, limit, _p, self._session)
            return db.execute(sql, args).fetchall()

        rows = await self.store._run(_query)
        return [record_from_row(r) for r in rows]

    def count(self, rollup: Rollup) -> None:
        self.store.rollups.count(rollup)

    async def add_audit(self, entry: AuditEntry) -> None:
        params = (entry.id, entry.at, entry.actor_key_id, entry.actor_name, entry.action, entry.target,
                  orjson.dumps(entry.detail).decode())  # fmt: skip

        def _insert(db: sqlite3.Connection) -> None:
            db.execute(f"INSERT INTO console_audit ({AUDIT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", params)

        await self.store._write(_insert)

    async def audit(self, limit: int, before: str | None) -> list[AuditEntry]:
        sql = audit_sql(before, _p)
        args: tuple[Any, ...] = (limit, before) if before is not None else (limit,)
        rows = await self.store._run(lambda: self.store._db().execute(sql, args).fetchall())
        return [audit_from_row(r) for r in rows]

    async def save_bodies(self, generation_id: str, at: float, bodies: Bodies, ttl_s: float) -> None:
        params = (generation_id, at, orjson.dumps(bodies.request).decode(), orjson.dumps(bodies.response).decode())

        def _insert(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR REPLACE INTO generation_bodies (generation_id, at, request, response) VALUES (?, ?, ?, ?)",
                params,
            )

        await self.store._write(_insert)

    async def bodies(self, generation_id: str) -> Bodies | None:
        sql = "SELECT request, response FROM generation_bodies WHERE generation_id = ?"
        row = await self.store._run(lambda: self.store._db().execute(sql, (generation_id,)).fetchone())
        if row is None:
            return None
        return Bodies(orjson.loads(row[0]) if row[0] else None, orjson.loads(row[1]) if row[1] else None)

    async def prune(self, now: float, body_retention_s: float) -> int:
        def _prune(db: sqlite3.Connection) -> int:
            removed = db.execute("DELETE FROM generation_bodies WHERE at < ?", (now - body_retention_s,)).rowcount
            for res, cutoff in rollup_cutoffs(now):
                db.execute(prune_rollups_sql(_p), (res, cutoff))
            return int(removed)

        result: int = await self.store._run(lambda: immediate(self.store._db(), _prune))
        return result

    async def session_secret(self, candidate: bytes) -> bytes:
        def _keep(db: sqlite3.Connection) -> bytes:
            db.execute("INSERT OR IGNORE INTO console_secret (id, secret) VALUES (1, ?)", (candidate,))
            return bytes(db.execute("SELECT secret FROM console_secret WHERE id = 1").fetchone()[0])

        return await self.store._write(_keep)
