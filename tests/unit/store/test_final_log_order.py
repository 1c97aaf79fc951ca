"""A generation's outcome is never visible before its log: `Recorder.finish` lets a batch the flusher
has in flight land first, then writes the rest of the log with the outcome.

Each backend's log table is held by another connection, so the flusher's batch cannot land; the
outcome must wait for it. (PostgreSQL writes the two on different pool connections: without the wait
the outcome committed while the batch was still blocked.)
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from tests.support.store_backends import drop_schema, postgres_schema, with_query
from tidegate.events import TextDelta
from tidegate.gateway.recorder import Recorder
from tidegate.gateway.usage import tokenizer_ready
from tidegate.records import LOG_EVENT, LOG_FRAME, GenerationRecord
from tidegate.store.base import GenerationStore
from tidegate.store.open import open_store

Locked = tuple[GenerationStore, Callable[[], Awaitable[None]]]  # the store, and what releases the lock


@pytest.fixture(params=["sqlite", "postgres"])
async def store_with_log_locked(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Locked]:
    """A store whose log table another connection holds locked until the release is awaited."""
    if request.param == "sqlite":
        path = tmp_path / "t.db"
        store = open_store(f"sqlite:///{path}")
        await store.open()
        await store.begin_generation(_record())
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")

        async def release_sqlite() -> None:
            other.execute("COMMIT")

        yield store, release_sqlite
        other.close()
        await store.close()
        return
    base, schema = await postgres_schema("order")
    store = open_store(with_query(base, schema=schema))
    await store.open()
    await store.begin_generation(_record())
    conn = await asyncpg.connect(base)
    tx = conn.transaction()
    await tx.start()
    await conn.execute(f'LOCK TABLE "{schema}".generation_log_batches IN EXCLUSIVE MODE')

    async def release_postgres() -> None:
        await tx.commit()

    yield store, release_postgres
    await conn.close()
    await store.close()
    await drop_schema(base, schema)


def _record() -> GenerationRecord:
    return GenerationRecord(
        id="g-order",
        key_id="k",
        model="m",
        door="chat",
        created_at=time.time(),
        idempotency_key="idem",
        request_hash="h",
    )


async def test_the_outcome_waits_for_the_flushers_batch(store_with_log_locked: Locked) -> None:
    store, release = store_with_log_locked
    await tokenizer_ready()  # the usage estimate's tokenizer is loaded: finishing waits on nothing else
    record = await store.get_generation("g-order")
    assert record is not None
    recorder = Recorder(store=store, record=record, messages=[], pricing=None)
    recorder.log_frames(b"id: 0\ndata: a\n\nid: 1\ndata: b\n\n")
    recorder.observe(TextDelta("ab"))
    flushing = asyncio.ensure_future(recorder.flush())  # what the flusher's round does
    await asyncio.sleep(0.05)
    assert not flushing.done()  # the batch is held by the lock
    finishing = asyncio.ensure_future(recorder.finish("completed"))
    await asyncio.sleep(0.3)
    assert not finishing.done()
    now = await store.get_generation("g-order")
    assert now is not None and now.status == "in_progress"  # no outcome without its log
    await release()
    await asyncio.wait_for(asyncio.gather(flushing, finishing), 10)
    done = await store.get_generation("g-order")
    assert done is not None and done.status == "completed" and done.output_text == "ab"
    assert [seq for seq, _ in await store.read_log("g-order", LOG_FRAME)] == [0, 1]
    assert len(await store.read_log("g-order", LOG_EVENT)) == 1
