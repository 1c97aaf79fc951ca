"""What each provider kind does with each request field (docs/api-edges.md §15): translated, passed through, or
refused before the response starts with 400 `unsupported_parameter` naming the field and the provider.
Never silently dropped.

The table is the one place this is decided: the relay asks `refused_field` before it opens a route
(a refusal moves to the next route, gateway/fallback.py), and docs/translation.md is written from it
(`python -m tidegate.providers.kinds > docs/translation.md`; a test checks the file is current). Each
provider kind's registry entry (providers/kinds.py) names its table here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..request import GenerationRequest, WireFormat
from .anthropic.request import json_schema_of, thinking_budget, wants_json

TRANSLATED, PASSED, REFUSED, HINT = "translated", "passed through", "refused", "accepted (hint)"
# a model that does not think (`Fidelity.thinks`): it meets an effort by doing nothing
IGNORED, NO_BUDGET = "ignored (no thinking)", "effort ignored; `max_tokens` refused"

# The Chat Completions request fields (OpenAI's API reference), and what tidegate adds (`reasoning`,
# OpenRouter's shape; `provider`, routing). The Responses and native doors arrive as the same
# canonical request: their fields are these once parsed.
CHAT_FIELDS = (
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "reasoning",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
)
# read by tidegate itself whatever the provider (`n` only as 1: the chat door refuses more)
GATEWAY_FIELDS = frozenset({"model", "messages", "stream", "stream_options", "provider", "n"})
# hints that cannot change the answer (docs/api-edges.md §17): accepted on every kind, used where they mean
# something (`user` and `safety_identifier` are the Anthropic kinds' `metadata.user_id`)
HINTS = dict.fromkeys(("prompt_cache_key", "safety_identifier", "metadata", "user"), HINT)

_SAMPLING = dict.fromkeys(("max_tokens", "max_completion_tokens", "temperature", "top_p", "stop"), TRANSLATED)
# what the Anthropic kinds and Gemini both translate: tools, reasoning, structured output
_TRANSLATING = {
    **_SAMPLING,
    **dict.fromkeys(
        ("tools", "tool_choice", "parallel_tool_calls", "reasoning", "reasoning_effort", "response_format"), TRANSLATED
    ),
}
_ANTHROPIC = {**HINTS, **_TRANSLATING, "user": TRANSLATED, "safety_identifier": TRANSLATED}
# the values that ask for nothing (a client library's defaults): not a use of the field
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0,),
    "presence_penalty": (0,),
    "logit_bias": ({},),
    "modalities": (["text"],),
    "response_format": ({"type": "text"},),
    "n": (1,),
    "metadata": ({},),
    "service_tier": ("auto", "default"),
    "parallel_tool_calls": (True,),  # every kind's default
}


def _sent(request: GenerationRequest) -> dict[str, Any]:
    """The fields the request uses: the chat door's body as sent, or the canonical request's."""
    if request.raw_body:
        return request.raw_body
    return {
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "stop": request.stop or None,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
        "parallel_tool_calls": request.parallel_tool_calls,
        "seed": request.seed,
        "user": request.user,
        "response_format": request.response_format,
        "reasoning": request.reasoning if _asks_reasoning(request) else None,
    }


def _asks_reasoning(request: GenerationRequest) -> bool:
    """Thinking asked for: an effort other than `none`, or a budget. A `summary` alone (what Codex CLI
    sends) only says how thinking is shown, and a model that does not think has none to show."""
    r = request.reasoning
    return r is not None and (r.effort not in (None, "none") or r.max_tokens is not None)


def _anthropic_json_refused(request: GenerationRequest) -> bool:
    """`response_format` JSON is a forced tool on the Anthropic kinds: it cannot sit beside the client's
    own tools (the model could call none of them) or thinking (the Messages API refuses a forced tool
    with thinking on), and a tool's input schema must be an object schema."""
    if not wants_json(request):
        return False
    return bool(request.tools) or thinking_budget(request) is not None or json_schema_of(request) is None


