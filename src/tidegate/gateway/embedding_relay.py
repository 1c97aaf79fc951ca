"""Embeddings through the routes: fallback, the deadline and cancellation for one-shot calls.

An embedding answer is written in one piece, so every route failure happens before the response
starts; what it means is the fallback policy every door shares (gateway/fallback.py): upstream
401/403/429/5xx, connect errors, no answer within the provider's `upstream_idle_timeout_s`, and "this
route cannot serve the request as asked" (token arrays, `dimensions`) move to the next route; an
upstream's 400 is answered at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..commit import RouteFailure
from ..config.model import Route
from ..errors import ProviderFailure
from ..providers.embeddings import EmbeddingProvider, EmbeddingResult
from ..providers.http.client import OPEN_PROGRESS, OpenProgress
from ..request import EmbeddingInputs
from .fallback import ANSWER_NOW, after_failure, answer_now, final_error
from .relay import GenerationCancelled
from .usage import count_tokens


@dataclass(frozen=True, slots=True)
class EmbeddingOutcome:
    result: EmbeddingResult
    provider: str
    served_model: str
    attempts: int
    prompt_tokens: int
    estimated: bool


def estimate_tokens(inputs: EmbeddingInputs) -> int:
    """o200k estimate (token arrays count themselves)."""
    if inputs.tokens is not None:
        return sum(len(t) for t in inputs.tokens)
    return sum(count_tokens(t) for t in inputs.texts or [])


class _Deadline:
    """An attempt's idle deadline, which a wait for a connection slot does not count: that wait is
    bounded by the connect timeout and fails as a connect error (providers/http/client.py)."""

    __slots__ = ("_moved", "deadline", "progress")

    def __init__(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + timeout
        self.progress = OpenProgress(self)
        self._moved: asyncio.Future[None] = loop.create_future()

    def waited(self, seconds: float) -> None:
        self.deadline += seconds
        if not self._moved.done():
            self._moved.set_result(None)

    async def wait(self, aws: set[asyncio.Future[Any]]) -> None:
        """Until one of `aws` is done or the deadline passed outside a slot wait."""
        loop = asyncio.get_running_loop()
        while not any(f.done() for f in aws):
            left = self.deadline - loop.time()
            if self.progress.waiting_for_connection:
                await asyncio.wait({*aws, self._moved}, return_when=asyncio.FIRST_COMPLETED)
                self._moved = loop.create_future()
            elif left > 0:
                await asyncio.wait(aws, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            else:
                return


class EmbeddingRelay:
    def __init__(
        self,
        routes: list[tuple[EmbeddingProvider, Route]],
        timeout_for: Callable[[str], float],
        cancel: asyncio.Event,
    ) -> None:
        self.routes = routes
        self.timeout_for = timeout_for
        self.cancel = cancel
        self.attempts = 0
        self.failures: list[RouteFailure] = []
        self.provider: str | None = None
        self.served_model: str | None = None

    async def run(self, inputs: EmbeddingInputs, dimensions: int | None) -> EmbeddingOutcome:
        for provider, route in self.routes:
            self.attempts += 1
            result = await self._try(provider, route, inputs, dimensions)
            if result is None:
                continue
            self.provider, self.served_model = provider.name, route.model
            tokens = result.prompt_tokens
            estimated = tokens is None
            if tokens is None:
                tokens = await asyncio.to_thread(estimate_tokens, inputs)
            return EmbeddingOutcome(result, provider.name, route.model, self.attempts, tokens, estimated)
        raise final_error(self.failures)

    async def _try(
        self, provider: EmbeddingProvider, route: Route, inputs: EmbeddingInputs, dimensions: int | None
    ) -> EmbeddingResult | None:
        timeout = self.timeout_for(provider.name)
        clock = _Deadline(timeout)
        token = OPEN_PROGRESS.set(clock.progress)  # the task runs in a copy of this context
        try:
            task = asyncio.ensure_future(provider.embed(inputs, route.model, dimensions))
        finally:
            OPEN_PROGRESS.reset(token)
        cancel_wait = asyncio.ensure_future(self.cancel.wait())
        try:
            await clock.wait({task, cancel_wait})
            if self.cancel.is_set():
                raise GenerationCancelled("the generation was cancelled")
            if not task.done():
                self.failures.append(
                    RouteFailure(provider.name, "upstream_timeout", f"no answer from the upstream for {timeout:g} s")
                )
                return None
            try:
                return task.result()
            except ProviderFailure as exc:
                failure = RouteFailure(provider.name, exc.code, exc.message, exc.status, exc.retry_after)
                self.failures.append(failure)
                if after_failure(exc.code, exc.retriable, committed=False) == ANSWER_NOW:  # gateway/fallback.py
                    raise answer_now(failure) from None
                return None
            except Exception as exc:  # a provider bug must not take the door down
                self.failures.append(
                    RouteFailure(provider.name, "upstream_error", f"{type(exc).__name__} from provider")
                )
                return None
        finally:
            cancel_wait.cancel()
            if not task.done():
                task.cancel()
