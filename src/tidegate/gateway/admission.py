"""A key's admission and settlement (docs/api-operations.md §11): the one place a generation meets its key's models,
credits and rate limits.

Before the upstream call: a key that may not use the model gets 403; a key with credits or limits
reserves its worst case in the store (store/admit.py: every instance's reservations and limits in one
transaction), or gets 402 / 429 before anything starts. At the end `Ticket.settle` replaces the
reservation by the record's cost and the tokens limit by the tokens used. A key with neither credits
nor limits costs no store round trip before the upstream call.

The charge never takes a balance below zero (store/admit.py `charge`): a generation that cost more
than its reservation is charged up to the key's credits and the rest is logged, not billed
(docs/keys.md, "How credits are charged").
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import metrics
from ..config.model import ModelConfig, Pricing
from ..errors import InsufficientCredits, ModelNotAllowed, RateLimited, quote
from ..events import UsageReport
from ..records import ApiKey
from ..request import GenerationRequest
from ..store.admit import Ask, Decision, period_floor
from ..store.base import KeyStore
from .usage import _PIECE_CHARS, _message_text, cost_of, estimate_prompt_tokens, tokenizer_ready

_log = logging.getLogger("tidegate.keys")

DEFAULT_OUTPUT_CAP = 4096  # docs/api-operations.md §11: when neither the request nor the catalog names a cap


@dataclass(slots=True)
class Ticket:
    """A generation's claim on its key, settled once when the generation ends."""

    store: KeyStore
    key_id: str
    generation_id: str
    budget_period: str | None
    clock: Callable[[], float]
    headers: dict[str, str] | None = None  # X-RateLimit-* for the answer
    reserved: bool = False
    amount: float | None = None  # USD reserved, for a key with credits
    settled: bool = False

    async def settle(self, cost: float, tokens: int) -> None:
        if self.settled or (not self.reserved and not cost):
            self.settled = True
            return
        self.settled = True
        if self.amount is not None and cost > self.amount + 1e-9:
            _log.warning(
                "generation %s cost $%.6f, more than the $%.6f reserved for it; key %s is charged at most"
                " its remaining credits",
                self.generation_id,
                cost,
                self.amount,
                self.key_id,
            )
        floor = period_floor(self.budget_period, self.clock())
        await self.store.settle(self.key_id, self.generation_id, cost, tokens, floor)


def worst_price(model: ModelConfig) -> Pricing | None:
    """The dearest of the model's prices over its routes: a reservation covers whichever serves."""
    prices = [p for p in (model.pricing, *(r.pricing for r in model.routes)) if p is not None]
    if not prices:
        return None
    return Pricing(max(p.prompt for p in prices), max(p.completion for p in prices))


def output_cap(request: GenerationRequest | None, model: ModelConfig) -> int:
    if request is not None and request.max_tokens:
        return request.max_tokens
    return model.max_output_tokens or DEFAULT_OUTPUT_CAP


async def prompt_tokens(request: GenerationRequest | None) -> int:
    """The prompt counted with the tokenizer (loaded, and a long prompt counted, off the loop)."""
    if request is None or not request.messages:
        return 0
    await tokenizer_ready()
    if sum(len(_message_text(m)) for m in request.messages) <= _PIECE_CHARS:
        return estimate_prompt_tokens(request.messages)
    return await asyncio.to_thread(estimate_prompt_tokens, request.messages)


def rate_headers(d: Decision) -> dict[str, str] | None:
    if not d.rates:
        return None
    headers: dict[str, str] = {}
    for name, (limit, remaining, reset) in d.rates.items():
        headers[f"x-ratelimit-limit-{name}"] = str(limit)
        headers[f"x-ratelimit-remaining-{name}"] = str(remaining)
        headers[f"x-ratelimit-reset-{name}"] = f"{max(0.0, reset):.3f}".rstrip("0").rstrip(".") or "0"
    return headers


class Admission:
    def __init__(self, store: KeyStore, owner: str, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.owner = owner
        self.clock = clock

    def check_model(self, key: ApiKey, public_model: str) -> None:
        if key.models is not None and public_model not in key.models:
            raise ModelNotAllowed(f"this API key may not use the model {quote(public_model)}")

    async def admit(
        self, key: ApiKey, model: ModelConfig, public_model: str, generation_id: str, request: GenerationRequest | None
    ) -> Ticket | None:
        """The generation's ticket (None for the master key, which nothing limits); 403, 402 or 429
        when the key may not run it now."""
        if key.is_master:
            return None
        self.check_model(key, public_model)
        ticket = Ticket(self.store, key.id, generation_id, key.budget_period, self.clock)
        if not key.needs_admission:
            return ticket
        pricing = worst_price(model)
        needs_count = (key.credits is not None and pricing is not None) or key.limits.tpm is not None
        prompt = await prompt_tokens(request) if needs_count else 0
        cap = output_cap(request, model) if request is not None else 0
        amount = cost_of(UsageReport(prompt=prompt, completion=cap), pricing) if key.credits is not None else 0.0
        now = self.clock()
        ask = Ask(key.id, generation_id, self.owner, amount, prompt + cap, period_floor(key.budget_period, now))
        decision = await self.store.admit(ask, now)
        headers = rate_headers(decision)
        if not decision.admitted:
            metrics.LIMIT_REJECTIONS.labels(decision.refusal or "credits").inc()
            raise refusal(decision, amount, ask.tokens, key, headers)
        ticket.reserved, ticket.headers = True, headers
        ticket.amount = amount if key.credits is not None else None
        return ticket


def refusal(d: Decision, amount: float, tokens: int, key: ApiKey, headers: dict[str, str] | None) -> Exception:
    error: InsufficientCredits | RateLimited
    if d.refusal == "credits":
        balance = max(0.0, d.balance or 0.0)
        error = InsufficientCredits(
            f"insufficient credits: this request may cost up to ${amount:.6f} (its prompt and output cap),"
            f" and the key has ${balance:.6f} left"
        )
    elif d.refusal == "concurrent":
        error = RateLimited(
            f"rate limited: this API key already runs {key.limits.concurrent} concurrent generations",
            retry_after=d.retry_after,
        )
    elif d.refusal == "tpm":
        limit = key.limits.tpm or 0
        what = f"its {tokens} tokens exceed" if tokens > limit else f"its {tokens} tokens would exceed"
        error = RateLimited(
            f"rate limited: {what} this key's limit of {limit} tokens per minute", retry_after=d.retry_after
        )
    else:
        error = RateLimited(
            f"rate limited: this key's limit is {key.limits.rpm} requests per minute", retry_after=d.retry_after
        )
    error.headers = headers
    if error.retry_after is not None:
        error.retry_after = math.ceil(error.retry_after * 1000) / 1000
    return error
