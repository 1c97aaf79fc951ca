"""Anthropic Messages API request bodies (`POST /v1/messages`) → `GenerationRequest` (docs/agents.md).

Blocks become OpenAI-chat-shaped messages, the canonical form every provider builds from:
- `system` (a string or text blocks) and `role: system` messages → system messages (text parts keep
  their `cache_control`);
- user `text` / `image` blocks → text / `image_url` parts; `tool_result` blocks → `tool` messages
  (placed before the turn's other parts, as a chat upstream wants them right after the calls);
- assistant `text` → content, `tool_use` → `tool_calls`, `thinking` (with its signature) and
  `redacted_thinking` → `reasoning_details`, so the provider can check its own reasoning;
- client tools → functions; `tool_choice` auto / any / tool / none → auto / required / the
  function / none (`disable_parallel_tool_use` → `parallel_tool_calls: false`);
- `thinking` enabled → a budget, adaptive → an effort (`output_config.effort`, else medium);
  `output_config.format` → `response_format` json_schema; `metadata.user_id` → `user` (a hint).

What only an Anthropic route can honour (a field, block or tool type the canonical form has no
room for, a beta flag a translated route cannot act on) goes to `only` by its name: a route of kind
`anthropic` gets the body as sent, every other route refuses it by that name (providers/fidelity.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ....errors import InvalidRequest, quote
from ....gateway.routing import parse_provider_prefs
from ....request import AsSent, GenerationRequest, ReasoningOptions, WireFormat
from ...validate import opt_bool, opt_dict, opt_int, opt_list, opt_number, require_object, require_str

EFFORTS = ("low", "medium", "high", "xhigh", "max")
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
# read by tidegate, or hints that cannot change the answer (accepted on every route)
READ = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stream",
        "stop_sequences",
        "temperature",
        "top_p",
        "thinking",
        "tools",
        "tool_choice",
        "output_config",
        "metadata",
        "provider",
    }
)
HINTS = frozenset({"cache_control", "diagnostics", "workspace_id", "user_profile_id"})
# the neutral value of a field that otherwise only an Anthropic route honours
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "service_tier": ("auto", "standard_only"),
    "speed": ("standard",),
    "context_management": (
        {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},  # keep all thinking: clear nothing
        {"edits": []},
    ),
}
# Beta flags (the `anthropic-beta` header) a translated route honours: each only permits a feature
# whose use shows in the body (which is checked field by field), names the client, or changes how
# the answer is chunked. Any other flag reaches an `anthropic` route only.
BETAS_ACCEPTED = (
    "claude-code-",
    "interleaved-thinking-",
    "context-management-",
    "mid-conversation-",
    "thinking-token-count-",
    "thinking-display-updates-",
    "advanced-tool-use-",
    "effort-",
    "prompt-caching-",
    "extended-cache-ttl-",
    "fine-grained-tool-streaming-",
    "token-efficient-tools-",
    "token-counting-",
    "structured-outputs-",
    "output-128k-",
    "output-300k-",
    "model-context-window-exceeded-",
    "pdfs-",
    "cache-diagnosis-",
)
TOOL_FIELDS = frozenset({"name", "description", "input_schema", "cache_control", "type", "eager_input_streaming"})


@dataclass(slots=True)
class MessagesRequest:
    request: GenerationRequest
    # thinking asked with `display: omitted`: thinking blocks carry their signature, not their text
    omit_thinking: bool = False

    @property
    def extras(self) -> AsSent:
        assert self.request.as_sent is not None
        return self.request.as_sent


def betas_of(header: str | None) -> list[str]:
    return [b.strip() for b in (header or "").split(",") if b.strip()]


class _Converter:
    """Messages → chat messages; `only` collects what a translated route cannot honour."""

    def __init__(self, only: dict[str, Any]) -> None:
        self.only = only
        self.out: list[dict[str, Any]] = []

    def text_part(self, block: dict[str, Any], where: str) -> dict[str, Any]:
        text = block.get("text")
        if not isinstance(text, str):
            raise InvalidRequest(f"'{where}.text' must be a string")
        part: dict[str, Any] = {"type": "text", "text": text}
        if block.get("cache_control") is not None:
            part["cache_control"] = block["cache_control"]
        if block.get("citations"):
            self.only[f"{where}.citations"] = block["citations"]
        return part

    def image_part(self, block: dict[str, Any], where: str) -> dict[str, Any] | None:
        source = block.get("source")
        if not isinstance(source, dict):
            raise InvalidRequest(f"'{where}.source' must be an object")
        stype = source.get("type")
        if stype == "base64":
            media, data = source.get("media_type"), source.get("data")
            if media not in IMAGE_TYPES or not isinstance(data, str):
                raise InvalidRequest(f"'{where}.source' needs media_type (one of {', '.join(IMAGE_TYPES)}) and data")
            url = f"data:{media};base64,{data}"
        elif stype == "url" and isinstance(source.get("url"), str):
            url = source["url"]
        else:
            self.only[f"{where}.source.type"] = stype  # (a file id: only Anthropic holds the file)
            return None
        part: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
        if block.get("cache_control") is not None:
            part["cache_control"] = block["cache_control"]
        return part

    def system(self, content: Any, where: str) -> None:
        if isinstance(content, str):
            if content:
                self.out.append({"role": "system", "content": content})
            return
        if not isinstance(content, list):
            raise InvalidRequest(f"'{where}' must be a string or an array of text blocks")
        parts = []
        for j, block in enumerate(content):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise InvalidRequest(f"'{where}[{j}]' must be a text block")
            if block.get("text"):
                parts.append(self.text_part(block, f"{where}[{j}]"))
        if parts:
            self.out.append({"role": "system", "content": parts})

    def tool_result(self, block: dict[str, Any], where: str) -> dict[str, Any]:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidRequest(f"'{where}.tool_use_id' must be a non-empty string")
        content = block.get("content")
        message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id}
        if content is None or isinstance(content, str):
            message["content"] = content or ""
        elif isinstance(content, list):
            parts = []
            for k, inner in enumerate(content):
                iw = f"{where}.content[{k}]"
                itype = inner.get("type") if isinstance(inner, dict) else None
                if itype == "text":
                    parts.append(self.text_part(inner, iw))
                elif itype == "image":
                    image = self.image_part(inner, iw)
                    if image is not None:
                        parts.append(image)
                else:
                    self.only[f"{iw}.type"] = itype
            message["content"] = parts
        else:
            raise InvalidRequest(f"'{where}.content' must be a string or an array of blocks")
        marker = block.get("cache_control")
        if marker is not None:  # a chat tool message has no such field: its last part carries it
            parts = message["content"]
            if isinstance(parts, str):
                parts = message["content"] = [{"type": "text", "text": parts}]
            if parts:
                parts[-1] = {**parts[-1], "cache_control": marker}
        # `is_error` has no chat form: an anthropic route gets it as sent, another the result alone
        return message

    def user(self, content: Any, where: str) -> None:
        if isinstance(content, str):
            self.out.append({"role": "user", "content": content})
            return
        results: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            bw = f"{where}.content[{j}]"
            btype = block.get("type")
            if btype == "text":
                parts.append(self.text_part(block, bw))
            elif btype == "image":
                image = self.image_part(block, bw)
                if image is not None:
                    parts.append(image)
            elif btype == "tool_result":
                results.append(self.tool_result(block, bw))
            else:  # document, search_result, container_upload, ...: only Anthropic reads them
                self.only[f"{bw}.type"] = btype
        self.out.extend(results)
        if parts:
            self.out.append({"role": "user", "content": parts})

    def assistant(self, content: Any, where: str) -> None:
        if isinstance(content, str):
            self.out.append({"role": "assistant", "content": content})
            return
        texts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        details: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            bw = f"{where}.content[{j}]"
            btype = block.get("type")
            if btype == "text":
                if block.get("text"):
                    texts.append(self.text_part(block, bw))
            elif btype == "tool_use":
                calls.append(_call(block, bw))
            elif btype == "thinking":
                text, signature = block.get("thinking"), block.get("signature")
                if not isinstance(text, str) or not isinstance(signature, str):
                    raise InvalidRequest(f"'{bw}' needs 'thinking' and 'signature' strings")
                detail = {"type": "reasoning.text", "text": text, "signature": signature, "index": len(details)}
                details.append(detail)
            elif btype == "redacted_thinking":
                data = block.get("data")
                if not isinstance(data, str) or not data:
                    raise InvalidRequest(f"'{bw}.data' must be a non-empty string")
                details.append({"type": "reasoning.encrypted", "data": data, "index": len(details)})
            else:  # server_tool_use, web_search_tool_result, ...: only Anthropic replays them
                self.only[f"{bw}.type"] = btype
        message: dict[str, Any] = {"role": "assistant", "content": _joined(texts)}
        if calls:
            message["tool_calls"] = calls
        if details:
            message["reasoning_details"] = details
        if message["content"] is not None or calls or details:
            self.out.append(message)


def _joined(texts: list[dict[str, Any]]) -> Any:
    """Assistant text as one string (what every chat upstream takes), or the parts when one carries a
    cache breakpoint (the Anthropic kinds keep it)."""
    if not texts:
        return None
    if any("cache_control" in t for t in texts):
        return texts
    return "".join(t["text"] for t in texts)


def _call(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name, args = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise InvalidRequest(f"'{where}' needs 'id' and 'name' strings")
    if not isinstance(args, dict):
        raise InvalidRequest(f"'{where}.input' must be an object")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": orjson.dumps(args).decode()}}


def _messages(body: dict[str, Any], only: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'messages' is required: a non-empty array of {role, content} objects")
    conv = _Converter(only)
    if "system" in body and body["system"] is not None:
        conv.system(body["system"], "system")
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise InvalidRequest(f"'{where}' must be an object with 'role' and 'content'")
        role, content = m.get("role"), m.get("content")
        if not isinstance(content, str) and not (
            isinstance(content, list) and all(isinstance(b, dict) for b in content)
        ):
            raise InvalidRequest(f"'{where}.content' must be a string or an array of content blocks")
        if role == "user":
            conv.user(content, where)
        elif role == "assistant":
            conv.assistant(content, where)
        elif role == "system":
            conv.system(content, f"{where}.content")
        else:
            raise InvalidRequest(f"'{where}.role' must be user, assistant or system, got {quote(role)}")
    return conv.out


def _tools(raw: list[Any] | None, only: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(raw or []):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise InvalidRequest(f"'{where}' must be an object")
        if tool.get("type") not in (None, "custom"):  # a server tool (web_search_*, bash_*, ...)
            only[f"{where}.type"] = tool["type"]
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"'{where}.name' must be a non-empty string")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise InvalidRequest(f"'{where}.input_schema' must be a JSON Schema object")
        if tool.get("defer_loading") is True:
            # not shown to the model until a tool search loads it, and a translated route has no
            # server tool search (that tool itself is refused there): its model never sees it
            continue
        for extra in tool:
            if extra not in TOOL_FIELDS and extra != "defer_loading" and tool[extra] not in (None, False, []):
                only[f"{where}.{extra}"] = tool[extra]
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        out: dict[str, Any] = {"type": "function", "function": fn}
        if tool.get("cache_control") is not None:
            out["cache_control"] = tool["cache_control"]
        tools.append(out)
    return tools or None


def _tool_choice(raw: Any) -> tuple[Any, bool | None]:
    """(the chat `tool_choice`, `parallel_tool_calls`)."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict) or raw.get("type") not in ("auto", "any", "tool", "none"):
        raise InvalidRequest("'tool_choice.type' must be one of auto, any, tool, none")
    kind = raw["type"]
    parallel = False if raw.get("disable_parallel_tool_use") is True else None
    if kind == "tool":
        if not isinstance(raw.get("name"), str) or not raw["name"]:
            raise InvalidRequest("'tool_choice.name' is required for type tool")
        return {"type": "function", "function": {"name": raw["name"]}}, parallel
    return {"auto": "auto", "any": "required", "none": "none"}[kind], parallel


