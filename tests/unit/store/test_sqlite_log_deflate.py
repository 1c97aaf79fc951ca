"""The SQLite store deflates the log blobs its store thread writes (a flush, a long answer's final
write): a log is mostly the same JSON envelope around a few bytes of text, and every page saved is a
page the WAL and the checkpoint do not write. Small final writes on the loop stay as they are. An
in-memory store, which keeps every log in the gateway's RAM, deflates every run of 8 KiB or more."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tidegate.records import LOG_EVENT, LOG_FRAME, GenerationRecord, LogRun
from tidegate.store.sqlite import SQLiteStore

FRAMES = [
    b'id: %d\ndata: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":" w%d"},"finish_reason":null}]}\n\n' % (i, i)
    for i in range(2000)
]


def _stored(path: Path) -> list[tuple[str, int, int, bytes]]:
    db = sqlite3.connect(path)
    rows = db.execute(
        "SELECT kind, first_seq, length(data), substr(data, 1, 1) FROM generation_log_batches ORDER BY kind, first_seq"
    ).fetchall()
    db.close()
    return [(kind, first, size, bytes(head)) for kind, first, size, head in rows]


Begun = tuple[SQLiteStore, GenerationRecord, Path]


@pytest.fixture
async def begun(tmp_path: Path) -> AsyncIterator[Begun]:
    """A file store with one running generation that keeps logs."""
    path = tmp_path / "t.db"
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    record = GenerationRecord(
        id="g", key_id="k", model="m", door="chat", created_at=time.time(), idempotency_key="i", request_hash="h"
    )
    await store.begin_generation(record)
    yield store, record, path
    await store.close()


async def test_store_thread_writes_are_deflated_and_read_back_whole(begun: Begun) -> None:
    store, record, path = begun
    await store.append_log("g", [LogRun(LOG_FRAME, 0, FRAMES[:1000]), LogRun(LOG_EVENT, 0, [b'{"t":"text"}'])])
    done = dataclasses.replace(record, status="completed")
    await store.update_generation(done, [LogRun(LOG_FRAME, 1000, FRAMES[1000:])])  # > 64 KiB: the store thread

    raw = sum(len(f) + 4 for f in FRAMES[:1000])
    stored = _stored(path)
    assert [(kind, first, head) for kind, first, _, head in stored] == [
        ("e", 0, b"\x02"),  # one small run: as it is
        ("f", 0, b"\x01"),
        ("f", 1000, b"\x01"),
    ]
    assert stored[1][2] < raw // 10
    assert await store.read_log("g", LOG_FRAME) == list(enumerate(FRAMES))
    assert await store.read_log("g", LOG_FRAME, 1500) == list(enumerate(FRAMES))[1501:]


async def test_a_small_final_write_on_the_loop_is_stored_as_it_is(begun: Begun) -> None:
    store, record, path = begun
    await store.update_generation(dataclasses.replace(record, status="completed"), [LogRun(LOG_FRAME, 0, FRAMES[:100])])
    assert [(kind, head) for kind, _, _, head in _stored(path)] == [("f", b"\x02")]
    assert await store.read_log("g", LOG_FRAME) == list(enumerate(FRAMES[:100]))


async def test_an_in_memory_store_deflates_every_run_of_8_kib_or_more() -> None:
    store = SQLiteStore("sqlite:///:memory:")
    await store.open()
    try:
        record = GenerationRecord(
            id="g", key_id="k", model="m", door="chat", created_at=time.time(), idempotency_key="i", request_hash="h"
        )
        await store.begin_generation(record)
        await store.append_log("g", [LogRun(LOG_FRAME, 0, FRAMES[:100])])  # ~17 KB: deflated on the loop
        await store.append_log("g", [LogRun(LOG_FRAME, 100, FRAMES[100:1000]), LogRun(LOG_EVENT, 0, [b"e0"])])
        done = dataclasses.replace(record, status="completed")
        await store.update_generation(done, [LogRun(LOG_FRAME, 1000, FRAMES[1000:])])  # on a thread, then in place

        rows = (
            store._db()
            .execute(
                "SELECT kind, first_seq, length(data), substr(data, 1, 1) FROM generation_log_batches"
                " ORDER BY kind, first_seq"
            )
            .fetchall()
        )
        assert [(kind, first, bytes(head)) for kind, first, _, head in rows] == [
            ("e", 0, b"\x02"),  # a small run: as it is
            ("f", 0, b"\x01"),
            ("f", 100, b"\x01"),
            ("f", 1000, b"\x01"),
        ]
        assert sum(size for kind, _, size, _ in rows if kind == "f") < sum(map(len, FRAMES)) // 10
        assert await store.read_log("g", LOG_FRAME) == list(enumerate(FRAMES))
        assert await store.read_log("g", LOG_FRAME, 1500) == list(enumerate(FRAMES))[1501:]
        assert await store.read_log("g", LOG_EVENT) == [(0, b"e0")]
        assert (await store.get_generation("g")).status == "completed"  # type: ignore[union-attr]
    finally:
        await store.close()
