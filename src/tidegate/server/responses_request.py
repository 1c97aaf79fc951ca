"""Responses API and native API request bodies → `GenerationRequest` (CONTRACT §5, §6).

Input items become OpenAI-chat-shaped messages: `message` items keep their role, `function_call`
items become assistant `tool_calls`, `function_call_output` items become `tool` messages, and
`reasoning` items become assistant `reasoning_details` (text + signature, or encrypted data) so a
provider can replay its own thinking. Consecutive assistant-side items of one turn (reasoning,
message, function calls) merge into one assistant message. Every unsupported field is a 400 naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest, quote
from ..gateway.routing import parse_provider_prefs
from ..request import GenerationRequest, ReasoningOptions
from .validate import opt_bool, opt_dict, opt_int, opt_list, opt_number, opt_str, require_object, require_str

RESPONSES_FIELDS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "reasoning",
        "temperature",
        "top_p",
        "metadata",
        "include",
        "stream",
        "store",
        "parallel_tool_calls",
        "provider",
    }
)
# `provider`: the routing object of CONTRACT §12, on every generation door
NATIVE_FIELDS = frozenset(
    {"model", "input", "instructions", "tools", "reasoning", "max_output_tokens", "stream", "metadata", "provider"}
)
INCLUDABLE = ("reasoning.encrypted_content",)
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
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
        }


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
        tail = self._assistant(allow_content=False)
        existing: list[dict[str, Any]] = tail.setdefault("reasoning_details", [])
        details = _reasoning_details(item, where, len({d["index"] for d in existing}))
        if not details:
            raise InvalidRequest(f"'{where}' has no content, summary or encrypted_content to replay")
        existing.extend(details)

    def add_call(self, item: dict[str, Any], where: str) -> None:
        for name in ("call_id", "name", "arguments"):
            if not isinstance(item.get(name), str):
                raise InvalidRequest(f"'{where}.{name}' must be a string")
        tail = self._assistant()
        tail.setdefault("tool_calls", []).append(
            {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
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


def convert_input(raw: Any, instructions: str | None) -> list[dict[str, Any]]:
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
            messages.add_call(item, where)
        elif itype == "function_call_output":
            messages.add_output(item, where)
        elif itype == "reasoning":
            messages.add_reasoning(item, where)
        else:
            raise InvalidRequest(
                f"'{where}.type' {quote(itype)} is not supported; use message, function_call, "
                "function_call_output or reasoning"
            )
    return messages.out


def convert_tools(raw: list[Any] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Responses function tools → (the echo for the response object, chat-shaped tools)."""
    if not raw:
        return [], None
    echo: list[dict[str, Any]] = []
    chat: list[dict[str, Any]] = []
    for i, tool in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            got = tool.get("type") if isinstance(tool, dict) else None
            raise InvalidRequest(f"'{where}.type' must be 'function' (function tools only), got {quote(got)}")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"'{where}.name' is required")
        params = tool.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest(f"'{where}.parameters' must be a JSON Schema object")
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise InvalidRequest(f"'{where}.description' must be a string")
        strict = tool.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidRequest(f"'{where}.strict' must be a boolean")
        function: dict[str, Any] = {"name": name, "parameters": params or {"type": "object", "properties": {}}}
        if description is not None:
            function["description"] = description
        if strict is not None:
            function["strict"] = strict
        chat.append({"type": "function", "function": function})
        echo.append(
            {"type": "function", "name": name, "description": description, "parameters": params, "strict": strict}
        )
    return echo, chat


def convert_tool_choice(raw: Any) -> tuple[Any, Any]:
    """→ (the echo, the chat-shaped tool_choice)."""
    if raw is None:
        return "auto", None
    if raw in ("none", "auto", "required"):
        return raw, raw
    if isinstance(raw, dict) and raw.get("type") == "function" and isinstance(raw.get("name"), str):
        return {"type": "function", "name": raw["name"]}, {"type": "function", "function": {"name": raw["name"]}}
    raise InvalidRequest("'tool_choice' must be 'none', 'auto', 'required' or {'type': 'function', 'name': ...}")


def _reasoning(body: dict[str, Any]) -> tuple[dict[str, Any] | None, ReasoningOptions | None]:
    raw = opt_dict(body, "reasoning")
    if raw is None:
        return None, None
    for name in raw:
        if name not in ("effort", "summary"):
            raise InvalidRequest(f"'reasoning.{name}' is not supported; use reasoning.effort and reasoning.summary")
    effort = opt_str(raw, "effort")
    if effort is not None and effort not in EFFORTS:
        raise InvalidRequest(f"'reasoning.effort' must be one of {', '.join(EFFORTS)}")
    summary = opt_str(raw, "summary")
    if summary is not None and summary not in SUMMARIES:
        raise InvalidRequest(f"'reasoning.summary' must be one of {', '.join(SUMMARIES)}")
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


def _parse(body: Any, allowed: frozenset[str], door: str, stream_default: bool) -> ResponsesRequest:
    body = require_object(body)
    _reject_unknown(body, allowed, door)
    model = require_str(body, "model")
    instructions = opt_str(body, "instructions")
    messages = convert_input(body.get("input"), instructions)
    tools_echo, tools = convert_tools(opt_list(body, "tools"))
    choice_echo, tool_choice = convert_tool_choice(body.get("tool_choice"))
    reasoning_echo, reasoning = _reasoning(body)
    include = opt_list(body, "include") or []
    for i, value in enumerate(include):
        if value not in INCLUDABLE:
            raise InvalidRequest(f"'include[{i}]' {quote(value)} is not supported; supported: {', '.join(INCLUDABLE)}")
    opt_bool(body, "store")
    parallel = opt_bool(body, "parallel_tool_calls", default=True)
    request = GenerationRequest(
        model=model,
        messages=messages,
        stream=opt_bool(body, "stream", default=stream_default),
        max_tokens=opt_int(body, "max_output_tokens", lo=1),
        temperature=opt_number(body, "temperature", 0.0, 2.0),
        top_p=opt_number(body, "top_p", 0.0, 1.0),
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=body.get("parallel_tool_calls")
        if isinstance(body.get("parallel_tool_calls"), bool)
        else None,
        reasoning=reasoning,
        provider=parse_provider_prefs(body.get("provider")),
    )
    return ResponsesRequest(
        request=request,
        instructions=instructions,
        tools=tools_echo,
        tool_choice=choice_echo,
        parallel_tool_calls=parallel,
        metadata=_metadata(body),
        reasoning=reasoning_echo,
        include=list(include),
    )


def parse_responses_request(body: Any) -> ResponsesRequest:
    """`POST /v1/responses` (stream defaults to false)."""
    return _parse(body, RESPONSES_FIELDS, "/v1/responses", stream_default=False)


def parse_native_request(body: Any) -> ResponsesRequest:
    """`POST /api/v1/llm/responses` (stream defaults to true)."""
    return _parse(body, NATIVE_FIELDS, "/api/v1/llm/responses", stream_default=True)
