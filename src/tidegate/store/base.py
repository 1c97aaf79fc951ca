"""The `GenerationStore` protocol and the records it keeps."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..events import UsageReport
from .admit import Ask, Decision

GENERATION_STATUSES = ("in_progress", "completed", "failed", "cancelled", "interrupted")


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's rate limits (docs/api-operations.md §11); None: no such limit."""

    rpm: int | None = None
    tpm: int | None = None
    concurrent: int | None = None

    def any(self) -> bool:
        return self.rpm is not None or self.tpm is not None or self.concurrent is not None


@dataclass(slots=True)
class ApiKey:
    id: str
    name: str
    secret_hash: str
    created_at: float
    credits: float | None = None  # None = unlimited
    spent: float = 0.0  # in the current budget period
    revoked: bool = False
    is_master: bool = False
    budget_period: str | None = None  # None | "daily" | "monthly" (UTC)
    limits: KeyLimits = KeyLimits()
    models: tuple[str, ...] | None = None  # the model ids it may use; None: all
    expires_at: float | None = None
    admin: bool = False
    log_bodies: bool = False  # keep its generations' request and answer (docs/security.md)
    metadata: dict[str, Any] = field(default_factory=dict)
    # the jurisdictions this key's requests may be served in (docs/api-operations.md §12; None: any)
    jurisdictions: tuple[str, ...] | None = None
    period_start: float = 0.0  # the budget period `spent` counts (0: none yet)
    # the response cache's own setting (docs/api-edges.md §18): {ttl_s, max_bytes}; false: off; None: the model's
    cache: dict[str, Any] | bool | None = None
    reserved: float = 0.0  # the live reservations' sum, as last read (display only)

    def __repr__(self) -> str:  # never the hash: logs and tracebacks show the public id
        return f"ApiKey(id={self.id!r}, name={self.name!r})"

    @property
    def needs_admission(self) -> bool:
        """Whether a generation must pass the store's admission (credits or limits to hold)."""
        return self.credits is not None or self.limits.any()

    def settings(self) -> dict[str, Any]:
        """What the stores keep as one JSON document beside the counters."""
        return {
            "budget_period": self.budget_period,
            "limits": {"rpm": self.limits.rpm, "tpm": self.limits.tpm, "concurrent": self.limits.concurrent},
            "models": list(self.models) if self.models is not None else None,
            "expires_at": self.expires_at,
            "admin": self.admin,
            "log_bodies": self.log_bodies,
            "metadata": self.metadata,
            "jurisdictions": list(self.jurisdictions) if self.jurisdictions is not None else None,
            "cache": self.cache,
        }

    def apply_settings(self, settings: dict[str, Any]) -> None:
        limits = settings.get("limits") or {}
        self.budget_period = settings.get("budget_period")
        self.limits = KeyLimits(limits.get("rpm"), limits.get("tpm"), limits.get("concurrent"))
        models, juris = settings.get("models"), settings.get("jurisdictions")
        self.models = tuple(models) if models is not None else None
        self.expires_at = settings.get("expires_at")
        self.admin = bool(settings.get("admin", False))
        self.log_bodies = bool(settings.get("log_bodies", False))
        self.metadata = dict(settings.get("metadata") or {})
        self.jurisdictions = tuple(juris) if juris is not None else None
        self.cache = settings.get("cache")

    def public(self) -> dict[str, Any]:
        """The key as the admin API shows it (docs/api-operations.md §11): never the secret or its hash."""
        return {
            "id": self.id,
            "object": "api_key",
            "name": self.name,
            "credits": self.credits,
            "spent": round(self.spent, 10),
            "reserved": round(self.reserved, 10),
            **self.settings(),
            "created_at": self.created_at,
            "revoked": self.revoked,
        }


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


USAGE_FIELDS = (
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "reasoning_tokens",
    "cached_tokens",
    "cache_write_tokens",
)


def usage_of(report: UsageReport) -> Usage:
    """The record's usage fields from a usage report: what the recorder stores and the native door shows."""
    return Usage(
        prompt_tokens=report.prompt,
        completion_tokens=report.completion,
        total_tokens=report.total,
        reasoning_tokens=report.reasoning,
        cached_tokens=report.cached,
        cache_write_tokens=report.cache_write,
    )


