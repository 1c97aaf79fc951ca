"""`GenerationRequest` (OpenAI chat shape) → Anthropic Messages request body.

Pure translation shared by the `anthropic`, `bedrock` and `vertex` kinds (they differ only in what
they add or remove around it). Anything that cannot be expressed raises a non-retriable
`ProviderFailure` with status 400 naming the field, so the client learns what to fix.

- system / developer messages → top-level `system` text blocks;
- user / assistant turns → content blocks, consecutive same-role turns merged (Anthropic requires
  alternation); `role: tool` messages → `tool_result` blocks in a user turn;
- image parts: `data:` URLs → base64 `source`, http(s) URLs → `url` source;
- assistant `tool_calls` → `tool_use` blocks (arguments parsed), `reasoning_details` replayed verbatim
  first: `reasoning.text` with a signature → `thinking`, `reasoning.encrypted` → `redacted_thinking`;
- tools / tool_choice / parallel_tool_calls, max_tokens (default 4096), temperature (clamped to
  Anthropic's 0–1), top_p, stop → stop_sequences, user (else safety_identifier) → metadata.user_id;
- `reasoning` → `thinking: {type: enabled, budget_tokens}` (effort table or explicit max_tokens);
  thinking tokens count toward Anthropic's `max_tokens`, so it is raised to budget + answer allowance
  when the budget would not fit. With thinking on, Anthropic rejects `temperature` != 1 and
  `top_p` < 0.95: those are dropped rather than failing the request.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...errors import ProviderFailure, quote
from ...request import GenerationRequest

DEFAULT_MAX_TOKENS = 4096
MIN_THINKING_BUDGET = 1024
EFFORT_BUDGETS: dict[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32000,
    "max": 64000,
}
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
# `response_format` json_object / json_schema: the Messages API has no such field, so the model is made
# to call this one tool with the schema as its input schema; its input is the answer, returned to the
# client as the message's content (MessagesEventDecoder) and never as a tool call.
JSON_TOOL = "json_answer"


def _invalid(message: str) -> ProviderFailure:
    return ProviderFailure("invalid_request", message, status=400, retriable=False)


CACHE_TTLS = ("5m", "1h")


def _cached(block: dict[str, Any], part: Any, where: str) -> dict[str, Any]:
    """`block` with the part's Anthropic prompt-cache breakpoint (`cache_control`, as OpenRouter and
    LiteLLM accept it on OpenAI content parts and tools), checked, passed on as sent."""
    marker = part.get("cache_control") if isinstance(part, dict) else None
    if marker is None:
        return block
    if not isinstance(marker, dict) or marker.get("type") != "ephemeral" or set(marker) - {"type", "ttl"}:
        raise _invalid(f'\'{where}.cache_control\' must be {{"type": "ephemeral"}} (with an optional "ttl")')
    if "ttl" in marker and marker["ttl"] not in CACHE_TTLS:
        raise _invalid(f"'{where}.cache_control.ttl' must be one of {', '.join(CACHE_TTLS)}")
    return {**block, "cache_control": dict(marker)}


def _plain(content: Any) -> list[dict[str, Any]] | None:
    """No content or a plain string: its blocks without walking parts (None: it has parts)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return None


def _text_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """Text-only content (system, developer) as text blocks; empty text is dropped."""
    if (plain := _plain(content)) is not None:
        return plain
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
            raise _invalid(f"'{where}.content[{j}]': only text parts are supported in this message")
        if part.get("text"):
            blocks.append(_cached({"type": "text", "text": str(part["text"])}, part, f"{where}.content[{j}]"))
    return blocks


def _image_block(part: dict[str, Any], where: str) -> dict[str, Any]:
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str) or not url:
        raise _invalid(f"'{where}.image_url.url' is required")
    if url.startswith("data:"):
        header, sep, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if not sep or encoding != "base64":
            raise _invalid(f"'{where}.image_url.url': data URLs must be base64 (data:image/png;base64,...)")
        if media_type not in IMAGE_MEDIA_TYPES:
            raise _invalid(f"'{where}.image_url.url': image type must be one of {', '.join(IMAGE_MEDIA_TYPES)}")
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise _invalid(f"'{where}.image_url.url' must be an http(s) URL or a base64 data: URL")


