"""Who owns an upstream conversation id (docs/security.md, "Conversations"): the response ids (and
their output items' ids) a Responses API upstream hands a key through the gateway, bound to that
key, so another key's `previous_response_id`, `conversation` or `item_reference` is a 404 before
anything reaches the upstream. A protocol of its own, apart from `GenerationStore`: Redis a key per
id with a TTL, the SQL stores the `response_owners` table (migration 0012) with an expiry column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# how long a binding lasts: OpenAI keeps a stored response 30 days by default
KEPT_S = 30 * 86400.0


class OwnerStore(Protocol):
    async def owners(self, ids: Sequence[str], now: float) -> dict[str, str]:
        """The key id each of `ids` is bound to, for those bound and not expired by `now`."""
        ...

    async def bind(self, key_id: str, ids: Sequence[str], expires_at: float) -> None:
        """`ids` belong to `key_id` until `expires_at` (an id already bound keeps its owner)."""
        ...