def usage_from_dict(stored: dict[str, Any]) -> Usage:
    """A stored usage; keys this version does not know (a newer gateway's, mid rolling upgrade) are skipped."""
    return Usage(**{k: v for k, v in stored.items() if k in USAGE_FIELDS})


def usage_dict(u: Usage) -> dict[str, int | None]:
    """`u`'s fields by name, in order: what the stores keep. (Neither `dataclasses.asdict`, which
    deep-copies, nor orjson on the dataclass, which first tries `__dict__` on a slots class and
    builds and drops a formatted AttributeError.)"""
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "reasoning_tokens": u.reasoning_tokens,
        "cached_tokens": u.cached_tokens,
        "cache_write_tokens": u.cache_write_tokens,
    }


CACHE_HIT_REASON = "cache hit: the answer of generation "  # then the original's id (gateway/cache.py)


@dataclass(slots=True)
class GenerationRecord:
    id: str
    key_id: str
    model: str
    door: str
    created_at: float
    status: str = "in_progress"
    idempotency_key: str | None = None
    request_hash: str | None = None
    provider: str | None = None
    served_model: str | None = None
    attempts: int = 0
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    usage_estimated: bool = False
    cost: float = 0.0
    output_text: str = ""
    error: dict[str, Any] | None = None
    ttft_ms: float | None = None
    duration_ms: float | None = None
    owner: str = ""  # the gateway instance (process start) running it; its lease keeps the record alive
    # why these routes, in this order (docs/api-operations.md §12); written once at begin
    route_reason: str | None = None
    # buffered MCP generations: each call's server, tool, arguments size, duration and error (§13)
    mcp_calls: list[dict[str, Any]] | None = None
    reasoning_text: str = ""  # the readable reasoning, apart from the answer (the console shows both)
    # [ms since the request, answer characters, reasoning characters] at each flusher round while it
    # streamed: the pace the console replays it at (gateway/recorder.py, `sample_pace`)
    pace: list[list[int]] | None = None
    # the agent session and the hints it came with (server/hints.py); written once at begin
    agent_session: str | None = None
    hints: dict[str, Any] | None = None

    def public(self) -> dict[str, Any]:
        """The JSON of `GET /api/v1/generations/{id}` (docs/api-operations.md §7)."""
        return {
            "id": self.id,
            "status": self.status,
            "model": self.model,
            "provider": self.provider,
            "served_model": self.served_model,
            "attempts": self.attempts,
            "finish_reason": self.finish_reason,
            "usage": asdict(self.usage),
            "usage_estimated": self.usage_estimated,
            "cost": self.cost,
            "output_text": self.output_text,
            "error": self.error,
            "created_at": self.created_at,
            "ttft_ms": self.ttft_ms,
            "duration_ms": self.duration_ms,
            "route_reason": self.route_reason,
            "reasoning_text": self.reasoning_text,
            "pace": self.pace,
            "agent_session": self.agent_session,
            "hints": self.hints,
            **({"mcp_calls": self.mcp_calls} if self.mcp_calls is not None else {}),
            **({"cached_from": cached} if (cached := self.cached_from) is not None else {}),
        }

    @property
    def cached_from(self) -> dict[str, Any] | None:
        """A cache hit's original (docs/api-edges.md §18): its generation id, which the hit's
        `route_reason` names, and its usage, which the hit served again as its own."""
        if self.provider != "cache" or not (self.route_reason or "").startswith(CACHE_HIT_REASON):
            return None
        return {"generation_id": (self.route_reason or "")[len(CACHE_HIT_REASON) :], "usage": asdict(self.usage)}


@dataclass(frozen=True, slots=True)
class BeginResult:
    """What `begin_generation` found for an Idempotency-Key.

    outcome: `created` (a new generation; the key now points to it), `in_progress` / `completed`
    (same key, same body: `record` is the existing one), `mismatch` (same key, different body).
    """

    outcome: str
    record: GenerationRecord


