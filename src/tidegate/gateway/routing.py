"""Request → ordered concrete routes, with the reason (docs/api-operations.md §12).

Policy models (`type = "router"`) pick among their candidates by what the request needs and their
policy; a model's `strategy` orders its routes; a request's `provider` object and a key's
`jurisdictions` filter them (never an attempt outside what both allow). The relay then falls back
down the order (docs/api.md §4) and skips routes whose breaker is open (gateway/health.py). The default
case (an `ordered` chat model, no `provider` object, no key jurisdictions) returns the routes as
configured with no other work.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..config.model import Config, ModelConfig, Pricing, Route
from ..errors import InvalidRequest, NoProviderAvailable
from ..records import ApiKey
from ..request import GenerationRequest, ProviderPrefs
from .health import Health, route_key

_PROVIDER_KEYS = {"order", "only", "ignore", "allow_fallbacks", "jurisdictions"}


def _names(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest(f"{where} must be a list of strings")
    return tuple(value)


def parse_provider_prefs(raw: Any) -> ProviderPrefs | None:
    """`None` when the request has no `provider` object; a 400 naming the field when it is malformed."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("provider must be an object")
    for key in raw:
        if key not in _PROVIDER_KEYS:
            raise InvalidRequest(f"provider.{key} is not supported (supported: {', '.join(sorted(_PROVIDER_KEYS))})")
    allow = raw.get("allow_fallbacks", True)
    if not isinstance(allow, bool):
        raise InvalidRequest("provider.allow_fallbacks must be a boolean")
    return ProviderPrefs(
        order=_names("provider.order", raw["order"]) if "order" in raw else (),
        only=_names("provider.only", raw["only"]) if "only" in raw else None,
        ignore=_names("provider.ignore", raw["ignore"]) if "ignore" in raw else (),
        allow_fallbacks=allow,
        jurisdictions=_names("provider.jurisdictions", raw["jurisdictions"]) if "jurisdictions" in raw else None,
    )


def key_jurisdictions(key: ApiKey) -> tuple[str, ...] | None:
    """The jurisdictions a key is pinned to (None: any)."""
    return key.jurisdictions or None


def route_price(route: Route, model: ModelConfig) -> Pricing | None:
    return route.pricing or model.pricing


def _cost(p: Pricing | None) -> float:
    return math.inf if p is None else p.prompt + p.completion


# ---- what a request needs (policy models) ----------------------------------------------------


def prompt_tokens_estimate(request: GenerationRequest) -> int:
    """About four characters a token: a bound, not a count (no tokenizer per provider here)."""
    chars = 0
    for m in request.messages:
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):  # text parts only: an image's base64 is not prompt text
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    chars += len(part["text"])
    if request.tools:
        chars += len(json.dumps(request.tools))
    return chars // 4


def _has_images(request: GenerationRequest) -> bool:
    for m in request.messages:
        content = m.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in ("image_url", "input_image", "image"):
                    return True
    return False


def needs(request: GenerationRequest) -> list[tuple[str, str]]:
    """(capability, why) pairs the request requires of a candidate."""
    out: list[tuple[str, str]] = []
    if request.tools:
        out.append(("tools", "the request has tools"))
    if _has_images(request):
        out.append(("vision", "the request has images"))
    if request.reasoning is not None:
        out.append(("reasoning", "the request asks for reasoning"))
    rf = request.response_format
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        out.append(("json_schema", "the request asks for JSON schema output"))
    return out


# ---- ordering ---------------------------------------------------------------------------------


class SmoothWeighted:
    """Smooth weighted round robin (as nginx's upstream module): over any run of sum(weights)
    requests each route comes first exactly its weight's times, interleaved. The routes after the
    first follow by weight (the fallbacks)."""

    def __init__(self) -> None:
        self._current: dict[str, list[float]] = {}

    def order(self, model: ModelConfig) -> list[Route]:
        routes = model.routes
        current = self._current.get(model.id)
        if current is None:
            current = self._current[model.id] = [0.0] * len(routes)
        total = 0.0
        best = 0
        for i, r in enumerate(routes):
            current[i] += r.weight
            total += r.weight
            if current[i] > current[best]:
                best = i
        current[best] -= total
        rest = sorted((r for i, r in enumerate(routes) if i != best), key=lambda r: -r.weight)
        return [routes[best], *rest]


def order_routes(model: ModelConfig, health: Health, weighted: SmoothWeighted) -> list[Route]:
    s = model.strategy
    if s == "ordered" or len(model.routes) < 2:
        return list(model.routes)
    if s == "weighted":
        return weighted.order(model)
    if s == "least_latency":
        # a route with no sample yet goes first (0): it gets measured
        def ttft(r: Route) -> float:
            return health.get(route_key(r.provider, r.model)).ttft_p50() or 0.0

        return sorted(model.routes, key=ttft)
    # least_busy: fewest in flight, ties by configured order (sorted is stable)
    return sorted(model.routes, key=lambda r: health.get(route_key(r.provider, r.model)).in_flight)


@dataclass(slots=True)
class Plan:
    """The routes to try, in order, each with the catalog model it belongs to, and why."""

    routes: list[tuple[ModelConfig, Route]]
    reason: str
    excluded: str | None = None  # the rules that left routes out, when any did (for the final error)


