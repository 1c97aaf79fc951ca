"""Crash recovery on SQLite without an index on status: what each request writes, and databases
made by earlier versions (which had the index, no `instance_starts` and no leases)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import sqlite3
import time
from pathlib import Path

import tidegate.store
from tidegate.ids import new_ulid
from tidegate.records import GenerationRecord
from tidegate.store.sqlite import SQLiteStore

WAL_HEADER = 32
WAL_FRAME_HEADER = 24


def _record(owner: str = "me:1") -> GenerationRecord:
    return GenerationRecord(id=new_ulid(), key_id="k1", model="m", door="chat", created_at=time.time(), owner=owner)


def _indexes(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'generations'")
        return {row[0] for row in rows}


async def test_a_request_writes_at_most_six_and_a_half_wal_frames(tmp_path: Path) -> None:
    """The record before the upstream call and its final state: the table's page and the id's index,
    then the table's page again (an index on status added two more, one on `created_at` one: 4.19); the
    console's keyset indexes (created_at, key_id and model, each with id: docs/console-api.md) take it
    from 3.5 to 6.2, the price of every log page answering in milliseconds at 1,000,000 records. The
    console's rollups are not written in the record's transaction (store/sqlite/console.py): there
    they added one more page a request (7.2)."""
    path = tmp_path / "t.db"
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    try:
        first = _record()
        await store.begin_generation(first)
        await store.update_generation(dataclasses.replace(first, status="completed"))
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
            page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
        pairs = 90  # fewer loop commits than a checkpoint waits for: the WAL only grows
        for _ in range(pairs):
            rec = _record()
            await store.begin_generation(rec)
            await store.update_generation(
                dataclasses.replace(rec, status="completed", finish_reason="stop", output_text="hello " * 30)
            )
        frames = ((path.parent / "t.db-wal").stat().st_size - WAL_HEADER) / (page_size + WAL_FRAME_HEADER)
        assert frames / pairs <= 6.5, f"{frames / pairs:.2f} WAL frames per request"
    finally:
        await store.close()


def _tables_of_migrations_since_0009() -> list[str]:
    folder = Path(tidegate.store.__file__).parent / "migrations" / "sqlite"
    text = "".join(f.read_text() for f in sorted(folder.glob("*.sql")) if f.name >= "0009")
    return re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", text)


async def test_a_database_from_before_loses_its_dropped_indexes_and_its_running_records_are_found(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    running = [_record(), _record()]
    done = _record()
    for rec in (*running, done, _record("them:2")):
        await store.begin_generation(rec)
    await store.update_generation(dataclasses.replace(done, status="completed"))
    await store.close()
    fresh = tmp_path / "fresh.db"  # the indexes a database made by this version has
    fresh_store = SQLiteStore(f"sqlite:///{fresh}")
    await fresh_store.open()
    await fresh_store.close()
    with sqlite3.connect(path) as db:  # what an earlier version left on disk
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL").fetchall():
            db.execute(f"DROP INDEX {name}")  # an earlier version had none of today's indexes
        for table in _tables_of_migrations_since_0009():  # nor their tables or columns
            db.execute(f"DROP TABLE IF EXISTS {table}")
        for column in ("agent_session", "hints", "dropped"):  # 0010_agent_sessions, 0016_dropped_tools
            db.execute(f"ALTER TABLE generations DROP COLUMN {column}")
        db.execute("CREATE INDEX generations_status ON generations(status)")
        db.execute("CREATE INDEX generations_created ON generations(created_at)")
        db.execute("DROP TABLE instance_starts")
        db.execute("DROP TABLE leases")
        db.execute("ALTER TABLE generations DROP COLUMN route_reason")  # 0005_routing came after them
        db.execute("ALTER TABLE generations DROP COLUMN mcp_calls")  # and 0007_mcp_calls
        for column in ("reasoning_text", "pace"):  # and 0008_reasoning_pace
            db.execute(f"ALTER TABLE generations DROP COLUMN {column}")
        db.execute("DROP TABLE reservations")  # and 0006_keys
        for column in ("settings", "period_start", "rpm_tat", "tpm_tat"):
            db.execute(f"ALTER TABLE api_keys DROP COLUMN {column}")
        for table in ("_yoyo_migration", "_yoyo_log", "_yoyo_version", "yoyo_lock"):  # no migrations then
            db.execute(f"DROP TABLE {table}")

    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    try:
        assert _indexes(path) == _indexes(fresh)  # the dropped ones gone, today's made
        # records of versions before leases: no owner holds one, a starting gateway's sweep finds them
        assert await store.sweep_leases(orphans=True) == 3
        for rec in running:
            got = await store.get_generation(rec.id)
            assert got is not None and got.status == "interrupted"
        got = await store.get_generation(done.id)
        assert got is not None and got.status == "completed"
        assert await store.renew_lease("me:2", 0.2) is False
        later = _record("me:2")  # this start's own record, left running by the next crash
        await store.begin_generation(later)
        assert await store.sweep_leases(orphans=True) == 0  # its owner's lease holds; nothing left below the bound
        await asyncio.sleep(0.35)
        assert await store.sweep_leases() == 1
        got = await store.get_generation(later.id)
        assert got is not None and got.status == "interrupted"
    finally:
        await store.close()
