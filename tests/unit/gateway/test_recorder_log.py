"""The recorder's log runs: frames numbered as written, a failed write kept for the next one, in order;
a run of deltas logged as one event.

On a real SQLite file whose log table is dropped under the store (a write that fails in the database,
not in a test double) and created again by a second store opened on the same file.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidegate.events import Finished, ReasoningDelta, Started, TextDelta, ToolCallDelta
from tidegate.gateway.eventlog import decode_event
from tidegate.gateway.recorder import Recorder
from tidegate.gateway.usage import tokenizer_ready
from tidegate.records import LOG_EVENT, LOG_FRAME, GenerationRecord
from tidegate.store.sqlite import SQLiteStore

MIGRATIONS = Path(__file__).resolve().parents[3] / "src" / "tidegate" / "store" / "migrations" / "sqlite"

FRAMES = [b'id: %d\ndata: {"n":%d}\n\n' % (i, i) for i in range(5)]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    await tokenizer_ready()
    store = SQLiteStore(f"sqlite:///{tmp_path / 't.db'}")
    await store.open()
    yield store
    await store.close()


async def _recorder(store: SQLiteStore, gid: str) -> Recorder:
    record = GenerationRecord(
        id=gid, key_id="k", model="m", door="chat", created_at=time.time(), idempotency_key="idem", request_hash="h"
    )
    await store.begin_generation(record)
    return Recorder(store=store, record=record, messages=[], pricing=None)


def _drop_log_table(store: SQLiteStore) -> None:
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("DROP TABLE generation_log_batches")
    other.close()


async def _create_log_table(store: SQLiteStore) -> None:
    """The first migration again (its statements are IF NOT EXISTS), from another connection."""
    other = sqlite3.connect(store.path, isolation_level=None)
    other.executescript((MIGRATIONS / "0001_initial.sql").read_text())
    other.close()


async def test_a_failed_flush_is_written_by_the_next_write_ahead_of_what_came_after(store: SQLiteStore) -> None:
    recorder = await _recorder(store, "g-log")
    recorder.log_frames(FRAMES[0] + FRAMES[1])  # two frames in one write: split
    recorder.log_frames(FRAMES[2])  # one frame: kept as it is
    recorder.observe(TextDelta("a"))
    recorder.observe(TextDelta("b"))
    assert recorder.frames == FRAMES[:3]

    _drop_log_table(store)
    with pytest.raises(sqlite3.OperationalError):
        await recorder.flush()
    assert recorder.has_pending
    await _create_log_table(store)
    recorder.log_frames(FRAMES[3] + FRAMES[4])
    recorder.observe(TextDelta("c"))
    recorder.observe(Finished("stop"))
    await recorder.flush()
    assert not recorder.has_pending
    await recorder.finish("completed")

    assert await store.read_log("g-log", LOG_FRAME) == list(enumerate(FRAMES))
    events = [(seq, decode_event(data)) for seq, data in await store.read_log("g-log", LOG_EVENT)]
    # "a" and "b" were one run when the failed flush took them; "c" came after
    assert events == [(0, TextDelta("ab")), (1, TextDelta("c")), (2, Finished("stop"))]
    assert await store.read_log("g-log", LOG_FRAME, 2) == [(3, FRAMES[3]), (4, FRAMES[4])]
    done = await store.get_generation("g-log")
    assert done is not None and done.status == "completed" and done.output_text == "abc"


async def test_a_failed_final_write_keeps_the_log_for_a_retry(store: SQLiteStore) -> None:
    recorder = await _recorder(store, "g-final")
    recorder.log_frames(FRAMES[0])
    recorder.observe(TextDelta("a"))
    await recorder.flush()
    recorder.log_frames(FRAMES[1])
    recorder.observe(TextDelta("b"))

    _drop_log_table(store)
    with pytest.raises(sqlite3.OperationalError):
        await recorder.finish("completed")
    await _create_log_table(store)
    await recorder.finish("completed")
    # the table was dropped with the first flush's rows in it: what is left is the part after them
    assert await store.read_log("g-final", LOG_FRAME) == [(1, FRAMES[1])]
    assert [seq for seq, _ in await store.read_log("g-final", LOG_EVENT)] == [1]


async def test_the_event_log_keeps_a_run_of_deltas_as_one_event(store: SQLiteStore) -> None:
    """Text deltas in a row, and readable reasoning deltas of one block and kind, are logged as one
    event; a signature, encrypted reasoning, tool-call fragments and every other event stay as they
    came, and a flush ends the run it finds."""
    recorder = await _recorder(store, "g-runs")
    observed = [
        Started("p", "served"),
        TextDelta("Hel"),
        TextDelta("lo"),
        ReasoningDelta("th"),
        ReasoningDelta("ink"),
        ReasoningDelta("", signature="sig=="),
        ReasoningDelta("so", "summary"),
        ReasoningDelta("on", "summary"),
        ReasoningDelta("next", index=1),
        ReasoningDelta("", "encrypted", None, "opaque"),
        ToolCallDelta(0, '{"q":', "call_1", "lookup"),
        ToolCallDelta(0, "1}"),
        TextDelta(" wor"),
    ]
    for event in observed:
        recorder.observe(event)
    await recorder.flush()
    recorder.observe(TextDelta("ld"))
    recorder.observe(Finished("stop"))
    await recorder.finish("completed")

    events = [decode_event(data) for _, data in await store.read_log("g-runs", LOG_EVENT)]
    assert events == [
        Started("p", "served"),
        TextDelta("Hello"),
        ReasoningDelta("think"),
        ReasoningDelta("", signature="sig=="),
        ReasoningDelta("soon", "summary"),
        ReasoningDelta("next", index=1),
        ReasoningDelta("", "encrypted", None, "opaque"),
        ToolCallDelta(0, '{"q":', "call_1", "lookup"),
        ToolCallDelta(0, "1}"),
        TextDelta(" wor"),  # the flush ended this run
        TextDelta("ld"),
        Finished("stop"),
    ]
    done = await store.get_generation("g-runs")
    assert done is not None and done.output_text == "Hello world"


async def test_frames_leave_memory_once_stored_and_a_failed_flush_keeps_them(store: SQLiteStore) -> None:
    """A keyed stream keeps in memory only the frames the store does not hold yet (what a live follower
    cannot read back); their ids keep counting from the first frame."""
    recorder = await _recorder(store, "g-window")
    recorder.log_frames(FRAMES[0] + FRAMES[1])
    await recorder.flush()
    assert (recorder.frames, recorder.frames_base, recorder.frames_logged) == ([], 2, 2)

    recorder.log_frame(FRAMES[2])
    _drop_log_table(store)
    with pytest.raises(sqlite3.OperationalError):
        await recorder.flush()
    assert (recorder.frames, recorder.frames_base) == ([FRAMES[2]], 2)  # not stored: still here
    await _create_log_table(store)
    recorder.log_frame(FRAMES[3])
    await recorder.flush()
    assert (recorder.frames, recorder.frames_base, recorder.frames_logged) == ([], 4, 4)

    recorder.log_frame(FRAMES[4])
    assert recorder.frames == [FRAMES[4]]
    await recorder.finish("completed")
    # the dropped table took frames 0-1 with it; the rest is stored under the ids it was sent with
    assert await store.read_log("g-window", LOG_FRAME) == [(2, FRAMES[2]), (3, FRAMES[3]), (4, FRAMES[4])]