def _cache_markers(request: GenerationRequest) -> bool:
    """A prompt-cache breakpoint (`cache_control`) on a content part or a tool: the local model has no
    prompt cache to honour it with. On the Messages door it is a hint (Claude Code marks every request):
    a route without a prompt cache serves the request uncached."""
    if request.as_sent is not None and request.as_sent.wire == WireFormat.MESSAGES:
        return False
    for message in request.messages:
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and "cache_control" in p for p in content):
            return True
    return any(isinstance(t, dict) and "cache_control" in t for t in request.tools or ())


def _serial_calls(request: GenerationRequest) -> bool:
    """`parallel_tool_calls: false`: Gemini has no switch for it."""
    return request.parallel_tool_calls is False and bool(request.tools)


@dataclass(frozen=True, slots=True)
class Fidelity:
    """What a provider kind does with a request's fields: its column of docs/translation.md. Each kind's
    registry entry (providers/kinds.py) names one of the tables below."""

    fields: dict[str, str]  # field → TRANSLATED, PASSED, HINT (absent: REFUSED)
    # what some requests still cannot be served with: (the field named in the refusal, the check)
    conditions: tuple[tuple[str, Callable[[GenerationRequest], bool]], ...] = ()
    checked: bool = True  # False: the client's body goes as sent, unknown fields too; nothing is refused
    # False: a model that does not think. An effort (adaptive thinking, an effort hint) it satisfies
    # by doing nothing; a thinking budget it cannot honour is refused by the field's name as sent
    thinks: bool = True


OPENAI = Fidelity(dict.fromkeys(CHAT_FIELDS, PASSED), checked=False)
# anthropic, bedrock and vertex: the Messages API's body (on bedrock and vertex in another cloud's
# envelope); each speaks the Messages API, so takes the Messages door's body as sent (providers/kinds.py)
ANTHROPIC_FAMILY = Fidelity(_ANTHROPIC, (("response_format", _anthropic_json_refused),))
ANTHROPIC = ANTHROPIC_FAMILY
GEMINI = Fidelity(
    {**HINTS, **_TRANSLATING, "seed": TRANSLATED},
    (("cache_control", _cache_markers), ("parallel_tool_calls", _serial_calls)),
)
LOCAL = Fidelity(
    {
        **HINTS,
        **_SAMPLING,
        **dict.fromkeys(("seed", "tools", "tool_choice", "parallel_tool_calls"), TRANSLATED),
        "reasoning": NO_BUDGET,
        "reasoning_effort": IGNORED,
    },
    (("cache_control", _cache_markers),),
    thinks=False,
)
NOTES = {
    "response_format": "on `anthropic`, `bedrock` and `vertex`: `json_object` and `json_schema` become one "
    "forced tool (`json_answer`) whose input schema is the client's; its input streams back as the message's "
    "content and the finish reason is `stop`. Refused beside `tools`, with thinking on, or with a schema whose "
    "root is not an object.",
}
GEMINI_NOTES = (
    "On `gemini`, `response_format` is `responseMimeType: application/json` (with `responseJsonSchema` for",
    "`json_schema`), reasoning is a `thinkingConfig` budget with thought summaries, `tool_choice` is",
    "`functionCallingConfig` (`required` and a named function: `ANY`), and `parallel_tool_calls: false`",
    "is refused (Gemini has no such switch).",
)


