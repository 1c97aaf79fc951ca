"""The `openai` kind: any OpenAI-compatible Chat Completions upstream, as a passthrough.

`build_request` forwards the client's body (unknown fields included) with the route's model, `stream`
forced on (non-stream client requests are assembled from the stream by the door) and
`stream_options.include_usage` injected unless the client sent `stream_options` (UPSTREAMS §4,
docs/api.md §3). The decoder emits, for every chunk, the chunk's exact bytes (`RawFrame`, for the chat
door) followed by its canonical events (for the recorder and every other door). `[DONE]` is the
terminal marker: a stream that ends without it is a failure, never a `stop`. With `responses = true`,
a `/v1/responses` request goes to the upstream's Responses API instead (providers/openai/responses.py).
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from ...config.model import ProviderConfig
from ...errors import ProviderFailure, retriable_status
from ...events import (
    Event,
    Failed,
    Finished,
    FinishReason,
    RawFrame,
    ReasoningDelta,
    ReasoningKind,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from ...request import GenerationRequest
from ...sse import SSEDecoder, SSEEvent
from ..http.transport import MAX_UPSTREAM_TEXT, HttpProvider, UpstreamHttpRequest, retry_after_seconds, sanitize
from .responses import ResponsesDecoder, responses_body

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
_REASONING_KINDS: dict[str, ReasoningKind] = {
    "reasoning.text": "text",
    "reasoning.encrypted": "encrypted",
    "reasoning.summary": "summary",
}


def error_text(payload: Any) -> tuple[str, str]:
    """(type, message) from an OpenAI-style error body, or the common compatible variants."""
    if not isinstance(payload, dict):
        return "", ""
    err = payload.get("error", payload)
    if isinstance(err, str):
        return "", err
    if not isinstance(err, dict):
        return "", ""
    kind = err.get("type") or err.get("code") or ""
    message = err.get("message") or err.get("detail") or ""
    if not isinstance(message, str):
        message = orjson.dumps(message).decode()
    return str(kind), message


class OpenAIDecoder:
    """Stateful: bytes of an OpenAI-compatible chunk stream in, canonical events out."""

    __slots__ = (
        "_done",
        "_finished",
        "_secret",
        "_sse",
        "_started",
        "provider",
        "served_model",
    )  # one per stream: no instance dict

    def __init__(self, provider: str, served_model: str, secret: str | None = None) -> None:
        self.provider = provider
        self.served_model = served_model
        self._secret = secret
        self._sse = SSEDecoder()
        self._started = False
        self._finished = False
        self._done = False

    def feed(self, chunk: bytes) -> list[Event]:
        if self._done:
            return []  # nothing after [DONE] is read (as the OpenAI SDK does)
        # The common read, whole `data: {...}` events (one when paced): their bytes are the chunks'
        # JSON as they are (no str decoded and encoded back, no SSE event object). Anything else, and
        # bytes orjson refuses (invalid UTF-8 among them), go the reference decoder's way, which
        # decodes them with replacement characters.
        payloads = self._sse.whole_data_payloads(chunk)
        if payloads is not None:
            first = payloads[0]
            if len(payloads) == 1 and first[:1] == b"{":  # a paced read: one chunk object, no list built
                try:
                    obj = orjson.loads(first)
                except orjson.JSONDecodeError:
                    pass
                else:
                    return self._chunk(obj, first, [])
            out = self._payloads(payloads)
            if out is not None:
                return out
        batch, overflow = self._sse.feed_to_error(chunk)
        out = self._decode(batch)  # the whole events before an over-cap line go first
        if overflow is not None and not self._done and not (out and isinstance(out[-1], Failed)):
            out.append(Failed("upstream_protocol_error", str(overflow), self.provider))
        return out

    def _payloads(self, payloads: list[bytes]) -> list[Event] | None:
        """A read's payloads (`SSEDecoder.whole_data_payloads`) decoded from their bytes, as `_decode`
        decodes their events: chunk objects up to `[DONE]`. None, with nothing changed, when one before
        `[DONE]` is not a JSON object (or not UTF-8): the general path decodes the read and names it."""
        objs: list[dict[str, Any] | None] = []
        for payload in payloads:
            if payload[:1] == b"{":
                try:
                    objs.append(orjson.loads(payload))
                except orjson.JSONDecodeError:
                    return None
            elif payload.startswith(b"[DONE]"):
                objs.append(None)
                break
            else:
                return None
        out: list[Event] = []
        for raw, obj in zip(payloads, objs, strict=False):  # (the payloads after `[DONE]` are not read)
            if obj is None:
                self._end(out)
                break
            self._chunk(obj, raw, out)
            if out and isinstance(out[-1], Failed):
                break
        return out

    def _decode(self, batch: list[SSEEvent]) -> list[Event]:
        out: list[Event] = []
        for sse in batch:
            if self._done:
                break
            data = sse.data
            if data.startswith("[DONE]"):
                self._end(out)
                break
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                message = f"the upstream sent data that is not JSON ({exc.msg} at position {exc.pos})"
                if not out:
                    raise ValueError(message) from None
                out.append(Failed("upstream_protocol_error", message, self.provider))
                return out
            if not isinstance(obj, dict):
                message = "the upstream sent a JSON value that is not a chunk object"
                if not out:
                    raise ValueError(message)
                out.append(Failed("upstream_protocol_error", message, self.provider))
                return out
            # The chunk's own bytes, exactly; a payload split over several data lines is re-serialised
            # compactly because the chat door writes one data line per event.
            self._chunk(obj, data.encode() if "\n" not in data else orjson.dumps(obj), out)
            if out and isinstance(out[-1], Failed):
                return out
        return out

    def _end(self, out: list[Event]) -> None:
        """`[DONE]`: nothing after it is read; a stream that gave no finish reason finished with `stop`,
        which it did not say (`said`: a replay shows none either)."""
        self._done = True
        if not self._finished:
            out.append(Finished("stop", said=False))
            self._finished = True

    def _chunk(self, obj: dict[str, Any], raw: bytes, out: list[Event]) -> list[Event]:
        """One chunk object's events onto `out`: its bytes (`RawFrame`), then what it says. (Runs once
        per chunk: orjson's values are exact types, so `type(...) is` stands for `isinstance`.)"""
        if obj.get("error"):
            kind, msg = error_text(obj)
            text = sanitize(f"{kind}: {msg}" if kind and msg else (msg or kind or "error"), self._secret)
            out.append(Failed("upstream_error", f"{self.provider}: {text}", self.provider, True))
            return out
        out.append(RawFrame(raw))
        if not self._started:
            self._started = True
            model = obj.get("model")
            cid = obj.get("id")
            out.append(
                Started(
                    self.provider,
                    model if isinstance(model, str) and model else self.served_model,
                    cid if isinstance(cid, str) and cid else None,
                )
            )
        choices = obj.get("choices")
        if type(choices) is list:
            for choice in choices:
                if type(choice) is dict and choice.get("index", 0) == 0:
                    self._choice(choice, out)
        usage = obj.get("usage")
        if type(usage) is dict:
            out.append(_usage(usage))
        return out

    def _choice(self, choice: dict[str, Any], out: list[Event]) -> None:
        # Runs once per chunk on every OpenAI-compatible stream: keys are tested with `in` first, so a
        # plain text delta costs three lookups.
        delta = choice.get("delta")
        if type(delta) is dict and delta:
            if "reasoning_details" in delta or "reasoning" in delta or "reasoning_content" in delta:
                _reasoning(delta, out)
            content = delta.get("content")
            if type(content) is str and content:
                out.append(TextDelta(content))
            if "tool_calls" in delta:
                calls = delta["tool_calls"]
                if isinstance(calls, list):
                    for call in calls:
                        if isinstance(call, dict):
                            out.append(_tool_call(call))
        reason = choice.get("finish_reason")
        if reason and type(reason) is str:
            if reason == "error":
                out.append(
                    Failed(
                        "upstream_error", f"{self.provider}: the upstream ended the answer with an error", self.provider
                    )
                )
                return
            self._finished = True
            out.append(Finished(_FINISH.get(reason, "stop")))

    def end(self) -> list[Event]:
        if self._done:
            return []
        return [Failed("upstream_error", "the upstream stream ended without [DONE]", self.provider)]


