"""Where the Redis and PostgreSQL test servers are, and per-run isolation (a key prefix, a schema).

Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`, user `postgres`
or `root`) unless TIDEGATE_TEST_REDIS_URL / TIDEGATE_TEST_POSTGRES_URL say otherwise. A backend that does
not answer is skipped with the reason, never silently passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest
import redis

from tidegate.store.base import GenerationStore

# opens another store object on the test's database (several = several gateway processes)
OpenStore = Callable[[], Awaitable[GenerationStore]]

REDIS_URL = os.environ.get("TIDEGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URLS = (
    [os.environ["TIDEGATE_TEST_POSTGRES_URL"]]
    if os.environ.get("TIDEGATE_TEST_POSTGRES_URL")
    else ["postgresql://postgres@127.0.0.1:5432/test", "postgresql://root@127.0.0.1:5432/test"]
)


@functools.cache
def redis_url() -> tuple[str | None, str]:
    """(url, "") when Redis answers PING, else (None, why not)."""
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError) as exc:
        return None, f"Redis not reachable at {REDIS_URL}: {type(exc).__name__}: {exc}"
    return REDIS_URL, ""


async def _pg_try(url: str) -> None:
    conn = await asyncpg.connect(url, timeout=3)
    try:
        await conn.fetchval("SELECT 1")
    finally:
        await conn.close()


@functools.cache
def postgres_url() -> tuple[str | None, str]:
    """(url, "") for the first candidate that accepts a connection, else (None, why not)."""
    reasons = []
    for url in POSTGRES_URLS:
        try:
            asyncio.run(_pg_try(url))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            reasons.append(f"{url}: {type(exc).__name__}: {exc}")
            continue
        return url, ""
    return None, "PostgreSQL not reachable: " + "; ".join(reasons)


def unique_name(tag: str) -> str:
    return f"tg_{tag}_{uuid.uuid4().hex[:12]}"


async def postgres_schema(tag: str) -> tuple[str, str]:
    """(the server's url, a fresh schema name for this test); the test is skipped, with the reason,
    when PostgreSQL does not answer."""
    base, why = await asyncio.to_thread(postgres_url)
    if base is None:
        pytest.skip(why)
    return base, unique_name(tag)


def with_query(url: str, **params: str) -> str:
    sep = "&" if "?" in url else "?"
    return url + sep + "&".join(f"{k}={v}" for k, v in params.items())


def drop_redis_prefix(url: str, prefix: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
        return len(keys)
    finally:
        client.close()


async def drop_schema(url: str, schema: str) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def drop_postgres_schema(url: str, schema: str) -> None:
    """Synchronous: call from a sync context (not inside a running event loop)."""
    asyncio.run(drop_schema(url, schema))


@contextlib.contextmanager
def shared_store_url(backend: str, tmp_path: Path, tag: str) -> Iterator[str]:
    """A store URL several gateway processes share, emptied afterwards: a SQLite file in `tmp_path`,
    a Redis key prefix or a PostgreSQL schema of its own (skipped when that server does not answer)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    if backend == "redis":
        base, why = redis_url()
        if base is None:
            pytest.skip(why)
        prefix = unique_name(tag) + ":"
        yield with_query(base, prefix=prefix)
        drop_redis_prefix(base, prefix)
        return
    base, why = postgres_url()
    if base is None:
        pytest.skip(why)
    schema = unique_name(tag)
    yield with_query(base, schema=schema)
    drop_postgres_schema(base, schema)
