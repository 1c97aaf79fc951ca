"""`GenerationRequest`: what every door validates its body into, and every provider builds from.

Messages use the OpenAI chat shape (role, content as str or parts, tool_calls, tool_call_id,
reasoning_details): it is the richest common form, and the other doors convert into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(slots=True)
class ResponsesExtras:
    """What a `/v1/responses` body carries beyond the canonical request (docs/agents.md).

    `body` is the body as sent: a provider that speaks the Responses API (`kind = "openai"` with
    `responses = true`) gets it untouched. `only` holds the fields (or hosted tools, by their place
    `tools[i]`) that only such a provider can honour; every other route refuses the request by the
    first one's name (providers/fidelity.py), unless it is a hosted tool and `drop_hosted` (the
    model's `drop_hosted_tools`) lets a translated route leave it out. `tools` maps the name a
    translated route's model calls back to the Responses tool it stands for (custom and namespaced
    tools are flattened to functions there)."""

    body: dict[str, Any]
    only: dict[str, Any] = field(default_factory=dict)
    hosted: dict[str, str] = field(default_factory=dict)  # `tools[i]` → the hosted tool's type
    drop_hosted: bool = False
    tools: dict[str, ToolRef] = field(default_factory=dict)


@dataclass(slots=True)
class MessagesExtras:
    """What a `/v1/messages` body carries beyond the canonical request (docs/agents.md, Claude Code).

    `body` and `headers` (`anthropic-version`, `anthropic-beta`) are the request as sent: a provider
    of kind `anthropic` gets them untouched. `only` holds what only such a provider can honour (a
    field, a block or tool type by its place, a beta flag): every other route refuses the request by
    the first one's name (providers/fidelity.py)."""

    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    only: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class GeminiExtras:
    """What a Gemini API body carries beyond the canonical request (docs/agents.md, Gemini CLI).

    `body` is the `generateContent` body as sent: a provider of kind `gemini` gets it untouched (its
    chunks pass through). `only` holds what only such a provider can honour (a field, a part or a
    tool by its place): every other route refuses the request by the first one's name
    (providers/fidelity.py). `dropped` names the sampling fields other routes leave out, saying so
    in `X-Tidegate-Dropped` (`topK`: no other API has it, and Gemini CLI sends it on every request)."""

    body: dict[str, Any]
    only: dict[str, Any] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolRef:
    """A flattened Responses tool: `kind` function or custom, its own name and its namespace."""

    kind: str
    name: str
    namespace: str | None = None


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
    # set by the Responses door only
    responses: ResponsesExtras | None = None
    # set by the Messages door only
    messages_api: MessagesExtras | None = None
    # set by the Gemini door only
    gemini_api: GeminiExtras | None = None
    # set by every chat door before the generation starts (server/hints.py)
    session: SessionHints | None = None

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
