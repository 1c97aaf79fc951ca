"""The shared flusher writes every running generation's logs within 250 ms, on a real SQLite store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tidegate.events import TextDelta
from tidegate.gateway.flusher import LogFlusher
from tidegate.gateway.recorder import Recorder
from tidegate.store.base import LOG_EVENT, LOG_FRAME, GenerationRecord
from tidegate.store.sqlite import SQLiteStore


async def test_one_task_flushes_many_recorders(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 't.db'}")
    await store.open()
    flusher = LogFlusher(interval_s=0.05)
    recorders = []
    for i in range(20):
        record = GenerationRecord(
            id=f"g{i}", key_id="k", model="m", door="chat", created_at=time.time(), idempotency_key=f"idem-{i}"
        )
        await store.create_generation(record)
        rec = Recorder(store=store, record=record, messages=[], pricing=None)
        rec.start_flushing(flusher)
        recorders.append(rec)
    for i, rec in enumerate(recorders):
        rec.log_frames(b"id: 0\ndata: a\n\nid: 1\ndata: b\n\n")
        rec.observe(TextDelta(f"t{i}"))
    await asyncio.sleep(0.25)
    for i in range(20):
        frames = await store.read_log(f"g{i}", LOG_FRAME)
        assert [seq for seq, _ in frames] == [0, 1]
        assert frames[1][1] == b"id: 1\ndata: b\n\n"
        assert len(await store.read_log(f"g{i}", LOG_EVENT)) == 1
    assert flusher._task is not None and not flusher._task.done()
    # finishing a generation flushes what is left and leaves the shared loop
    recorders[0].log_frames(b"id: 2\ndata: c\n\n")
    await recorders[0].finish("completed")
    assert [s for s, _ in await store.read_log("g0", LOG_FRAME)] == [0, 1, 2]
    assert "g0" not in flusher._members
    await flusher.aclose()
    await store.close()


async def test_generation_without_idempotency_key_writes_no_logs(tmp_path: Path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 't.db'}")
    await store.open()
    flusher = LogFlusher(interval_s=0.05)
    record = GenerationRecord(id="plain", key_id="k", model="m", door="chat", created_at=time.time())
    await store.create_generation(record)
    rec = Recorder(store=store, record=record, messages=[], pricing=None)
    rec.start_flushing(flusher)
    rec.log_frames(b"id: 0\ndata: a\n\n")
    rec.observe(TextDelta("hello"))
    await rec.finish("completed")
    assert await store.read_log("plain", LOG_FRAME) == []
    assert await store.read_log("plain", LOG_EVENT) == []
    stored = await store.get_generation("plain")
    assert stored is not None and stored.output_text == "hello" and stored.status == "completed"
    await flusher.aclose()
    await store.close()