def _content_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """User / tool content: text and image parts."""
    if (plain := _plain(content)) is not None:
        return plain
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        pw = f"{where}.content[{j}]"
        ptype = part.get("type") if isinstance(part, dict) else None
        if ptype in ("text", "input_text", "output_text", "refusal"):
            text = part.get("text") if ptype != "refusal" else part.get("refusal")
            if text:
                blocks.append(_cached({"type": "text", "text": str(text)}, part, pw))
        elif ptype == "image_url":
            blocks.append(_cached(_image_block(part, pw), part, pw))
        else:
            raise _invalid(f"'{pw}.type' {quote(ptype)} is not supported by this provider (use text or image_url)")
    return blocks


def _thinking_blocks(details: Any, where: str) -> list[dict[str, Any]]:
    """Assistant `reasoning_details` replayed verbatim. Streamed fragments of one block (same index,
    consecutive) are joined; text without a signature cannot be verified upstream and is dropped."""
    if not details:
        return []
    blocks: list[dict[str, Any]] = []
    last_index: Any = object()
    for j, d in enumerate(details):
        if not isinstance(d, dict):
            raise _invalid(f"'{where}.reasoning_details[{j}]' must be an object")
        dtype = d.get("type")
        index = d.get("index", j)
        if dtype == "reasoning.text":
            if blocks and blocks[-1]["type"] == "thinking" and index == last_index:
                blocks[-1]["thinking"] += str(d.get("text") or "")
                if d.get("signature"):
                    blocks[-1]["signature"] = str(d["signature"])
            else:
                blocks.append({"type": "thinking", "thinking": str(d.get("text") or ""), "signature": ""})
                if d.get("signature"):
                    blocks[-1]["signature"] = str(d["signature"])
        elif dtype == "reasoning.encrypted":
            data = d.get("data")
            if not isinstance(data, str) or not data:
                raise _invalid(f"'{where}.reasoning_details[{j}].data' is required for reasoning.encrypted")
            blocks.append({"type": "redacted_thinking", "data": data})
        # reasoning.summary and unknown detail types have no Anthropic form: not replayed
        last_index = index
    return [b for b in blocks if b["type"] != "thinking" or b["signature"]]


def call_arguments(fn: dict[str, Any], where: str) -> dict[str, Any]:
    """An assistant tool call's `function.arguments` (a JSON text) as the object the upstream wants."""
    raw = fn.get("arguments") or ""
    try:
        args = orjson.loads(raw) if raw.strip() else {}
    except (orjson.JSONDecodeError, AttributeError):
        raise _invalid(f"'{where}.function.arguments' is not valid JSON") from None
    if not isinstance(args, dict):
        raise _invalid(f"'{where}.function.arguments' must be a JSON object")
    return args


def _tool_use_blocks(calls: Any, where: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for j, call in enumerate(calls or []):
        fn = call.get("function") or {}
        args = call_arguments(fn, f"{where}.tool_calls[{j}]")
        blocks.append({"type": "tool_use", "id": str(call.get("id")), "name": str(fn.get("name")), "input": args})
    return blocks


def _tool_result_block(message: dict[str, Any], where: str) -> dict[str, Any]:
    content = message.get("content")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id"))}
    if isinstance(content, str):
        block["content"] = content
    else:
        block["content"] = _content_blocks(content, where)
    return block


def add_turn(turns: list[dict[str, Any]], role: str, items: list[dict[str, Any]], field: str) -> None:
    """Append `items` as a `role` turn, joining the last turn when it has the same role (both the
    Messages API and Gemini want roles to alternate). `field` holds the items: `content` or `parts`."""
    if not items:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1][field].extend(items)
    else:
        turns.append({"role": role, field: items})


