"""The recorder: watches a generation's canonical events and keeps its record in the store."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..config import Pricing
from ..events import Event, Failed, Finished, ReasoningDelta, Started, TextDelta, ToolCallDelta, UsageReport
from ..store.base import GenerationRecord, GenerationStore, Usage
from .usage import cost_of, estimate_usage


@dataclass(slots=True)
class Recorder:
    store: GenerationStore
    record: GenerationRecord
    messages: list[dict[str, Any]]
    pricing: Pricing | None
    started_at: float = field(default_factory=time.monotonic)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_args: list[str] = field(default_factory=list)
    usage: UsageReport | None = None
    finish_reason: str | None = None
    _first_token_at: float | None = None

    async def begin(self) -> None:
        """Durable before the upstream request is sent (CONTRACT §7)."""
        await self.store.create_generation(self.record)

    def observe(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self._mark_first_token()
            self.text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self._mark_first_token()
            if event.kind != "encrypted":
                self.reasoning.append(event.text)
        elif isinstance(event, ToolCallDelta):
            self._mark_first_token()
            self.tool_args.append(event.arguments)
        elif isinstance(event, UsageReport):
            self.usage = event
        elif isinstance(event, Finished):
            self.finish_reason = event.reason
        elif isinstance(event, Started):
            self.record.provider = event.provider
            self.record.served_model = event.served_model

    def _mark_first_token(self) -> None:
        if self._first_token_at is None:
            self._first_token_at = time.monotonic()
            self.record.ttft_ms = round((self._first_token_at - self.started_at) * 1000, 3)

    @property
    def output_text(self) -> str:
        return "".join(self.text)

    def final_usage(self) -> UsageReport:
        """The provider's usage, or an estimate from what was generated so far."""
        if self.usage is not None:
            return self.usage
        self.usage = estimate_usage(self.messages, self.output_text + "".join(self.tool_args), "".join(self.reasoning))
        return self.usage

    async def finish(
        self,
        status: str,
        *,
        provider: str | None = None,
        served_model: str | None = None,
        attempts: int = 0,
        error: Failed | dict[str, Any] | None = None,
    ) -> GenerationRecord:
        rec = self.record
        rec.status = status
        if provider:
            rec.provider = provider
        if served_model:
            rec.served_model = served_model
        rec.attempts = attempts
        rec.output_text = self.output_text
        rec.finish_reason = self.finish_reason if status == "completed" else (self.finish_reason or "error")
        if status != "completed" and rec.finish_reason != "error":
            rec.finish_reason = "error"
        produced = bool(self.text or self.reasoning or self.tool_args or self.usage)
        if produced or status == "completed":
            usage = self.final_usage()
            rec.usage = Usage(
                prompt_tokens=usage.prompt,
                completion_tokens=usage.completion,
                total_tokens=usage.total,
                reasoning_tokens=usage.reasoning,
                cached_tokens=usage.cached,
            )
            rec.usage_estimated = usage.estimated
            rec.cost = round(cost_of(usage, self.pricing), 10)
        if isinstance(error, Failed):
            rec.error = {"code": error.code, "message": error.message, "provider": error.provider}
        elif error is not None:
            rec.error = error
        rec.duration_ms = round((time.monotonic() - self.started_at) * 1000, 3)
        await self.store.update_generation(rec)
        if rec.cost:
            await self.store.add_spend(rec.key_id, rec.cost)
        return rec
