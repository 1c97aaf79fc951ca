"""The client's typed stream events: what `Client.chat_stream(...)` and friends yield.

One small frozen dataclass per fact. A stream yields any number of `KeepAlive`, `Started`, `Status`,
`ReasoningDelta`, `TextDelta`, `ToolCallDelta`, `ToolCall` and `Usage` events, then exactly one `Done`
(the authoritative result) as its last event, or raises (`IncompleteStream` and its subclasses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """An SSE comment line (`: TIDEGATE PROCESSING`): the gateway is alive, the model still working."""

    comment: str = ""


@dataclass(frozen=True, slots=True)
class Started:
    """Native `start` event (`id` is the generation id)."""

    id: str
    model: str


@dataclass(frozen=True, slots=True)
class Status:
    """Native `status` event: queued, connecting, fallback, thinking, generating, tool_call."""

    status: str
    provider: str | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Thinking, never part of the answer. `details` is the structured `reasoning_details` fragment list."""

    text: str
    details: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a streamed tool call; the first fragment of a call carries `id` and `name`."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A whole tool call, emitted only once the turn ended with `finish_reason: "tool_calls"`.

    `arguments` is the concatenated JSON text; `parsed` its parsed value (None when it is not valid JSON,
    then `parse_error` says why).
    """

    index: int
    id: str
    name: str
    arguments: str
    parsed: Any = None
    parse_error: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "cached_tokens": self.cached_tokens,
        }


@dataclass(frozen=True, slots=True)
class Done:
    """The complete answer. The only event that means nothing is missing.

    `buffered_reason` is set when the gateway answered a streaming request with one JSON body
    (`X-Kendr-Stream-Mode: buffered`); `recovered` says how a dropped stream was completed:
    "resume" (Last-Event-ID), "replay" (the stored result) or None (no drop).
    """

    text: str
    finish_reason: str | None
    generation_id: str | None
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    provider: str | None = None
    served_model: str | None = None
    model: str | None = None
    idempotency_key: str | None = None
    buffered_reason: str | None = None
    recovered: str | None = None
    result: dict[str, Any] | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "completed",
            "generation_id": self.generation_id,
            "model": self.model,
            "provider": self.provider,
            "served_model": self.served_model,
            "finish_reason": self.finish_reason,
            "text": self.text,
            "reasoning": self.reasoning or None,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments, "index": c.index} for c in self.tool_calls
            ],
            "usage": self.usage.as_dict() if self.usage else None,
            "idempotency_key": self.idempotency_key,
            "buffered_reason": self.buffered_reason,
            "recovered": self.recovered,
        }


StreamEvent = KeepAlive | Started | Status | TextDelta | ReasoningDelta | ToolCallDelta | ToolCall | Usage | Done
