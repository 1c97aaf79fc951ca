"""Chat Completions request body → `GenerationRequest`, validated field by field."""

from __future__ import annotations

from typing import Any

from ....errors import InvalidRequest, quote
from ....gateway.routing import parse_provider_prefs
from ....request import GenerationRequest, ReasoningOptions
from ...validate import (
    opt_bool,
    opt_dict,
    opt_int,
    opt_list,
    opt_number,
    opt_str,
    require_object,
    require_str,
)

ROLES = ("system", "developer", "user", "assistant", "tool")
CONTENT_PART_TYPES = ("text", "image_url", "input_audio", "file", "refusal")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def _validate_messages(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        raise InvalidRequest("'messages' is required: a non-empty array of {role, content} objects")
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'messages' must be a non-empty array of {role, content} objects")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise InvalidRequest(f"'{where}' must be an object with 'role' and 'content'")
        role = m.get("role")
        if role not in ROLES:
            raise InvalidRequest(f"'{where}.role' must be one of {', '.join(ROLES)}, got {quote(role)}")
        content = m.get("content")
        if content is None:
            if role not in ("assistant",):
                raise InvalidRequest(f"'{where}.content' is required for role {quote(role)}")
            if not m.get("tool_calls") and not m.get("reasoning_details"):
                raise InvalidRequest(f"'{where}' needs 'content' or 'tool_calls'")
        elif isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") not in CONTENT_PART_TYPES:
                    raise InvalidRequest(f"'{where}.content[{j}].type' must be one of {', '.join(CONTENT_PART_TYPES)}")
                if part["type"] == "text" and not isinstance(part.get("text"), str):
                    raise InvalidRequest(f"'{where}.content[{j}].text' must be a string")
        elif not isinstance(content, str):
            raise InvalidRequest(f"'{where}.content' must be a string or an array of content parts")
        if role == "tool" and not isinstance(m.get("tool_call_id"), str):
            raise InvalidRequest(f"'{where}.tool_call_id' is required for role 'tool'")
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant" or not isinstance(calls, list):
                raise InvalidRequest(f"'{where}.tool_calls' must be an array on an assistant message")
            for j, c in enumerate(calls):
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise InvalidRequest(f"'{where}.tool_calls[{j}].function.name' is required")
                if not isinstance(c.get("id"), str):
                    raise InvalidRequest(f"'{where}.tool_calls[{j}].id' is required")
        details = m.get("reasoning_details")
        if details is not None and not isinstance(details, list):
            raise InvalidRequest(f"'{where}.reasoning_details' must be an array")
        out.append(m)
    return out


def _validate_tools(raw: list[Any] | None) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    for i, t in enumerate(raw):
        if not isinstance(t, dict) or t.get("type") != "function":
            raise InvalidRequest(f"'tools[{i}].type' must be 'function'")
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidRequest(f"'tools[{i}].function.name' is required")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest(f"'tools[{i}].function.parameters' must be a JSON Schema object")
    return raw or None


def _reasoning(body: dict[str, Any]) -> ReasoningOptions | None:
    reasoning = opt_dict(body, "reasoning")
    effort = opt_str(body, "reasoning_effort")
    if reasoning is None and effort is None:
        return None
    opts = ReasoningOptions(effort=effort, field="reasoning" if reasoning is not None else "reasoning_effort")
    if reasoning is not None:
        if reasoning.get("effort") is not None:
            opts.effort = opt_str(reasoning, "effort")
        opts.max_tokens = opt_int(reasoning, "max_tokens", lo=1)
        opts.exclude = opt_bool(reasoning, "exclude")
        opts.summary = opt_str(reasoning, "summary")
    if opts.effort is not None and opts.effort not in EFFORTS:
        raise InvalidRequest(f"'reasoning.effort' must be one of {', '.join(EFFORTS)}")
    return opts


def parse_chat_request(body: Any) -> GenerationRequest:
    body = require_object(body)
    model = require_str(body, "model")
    messages = _validate_messages(body.get("messages"))
    n = opt_int(body, "n", lo=1)
    if n is not None and n != 1:
        raise InvalidRequest("'n' other than 1 is not supported; send one request per choice")
    stop_raw = body.get("stop")
    if stop_raw is None:
        stop: list[str] = []
    elif isinstance(stop_raw, str):
        stop = [stop_raw]
    elif isinstance(stop_raw, list) and all(isinstance(s, str) for s in stop_raw) and len(stop_raw) <= 4:
        stop = list(stop_raw)
    else:
        raise InvalidRequest("'stop' must be a string or an array of up to 4 strings")
    max_tokens = opt_int(body, "max_completion_tokens", lo=1)
    if max_tokens is None:
        max_tokens = opt_int(body, "max_tokens", lo=1)
    stream = opt_bool(body, "stream")
    stream_options = opt_dict(body, "stream_options")
    if stream_options is not None:
        include = stream_options.get("include_usage")
        if include is not None and not isinstance(include, bool):
            raise InvalidRequest("'stream_options.include_usage' must be a boolean")
    if "stream_options" in body and body["stream_options"] is None:
        stream_options = None
    tools = _validate_tools(opt_list(body, "tools"))
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and not isinstance(tool_choice, (str, dict)):
        raise InvalidRequest("'tool_choice' must be 'none', 'auto', 'required' or a function object")
    response_format = opt_dict(body, "response_format")
    provider = None
    if "provider" in body:  # a routing instruction for tidegate, not a field for the upstream
        provider = parse_provider_prefs(body["provider"])
        body = {k: v for k, v in body.items() if k != "provider"}
    return GenerationRequest(
        model=model,
        messages=messages,
        stream=stream,
        max_tokens=max_tokens,
        temperature=opt_number(body, "temperature", 0.0, 2.0),
        top_p=opt_number(body, "top_p", 0.0, 1.0),
        stop=stop,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=body.get("parallel_tool_calls")
        if isinstance(body.get("parallel_tool_calls"), bool)
        else None,
        reasoning=_reasoning(body),
        seed=opt_int(body, "seed"),
        user=opt_str(body, "user"),
        response_format=response_format,
        stream_options=stream_options,
        raw_body=body,
        provider=provider,
        # hints (docs/translation.md): what a translated route uses them for
        prompt_cache_key=opt_str(body, "prompt_cache_key"),
        safety_identifier=opt_str(body, "safety_identifier"),
    )