INTERRUPTED_ERROR: dict[str, Any] = {
    "code": "interrupted",
    "message": "the gateway instance running this generation stopped (its lease expired) before it finished",
}

LOG_FRAME = "f"  # the door's wire frames, index = SSE id
LOG_JSON = "j"  # a non-stream answer body
LOG_EVENT = "e"  # canonical events (replay re-renders them in another format)
# who serves, once the answer commits: {"provider", "served_model", "attempts"} (one entry per commit;
# the last one holds): a record whose owner died keeps them (gateway/recovery.py)
LOG_COMMIT = "c"


@dataclass(frozen=True, slots=True)
class LogRun:
    """Log entries of one kind with consecutive seqs: `items[i]` is entry `first_seq + i`.

    A recorder's flush hands over one run per kind: a per-entry (kind, seq) tuple cost more than the
    entry's own bytes at an unpaced stream's rate, and every store groups the entries by kind anyway."""

    kind: str
    first_seq: int
    items: list[bytes]

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.items) - 1


class LogTail(Protocol):
    """A follower's wait for a generation's next log entries or outcome (`GenerationStore.follow`)."""

    async def wait(self) -> None:
        """Until something may have changed: an append or an outcome was announced (a store that
        pushes), or a short poll interval passed (one that does not). Never raises on a timeout."""
        ...


POLL_INTERVAL_S = 0.1


class PollingTail:
    """For a store without push: a follower looks again every `POLL_INTERVAL_S`."""

    async def wait(self) -> None:
        await asyncio.sleep(POLL_INTERVAL_S)


@contextlib.asynccontextmanager
async def polling_follow(_generation_id: str) -> AsyncIterator[LogTail]:
    yield PollingTail()


class SharedRouteHealth(Protocol):
    """Route health shared by the instances of one store (gateway/health.py)."""

    async def route_failed(self, route: str, threshold: int, open_s: float) -> float | None: ...

    async def route_recovered(self, route: str) -> None: ...

    async def open_routes(self, routes: list[str]) -> dict[str, float]: ...

    async def claim_probe(self, route: str, ttl_s: float) -> bool:
        """The one half-open probe of an open route, for this instance (True) or another (False)."""
        ...

    async def recovered_routes(self, routes: list[str]) -> set[str]:
        """The routes no failure is counted against (a probe succeeded, or none failed lately)."""
        ...


class Lifecycle(Protocol):
    """A store's life: connect, answer a health check, forget what is past keeping."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> bool: ...

    async def prune(self, older_than: float) -> int:
        """Forget idempotency keys and event logs older than `older_than` (unix time); records stay (the
        ledger). Returns the number of keys forgotten."""
        ...


class KeyStore(Protocol):
    """API keys and admission (docs/keys.md): the keys, their credits and limits, the usage report."""

    async def create_key(self, key: ApiKey) -> None: ...

    async def find_key_by_hash(self, secret_hash: str) -> ApiKey | None: ...

    async def list_keys(self) -> list[ApiKey]: ...

    async def revoke_key(self, key_id_or_name: str) -> bool: ...

    async def count_keys(self) -> int: ...

    async def get_key(self, key_id: str) -> ApiKey | None:
        """The key with `reserved` summed over its live reservations."""
        ...

    async def save_key(self, key: ApiKey) -> bool:
        """Write what an admin may change (name, credits, revoked, settings); never the counters.
        False when there is no such key."""
        ...

    async def top_up(self, key_id: str, amount: float) -> ApiKey | None:
        """Atomically add `amount` USD to a key's credits (not an unlimited key's: None)."""
        ...

    async def admit(self, ask: Ask, now: float) -> Decision:
        """docs/api-operations.md §11's admission in one transaction (store/admit.py): roll the budget period,
        check concurrency, rate limits and credits against every instance's live reservations, and
        when admitted record the reservation and the limits' new state."""
        ...

    async def settle(self, key_id: str, generation_id: str, cost: float, tokens: int, period_floor: float) -> None:
        """A generation ended: its reservation (if any) goes, `cost` is spent (in the period of
        `period_floor`), and the tokens limit counts `tokens` instead of the reserved ones."""
        ...

    async def usage(self, start: float, end: float, group_by: str) -> list[dict[str, Any]]:
        """docs/api-operations.md §11's usage report over the records created in [start, end)."""
        ...


