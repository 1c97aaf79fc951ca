"""The SQLite store runs its per-request statements on the event loop's own connection, and moves
them to the store thread when another writer holds the database (another worker process, a log
flush): the loop never waits for a lock, and nothing is lost."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

from tidegate.records import LOG_FRAME, LOG_JSON, GenerationRecord, LogRun
from tidegate.store.sqlite import SQLiteStore


def _record(gid: str, idem: str | None = None) -> GenerationRecord:
    return GenerationRecord(
        id=gid, key_id="k1", model="m", door="chat", created_at=time.time(), idempotency_key=idem, request_hash="h"
    )


async def test_a_locked_database_moves_the_write_to_the_store_thread(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    await store.begin_generation(_record("g0"))  # the loop's connection exists

    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
    released = threading.Event()

    def release() -> None:
        time.sleep(0.3)
        other.execute("COMMIT")
        released.set()

    threading.Thread(target=release).start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not released.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    tick_task = asyncio.ensure_future(ticker())
    started = time.monotonic()
    plain, keyed = await asyncio.gather(
        store.begin_generation(_record("g1")), store.begin_generation(_record("g2", "i"))
    )
    waited = time.monotonic() - started
    await tick_task
    assert plain.outcome == "created" and keyed.outcome == "created"
    assert waited >= 0.25  # they waited for the lock (on the store thread) ...
    assert ticks >= 10  # ... while the event loop kept running
    done = _record("g1")
    done.status = "completed"
    await store.update_generation(done)
    got = await store.get_generation("g1")
    assert got is not None and got.status == "completed"
    assert await store.find_idempotent("k1", "i") is not None
    other.close()
    await store.close()


async def test_the_store_thread_checkpoints_what_the_loop_connection_writes(tmp_path: Path) -> None:
    """The loop's connection has auto-checkpoints off; the store thread checkpoints every few hundred
    loop commits and restarts the WAL every ten checkpoints, so the WAL is reused instead of growing
    with every request (passive checkpoints racing the loop's writes alone never let it restart)."""
    path = tmp_path / "t.db"
    wal = Path(str(path) + "-wal")
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()

    async def steady(prefix: str, n: int) -> None:  # ten requests a millisecond, nobody waits for a checkpoint
        for i in range(n):
            await store.begin_generation(_record(f"{prefix}{i}"))
            if i % 10 == 9:
                await asyncio.sleep(0.001)

    await steady("a", 2200)  # one restart interval and a little
    size_2200 = wal.stat().st_size  # noqa: ASYNC240
    await steady("b", 4400)
    size_6600 = wal.stat().st_size  # noqa: ASYNC240
    assert size_6600 < 1.5 * size_2200, (size_2200, size_6600)  # 3x if the WAL never restarted
    assert (await store.get_generation("b4399")) is not None
    await store.close()


async def test_a_reader_on_an_old_snapshot_does_not_hold_the_loop_writes_up(tmp_path: Path) -> None:
    """A checkpoint that waits for readers (a RESTART) holds every writer off while it waits: a backup
    or a `sqlite3` shell reading the database would stall each request behind it. Nine checkpoints
    in ten are passive and copy what they can without waiting."""
    path = tmp_path / "t.db"
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    await store.begin_generation(_record("first"))
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    assert reader.execute("SELECT COUNT(*) FROM generations").fetchone() == (1,)  # holds its snapshot
    try:
        started = time.monotonic()
        for i in range(600):  # three checkpoints' worth of loop commits
            await store.begin_generation(_record(f"g{i}"))
            if i % 50 == 49:
                await asyncio.sleep(0.01)  # the store thread runs its checkpoint
        assert time.monotonic() - started < 2.0  # a RESTART would hold them for its 5 s busy timeout
    finally:
        reader.execute("COMMIT")
        reader.close()
    assert (await store.get_generation("g599")) is not None
    await store.close()


async def test_the_last_log_entries_go_with_the_outcome_in_place(tmp_path: Path) -> None:
    """A generation's last log entries (a non-stream answer, a stream's last 200 ms) are written with
    its outcome in one transaction on the loop's connection: no hop to the store thread, which may be
    busy. A long answer's log (over 64 KiB) is written on the store thread."""
    store = SQLiteStore(f"sqlite:///{tmp_path / 't.db'}")
    await store.open()
    for gid in ("small", "large"):
        await store.begin_generation(_record(gid, idem=gid))
    loop = asyncio.get_running_loop()
    busy = threading.Event()
    blocker = loop.run_in_executor(store._executor, busy.wait, 10)  # the store thread is taken
    small = _record("small", idem="small")
    small.status = "completed"
    await asyncio.wait_for(store.update_generation(small, [LogRun(LOG_JSON, 0, [b'{"answer": 1}'])]), 2)
    got = await store.get_generation("small")
    assert got is not None and got.status == "completed"

    large = _record("large", idem="large")
    large.status = "completed"
    writing = asyncio.ensure_future(store.update_generation(large, [LogRun(LOG_FRAME, 0, [b"x" * 1024] * 100)]))
    await asyncio.sleep(0.1)
    assert not writing.done()  # queued behind the busy store thread
    got = await store.get_generation("large")
    assert got is not None and got.status == "in_progress"  # nothing of it is visible yet
    busy.set()
    await blocker
    await asyncio.wait_for(writing, 5)
    got = await store.get_generation("large")
    assert got is not None and got.status == "completed"
    assert len(await store.read_log("large", "f")) == 100
    await store.close()
