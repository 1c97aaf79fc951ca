"""PostgreSQL store (`postgresql://user@host:port/db?schema=tidegate`): the durable ledger, via an asyncpg pool.

Tables are created and migrated on `open()` (`store/schema.py`: yoyo-migrations under its lock, so
concurrent workers do not race on the catalog). `begin_generation` is one transaction holding an
advisory lock on (key_id, idempotency_key), so concurrent requests with the same key — from any
process — see each other's record.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]
import orjson

from ...records import INTERRUPTED_ERROR, ApiKey, BeginResult, GenerationRecord, LogRun
from ...store_url import StoreBackend
from .. import logpack
from ..admit import Ask, Decision
from ..base import LogTail, SharedRouteHealth, polling_follow
from ..rows import GEN_COLUMNS, GEN_COUNT, recent_sql, record_from_row, record_params
from ..schema import upgrade
from . import keys as pg_keys
from . import rollups as pg_rollups

_GEN_COLUMNS = GEN_COLUMNS
_GEN_NAMES = [c.strip() for c in _GEN_COLUMNS.split(",")]
_INSERT_GEN = f"INSERT INTO generations ({_GEN_COLUMNS}) VALUES ({', '.join(f'${i + 1}' for i in range(GEN_COUNT))})"
_UPDATE_GEN = (
    "UPDATE generations SET "
    + ", ".join(f"{c} = ${i + 2}" for i, c in enumerate(_GEN_NAMES[1:]))
    + " WHERE id = $1 AND status = 'in_progress'"  # a record a lease sweep marked keeps its outcome
)
# The final update and the record's rollups in one statement (store/postgres/rollups.py)
_FINAL_GEN = pg_rollups.final_update(_UPDATE_GEN, GEN_COUNT + 1)
# A flush writes one row per run of entries (`logpack`): a row per entry cost a stream with an
# Idempotency-Key more than the rest of its relay (an index entry, a heap tuple and WAL per chunk). A run
# written again from its first seq (a retry of a write that failed) replaces the first write. Rows of the
# per-entry table `generation_log` (versions before) are still read and pruned. PostgreSQL compresses
# (TOAST) a blob over ~2 KB itself.
_UPSERT_LOG = (
    "INSERT INTO generation_log_batches (generation_id, kind, first_seq, last_seq, data) VALUES ($1, $2, $3, $4, $5)"
    " ON CONFLICT (generation_id, kind, first_seq) DO UPDATE SET last_seq = EXCLUDED.last_seq, data = EXCLUDED.data"
)
_SELECT_LOG = (
    "SELECT first_seq, data, TRUE FROM generation_log_batches"
    " WHERE generation_id = $1 AND kind = $2 AND last_seq > $3"
    " UNION ALL SELECT seq, data, FALSE FROM generation_log WHERE generation_id = $1 AND kind = $2 AND seq > $3"
    " ORDER BY 1"
)
_SELECT_GEN = f"SELECT {_GEN_COLUMNS} FROM generations WHERE id = $1"
_INTERRUPTED_ERROR = orjson.dumps(INTERRUPTED_ERROR).decode()
# A lease's expiry is the database's clock (`now()`): gateways on several hosts need not agree on time.
# One statement marks the running records of owners whose lease expired (deleted by it) and, with
# `orphans`, those of owners that hold none (versions before leases); `generations_running` makes
# both a walk over the running records only.
_SWEEP = """
WITH dead AS (DELETE FROM leases WHERE expires_at < now() RETURNING owner)
UPDATE generations g SET status = 'interrupted', finish_reason = 'error', error = $1::jsonb
WHERE g.status = 'in_progress' AND (
    g.owner IN (SELECT owner FROM dead)
    OR ($2 AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.owner = g.owner))
)
"""


def _split_url(url: str) -> tuple[str, str | None]:
    """The DSN without tidegate's `schema` parameter (asyncpg would send it as a server setting), and it."""
    parts = urlsplit(url)
    schema: str | None = None
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "schema":
            schema = value
        else:
            rest.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(rest))), schema


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_TEXTS = tuple(_GEN_NAMES.index(c) for c in ("output_text", "reasoning_text"))  # model output: any character


def _params(r: GenerationRecord) -> tuple[Any, ...]:
    params = list(record_params(r))
    for i in _TEXTS:
        params[i] = params[i].replace("\x00", "\ufffd")  # PostgreSQL text cannot hold NUL
    return tuple(params)


def _count(status: str) -> int:
    """The row count of an asyncpg command status such as `UPDATE 3` or `DELETE 0`."""
    return int(status.rsplit(" ", 1)[-1])


def _log_rows(generation_id: str, runs: list[LogRun]) -> list[tuple[str, str, int, int, bytes]]:
    """One row per run: (generation id, kind, first seq, last seq, the run packed)."""
    return [
        (generation_id, run.kind, run.first_seq, run.last_seq, logpack.pack(run.first_seq, run.items))
        for run in runs
        if run.items
    ]


