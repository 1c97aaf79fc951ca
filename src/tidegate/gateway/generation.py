"""A running generation: its record, recorder, relay and cancel signal, registered for `/cancel`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TypeVar

from .. import metrics, tracing
from ..config.model import Config, ModelConfig, Pricing
from ..doors import Door
from ..errors import TidegateError
from ..events import Failed
from ..records import ApiKey, BeginResult, GenerationRecord
from ..request import GenerationRequest, SessionHints
from ..store.base import GenerationStore
from .admission import Admission, Ticket
from .affinity import Affinity, AffinityPlan
from .cancel import CancelSignal
from .embedding_relay import EmbeddingRelay
from .flusher import LogFlusher
from .health import route_key
from .leases import new_owner
from .recorder import Recorder
from .relay import Relay, RelayItem, RelaySettings
from .router import Router

G = TypeVar("G", "Generation", "EmbeddingGeneration")


class ExistingGeneration(TidegateError):
    """Same Idempotency-Key as an earlier generation that must be answered instead of a new one."""

    status = 409
    code = "generation_in_progress"

    def __init__(self, result: BeginResult) -> None:
        super().__init__(f"idempotency key matches generation {result.record.id} ({result.outcome})")
        self.result = result


@dataclass(slots=True)
class Generation:
    id: str
    key: ApiKey
    request: GenerationRequest
    model: ModelConfig
    recorder: Recorder
    relay: Relay
    cancel: CancelSignal
    created: int = field(default_factory=lambda: int(time.time()))
    # per route (parallel to the relay's routes): its price, the route's own or its model's; None when
    # they are all the model's (the recorder already has it)
    prices: list[Pricing | None] | None = None
    # prompt-cache affinity's decision (gateway/affinity.py), and where the serving route is remembered
    affinity: AffinityPlan | None = None
    affinities: Affinity | None = None

    @property
    def record(self) -> GenerationRecord:
        return self.recorder.record

    def _price_served_route(self) -> None:
        if self.prices is not None and self.relay.provider is not None and self.relay.route_index >= 0:
            self.recorder.pricing = self.prices[self.relay.route_index]
        elif self.prices is not None and self.relay.accepted >= 0:  # no answer, but a prompt taken
            self.recorder.pricing = self.prices[self.relay.accepted]

    def items(self) -> AsyncGenerator[RelayItem, None]:
        return self.relay.run()

    async def complete(self) -> GenerationRecord:
        self._price_served_route()
        self.recorder.record.dropped = list(self.relay.dropped) or None
        record = await self.recorder.finish(
            "completed",
            provider=self.relay.provider,
            served_model=self.relay.served_model,
            attempts=self.relay.attempts,
        )
        served = self.relay.route_index
        if self.affinity is not None and self.affinities is not None and 0 <= served < len(self.relay.routes):
            route = self.relay.routes[served][1]  # the affine route from now on, before the client's next turn
            await self.affinities.remember(self.affinity, route_key(route.provider, route.model))
        return record

    async def fail(self, failure: Failed | dict[str, object]) -> GenerationRecord:
        code = failure.code if isinstance(failure, Failed) else failure.get("code")
        status = code if code in ("cancelled", "interrupted") else "failed"
        self._price_served_route()
        self.recorder.record.dropped = list(self.relay.dropped) or None
        return await self.recorder.finish(
            status,
            provider=self.relay.provider,
            served_model=self.relay.served_model,
            attempts=self.relay.attempts,
            error=failure,
            prompt_taken=self.relay.accepted >= 0,
        )


@dataclass(slots=True)
class EmbeddingGeneration:
    """A running embedding call: one answer, no stream, but recorded, idempotent and cancellable
    (registered in `Gateway.running` like a generation) all the same."""

    id: str
    key: ApiKey
    model: ModelConfig
    recorder: Recorder
    relay: EmbeddingRelay
    cancel: asyncio.Event
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def record(self) -> GenerationRecord:
        return self.recorder.record

    async def fail(self, failure: dict[str, object]) -> GenerationRecord:
        status = "cancelled" if failure.get("code") == "cancelled" else "failed"
        return await self.recorder.finish(status, attempts=self.relay.attempts, error=failure)


class Gateway:
    """What the doors call: resolve the model, record the generation, run the relay."""

    def __init__(self, config: Config, store: GenerationStore, router: Router) -> None:
        self.config = config
        self.store = store
        self.router = router
        self.running: dict[str, Generation | EmbeddingGeneration] = {}
        self.instance = new_owner()  # this process start's owner id (gateway/leases.py)
        self.admission = Admission(store, self.instance)
        self.flusher = LogFlusher()
        self.affinity = Affinity(config.server, store, router.health)

    async def start(
        self,
        *,
        generation_id: str,
        door: Door,
        key: ApiKey,
        request: GenerationRequest,
        model_type: str,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> Generation:
        model = self.router.model(request.model, model_type)
        health, breakers, affinity = None, None, None
        route_reason, prices, excluded = None, None, None
        if model.type == "image":
            routes = self.router.routes(model)
        else:
            # routes resolved (policy, strategy, residency) before the relay starts: gateway/routing.py
            resolved = self.router.resolve(model, request, key)
            resolved, affinity = await self.affinity.order(key.id, request, resolved)
            model, routes, breakers = resolved.model, resolved.routes, resolved.breakers
            health, route_reason = self.router.health, resolved.reason
            excluded, prices = resolved.excluded, resolved.prices
        server = self.config.server
        settings = RelaySettings(
            streaming=request.stream,
            keepalive_s=server.keepalive_s,
            idle_timeout_for=self.config.provider_idle_timeout,
            regions=self.router.regions,
        )
        cancel = CancelSignal()
        ticket = await self.admission.admit(key, model, request.model, generation_id, request)
        recorder = await self._begin(
            generation_id,
            door,
            key,
            model,
            request.model,
            request.messages,
            idempotency_key,
            request_hash,
            ticket,
            route_reason,
            request.session,
        )
        relay = Relay(request, routes, settings, cancel, health, breakers, excluded)
        relay.generation_id = generation_id
        if recorder.keeps_logs:
            relay.on_commit = recorder.committed
        span = tracing.start_generation(request.model, generation_id, request.max_tokens, request.messages)
        recorder.span = relay.trace = span  # (None unless tracing is on)
        gen = Generation(
            id=generation_id,
            key=key,
            request=request,
            model=model,
            recorder=recorder,
            relay=relay,
            cancel=cancel,
            created=int(recorder.record.created_at),
            prices=prices,
            affinity=affinity,
            affinities=self.affinity,
        )
        return self._register(gen)

    async def start_embedding(
        self,
        *,
        generation_id: str,
        key: ApiKey,
        model_id: str,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> EmbeddingGeneration:
        """`start` for the embeddings door: same record, idempotency check and registry; the one-shot
        `EmbeddingRelay` over the model's embedding routes instead of the streaming relay."""
        model = self.router.model(model_id, "embedding")
        routes = self.router.embedding_routes(model)
        cancel = asyncio.Event()
        ticket = await self.admission.admit(key, model, model_id, generation_id, None)
        recorder = await self._begin(
            generation_id, Door.EMBEDDINGS, key, model, model_id, [], idempotency_key, request_hash, ticket
        )
        gen = EmbeddingGeneration(
            id=generation_id,
            key=key,
            model=model,
            recorder=recorder,
            relay=EmbeddingRelay(routes, self.config.provider_idle_timeout, cancel),
            cancel=cancel,
            created=int(recorder.record.created_at),
        )
        return self._register(gen)

    async def _begin(
        self,
        generation_id: str,
        door: Door,
        key: ApiKey,
        model: ModelConfig,
        public_model: str,
        messages: list[dict[str, object]],
        idempotency_key: str | None,
        request_hash: str | None,
        ticket: Ticket | None,
        route_reason: str | None = None,
        session: SessionHints | None = None,
    ) -> Recorder:
        """The record, durable before any upstream request; `ExistingGeneration` for a repeated key
        (whose answer costs nothing: the ticket's reservation goes)."""
        record = GenerationRecord(
            id=generation_id,
            key_id=key.id,
            model=public_model,
            door=door,
            created_at=time.time(),
            idempotency_key=idempotency_key,
            request_hash=request_hash,
            owner=self.instance,
            route_reason=route_reason,
            agent_session=session.session if session is not None else None,
            hints=session.hints if session is not None else None,
        )
        recorder = Recorder(store=self.store, record=record, messages=messages, pricing=model.pricing, ticket=ticket)
        try:
            begun = await self.store.begin_generation(record)  # durable before any upstream request
        except BaseException:
            if ticket is not None:
                await asyncio.shield(ticket.settle(0.0, 0))
            raise
        if begun.outcome != "created":
            if ticket is not None:
                await ticket.settle(0.0, 0)
            raise ExistingGeneration(begun)
        recorder.start_flushing(self.flusher)
        return recorder

    def _register(self, gen: G) -> G:
        """Running: `/cancel` and the drain find it until `release`."""
        self.running[gen.id] = gen
        metrics.RUNNING.inc()
        return gen

    async def aclose(self) -> None:
        await self.flusher.aclose()
        await self.router.aclose()

    def release(self, generation_id: str) -> None:
        if self.running.pop(generation_id, None) is not None:
            metrics.RUNNING.dec()

    def cancel(self, generation_id: str) -> bool:
        gen = self.running.get(generation_id)
        if gen is None:
            return False
        gen.cancel.set()
        return True

    def interrupt_all(self) -> int:
        """The drain time of a shutdown is over: every running generation ends `interrupted` (its
        door's failure ending, a final record). Returns how many were running."""
        running = list(self.running.values())
        for gen in running:
            if isinstance(gen, Generation):
                gen.recorder.stopping = True
            if isinstance(gen.cancel, CancelSignal):
                gen.cancel.set("interrupted")
            else:  # an embedding call: one answer, cancelled as such
                gen.cancel.set()
        return len(running)