def _reasoning(body: dict[str, Any], only: dict[str, Any]) -> tuple[ReasoningOptions | None, bool]:
    """(the reasoning asked for, whether its text is omitted), from `thinking` and `output_config`."""
    thinking = opt_dict(body, "thinking")
    config = opt_dict(body, "output_config") or {}
    effort = config.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise InvalidRequest(f"'output_config.effort' must be one of {', '.join(EFFORTS)}")
    for name, value in config.items():
        if name not in ("effort", "format") and value is not None:
            only[f"output_config.{name}"] = value
    if thinking is None or thinking.get("type") == "disabled":
        return (ReasoningOptions(effort=effort, field="output_config.effort") if effort else None), False
    omitted = thinking.get("display") == "omitted"
    kind = thinking.get("type")
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1024:
            raise InvalidRequest("'thinking.budget_tokens' must be an integer >= 1024")
        return ReasoningOptions(max_tokens=budget, effort=effort, field="thinking"), omitted
    if kind == "adaptive":
        return ReasoningOptions(effort=effort or "medium", field="thinking"), omitted
    only["thinking.type"] = kind  # (between_tools, and what comes next)
    return ReasoningOptions(effort=effort or "medium", field="thinking"), omitted


def _response_format(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = (opt_dict(body, "output_config") or {}).get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise InvalidRequest('\'output_config.format\' must be {"type": "json_schema", "schema": {...}}')
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


def _stop(body: dict[str, Any]) -> list[str]:
    raw = opt_list(body, "stop_sequences") or []
    if not all(isinstance(s, str) for s in raw):
        raise InvalidRequest("'stop_sequences' must be an array of strings")
    return list(raw)


def _user(body: dict[str, Any]) -> str | None:
    metadata = opt_dict(body, "metadata") or {}
    user = metadata.get("user_id")
    if user is not None and not isinstance(user, str):
        raise InvalidRequest("'metadata.user_id' must be a string")
    return user


def parse_messages_request(body: Any, headers: dict[str, str], *, count_only: bool = False) -> MessagesRequest:
    """A Messages body (or a count_tokens body: no `max_tokens`) with its `anthropic-*` headers."""
    body = require_object(body)
    only: dict[str, Any] = {}
    model = require_str(body, "model")
    max_tokens = opt_int(body, "max_tokens", lo=0)
    if max_tokens is None and not count_only:
        raise InvalidRequest("'max_tokens' is required: the most tokens the answer may have")
    messages = _messages(body, only)
    tool_choice, parallel = _tool_choice(body.get("tool_choice"))
    reasoning, omitted = _reasoning(body, only)
    for name, value in body.items():
        if name in READ or name in HINTS or value is None:
            continue
        if value not in NEUTRAL.get(name, ()):
            only[name] = value  # top_k, container, mcp_servers, inference_geo, a field to come, ...
    for beta in betas_of(headers.get("anthropic-beta")):
        if not beta.startswith(BETAS_ACCEPTED):
            only[f"anthropic-beta: {beta}"] = beta
    request = GenerationRequest(
        model=model,
        messages=messages,
        stream=opt_bool(body, "stream"),
        max_tokens=max_tokens or None,
        temperature=opt_number(body, "temperature", 0.0, 1.0),
        top_p=opt_number(body, "top_p", 0.0, 1.0),
        stop=_stop(body),
        tools=_tools(opt_list(body, "tools"), only),
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        reasoning=reasoning,
        user=_user(body),
        response_format=_response_format(body),
        provider=parse_provider_prefs(body.get("provider")),
    )
    request.as_sent = AsSent(WireFormat.MESSAGES, body, headers=headers, only=only)
    return MessagesRequest(request, omit_thinking=omitted)
