"""Gemini API renderer (docs/agents.md): canonical events → `GenerateContentResponse` chunks, and the
one-shot `generateContent` answer.

A chunk is `{"candidates": [{"content": {"parts": [...], "role": "model"}, "index": 0}], "modelVersion",
"responseId"}`: text parts, thought parts (`thought: true`), and function calls, which Gemini sends
whole (`{"functionCall": {"id", "name", "args"}}`), so a translated route's call fragments are
gathered and go in the last chunk. The last chunk carries `finishReason` and `usageMetadata`; a
stream that fails never gets one. A translated route's thinking signature (Anthropic's, say) goes
back packed with its thinking's text as the next part's `thoughtSignature` (as Gemini places its
own): Gemini CLI drops thought parts from its history but keeps signatures, and the route needs both
(server/gemini_door_request.py unpacks it).

Framing: `?alt=sse` is `data: <chunk>` events with no `id:` line and no comment (both google-genai
SDKs read any other line as JSON: the Python one fails on it, the JS one drops the event after it);
keep-alives are blank lines. Without `alt=sse` the stream is one JSON array, one chunk per element.
A failure after the first byte is Google's error object written bare, as Google's API writes it
(both SDKs raise it as an API error), after which the stream ends.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from ..events import Event, Failed, Finished, RawFrame, ReasoningDelta, TextDelta, ToolCallDelta, UsageReport

# what Gemini CLI puts on a function call it has no signature for (the API's documented bypass)
SKIP_SIGNATURE = "skip_thought_signature_validator"
# a thoughtSignature tidegate wrote: base64 (the SDKs hold signatures as bytes) of this prefix and
# the JSON of the turn's reasoning_details; a Gemini signature never decodes to it
ENVELOPE = b"tidegate-reasoning:1\n"


def pack_reasoning(details: list[dict[str, Any]]) -> str:
    """A translated route's thinking (text and its signature) as one `thoughtSignature`: clients such as
    Gemini CLI keep signatures and drop thought parts from history, and the route needs both back."""
    return base64.b64encode(ENVELOPE + orjson.dumps(details)).decode()


def unpack_reasoning(signature: str) -> list[dict[str, Any]] | None:
    """The reasoning_details of a signature `pack_reasoning` wrote (in either base64 alphabet: the
    Python SDK sends bytes back URL-safe), else None."""
    try:
        raw = base64.b64decode(signature.replace("-", "+").replace("_", "/"), validate=True)
    except ValueError:
        return None
    if not raw.startswith(ENVELOPE):
        return None
    try:
        details = orjson.loads(raw[len(ENVELOPE) :])
    except orjson.JSONDecodeError:
        return None
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else None


FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "content_filter": "SAFETY", "error": "OTHER"}
# google.rpc status names by HTTP status (Google's API design guide, "Errors")
STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    402: "RESOURCE_EXHAUSTED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    422: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    431: "INVALID_ARGUMENT",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# a failure after the first byte, as the status its code has before it (docs/api.md §4)
FAILURE_STATUS = {"upstream_timeout": 504, "cancelled": 499, "interrupted": 503}
# every frame ends with a blank line, the JSON array's too (whitespace there): the frame log finds
# frames by it (gateway/recorder.py), and both SDKs split SSE events on it
END = b"\n\n"
KEEPALIVE = b"\n"  # a blank line: dispatches nothing in SSE, whitespace in the JSON array


def google_error(status: int, message: str, code: str, retry_after: float | None = None) -> dict[str, Any]:
    """`{"error": {"code", "message", "status", "details"}}`; tidegate's own code is the `ErrorInfo` reason."""
    details: list[dict[str, Any]] = [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": code.upper(), "domain": "tidegate"}
    ]
    if retry_after is not None:
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{int(retry_after)}s"})
    gstatus = STATUSES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    return {"error": {"code": status, "message": message, "status": gstatus, "details": details}}


