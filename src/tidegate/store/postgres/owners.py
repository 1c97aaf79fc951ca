"""Conversation owners on PostgreSQL (store/owners.py): a row per id with its owner and expiry;
every `PRUNE_EVERY`th write of an instance also drops the expired rows."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import PostgresStore

_GET = "SELECT id, key_id FROM response_owners WHERE id = ANY($1::text[]) AND expires_at > $2"
# one statement for every id; an expired row is taken over, a live one keeps its owner
_PUT = (
    "INSERT INTO response_owners (id, key_id, expires_at) SELECT unnest($1::text[]), $2, $3"
    " ON CONFLICT (id) DO UPDATE SET key_id = EXCLUDED.key_id, expires_at = EXCLUDED.expires_at"
    " WHERE response_owners.expires_at <= $4"
)
_PRUNE = "DELETE FROM response_owners WHERE expires_at <= $1"
PRUNE_EVERY = 1000


class PostgresOwners:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._writes = 0

    async def owners(self, ids: Sequence[str], now: float) -> dict[str, str]:
        rows = await self.store.pool.fetch(_GET, list(ids), now)
        return {str(r["id"]): str(r["key_id"]) for r in rows}

    async def bind(self, key_id: str, ids: Sequence[str], expires_at: float) -> None:
        await self.store.pool.execute(_PUT, list(dict.fromkeys(ids)), key_id, expires_at, time.time())
        self._writes += 1
        if self._writes % PRUNE_EVERY == 0:
            await self.store.pool.execute(_PRUNE, time.time())
