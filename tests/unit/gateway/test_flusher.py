"""The shared flusher writes every running generation's logs within 250 ms, on a real SQLite store."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

from tidegate.events import ReasoningDelta, TextDelta
from tidegate.gateway.flusher import LogFlusher
from tidegate.gateway.recorder import PACE_SAMPLES, Recorder
from tidegate.records import LOG_EVENT, LOG_FRAME, GenerationRecord
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


async def test_the_rounds_sample_the_pace_the_record_keeps(tmp_path: Path) -> None:
    """Reasoning for ~0.2 s, a pause of ~0.4 s, then the answer for ~0.2 s: the stored pace starts at
    the first token with nothing, only grows, keeps a pause as its two ends, and ends with every
    character of both; the reasoning is stored apart from the answer."""
    store = SQLiteStore(f"sqlite:///{tmp_path / 't.db'}")
    await store.open()
    flusher = LogFlusher(interval_s=0.02)
    record = GenerationRecord(id="paced", key_id="k", model="m", door="chat", created_at=time.time())
    await store.create_generation(record)
    rec = Recorder(store=store, record=record, messages=[], pricing=None)
    rec.start_flushing(flusher)
    for i in range(10):
        rec.observe(ReasoningDelta(f"think{i} "))
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.4)
    for i in range(10):
        rec.observe(TextDelta(f"word{i} "))
        await asyncio.sleep(0.02)
    await rec.finish("completed")
    stored = await store.get_generation("paced")
    assert stored is not None and stored.pace is not None
    assert stored.reasoning_text == "".join(f"think{i} " for i in range(10))
    assert stored.output_text == "".join(f"word{i} " for i in range(10))
    pace = stored.pace
    assert pace[0] == [int(stored.ttft_ms or 0), 0, 0]
    assert pace[-1][1:] == [len(stored.output_text), len(stored.reasoning_text)]
    for before, after in itertools.pairwise(pace):
        assert after[0] >= before[0] and after[1] >= before[1] and after[2] >= before[2]
    # the pause: all reasoning, no answer, for ~0.4 s, kept as one flat stretch of two samples
    flat = [p for p in pace if p[1] == 0 and p[2] == len(stored.reasoning_text)]
    assert len(flat) == 2 and 300 <= flat[1][0] - flat[0][0] <= 700
    assert 6 <= len(pace) <= 40  # a sample per round, not per delta
    assert "paced" not in flusher._members
    await flusher.aclose()
    await store.close()


def test_a_long_streams_pace_stays_bounded() -> None:
    """An hour of rounds with text arriving at each: at most PACE_SAMPLES samples, first and last kept
    in order (the thinning drops every other one)."""
    record = GenerationRecord(id="long", key_id="k", model="m", door="chat", created_at=time.time())
    rec = Recorder(store=None, record=record, messages=[], pricing=None)  # type: ignore[arg-type]  # never stored here
    rec.observe(TextDelta("a"))
    start = rec.started_at
    for second in range(1, 3600 * 5):
        rec.observe(TextDelta("b"))
        rec.sample_pace(start + second / 5)
    pace = rec._pace_in_characters()
    assert len(pace) <= PACE_SAMPLES
    assert pace[0][1] == 0 and pace[-1][1:] == [3600 * 5, 0] and abs(pace[-1][0] - 3599_800) <= 1
    assert [p[0] for p in pace] == sorted(p[0] for p in pace)
