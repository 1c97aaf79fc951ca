"""SQLite store (the embedded default): stdlib sqlite3 in WAL mode; see SQLiteStore for who runs what."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

from ...records import ApiKey, BeginResult, GenerationRecord, LogRun
from ...store_url import StoreBackend
from .. import logpack
from ..admit import Ask, Decision
from ..base import LogTail, SharedRouteHealth, polling_follow
from ..group_commit import GroupCommit, immediate, is_locked
from ..rows import FINAL_COLUMNS, GEN_COLUMNS, GEN_COUNT, final_params, recent_sql, record_from_row, record_params
from ..schema import apply_in_memory, upgrade
from . import keys as sqlite_keys
from . import leases
from . import rollups as sqlite_rollups

T = TypeVar("T")

# Python 3.11's sqlite3 binds an exact int, float, str or bytearray as it is and asks its adapter
# registry about anything else: None, bytes, bool. Nothing registered, it looks for `__adapt__` on
# its protocol type, and that failed lookup builds and drops a formatted AttributeError for each of
# a record's None columns on every write. Registered, the lookup is one dict hit
# and a C call that returns the same value (`{}.get(None)` is None, `bytes(b)` is `b`, `int(True)`
# is 1, which sqlite3 binds for a bool anyway). Process-wide, and what is stored does not change.
sqlite3.register_adapter(type(None), cast("Callable[[None], None]", {}.get))
sqlite3.register_adapter(bytes, bytes)
sqlite3.register_adapter(bool, int)

_INSERT_GENERATION = f"INSERT INTO generations ({GEN_COLUMNS}) VALUES ({', '.join('?' * GEN_COUNT)})"
# Only a running record takes an outcome: one a lease sweep marked `interrupted` keeps it.
_UPDATE_GENERATION = (
    "UPDATE generations SET "
    + ", ".join(f"{c.strip()} = ?" for c in FINAL_COLUMNS.split(","))
    + " WHERE id = ? AND status = 'in_progress'"
)
_INSERT_LOG_BATCH = (
    "INSERT OR REPLACE INTO generation_log_batches (generation_id, kind, first_seq, last_seq, data)"
    " VALUES (?, ?, ?, ?, ?)"
)
# A generation's last log entries up to this size are written with its outcome on the loop's
# connection (a non-stream answer, a paced stream's last 200 ms); more (an unpaced long answer's
# whole log) is written on the store thread, where it does not hold the loop up.
_IN_PLACE_LOG_BYTES = 64 * 1024
# Checkpoints run on a thread and connection of their own, never on the store thread: a checkpoint
# copies the WAL into the database and fsyncs both (milliseconds to hundreds of them on a VM's disk),
# and a log write or a generation's final write queued behind it held that stream's ending up. One
# starts after about this many WAL pages were written since the last one (SQLite's own
# auto-checkpoint threshold; a loop commit counts `_PAGES_PER_COMMIT` and two more for each further
# write it carries (`GroupCommit`), a log write its size). A
# PASSIVE checkpoint never holds writers off, but under steady load it never catches up with the new
# frames and the WAL would grow without end; a RESTART holds writers off until it is done (the
# loop's writes queue on the store thread meanwhile), so the next write starts the WAL from its
# beginning again. Every tenth checkpoint restarts, right after a passive one: it has only the last
# few frames to copy and hold writers off for; so does any checkpoint that finds the WAL longer than
# `_RESTART_FRAMES` (on a slow disk fewer checkpoints start, and a restart that found a writer
# busy for its whole timeout did not happen: the WAL's length bounds it either way).
_CHECKPOINT_PAGES = 1000
_PAGES_PER_COMMIT = 5
_PAGE_BYTES = 4096
_RESTART_EVERY = 10
_RESTART_FRAMES = 6 * _CHECKPOINT_PAGES


def _get_record(db: sqlite3.Connection, generation_id: str) -> GenerationRecord | None:
    row = db.execute(f"SELECT {GEN_COLUMNS} FROM generations WHERE id = ?", (generation_id,)).fetchone()
    return record_from_row(row) if row else None


LogRow = tuple[str, str, int, int, bytes]  # generation id, kind, first seq, last seq, data


def _log_rows(generation_id: str, runs: list[LogRun], deflate: bool) -> list[LogRow]:
    """One packed row per run (`logpack`), deflated or not."""
    blobs = [logpack.pack(run.first_seq, run.items) for run in runs]
    return _rows(generation_id, runs, [logpack.deflate(blob) for blob in blobs] if deflate else blobs)


async def _deflated_log_rows(generation_id: str, runs: list[LogRun]) -> list[LogRow]:
    """`_log_rows(..., deflate=True)` from the event loop: a large run is deflated on a thread."""
    return _rows(generation_id, runs, [await logpack.deflated(logpack.pack(run.first_seq, run.items)) for run in runs])


def _rows(generation_id: str, runs: list[LogRun], blobs: list[bytes]) -> list[LogRow]:
    return [(generation_id, run.kind, run.first_seq, run.last_seq, blob) for run, blob in zip(runs, blobs, strict=True)]


def _stored_bytes(rows: list[LogRow]) -> int:
    return sum(len(row[4]) for row in rows)


def _path_from_url(url: str) -> str:
    # sqlite:///relative.db, sqlite:////abs/path.db, sqlite:///:memory:
    rest = url[len("sqlite://") :]
    if rest.startswith("/"):
        rest = rest[1:]
    return rest or "tidegate.db"


class SQLiteStore:
    """Two connections to one WAL database.

    The event loop's own connection runs the short per-request statements (key lookup, the durable
    record before the upstream call, its final state) in place: a WAL commit with synchronous=NORMAL
    is a write into the page cache, cheaper than a hop to a thread and back. The writes asked for in
    one loop iteration share one transaction (`GroupCommit`). That connection never waits for a lock
    (busy_timeout 0) and never checkpoints: when another writer holds the lock (the store thread's log
    flush, another worker process) the batch runs on the store thread, whose connection waits for
    it. A generation's last log entries go with its outcome, in one transaction, in place up to 64
    KiB. The running flushes of log batches, log reads, pruning and recovery always run on the store
    thread. Checkpoints run on a third connection, on a thread of their own (`_CHECKPOINT_PAGES`). An
    in-memory database has one connection, used in place for everything (nothing on it can block;
    a commit costs nothing to group); its logs are deflated before they are written, as the file's
    and Redis's (it holds them in the gateway's RAM for `retention_hours`).
    """

    backend_name: StoreBackend = "sqlite"

    def __init__(self, url: str) -> None:
        self.path = _path_from_url(url)
        self._memory = self.path == ":memory:"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tidegate-sqlite")
        self._checkpointer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tidegate-sqlite-checkpoint")
        self._conn: sqlite3.Connection | None = None  # the store thread's (or, in memory, the only one)
        self._loop_conn: sqlite3.Connection | None = None
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._pages_written = 0  # (estimated) since the last checkpoint started
        self._checkpointing = False
        self._checkpoints = 0
        self._commits = GroupCommit(self._loop_db, self._db, self._executor, self._committed)
        self.rollups = sqlite_rollups.sqlite_rollups(self._write)
        self._lease_first: dict[str, int] = {}  # owner -> the newest rowid before its first record

    def _connect(self, busy_timeout_ms: int, autocheckpoint: bool) -> sqlite3.Connection:
        if not self._memory:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        if not autocheckpoint:
            conn.execute("PRAGMA wal_autocheckpoint=0")
        return conn

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            if not self._memory:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                upgrade("sqlite", self.path)  # the schema is this version's before anything reads it
            conn = self._connect(5000, self._memory)
            if self._memory:
                apply_in_memory(conn)
            self._conn = conn
        return self._conn

    def _loop_db(self) -> sqlite3.Connection:
        if self._memory:
            return self._db()
        if self._loop_conn is None:
            self._db()  # the schema exists before the loop's connection is used
            self._loop_conn = self._connect(0, False)
        return self._loop_conn

    async def _run(self, fn: Any, *args: Any) -> Any:
        """On the store thread (in memory: in place)."""
        if self._memory:
            return fn(*args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    async def _write_log(self, write: Callable[[], int]) -> None:
        """A log write on the store thread (which packs and deflates it there, off the loop); `write`
        returns the bytes it stored."""
        size: int = await self._run(write)
        self._written(size // _PAGE_BYTES + _PAGES_PER_COMMIT)

    async def _read(self, fn: Any) -> Any:
        """`fn(connection)` on the event loop's connection; on the store thread when it is locked."""
        try:
            return fn(self._loop_db())
        except sqlite3.OperationalError as exc:
            if self._memory or not is_locked(exc):
                raise
            return await self._run(lambda: fn(self._db()))

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` committed in a transaction: in memory in place, else with the other writes
        of this loop iteration (`GroupCommit`)."""
        if self._memory:
            return immediate(self._db(), fn)
        result: T = await self._commits.write(fn)
        return result

    def _committed(self, writes: int) -> None:
        self._written(_PAGES_PER_COMMIT + 2 * (writes - 1))

    def _written(self, pages: int) -> None:
        """Count WAL pages written (on the loop); start a checkpoint when enough have piled up."""
        if self._memory:
            return
        self._pages_written += pages
        if self._pages_written >= _CHECKPOINT_PAGES and not self._checkpointing:
            self._pages_written = 0
            self._checkpointing = True
            asyncio.get_running_loop().run_in_executor(self._checkpointer, self._checkpoint)

    def _checkpoint(self) -> None:
        """On the checkpoint thread."""
        try:
            if self._checkpoint_conn is None:
                self._checkpoint_conn = self._connect(5000, False)
            db = self._checkpoint_conn
            _, wal_frames, _ = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            self._checkpoints += 1
            if self._checkpoints % _RESTART_EVERY == 0 or wal_frames >= _RESTART_FRAMES:
                db.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        except sqlite3.Error:
            pass  # the next one catches up
        finally:
            self._checkpointing = False

    async def open(self) -> None:
        await self._run(self._db)
        self.rollups.start()

    def open_sync(self) -> None:
        self._db()

    async def close(self) -> None:
        await self.rollups.stop()
        if self._loop_conn is not None:
            self._loop_conn.close()
            self._loop_conn = None

        def _close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        def _close_checkpoints() -> None:
            if self._checkpoint_conn is not None:
                self._checkpoint_conn.close()
                self._checkpoint_conn = None

        await self._run(_close)
        self._executor.shutdown(wait=False)
        if not self._memory:
            await asyncio.get_running_loop().run_in_executor(self._checkpointer, _close_checkpoints)
        self._checkpointer.shutdown(wait=False)

    async def ping(self) -> bool:
        def _ping() -> bool:
            self._db().execute("SELECT 1").fetchone()
            return True

        try:
            return bool(await self._run(_ping))
        except sqlite3.Error:
            return False

    # --- keys (store/sqlite/keys.py) ---------------------------------------------------------------
    def create_key_sync(self, key: ApiKey) -> None:
        immediate(self._db(), lambda db: sqlite_keys.create(db, key))

    async def create_key(self, key: ApiKey) -> None:
        await self._run(self.create_key_sync, key)

    async def find_key_by_hash(self, secret_hash: str) -> ApiKey | None:
        result: ApiKey | None = await self._read(lambda db: sqlite_keys.find_by_hash(db, secret_hash))
        return result

    async def get_key(self, key_id: str) -> ApiKey | None:
        result: ApiKey | None = await self._read(lambda db: sqlite_keys.get(db, key_id))
        return result

    def list_keys_sync(self) -> list[ApiKey]:
        return sqlite_keys.list_all(self._db())

    async def list_keys(self) -> list[ApiKey]:
        result: list[ApiKey] = await self._run(self.list_keys_sync)
        return result

    async def save_key(self, key: ApiKey) -> bool:
        return await self._write(lambda db: sqlite_keys.save(db, key))

    async def top_up(self, key_id: str, amount: float) -> ApiKey | None:
        return await self._write(lambda db: sqlite_keys.top_up(db, key_id, amount))

    async def admit(self, ask: Ask, now: float) -> Decision:
        return await self._write(lambda db: sqlite_keys.admit(db, ask, now))

    async def settle(self, key_id: str, generation_id: str, cost: float, tokens: int, period_floor: float) -> None:
        await self._write(lambda db: sqlite_keys.settle(db, key_id, generation_id, cost, tokens, period_floor))

    async def usage(self, start: float, end: float, group_by: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._run(lambda: sqlite_keys.usage(self._db(), start, end, group_by))
        return result

    def revoke_key_sync(self, key_id_or_name: str) -> bool:
        cur = self._db().execute(
            "UPDATE api_keys SET revoked = 1 WHERE (id = ? OR name = ?) AND revoked = 0",
            (key_id_or_name, key_id_or_name),
        )
        return cur.rowcount > 0

    async def revoke_key(self, key_id_or_name: str) -> bool:
        return bool(await self._run(self.revoke_key_sync, key_id_or_name))

    def count_keys_sync(self) -> int:
        row = self._db().execute("SELECT COUNT(*) FROM api_keys WHERE revoked = 0").fetchone()
        return int(row[0])

    async def count_keys(self) -> int:
        return int(await self._run(self.count_keys_sync))

    # --- generations ------------------------------------------------------------------------------
    async def create_generation(self, record: GenerationRecord) -> None:
        params = record_params(record)

        def _insert(db: sqlite3.Connection) -> None:
            db.execute(_INSERT_GENERATION, params)

        await self._write(_insert)

    async def update_generation(self, record: GenerationRecord, log: list[LogRun] | None = None) -> bool:
        params = final_params(record)
        runs = [run for run in log or () if run.items]
        ended = record.status != "in_progress"

        def _update(db: sqlite3.Connection, rows: list[LogRow]) -> tuple[int, bool]:
            """The outcome, with the log's rows (in the caller's transaction): the bytes stored, and
            whether the record was still running to take it."""
            if rows:
                db.executemany(_INSERT_LOG_BATCH, rows)
            applied = db.execute(_UPDATE_GENERATION, params).rowcount > 0
            if applied and ended:  # the console's rollups, summed and written apart (store/rollup_writer.py)
                self.rollups.add(record)
            return _stored_bytes(rows), applied

        if self._memory:
            rows = await _deflated_log_rows(record.id, runs)
            return (await self._write(lambda db: _update(db, rows)))[1]
        if sum(len(item) for run in runs for item in run.items) > _IN_PLACE_LOG_BYTES:
            # a long answer's log: packed, deflated and written on the store thread
            outcome: list[bool] = []

            def _on_thread() -> int:
                stored, applied = immediate(self._db(), lambda db: _update(db, _log_rows(record.id, runs, True)))
                outcome.append(applied)
                return stored

            await self._write_log(_on_thread)
            return outcome[0]
        stored, applied = await self._write(lambda db: _update(db, _log_rows(record.id, runs, False)))
        self._written(stored // _PAGE_BYTES)
        return applied

    async def get_generation(self, generation_id: str) -> GenerationRecord | None:
        result: GenerationRecord | None = await self._read(lambda db: _get_record(db, generation_id))
        return result

    async def recent_generations(self, limit: int, key_id: str | None = None) -> list[GenerationRecord]:
        sql = recent_sql("?", key_id is not None)
        params = (key_id, limit) if key_id is not None else (limit,)
        rows = await self._read(lambda db: db.execute(sql, params).fetchall())
        return [record_from_row(r) for r in rows]

    # --- leases (docs/api-operations.md §10: `sqlite/leases.py`) ----------------------------------------------------
    async def renew_lease(self, owner: str, ttl_s: float) -> bool:
        held = await self._run(
            lambda: immediate(self._db(), lambda db: leases.renew(db, owner, ttl_s, self._lease_first))
        )
        return bool(held)

    async def release_lease(self, owner: str) -> None:
        await self._run(lambda: immediate(self._db(), lambda db: leases.release(db, owner)))

    async def sweep_leases(self, *, orphans: bool = False) -> int:
        return int(await self._run(lambda: immediate(self._db(), lambda db: leases.sweep(db, orphans))))

    # --- idempotency and logs ---------------------------------------------------------------------
    async def begin_generation(self, record: GenerationRecord) -> BeginResult:
        params = record_params(record)

        def _begin(db: sqlite3.Connection) -> BeginResult:
            if record.idempotency_key is None:  # nothing to check
                db.execute(_INSERT_GENERATION, params)
                return BeginResult("created", record)
            return _check_and_insert(db)

        def _check_and_insert(db: sqlite3.Connection) -> BeginResult:
            row = db.execute(
                "SELECT generation_id, request_hash FROM idempotency WHERE key_id = ? AND idem_key = ?",
                (record.key_id, record.idempotency_key),
            ).fetchone()
            if row is not None:
                existing = _get_record(db, row[0])
                if existing is not None:
                    if row[1] != record.request_hash:
                        return BeginResult("mismatch", existing)
                    if existing.status in ("in_progress", "completed"):
                        return BeginResult(existing.status, existing)
            db.execute(
                "INSERT OR REPLACE INTO idempotency (key_id, idem_key, generation_id, request_hash, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (record.key_id, record.idempotency_key, record.id, record.request_hash, record.created_at),
            )
            db.execute(_INSERT_GENERATION, params)
            return BeginResult("created", record)

        result: BeginResult = await self._write(_begin)
        return result

    async def find_idempotent(self, key_id: str, idempotency_key: str) -> GenerationRecord | None:
        def _find(db: sqlite3.Connection) -> GenerationRecord | None:
            row = db.execute(
                "SELECT generation_id FROM idempotency WHERE key_id = ? AND idem_key = ?", (key_id, idempotency_key)
            ).fetchone()
            return _get_record(db, row[0]) if row else None

        result: GenerationRecord | None = await self._read(_find)
        return result

    async def append_log(self, generation_id: str, runs: list[LogRun]) -> None:
        runs = [run for run in runs if run.items]
        if not runs:
            return

        if self._memory:
            rows = await _deflated_log_rows(generation_id, runs)
            self._db().executemany(_INSERT_LOG_BATCH, rows)
            return

        def _append() -> int:
            rows = _log_rows(generation_id, runs, True)  # on the store thread
            self._db().executemany(_INSERT_LOG_BATCH, rows)
            return _stored_bytes(rows)

        await self._write_log(_append)

    def follow(self, generation_id: str) -> contextlib.AbstractAsyncContextManager[LogTail]:
        return polling_follow(generation_id)  # no push between processes: a follower polls

    async def read_log(self, generation_id: str, kind: str, after_seq: int = -1) -> list[tuple[int, bytes]]:
        def _read() -> list[tuple[int, bytes]]:
            rows = (
                self._db()
                .execute(
                    "SELECT data FROM generation_log_batches WHERE generation_id = ? AND kind = ? AND last_seq > ?"
                    " ORDER BY first_seq",
                    (generation_id, kind, after_seq),
                )
                .fetchall()
            )
            return [(seq, data) for row in rows for seq, data in logpack.unpack(bytes(row[0])) if seq > after_seq]

        result: list[tuple[int, bytes]] = await self._run(_read)
        return result

    def route_health(self) -> SharedRouteHealth | None:
        # in-process: one host's instances on a file; a breaker is a per-request decision and a read of
        # the file in every request's routing would cost more than a few failures more per instance
        return None

    async def prune(self, older_than: float) -> int:
        def _prune(db: sqlite3.Connection) -> int:
            cur = db.execute("DELETE FROM idempotency WHERE created_at < ?", (older_than,))
            # from the logs (only keyed generations keep any, and only for the retention period) to their
            # records by primary key: no index on `created_at` for the records to keep up on every insert
            db.execute(
                "DELETE FROM generation_log_batches WHERE generation_id IN"
                " (SELECT g.id FROM generations g"
                " WHERE g.id IN (SELECT DISTINCT generation_id FROM generation_log_batches)"
                " AND g.created_at < ? AND g.status != 'in_progress')",
                (older_than,),
            )
            return cur.rowcount

        return int(await self._run(lambda: immediate(self._db(), _prune)))
