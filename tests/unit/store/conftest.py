"""The store fixtures every store test shares: one fresh, isolated database per test on each backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tests.support.store_backends import (
    OpenStore,
    drop_redis_prefix,
    drop_schema,
    postgres_schema,
    redis_url,
    unique_name,
    with_query,
)
from tidegate.store.base import GenerationStore
from tidegate.store.open import open_store

BACKENDS = ["sqlite", "redis", "postgres"]


@pytest.fixture(params=BACKENDS)
async def open_another(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenStore]:
    """Opens stores on one fresh, isolated database of the backend (several = several processes)."""
    backend: str = request.param
    cleanup: Callable[[], Awaitable[None]] | None = None
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    elif backend == "redis":
        base, why = await asyncio.to_thread(redis_url)
        if base is None:
            pytest.skip(why)
        prefix = unique_name("conf") + ":"
        url = with_query(base, prefix=prefix)

        async def cleanup() -> None:
            await asyncio.to_thread(drop_redis_prefix, base, prefix)

    else:
        base, schema = await postgres_schema("conf")
        url = with_query(base, schema=schema)

        async def cleanup() -> None:
            await drop_schema(base, schema)

    opened: list[GenerationStore] = []

    async def _open() -> GenerationStore:
        store = open_store(url)
        await store.open()
        opened.append(store)
        return store

    yield _open
    for store in opened:
        await store.close()
    if cleanup is not None:
        await cleanup()


@pytest.fixture
async def store(open_another: OpenStore) -> GenerationStore:
    return await open_another()
