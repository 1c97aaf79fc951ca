"""Responses API renderer (docs/api.md §5): canonical events → named Responses stream events.

`ResponseState` turns canonical events into output items (`reasoning`, `message`, `function_call`)
and the wire payloads that build them; `ResponsesStreamRenderer` numbers and frames those payloads
(`id:`, `event:`, `data:` with `sequence_number`), and `ResponseBuilder` keeps only the final
`response` object for `stream: false`. Ids derive from the generation id: `resp_<id>` for the
response, `rs_<id>_<n>`, `msg_<id>_<n>`, `fc_<id>_<n>` for the item at output index n.

Tools: a translated route's model calls custom and namespaced tools by their flattened function
names (server/responses_tools.py); `tools` maps them back, so a custom tool's call is a
`custom_tool_call` item whose `input` is the call's one string argument (`ctc_<id>_<n>`, its input sent
whole when the call ends), and a namespaced function's call names the function and its `namespace`.

Reasoning: one item per canonical reasoning block (`ReasoningDelta.index`). Readable thinking streams
as `reasoning_text` deltas; an Anthropic signature or encrypted (redacted) thinking becomes the item's
`encrypted_content`, with no text deltas when only encrypted thinking exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from ..events import Event, Failed, Finished, RawFrame, ReasoningDelta, TextDelta, ToolCallDelta, UsageReport
from ..request import ToolRef

UPSTREAM_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
ItemKind = Literal["message", "reasoning", "function_call", "custom_tool_call"]
Payload = dict[str, Any]


def usage_json(usage: UsageReport) -> dict[str, Any]:
    """The Responses `usage` object (all five fields; the SDK requires every one)."""
    return {
        "input_tokens": usage.prompt,
        "input_tokens_details": {"cached_tokens": usage.cached or 0, "cache_write_tokens": usage.cache_write or 0},
        "output_tokens": usage.completion,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning or 0},
        "total_tokens": usage.total,
    }


@dataclass(slots=True)
class _Item:
    kind: ItemKind
    id: str
    output_index: int
    status: str = "in_progress"
    text: list[str] = field(default_factory=list)  # message text, or reasoning text
    text_part_open: bool = False
    has_reasoning_text: bool = False
    summary: list[str] = field(default_factory=list)
    encrypted: str | None = None
    signature: str | None = None
    reasoning_index: int = -1
    call_id: str = ""
    name: str = ""
    namespace: str | None = None
    arguments: list[str] = field(default_factory=list)

    def custom_input(self) -> str:
        """A custom tool call's input: the flattened function's one string argument (else the text)."""
        raw = "".join(self.arguments)
        try:
            args = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
        value = args.get("input") if isinstance(args, dict) else None
        return value if isinstance(value, str) else raw

    def to_json(self) -> dict[str, Any]:
        if self.kind == "message":
            content = [self.text_part()] if self.text_part_open or self.text else []
            return {
                "id": self.id,
                "type": "message",
                "status": self.status,
                "role": "assistant",
                "content": content,
            }
        if self.kind == "function_call":
            call = {
                "id": self.id,
                "type": "function_call",
                "status": self.status,
                "call_id": self.call_id,
                "name": self.name,
                "arguments": "".join(self.arguments),
            }
            return {**call, "namespace": self.namespace} if self.namespace else call
        if self.kind == "custom_tool_call":  # (the API's custom_tool_call item has no status)
            custom = {
                "id": self.id,
                "type": "custom_tool_call",
                "call_id": self.call_id,
                "name": self.name,
                "input": self.custom_input() if self.status != "in_progress" else "",
            }
            return {**custom, "namespace": self.namespace} if self.namespace else custom
        item: dict[str, Any] = {
            "id": self.id,
            "type": "reasoning",
            "status": self.status,
            "summary": [{"type": "summary_text", "text": s} for s in self.summary],
        }
        if self.has_reasoning_text:
            item["content"] = [{"type": "reasoning_text", "text": "".join(self.text)}]
        encrypted = self.encrypted or self.signature
        if encrypted:
            item["encrypted_content"] = encrypted
        return item

    def text_part(self) -> dict[str, Any]:
        return {"type": "output_text", "text": "".join(self.text), "annotations": [], "logprobs": []}


class ResponseState:
    """Output items and their wire payloads (without `sequence_number`) from canonical events."""

    def __init__(self, generation_id: str, tools: dict[str, ToolRef] | None = None, summarize: bool = False) -> None:
        self.generation_id = generation_id
        self.tools = tools or {}
        # `reasoning.summary` asked for: readable thinking streams as the item's summary (what Codex CLI
        # and the SDK show), and the item still carries it as `content` with its signature, to replay
        self.summarize = summarize
        self.items: list[_Item] = []
        self.finish_reason: str | None = None
        self.usage: UsageReport | None = None
        self._current: _Item | None = None  # the open message or reasoning item
        self._calls: dict[int, _Item] = {}  # canonical tool-call index → its item
        self._open_calls: list[_Item] = []

    # item lifecycle ---------------------------------------------------------------------------
    def _open(self, kind: ItemKind, prefix: str) -> _Item:
        n = len(self.items)
        item = _Item(kind=kind, id=f"{prefix}_{self.generation_id}_{n}", output_index=n)
        self.items.append(item)
        return item

    def _added(self, item: _Item) -> Payload:
        return {"type": "response.output_item.added", "output_index": item.output_index, "item": item.to_json()}

    def _close(self, item: _Item, status: str) -> list[Payload]:
        item.status = status
        out: list[Payload] = []
        ref = {"item_id": item.id, "output_index": item.output_index}
        if item.kind == "message" and item.text_part_open:
            text = "".join(item.text)
            out.append({"type": "response.output_text.done", **ref, "content_index": 0, "text": text, "logprobs": []})
            out.append({"type": "response.content_part.done", **ref, "content_index": 0, "part": item.text_part()})
        elif item.kind == "reasoning":
            if item.text_part_open:
                text = "".join(item.text)
                part = {"type": "reasoning_text", "text": text}
                out.append({"type": "response.reasoning_text.done", **ref, "content_index": 0, "text": text})
                out.append({"type": "response.content_part.done", **ref, "content_index": 0, "part": part})
            for i, summary in enumerate(item.summary):
                out.append({"type": "response.reasoning_summary_text.done", **ref, "summary_index": i, "text": summary})
                done_part = {"type": "summary_text", "text": summary}
                out.append(
                    {"type": "response.reasoning_summary_part.done", **ref, "summary_index": i, "part": done_part}
                )
        elif item.kind == "function_call":
            args = "".join(item.arguments)
            out.append({"type": "response.function_call_arguments.done", **ref, "name": item.name, "arguments": args})
        elif item.kind == "custom_tool_call":
            text = item.custom_input()
            out.append({"type": "response.custom_tool_call_input.delta", **ref, "delta": text})
            out.append({"type": "response.custom_tool_call_input.done", **ref, "input": text})
        out.append({"type": "response.output_item.done", "output_index": item.output_index, "item": item.to_json()})
        return out

    def _close_current(self) -> list[Payload]:
        item, self._current = self._current, None
        return self._close(item, "completed") if item is not None else []

    def _close_calls(self) -> list[Payload]:
        out: list[Payload] = []
        for item in self._open_calls:
            out += self._close(item, "completed")
        self._open_calls = []
        return out

    def close_all(self, status: str) -> list[Payload]:
        """Close every open item in output order (at the end of the turn)."""
        open_items = [i for i in (self._current, *self._open_calls) if i is not None]
        self._current = None
        self._open_calls = []
        out: list[Payload] = []
        for item in sorted(open_items, key=lambda i: i.output_index):
            out += self._close(item, status)
        return out

    # canonical events -------------------------------------------------------------------------
    def feed(self, event: Event) -> list[Payload]:
        if isinstance(event, TextDelta):
            return self._text(event)
        if isinstance(event, ReasoningDelta):
            return self._reasoning(event)
        if isinstance(event, ToolCallDelta):
            return self._tool_call(event)
        if isinstance(event, Finished):
            self.finish_reason = event.reason
            incomplete = event.reason in ("length", "content_filter")
            return self.close_all("incomplete" if incomplete else "completed")
        if isinstance(event, UsageReport):
            self.usage = event
        return []

    def _text(self, event: TextDelta) -> list[Payload]:
        if not event.text:
            return []
        out: list[Payload] = []
        item = self._current
        if item is None or item.kind != "message":
            out += self._close_current() + self._close_calls()
            item = self._open("message", "msg")
            self._current = item
            out.append(self._added(item))
        ref = {"item_id": item.id, "output_index": item.output_index, "content_index": 0}
        if not item.text_part_open:
            item.text_part_open = True
            out.append({"type": "response.content_part.added", **ref, "part": item.text_part()})
        item.text.append(event.text)
        out.append({"type": "response.output_text.delta", **ref, "delta": event.text, "logprobs": []})
        return out

    def _reasoning(self, event: ReasoningDelta) -> list[Payload]:
        out: list[Payload] = []
        item = self._current
        if item is None or item.kind != "reasoning" or item.reasoning_index != event.index:
            out += self._close_current() + self._close_calls()
            item = self._open("reasoning", "rs")
            item.reasoning_index = event.index
            if event.kind == "text":
                item.has_reasoning_text = True
            if event.kind == "encrypted":
                item.encrypted = event.data or ""
            self._current = item
            out.append(self._added(item))
        elif event.kind == "encrypted":
            item.encrypted = (item.encrypted or "") + (event.data or "")
        ref = {"item_id": item.id, "output_index": item.output_index}
        if event.kind == "text":
            item.has_reasoning_text = True
            if event.signature is not None:
                item.signature = event.signature
            if event.text and self.summarize:  # shown as its summary; the item keeps it as content
                item.text.append(event.text)
                out += self._summary_delta(item, ref, event.text)
            elif event.text:
                if not item.text_part_open:
                    item.text_part_open = True
                    part = {"type": "reasoning_text", "text": ""}
                    out.append({"type": "response.content_part.added", **ref, "content_index": 0, "part": part})
                item.text.append(event.text)
                out.append({"type": "response.reasoning_text.delta", **ref, "content_index": 0, "delta": event.text})
        elif event.kind == "summary" and event.text:
            out += self._summary_delta(item, ref, event.text)
        return out

    @staticmethod
    def _summary_delta(item: _Item, ref: dict[str, Any], text: str) -> list[Payload]:
        out: list[Payload] = []
        if not item.summary:
            item.summary.append("")
            part = {"type": "summary_text", "text": ""}
            out.append({"type": "response.reasoning_summary_part.added", **ref, "summary_index": 0, "part": part})
        item.summary[-1] += text
        idx = len(item.summary) - 1
        out.append({"type": "response.reasoning_summary_text.delta", **ref, "summary_index": idx, "delta": text})
        return out

    def _tool_call(self, event: ToolCallDelta) -> list[Payload]:
        out: list[Payload] = []
        item = self._calls.get(event.index)
        if item is None:
            out += self._close_current()
            tool = self.tools.get(event.name or "")
            custom = tool is not None and tool.kind == "custom"
            item = self._open("custom_tool_call", "ctc") if custom else self._open("function_call", "fc")
            item.call_id = event.id or f"call_{self.generation_id}_{item.output_index}"
            item.name = tool.name if tool is not None else event.name or ""
            item.namespace = tool.namespace if tool is not None else None
            self._calls[event.index] = item
            self._open_calls.append(item)
            out.append(self._added(item))
        elif event.name and not item.name:
            tool = self.tools.get(event.name)
            item.name, item.namespace = (tool.name, tool.namespace) if tool is not None else (event.name, None)
        if event.arguments:
            item.arguments.append(event.arguments)
            if item.kind == "function_call":  # a custom call's input is sent whole when it ends (_close)
                ref = {"item_id": item.id, "output_index": item.output_index}
                out.append({"type": "response.function_call_arguments.delta", **ref, "delta": event.arguments})
        return out

    # results ----------------------------------------------------------------------------------
    def output(self, open_status: str = "incomplete") -> list[dict[str, Any]]:
        """Every item so far; items still open are reported with `open_status`."""
        out = []
        for item in self.items:
            data = item.to_json()
            if item.status == "in_progress" and "status" in data:
                data["status"] = open_status
            out.append(data)
        return out

    @property
    def output_text(self) -> str:
        return "".join("".join(i.text) for i in self.items if i.kind == "message")


class _ResponseShell:
    """The `response` object around the output: ids, the request echo, status, usage."""

    def __init__(
        self,
        *,
        generation_id: str,
        public_model: str,
        created: int,
        echo: dict[str, Any],
        tools: dict[str, ToolRef] | None = None,
        summarize: bool = False,
    ) -> None:
        self.state = ResponseState(generation_id, tools, summarize)
        self.response_id = f"resp_{generation_id}"
        self.model = public_model
        self.created = created
        self.echo = echo

    def response(
        self,
        status: str,
        *,
        output: list[dict[str, Any]] | None = None,
        usage: UsageReport | None = None,
        error: dict[str, Any] | None = None,
        incomplete_reason: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output if output is not None else [],
            "error": error,
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
            "usage": usage_json(usage) if usage is not None else None,
        }
        body.update(self.echo)
        return body

    def final(self, usage: UsageReport | None) -> tuple[str, dict[str, Any]]:
        """(terminal event type, response) once the turn ended normally."""
        state = self.state
        state.close_all("completed")
        reason = state.finish_reason
        if reason in ("length", "content_filter"):
            why = "max_output_tokens" if reason == "length" else "content_filter"
            return "response.incomplete", self.response(
                "incomplete", output=state.output(), usage=usage, incomplete_reason=why
            )
        return "response.completed", self.response("completed", output=state.output(), usage=usage)

    def failed(self, failure: Failed, usage: UsageReport | None) -> dict[str, Any]:
        error = {"code": failure.code, "message": failure.message}
        return self.response("failed", output=self.state.output("incomplete"), usage=usage, error=error)


class ResponsesStreamRenderer(_ResponseShell):
    """One stream's frames: `id: <n>`, `event: <type>`, `data: {... "sequence_number": n}`."""

    def __init__(
        self,
        *,
        generation_id: str,
        public_model: str,
        created: int,
        echo: dict[str, Any],
        first_event_id: int = 0,
        tools: dict[str, ToolRef] | None = None,
        summarize: bool = False,
    ) -> None:
        super().__init__(
            generation_id=generation_id,
            public_model=public_model,
            created=created,
            echo=echo,
            tools=tools,
            summarize=summarize,
        )
        self.next_id = first_event_id
        # a Responses API route serves (`RawFrame`s): its events go out untouched, and the canonical
        # events only keep the state a failure ending needs; `upstream_ended`: its terminal event
        # came, held back (`held`) to be the stream's ending once the record is durable (and the ids
        # it hands out bound to the key); `upstream_final`: the `response` of a completed one
        self.passthrough = False
        self.upstream_ended = False
        self.held = b""
        self.upstream_final: dict[str, Any] | None = None

    def _frames(self, payloads: list[Payload]) -> bytes:
        out: list[bytes] = []
        for payload in payloads:
            seq = self.next_id
            self.next_id += 1
            payload["sequence_number"] = seq
            etype = payload["type"]
            out.append(b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, etype.encode(), orjson.dumps(payload)))
        return b"".join(out)

    def begin(self) -> bytes:
        """`response.created` and `response.in_progress`, written when the response commits."""
        shell = self.response("in_progress")
        return self._frames(
            [
                {"type": "response.created", "response": shell},
                {"type": "response.in_progress", "response": shell},
            ]
        )

    def render(self, event: Event) -> bytes:
        if type(event) is RawFrame:  # (a chat upstream's chunks are RawFrames too: not this door's)
            return self._raw(event.data) if self.passthrough else b""
        payloads = self.state.feed(event)
        if self.passthrough:
            return b""
        return self._frames(payloads) if payloads else b""

    def _raw(self, data: bytes) -> bytes:
        """An upstream event's data, untouched, under its own name (`id:` is the frame log's index);
        its terminal event is held back for `finish` / `fail`."""
        try:
            payload = orjson.loads(data)
            etype = str(payload.get("type"))
        except (orjson.JSONDecodeError, AttributeError):
            payload, etype = None, "message"
        seq = self.next_id
        self.next_id += 1
        frame = b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, etype.encode(), data)
        if etype in UPSTREAM_TERMINAL:
            self.upstream_ended = True
            if etype != "response.failed" and isinstance(payload.get("response"), dict):
                self.upstream_final = payload["response"]
            self.held = frame
            return b""
        return frame

    def finish(self, usage: UsageReport | None) -> bytes:
        """Items still open are closed, then exactly one `response.completed` / `.incomplete`."""
        if self.passthrough:
            return self.held  # the upstream's own terminal event
        payloads = self.state.close_all("completed")
        etype, response = self.final(usage)
        return self._frames([*payloads, {"type": etype, "response": response}])

    def fail(self, failure: Failed, usage: UsageReport | None = None) -> bytes:
        """The one `response.failed`: status failed, the §4 error, and the output so far; or a
        Responses API route's own `response.failed`, held back until now."""
        if self.upstream_ended and self.upstream_final is None:
            return self.held  # the upstream's own `response.failed`
        return self._frames([{"type": "response.failed", "response": self.failed(failure, usage)}])


class ResponseBuilder(_ResponseShell):
    """`stream: false`: the same state machine, keeping only the final `response` object (a Responses
    API route's own, from its terminal event, when one served)."""

    upstream: dict[str, Any] | None = None

    def reset(self) -> None:
        self.state = ResponseState(self.state.generation_id, self.state.tools, self.state.summarize)
        self.upstream = None

    def add(self, event: Event) -> None:
        if type(event) is RawFrame:
            payload = orjson.loads(event.data)
            if payload.get("type") in UPSTREAM_TERMINAL:
                self.upstream = payload.get("response")
            return
        self.state.feed(event)

    def build(self, usage: UsageReport | None) -> dict[str, Any]:
        return self.upstream if self.upstream is not None else self.final(usage)[1]
