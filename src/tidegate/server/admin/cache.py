"""The response cache's admin API (docs/api-edges.md §18): `DELETE /api/v1/cache` purges entries
(`?model=`, `?key_id=`, both, or all), `GET /api/v1/cache/stats?since=` sums its counters for the
console (hit rate and money saved); admin or master key only."""

from __future__ import annotations

import time
from typing import Any

from ...errors import Forbidden, InvalidRequest, MethodNotAllowed
from ...records import ApiKey
from ...store.cache import CacheCounts
from ..door import response_cache
from ..http import Request
from ..state import AppState
from . import audit

DEFAULT_SINCE_S = 86400.0  # without `since`: the last day


def _admin(key: ApiKey, what: str) -> None:
    if not (key.is_master or key.admin):
        raise Forbidden(f'{what} is an admin endpoint: use the master key or a key with "admin": true')


async def purge(req: Request, state: AppState, key: ApiKey) -> None:
    _admin(key, "/api/v1/cache")
    if req.method != "DELETE":
        raise MethodNotAllowed("use DELETE /api/v1/cache[?model=...][&key_id=...]")
    model, key_id = req.query("model") or None, req.query("key_id") or None
    purged = await response_cache(state).store.purge(model=model, key_id=key_id)
    target = " ".join(f"{n}={v}" for n, v in (("model", model), ("key_id", key_id)) if v) or "all"
    await audit.record(state, key, "cache.purge", target, {"model": model, "key_id": key_id, "purged": purged})
    await req.respond_json(200, {"object": "cache.purge", "purged": purged, "model": model, "key_id": key_id})


def _since(req: Request) -> float:
    raw = req.query("since")
    if raw is None:
        return time.time() - DEFAULT_SINCE_S
    try:
        since = float(raw)
    except ValueError:
        raise InvalidRequest("since: Unix seconds expected") from None
    if not 0 <= since < 1e11:
        raise InvalidRequest("since: Unix seconds expected")
    return since


async def stats(req: Request, state: AppState, key: ApiKey) -> None:
    """Counted per hour: `since` reaches back to the start of its hour."""
    _admin(key, "/api/v1/cache/stats")
    since = _since(req)
    rows = await response_cache(state).store.counts(since)
    total, by_model, by_key = CacheCounts(), dict[str, CacheCounts](), dict[str, CacheCounts]()
    for row in rows:
        total.add(row.counts)
        by_model.setdefault(row.model, CacheCounts()).add(row.counts)
        by_key.setdefault(row.key_id, CacheCounts()).add(row.counts)

    def listed(groups: dict[str, CacheCounts], name: str) -> list[dict[str, Any]]:
        ordered = sorted(groups.items(), key=lambda kv: (-kv[1].saved_cost, -kv[1].hits, kv[0]))
        return [{name: group, **counts.public()} for group, counts in ordered]

    body = {"since": since, **total.public(), "by_model": listed(by_model, "model"), "by_key": listed(by_key, "key_id")}
    await req.respond_json(200, body)
