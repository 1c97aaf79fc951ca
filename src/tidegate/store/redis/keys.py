"""API keys on Redis: the key hash's fields, and the key methods' bodies `RedisStore` delegates to.

Layout (under the store's prefix): `key:{id}` hash, each field JSON-encoded (`settings` one JSON
document; the counters `spent`, `period_start`, `rpm_tat`, `tpm_tat` numbers), `keyhash:{hash}` -> id,
`keys` zset of ids by created_at, `resv:{id}` hash of the key's live reservations (generation id ->
`{"owner", "amount", "tokens"}`; one whose owner's `lease:` key expired is dropped by the next
admission). Admission and settlement are Lua scripts (store/redis/scripts.py) on Redis's clock, so
every gateway sharing the Redis shares the limits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ...records import ApiKey
from ..admit import Decision

Run = Callable[[str, list[str], list[Any]], Awaitable[Any]]
KEY_FIELDS = ("id", "name", "secret_hash", "created_at", "credits", "spent", "revoked", "settings", "period_start")


def fields_of(key: ApiKey) -> list[Any]:
    """The hash's field/value pairs for a new key."""
    values = [
        key.id,
        key.name,
        key.secret_hash,
        key.created_at,
        key.credits,
        key.spent,
        key.revoked,
        key.settings(),
        key.period_start,
    ]
    pairs: list[Any] = []
    for name, value in zip(KEY_FIELDS, values, strict=True):
        pairs += [name, orjson.dumps(value)]
    return pairs


def admin_fields(key: ApiKey) -> list[Any]:
    """What an admin's change writes (never the counters admission keeps)."""
    return [
        "name",
        orjson.dumps(key.name),
        "credits",
        orjson.dumps(key.credits),
        "revoked",
        orjson.dumps(key.revoked),
        "settings",
        orjson.dumps(key.settings()),
    ]


def key_from(values: dict[str, Any]) -> ApiKey:
    key = ApiKey(
        id=values["id"],
        name=values["name"],
        secret_hash=values["secret_hash"],
        created_at=values["created_at"],
        credits=values["credits"],
        spent=float(values["spent"]),
        revoked=bool(values["revoked"]),
        period_start=float(values.get("period_start") or 0.0),
    )
    key.apply_settings(values.get("settings") or {})
    return key


def live_reserved(held: dict[Any, Any], alive: set[str]) -> float:
    """The sum of the reservations whose owner holds a lease (`alive`)."""
    total = 0.0
    for raw in held.values():
        entry = orjson.loads(raw)
        if entry["owner"] in alive:
            total += float(entry["amount"])
    return total


def decision_from(raw: bytes | str) -> Decision:
    d = orjson.loads(raw)
    rates = d.get("rates") or {}
    return Decision(
        admitted=bool(d.get("admitted")),
        refusal=d.get("refusal"),
        retry_after=d.get("retry_after"),
        rates={name: (int(v[0]), int(v[1]), float(v[2])) for name, v in rates.items()},
        balance=d.get("balance"),
    )


def usage_groups(records: list[dict[str, Any]], start: float, end: float, group_by: str) -> list[dict[str, Any]]:
    """docs/api-operations.md §11's report over decoded records (Redis has no SQL to group them)."""
    import time

    groups: dict[Any, dict[str, Any]] = {}
    for r in records:
        created = float(r.get("created_at") or 0.0)
        if not start <= created < end or r.get("status") == "rejected":  # refused: nothing to bill
            continue
        if group_by == "day":
            name: Any = time.strftime("%Y-%m-%d", time.gmtime(created))
        else:
            name = r.get({"key": "key_id", "model": "model", "provider": "provider"}[group_by])
        g = groups.setdefault(
            name,
            {
                "group": name,
                "requests": 0,
                "failures": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cost": 0.0,
                "estimated_requests": 0,
            },
        )
        usage = r.get("usage") or {}
        g["requests"] += 1
        g["failures"] += r.get("status") in ("failed", "interrupted")
        g["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        g["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        g["cost"] += float(r.get("cost") or 0.0)
        g["estimated_requests"] += bool(r.get("usage_estimated"))
    out = sorted(groups.values(), key=lambda g: (g["group"] is None, str(g["group"])))
    for g in out:
        g["cost"] = round(g["cost"], 10)
    return out