class Routing:
    def __init__(self, config: Config, health: Health) -> None:
        self.config = config
        self.health = health
        self.weighted = SmoothWeighted()

    def plan(
        self,
        model: ModelConfig,
        request: GenerationRequest | None,
        prefs: ProviderPrefs | None = None,
        key_jurisdictions: tuple[str, ...] | None = None,
    ) -> Plan:
        if model.type == "router":
            assert request is not None
            routes, reason = self._policy(model, request)
        else:
            routes = [(model, r) for r in order_routes(model, self.health, self.weighted)]
            reason = f"strategy={model.strategy}"
        if prefs is None and key_jurisdictions is None:
            return Plan(routes, reason)
        return self._residency(routes, reason, prefs or ProviderPrefs(), key_jurisdictions)

    def _policy(self, model: ModelConfig, request: GenerationRequest) -> tuple[list[tuple[ModelConfig, Route]], str]:
        required = needs(request)
        tokens = (
            prompt_tokens_estimate(request)
            if any(self.config.models[c].context_length for c in model.candidates)
            else 0
        )
        fit: list[ModelConfig] = []
        skipped: list[str] = []
        for cid in model.candidates:
            cand = self.config.models[cid]
            missing = [why for cap, why in required if cap not in cand.capabilities]
            if missing:
                skipped.append(f"{cid}: {missing[0]}")
                continue
            if cand.context_length is not None and tokens > cand.context_length:
                skipped.append(f"{cid}: prompt ~{tokens} tokens > context_length {cand.context_length}")
                continue
            fit.append(cand)
        if not fit:
            raise NoProviderAvailable(f"no candidate of {model.id!r} can serve this request: {'; '.join(skipped)}")
        policy = model.policy
        if policy == "cheapest":
            fit.sort(key=self._cheapest_cost)
        elif policy == "fastest":
            fit.sort(key=self._ttft)
        elif policy == "balanced":
            floor = min(self._cheapest_cost(c) for c in fit)
            limit = floor * (1 + model.balanced_within_pct / 100)
            near = [c for c in fit if self._cheapest_cost(c) <= limit]
            far = [c for c in fit if self._cheapest_cost(c) > limit]
            fit = sorted(near, key=self._ttft) + sorted(far, key=self._cheapest_cost)
        routes = [(c, r) for c in fit for r in order_routes(c, self.health, self.weighted)]
        reason = f"policy={policy} chose {fit[0].id}"
        if required:
            reason += f" (needs {', '.join(cap for cap, _ in required)})"
        if skipped:
            reason += f"; skipped {'; '.join(skipped)}"
        return routes, reason

    def _cheapest_cost(self, model: ModelConfig) -> float:
        return min(_cost(route_price(r, model)) for r in model.routes)

    def _ttft(self, model: ModelConfig) -> float:
        # unmeasured models count as instant so they get measured once
        best = math.inf
        for r in model.routes:
            p50 = self.health.get(route_key(r.provider, r.model)).ttft_p50()
            best = min(best, 0.0 if p50 is None else p50)
        return best

    def _residency(
        self,
        routes: list[tuple[ModelConfig, Route]],
        reason: str,
        prefs: ProviderPrefs,
        key_jurisdictions: tuple[str, ...] | None,
    ) -> Plan:
        providers = self.config.providers
        excluded: dict[str, list[str]] = {}  # rule → providers it excluded
        kept: list[tuple[ModelConfig, Route]] = []
        for m, r in routes:
            p = r.provider
            jur = providers[p].jurisdiction
            rule = None
            if prefs.only is not None and p not in prefs.only:
                rule = "provider.only"
            elif p in prefs.ignore:
                rule = "provider.ignore"
            elif not prefs.allow_fallbacks and prefs.order and p not in prefs.order:
                rule = "provider.allow_fallbacks=false"
            elif prefs.jurisdictions is not None and jur not in prefs.jurisdictions:
                rule = f"provider.jurisdictions={list(prefs.jurisdictions)}"
            elif key_jurisdictions is not None and jur not in key_jurisdictions:
                rule = f"the key's jurisdictions={list(key_jurisdictions)}"
            if rule is None:
                kept.append((m, r))
            elif (named := f"{p} ({jur or 'no jurisdiction'})") not in excluded.setdefault(rule, []):
                excluded[rule].append(named)  # once, however many of its routes the rule excluded
        if prefs.order:
            rank = {name: i for i, name in enumerate(prefs.order)}
            kept.sort(key=lambda mr: rank.get(mr[1].provider, len(rank)))
        why = "; ".join(f"{rule} excluded {', '.join(ps)}" for rule, ps in excluded.items())
        if not kept:
            raise NoProviderAvailable(f"no allowed provider for this request: {why}")
        if excluded:
            reason += "; excluded by " + ", ".join(excluded)
        if prefs.order:
            reason += f"; provider.order={list(prefs.order)}"
        if not prefs.allow_fallbacks and len(kept) > 1:  # exactly one provider is tried
            kept = kept[:1]
            reason += f"; provider.allow_fallbacks=false: only {kept[0][1].provider}"
        return Plan(kept, reason, why or None)
