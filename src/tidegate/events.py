"""Canonical events: the one stream every provider decodes into and every renderer reads from.

Small frozen structs, one per fact. Providers never see door formats; renderers never see provider
formats. `RawFrame` carries an OpenAI-compatible upstream's chunk bytes for the passthrough chat door.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "error"]
FailureCode = Literal["upstream_error", "upstream_timeout", "upstream_protocol_error", "cancelled", "interrupted"]
ReasoningKind = Literal["text", "encrypted", "summary"]


@dataclass(frozen=True, slots=True)
class Started:
    """The upstream accepted the request; `upstream_id` is its own message/chunk id when it has one."""

    provider: str
    served_model: str
    upstream_id: str | None = None


@dataclass(frozen=True, slots=True)
class RawFrame:
    """One upstream SSE data payload, byte for byte (OpenAI-compatible passthrough only)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call. The first fragment of a call has `id` and `name`."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    reason: FinishReason


@dataclass(frozen=True, slots=True)
class UsageReport:
    prompt: int
    completion: int
    reasoning: int | None = None
    cached: int | None = None
    estimated: bool = False

    @property
    def total(self) -> int:
        return self.prompt + self.completion


@dataclass(frozen=True, slots=True)
class Failed:
    code: FailureCode
    message: str
    provider: str = ""
    retriable_before_commit: bool = True
    status: int = 0


@dataclass(frozen=True, slots=True)
class Progress:
    percent: int
    stage: str


@dataclass(frozen=True, slots=True)
class PartialImage:
    index: int
    b64_json: str


@dataclass(frozen=True, slots=True)
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
