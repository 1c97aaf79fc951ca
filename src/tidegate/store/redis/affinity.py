"""Prompt-cache affinity on Redis (store/affinity.py): `affinity:{key}` holds the route and
expires with the provider's cache (Redis's own TTL: nothing to prune)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import RedisStore


class RedisAffinity:
    def __init__(self, store: RedisStore) -> None:
        self.store = store

    async def route_for(self, key: str, now: float) -> str | None:
        route = await self.store._cmd("GET", self.store._k("affinity", key))
        return route.decode() if isinstance(route, bytes) else route

    async def remember(self, key: str, route: str, expires_at: float) -> None:
        ttl_ms = max(1, int((expires_at - time.time()) * 1000))
        await self.store._cmd("SET", self.store._k("affinity", key), route, "PX", ttl_ms)
