"""Responses passthrough: an `openai` provider with `responses = true` serving a `/v1/responses`
request (docs/agents.md).

The request goes to `POST {base_url}/responses` as the client sent it (the route's model, `stream`
on, tidegate's own `provider` object left out). Each event of the upstream's stream comes back as
its data bytes (`RawFrame`, which the Responses door writes untouched under the event's own name),
then what it says as canonical events: for the record, usage, the other doors' replay and the
failure ending. The event names and fields are the Responses API's streaming reference
(openai-python's `ResponseStreamEvent` types). A stream that ends without `response.completed`,
`response.incomplete` or `response.failed` is a failure, never a `stop`.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...events import (
    Event,
    Failed,
    Finished,
    RawFrame,
    ReasoningDelta,
    ReasoningKind,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from ...request import GenerationRequest, WireFormat
from ...sse import SSEDecoder
from ..http.transport import sanitize

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def responses_body(request: GenerationRequest, served_model: str) -> dict[str, Any] | None:
    """The body for a Responses API upstream, or None when the request did not come through the
    Responses door as sent (the chat and native doors, an MCP tool loop's turns)."""
    extras = request.sent_as(WireFormat.RESPONSES)
    if extras is None:
        return None
    body = {k: v for k, v in extras.body.items() if k != "provider"}  # routing is tidegate's, never forwarded
    body["model"] = served_model
    body["stream"] = True  # a JSON client's answer is the stream's final `response` (render/responses.py)
    return body


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_report(usage: Any) -> UsageReport | None:
    if not isinstance(usage, dict):
        return None
    prompt_details = usage.get("input_tokens_details")
    output_details = usage.get("output_tokens_details")
    return UsageReport(
        prompt=_int(usage.get("input_tokens")),
        completion=_int(usage.get("output_tokens")),
        reasoning=_int(output_details.get("reasoning_tokens")) if isinstance(output_details, dict) else None,
        cached=_int(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else None,
        cache_write=_int(prompt_details.get("cache_write_tokens")) if isinstance(prompt_details, dict) else None,
    )


class ResponsesDecoder:
    """Stateful: bytes of a Responses API event stream in, `RawFrame` + canonical events out."""

    def __init__(self, provider: str, served_model: str, secret: str | None = None) -> None:
        self.provider = provider
        self.served_model = served_model
        self._secret = secret
        self._sse = SSEDecoder()
        self._ended = False
        self._calls: set[int] = set()  # output indexes of function calls (the finish reason)

    def feed(self, chunk: bytes) -> list[Event]:
        out: list[Event] = []
        batch, overflow = self._sse.feed_to_error(chunk)
        for sse in batch:
            if self._ended:
                break
            try:
                obj = orjson.loads(sse.data)
            except orjson.JSONDecodeError as exc:
                message = f"the upstream sent data that is not JSON ({exc.msg} at position {exc.pos})"
                if not out:
                    raise ValueError(message) from None
                out.append(Failed("upstream_protocol_error", message, self.provider))
                return out
            if not isinstance(obj, dict):
                out.append(Failed("upstream_protocol_error", "an event that is not a JSON object", self.provider))
                return out
            self._event(obj, sse.data.encode(), out)
            if out and isinstance(out[-1], Failed):
                return out
        if overflow is not None and not self._ended:
            out.append(Failed("upstream_protocol_error", str(overflow), self.provider))
        return out

    def _failed(self, message: str) -> Failed:
        return Failed("upstream_error", f"{self.provider}: {sanitize(message, self._secret)}", self.provider)

    def _event(self, obj: dict[str, Any], raw: bytes, out: list[Event]) -> None:
        etype = obj.get("type")
        if etype == "error":  # not forwarded: the door ends the stream with its own `response.failed`
            self._ended = True
            out.append(self._failed(str(obj.get("message") or obj.get("code") or "error")))
            return
        out.append(RawFrame(raw))
        if etype == "response.created":
            response = obj.get("response") or {}
            model = response.get("model")
            rid = response.get("id")
            served = model if isinstance(model, str) and model else self.served_model
            out.append(Started(self.provider, served, rid if isinstance(rid, str) else None))
        elif etype == "response.output_text.delta":
            out.append(TextDelta(str(obj.get("delta") or "")))
        elif etype in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            kind: ReasoningKind = "text" if etype == "response.reasoning_text.delta" else "summary"
            out.append(ReasoningDelta(str(obj.get("delta") or ""), kind, index=_int(obj.get("output_index"))))
        elif etype == "response.output_item.added":
            item = obj.get("item") or {}
            if item.get("type") in ("function_call", "custom_tool_call"):
                index = _int(obj.get("output_index"))
                self._calls.add(index)
                out.append(ToolCallDelta(index, "", str(item.get("call_id") or ""), str(item.get("name") or "")))
        elif etype == "response.function_call_arguments.delta":
            out.append(ToolCallDelta(_int(obj.get("output_index")), str(obj.get("delta") or "")))
        elif etype in TERMINAL:
            self._end(etype, obj.get("response") or {}, out)

    def _end(self, etype: str, response: dict[str, Any], out: list[Event]) -> None:
        self._ended = True
        usage = usage_report(response.get("usage"))
        if usage is not None:
            out.append(usage)
        if etype == "response.failed":
            error = response.get("error") or {}
            out.append(self._failed(str(error.get("message") or error.get("code") or "the response failed")))
        elif etype == "response.incomplete":
            reason = (response.get("incomplete_details") or {}).get("reason")
            out.append(Finished("content_filter" if reason == "content_filter" else "length"))
        else:
            out.append(Finished("tool_calls" if self._calls else "stop"))

    def end(self) -> list[Event]:
        if self._ended:
            return []
        return [
            Failed("upstream_error", "the upstream's Responses stream ended without its terminal event", self.provider)
        ]
