"""The `anthropic` kind: the Messages API over SSE (UPSTREAMS §1), and the event translation that the
`bedrock` and `vertex` kinds share.

`MessagesEventDecoder` turns Messages stream events (name + JSON) into canonical events; it is fed by
`AnthropicSSEDecoder` here (bytes → SSE) and by Bedrock's eventstream decoder. Pure: no I/O.

A request from the Messages door (`request.as_sent`) is passed through: the client's body as
sent (the route's model in `model`, `stream` on, tidegate's `provider` object left out) with its
`anthropic-version` and `anthropic-beta` headers, and each upstream event comes back as its data
bytes (`RawFrame`, which that door writes untouched) before the canonical events it says. The
`bedrock` and `vertex` kinds pass it through too, in their hosts' envelopes (`sent_body`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import orjson

from ...config.model import ProviderConfig
from ...errors import ProviderFailure, retriable_status
from ...events import (
    Event,
    Failed,
    FailureCode,
    FinishReason,
    RawFrame,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from ...events import Finished as FinishedEvent
from ...request import AsSent, GenerationRequest, WireFormat
from ...sse import SSEDecoder, SSEEvent
from ..http.transport import (
    HttpProvider,
    StreamDecoder,
    UpstreamHttpRequest,
    retry_after_seconds,
    sanitize,
    undecodable,
)
from .request import JSON_TOOL, messages_body, wants_json

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"

STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
# In-band error types after which another route could succeed.
RETRIABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error", "authentication_error", "permission_error"}
)


def error_text(kind: Any, message: Any) -> str:
    k, m = sanitize(kind, limit=60), sanitize(message)
    if k and m:
        return f"{k}: {m}"
    return k or m or "the upstream reported an error"


@dataclass(slots=True)
class _Block:
    kind: str  # text | thinking | redacted | tool | json (the response_format tool: text) | skip
    call_index: int = 0
    reasoning_index: int = 0


class MessagesEventDecoder:
    """Stateful: Messages stream events → canonical events (`Finished` only at `message_stop`)."""

    def __init__(self, provider: str, served_model: str, json_answer: bool = False) -> None:
        self.provider = provider
        self.served_model = served_model
        # `response_format` asked for JSON: the forced JSON_TOOL call's input is the answer's text
        self._json_answer = json_answer
        self._blocks: dict[int, _Block] = {}
        self._calls = 0
        self._reasoning = 0
        self._usage: dict[str, int] | None = None
        self._stop_reason: str | None = None
        self.started = False
        self.done = False  # message_stop seen or a failure emitted: nothing more is decoded
        self.finished = False
        self.skipped = 0  # unknown events / blocks / deltas (untrusted upstream: counted, not fatal)

    def _update_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if self._usage is None:
            self._usage = {}
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self._usage[key] = value  # cumulative: replace, never add

    def usage_report(self) -> UsageReport | None:
        u = self._usage
        if u is None:
            return None
        read = u.get("cache_read_input_tokens", 0)
        prompt = u.get("input_tokens", 0) + read + u.get("cache_creation_input_tokens", 0)
        return UsageReport(
            prompt=prompt,
            completion=u.get("output_tokens", 0),
            cached=read,
            cache_write=u.get("cache_creation_input_tokens"),
        )

    def fail(self, message: str, *, retriable: bool = True, code: FailureCode = "upstream_error") -> list[Event]:
        self.done = True
        return [Failed(code, message, self.provider, retriable)]

    def handle(self, name: str, data: Any) -> list[Event]:
        if self.done:
            return []
        if not isinstance(data, dict):
            raise ValueError(f"{name} event data is not a JSON object")
        if name == "content_block_delta":
            return self._delta(data)
        if name == "content_block_start":
            return self._start(data)
        if name == "content_block_stop":
            return []
        if name == "ping":
            return []
        if name == "message_start":
            message = data.get("message") or {}
            self._update_usage(message.get("usage"))
            if self.started:
                return []
            self.started = True
            model = message.get("model")
            served = model if isinstance(model, str) and model else self.served_model
            mid = message.get("id")
            return [Started(self.provider, served, mid if isinstance(mid, str) else None)]
        if name == "message_delta":
            delta = data.get("delta") or {}
            if isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
            self._update_usage(data.get("usage"))
            return []
        if name == "message_stop":
            self.done = True
            self.finished = True
            out: list[Event] = []
            usage = self.usage_report()
            if usage is not None:
                out.append(usage)
            stop = self._stop_reason or "end_turn"
            if stop == "tool_use" and self._calls == 0 and any(b.kind == "json" for b in self._blocks.values()):
                # only the answer tool was called: that is the answer, complete
                stop = "end_turn"
            out.append(FinishedEvent(STOP_REASONS.get(stop, "stop")))
            return out
        if name == "error":
            err = data.get("error") or {}
            etype = err.get("type") if isinstance(err, dict) else None
            emsg = err.get("message") if isinstance(err, dict) else None
            return self.fail(error_text(etype, emsg), retriable=etype in RETRIABLE_ERROR_TYPES or etype is None)
        self.skipped += 1
        return []

    def _start(self, data: dict[str, Any]) -> list[Event]:
        index = data.get("index")
        block = data.get("content_block") or {}
        btype = block.get("type") if isinstance(block, dict) else None
        if not isinstance(index, int):
            raise ValueError("content_block_start without an integer index")
        if btype == "text":
            self._blocks[index] = _Block("text")
            text = block.get("text")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if btype == "thinking":
            self._blocks[index] = _Block("thinking", reasoning_index=self._reasoning)
            self._reasoning += 1
            text = block.get("thinking")
            return [ReasoningDelta(text, index=self._blocks[index].reasoning_index)] if text else []
        if btype == "redacted_thinking":
            self._blocks[index] = _Block("redacted", reasoning_index=self._reasoning)
            self._reasoning += 1
            payload = block.get("data")
            return [ReasoningDelta("", kind="encrypted", data=str(payload or ""), index=self._reasoning - 1)]
        if btype == "tool_use" and self._json_answer and block.get("name") == JSON_TOOL:
            self._blocks[index] = _Block("json")
            initial = block.get("input")
            return [TextDelta(orjson.dumps(initial).decode())] if isinstance(initial, dict) and initial else []
        if btype == "tool_use":
            b = _Block("tool", call_index=self._calls)
            self._blocks[index] = b
            self._calls += 1
            events: list[Event] = [
                ToolCallDelta(b.call_index, "", id=str(block.get("id") or ""), name=str(block.get("name") or ""))
            ]
            initial = block.get("input")
            if isinstance(initial, dict) and initial:
                events.append(ToolCallDelta(b.call_index, orjson.dumps(initial).decode()))
            return events
        self._blocks[index] = _Block("skip")
        self.skipped += 1
        return []

    def _delta(self, data: dict[str, Any]) -> list[Event]:
        block = self._blocks.get(data.get("index"))  # type: ignore[arg-type]
        delta = data.get("delta") or {}
        dtype = delta.get("type") if isinstance(delta, dict) else None
        if block is None or block.kind == "skip":
            self.skipped += 1
            return []
        if dtype == "text_delta" and block.kind == "text":
            text = delta.get("text")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if dtype == "thinking_delta" and block.kind == "thinking":
            text = delta.get("thinking")
            return [ReasoningDelta(text, index=block.reasoning_index)] if isinstance(text, str) and text else []
        if dtype == "signature_delta" and block.kind == "thinking":
            sig = delta.get("signature")
            return [ReasoningDelta("", signature=sig, index=block.reasoning_index)] if isinstance(sig, str) else []
        if dtype == "input_json_delta" and block.kind == "json":
            piece = delta.get("partial_json")
            return [TextDelta(piece)] if isinstance(piece, str) and piece else []
        if dtype == "input_json_delta" and block.kind == "tool":
            piece = delta.get("partial_json")
            return [ToolCallDelta(block.call_index, piece)] if isinstance(piece, str) and piece else []
        self.skipped += 1  # citations_delta and future delta types
        return []

    def end(self) -> list[Event]:
        if self.done:
            return []
        self.done = True
        return [Failed("upstream_error", "the upstream stream ended without message_stop", self.provider)]


class AnthropicSSEDecoder:
    """Messages API SSE bytes → canonical events."""

    def __init__(self, provider: str, served_model: str, json_answer: bool = False, passthrough: bool = False) -> None:
        self._sse = SSEDecoder()
        self.events = MessagesEventDecoder(provider, served_model, json_answer)
        self._passthrough = passthrough

    def feed(self, chunk: bytes) -> list[Event]:
        batch, overflow = self._sse.feed_to_error(chunk)
        out = self._decode(batch)  # the whole events before an over-cap line go first
        if overflow is not None and not self.events.done:
            out.extend(self.events.fail(str(overflow), code="upstream_protocol_error"))
        return out

    def _decode(self, batch: list[SSEEvent]) -> list[Event]:
        """A read's events; undecodable data after some of them ends the batch with a failure
        (what came before it is kept), on the first one it raises (the transport fails the stream)."""
        out: list[Event] = []
        for ev in batch:
            if self.events.done:
                break
            try:
                data = orjson.loads(ev.data)
                name = ev.event
                if name == "message" and isinstance(data, dict):
                    name = str(data.get("type") or "message")
                if self._passthrough and isinstance(data, dict):
                    out.append(RawFrame(ev.data.encode()))
                out.extend(self.events.handle(name, data))
            except ValueError as exc:
                if not out:
                    raise
                out.extend(self.events.fail(undecodable(exc), code="upstream_protocol_error"))
                break
        return out

    def end(self) -> list[Event]:
        return self.events.end()


def parse_error_body(body: bytes) -> tuple[str | None, str | None]:
    """(type, message) from an Anthropic error body `{type: error, error: {type, message}}`."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        etype, emsg = err.get("type"), err.get("message")
        return (etype if isinstance(etype, str) else None), (emsg if isinstance(emsg, str) else None)
    return None, None


