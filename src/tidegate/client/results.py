"""Whole results: usage shapes, tool-call parsing, and the JSON bodies a stream can be answered with
(the native `done` / replay result, a buffered chat completion, a buffered Responses object)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from .types import Done, ToolCall, Usage


@dataclass(slots=True)
class StreamMeta:
    """What the response headers told us, shared by the session and its reader."""

    generation_id: str | None = None
    provider: str | None = None
    served_model: str | None = None
    model: str | None = None
    idempotency_key: str | None = None
    buffered_reason: str | None = None
    recovered: str | None = None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def usage_from(obj: Any) -> Usage | None:
    """Chat (`prompt_tokens`...), flat record (`reasoning_tokens`) and Responses (`input_tokens`) shapes."""
    if not isinstance(obj, dict):
        return None
    prompt = _int(obj.get("prompt_tokens"))
    completion = _int(obj.get("completion_tokens"))
    if prompt is None and completion is None:
        prompt = _int(obj.get("input_tokens"))
        completion = _int(obj.get("output_tokens"))
    if prompt is None and completion is None:
        return None
    prompt = prompt or 0
    completion = completion or 0
    total = _int(obj.get("total_tokens"))
    out_details = obj.get("completion_tokens_details") or obj.get("output_tokens_details") or {}
    in_details = obj.get("prompt_tokens_details") or obj.get("input_tokens_details") or {}
    reasoning = _int(obj.get("reasoning_tokens"))
    if reasoning is None and isinstance(out_details, dict):
        reasoning = _int(out_details.get("reasoning_tokens"))
    cached = _int(obj.get("cached_tokens"))
    if cached is None and isinstance(in_details, dict):
        cached = _int(in_details.get("cached_tokens"))
    return Usage(prompt, completion, total if total is not None else prompt + completion, reasoning, cached)


def parse_tool_call(index: int, call_id: str, name: str, arguments: str) -> ToolCall:
    """Arguments are parsed here, once, after the turn ended with `tool_calls`."""
    try:
        parsed = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError as exc:
        return ToolCall(index, call_id, name, arguments, None, str(exc))
    return ToolCall(index, call_id, name, arguments, parsed)


def tool_calls_from_items(output: Any) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    for item in output if isinstance(output, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call":
            calls.append(
                parse_tool_call(
                    len(calls),
                    str(item.get("call_id") or item.get("id") or ""),
                    str(item.get("name") or ""),
                    str(item.get("arguments") or ""),
                )
            )
    return tuple(calls)


def text_from_items(output: Any) -> str:
    parts: list[str] = []
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for part in item.get("content") or []:
            if isinstance(part, dict) and part.get("type") in ("output_text", "text"):
                parts.append(str(part.get("text") or ""))
    return "".join(parts)


def reasoning_from_items(output: Any) -> str:
    parts: list[str] = []
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict) or item.get("type") != "reasoning":
            continue
        for key in ("content", "summary"):
            for part in item.get(key) or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
    return "".join(parts)


def done_from_native(result: dict[str, Any], meta: StreamMeta) -> Done:
    """The native `done` payload, which is also what the replay endpoint answers."""
    output = result.get("output")
    text = result.get("output_text")
    if not isinstance(text, str):
        text = text_from_items(output)
    reasoning = result.get("reasoning")
    if not isinstance(reasoning, str):
        reasoning = reasoning_from_items(output)
    calls = tool_calls_from_items(output)
    finish = result.get("finish_reason")
    return _done(
        meta,
        result,
        text=text,
        finish_reason=str(finish) if finish else ("tool_calls" if calls else "stop"),
        generation_id=str(result.get("id") or meta.generation_id or "") or None,
        reasoning=reasoning,
        tool_calls=calls,
    )


def done_from_chat_completion(body: dict[str, Any], meta: StreamMeta) -> Done:
    choices = body.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    calls = []
    for i, tc in enumerate(message.get("tool_calls") or []):
        fn = tc.get("function") or {}
        calls.append(
            parse_tool_call(i, str(tc.get("id") or ""), str(fn.get("name") or ""), str(fn.get("arguments") or ""))
        )
    reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
    return _done(
        meta,
        body,
        text=str(message.get("content") or ""),
        finish_reason=choice.get("finish_reason"),
        generation_id=meta.generation_id,
        reasoning=str(reasoning),
        tool_calls=tuple(calls),
    )


def finish_from_response(response: dict[str, Any], calls: int) -> str:
    if response.get("status") == "incomplete":
        details = response.get("incomplete_details") or {}
        reason = details.get("reason") if isinstance(details, dict) else None
        return "content_filter" if reason == "content_filter" else "length"
    return "tool_calls" if calls else "stop"


def done_from_response_object(body: dict[str, Any], meta: StreamMeta) -> Done:
    output = body.get("output")
    calls = tool_calls_from_items(output)
    text = body.get("output_text")
    return _done(
        meta,
        body,
        text=text if isinstance(text, str) else text_from_items(output),
        finish_reason=finish_from_response(body, len(calls)),
        generation_id=meta.generation_id,
        reasoning=reasoning_from_items(output),
        tool_calls=calls,
    )


def _done(meta: StreamMeta, body: dict[str, Any], **fields: Any) -> Done:
    """A `Done` from a whole answer's body: what every door's answer says the same way, plus `fields`."""
    return Done(
        usage=usage_from(body.get("usage")),
        provider=body.get("provider") or meta.provider,
        served_model=body.get("served_model") or meta.served_model,
        model=body.get("model") or meta.model,
        idempotency_key=meta.idempotency_key,
        buffered_reason=meta.buffered_reason,
        recovered=meta.recovered,
        result=body,
        **fields,
    )
