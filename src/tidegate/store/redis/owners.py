"""Conversation owners on Redis (store/owners.py): `owner:{id}` holds the key id and expires with
the binding (Redis's own TTL: nothing to prune). `SET NX`: a live binding keeps its owner."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import RedisStore


class RedisOwners:
    def __init__(self, store: RedisStore) -> None:
        self.store = store

    async def owners(self, ids: Sequence[str], now: float) -> dict[str, str]:
        values = await self.store._cmd("MGET", *(self.store._k("owner", i) for i in ids))
        return {
            i: v.decode() if isinstance(v, bytes) else str(v) for i, v in zip(ids, values, strict=True) if v is not None
        }

    async def bind(self, key_id: str, ids: Sequence[str], expires_at: float) -> None:
        ttl_ms = max(1, int((expires_at - time.time()) * 1000))
        async with self.store._redis.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.set(self.store._k("owner", i), key_id, px=ttl_ms, nx=True)
            await pipe.execute()