def anthropic_failure(status: int, headers: dict[str, str], body: bytes, who: str) -> ProviderFailure:
    etype, emsg = parse_error_body(body)
    message = f"{who} answered HTTP {status}"
    if etype or emsg:
        message += f" ({error_text(etype, emsg)})"
    retriable = retriable_status(status)
    code = "invalid_request" if status == 400 and not retriable else "upstream_error"
    return ProviderFailure(code, message, status=status, retriable=retriable, retry_after=retry_after_seconds(headers))


def secret_from_env(var: str | None, what: str, provider: str) -> str:
    value = os.environ.get(var) if var else None
    if not value:
        raise ProviderFailure(
            "upstream_error",
            f"provider {provider!r}: {what} is not set (environment variable {var or '<api_key_env unset>'})",
            retriable=True,
        )
    return value


def sent_body(extras: AsSent) -> dict[str, Any]:
    """The Messages door's body as sent, without tidegate's `provider` object (routing is tidegate's)."""
    return {k: v for k, v in extras.body.items() if k != "provider"}


class AnthropicAdapter:
    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self.config = config
        self.url = (config.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/messages"

    async def build_request(self, request: GenerationRequest, served_model: str) -> UpstreamHttpRequest:
        key = secret_from_env(self.config.api_key_env or "ANTHROPIC_API_KEY", "the API key", self.name)
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "anthropic-version": ANTHROPIC_VERSION,
            **self.config.headers,
            "x-api-key": key,
        }
        extras = request.sent_as(WireFormat.MESSAGES)
        if extras is not None:  # the Messages door: as sent
            headers.update(extras.headers)
            body = orjson.dumps({**sent_body(extras), "model": served_model, "stream": True})
        else:
            body = orjson.dumps(messages_body(request, model=served_model, stream=True))
        return UpstreamHttpRequest("POST", self.url, headers, body)

    def new_decoder(self, request: GenerationRequest, served_model: str) -> StreamDecoder:
        if request.sent_as(WireFormat.MESSAGES) is not None:
            return AnthropicSSEDecoder(self.name, served_model, passthrough=True)
        return AnthropicSSEDecoder(self.name, served_model, wants_json(request))

    def map_error(self, status: int, headers: dict[str, str], body: bytes) -> ProviderFailure:
        return anthropic_failure(status, headers, body, self.name)


def anthropic_provider(config: ProviderConfig, connect_timeout_s: float = 10.0) -> HttpProvider:
    return HttpProvider(config.name, config.kind, AnthropicAdapter(config), connect_timeout_s, config)
