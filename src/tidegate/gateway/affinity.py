"""Prompt-cache affinity (docs/routing.md, "Prompt-cache affinity"): a request that shares an agent
session, a `prompt_cache_key` or a prompt prefix with an earlier one prefers the route that served
it, while the provider's prompt cache can still hold that prefix.

Once per request, before the relay starts: the affinity key (the tenant, the model, then the
session or else a hash of the prompt's prefix) is looked up in the store (`store/affinity.py`,
shared by the instances of that store), and the affine route, when it is among the routes the
request's routing allowed and its breaker is closed (gateway/health.py), moves to the front. It
never adds a route. Once per request, when it completes: the route that served it is remembered
for the provider's cache lifetime (`affinity_ttl_s`, or `affinity_long_ttl_s` with a
`ttl: "1h"` breakpoint). A model with one allowed route, or a request with no session and no
prefix a provider would cache, skips all of it (no store call).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import Any

import orjson

from .. import metrics
from ..config.server import ServerConfig
from ..request import GenerationRequest
from ..store.affinity import AffinityStore
from ..store.base import GenerationStore
from ..store.facets import affinity_of
from .health import CLOSED, Health
from .router import Resolved

PREFIX_BYTES = 8192  # the prompt prefix hashed when there is no cache breakpoint: its first 8 KB
# a shorter prefix without a breakpoint is not cached by providers (OpenAI and Anthropic cache from
# 1,024 tokens, about 4 KB): no affinity, so identical short prompts keep the pool's own spread
MIN_PREFIX_BYTES = 4096


@dataclass(frozen=True, slots=True)
class AffinityPlan:
    """What one request's affinity decided: its key, how long its route is kept, hit or miss."""

    key: str
    ttl_s: float
    result: str  # "hit": the remembered route serves first; "miss": normal routing


def _breakpoints(request: GenerationRequest) -> tuple[int, bool]:
    """The index of the last message with a `cache_control` breakpoint (-1: none), and whether any
    breakpoint asks for the one-hour cache."""
    last, long_ttl = -1, False
    for i, message in enumerate(request.messages):
        content = message.get("content")
        parts = content if isinstance(content, list) else [message]
        for part in parts:
            marker = part.get("cache_control") if isinstance(part, dict) else None
            if isinstance(marker, dict):
                last = i
                long_ttl = long_ttl or marker.get("ttl") == "1h"
    return last, long_ttl


def _prefix(request: GenerationRequest, last_breakpoint: int) -> list[dict[str, Any]]:
    """The messages a provider caches: up to the last breakpoint, else the leading system and
    developer messages and the first other one (what every turn of a conversation repeats)."""
    if last_breakpoint >= 0:
        return request.messages[: last_breakpoint + 1]
    out: list[dict[str, Any]] = []
    for message in request.messages:
        out.append(message)
        if message.get("role") not in ("system", "developer"):
            break
    return out


def affinity_key(key_id: str, model: str, request: GenerationRequest) -> tuple[str | None, bool]:
    """The affinity key (a hash: no prompt text or session is stored; None: no session and no
    prefix a provider would cache), and whether the request asks for the one-hour cache."""
    last, long_ttl = _breakpoints(request)
    session = request.session.session if request.session is not None else None
    session = session or request.prompt_cache_key
    if session:
        what = b"s\x00" + session.encode()
    else:
        prefix = orjson.dumps(_prefix(request, last))
        if last < 0 and len(prefix) < MIN_PREFIX_BYTES:
            return None, long_ttl
        what = b"p\x00" + prefix[:PREFIX_BYTES]
    digest = hashlib.sha256(key_id.encode() + b"\x00" + model.encode() + b"\x00" + what).hexdigest()
    return digest[:40], long_ttl


def _moved_first(resolved: Resolved, i: int) -> Resolved:
    def first(items: list[Any]) -> list[Any]:
        return [items[i], *items[:i], *items[i + 1 :]]

    prices = first(resolved.prices) if resolved.prices is not None else None
    reason = resolved.reason + f"; affinity: {resolved.breakers[i][0]} first"
    return dataclasses.replace(
        resolved, routes=first(resolved.routes), breakers=first(resolved.breakers), prices=prices, reason=reason
    )


class Affinity:
    def __init__(self, config: ServerConfig, store: GenerationStore, health: Health) -> None:
        self.ttl_s, self.long_ttl_s = config.affinity_ttl_s, config.affinity_long_ttl_s
        self.health = health
        self._store: AffinityStore | None = affinity_of(store) if self.ttl_s > 0 else None

    def _movable(self, resolved: Resolved, request: GenerationRequest) -> int:
        """How many of the first routes affinity may reorder: all of them, or with `provider.order`
        those of the first-ranked provider only (the client's order between providers stays)."""
        prefs = request.provider
        if prefs is None or not prefs.order:
            return len(resolved.routes)
        top = resolved.routes[0][1].provider
        return next((i for i, (_, r) in enumerate(resolved.routes) if r.provider != top), len(resolved.routes))

    async def order(
        self, key_id: str, request: GenerationRequest, resolved: Resolved
    ) -> tuple[Resolved, AffinityPlan | None]:
        """`resolved` with the affine route first when it may serve; the plan (None: affinity off
        or nothing to choose between)."""
        if self._store is None or len(resolved.routes) < 2:
            return resolved, None
        key, long_ttl = affinity_key(key_id, request.model, request)
        if key is None:
            return resolved, None
        ttl = self.long_ttl_s if long_ttl else self.ttl_s
        remembered = await self._store.route_for(key, time.time())
        result = "miss"
        if remembered is not None:
            movable = self._movable(resolved, request)
            for i, (route, _) in enumerate(resolved.breakers[:movable]):
                if route == remembered and self.health.state(route) == CLOSED:
                    resolved = _moved_first(resolved, i) if i else resolved
                    result = "hit"
                    break
        metrics.ROUTE_AFFINITY.labels(request.model, result).inc()
        return resolved, AffinityPlan(key, ttl, result)

    async def remember(self, plan: AffinityPlan, route: str) -> None:
        """The route that served `plan`'s request: the affine one from now on."""
        if self._store is not None:
            await self._store.remember(plan.key, route, time.time() + plan.ttl_s)
