"""`GET /api/v1/routes` (admin): each configured route's breaker state and live stats (docs/api-operations.md §12)."""

from __future__ import annotations

from typing import Any

from ...errors import Forbidden
from ...gateway.health import route_key
from ...records import ApiKey
from ..http import Request
from ..state import AppState


def routes_view(state: AppState) -> dict[str, Any]:
    router = state.gateway.router
    data: list[dict[str, Any]] = []
    for m in state.config.models.values():
        if m.type not in ("chat",):
            continue
        for r in m.routes:
            key = route_key(r.provider, r.model)
            provider = state.config.providers[r.provider]
            data.append(
                {
                    "model": m.id,
                    "provider": r.provider,
                    "served_model": r.model,
                    "route": key,
                    "strategy": m.strategy,
                    "weight": r.weight,
                    "region": provider.region,
                    "jurisdiction": provider.jurisdiction,
                    **router.health.snapshot(key),
                }
            )
    return {"object": "list", "data": data}


async def list_routes(req: Request, state: AppState, key: ApiKey) -> None:
    if not (key.is_master or key.admin):
        raise Forbidden("GET /api/v1/routes is an admin endpoint: use the master key or an admin key")
    await req.respond_json(200, routes_view(state))
