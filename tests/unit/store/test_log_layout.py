"""How PostgreSQL and Redis lay a generation's log out: one row (member) per run a flush wrote, not one
per entry, and logs written by versions before (one row or member per entry) still read, merged in
seq order with runs written since, and pruned.

On the real servers (see `store_backends.py`), each test in its own schema / key prefix.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
import redis.asyncio as aioredis

from tests.support.store_backends import (
    drop_redis_prefix,
    drop_schema,
    postgres_schema,
    redis_url,
    unique_name,
    with_query,
)
from tidegate.records import LOG_EVENT, LOG_FRAME, GenerationRecord, LogRun
from tidegate.store.postgres import PostgresStore
from tidegate.store.redis import RedisStore

FRAMES = [b'id: %d\ndata: {"n":%d}\n\n' % (i, i) for i in range(500)]
CHUNK = (
    b'id: %d\ndata: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764720000,'
    b'"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" word%d"},"finish_reason":null}]}\n\n'
)


RedisOpen = tuple[RedisStore, aioredis.Redis, str]


@pytest.fixture
async def redis_open() -> AsyncIterator[RedisOpen]:
    """A Redis store under a key prefix of its own, a raw client to look at its keys, the prefix."""
    base, why = await asyncio.to_thread(redis_url)
    if base is None:
        pytest.skip(why)
    prefix = unique_name("layout") + ":"
    store = RedisStore(base, prefix=prefix)
    await store.open()
    client = aioredis.Redis.from_url(base)
    try:
        yield store, client, prefix
    finally:
        await client.aclose()
        await store.close()
        await asyncio.to_thread(drop_redis_prefix, base, prefix)


def _record(gid: str, created_at: float) -> GenerationRecord:
    return GenerationRecord(
        id=gid, key_id="k", model="m", door="chat", created_at=created_at, idempotency_key=gid, request_hash="h"
    )


async def test_postgres_keeps_one_row_per_run_and_reads_the_per_entry_rows_before_it() -> None:
    base, schema = await postgres_schema("layout")
    store = PostgresStore(with_query(base, schema=schema))
    await store.open()
    conn = await asyncpg.connect(base)
    try:
        await conn.execute(f'SET search_path TO "{schema}"')
        await store.begin_generation(_record("g-new", time.time()))
        await store.append_log("g-new", [LogRun(LOG_FRAME, 0, FRAMES[:250]), LogRun(LOG_EVENT, 0, [b"e0", b"e1"])])
        await store.append_log("g-new", [LogRun(LOG_FRAME, 250, FRAMES[250:])])
        rows = await conn.fetch("SELECT kind, first_seq, last_seq FROM generation_log_batches ORDER BY kind, first_seq")
        assert [tuple(r) for r in rows] == [(LOG_EVENT, 0, 1), (LOG_FRAME, 0, 249), (LOG_FRAME, 250, 499)]
        assert await store.read_log("g-new", LOG_FRAME) == list(enumerate(FRAMES))
        assert await store.read_log("g-new", LOG_FRAME, 260) == [(i, FRAMES[i]) for i in range(261, 500)]

        # a generation whose first entries an older version wrote, one row each
        old = time.time() - 100 * 3600
        await store.begin_generation(_record("g-old", old))
        await conn.executemany(
            "INSERT INTO generation_log (generation_id, kind, seq, data) VALUES ('g-old', $1, $2, $3)",
            [(LOG_FRAME, i, FRAMES[i]) for i in range(3)],
        )
        await store.append_log("g-old", [LogRun(LOG_FRAME, 3, FRAMES[3:6])])
        assert await store.read_log("g-old", LOG_FRAME) == list(enumerate(FRAMES[:6]))
        assert await store.read_log("g-old", LOG_FRAME, 1) == [(i, FRAMES[i]) for i in range(2, 6)]

        await store.update_generation(dataclasses.replace(_record("g-old", old), status="completed"))
        await store.prune(time.time() - 24 * 3600)
        assert await store.read_log("g-old", LOG_FRAME) == []
        for table in ("generation_log", "generation_log_batches"):
            assert await conn.fetchval(f"SELECT count(*) FROM {table} WHERE generation_id = 'g-old'") == 0
        assert len(await store.read_log("g-new", LOG_FRAME)) == 500
    finally:
        await conn.close()
        await store.close()
        await drop_schema(base, schema)


async def test_redis_keeps_one_member_per_run_and_reads_the_per_entry_members_before_it(redis_open: RedisOpen) -> None:
    store, client, prefix = redis_open
    await store.begin_generation(_record("g-new", time.time()))
    await store.append_log("g-new", [LogRun(LOG_FRAME, 0, FRAMES[:250]), LogRun(LOG_EVENT, 0, [b"e0", b"e1"])])
    await store.append_log("g-new", [LogRun(LOG_FRAME, 250, FRAMES[250:])])
    scores = await client.zrange(f"{prefix}log:g-new:{LOG_FRAME}", 0, -1, withscores=True)
    assert [score for _, score in scores] == [249.0, 499.0]
    assert await client.zcard(f"{prefix}log:g-new:{LOG_EVENT}") == 1
    assert await store.read_log("g-new", LOG_FRAME) == list(enumerate(FRAMES))
    assert await store.read_log("g-new", LOG_FRAME, 260) == [(i, FRAMES[i]) for i in range(261, 500)]

    # a generation whose first entries an older version wrote: one member each, 8-byte seq + data
    await store.begin_generation(_record("g-old", time.time()))
    await client.zadd(f"{prefix}log:g-old:{LOG_FRAME}", {struct.pack(">q", i) + FRAMES[i]: i for i in range(3)})
    await store.append_log("g-old", [LogRun(LOG_FRAME, 3, FRAMES[3:6])])
    assert await store.read_log("g-old", LOG_FRAME) == list(enumerate(FRAMES[:6]))
    assert await store.read_log("g-old", LOG_FRAME, 1) == [(i, FRAMES[i]) for i in range(2, 6)]
    # written again from seq 2 (a retry): the old member for seq 2 and the run after it are replaced
    await store.append_log("g-old", [LogRun(LOG_FRAME, 2, [b"two", b"three"])])
    assert await store.read_log("g-old", LOG_FRAME) == [(0, FRAMES[0]), (1, FRAMES[1]), (2, b"two"), (3, b"three")]


async def test_redis_deflates_a_large_run_and_reads_it_back(redis_open: RedisOpen) -> None:
    """Redis keeps logs in RAM until they expire: a run of 8 KiB or more is stored deflated (on a
    thread from 64 KiB on), a smaller one as it is; all read back byte for byte."""
    store, client, prefix = redis_open
    frames = [CHUNK % (i, i % 7) for i in range(2000)]  # ~350 KB: deflated on a thread
    await store.begin_generation(_record("g-big", time.time()))
    await store.append_log("g-big", [LogRun(LOG_FRAME, 0, frames[:100])])  # ~17 KB: on the loop
    await store.append_log("g-big", [LogRun(LOG_FRAME, 100, frames[100:]), LogRun(LOG_EVENT, 0, [b"e0"])])
    members = await client.zrange(f"{prefix}log:g-big:{LOG_FRAME}", 0, -1)
    assert [m[:1] for m in members] == [b"\x01", b"\x01"]  # deflated
    raw = sum(len(f) for f in frames)
    assert sum(len(m) for m in members) < raw / 10
    (event,) = await client.zrange(f"{prefix}log:g-big:{LOG_EVENT}", 0, -1)
    assert event[:1] == b"\x02"  # a small run stays as it is
    assert await store.read_log("g-big", LOG_FRAME) == list(enumerate(frames))
    assert await store.read_log("g-big", LOG_FRAME, 1500) == [(i, frames[i]) for i in range(1501, 2000)]
    assert await store.read_log("g-big", LOG_EVENT) == [(0, b"e0")]
