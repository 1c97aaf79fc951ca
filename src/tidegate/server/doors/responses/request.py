"""Responses API and native API request bodies → `GenerationRequest` (docs/api.md §5, §6).

Input items become OpenAI-chat-shaped messages: `message` items keep their role, `function_call`
items become assistant `tool_calls`, `function_call_output` items become `tool` messages, and
`reasoning` items become assistant `reasoning_details` (text + signature, or encrypted data) so a
provider can replay its own thinking. Consecutive assistant-side items of one turn (reasoning,
message, function calls) merge into one assistant message. `custom_tool_call` items are calls of
their flattened function, `custom_tool_call_output` items tool messages (tools.py).
The native door refuses every field it does not know; the Responses door's fields are sorted by
fields.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ....errors import InvalidRequest, quote
from ....gateway.routing import parse_provider_prefs
from ....request import AsSent, GenerationRequest, ReasoningOptions, ResponsesTools, ToolRef, WireFormat
from ...validate import opt_bool, opt_dict, opt_int, opt_list, opt_number, opt_str, require_object, require_str
from .fields import check_hints, check_include, only_fields, text_format
from .tools import Tools, convert_tool_choice, convert_tools, flat_name

# `provider`: the routing object of docs/api-operations.md §12, on every generation door
NATIVE_FIELDS = frozenset(
    {"model", "input", "instructions", "tools", "reasoning", "max_output_tokens", "stream", "metadata", "provider"}
)
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
SUMMARIES = ("auto", "concise", "detailed")
MESSAGE_ROLES = ("user", "assistant", "system", "developer")


@dataclass(slots=True)
class ResponsesRequest:
    """The validated body: the provider-facing request plus what the response object echoes."""

    request: GenerationRequest
    instructions: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = True
    metadata: dict[str, str] | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] = field(default_factory=list)
    text: dict[str, Any] | None = None
    # the providers that speak the Responses API (`responses = true`): their events pass through
    passthrough: frozenset[str] = frozenset()
    # binds the ids a passed-through answer hands out to the request's key (owners.py)
    bind: Callable[[dict[str, Any] | None], Awaitable[None]] | None = None

    def echo(self) -> dict[str, Any]:
        """The request parameters every `response` object repeats."""
        r = self.request
        return {
            "instructions": self.instructions,
            "tools": self.tools,
            "tool_choice": self.tool_choice,
            "parallel_tool_calls": self.parallel_tool_calls,
            "metadata": self.metadata if self.metadata is not None else {},
            "reasoning": self.reasoning,
            "max_output_tokens": r.max_tokens,
            "temperature": r.temperature,
            "top_p": r.top_p,
            **({"text": self.text} if self.text is not None else {}),
        }

    @property
    def summarize(self) -> bool:
        """`reasoning.summary` was asked for (render/responses.py shows thinking as the summary)."""
        return self.reasoning is not None and self.reasoning.get("summary") is not None

    @property
    def tool_refs(self) -> dict[str, ToolRef]:
        """Flat tool name → the Responses tool it stands for (custom and namespaced tools)."""
        tools = self.request.responses_tools
        return tools.refs if tools is not None else {}


def _reject_unknown(body: dict[str, Any], allowed: frozenset[str], door: str) -> None:
    for name in body:
        if name not in allowed:
            raise InvalidRequest(f"'{name}' is not supported on {door}; supported fields: {', '.join(sorted(allowed))}")


def _text_parts(content: Any, where: str, allowed: tuple[str, ...]) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        raise InvalidRequest(f"'{where}' must be a string or an array of content parts")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        pw = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise InvalidRequest(f"'{pw}' must be an object with a 'type'")
        ptype = part.get("type")
        if ptype not in allowed:
            raise InvalidRequest(f"'{pw}.type' must be one of {', '.join(allowed)}, got {quote(ptype)}")
        if ptype == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise InvalidRequest(
                    f"'{pw}.image_url' is required (an http(s) URL or a data: URL; file_id is not supported)"
                )
            image: dict[str, Any] = {"url": url}
            detail = part.get("detail")
            if detail is not None:
                if detail not in ("low", "high", "auto"):
                    raise InvalidRequest(f"'{pw}.detail' must be one of low, high, auto")
                image["detail"] = detail
            parts.append({"type": "image_url", "image_url": image})
            continue
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequest(f"'{pw}.text' must be a string")
        parts.append({"type": "text", "text": text})
    return parts


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in MESSAGE_ROLES:
        raise InvalidRequest(f"'{where}.role' must be one of {', '.join(MESSAGE_ROLES)}, got {quote(role)}")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if role == "assistant":
        parts = _text_parts(content, f"{where}.content", ("output_text", "input_text"))
        return {"role": "assistant", "content": "".join(p["text"] for p in parts)}
    parts = _text_parts(content, f"{where}.content", ("input_text", "input_image"))
    if role in ("system", "developer") and any(p["type"] != "text" for p in parts):
        raise InvalidRequest(f"'{where}.content' of a {role} message may only hold input_text parts")
    return {"role": role, "content": parts}


def _reasoning_details(item: dict[str, Any], where: str, first_index: int) -> list[dict[str, Any]]:
    """A reasoning item → chat `reasoning_details`. With `content` text: `reasoning.text` whose
    signature is `encrypted_content`; without: `reasoning.encrypted` carrying `encrypted_content`."""
    encrypted = item.get("encrypted_content")
    if encrypted is not None and not isinstance(encrypted, str):
        raise InvalidRequest(f"'{where}.encrypted_content' must be a string")
    content = item.get("content")
    summary = item.get("summary")
    if content is not None and not isinstance(content, list):
        raise InvalidRequest(f"'{where}.content' must be an array of reasoning_text parts")
    if summary is not None and not isinstance(summary, list):
        raise InvalidRequest(f"'{where}.summary' must be an array of summary_text parts")
    details: list[dict[str, Any]] = []
    if content:
        texts = []
        for j, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "reasoning_text"
                or not isinstance(part.get("text"), str)
            ):
                raise InvalidRequest(f"'{where}.content[{j}]' must be {{'type': 'reasoning_text', 'text': str}}")
            texts.append(part["text"])
        detail: dict[str, Any] = {"type": "reasoning.text", "text": "".join(texts), "index": first_index}
        if encrypted:
            detail["signature"] = encrypted
        details.append(detail)
    elif encrypted:
        details.append({"type": "reasoning.encrypted", "data": encrypted, "index": first_index})
    for j, part in enumerate(summary or []):
        if not isinstance(part, dict) or part.get("type") != "summary_text" or not isinstance(part.get("text"), str):
            raise InvalidRequest(f"'{where}.summary[{j}]' must be {{'type': 'summary_text', 'text': str}}")
        details.append({"type": "reasoning.summary", "summary": part["text"], "index": first_index})
    return details


class _Messages:
    """Builds the chat message list; `tail` is the assistant message the current turn's items join."""

    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []
        self.tail: dict[str, Any] | None = None

    def _assistant(self, *, allow_content: bool = True) -> dict[str, Any]:
        tail = self.tail
        if tail is None or (not allow_content and (tail.get("content") is not None or tail.get("tool_calls"))):
            tail = {"role": "assistant", "content": None}
            self.out.append(tail)
            self.tail = tail
        return tail

    def add_message(self, message: dict[str, Any]) -> None:
        if message["role"] == "assistant":
            tail = self.tail
            if tail is not None and tail.get("content") is None and not tail.get("tool_calls"):
                tail["content"] = message["content"]
                return
            self.out.append(message)
            self.tail = message
            return
        self.out.append(message)
        self.tail = None

    def add_reasoning(self, item: dict[str, Any], where: str) -> None:
        tail = self.tail
        joins = tail is not None and tail.get("content") is None and not tail.get("tool_calls")  # as `_assistant`
        existing = tail.get("reasoning_details", []) if joins and tail is not None else []
        details = _reasoning_details(item, where, len({d["index"] for d in existing}))
        if not details:  # nothing to replay (agents send such items back too): it adds nothing
            return
        tail = self._assistant(allow_content=False)
        tail.setdefault("reasoning_details", []).extend(details)

    def add_call(self, call_id: Any, name: str, arguments: Any, where: str) -> None:
        if not isinstance(call_id, str) or not call_id:
            raise InvalidRequest(f"'{where}.call_id' must be a non-empty string")
        if not isinstance(arguments, str):
            raise InvalidRequest(f"'{where}.arguments' (a custom tool call's 'input') must be a string")
        tail = self._assistant()
        tail.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )

    def add_output(self, item: dict[str, Any], where: str) -> None:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidRequest(f"'{where}.call_id' must be a non-empty string")
        output = item.get("output")
        if isinstance(output, list):
            output = "".join(p["text"] for p in _text_parts(output, f"{where}.output", ("input_text", "output_text")))
        if not isinstance(output, str):
            raise InvalidRequest(f"'{where}.output' must be a string or an array of input_text parts")
        self.out.append({"role": "tool", "tool_call_id": call_id, "content": output})
        self.tail = None


