"""Where prompt-cache affinity (gateway/affinity.py) keeps each affinity key's route, shared by
the instances of one store, behind a protocol of its own (`AffinityStore`), apart from
`GenerationStore`: Redis a key with a TTL, the SQL stores the `route_affinity` table (migration
0010) with an expiry column."""

from __future__ import annotations

from typing import Protocol


class AffinityStore(Protocol):
    async def route_for(self, key: str, now: float) -> str | None:
        """The route last remembered for `key`, unless it expired by `now` (unix seconds)."""
        ...

    async def remember(self, key: str, route: str, expires_at: float) -> None:
        """`route` serves `key` until `expires_at` (replacing what was there)."""
        ...
