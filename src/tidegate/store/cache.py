"""The exact response cache's storage (docs/api-edges.md §18): its own small protocol, apart from
`GenerationStore`, with one implementation per store (`sqlite/cache.py`, `postgres/cache.py`,
`redis/cache.py`) over that store's connections, so every instance on one store shares the entries
and one ceiling (`[cache] max_total_bytes`): each store keeps the entries' total and their order of
last use, and a `put` past the ceiling evicts the least recently used."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

HOUR_S = 3600.0
RESULTS = ("hit", "miss", "bypass")


@dataclass(frozen=True, slots=True)
class CacheEntry:
    entry_key: str  # sha256 hex of (tenant, door, model, canonical body): gateway/cache.py
    key_id: str  # the tenant: purge by key
    model: str
    door: str
    created_at: float
    expires_at: float
    generation_id: str  # the generation whose answer this is
    usage: dict[str, Any]
    cost: float  # what that answer cost: what a hit saves
    events: bytes  # the canonical events, one JSON object a line (gateway/eventlog.py); b"" when not read
    size: int = 0  # the events' length, what the ceiling counts (as stored; `put` takes `len(events)`)


@dataclass(slots=True)
class CacheCounts:
    hits: int = 0
    misses: int = 0
    bypasses: int = 0
    bytes: int = 0
    saved_cost: float = 0.0

    def add(self, other: CacheCounts) -> None:
        self.hits += other.hits
        self.misses += other.misses
        self.bypasses += other.bypasses
        self.bytes += other.bytes
        self.saved_cost += other.saved_cost

    def public(self) -> dict[str, Any]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "bypasses": self.bypasses,
            "bytes": self.bytes,
            "saved_cost": round(self.saved_cost, 10),
        }


@dataclass(slots=True)
class CountRow:
    """One (hour, model, key) of the counters."""

    model: str
    key_id: str
    counts: CacheCounts = field(default_factory=CacheCounts)


def hour_of(t: float) -> float:
    return t - t % HOUR_S


def counts_of(result: str, size: int, saved: float) -> CacheCounts:
    """One request's contribution: a hit adds the bytes served and the original's cost."""
    return CacheCounts(
        hits=int(result == "hit"),
        misses=int(result == "miss"),
        bypasses=int(result == "bypass"),
        bytes=size if result == "hit" else 0,
        saved_cost=saved if result == "hit" else 0.0,
    )


class CacheStore(Protocol):
    async def get(self, entry_key: str, now: float, *, events: bool = True) -> CacheEntry | None:
        """The live entry, its last use set to `now` (least recently used goes first); an expired one
        is deleted (lazy pruning) and None returned. `events=False`: without its events (b""), for a
        caller that holds them already."""
        ...

    async def put(self, entry: CacheEntry, max_total_bytes: int) -> int:
        """Store (or replace) an entry, then evict the least recently used entries until every entry's
        events together take at most `max_total_bytes`; how many were evicted."""
        ...

    async def purge(self, *, model: str | None = None, key_id: str | None = None) -> int:
        """Delete the entries of a model, of a key, of both, or (neither given) all; how many went."""
        ...

    async def prune(self, now: float) -> int:
        """Delete the expired entries; how many went."""
        ...

    async def count(self, model: str, key_id: str, counts: CacheCounts, now: float) -> None:
        """Add one request's counts to its hour's row."""
        ...

    async def counts(self, since: float) -> list[CountRow]:
        """The counters of every hour from `since`'s on, summed per (model, key)."""
        ...
