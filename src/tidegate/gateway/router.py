"""Model → routes resolution and the provider registry (one instance per configured provider)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..config.model import Breaker, Config, ModelConfig, Pricing, ProviderConfig, Route
from ..errors import InvalidRequest, ModelNotFound, quote
from ..providers.base import ChatProvider
from ..providers.embeddings import EmbeddingProvider
from ..providers.http.connect import tls_context
from ..providers.kinds import KINDS, build_chat_provider, build_embedding_provider, build_image_provider
from ..records import ApiKey
from ..request import GenerationRequest
from .health import Health, route_key
from .routing import Plan, Routing, key_jurisdictions, order_routes

log = logging.getLogger("tidegate.router")


def build_provider(config: ProviderConfig, connect_timeout_s: float = 10.0) -> ChatProvider:
    """The provider of `config.kind` (its entry in providers/kinds.py); HTTP kinds get one connection
    pool each (`server.connect_timeout_s`)."""
    return build_chat_provider(config, connect_timeout_s)


@dataclass(frozen=True, slots=True)
class Resolved:
    """A request's routes, ready for the relay (lists parallel to `routes`), and why."""

    model: ModelConfig  # the catalog model that serves first (a router model's chosen candidate)
    routes: list[tuple[ChatProvider, Route]]
    breakers: list[tuple[str, Breaker]]  # each route's health key and breaker
    reason: str
    excluded: str | None  # the residency rules that left routes out
    prices: list[Pricing | None] | None  # per route, when any differs from the model's


class Router:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._providers: dict[str, ChatProvider] = {}
        self._embedding_providers: dict[str, EmbeddingProvider] = {}
        self._image_providers: dict[str, ChatProvider] = {}
        self.health = Health()
        self.routing = Routing(config, self.health)
        self.regions = {name: p.region for name, p in config.providers.items() if p.region}
        # the default case (an `ordered` model, no provider object, no key jurisdictions) resolves the
        # same every time: made once per model (nothing is mutated downstream)
        self._fixed: dict[str, Resolved] = {}

    def provider(self, name: str) -> ChatProvider:
        p = self._providers.get(name)
        if p is None:
            p = build_provider(self.config.providers[name], self.config.server.connect_timeout_s)
            self._providers[name] = p
        return p

    def warm(self) -> None:
        """Build every HTTP chat provider now, at startup, and the TLS context they share: importing a
        provider module or loading the trust store on the first request stalled every stream on the
        loop (~0.3 s with aiohttp). The local model stays lazy (it loads its weights when first
        asked). A provider that cannot be built stays lazy too: its requests get the error, as before.
        A provider with `verify = false` is named in a warning here, once per start."""
        built = False
        for name, provider in self.config.providers.items():
            kind = KINDS.get(provider.kind)
            if not provider.verify and (kind is None or kind.http):
                log.warning(
                    "provider %s: verify = false: the TLS certificates of its upstream are NOT checked; anyone "
                    "on the path can read and change its traffic, API keys included",
                    name,
                )
            if kind is not None and kind.warm:
                try:
                    self.provider(name)
                    built = True
                except Exception as exc:  # reported per request, where it was always reported
                    log.warning("provider %s could not be built at startup: %s", name, type(exc).__name__)
        if built:
            tls_context()

    def model(self, model_id: str, door_type: str) -> ModelConfig:
        m = self.config.models.get(model_id)
        if m is None:
            raise ModelNotFound(f"model {quote(model_id)} is not in the catalog; GET /v1/models lists the ids")
        if m.type != door_type and not (m.type == "router" and door_type == "chat"):
            raise InvalidRequest(
                f"model {quote(model_id)} is an {m.type} model; this endpoint serves {door_type} models"
                if m.type[0] in "aeiou"
                else f"model {quote(model_id)} is a {m.type} model; this endpoint serves {door_type} models"
            )
        return m

    def resolve(self, model: ModelConfig, request: GenerationRequest, key: ApiKey) -> Resolved:
        """The routes to try, in order (gateway/routing.py), before the relay starts."""
        jurisdictions = key_jurisdictions(key)
        fixed = model.strategy == "ordered" and model.type == "chat"
        if fixed and request.provider is None and jurisdictions is None:
            done = self._fixed.get(model.id)
            if done is None:
                done = self._fixed[model.id] = self._resolved(model, self.routing.plan(model, request))
            return done
        return self._resolved(model, self.routing.plan(model, request, request.provider, jurisdictions))

    def _resolved(self, model: ModelConfig, plan: Plan) -> Resolved:
        prices = None
        if model.type == "router" or any(r.pricing is not None for _, r in plan.routes):
            prices = [r.pricing or m.pricing for m, r in plan.routes]
        return Resolved(
            model=plan.routes[0][0],
            routes=[(self.provider(r.provider), r) for _, r in plan.routes],
            breakers=[(route_key(r.provider, r.model), m.breaker) for m, r in plan.routes],
            reason=plan.reason,
            excluded=plan.excluded,
            prices=prices,
        )

    def routes(self, model: ModelConfig) -> list[tuple[ChatProvider, Route]]:
        if model.type == "image":  # image upstreams have their own registry (same relay)
            return self.image_routes(model)
        out: list[tuple[ChatProvider, Route]] = []
        for route in model.routes:
            out.append((self.provider(route.provider), route))
        return out

    def embedding_provider(self, name: str) -> EmbeddingProvider:
        p = self._embedding_providers.get(name)
        if p is None:
            p = build_embedding_provider(self.config.providers[name], self.config.server.connect_timeout_s)
            self._embedding_providers[name] = p
        return p

    def embedding_routes(self, model: ModelConfig) -> list[tuple[EmbeddingProvider, Route]]:
        # the model's strategy orders them too (no breakers: a one-shot call's fallback as before)
        ordered = order_routes(model, self.health, self.routing.weighted)
        return [(self.embedding_provider(r.provider), r) for r in ordered]

    def image_provider(self, name: str) -> ChatProvider:
        p = self._image_providers.get(name)
        if p is None:
            p = build_image_provider(self.config.providers[name], self.config.server)
            self._image_providers[name] = p
        return p

    def image_routes(self, model: ModelConfig) -> list[tuple[ChatProvider, Route]]:
        return [(self.image_provider(r.provider), r) for r in model.routes]

    async def aclose(self) -> None:
        for p in self._providers.values():
            await p.aclose()
        for e in self._embedding_providers.values():
            await e.aclose()
        for i in self._image_providers.values():
            await i.aclose()
