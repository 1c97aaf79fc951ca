"""Anthropic Messages renderer (docs/agents.md): canonical events → Messages stream events, or one
`message` object for `stream: false`.

The stream is `message_start`; per content block `content_block_start` → `content_block_delta`*
(`text_delta`, `thinking_delta`, `signature_delta`, `input_json_delta`) → `content_block_stop`;
`message_delta` (stop_reason, usage); `message_stop` only for a complete answer. Every frame is
`id: <n>`, `event: <type>`, `data: <json>` (the SDK skips a frame without an `event:` line). A
failure after the first byte is one `event: error` (`{"type": "error", "error": {"type",
"message"}}`), and no `message_stop`. Keep-alives are `ping` events.

Blocks: a canonical reasoning block (`ReasoningDelta.index`) is a `thinking` block (its signature
sent last, as `signature_delta`) or, for encrypted reasoning, a `redacted_thinking` block; each tool
call is a `tool_use` block. Blocks are sequential: a chat upstream's interleaved parallel calls are
held until the open call's block closes. Text deltas go out through a pre-built byte template with
one JSON string encode, like render/chat.py's chunks.

Passthrough: an `anthropic` route serving this door sends its events as `RawFrame`s; they go out
untouched under their own names, and the canonical events that follow them write nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
    "error": "end_turn",
}
FAILURE_TYPES = {"upstream_timeout": "timeout_error", "cancelled": "api_error", "interrupted": "api_error"}
_TEXT_DELTA = (
    b'id: %d\nevent: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"text_delta","text":%s}}\n\n'
)
_THINKING_DELTA = (
    b'id: %d\nevent: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"thinking_delta","thinking":%s}}\n\n'
)
_JSON_DELTA = (
    b'id: %d\nevent: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"input_json_delta","partial_json":%s}}\n\n'
)
_PREFIX = b'{"type":"'


def usage_json(usage: UsageReport | None) -> dict[str, int]:
    """Anthropic's usage: `input_tokens` without the cache's share (canonical `prompt` holds all three)."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    read, write = usage.cached or 0, usage.cache_write or 0
    return {
        "input_tokens": max(0, usage.prompt - read - write),
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
        "output_tokens": usage.completion,
    }


def error_json(failure: Failed) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": FAILURE_TYPES.get(failure.code, "api_error"), "message": failure.message},
    }


def event_name(data: bytes) -> bytes:
    """A Messages event's `type` (its SSE name): read off the front, where the API writes it."""
    if data.startswith(_PREFIX):
        end = data.find(b'"', 9)
        if end > 9:
            return data[9:end]
    try:
        return str(orjson.loads(data).get("type") or "message").encode()
    except (orjson.JSONDecodeError, AttributeError):
        return b"message"


@dataclass(slots=True)
class _Call:
    block: int = -1  # its block index once started
    id: str = ""
    name: str = ""
    pending: list[str] = field(default_factory=list)  # arguments that arrived while another block was open


class MessageState:
    """Block bookkeeping shared by the stream renderer and the JSON builder: which block is open."""

    def __init__(self, generation_id: str, omit_thinking: bool) -> None:
        self.generation_id = generation_id
        self.omit_thinking = omit_thinking
        self.blocks = 0  # blocks started
        self.open: str | None = None  # text | thinking | tool
        self.open_reasoning = -1  # the canonical reasoning index of the open thinking block
        self.open_call = -1
        self.calls: dict[int, _Call] = {}
        self.waiting: list[int] = []  # calls held until the open block closes
        self.stop_reason: str | None = None

    def call_id(self, call: int, given: str | None) -> str:
        return given or f"toolu_{self.generation_id}_{call}"