def _call_name(item: dict[str, Any], where: str) -> str:
    """The flat name a translated model knows the called tool by (tools.py)."""
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"'{where}.name' must be a non-empty string")
    namespace = item.get("namespace")
    return flat_name(name, namespace if isinstance(namespace, str) and namespace else None)


def convert_input(raw: Any, instructions: str | None, only: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Input items → chat messages. An item type a translated route cannot replay (a hosted tool's
    call, an item reference, ...) goes to `only` as `input[i].type` (the Responses door: a route
    that speaks the Responses API takes it as sent); without `only` (the native door) it is a 400."""
    messages = _Messages()
    if instructions:
        messages.add_message({"role": "system", "content": instructions})
    if raw is None:
        raise InvalidRequest("'input' is required: a string or an array of input items")
    if isinstance(raw, str):
        messages.add_message({"role": "user", "content": raw})
        return messages.out
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'input' must be a string or a non-empty array of input items")
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"'{where}' must be an object")
        itype = item.get("type", "message")
        if itype == "message":
            messages.add_message(_message(item, where))
        elif itype == "function_call":
            messages.add_call(item.get("call_id"), _call_name(item, where), item.get("arguments"), where)
        elif itype == "custom_tool_call":
            text = item.get("input")
            arguments = orjson.dumps({"input": text}).decode() if isinstance(text, str) else None
            messages.add_call(item.get("call_id"), _call_name(item, where), arguments, where)
        elif itype in ("function_call_output", "custom_tool_call_output"):
            messages.add_output(item, where)
        elif itype == "reasoning":
            messages.add_reasoning(item, where)
        elif only is not None:
            only[f"{where}.type"] = itype
        else:
            raise InvalidRequest(
                f"'{where}.type' {quote(itype)} is not supported; use message, function_call, "
                "function_call_output or reasoning"
            )
    return messages.out


def _reasoning(body: dict[str, Any], only: dict[str, Any]) -> tuple[dict[str, Any] | None, ReasoningOptions | None]:
    raw = opt_dict(body, "reasoning")
    if raw is None:
        return None, None
    for name in raw:
        if name not in ("effort", "summary", "generate_summary", "context", "mode"):
            raise InvalidRequest(f"'reasoning.{name}' is not supported; use reasoning.effort and reasoning.summary")
    effort = opt_str(raw, "effort")
    if effort is not None and effort not in EFFORTS:
        raise InvalidRequest(f"'reasoning.effort' must be one of {', '.join(EFFORTS)}")
    summary = opt_str(raw, "summary") or opt_str(raw, "generate_summary")  # (the deprecated spelling)
    if summary is not None and summary not in SUMMARIES:
        raise InvalidRequest(f"'reasoning.summary' must be one of {', '.join(SUMMARIES)}")
    # which earlier reasoning the model sees, and a "pro" mode: only the Responses API has them
    for name, neutral in (("context", "auto"), ("mode", "standard")):
        if raw.get(name) not in (None, neutral):
            only[f"reasoning.{name}"] = raw[name]
    return {"effort": effort, "summary": summary}, ReasoningOptions(effort=effort, summary=summary)


def _metadata(body: dict[str, Any]) -> dict[str, str] | None:
    raw = opt_dict(body, "metadata")
    if raw is None:
        return None
    if len(raw) > 16:
        raise InvalidRequest("'metadata' may hold at most 16 keys")
    for k, v in raw.items():
        if len(k) > 64 or not isinstance(v, str) or len(v) > 512:
            raise InvalidRequest(f"'metadata.{k}' must be a string of at most 512 characters (keys at most 64)")
    return dict(raw)


def _native_tools(raw: list[Any] | None) -> Tools:
    """The native door's tools: function tools only (its MCP tools were split off before)."""
    for i, tool in enumerate(raw or []):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            got = tool.get("type") if isinstance(tool, dict) else None
            raise InvalidRequest(f"'tools[{i}].type' must be 'function' (function tools only), got {quote(got)}")
    return convert_tools(raw)


def _parse(body: Any, door: str, stream_default: bool) -> ResponsesRequest:
    body = require_object(body)
    responses = door == "/v1/responses"
    only: dict[str, Any] = {}
    if responses:
        only = only_fields(body)
        check_hints(body)
    else:
        _reject_unknown(body, NATIVE_FIELDS, door)
    model = require_str(body, "model")
    instructions = opt_str(body, "instructions")
    messages = convert_input(body.get("input"), instructions, only if responses else None)
    tools = convert_tools(opt_list(body, "tools")) if responses else _native_tools(opt_list(body, "tools"))
    choice_echo, tool_choice, choice_only = convert_tool_choice(body.get("tool_choice"), tools)
    if choice_only is not None:
        only[choice_only] = body["tool_choice"]
    reasoning_echo, reasoning = _reasoning(body, only)
    text_echo, response_format = text_format(body, only)
    parallel = opt_bool(body, "parallel_tool_calls", default=True)
    request = GenerationRequest(
        model=model,
        messages=messages,
        stream=opt_bool(body, "stream", default=stream_default),
        max_tokens=opt_int(body, "max_output_tokens", lo=1),
        temperature=opt_number(body, "temperature", 0.0, 2.0),
        top_p=opt_number(body, "top_p", 0.0, 1.0),
        tools=tools.chat or None,
        tool_choice=tool_choice,
        parallel_tool_calls=body.get("parallel_tool_calls")
        if isinstance(body.get("parallel_tool_calls"), bool)
        else None,
        reasoning=reasoning,
        user=opt_str(body, "user") if responses else None,
        response_format=response_format,
        provider=parse_provider_prefs(body.get("provider")),
        prompt_cache_key=opt_str(body, "prompt_cache_key") if responses else None,
        safety_identifier=opt_str(body, "safety_identifier") if responses else None,
    )
    if responses:
        request.as_sent = AsSent(WireFormat.RESPONSES, body, only=only)
        request.responses_tools = ResponsesTools(hosted=tools.hosted, refs=tools.refs)
    return ResponsesRequest(
        request=request,
        instructions=instructions,
        tools=tools.echo,
        tool_choice=choice_echo,
        parallel_tool_calls=parallel,
        metadata=_metadata(body),
        reasoning=reasoning_echo,
        include=check_include(body) if responses else [],
        text=text_echo,
    )


def parse_responses_request(body: Any) -> ResponsesRequest:
    """`POST /v1/responses` (stream defaults to false)."""
    return _parse(body, "/v1/responses", stream_default=False)


def parse_native_request(body: Any) -> ResponsesRequest:
    """`POST /api/v1/llm/responses` (stream defaults to true)."""
    return _parse(body, "/api/v1/llm/responses", stream_default=True)
