"""`GenerationRequest`: what every door validates its body into, and every provider builds from.

Messages use the OpenAI chat shape (role, content as str or parts, tool_calls, tool_call_id,
reasoning_details): it is the richest common form, and the other doors convert into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


@dataclass(slots=True)
class ReasoningOptions:
    effort: str | None = None  # minimal | low | medium | high
    max_tokens: int | None = None  # explicit thinking budget
    summary: str | None = None
    exclude: bool = False
    field: str = "reasoning"  # the field that asked for it, as its door's client sent it (refusals name it)


@dataclass(frozen=True, slots=True)
class ProviderPrefs:
    """A request's OpenRouter-compatible `provider` object plus `jurisdictions` (docs/api-operations.md §12)."""

    order: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    allow_fallbacks: bool = True
    jurisdictions: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ToolRef:
    """A flattened Responses tool: `kind` function or custom, its own name and its namespace."""

    kind: str
    name: str
    namespace: str | None = None


class WireFormat(StrEnum):
    """An API a door's body is written in, which some upstreams speak too (`Kind.speaks`)."""

    RESPONSES = "responses"  # OpenAI's Responses API
    MESSAGES = "messages"  # Anthropic's Messages API, with its anthropic-* headers
    GEMINI = "gemini"  # Google's generateContent


@dataclass(slots=True)
class AsSent:
    """A door's body as the client sent it, beside the canonical request made from it (docs/agents.md).

    A route whose provider speaks `wire` gets `body` (and `headers`: `anthropic-version`,
    `anthropic-beta`) untouched. Every other route is translated from the canonical request: it refuses
    the request by the first name in `only` (what only a route that speaks `wire` can honour: a field,
    a block, part or tool type by its place, a beta flag; providers/fidelity.py), and leaves out
    `dropped`, saying so in `X-Tidegate-Dropped` (Gemini's `topK`: no other API has it, and Gemini CLI
    sends it on every request). An empty `body`: no route gets it as sent (an MCP loop's turns)."""

    wire: WireFormat
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    only: dict[str, Any] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()


@dataclass(slots=True)
class ResponsesTools:
    """What a translated route needs of a `/v1/responses` body's tools (docs/agents.md). `hosted`: the
    hosted tools by their place `tools[i]`, which only a route that speaks the Responses API serves;
    another refuses the request by the first, unless `drop_hosted` (the model's `drop_hosted_tools`)
    lets it leave them out. `refs`: the name a translated route's model calls back → the Responses
    tool it stands for (custom and namespaced tools are flattened to functions there)."""

    hosted: dict[str, str] = field(default_factory=dict)
    drop_hosted: bool = False
    refs: dict[str, ToolRef] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionHints:
    """Who sent a request and in which agent session (docs/sessions.md): the record's
    `agent_session` and `hints`, and prompt-cache affinity's key (gateway/affinity.py)."""

    session: str | None  # the agent session (its precedence: server/hints.py)
    agent: str  # codex | claude-code | gemini-cli | other
    hints: dict[str, Any]  # the hint fields as sent, capped in size, `agent` among them


@dataclass(slots=True)
class GenerationRequest:
    model: str
    messages: list[dict[str, Any]]
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    reasoning: ReasoningOptions | None = None
    seed: int | None = None
    user: str | None = None
    response_format: dict[str, Any] | None = None
    # stream_options exactly as the client sent it (None = not sent: tidegate injects include_usage)
    stream_options: dict[str, Any] | None = None
    # The client's body as sent (for OpenAI-compatible passthrough, which forwards unknown fields too)
    raw_body: dict[str, Any] = field(default_factory=dict)
    # The `provider` routing object (gateway/routing.py); never forwarded upstream
    provider: ProviderPrefs | None = None
    # hints that cannot change the answer (docs/translation.md): passed to the upstreams that take them
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    # the body as sent, by the doors whose API some upstreams speak (Responses, Messages, Gemini)
    as_sent: AsSent | None = None
    # set by the Responses door only
    responses_tools: ResponsesTools | None = None
    # set by every chat door before the generation starts (server/hints.py)
    session: SessionHints | None = None

    def sent_as(self, wire: WireFormat) -> AsSent | None:
        """The body as sent, when it was written in `wire` and there is one to send."""
        return self.as_sent if self.taken_as_sent(frozenset((wire,))) else None

    def taken_as_sent(self, speaks: frozenset[WireFormat]) -> bool:
        """A route that speaks `speaks` gets the body as sent (no refusal, nothing dropped)."""
        sent = self.as_sent
        return sent is not None and bool(sent.body) and sent.wire in speaks

    @property
    def include_usage(self) -> bool:
        """Whether the client wants the usage chunk (docs/api.md §3: yes unless it said false)."""
        if self.stream_options is None:
            return True
        return bool(self.stream_options.get("include_usage", False))


@dataclass(frozen=True, slots=True)
class EmbeddingInputs:
    """What to embed: strings (`texts`) or token arrays (`tokens`), never both."""

    texts: list[str] | None = None
    tokens: list[list[int]] | None = None
    encoding_format: str = "float"
    user: str | None = None
    # The client's body as sent (OpenAI-compatible passthrough forwards it, unknown fields included)
    raw_body: dict[str, Any] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.texts if self.texts is not None else self.tokens or [])