def refused_field(
    fidelity: Fidelity | None, request: GenerationRequest, speaks: frozenset[WireFormat] = frozenset()
) -> str | None:
    """The first field `request` uses that a provider of this fidelity (its kind's, or None: a kind
    with no table) cannot honour, or None. `speaks`: the APIs the provider speaks (providers/kinds.py),
    whose door's body it takes as sent, so nothing is refused."""
    if request.taken_as_sent(speaks):
        return None  # as sent (providers/anthropic/messages.py, google/gemini.py, openai/responses.py)
    sent = request.as_sent
    if sent is not None and sent.only:
        return next(iter(sent.only))
    tools = request.responses_tools
    if tools is not None and tools.hosted and not tools.drop_hosted:
        where, tool = next(iter(tools.hosted.items()))
        return f"{where}.type ({tool}, a hosted tool; the model's drop_hosted_tools = false refuses it)"
    if fidelity is None or not fidelity.checked:
        return None
    reasoning = request.reasoning
    if not fidelity.thinks and reasoning is not None and reasoning.max_tokens is not None:
        return reasoning.field  # a budget: thinking asked for by name (an effort alone is ignored)
    for field, refused in fidelity.conditions:
        if refused(request):
            return field
    table = fidelity.fields
    for name, value in _sent(request).items():
        if value is None or value is False or name in GATEWAY_FIELDS:
            continue
        if table.get(name, REFUSED) == REFUSED and value not in _NEUTRAL.get(name, ()):
            return name
    return None


def dropped_tools(request: GenerationRequest, speaks: frozenset[WireFormat]) -> tuple[str, ...]:
    """What a route leaves out of `request`, for `X-Tidegate-Dropped`: the body's `dropped` fields (the
    Gemini door's sampling fields) and the hosted tools (the model's `drop_hosted_tools`), every one,
    on a route that does not take the body as sent."""
    if request.taken_as_sent(speaks):
        return ()
    sent = request.as_sent
    if sent is not None and sent.dropped:
        return sent.dropped
    tools = request.responses_tools
    if tools is None or not tools.drop_hosted:
        return ()
    return tuple(dict.fromkeys(tools.hosted.values()))


# The Messages door (`POST /v1/messages`, docs/agents.md): what each kind does with its fields.
# `anthropic`, `bedrock` and `vertex` take the body as sent; the other kinds get the canonical
# request (server/messages_request.py), so the chat table above applies to what it became.
MESSAGES_ROWS = (
    ("`model`, `messages`, `max_tokens`, `stream`, `provider`", "read by tidegate", "read by tidegate"),
    ("`system` (string or text blocks), `role: system` messages", "as sent", "translated"),
    ("text, image, `tool_use`, `tool_result` blocks", "as sent", "translated"),
    ("`thinking` / `redacted_thinking` blocks (signatures)", "as sent", "translated¹"),
    ("`tools` (client tools), `tool_choice`", "as sent", "translated"),
    ("a tool with `defer_loading: true`", "as sent", "left out²"),
    (
        "`thinking` (`enabled`, `adaptive`), `output_config.effort`",
        "as sent",
        "translated (`local`: `adaptive` and an effort ignored, `enabled` refused)",
    ),
    ("`output_config.format`", "as sent", "translated (as `response_format` json_schema)"),
    ("`stop_sequences`, `temperature`, `top_p`", "as sent", "translated"),
    ("`cache_control` on blocks and tools", "as sent", "hint³"),
    ("`metadata.user_id`", "as sent", "hint (`user`)"),
    (
        "the body's `cache_control`, `service_tier`, `diagnostics`, `workspace_id`, `user_profile_id`,"
        " `speed: standard`",
        "as sent",
        "hint",
    ),
    ("`context_management` that keeps all thinking (Claude Code's)", "as sent", "hint"),
    ("`tool_result.is_error`", "as sent", "the result's content alone"),
    (
        "`top_k`, other `context_management`, `container`, `mcp_servers`, `inference_geo`, `speed: fast`,"
        " server tools (`tools[i].type`), document and other block types, any other field",
        "as sent",
        "refused by name",
    ),
    ("answer: `message_start.message.usage.input_tokens`", "the upstream's", "estimated⁵"),
    ("answer: `stop_reason: stop_sequence`, `stop_sequence`", "the upstream's", "`end_turn`, `null`⁶"),
    ("`anthropic-beta` flags of the accepted list⁴", "as sent", "accepted"),
    ("any other `anthropic-beta` flag", "as sent", "refused by name (`anthropic-beta: <flag>`)"),
)
MESSAGES_NOTES = (
    "¹ Replayed as `reasoning_details`: the Anthropic kinds get the blocks back as sent; a chat route gets",
    "them as its reasoning details; an unsigned thinking block is not replayed to an Anthropic kind.",
    "² A deferred tool is hidden from the model until a server tool search loads it; a translated route",
    "has none (that tool is refused there), so its model never sees the tool.",
    "³ A route without a prompt cache serves the request uncached (Claude Code marks every request).",
    "⁴ Flags that only permit a feature whose use shows in the body (checked field by field above), name",
    "the client or change how the answer is chunked: `claude-code-*`, `interleaved-thinking-*`,",
    "`context-management-*`, `mid-conversation-*`, `thinking-token-count-*`, `thinking-display-updates-*`,",
    "`advanced-tool-use-*`, `effort-*`, `prompt-caching-*`, `extended-cache-ttl-*`,",
    "`fine-grained-tool-streaming-*`, `token-efficient-tools-*`, `token-counting-*`, `structured-outputs-*`,",
    "`output-128k-*`, `output-300k-*`, `model-context-window-exceeded-*`, `pdfs-*`, `cache-diagnosis-*`.",
    "⁵ Before the upstream has said it: the o200k count of a prompt of up to 8 KiB, ~4 characters a token",
    "past that; `message_delta`'s `usage` carries the route's own count (the SDKs keep that one).",
    "⁶ A chat upstream (and Gemini, and llama.cpp) leaves the sequence out of the text and ends with",
    "`finish_reason: stop` either way, so nothing tells a stop sequence from the model's own end.",
)


