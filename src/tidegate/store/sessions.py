"""Agent sessions over the generation records (docs/sessions.md): one row per
`agent_session` seen since a time, behind a protocol of its own (`SessionStore`), apart from
`GenerationStore`. The SQL stores group by the record's `agent_session` column (indexed with
`created_at`, migration 0010, and after `key_id` for a key's own list, migration 0012); Redis keeps
zsets of session records by time, per key and for all keys (store/redis/sessions.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from .console import ERROR_STATUSES

# a session's requests that failed: the statuses the console's error rate counts (store/console.py)
_FAILED_SQL = "(" + ", ".join(f"'{s}'" for s in sorted(ERROR_STATUSES)) + ")"


@dataclass(frozen=True, slots=True)
class SessionSummary:
    session: str
    agent: str
    requests: int
    input_tokens: int
    output_tokens: int
    cost: float
    first_at: float
    last_at: float
    models: list[str]
    failed: int = 0  # its requests that failed or were interrupted: a session can fail with no token

    def public(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "agent": self.agent,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": round(self.cost, 10),
            "first_at": self.first_at,
            "last_at": self.last_at,
            "models": self.models,
            "failed": self.failed,
        }


class SessionStore(Protocol):
    async def sessions(self, since: float, key_id: str | None, limit: int) -> list[SessionSummary]:
        """The sessions with a record created at or after `since` (of one key when `key_id` is
        given), the most recently active first."""
        ...


def sessions_sql(p: Callable[[int], str], by_key: bool, tokens: Callable[[str], str], agent: str) -> str:
    """The grouping query: `p(i)` the i-th placeholder, `tokens(name)` a usage field as an integer,
    `agent` the hints' agent as text. A session's agent is the one named by any of its requests
    (`other` only when none was)."""
    where = f"agent_session IS NOT NULL AND created_at >= {p(1)}" + (f" AND key_id = {p(3)}" if by_key else "")
    return (
        f"SELECT agent_session, count(*), sum({tokens('prompt_tokens')}), sum({tokens('completion_tokens')}),"
        f" sum(cost), min(created_at), max(created_at), min(CASE WHEN {agent} = 'other' THEN NULL ELSE {agent} END),"
        f" sum(CASE WHEN status IN {_FAILED_SQL} THEN 1 ELSE 0 END)"
        f" FROM generations WHERE {where} GROUP BY agent_session ORDER BY max(created_at) DESC LIMIT {p(2)}"
    )


def models_sql(p: Callable[[int], str], count: int, by_key: bool = False) -> str:
    """Each listed session's models (a second query: the two SQL dialects aggregate strings apart);
    `by_key`: of the key's own records only (placeholder `count + 2`), as its groups are, since two
    keys may name a session alike."""
    names = ", ".join(p(i + 2) for i in range(count))
    key = f" AND key_id = {p(count + 2)}" if by_key else ""
    return (
        f"SELECT DISTINCT agent_session, model FROM generations WHERE created_at >= {p(1)}"
        f" AND agent_session IN ({names}){key} ORDER BY model"
    )


def summaries(groups: Iterable[Any], models: Iterable[Any]) -> list[SessionSummary]:
    by_session: dict[str, list[str]] = {}
    for session, model in models:
        by_session.setdefault(session, []).append(model)
    return [
        SessionSummary(
            session=row[0],
            agent=row[7] or "other",
            requests=int(row[1]),
            input_tokens=int(row[2] or 0),
            output_tokens=int(row[3] or 0),
            cost=float(row[4] or 0.0),
            first_at=float(row[5]),
            last_at=float(row[6]),
            models=by_session.get(row[0], []),
            failed=int(row[8] or 0),
        )
        for row in groups
    ]


def summarise_records(
    records: Iterable[dict[str, Any]], since: float, key_id: str | None, limit: int
) -> list[SessionSummary]:
    """The same grouping over records read whole (Redis): `agent_session`, `hints`, `model`,
    `usage`, `cost`, `created_at`, `key_id`, `status` of each."""
    groups: dict[str, list[Any]] = {}
    models: set[tuple[str, str]] = set()
    for r in records:
        session, created = r.get("agent_session"), float(r.get("created_at") or 0.0)
        if not session or created < since or (key_id is not None and r.get("key_id") != key_id):
            continue
        usage, agent = r.get("usage") or {}, (r.get("hints") or {}).get("agent")
        g = groups.setdefault(session, [session, 0, 0, 0, 0.0, created, created, None, 0])
        g[1] += 1
        g[2] += int(usage.get("prompt_tokens") or 0)
        g[3] += int(usage.get("completion_tokens") or 0)
        g[4] += float(r.get("cost") or 0.0)
        g[5], g[6] = min(g[5], created), max(g[6], created)
        g[8] += r.get("status") in ERROR_STATUSES
        if agent and agent != "other" and (g[7] is None or agent < g[7]):
            g[7] = agent
        models.add((session, str(r.get("model"))))
    listed = sorted(groups.values(), key=lambda g: -g[6])[:limit]
    names = {g[0] for g in listed}
    return summaries(listed, sorted((m for m in models if m[0] in names), key=lambda m: m[1]))
