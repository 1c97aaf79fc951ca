"""The store a `store.url` names, by its scheme. Apart from `base.py` (the protocol and the record
types), so the concrete stores import `base.py` and nothing imports them back."""

from __future__ import annotations

from ..store_url import store_backend
from .base import GenerationStore


def open_store(url: str) -> GenerationStore:
    """The store for `url` (`sqlite://`, `redis://` / `rediss://`, `postgresql://` / `postgres://`);
    each backend's module is imported only when used (their drivers are optional extras)."""
    backend = store_backend(url)
    if backend == "sqlite":
        from .sqlite import SQLiteStore

        return SQLiteStore(url)
    if backend == "redis":
        from .redis import RedisStore

        return RedisStore(url)
    if backend == "postgres":
        from .postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(f"store.url: scheme not available in this build: {url.split('://')[0]}")