class RecordStore(Protocol):
    """Generation records (the ledger) and their idempotency keys."""

    async def create_generation(self, record: GenerationRecord) -> None: ...

    async def begin_generation(self, record: GenerationRecord) -> BeginResult:
        """Atomically: honour `record.idempotency_key` (scoped to `record.key_id`) and create the record
        durable with status in_progress, unless a same-key generation must be answered instead."""
        ...

    async def find_idempotent(self, key_id: str, idempotency_key: str) -> GenerationRecord | None: ...

    async def update_generation(self, record: GenerationRecord, log: list[LogRun] | None = None) -> bool:
        """Write the record's outcome: status, provider, served model, attempts, finish reason, usage,
        cost, output, error and timings. Its identity (key, model, door, creation time, idempotency key,
        request hash, owner) is written once, when it is created, and never changes.

        Only a record still `in_progress` takes an outcome: one a lease sweep marked `interrupted`
        (its owner was paused or cut off past its lease) keeps that outcome. Returns whether the
        outcome was written.

        `log`: the generation's last log runs (as `append_log` takes them), written with the
        outcome and never after it: a reader that sees the outcome finds the whole log. One write
        for both where the store can (the end of every generation that keeps logs)."""
        ...

    async def get_generation(self, generation_id: str) -> GenerationRecord | None: ...

    async def recent_generations(self, limit: int, key_id: str | None = None) -> list[GenerationRecord]:
        """The newest `limit` records (of one key when `key_id` is given), newest first."""
        ...


class LogStore(Protocol):
    """A generation's logs (frames, events, the JSON answer) and their live followers."""

    async def append_log(self, generation_id: str, runs: list[LogRun]) -> None:
        """Append runs of entries to a generation's logs. Runs of one kind never overlap, but for one
        entry written again at the same seq (the JSON answer at 0), which replaces the first."""
        ...

    async def read_log(self, generation_id: str, kind: str, after_seq: int = -1) -> list[tuple[int, bytes]]: ...

    def follow(self, generation_id: str) -> contextlib.AbstractAsyncContextManager[LogTail]:
        """A live follower's wait (another process runs the generation). Entered before the
        follower's first read, so nothing appended after that read goes unannounced."""
        ...


class LeaseStore(Protocol):
    """Leases (docs/api-operations.md §10): every gateway process start is an owner with a lease it renews."""

    async def renew_lease(self, owner: str, ttl_s: float) -> bool:
        """Create or extend `owner`'s lease to expire `ttl_s` from now (the store's clock where it has
        one). Returns False when `owner` held no lease: its first renewal, or a lease that expired and
        was swept meanwhile (its generations are `interrupted` by then)."""
        ...

    async def release_lease(self, owner: str) -> None:
        """`owner` stops: what it still has running becomes `interrupted` and its lease goes."""
        ...

    async def sweep_leases(self, *, orphans: bool = False) -> int:
        """Generations `in_progress` whose owner's lease expired become `interrupted` (the error
        `{"code": "interrupted"}`; the partial output is what their logs hold), and the expired
        leases go. `orphans`: also those whose owner never held a lease (records of versions before
        leases; a starting gateway asks once). Returns how many records were marked."""
        ...


class RouteHealthSource(Protocol):
    """Where route health is shared between instances."""

    def route_health(self) -> SharedRouteHealth | None:
        """Where instances sharing this store share route health (breakers), or None: each process
        keeps its own."""
        ...


class RecordsAndLogs(RecordStore, LogStore, Protocol):
    """What a running generation writes (gateway/recorder.py) and a follower reads."""


class GenerationStore(Lifecycle, KeyStore, RecordStore, LogStore, LeaseStore, RouteHealthSource, Protocol):
    """Everything tidegate persists: every role above. Every implementation passes the same test
    suite; a consumer is typed with the role it uses."""