def _messages_markdown() -> list[str]:
    lines = [
        "",
        "## The Messages door",
        "",
        "`POST /v1/messages` ([agents.md](agents.md)): a route of kind `anthropic` gets the body and the",
        "`anthropic-version` / `anthropic-beta` headers as sent and its events pass through. `bedrock` and",
        "`vertex` routes get the body as sent in their hosts' shape: `model` out of it (it is in the URL),",
        "`anthropic_version` in it (`bedrock-2023-05-31`, `vertex-2023-10-16`), the `anthropic-beta` flags",
        "as Bedrock's `anthropic_beta` array in the body or as Vertex's `anthropic-beta` header, and `stream`",
        "out on Bedrock (the operation streams); their events pass through too. Every other kind gets the",
        "request translated, and the table above applies to what it became. A refusal is `400` in",
        "Anthropic's error shape (`invalid_request_error`, `code: unsupported_parameter`) naming the field.",
        "",
        "| field | `anthropic`, `bedrock`, `vertex` | `openai`, `gemini`, `local` |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {anthropic} | {others} |" for name, anthropic, others in MESSAGES_ROWS]
    return [*lines, "", *MESSAGES_NOTES]


# The Gemini door (`/v1beta/models/{model}:generateContent`, docs/agents.md): a `gemini` route takes the
# body as sent; the other kinds get the canonical request (server/gemini_door_request.py).
GEMINI_ROWS = (
    ("`contents` (text, image `inlineData`, `functionCall`, `functionResponse`), `systemInstruction`", "translated"),
    ("`tools[].functionDeclarations`, `toolConfig.functionCallingConfig` (`AUTO`, `NONE`, `ANY`)", "translated"),
    ("`generationConfig`: `maxOutputTokens`, `temperature`, `topP`, `stopSequences`, `seed`", "translated"),
    ("`generationConfig.thinkingConfig`, `responseMimeType` + `responseSchema` / `responseJsonSchema`", "translated"),
    ("`thoughtSignature` tidegate wrote (a route's own thinking)", "translated (replayed)"),
    ("`safetySettings` with `BLOCK_NONE` / `OFF`, `labels`", "hint"),
    ("`generationConfig.topK`", "left out, named in `X-Tidegate-Dropped`"),
    (
        "hosted tools (`googleSearch`, `codeExecution`, ...), a stricter `safetySettings` threshold,"
        " `cachedContent`, other `generationConfig` fields, `fileData`, non-image `inlineData`",
        "refused by name",
    ),
)


