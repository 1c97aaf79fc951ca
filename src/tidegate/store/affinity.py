"""Where prompt-cache affinity (gateway/affinity.py) keeps each affinity key's route, shared by
the instances of one store, behind a protocol of its own (`AffinityStore`), apart from
`GenerationStore`: Redis a key with a TTL, the SQL stores the `route_affinity` table (migration
0010) with an expiry column."""

from __future__ import annotations

from typing import Protocol

from .base import GenerationStore


class AffinityStore(Protocol):
    async def route_for(self, key: str, now: float) -> str | None:
        """The route last remembered for `key`, unless it expired by `now` (unix seconds)."""
        ...

    async def remember(self, key: str, route: str, expires_at: float) -> None:
        """`route` serves `key` until `expires_at` (replacing what was there)."""
        ...


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
