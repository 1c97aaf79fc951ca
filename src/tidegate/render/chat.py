"""Chat Completions renderer (docs/api.md §3, §4): streaming chunks and the non-stream completion."""

from __future__ import annotations

from typing import Any

import orjson

from ..events import (
    Event,
    Failed,
    Finished,
    RawFrame,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)

DONE = b"[DONE]"


def usage_json(usage: UsageReport) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": usage.prompt,
        "completion_tokens": usage.completion,
        "total_tokens": usage.total,
    }
    if usage.cached is not None or usage.cache_write is not None:
        details: dict[str, int] = {"cached_tokens": usage.cached or 0}
        if usage.cache_write is not None:  # tidegate's extension (docs/translation.md): tokens written to the cache
            details["cache_write_tokens"] = usage.cache_write
        out["prompt_tokens_details"] = details
    if usage.reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning}
    return out


def reasoning_detail(event: ReasoningDelta) -> dict[str, Any]:
    if event.kind == "encrypted":
        return {"type": "reasoning.encrypted", "data": event.data or "", "index": event.index}
    if event.kind == "summary":
        return {"type": "reasoning.summary", "summary": event.text, "index": event.index}
    detail: dict[str, Any] = {"type": "reasoning.text", "text": event.text, "index": event.index}
    if event.signature is not None:
        detail["signature"] = event.signature
    return detail


def _frame(seq: int, payload: bytes) -> bytes:
    return b"id: %d\ndata: %s\n\n" % (seq, payload)


class ChatStreamRenderer:
    """One stream's chunks. Built path: ids `chatcmpl-<generation id>`, role first, never repeated.
    Passthrough (an upstream `RawFrame` arrived): upstream chunk bytes are forwarded untouched."""

    __slots__ = (
        "_role_sent",
        "_upstream_usage_sent",
        "chunk_id",
        "created",
        "include_usage",
        "model",
        "next_id",
        "passthrough",
        "upstream_id",
    )  # one per stream: no instance dict

    def __init__(
        self,
        *,
        generation_id: str,
        public_model: str,
        created: int,
        include_usage: bool,
        first_event_id: int = 0,
    ) -> None:
        self.chunk_id = f"chatcmpl-{generation_id}"
        self.model = public_model
        self.created = created
        self.include_usage = include_usage
        self.next_id = first_event_id
        self.passthrough = False
        self.upstream_id: str | None = None
        self._role_sent = False
        self._upstream_usage_sent = False

    def _emit(self, payload: bytes) -> bytes:
        seq = self.next_id
        self.next_id = seq + 1
        return _frame(seq, payload)

    def _chunk(self, delta: dict[str, Any] | None, finish_reason: str | None = None, **extra: Any) -> bytes:
        chunk: dict[str, Any] = {
            "id": self.chunk_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
        }
        chunk.update(extra)
        if delta is None:
            chunk["choices"] = []
        else:
            if not self._role_sent and not self.passthrough:
                delta = {"role": "assistant", **delta}
                self._role_sent = True
            chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        return self._emit(orjson.dumps(chunk))

    def render(self, event: Event) -> bytes:
        if isinstance(event, RawFrame):  # inline `_emit`: once per chunk on every passthrough stream
            self.passthrough = True
            seq = self.next_id
            self.next_id = seq + 1
            return b"id: %d\ndata: %s\n\n" % (seq, event.data)
        if self.passthrough and isinstance(event, TextDelta):
            return b""  # the RawFrame before it carried the text
        if isinstance(event, Started):
            if event.upstream_id:
                self.upstream_id = event.upstream_id
            return b""
        if isinstance(event, UsageReport):
            if self.passthrough:
                self._upstream_usage_sent = True
            return b""
        if self.passthrough:
            return b""  # the RawFrame already carried it
        if isinstance(event, TextDelta):
            return self._chunk({"content": event.text}) if event.text else b""
        if isinstance(event, ReasoningDelta):
            delta: dict[str, Any] = {"reasoning_details": [reasoning_detail(event)]}
            if event.kind != "encrypted":
                delta["reasoning"] = event.text
            return self._chunk(delta)
        if isinstance(event, ToolCallDelta):
            call: dict[str, Any] = {"index": event.index}
            if event.id is not None:
                call["id"] = event.id
                call["type"] = "function"
                call["function"] = {"name": event.name or "", "arguments": event.arguments}
            else:
                call["function"] = {"arguments": event.arguments}
            return self._chunk({"tool_calls": [call]})
        if isinstance(event, Finished):
            return self._chunk({}, event.reason) if event.said else b""
        return b""

    def finish(self, usage: UsageReport | None) -> bytes:
        """The usage chunk (unless the client turned it off or the upstream already sent it) + [DONE]."""
        out = b""
        if self.include_usage and usage is not None and not self._upstream_usage_sent:
            if self.passthrough:
                chunk = {
                    "id": self.upstream_id or self.chunk_id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": usage_json(usage),
                }
                out += self._emit(orjson.dumps(chunk))
            else:
                out += self._chunk(None, usage=usage_json(usage))
        return out + self._emit(DONE)

    def fail(self, failure: Failed) -> bytes:
        """The one final failure chunk (docs/api.md §4). No [DONE] follows."""
        delta: dict[str, Any] = {"content": ""}
        if not self._role_sent and not self.passthrough:
            delta = {"role": "assistant", "content": ""}
            self._role_sent = True
        chunk = {
            "id": (self.upstream_id or self.chunk_id) if self.passthrough else self.chunk_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "provider": failure.provider,
            "error": {"code": failure.code, "message": failure.message},
            "choices": [{"index": 0, "delta": delta, "finish_reason": "error"}],
        }
        return self._emit(orjson.dumps(chunk))


