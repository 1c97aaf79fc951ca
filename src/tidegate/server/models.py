"""`GET /v1/models`: the catalog (id, owned_by, type, capabilities, pricing)."""

from __future__ import annotations

from typing import Any

from ..config.model import Config
from .http import Request


def catalog(config: Config) -> dict[str, Any]:
    data: list[dict[str, Any]] = []
    for m in config.models.values():
        entry: dict[str, Any] = {
            "id": m.id,
            "object": "model",
            "created": 0,
            "owned_by": m.owned_by or (m.routes[0].provider if m.routes else "tidegate"),
            "type": m.type,
            "capabilities": list(m.capabilities) or [m.type],
            "pricing": {
                "prompt": m.pricing.prompt if m.pricing else None,
                "completion": m.pricing.completion if m.pricing else None,
                "unit": "USD per 1M tokens",
            },
            "providers": [r.provider for r in m.routes],
        }
        if m.context_length:
            entry["context_length"] = m.context_length
        if m.type == "router":
            entry["owned_by"] = m.owned_by or "tidegate"
            entry["candidates"] = list(m.candidates)
            entry["policy"] = m.policy
        elif m.strategy != "ordered":
            entry["strategy"] = m.strategy
        data.append(entry)
    return {"object": "list", "data": data}


async def list_models(req: Request, config: Config) -> None:
    await req.respond_json(200, catalog(config))