def _gemini_markdown() -> list[str]:
    lines = [
        "",
        "## The Gemini door",
        "",
        "`POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent` ([agents.md](agents.md)):",
        "a route of kind `gemini` gets the body as sent and its chunks pass through; every other kind gets",
        "the request translated, and the table above applies to what it became. A refusal is `400` in",
        "Google's error shape (`INVALID_ARGUMENT`, reason `UNSUPPORTED_PARAMETER`) naming the field's place.",
        "",
        "| field | `gemini` | `openai`, `anthropic`, `bedrock`, `vertex`, `local` |",
        "|---|---|---|",
    ]
    return lines + [f"| {name} | as sent | {others} |" for name, others in GEMINI_ROWS]


def refusal_message(field: str, provider: str, kind: str) -> str:
    return (
        f"'{field}' is not supported by provider {provider!r} (kind {kind!r}); tidegate refuses it rather"
        " than drop it: remove it, or use a model served by a provider that supports it"
    )


def table_markdown(columns: Sequence[tuple[str, Fidelity]]) -> str:
    """docs/translation.md: one column per provider kind (its name and its table, from the registry:
    `python -m tidegate.providers.kinds > docs/translation.md`)."""
    kinds = [name for name, _ in columns]
    tables = dict(columns)
    noted = {(field, name) for name, f in columns for field, _ in f.conditions if field in ("response_format",)}
    lines = [
        "# Request fields by provider kind",
        "",
        "Generated from `src/tidegate/providers/fidelity.py` (`python -m tidegate.providers.kinds >"
        " docs/translation.md`); docs/api-edges.md §15. A field a provider kind cannot honour is refused before",
        "the response starts with 400 `unsupported_parameter` naming the field and the provider, never",
        "silently dropped; when a model has another route that can serve the request, that route is",
        "tried instead (docs/fallback.md). A field sent with the value that asks for nothing (`null`,",
        "`false`, `n: 1`, `response_format: {type: text}`, `service_tier: auto`, a zero penalty, ...) is",
        "not a use of it. A hint (`accepted (hint)`: `prompt_cache_key`, `safety_identifier`, `metadata`,",
        "`user`) cannot change the answer: it is accepted on every kind and used where it means something",
        "(`user`, else `safety_identifier`, is the Anthropic kinds' `metadata.user_id`). `model`,",
        "`messages`, `stream`, `stream_options`, `provider` and `n: 1` are read by tidegate on every kind.",
        "The Responses door's fields are in [agents.md](agents.md).",
        "",
        "| field | " + " | ".join(f"`{k}`" for k in kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    for name in CHAT_FIELDS:
        cells = [tables[k].fields.get(name, REFUSED) + ("¹" if (name, k) in noted else "") for k in kinds]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    lines.append("")
    lines.extend(f"¹ `{name}` {note}" for name, note in NOTES.items())
    lines += [
        "",
        *GEMINI_NOTES,
        "",
        "## Inside messages and tools",
        "",
        "`cache_control` (a prompt-cache breakpoint, `{type: ephemeral, ttl?: 5m | 1h}`, on a content part or",
        "a tool, as OpenRouter and LiteLLM accept it) is passed on to `anthropic`, `bedrock` and `vertex` as",
        "sent, forwarded untouched to `openai`, and refused on `gemini` and `local`. Cache reads come back as",
        "`usage.prompt_tokens_details.cached_tokens` and cache writes as `cache_write_tokens` beside it",
        "(tidegate's extension; the Responses API's `input_tokens_details` has both); both are part of",
        "`prompt_tokens`, and the record prices them at the model's `pricing.cache_read` and",
        "`pricing.cache_write` (docs/configuration.md).",
        *_messages_markdown(),
        *_gemini_markdown(),
    ]
    return "\n".join(lines) + "\n"
