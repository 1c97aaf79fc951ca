"""The records the stores keep and the gateway hands them: keys, generations, usage, log runs.

A foundation module: renderers, doors and the gateway read these types without importing a store."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .events import UsageReport

# `rejected`: refused before a generation began (auth, validation, an unknown model, a limit): the
# record of server/rejections.py, which holds the HTTP status and error code in `error`
GENERATION_STATUSES = ("in_progress", "completed", "failed", "cancelled", "interrupted", "rejected")


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
    # what the serving route left out of the request (hosted tools, Gemini's topK): X-Tidegate-Dropped's names
    dropped: list[str] | None = None
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
            **({"dropped": self.dropped} if self.dropped is not None else {}),
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
