"""What the web console reads at scale (docs/console-api.md): rollups, the filtered log, the audit
log and logged bodies, behind a protocol of their own (`ConsoleStore`), apart from `GenerationStore`.

Rollups are kept as records end (PostgreSQL adds to the buckets in the record's final statement;
SQLite and Redis sum them in memory and write them once a second, store/rollup_writer.py), so a
console view reads a few hundred bucket rows and never scans generation records. Time to first
token is kept as a histogram over fixed log-spaced bounds, so buckets add up and any sum of them
still gives a p50/p95.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..records import GenerationRecord

# Upper bounds (ms) of the TTFT histogram's buckets: 5 ms x 1.5^i, 5 ms to ~56 s; one more bucket
# holds what is above the last. Log-spaced: a percentile read from it is within ~25 % at any scale.
TTFT_BOUNDS_MS: tuple[float, ...] = tuple(round(5 * 1.5**i, 3) for i in range(24))
HIST_BUCKETS = len(TTFT_BOUNDS_MS) + 1
# Bucket widths kept and for how long: minutes 2 days, hours 90 days, days 400 days (the month view
# reads 30 day rows instead of 720 hour rows per group).
RESOLUTIONS: dict[int, int] = {60: 2 * 86_400, 3_600: 90 * 86_400, 86_400: 400 * 86_400}
# Record statuses counted as errors in the rollups (a cancel is the client's choice, not an error).
ERROR_STATUSES = frozenset({"failed", "interrupted", "rejected"})
GROUP_COLUMNS = {"none": None, "model": "model", "provider": "provider", "key": "key_id"}


def ttft_bucket(ttft_ms: float | None) -> int:
    """The histogram bucket of a time to first token; -1 when there was none (no token came)."""
    if ttft_ms is None:
        return -1
    return bisect.bisect_left(TTFT_BOUNDS_MS, ttft_ms)


def quantile(hist: list[int], q: float) -> float | None:
    """The `q` quantile (ms) of a histogram, interpolated inside its bucket; None when it is empty."""
    total = sum(hist)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(hist):
        if count and seen + count >= rank:
            low = TTFT_BOUNDS_MS[i - 1] if i > 0 else 0.0
            high = TTFT_BOUNDS_MS[i] if i < len(TTFT_BOUNDS_MS) else TTFT_BOUNDS_MS[-1] * 1.5
            return round(low + (high - low) * (rank - seen) / count, 1)
        seen += count
    return round(TTFT_BOUNDS_MS[-1] * 1.5, 1)


@dataclass(frozen=True, slots=True)
class Rollup:
    """What one ended record adds to each of its buckets."""

    created_at: float
    model: str
    provider: str
    key_id: str
    error: bool
    input_tokens: int
    output_tokens: int
    cost: float
    ttft_bucket: int

    @classmethod
    def of(cls, r: GenerationRecord) -> Rollup:
        return cls(
            created_at=r.created_at,
            model=r.model,
            provider=r.provider or "",
            key_id=r.key_id,
            error=r.status in ERROR_STATUSES,
            input_tokens=r.usage.prompt_tokens,
            output_tokens=r.usage.completion_tokens,
            cost=float(r.cost),
            ttft_bucket=ttft_bucket(r.ttft_ms),
        )


class RollupBuffer:
    """Ended records' rollups summed in memory, to be written together: one row per (bucket, group)
    however many records ended in it (store/rollup_writer.py says why). Records end on the loop and,
    on SQLite, on the store thread, hence the lock."""

    def __init__(self) -> None:
        self._rows: dict[tuple[int, int, str, str, str], list[Any]] = {}
        self._lock = threading.Lock()

    def add(self, r: Rollup) -> None:
        with self._lock:
            for res in RESOLUTIONS:
                key = (res, int(r.created_at // res) * res, r.model, r.provider, r.key_id)
                sums = self._rows.get(key)
                if sums is None:
                    sums = self._rows[key] = [0, 0, 0, 0, 0.0] + [0] * HIST_BUCKETS
                sums[0] += 1
                sums[1] += int(r.error)
                sums[2] += r.input_tokens
                sums[3] += r.output_tokens
                sums[4] += r.cost
                if r.ttft_bucket >= 0:
                    sums[5 + r.ttft_bucket] += 1

    def take(self) -> list[tuple[Any, ...]]:
        """The summed rows (`console_sql.rollup_add`'s parameters), emptying the buffer."""
        with self._lock:
            rows, self._rows = self._rows, {}
        return [(*key, *sums) for key, sums in rows.items()]


@dataclass(slots=True)
class Bucket:
    """One (bucket start, group) of a series: sums and the TTFT histogram."""

    t: float
    group: str
    requests: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    hist: list[int] = field(default_factory=lambda: [0] * HIST_BUCKETS)

    def add(self, other: Bucket) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost += other.cost
        self.hist = [a + b for a, b in zip(self.hist, other.hist, strict=True)]

    def point(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "requests": self.requests,
            "errors": self.errors,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": round(self.cost, 10),
            "ttft_p50_ms": quantile(self.hist, 0.5),
            "ttft_p95_ms": quantile(self.hist, 0.95),
        }


@dataclass(frozen=True, slots=True)
class SeriesQuery:
    """Buckets of `bucket_s` seconds starting in [start, end), grouped by `by` (GROUP_COLUMNS)."""

    bucket_s: int
    start: float
    end: float
    by: str = "none"
    model: str | None = None
    provider: str | None = None
    key_id: str | None = None


@dataclass(frozen=True, slots=True)
class LogFilter:
    """`GET /api/v1/generations`' filters; `before`: the keyset cursor (created_at, id), exclusive."""

    since: float | None = None
    until: float | None = None
    key_id: str | None = None
    model: str | None = None
    provider: str | None = None
    status: str | None = None
    session: str | None = None
    id: str | None = None
    before: tuple[float, str] | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: str  # a ULID: the order of the log
    at: float
    actor_key_id: str
    actor_name: str
    action: str
    target: str
    detail: dict[str, Any]

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "actor": {"key_id": self.actor_key_id, "name": self.actor_name},
            "action": self.action,
            "target": self.target,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Bodies:
    """A generation's logged request (as received) and final answer, JSON or text."""

    request: Any
    response: Any


class ConsoleStore(Protocol):
    """The console's reads and the writes that feed them, per store (sqlite/console.py, ...)."""

    async def series(self, query: SeriesQuery) -> list[Bucket]:
        """The non-empty buckets of the query, one per (bucket start, group)."""
        ...

    async def generations(self, where: LogFilter, limit: int) -> list[GenerationRecord]:
        """Records matching `where`, newest first by (created_at, id), at most `limit`."""
        ...

    async def add_audit(self, entry: AuditEntry) -> None: ...

    def count(self, rollup: Rollup) -> None:
        """Add to the rollups without a record (a rejected request's, server/rejections.py): buffered
        and written with the others within a second, no store round trip of its own."""
        ...

    async def audit(self, limit: int, before: str | None) -> list[AuditEntry]:
        """Entries newest first, those older than the entry id `before` when given."""
        ...

    async def save_bodies(self, generation_id: str, at: float, bodies: Bodies, ttl_s: float) -> None: ...

    async def bodies(self, generation_id: str) -> Bodies | None: ...

    async def prune(self, now: float, body_retention_s: float) -> int:
        """Drop rollup buckets past their resolution's retention and bodies past `body_retention_s`."""
        ...

    async def session_secret(self, candidate: bytes) -> bytes:
        """The console's session-signing secret: the one stored, or `candidate`, stored now, when
        there is none yet (of several instances starting at once, the first write wins and every
        one reads it back)."""
        ...