def usage_metadata(usage: UsageReport) -> dict[str, Any]:
    thoughts = usage.reasoning or 0
    out: dict[str, Any] = {
        "promptTokenCount": usage.prompt,
        "candidatesTokenCount": max(0, usage.completion - thoughts),
        "totalTokenCount": usage.total,
    }
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    if usage.cached:
        out["cachedContentTokenCount"] = usage.cached
    return out


def _args(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return {"arguments": text}  # (a route's model wrote arguments that are not JSON: kept, not lost)
    return value if isinstance(value, dict) else {"value": value}


class _Parts:
    """What both renderers share: calls gathered whole, thinking packed into the next part's signature."""

    def __init__(self) -> None:
        self.calls: dict[int, list[Any]] = {}  # index → [id, name, argument pieces]
        self.thinking: list[str] = []  # the current thinking block's text
        self.details: list[dict[str, Any]] = []  # finished signed blocks, not yet attached to a part
        self.finish: str | None = None

    def reasoning(self, event: ReasoningDelta) -> dict[str, Any] | None:
        """The thought part for `event` (None: nothing to show); a signature closes the block."""
        if event.kind == "encrypted":
            self.details.append({"type": "reasoning.encrypted", "data": event.data or "", "index": event.index})
            return None
        if event.text:
            self.thinking.append(event.text)
        if event.signature:
            text = "".join(self.thinking)
            self.details.append({"type": "reasoning.text", "text": text, "signature": event.signature})
            self.thinking = []
        return {"text": event.text, "thought": True} if event.text else None

    def signed(self, part: dict[str, Any]) -> dict[str, Any]:
        if self.details:
            part["thoughtSignature"] = pack_reasoning(self.details)
            self.details = []
        return part

    def call(self, event: ToolCallDelta) -> None:
        call = self.calls.get(event.index)
        if call is None:
            self.calls[event.index] = [event.id or f"call_{event.index}", event.name or "", [event.arguments]]
        else:
            call[2].append(event.arguments)

    def closing_parts(self) -> list[dict[str, Any]]:
        parts = [
            {"functionCall": {"id": cid, "name": name, "args": _args("".join(pieces))}}
            for cid, name, pieces in (self.calls[i] for i in sorted(self.calls))
        ]
        if self.details:
            parts = [self.signed(parts[0] if parts else {"text": ""}), *parts[1:]]
        return parts


class GeminiStreamRenderer:
    """One stream's chunks; `array`: the JSON-array framing (no `alt=sse`). `passthrough` (the door sets
    it when a Gemini route serves): the upstream's chunks (`RawFrame`) go out untouched; any other
    route's `RawFrame`s (an OpenAI-compatible one's chunks) are not this door's format."""

    def __init__(self, *, generation_id: str, public_model: str, array: bool = False) -> None:
        tail = orjson.dumps({"modelVersion": public_model, "responseId": generation_id})
        self._head = b'{"candidates":[{"content":{"parts":['
        self._tail = b'],"role":"model"},"index":0}],' + tail[1:]
        self.meta = {"modelVersion": public_model, "responseId": generation_id}
        self.array = array
        self.sent = 0
        self.passthrough = False
        self.parts = _Parts()

    def frame(self, payload: bytes) -> bytes:
        sent = self.sent
        self.sent = sent + 1
        if not self.array:
            return b"data: " + payload + END
        return (b"[" if sent == 0 else b",") + payload + END

    def _part(self, part: dict[str, Any]) -> bytes:
        return self.frame(self._head + orjson.dumps(part) + self._tail)

    def render(self, event: Event) -> bytes:
        if self.passthrough:  # the RawFrame carries everything the events after it say
            return self.frame(event.data) if type(event) is RawFrame else b""
        if type(event) is TextDelta:
            return self._part(self.parts.signed({"text": event.text})) if event.text else b""
        if type(event) is ReasoningDelta:
            part = self.parts.reasoning(event)
            return self._part(part) if part is not None else b""
        if type(event) is ToolCallDelta:
            self.parts.call(event)
        elif type(event) is Finished:
            self.parts.finish = FINISH.get(event.reason, "STOP")
        return b""

    def finish(self, usage: UsageReport | None) -> bytes:
        """The last chunk (calls, finishReason, usageMetadata); the array's close."""
        end = b"]" if self.array else b""
        if self.passthrough:
            return end if self.sent else b"[]" if self.array else b""
        candidate: dict[str, Any] = {"content": {"parts": self.parts.closing_parts(), "role": "model"}}
        candidate["finishReason"] = self.parts.finish or "STOP"
        candidate["index"] = 0
        chunk: dict[str, Any] = {"candidates": [candidate]}
        if usage is not None:
            chunk["usageMetadata"] = usage_metadata(usage)
        chunk.update(self.meta)
        return self.frame(orjson.dumps(chunk)) + end

    def fail(self, failure: Failed) -> bytes:
        status = FAILURE_STATUS.get(failure.code, 502)
        body = orjson.dumps(google_error(status, failure.message, failure.code))
        if self.array:
            return (b"[" if self.sent == 0 else b",") + body + b"]\n"
        return body + b"\n"


class GeminiResponseBuilder:
    """Accumulates canonical events (or a Gemini route's own chunks) into one `GenerateContentResponse`."""

    def __init__(self, *, generation_id: str, public_model: str) -> None:
        self.meta = {"modelVersion": public_model, "responseId": generation_id}
        self.passthrough = False  # a Gemini route serves: its chunks are merged (the door sets it)
        self.reset()

    def reset(self) -> None:
        self.parts = _Parts()
        self.out: list[dict[str, Any]] = []
        self.raw: dict[str, Any] | None = None  # the merged chunks of a Gemini route

    def _add_part(self, part: dict[str, Any]) -> None:
        """Text after text of the same kind joins it (a signature starts a part of its own)."""
        last = self.out[-1] if self.out else None
        if (
            last is not None
            and "text" in last
            and "text" in part
            and "thoughtSignature" not in part
            and last.get("thought") is part.get("thought")
        ):
            last["text"] += part["text"]
            return
        self.out.append(part)

    def _add_raw(self, data: bytes) -> None:
        chunk = orjson.loads(data)
        if self.raw is None:
            self.raw = {"candidates": [{"content": {"parts": [], "role": "model"}, "index": 0}]}
        for key, value in chunk.items():
            if key != "candidates":
                self.raw[key] = value
        candidates = chunk.get("candidates") or []
        if candidates:
            target = self.raw["candidates"][0]
            for key, value in candidates[0].items():
                if key == "content":
                    for part in (value or {}).get("parts") or []:
                        self._add_part(part)
                else:
                    target[key] = value

    def add(self, event: Event) -> None:
        if self.passthrough:
            if type(event) is RawFrame:
                self._add_raw(event.data)
        elif type(event) is TextDelta:
            if event.text:
                self._add_part(self.parts.signed({"text": event.text}))
        elif type(event) is ReasoningDelta:
            part = self.parts.reasoning(event)
            if part is not None:
                self._add_part(dict(part))
        elif type(event) is ToolCallDelta:
            self.parts.call(event)
        elif type(event) is Finished:
            self.parts.finish = FINISH.get(event.reason, "STOP")

    def build(self, usage: UsageReport | None) -> dict[str, Any]:
        if self.passthrough:
            raw = self.raw or {"candidates": [{"content": {"parts": [], "role": "model"}, "index": 0}]}
            raw["candidates"][0]["content"]["parts"] = self.out
            return raw
        parts = [*self.out, *self.parts.closing_parts()]
        candidate = {"content": {"parts": parts, "role": "model"}, "finishReason": self.parts.finish or "STOP"}
        body: dict[str, Any] = {"candidates": [{**candidate, "index": 0}]}
        if usage is not None:
            body["usageMetadata"] = usage_metadata(usage)
        body.update(self.meta)
        return body
