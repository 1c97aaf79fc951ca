"""Agent session lists come from an index on every store (store/sessions.py): a key's list reads its
own session records, never every record. On SQLite, Redis and PostgreSQL: two keys, one session name
used by both; each key's list holds its own records and models only. Then, per store, the index is
what the list reads: the SQL plans name it, and on Redis a record taken out of the index leaves the
list until the older records are indexed again."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis

from tests.support.store_backends import (
    REDIS_URL,
    drop_redis_prefix,
    drop_schema,
    postgres_schema,
    redis_url,
    unique_name,
    with_query,
)
from tidegate.records import GenerationRecord
from tidegate.store.base import GenerationStore
from tidegate.store.facets import sessions_of
from tidegate.store.open import open_store
from tidegate.store.postgres.sessions import _BY_KEY as PG_BY_KEY
from tidegate.store.redis import RedisStore
from tidegate.store.sessions import models_sql
from tidegate.store.sqlite.sessions import _BY_KEY, _p


def _record(key_id: str, session: str | None, model: str, created_at: float) -> GenerationRecord:
    return GenerationRecord(
        id="gen_" + uuid.uuid4().hex,
        key_id=key_id,
        model=model,
        door="chat",
        created_at=created_at,
        status="in_progress",
        owner="host:1",
        agent_session=session,
        hints={"agent": "codex"} if session else None,
    )


async def _seed(store: GenerationStore, now: float) -> dict[str, GenerationRecord]:
    made = {
        "a-same": _record("key_a", "same", "model-a", now - 30),
        "a-own": _record("key_a", "a-only", "model-a", now - 20),
        "b-same": _record("key_b", "same", "model-b", now - 10),
        "a-none": _record("key_a", None, "model-a", now - 5),
    }
    for record in made.values():
        await store.create_generation(record)
        await store.update_generation(dataclasses.replace(record, status="completed", cost=0.5))
    return made


def _listed(found: list[Any]) -> dict[str, tuple[int, list[str]]]:
    return {s.session: (s.requests, s.models) for s in found}


async def test_each_key_lists_its_own_sessions_and_models(store: GenerationStore) -> None:
    now = time.time()
    await _seed(store, now)
    sessions = sessions_of(store)
    assert _listed(await sessions.sessions(now - 60, "key_a", 50)) == {
        "a-only": (1, ["model-a"]),
        "same": (1, ["model-a"]),  # key_b's record of a session named alike is not key_a's
    }
    assert _listed(await sessions.sessions(now - 60, "key_b", 50)) == {"same": (1, ["model-b"])}
    assert _listed(await sessions.sessions(now - 60, None, 50)) == {
        "a-only": (1, ["model-a"]),
        "same": (2, ["model-a", "model-b"]),
    }
    assert _listed(await sessions.sessions(now - 15, "key_a", 50)) == {}
    assert await sessions.sessions(now - 60, "key_c", 50) == []


async def test_sqlite_reads_a_key_s_list_from_its_session_index(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    await store.open()
    await store.close()
    db = sqlite3.connect(tmp_path / "s.db")
    plans = [
        db.execute("EXPLAIN QUERY PLAN " + _BY_KEY, (0.0, 50, "key_a")).fetchall(),
        db.execute("EXPLAIN QUERY PLAN " + models_sql(_p, 1, by_key=True), (0.0, "s", "key_a")).fetchall(),
    ]
    db.close()
    for plan in plans:
        assert "USING INDEX generations_key_session_created (key_id=? AND created_at>?)" in plan[0][3], plan


async def test_postgres_reads_a_key_s_list_from_its_session_index() -> None:
    base, schema = await postgres_schema("sessidx")
    store = open_store(f"{base}?schema={schema}")
    await store.open()
    await store.close()
    conn = await asyncpg.connect(base, server_settings={"search_path": schema, "enable_seqscan": "off"})
    try:
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + PG_BY_KEY, 0.0, 50, "key_a"))
    finally:
        await conn.close()
        await drop_schema(base, schema)
    assert "generations_key_session_created" in plan, plan


@pytest.fixture
async def redis_store() -> AsyncIterator[RedisStore]:
    base, why = await asyncio.to_thread(redis_url)
    if base is None:
        pytest.skip(why)
    prefix = unique_name("sessidx") + ":"
    store = open_store(with_query(base, prefix=prefix))
    assert isinstance(store, RedisStore)
    await store.open()
    yield store
    await store.close()
    await asyncio.to_thread(drop_redis_prefix, base, prefix)


async def test_redis_lists_what_its_index_holds(redis_store: RedisStore) -> None:
    now, prefix = time.time(), redis_store.prefix
    made = await _seed(redis_store, now)
    sessions = sessions_of(redis_store)
    both = {"a-only": (1, ["model-a"]), "same": (1, ["model-a"])}
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert _listed(await sessions.sessions(now - 60, "key_a", 50)) == both
        index = f"{prefix}sessions:key:key_a"
        assert {m.decode() for m in client.zrange(index, 0, -1)} == {made["a-same"].id, made["a-own"].id}
        client.zrem(index, made["a-own"].id)
        assert _listed(await sessions.sessions(now - 60, "key_a", 50)) == {"same": (1, ["model-a"])}
        # records from before the index existed: indexed once, on the next list
        client.delete(index, f"{prefix}sessions:all", f"{prefix}sessions:indexed")
        assert _listed(await sessions.sessions(now - 60, "key_a", 50)) == both
        assert client.exists(f"{prefix}sessions:indexed") == 1
        assert client.zcard(f"{prefix}sessions:all") == 3
    finally:
        client.close()
