"""SQLite checkpoints run on a connection and thread of their own: a checkpoint (its copy and its two
fsyncs, milliseconds to hundreds of them on a VM's disk) never holds a log write or a generation's
final write up, and log writes alone still get the WAL checkpointed and restarted."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time
from pathlib import Path

from tidegate.records import LOG_FRAME, GenerationRecord, LogRun
from tidegate.store.sqlite import SQLiteStore

BLOCK = [os.urandom(1024) for _ in range(64)]  # one flush of a fast stream: 64 KiB that does not deflate


def _record(gid: str) -> GenerationRecord:
    return GenerationRecord(
        id=gid, key_id="k1", model="m", door="chat", created_at=time.time(), idempotency_key=gid, request_hash="h"
    )


async def test_a_slow_checkpoint_holds_no_log_write_up(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 't.db'}")
    await store.open()
    record = _record("g")
    await store.begin_generation(record)
    held = threading.Event()
    # the checkpoint thread is busy (a checkpoint waiting on its fsync) for as long as the test says
    busy = asyncio.get_running_loop().run_in_executor(store._checkpointer, held.wait, 20)
    try:
        started = time.monotonic()
        for i in range(100):  # 6.4 MB: several checkpoints are due meanwhile
            await asyncio.wait_for(store.append_log("g", [LogRun(LOG_FRAME, i * 64, BLOCK)]), 5)
        done = dataclasses.replace(record, status="completed", output_text="x")
        await asyncio.wait_for(store.update_generation(done, [LogRun(LOG_FRAME, 6400, BLOCK * 2)]), 5)
        assert time.monotonic() - started < 10
        assert not busy.done()
        assert len(await store.read_log("g", LOG_FRAME)) == 6528
        assert await store.get_generation("g") == done
    finally:
        held.set()
        await busy
    await store.close()


async def test_log_writes_alone_get_the_wal_checkpointed_and_restarted(tmp_path: Path) -> None:
    """Only the store thread writes here (a few streams' logs, no new requests): the checkpoints its
    writes start copy the WAL into the database, and every tenth restarts it, so the WAL stays near
    ten checkpoints' worth (~40 MB) however much is written."""
    path = tmp_path / "t.db"
    wal = Path(str(path) + "-wal")
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    await store.begin_generation(_record("g"))
    largest = 0
    for i in range(1600):  # 100 MB of log
        await store.append_log("g", [LogRun(LOG_FRAME, i * 64, BLOCK)])
        if i % 8 == 7:
            await asyncio.sleep(0.002)  # the checkpoint thread gets its turns
            largest = max(largest, wal.stat().st_size)  # noqa: ASYNC240
    assert largest < 60 * 1024 * 1024, largest  # ~100 MB if nothing restarted it
    assert Path(path).stat().st_size > 50 * 1024 * 1024  # noqa: ASYNC240  (copied into the database)
    assert await store.read_log("g", LOG_FRAME, 1600 * 64 - 2) == [(1600 * 64 - 1, BLOCK[-1])]
    await store.close()
