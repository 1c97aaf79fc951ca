"""The column layout of records and keys shared by the SQL stores (SQLite, PostgreSQL)."""

from __future__ import annotations

from typing import Any

import orjson

from ..records import ApiKey, GenerationRecord, usage_dict, usage_from_dict

GEN_COLUMNS = (
    "id, key_id, model, door, created_at, status, idempotency_key, request_hash, provider, served_model, "
    "attempts, finish_reason, usage, usage_estimated, cost, output_text, error, ttft_ms, duration_ms, mcp_calls, "
    "reasoning_text, pace, dropped, owner, route_reason, agent_session, hints"
)
GEN_COUNT = 27


def recent_sql(placeholder: str, by_key: bool) -> str:
    """The newest records first (`?` for SQLite, `$` for PostgreSQL's numbered parameters); the
    created_at index serves it."""
    p1, p2 = ("?", "?") if placeholder == "?" else ("$1", "$2")
    where = f" WHERE key_id = {p1}" if by_key else ""
    limit = p2 if by_key else p1
    return f"SELECT {GEN_COLUMNS} FROM generations{where} ORDER BY created_at DESC LIMIT {limit}"


KEY_COLUMNS = "id, name, secret_hash, created_at, credits, spent, revoked, settings, period_start"
# What a generation's final update may change: its identity (key, model, door, creation time, request hash,
# idempotency key, owner) is written once. Leaving those out of the UPDATE matters in SQLite: every
# column named in SET rewrites the index entries over it (`created_at`) even when the value is equal.
FINAL_COLUMNS = (
    "status, provider, served_model, attempts, finish_reason, usage, usage_estimated, cost, output_text, "
    "error, ttft_ms, duration_ms, mcp_calls, reasoning_text, pace, dropped"
)


def _outcome(r: GenerationRecord) -> tuple[Any, ...]:
    """The record's FINAL_COLUMNS values; `usage`, `error`, `mcp_calls`, `pace` and `dropped` as JSON text."""
    return (
        r.status,
        r.provider,
        r.served_model,
        r.attempts,
        r.finish_reason,
        orjson.dumps(usage_dict(r.usage)).decode(),
        r.usage_estimated,
        float(r.cost),
        r.output_text,
        orjson.dumps(r.error).decode() if r.error is not None else None,
        r.ttft_ms,
        r.duration_ms,
        orjson.dumps(r.mcp_calls).decode() if r.mcp_calls is not None else None,
        r.reasoning_text,
        orjson.dumps(r.pace).decode() if r.pace is not None else None,
        orjson.dumps(r.dropped).decode() if r.dropped is not None else None,
    )


def record_params(r: GenerationRecord) -> tuple[Any, ...]:
    """The record as GEN_COLUMNS values."""
    status, *rest = _outcome(r)
    return (
        r.id,
        r.key_id,
        r.model,
        r.door,
        float(r.created_at),
        status,
        r.idempotency_key,
        r.request_hash,
        *rest,
        r.owner,
        r.route_reason,
        r.agent_session,
        orjson.dumps(r.hints).decode() if r.hints is not None else None,
    )


def final_params(r: GenerationRecord) -> tuple[Any, ...]:
    """The record's FINAL_COLUMNS values, then its id."""
    return (*_outcome(r), r.id)


def record_from_row(row: Any) -> GenerationRecord:
    return GenerationRecord(
        id=row[0],
        key_id=row[1],
        model=row[2],
        door=row[3],
        created_at=row[4],
        status=row[5],
        idempotency_key=row[6],
        request_hash=row[7],
        provider=row[8],
        served_model=row[9],
        attempts=row[10],
        finish_reason=row[11],
        usage=usage_from_dict(orjson.loads(row[12])),
        usage_estimated=bool(row[13]),
        cost=row[14],
        output_text=row[15],
        error=orjson.loads(row[16]) if row[16] else None,
        ttft_ms=row[17],
        duration_ms=row[18],
        mcp_calls=orjson.loads(row[19]) if row[19] else None,
        reasoning_text=row[20] or "",
        pace=orjson.loads(row[21]) if row[21] else None,
        dropped=orjson.loads(row[22]) if row[22] else None,
        owner=row[23],
        route_reason=row[24],
        agent_session=row[25],
        hints=orjson.loads(row[26]) if row[26] else None,
    )


def key_from_row(row: Any) -> ApiKey:
    key = ApiKey(
        id=row[0],
        name=row[1],
        secret_hash=row[2],
        created_at=row[3],
        credits=row[4],
        spent=row[5],
        revoked=bool(row[6]),
        period_start=row[8],
    )
    key.apply_settings(orjson.loads(row[7]))
    return key


def key_params(key: ApiKey) -> tuple[Any, ...]:
    """KEY_COLUMNS' values for an INSERT."""
    return (
        key.id,
        key.name,
        key.secret_hash,
        float(key.created_at),
        None if key.credits is None else float(key.credits),
        float(key.spent),
        key.revoked,
        orjson.dumps(key.settings()).decode(),
        float(key.period_start),
    )


# docs/api-operations.md §11's usage groups: the SQL expression each groups by (`{day}`: the store's own UTC date)
USAGE_GROUPS = {"key": "key_id", "model": "model", "provider": "provider", "day": "{day}"}
FAILED_STATUSES = "('failed', 'interrupted')"


def usage_row(row: Any) -> dict[str, Any]:
    """One group of the usage report from (group, requests, failures, prompt, completion, cost, estimated)."""
    return {
        "group": row[0],
        "requests": int(row[1]),
        "failures": int(row[2] or 0),
        "prompt_tokens": int(row[3] or 0),
        "completion_tokens": int(row[4] or 0),
        "cost": round(float(row[5] or 0.0), 10),
        "estimated_requests": int(row[6] or 0),
    }