class MessagesStreamRenderer:
    def __init__(
        self, *, generation_id: str, public_model: str, omit_thinking: bool = False, first_event_id: int = 0
    ) -> None:
        self.message_id = f"msg_{generation_id}"
        self.model = public_model
        self.state = MessageState(generation_id, omit_thinking)
        self.next_id = first_event_id
        self.passthrough = False
        self.upstream_ended = False  # passthrough: the upstream's message_stop or error went out

    def _frame(self, name: bytes, payload: dict[str, Any]) -> bytes:
        seq = self.next_id
        self.next_id = seq + 1
        return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, name, orjson.dumps(payload))

    def _seq(self) -> int:
        seq = self.next_id
        self.next_id = seq + 1
        return seq

    def begin(self, input_tokens: int = 0) -> bytes:
        """`message_start`; `input_tokens` is the prompt as known before the upstream said it (an
        estimate: `message_delta` carries the route's own count)."""
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0},
        }
        return self._frame(b"message_start", {"type": "message_start", "message": message})

    def ping(self) -> bytes:
        return self._frame(b"ping", {"type": "ping"})

    # blocks -------------------------------------------------------------------------------------
    def _start(self, block: dict[str, Any], kind: str) -> bytes:
        out = self._close()
        index = self.state.blocks
        self.state.blocks = index + 1
        self.state.open = kind
        start = {"type": "content_block_start", "index": index, "content_block": block}
        return out + self._frame(b"content_block_start", start)

    def _stop(self) -> bytes:
        state = self.state
        state.open = None
        return self._frame(b"content_block_stop", {"type": "content_block_stop", "index": state.blocks - 1})

    def _close(self) -> bytes:
        """Close the open block, then start and finish the calls held behind it."""
        state = self.state
        out = self._stop() if state.open is not None else b""
        while state.waiting:
            out += self._open_call(state.waiting.pop(0))
            out += self._stop()
        return out

    def _open_call(self, index: int) -> bytes:
        state = self.state
        call = state.calls[index]
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        index_before = state.blocks
        out = b""
        if state.open is not None:
            out = self._stop()
        state.blocks = index_before + 1
        state.open = "tool"
        state.open_call = index
        call.block = index_before
        start = {"type": "content_block_start", "index": index_before, "content_block": block}
        out += self._frame(b"content_block_start", start)
        if call.pending:
            out += _JSON_DELTA % (self._seq(), index_before, orjson.dumps("".join(call.pending)))
            call.pending.clear()
        return out

    # events -------------------------------------------------------------------------------------
    def render(self, event: Event) -> bytes:
        if type(event) is TextDelta and not self.passthrough:
            state = self.state
            if not event.text:
                return b""
            out = b"" if state.open == "text" else self._start({"type": "text", "text": ""}, "text")
            return out + _TEXT_DELTA % (self._seq(), state.blocks - 1, orjson.dumps(event.text))
        if type(event) is RawFrame:
            return self._raw(event.data) if self.passthrough else b""
        if self.passthrough:
            return b""
        if isinstance(event, ReasoningDelta):
            return self._reasoning(event)
        if isinstance(event, ToolCallDelta):
            return self._tool(event)
        if isinstance(event, Finished):
            self.state.stop_reason = STOP_REASONS.get(event.reason, "end_turn")
            return self._close()
        return b""  # Started, UsageReport: the ending carries them

    def _raw(self, data: bytes) -> bytes:
        name = event_name(data)
        if name in (b"message_stop", b"error"):
            self.upstream_ended = True
        return b"id: %d\nevent: %s\ndata: %s\n\n" % (self._seq(), name, data)

    def _reasoning(self, event: ReasoningDelta) -> bytes:
        state = self.state
        if event.kind == "encrypted":
            out = self._start({"type": "redacted_thinking", "data": event.data or ""}, "redacted")
            return out + self._close()
        out = b""
        if state.open != "thinking" or state.open_reasoning != event.index:
            out = self._start({"type": "thinking", "thinking": "", "signature": ""}, "thinking")
            state.open_reasoning = event.index
        if event.text and not state.omit_thinking:
            out += _THINKING_DELTA % (self._seq(), state.blocks - 1, orjson.dumps(event.text))
        if event.signature:
            delta = {"type": "signature_delta", "signature": event.signature}
            out += self._frame(
                b"content_block_delta", {"type": "content_block_delta", "index": state.blocks - 1, "delta": delta}
            )
        return out

    def _tool(self, event: ToolCallDelta) -> bytes:
        state = self.state
        call = state.calls.get(event.index)
        if call is None:
            call = state.calls[event.index] = _Call(id=state.call_id(event.index, event.id), name=event.name or "")
            if state.open == "tool":  # another call's block is open: this one waits its turn
                state.waiting.append(event.index)
                if event.arguments:
                    call.pending.append(event.arguments)
                return b""
            out = self._close() + self._open_call(event.index)
            if event.arguments:
                out += _JSON_DELTA % (self._seq(), call.block, orjson.dumps(event.arguments))
            return out
        if not event.arguments:
            return b""
        if state.open == "tool" and state.open_call == event.index:
            return _JSON_DELTA % (self._seq(), call.block, orjson.dumps(event.arguments))
        call.pending.append(event.arguments)  # (held: its block starts once the open one closes)
        return b""

    # endings ------------------------------------------------------------------------------------
    def finish(self, usage: UsageReport | None) -> bytes:
        if self.passthrough:
            return b""  # the upstream's own message_delta and message_stop went out
        out = self._close()
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": self.state.stop_reason or "end_turn", "stop_sequence": None},
            "usage": usage_json(usage),
        }
        return out + self._frame(b"message_delta", delta) + self._frame(b"message_stop", {"type": "message_stop"})

    def fail(self, failure: Failed) -> bytes:
        if self.upstream_ended:
            return b""
        return self._frame(b"error", error_json(failure))


