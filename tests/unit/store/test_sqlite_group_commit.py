"""The SQLite file store commits the writes the event loop asks for in one loop iteration together
(`tidegate.store.group_commit`): one WAL commit for a wave of requests, each write still committed
before its call returns, a failing write failing alone, and a generation's writes kept in order when
the database is locked."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from tests.support.loop import Turns
from tests.unit.store.test_sqlite_inline import _record
from tidegate.store.group_commit import LONE_COMMITS
from tidegate.store.sqlite import SQLiteStore

_WAL_FRAME_BYTES = 24 + 4096
_WAL_HEADER_BYTES = 32


def _wal_frames(path: Path) -> int:
    wal = Path(str(path) + "-wal")
    return (wal.stat().st_size - _WAL_HEADER_BYTES) // _WAL_FRAME_BYTES if wal.exists() else 0


def _status(path: Path, generation_id: str) -> str | None:
    """The record's status as another connection (another process) sees it: what was committed."""
    other = sqlite3.connect(path)
    try:
        row = other.execute("SELECT status FROM generations WHERE id = ?", (generation_id,)).fetchone()
        return str(row[0]) if row else None
    finally:
        other.close()


async def _store_with(path: Path, first_id: str) -> SQLiteStore:
    """A file store, open, with one record written (the loop's connection exists)."""
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    await store.begin_generation(_record(first_id))
    return store


def _lock(path: Path) -> sqlite3.Connection:
    """Another writer (another process) holding the database's write lock until it commits."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_the_writes_of_one_loop_iteration_share_one_commit(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = await _store_with(path, "first")
    before = _wal_frames(path)
    results = await asyncio.gather(*(store.begin_generation(_record(f"g{i}", idem=f"i{i}")) for i in range(64)))
    frames = _wal_frames(path) - before
    assert [r.outcome for r in results] == ["created"] * 64
    # a commit writes at least one frame (five for a keyed begin): one each would be 64 or more
    assert frames < 32, frames
    assert all(_status(path, f"g{i}") == "in_progress" for i in range(64))  # committed when they returned
    await store.close()


async def test_a_failing_write_fails_alone(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = await _store_with(path, "taken")
    results = await asyncio.gather(
        store.begin_generation(_record("a", idem="a")),
        store.begin_generation(_record("taken")),  # the same id again: the insert fails
        store.begin_generation(_record("b")),
        return_exceptions=True,
    )
    assert isinstance(results[1], sqlite3.IntegrityError)
    assert [_status(path, gid) for gid in ("a", "b")] == ["in_progress", "in_progress"]
    assert await store.find_idempotent("k1", "a") is not None
    await store.close()


async def test_while_a_batch_waits_on_the_store_thread_the_next_ones_go_after_it(tmp_path: Path) -> None:
    """A generation's outcome asked for while its begin still waits for the lock (on the store
    thread) lands after it, even when the lock is free again by then: run in place first, the
    outcome's UPDATE would find no record and the generation would stay in_progress."""
    path = tmp_path / "t.db"
    store = await _store_with(path, "warm")
    other = _lock(path)
    thread_free = threading.Event()
    blocker = asyncio.get_running_loop().run_in_executor(store._executor, thread_free.wait, 10)
    begin = asyncio.ensure_future(store.begin_generation(_record("g")))
    await asyncio.sleep(0.05)  # the begin found the lock taken: queued on the (busy) store thread
    other.execute("COMMIT")  # the lock is free: a write in place would now succeed
    done = _record("g")
    done.status = "completed"
    outcome = asyncio.ensure_future(store.update_generation(done))
    await asyncio.sleep(0.05)
    assert not outcome.done()  # it waits behind the begin
    thread_free.set()
    await blocker
    await asyncio.wait_for(asyncio.gather(begin, outcome), 5)
    assert _status(path, "g") == "completed"
    other.close()
    await store.close()


async def test_a_cancelled_caller_hears_of_it_once_its_write_is_committed(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = await _store_with(path, "warm")
    other = _lock(path)

    def release() -> None:
        time.sleep(0.3)
        other.execute("COMMIT")

    threading.Thread(target=release).start()
    begin = asyncio.ensure_future(store.begin_generation(_record("g")))
    await asyncio.sleep(0.05)  # waiting for the lock on the store thread
    begin.cancel()
    with pytest.raises(asyncio.CancelledError):
        await begin
    assert _status(path, "g") == "in_progress"  # committed before the caller heard of its cancellation
    other.close()
    await store.close()


async def _lone_writes(store: SQLiteStore, prefix: str) -> None:
    """`LONE_COMMITS` writes one after another, a turn apart: commits of one write each, as one
    stream's are (its record, then its outcome, then the next stream's record)."""
    for i in range(LONE_COMMITS):
        await store.begin_generation(_record(f"{prefix}{i}"))
        await asyncio.sleep(0)


async def test_after_lone_commits_a_write_commits_in_its_callers_step(tmp_path: Path) -> None:
    """One stream's durable record costs it no turn of the loop (time to first token at one stream)
    once the commits before it each carried one write; a wave of writes in one turn still shares a
    commit, and turns batching back on."""
    path = tmp_path / "t.db"
    store = await _store_with(path, "first")
    await _lone_writes(store, "lone")
    turns = Turns()
    await store.begin_generation(_record("at-once"))
    at_once_turns = turns.count
    turns.stop()
    assert at_once_turns == 0, at_once_turns
    assert _status(path, "at-once") == "in_progress"  # committed before it returned
    before = _wal_frames(path)
    wave = await asyncio.gather(*(store.begin_generation(_record(f"w{i}", idem=f"w{i}")) for i in range(16)))
    assert [r.outcome for r in wave] == ["created"] * 16
    assert _wal_frames(path) - before < 16  # the first alone at most, the rest together
    turns = Turns()
    await store.begin_generation(_record("after-the-wave"))  # the last commit carried several
    batched_turns = turns.count
    turns.stop()
    assert batched_turns >= 1, batched_turns
    await store.close()


async def test_a_write_committed_at_once_that_fails_fails_alone(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = await _store_with(path, "taken")
    await _lone_writes(store, "lone")
    with pytest.raises(sqlite3.IntegrityError):
        await store.begin_generation(_record("taken"))  # at once, and the id is taken
    await store.begin_generation(_record("next"))
    assert _status(path, "next") == "in_progress"
    await store.close()


async def test_a_write_committed_at_once_that_finds_the_database_locked_goes_to_the_store_thread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    store = await _store_with(path, "first")
    await _lone_writes(store, "lone")
    other = _lock(path)
    writing = asyncio.ensure_future(store.begin_generation(_record("waits")))
    await asyncio.sleep(0.2)
    assert not writing.done() and _status(path, "waits") is None  # waiting for the lock, off the loop
    other.execute("COMMIT")
    other.close()
    assert (await asyncio.wait_for(writing, 10)).outcome == "created"
    assert _status(path, "waits") == "in_progress"
    await store.close()
