"""Canonical events: the one stream every provider decodes into and every renderer reads from.

Small immutable structs (`@event`), one per fact. Providers never see door formats; renderers never
see provider formats. `RawFrame` carries an OpenAI-compatible upstream's chunk bytes for the
passthrough chat door.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar, dataclass_transform

FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "error"]
FailureCode = Literal["upstream_error", "upstream_timeout", "upstream_protocol_error", "cancelled", "interrupted"]
ReasoningKind = Literal["text", "encrypted", "summary"]
_Event = TypeVar("_Event")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def event(cls: type[_Event]) -> type[_Event]:
    """A canonical event: a slots dataclass with equality and a hash, frozen to the type checker.

    Not `frozen=True` at run time: a frozen dataclass's `__init__` sets each field through
    `object.__setattr__`, which nearly tripled an event's construction, and a relayed chunk makes
    two events (bench/results/history.md, item 55). Nothing assigns to an event's
    field: `mypy --strict` refuses it (`tests/unit/foundations/test_events_immutable.py`)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


@event
class Started:
    """The upstream accepted the request; `upstream_id` is its own message/chunk id when it has one."""

    provider: str
    served_model: str
    upstream_id: str | None = None


@event
class RawFrame:
    """One upstream SSE data payload, byte for byte (OpenAI-compatible passthrough only)."""

    data: bytes


@event
class TextDelta:
    text: str


@event
class ReasoningDelta:
    """Thinking. `kind` text: readable `text`; encrypted: opaque `data`; summary: summary `text`.

    `signature` arrives once, at the end of an Anthropic thinking block. `index` numbers reasoning
    blocks within the turn (0-based).
    """

    text: str = ""
    kind: ReasoningKind = "text"
    signature: str | None = None
    data: str | None = None
    index: int = 0


@event
class ToolCallDelta:
    """A fragment of a tool call. The first fragment of a call has `id` and `name`."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@event
class Finished:
    """The answer is complete. `said` False: the upstream gave no reason (an OpenAI-compatible stream
    that ended with `[DONE]` alone): `reason` is what the other doors and the record take, while a
    chat stream built from these events (a cache hit's) shows no `finish_reason`, as the upstream did."""

    reason: FinishReason
    said: bool = True


@event
class UsageReport:
    prompt: int
    completion: int
    reasoning: int | None = None
    cached: int | None = None  # prompt tokens read from the provider's prompt cache (part of `prompt`)
    estimated: bool = False
    cache_write: int | None = None  # prompt tokens written to the prompt cache (part of `prompt`)

    @property
    def total(self) -> int:
        return self.prompt + self.completion


@event
class Failed:
    code: FailureCode
    message: str
    provider: str = ""
    retriable_before_commit: bool = True
    status: int = 0


@event
class Progress:
    percent: int
    stage: str


@event
class PartialImage:
    index: int
    b64_json: str


@event
class Image:
    b64_json: str
    revised_prompt: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


Event = (
    Started
    | RawFrame
    | TextDelta
    | ReasoningDelta
    | ToolCallDelta
    | Finished
    | UsageReport
    | Failed
    | Progress
    | PartialImage
    | Image
)