class MessageBuilder:
    """`stream: false`: the same events as one Messages API `message` object."""

    def __init__(self, *, generation_id: str, public_model: str, omit_thinking: bool = False) -> None:
        self.generation_id = generation_id
        self.model = public_model
        self.omit_thinking = omit_thinking
        self.reset()

    def reset(self) -> None:
        self.content: list[dict[str, Any]] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.arguments: dict[int, list[str]] = {}
        self.reasoning: dict[int, dict[str, Any]] = {}
        self.stop_reason = "end_turn"
        self.upstream_id: str | None = None

    def add(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            last = self.content[-1] if self.content else None
            if last is not None and last["type"] == "text":
                last["text"] += event.text
            elif event.text:
                self.content.append({"type": "text", "text": event.text})
        elif isinstance(event, ReasoningDelta):
            self._reasoning(event)
        elif isinstance(event, ToolCallDelta):
            call = self.calls.get(event.index)
            if call is None:
                cid = event.id or f"toolu_{self.generation_id}_{event.index}"
                call = self.calls[event.index] = {"type": "tool_use", "id": cid, "name": event.name or "", "input": {}}
                self.arguments[event.index] = []
                self.content.append(call)
            self.arguments[event.index].append(event.arguments)
        elif isinstance(event, Finished):
            self.stop_reason = STOP_REASONS.get(event.reason, "end_turn")
        elif isinstance(event, Started) and event.upstream_id and event.upstream_id.startswith("msg_"):
            self.upstream_id = event.upstream_id

    def _reasoning(self, event: ReasoningDelta) -> None:
        if event.kind == "encrypted":
            self.content.append({"type": "redacted_thinking", "data": event.data or ""})
            return
        block = self.reasoning.get(event.index)
        if block is None:
            block = self.reasoning[event.index] = {"type": "thinking", "thinking": "", "signature": ""}
            self.content.append(block)
        if not self.omit_thinking:
            block["thinking"] += event.text
        if event.signature:
            block["signature"] = event.signature

    def build(self, usage: UsageReport | None) -> dict[str, Any]:
        for index, call in self.calls.items():
            raw = "".join(self.arguments[index]).strip()
            try:
                call["input"] = orjson.loads(raw) if raw else {}
            except orjson.JSONDecodeError:
                call["input"] = {}  # (a chat upstream's broken arguments: no object to give)
        return {
            "id": self.upstream_id or f"msg_{self.generation_id}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.content,
            "stop_reason": self.stop_reason,
            "stop_sequence": None,
            "usage": usage_json(usage),
        }