def _reasoning(delta: dict[str, Any], out: list[Event]) -> None:
    """A delta's reasoning: OpenRouter's `reasoning_details` when present, else `reasoning` or
    `reasoning_content` (the first non-empty one)."""
    details = delta.get("reasoning_details")
    if isinstance(details, list) and details:
        for detail in details:
            if isinstance(detail, dict):
                out.append(_reasoning_detail(detail))
        return
    for key in ("reasoning", "reasoning_content"):
        text = delta.get(key)
        if isinstance(text, str) and text:
            out.append(ReasoningDelta(text))
            return


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(usage: dict[str, Any]) -> UsageReport:
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    return UsageReport(
        prompt=_int(usage.get("prompt_tokens")) or 0,
        completion=_int(usage.get("completion_tokens")) or 0,
        reasoning=_int(completion_details.get("reasoning_tokens")) if isinstance(completion_details, dict) else None,
        cached=_int(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else None,
    )


def _reasoning_detail(detail: dict[str, Any]) -> ReasoningDelta:
    kind = _REASONING_KINDS.get(str(detail.get("type")), "text")
    index = _int(detail.get("index")) or 0
    signature = detail.get("signature")
    sig = signature if isinstance(signature, str) and signature else None
    if kind == "encrypted":
        data = detail.get("data")
        return ReasoningDelta("", "encrypted", sig, data if isinstance(data, str) else "", index)
    text = detail.get("summary") if kind == "summary" else detail.get("text")
    return ReasoningDelta(text if isinstance(text, str) else "", kind, sig, None, index)


def _tool_call(call: dict[str, Any]) -> ToolCallDelta:
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    args = fn.get("arguments")
    cid = call.get("id")
    name = fn.get("name")
    return ToolCallDelta(
        index=_int(call.get("index")) or 0,
        arguments=args if isinstance(args, str) else "",
        id=cid if isinstance(cid, str) and cid else None,
        name=name if isinstance(name, str) and name else None,
    )


def chat_body(r: GenerationRequest) -> dict[str, Any]:
    """A Chat Completions body from a canonical request (messages and tools are already chat-shaped)."""
    body: dict[str, Any] = {"messages": r.messages}
    optional: dict[str, Any] = {
        "max_tokens": r.max_tokens,
        "temperature": r.temperature,
        "top_p": r.top_p,
        "stop": r.stop or None,
        "tools": r.tools,
        "tool_choice": r.tool_choice,
        "parallel_tool_calls": r.parallel_tool_calls,
        "seed": r.seed,
        "user": r.user,
        "prompt_cache_key": r.prompt_cache_key,
        "safety_identifier": r.safety_identifier,
        "response_format": r.response_format,
        "reasoning_effort": r.reasoning.effort if r.reasoning else None,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


class OpenAIAdapter:
    """The pure half of the `openai` kind (no I/O)."""

    def __init__(self, config: ProviderConfig) -> None:
        if not config.base_url:
            raise ValueError(f"providers.{config.name}.base_url is required for kind 'openai'")
        self.name = config.name
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        # `responses = true`: the Responses door's requests go to the upstream's own Responses API
        self.responses_url = config.base_url.rstrip("/") + "/responses" if config.responses else None
        self.api_key_env = config.api_key_env
        self.extra_headers = dict(config.headers)

    def _key(self) -> str | None:
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env) or None

    def build_body(self, request: GenerationRequest, served_model: str) -> dict[str, Any]:
        # The chat door forwards the client's own body (unknown fields too); the other doors (responses,
        # native) arrive as a canonical request and are written out as a chat body.
        body = dict(request.raw_body) if request.raw_body else chat_body(request)
        body["model"] = served_model
        body["stream"] = True
        if body.get("stream_options") is None:
            body["stream_options"] = {"include_usage": True}
        return body

    def _passthrough(self, request: GenerationRequest, served_model: str) -> dict[str, Any] | None:
        return responses_body(request, served_model) if self.responses_url is not None else None

    async def build_request(self, request: GenerationRequest, served_model: str) -> UpstreamHttpRequest:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        headers.update(self.extra_headers)
        key = self._key()
        if key:
            headers["authorization"] = f"Bearer {key}"
        passthrough = self._passthrough(request, served_model)
        if passthrough is not None and self.responses_url is not None:
            return UpstreamHttpRequest("POST", self.responses_url, headers, orjson.dumps(passthrough))
        return UpstreamHttpRequest("POST", self.url, headers, orjson.dumps(self.build_body(request, served_model)))

    def new_decoder(self, request: GenerationRequest, served_model: str) -> OpenAIDecoder | ResponsesDecoder:
        if self._passthrough(request, served_model) is not None:
            return ResponsesDecoder(self.name, served_model, self._key())
        return OpenAIDecoder(self.name, served_model, self._key())

    def map_error(self, status: int, headers: dict[str, str], body: bytes) -> ProviderFailure:
        kind, message = "", ""
        try:
            kind, message = error_text(orjson.loads(body))
        except orjson.JSONDecodeError:
            message = body[:MAX_UPSTREAM_TEXT].decode("utf-8", "replace") if body.strip()[:1] not in (b"<",) else ""
        detail = sanitize(f"{kind}: {message}" if kind and message else (message or kind), self._key())
        text = f"{self.name}: upstream HTTP {status}" + (f": {detail}" if detail else "")
        retriable = retriable_status(status)
        code = "invalid_request" if status in (400, 422) else "upstream_error"
        return ProviderFailure(code, text, status=status, retriable=retriable, retry_after=retry_after_seconds(headers))


def build_openai_provider(config: ProviderConfig, connect_timeout_s: float = 10.0) -> HttpProvider:
    return HttpProvider(config.name, "openai", OpenAIAdapter(config), connect_timeout_s, config)