class ChatCompletionBuilder:
    """Accumulates canonical events into one OpenAI `chat.completion` object."""

    def __init__(self, *, generation_id: str, public_model: str, created: int) -> None:
        self.generation_id = generation_id
        self.model = public_model
        self.created = created
        self.reset()

    def reset(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.details: list[dict[str, Any]] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: UsageReport | None = None

    def add(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self._add_reasoning(event)
        elif isinstance(event, ToolCallDelta):
            call = self.tool_calls.get(event.index)
            if call is None:
                call = {
                    "id": event.id or "",
                    "type": "function",
                    "function": {"name": event.name or "", "arguments": ""},
                }
                self.tool_calls[event.index] = call
            if event.id and not call["id"]:
                call["id"] = event.id
            if event.name and not call["function"]["name"]:
                call["function"]["name"] = event.name
            call["function"]["arguments"] += event.arguments
        elif isinstance(event, Finished):
            self.finish_reason = event.reason
        elif isinstance(event, UsageReport):
            self.usage = event

    def _add_reasoning(self, event: ReasoningDelta) -> None:
        if event.kind != "encrypted":
            self.reasoning.append(event.text)
        last = self.details[-1] if self.details else None
        if (
            event.kind == "text"
            and last is not None
            and last["type"] == "reasoning.text"
            and last["index"] == event.index
        ):
            last["text"] += event.text
            if event.signature is not None:
                last["signature"] = event.signature
            return
        self.details.append(reasoning_detail(event))

    def build(self, usage: UsageReport | None) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.text) if self.text or not self.tool_calls else None,
        }
        if self.reasoning or self.details:
            message["reasoning"] = "".join(self.reasoning) or None
            message["reasoning_details"] = self.details
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        message.setdefault("refusal", None)
        body: dict[str, Any] = {
            "id": f"chatcmpl-{self.generation_id}",
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": self.finish_reason or "stop", "logprobs": None}
            ],
        }
        if usage is not None:
            body["usage"] = usage_json(usage)
        return body
