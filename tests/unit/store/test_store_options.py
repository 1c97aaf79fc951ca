"""Store selection by url, tidegate's own url parameters, and the Redis retention expiry option."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from tests.support.store_backends import drop_redis_prefix, drop_schema, postgres_schema, redis_url, unique_name
from tidegate.records import LOG_FRAME, GenerationRecord, LogRun
from tidegate.store.open import open_store
from tidegate.store.postgres import PostgresStore
from tidegate.store.redis import RedisStore
from tidegate.store.sqlite import SQLiteStore


def test_open_store_picks_the_backend_by_scheme() -> None:
    assert isinstance(open_store("sqlite:///:memory:"), SQLiteStore)
    for url in ("redis://127.0.0.1:6379/0", "rediss://cache.example:6380/2"):
        assert isinstance(open_store(url), RedisStore)
    for url in ("postgresql://u@127.0.0.1/db", "postgres://u@127.0.0.1/db"):
        assert isinstance(open_store(url), PostgresStore)
    with pytest.raises(ValueError, match="mysql"):
        open_store("mysql://x")


def test_tidegate_parameters_are_taken_out_of_the_driver_url() -> None:
    r = RedisStore("redis://127.0.0.1:6379/3?prefix=app1:&retention_hours=2&socket_keepalive=true")
    assert r.prefix == "app1:"
    assert r.url == "redis://127.0.0.1:6379/3?socket_keepalive=true"
    assert RedisStore("redis://h/0").prefix == "tidegate:"
    assert RedisStore("redis://h/0?prefix=a:", prefix="b:").prefix == "b:"
    p = PostgresStore("postgresql://u@h:5432/db?schema=tg_one&sslmode=disable")
    assert p.schema == "tg_one"
    assert p.dsn == "postgresql://u@h:5432/db?sslmode=disable"
    assert PostgresStore("postgresql://u@h/db").schema is None


async def test_redis_retention_expires_idempotency_keys_and_logs() -> None:
    base, why = await asyncio.to_thread(redis_url)
    if base is None:
        pytest.skip(why)
    prefix = unique_name("ttl") + ":"
    store = RedisStore(base, prefix=prefix, retention_hours=1)
    await store.open()
    client = aioredis.Redis.from_url(base)
    try:
        rec = GenerationRecord(
            id="gen_ttl", key_id="key_a", model="m", door="chat", created_at=time.time(), idempotency_key="k"
        )
        rec.request_hash = "h"
        assert (await store.begin_generation(rec)).outcome == "created"
        await store.append_log(rec.id, [LogRun(LOG_FRAME, 0, [b"x"])])
        for key in (f"{prefix}idem:5:key_a:k", f"{prefix}log:gen_ttl:{LOG_FRAME}", f"{prefix}logkinds:gen_ttl"):
            ttl = await client.pttl(key)
            assert 3_500_000 < ttl <= 3_600_000, key
        assert await client.pttl(f"{prefix}gen:gen_ttl") == -1  # the record itself never expires
    finally:
        await client.aclose()
        await store.close()
        await asyncio.to_thread(drop_redis_prefix, base, prefix)


async def test_postgres_keeps_a_record_whose_text_has_nul() -> None:
    base, schema = await postgres_schema("nul")
    store = PostgresStore(base, schema=schema)
    await store.open()
    try:
        rec = GenerationRecord(id="gen_nul", key_id="k", model="m", door="chat", created_at=time.time())
        await store.create_generation(rec)
        rec.output_text, rec.reasoning_text, rec.status = "a\x00b", "c\x00d", "completed"
        await store.update_generation(rec)  # would fail without the replacement, leaving it in_progress
        got = await store.get_generation("gen_nul")
        assert got is not None and got.status == "completed" and got.output_text == "a\ufffdb"
        assert got.reasoning_text == "c\ufffdd"
    finally:
        await store.close()
        await drop_schema(base, schema)
