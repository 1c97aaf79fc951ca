"""Each store's side for a concern kept apart from `GenerationStore` (the cache, agent sessions, the
console, route affinity): one small protocol per concern in its own module, one class per store in
`<store>_<concern>.py`, and here the one place that picks the class for the open store. Kept apart
from the protocol modules so that no module both names a protocol and imports its implementations
(an import circle). Each backend's module is imported only when used."""

from __future__ import annotations

from typing import Any

from .affinity import AffinityStore
from .base import GenerationStore
from .cache import CacheStore
from .console import ConsoleStore
from .sessions import SessionStore


def cache_store(store: Any) -> CacheStore:
    """The cache's storage over the store the gateway opened (the same connections)."""
    from .postgres import PostgresStore
    from .redis import RedisStore
    from .sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        from .sqlite_cache import SQLiteCache

        return SQLiteCache(store)
    if isinstance(store, PostgresStore):
        from .postgres_cache import PostgresCache

        return PostgresCache(store)
    if isinstance(store, RedisStore):
        from .redis_cache import RedisCache

        return RedisCache(store)
    raise TypeError(f"no response cache for {type(store).__name__}")


def sessions_of(store: GenerationStore) -> SessionStore:
    """The sessions side of an open store (each backend's module is imported only when used)."""
    kind = type(store).__name__
    if kind == "SQLiteStore":
        from .sqlite_sessions import SQLiteSessions

        return SQLiteSessions(store)  # type: ignore[arg-type]
    if kind == "PostgresStore":
        from .postgres_sessions import PostgresSessions

        return PostgresSessions(store)  # type: ignore[arg-type]
    if kind == "RedisStore":
        from .redis_sessions import RedisSessions

        return RedisSessions(store)  # type: ignore[arg-type]
    raise TypeError(f"no session store for {kind}")


def console_of(store: GenerationStore) -> ConsoleStore:
    """The console side of an open store (each backend's module is imported only when used)."""
    kind = type(store).__name__
    if kind == "SQLiteStore":
        from .sqlite import SQLiteStore
        from .sqlite_console import SQLiteConsole

        assert isinstance(store, SQLiteStore)
        return SQLiteConsole(store)
    if kind == "PostgresStore":
        from .postgres import PostgresStore
        from .postgres_console import PostgresConsole

        assert isinstance(store, PostgresStore)
        return PostgresConsole(store)
    if kind == "RedisStore":
        from .redis import RedisStore
        from .redis_console import RedisConsole

        assert isinstance(store, RedisStore)
        return RedisConsole(store)
    raise TypeError(f"no console store for {kind}")


def affinity_of(store: GenerationStore) -> AffinityStore:
    """The affinity side of an open store (each backend's module is imported only when used)."""
    kind = type(store).__name__
    if kind == "SQLiteStore":
        from .sqlite_affinity import SQLiteAffinity

        return SQLiteAffinity(store)  # type: ignore[arg-type]
    if kind == "PostgresStore":
        from .postgres_affinity import PostgresAffinity

        return PostgresAffinity(store)  # type: ignore[arg-type]
    if kind == "RedisStore":
        from .redis_affinity import RedisAffinity

        return RedisAffinity(store)  # type: ignore[arg-type]
    raise TypeError(f"no affinity store for {kind}")