class _Connection(asyncpg.Connection):  # type: ignore[misc]
    """A pooled connection released without asyncpg's reset query (advisory unlock, CLOSE ALL,
    UNLISTEN, RESET ALL): the store leaves no session state behind (its advisory locks are
    transaction-scoped, it never LISTENs, SETs or opens a cursor outside a transaction), and the
    reset would be one more round trip on every release."""

    def get_reset_query(self) -> str:
        return ""


class PostgresStore:
    backend_name: StoreBackend = "postgres"

    def __init__(self, url: str, *, schema: str | None = None, max_connections: int = 10) -> None:
        self.dsn, url_schema = _split_url(url)
        self.schema = schema if schema is not None else url_schema
        self.max_connections = max_connections
        self._pool: Any = None
        self.rollups = pg_rollups.postgres_rollups(lambda: self.pool)

    @property
    def pool(self) -> Any:
        if self._pool is None:
            raise RuntimeError("the PostgreSQL store is not open")
        return self._pool

    async def open(self) -> None:
        if self._pool is not None:
            return
        settings = {"search_path": _quote_ident(self.schema)} if self.schema else {}
        self._pool = await asyncpg.create_pool(
            self.dsn,
            min_size=1,
            max_size=self.max_connections,
            server_settings=settings,
            command_timeout=30,
            connection_class=_Connection,
        )
        try:  # yoyo's lock serialises gateways that start together
            await asyncio.to_thread(upgrade, "postgres", self.dsn, self.schema)
        except BaseException:
            await self.close()
            raise
        self.rollups.start()

    async def close(self) -> None:
        if self._pool is not None:
            await self.rollups.stop()
            pool, self._pool = self._pool, None
            await pool.close()

    async def ping(self) -> bool:
        try:
            return bool(await self.pool.fetchval("SELECT 1", timeout=5) == 1)
        except (asyncpg.PostgresError, OSError, RuntimeError, TimeoutError, asyncpg.InterfaceError):
            return False

    # --- keys (store/postgres/keys.py) -------------------------------------------------------------
    async def create_key(self, key: ApiKey) -> None:
        await pg_keys.create(self.pool, key)

    async def find_key_by_hash(self, secret_hash: str) -> ApiKey | None:
        return await pg_keys.find_by_hash(self.pool, secret_hash)

    async def get_key(self, key_id: str) -> ApiKey | None:
        return await pg_keys.get(self.pool, key_id)

    async def list_keys(self) -> list[ApiKey]:
        return await pg_keys.list_all(self.pool)

    async def save_key(self, key: ApiKey) -> bool:
        return await pg_keys.save(self.pool, key)

    async def top_up(self, key_id: str, amount: float) -> ApiKey | None:
        return await pg_keys.top_up(self.pool, key_id, amount)

    async def admit(self, ask: Ask, now: float) -> Decision:
        return await pg_keys.admit(self.pool, ask)  # on the database's clock

    async def settle(self, key_id: str, generation_id: str, cost: float, tokens: int, period_floor: float) -> None:
        await pg_keys.settle(self.pool, key_id, generation_id, cost, tokens, period_floor)

    async def usage(self, start: float, end: float, group_by: str) -> list[dict[str, Any]]:
        return await pg_keys.usage(self.pool, start, end, group_by)

    async def revoke_key(self, key_id_or_name: str) -> bool:
        status = await self.pool.execute(
            "UPDATE api_keys SET revoked = TRUE WHERE (id = $1 OR name = $1) AND NOT revoked", key_id_or_name
        )
        return _count(status) > 0

    async def count_keys(self) -> int:
        return int(await self.pool.fetchval("SELECT COUNT(*) FROM api_keys WHERE NOT revoked"))

    # --- generations ------------------------------------------------------------------------------
    async def create_generation(self, record: GenerationRecord) -> None:
        await self.pool.execute(_INSERT_GEN, *_params(record))

    async def update_generation(self, record: GenerationRecord, log: list[LogRun] | None = None) -> bool:
        rows = _log_rows(record.id, log) if log else []
        if record.status == "in_progress":  # progress: no rollup until it ends
            if not rows:
                return _count(await self.pool.execute(_UPDATE_GEN, *_params(record))) > 0
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.executemany(_UPSERT_LOG, rows)
                return _count(await conn.execute(_UPDATE_GEN, *_params(record))) > 0
        args = (*_params(record), *pg_rollups.final_params(record))  # the outcome and the console's rollups
        if not rows:
            return int(await self.pool.fetchval(_FINAL_GEN, *args)) > 0
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.executemany(_UPSERT_LOG, rows)
            return int(await conn.fetchval(_FINAL_GEN, *args)) > 0

    async def get_generation(self, generation_id: str) -> GenerationRecord | None:
        row = await self.pool.fetchrow(_SELECT_GEN, generation_id)
        return record_from_row(row) if row is not None else None

    async def recent_generations(self, limit: int, key_id: str | None = None) -> list[GenerationRecord]:
        args: tuple[object, ...] = (key_id, limit) if key_id is not None else (limit,)
        rows = await self.pool.fetch(recent_sql("$", key_id is not None), *args)
        return [record_from_row(r) for r in rows]

    # --- leases (docs/api-operations.md §10) ----------------------------------------------------------------------
    async def renew_lease(self, owner: str, ttl_s: float) -> bool:
        inserted = await self.pool.fetchval(
            "INSERT INTO leases (owner, expires_at) VALUES ($1, now() + make_interval(secs => $2))"
            " ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at RETURNING xmax = 0",
            owner,
            float(ttl_s),
        )
        return not inserted

    async def release_lease(self, owner: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM leases WHERE owner = $1", owner)
            await conn.execute(
                "UPDATE generations SET status = 'interrupted', finish_reason = 'error', error = $2::jsonb"
                " WHERE status = 'in_progress' AND owner = $1",
                owner,
                _INTERRUPTED_ERROR,
            )

    async def sweep_leases(self, *, orphans: bool = False) -> int:
        return _count(await self.pool.execute(_SWEEP, _INTERRUPTED_ERROR, orphans))

    # --- idempotency and logs ---------------------------------------------------------------------
    async def begin_generation(self, record: GenerationRecord) -> BeginResult:
        params = _params(record)
        if record.idempotency_key is None:
            await self.pool.execute(_INSERT_GEN, *params)
            return BeginResult("created", record)
        async with self.pool.acquire() as conn, conn.transaction():
            # Serialise every begin for this (API key, Idempotency-Key), across processes.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(10) || $2, 0))",
                record.key_id,
                record.idempotency_key,
            )
            row = await conn.fetchrow(
                "SELECT generation_id, request_hash FROM idempotency WHERE key_id = $1 AND idem_key = $2",
                record.key_id,
                record.idempotency_key,
            )
            if row is not None:
                found = await conn.fetchrow(_SELECT_GEN, row[0])
                if found is not None:
                    existing = record_from_row(found)
                    if row[1] != record.request_hash:
                        return BeginResult("mismatch", existing)
                    if existing.status in ("in_progress", "completed"):
                        return BeginResult(existing.status, existing)
            await conn.execute(
                "INSERT INTO idempotency (key_id, idem_key, generation_id, request_hash, created_at)"
                " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key_id, idem_key) DO UPDATE SET"
                " generation_id = EXCLUDED.generation_id, request_hash = EXCLUDED.request_hash,"
                " created_at = EXCLUDED.created_at",
                record.key_id,
                record.idempotency_key,
                record.id,
                record.request_hash,
                float(record.created_at),
            )
            await conn.execute(_INSERT_GEN, *params)
        return BeginResult("created", record)

    async def find_idempotent(self, key_id: str, idempotency_key: str) -> GenerationRecord | None:
        row = await self.pool.fetchrow(
            f"SELECT {', '.join('g.' + c for c in _GEN_NAMES)} FROM idempotency i"
            " JOIN generations g ON g.id = i.generation_id WHERE i.key_id = $1 AND i.idem_key = $2",
            key_id,
            idempotency_key,
        )
        return record_from_row(row) if row is not None else None

    async def append_log(self, generation_id: str, runs: list[LogRun]) -> None:
        rows = _log_rows(generation_id, runs)
        if rows:
            await self.pool.executemany(_UPSERT_LOG, rows)

    def follow(self, generation_id: str) -> contextlib.AbstractAsyncContextManager[LogTail]:
        return polling_follow(generation_id)  # no push between processes: a follower polls

    async def read_log(self, generation_id: str, kind: str, after_seq: int = -1) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        for seq, data, packed in await self.pool.fetch(_SELECT_LOG, generation_id, kind, after_seq):
            if packed:
                out += [entry for entry in logpack.unpack(bytes(data)) if entry[0] > after_seq]
            else:
                out.append((int(seq), bytes(data)))
        return out

    def route_health(self) -> SharedRouteHealth | None:
        # in-process: a shared table would put a query (or a LISTEN round) into every request's routing;
        # each instance opening its own breakers costs at most `breaker_failures` failures per instance
        return None

    async def prune(self, older_than: float) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            status = await conn.execute("DELETE FROM idempotency WHERE created_at < $1", float(older_than))
            for table in ("generation_log_batches", "generation_log"):
                await conn.execute(
                    f"DELETE FROM {table} WHERE generation_id IN"
                    " (SELECT id FROM generations WHERE created_at < $1 AND status <> 'in_progress')",
                    float(older_than),
                )
        return _count(status)