def translate_messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """OpenAI chat messages → (system blocks, alternating Anthropic turns)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        add_turn(turns, role, blocks, "content")

    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role")
        if role in ("system", "developer"):
            system.extend(_text_blocks(m.get("content"), where))
        elif role == "user":
            add("user", _content_blocks(m.get("content"), where))
        elif role == "tool":
            add("user", [_tool_result_block(m, where)])
        elif role == "assistant":
            blocks = _thinking_blocks(m.get("reasoning_details"), where)
            blocks += _content_blocks(m.get("content"), where)
            blocks += _tool_use_blocks(m.get("tool_calls"), where)
            add("assistant", blocks)
        else:
            raise _invalid(f"'{where}.role' {quote(role)} is not supported by this provider")
    if not turns:
        raise _invalid("'messages' needs at least one user message with content")
    return system, turns


def _tools(request: GenerationRequest) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None]:
    if not request.tools:
        return None, None
    tools: list[dict[str, Any]] = []
    for i, t in enumerate(request.tools):
        fn = t.get("function") or {}
        tool: dict[str, Any] = {
            "name": fn.get("name"),
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
        }
        if fn.get("description"):
            tool["description"] = fn["description"]
        tools.append(_cached(tool, t, f"tools[{i}]"))
    choice_raw = request.tool_choice
    choice: dict[str, Any] | None
    if choice_raw is None:
        choice = None
    elif choice_raw in ("auto", "none"):
        choice = {"type": choice_raw}
    elif choice_raw == "required":
        choice = {"type": "any"}
    elif isinstance(choice_raw, dict) and isinstance((choice_raw.get("function") or {}).get("name"), str):
        choice = {"type": "tool", "name": choice_raw["function"]["name"]}
    else:
        raise _invalid("'tool_choice' must be 'auto', 'none', 'required' or {type: function, function: {name}}")
    if request.parallel_tool_calls is False and (choice is None or choice["type"] != "none"):
        choice = dict(choice or {"type": "auto"})
        choice["disable_parallel_tool_use"] = True
    return tools, choice


def wants_json(request: GenerationRequest) -> bool:
    """`response_format` asks for JSON (json_object or json_schema), not plain text."""
    rf = request.response_format
    return isinstance(rf, dict) and rf.get("type") in ("json_object", "json_schema")


def json_schema_of(request: GenerationRequest) -> dict[str, Any] | None:
    """The object schema the answer must follow: `{"type": "object"}` for json_object, the client's for
    json_schema, None when that is not an object schema (the Messages API's tools take only those)."""
    rf = request.response_format or {}
    if rf.get("type") == "json_object":
        return {"type": "object"}
    spec = rf.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) and schema.get("type") == "object" else None


def _answer_tool(request: GenerationRequest) -> dict[str, Any]:
    schema = json_schema_of(request)
    if schema is None:  # fidelity.refused_field refuses it before a route opens; a direct caller lands here
        raise _invalid('\'response_format.json_schema.schema\' must be a JSON schema with "type": "object"')
    spec = (request.response_format or {}).get("json_schema")
    about = spec.get("description") if isinstance(spec, dict) else None
    return {
        "name": JSON_TOOL,
        "description": str(about or "Give the answer as this tool's input: a JSON value following the schema."),
        "input_schema": schema,
    }


def thinking_budget(request: GenerationRequest) -> int | None:
    r = request.reasoning
    if r is None:
        return None
    if r.max_tokens is not None:
        return max(MIN_THINKING_BUDGET, r.max_tokens)
    if r.effort is None or r.effort == "none":
        return None
    return EFFORT_BUDGETS.get(r.effort, EFFORT_BUDGETS["medium"])


def messages_body(request: GenerationRequest, *, model: str | None, stream: bool = True) -> dict[str, Any]:
    """The Messages body. `model` None leaves it out (Bedrock and Vertex put it in the URL)."""
    system, turns = translate_messages(request.messages)
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    max_tokens = request.max_tokens or DEFAULT_MAX_TOKENS
    budget = thinking_budget(request)
    if budget is not None and budget >= max_tokens:
        max_tokens = budget + (request.max_tokens or DEFAULT_MAX_TOKENS)
    body["max_tokens"] = max_tokens
    body["messages"] = turns
    if system:
        body["system"] = system
    if budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if request.temperature is not None and (budget is None or request.temperature == 1):
        body["temperature"] = min(1.0, float(request.temperature))
    if request.top_p is not None and (budget is None or request.top_p >= 0.95):
        body["top_p"] = float(request.top_p)
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    tools, choice = (
        ([_answer_tool(request)], {"type": "tool", "name": JSON_TOOL}) if wants_json(request) else _tools(request)
    )
    if tools is not None:
        body["tools"] = tools
        if choice is not None:
            body["tool_choice"] = choice
    user = request.user or request.safety_identifier  # (the hint that replaces `user`: the same use)
    if user:
        body["metadata"] = {"user_id": user}
    if stream:
        body["stream"] = True
    return body
