"""Prompt-cache affinity on PostgreSQL (store/affinity.py): a row per key with its expiry; every
`PRUNE_EVERY`th write of an instance also drops the expired rows."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import PostgresStore

_GET = "SELECT route FROM route_affinity WHERE affinity_key = $1 AND expires_at > $2"
_PUT = (
    "INSERT INTO route_affinity (affinity_key, route, expires_at) VALUES ($1, $2, $3)"
    " ON CONFLICT (affinity_key) DO UPDATE SET route = EXCLUDED.route, expires_at = EXCLUDED.expires_at"
)

_PRUNE = "DELETE FROM route_affinity WHERE expires_at <= $1"
PRUNE_EVERY = 1000


class PostgresAffinity:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._writes = 0

    async def route_for(self, key: str, now: float) -> str | None:
        route = await self.store.pool.fetchval(_GET, key, now)
        return str(route) if route is not None else None

    async def remember(self, key: str, route: str, expires_at: float) -> None:
        await self.store.pool.execute(_PUT, key, route, expires_at)
        self._writes += 1
        if self._writes % PRUNE_EVERY == 0:
            await self.store.pool.execute(_PRUNE, time.time())
