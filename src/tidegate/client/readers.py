"""Pure stream readers, one per door: decoded SSE events in, typed client events out. No I/O.

A reader keeps everything the caller has been shown (text, reasoning, tool-call fragments) so a
recovered stream can be completed without a duplicated or missing delta (`complete_with`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from ..sse import SSEEvent
from .errors import IncompleteStream, StreamFailed, StreamProtocolError
from .results import (
    StreamMeta,
    done_from_native,
    finish_from_response,
    parse_tool_call,
    text_from_items,
    usage_from,
)
from .types import (
    Done,
    ReasoningDelta,
    Started,
    Status,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)


class ToolCallAccumulator:
    """Fragments keyed by `index` (never by arrival order); parsed only when the turn ends."""

    def __init__(self) -> None:
        self._calls: dict[int, list[Any]] = {}  # index -> [id, name, [argument fragments]]

    def add(self, delta: ToolCallDelta) -> None:
        call = self._calls.setdefault(delta.index, [None, None, []])
        if delta.id:
            call[0] = delta.id
        if delta.name:
            call[1] = delta.name
        if delta.arguments:
            call[2].append(delta.arguments)

    def set_arguments(self, index: int, arguments: str) -> None:
        self._calls.setdefault(index, [None, None, []])[2] = [arguments]

    def arguments(self, index: int) -> str:
        call = self._calls.get(index)
        return "".join(call[2]) if call else ""

    def known(self, index: int) -> tuple[str | None, str | None]:
        call = self._calls.get(index)
        return (call[0], call[1]) if call else (None, None)

    def __bool__(self) -> bool:
        return bool(self._calls)

    def finalize(self) -> tuple[ToolCall, ...]:
        return tuple(parse_tool_call(i, c[0] or "", c[1] or "", "".join(c[2])) for i, c in sorted(self._calls.items()))


def _loads(data: str, reader: BaseReader) -> dict[str, Any]:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise reader.protocol_error("an event is not valid JSON") from None
    if not isinstance(obj, dict):
        raise reader.protocol_error("an event is not a JSON object")
    return obj


class BaseReader:
    door = ""

    def __init__(self, meta: StreamMeta) -> None:
        self.meta = meta
        self.text_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.tools = ToolCallAccumulator()
        self.tool_calls: tuple[ToolCall, ...] = ()
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.done: Done | None = None

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_parts)

    def feed(self, ev: SSEEvent) -> list[StreamEvent]:
        raise NotImplementedError

    # -- helpers shared by the doors
    def _text(self, text: str, out: list[StreamEvent]) -> None:
        if text:
            self.text_parts.append(text)
            out.append(TextDelta(text))

    def _reasoning(self, text: str, out: list[StreamEvent], details: tuple[dict[str, Any], ...] = ()) -> None:
        if text or details:
            self.reasoning_parts.append(text)
            out.append(ReasoningDelta(text, details))

    def _tool(self, delta: ToolCallDelta, out: list[StreamEvent]) -> None:
        self.tools.add(delta)
        out.append(delta)

    def _usage(self, obj: Any, out: list[StreamEvent]) -> None:
        usage = usage_from(obj)
        if usage is not None:
            self.usage = usage
            out.append(usage)

    def _finish_tools(self, out: list[StreamEvent]) -> None:
        if self.tools and not self.tool_calls:
            self.tool_calls = self.tools.finalize()
            out.extend(self.tool_calls)

    def _done(self, out: list[StreamEvent], *, text: str | None = None, result: dict[str, Any] | None = None) -> None:
        m = self.meta
        self.done = Done(
            text=self.text if text is None else text,
            finish_reason=self.finish_reason,
            generation_id=m.generation_id,
            reasoning=self.reasoning,
            tool_calls=self.tool_calls,
            usage=self.usage,
            provider=m.provider,
            served_model=m.served_model,
            model=m.model,
            idempotency_key=m.idempotency_key,
            buffered_reason=m.buffered_reason,
            recovered=m.recovered,
            result=result,
        )
        out.append(self.done)

    def failed(self, code: str, message: str, provider: str | None = None, partial: str | None = None) -> StreamFailed:
        return StreamFailed(
            code or "upstream_error",
            message or "the generation failed mid-stream; the answer is incomplete",
            provider=provider or self.meta.provider,
            partial_text=self.text if partial is None else partial,
            generation_id=self.meta.generation_id,
            idempotency_key=self.meta.idempotency_key,
        )

    def incomplete(self, reason: str) -> IncompleteStream:
        return IncompleteStream(
            reason,
            partial_text=self.text,
            generation_id=self.meta.generation_id,
            idempotency_key=self.meta.idempotency_key,
        )

    def protocol_error(self, reason: str) -> StreamProtocolError:
        return StreamProtocolError(
            reason,
            partial_text=self.text,
            generation_id=self.meta.generation_id,
            idempotency_key=self.meta.idempotency_key,
            code="protocol_error",
        )

    def complete_with(self, final: Done) -> list[StreamEvent]:
        """Finish a dropped stream from a stored result: emit only what the caller has not seen yet."""
        out: list[StreamEvent] = []
        seen_reasoning = self.reasoning
        if final.reasoning.startswith(seen_reasoning):
            self._reasoning(final.reasoning[len(seen_reasoning) :], out)
        elif final.reasoning:
            raise self.incomplete("the stored reasoning does not continue what was streamed")
        seen = self.text
        if not final.text.startswith(seen):
            raise self.incomplete("the stored result does not continue what was streamed")
        self._text(final.text[len(seen) :], out)
        for call in final.tool_calls:
            known_id, known_name = self.tools.known(call.index)
            have = self.tools.arguments(call.index)
            if not call.arguments.startswith(have):
                raise self.incomplete("the stored tool call does not continue what was streamed")
            rest = call.arguments[len(have) :]
            if rest or known_id is None:
                self._tool(
                    ToolCallDelta(
                        call.index,
                        rest,
                        call.id if known_id is None else None,
                        call.name if known_name is None else None,
                    ),
                    out,
                )
        self.tool_calls = final.tool_calls
        out.extend(final.tool_calls)
        if final.usage is not None and final.usage != self.usage:
            self.usage = final.usage
            out.append(final.usage)
        self.finish_reason = final.finish_reason
        self.done = replace(final, idempotency_key=self.meta.idempotency_key, recovered=self.meta.recovered)
        out.append(self.done)
        return out


class ChatReader(BaseReader):
    """`/v1/chat/completions` chunks; complete only on `data: [DONE]`."""

    door = "chat"

    def feed(self, ev: SSEEvent) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if ev.data == "[DONE]":
            if self.finish_reason == "tool_calls":
                self._finish_tools(out)
            self._done(out)
            return out
        chunk = _loads(ev.data, self)
        err = chunk.get("error")
        if err is not None:
            err = err if isinstance(err, dict) else {"message": str(err)}
            raise self.failed(str(err.get("code") or ""), str(err.get("message") or ""), chunk.get("provider"))
        if chunk.get("usage"):
            self._usage(chunk["usage"], out)
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning")
            if not isinstance(reasoning, str):
                reasoning = delta.get("reasoning_content")
            details = tuple(d for d in delta.get("reasoning_details") or () if isinstance(d, dict))
            if not isinstance(reasoning, str):
                reasoning = "".join(str(d.get("text") or d.get("summary") or "") for d in details)
            self._reasoning(reasoning, out, details)
            content = delta.get("content")
            if isinstance(content, str):
                self._text(content, out)
            for tc in delta.get("tool_calls") or ():
                fn = tc.get("function") or {}
                self._tool(
                    ToolCallDelta(
                        int(tc.get("index", 0)),
                        str(fn.get("arguments") or ""),
                        tc.get("id"),
                        fn.get("name"),
                    ),
                    out,
                )
            finish = choice.get("finish_reason")
            if finish == "error":
                raise self.failed("upstream_error", "", chunk.get("provider"))
            if finish:
                self.finish_reason = str(finish)
                if finish == "tool_calls":
                    self._finish_tools(out)
        return out


class ResponsesReader(BaseReader):
    """`/v1/responses` named events; complete on `response.completed` / `response.incomplete`."""

    door = "responses"

    def __init__(self, meta: StreamMeta) -> None:
        super().__init__(meta)
        self._tool_index: dict[int, int] = {}  # output_index -> tool call index

    def _index(self, data: dict[str, Any]) -> int:
        out_index = int(data.get("output_index", 0))
        return self._tool_index.setdefault(out_index, len(self._tool_index))

    def feed(self, ev: SSEEvent) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        data = _loads(ev.data, self)
        kind = str(data.get("type") or ev.event)
        if kind == "response.output_text.delta":
            self._text(str(data.get("delta") or ""), out)
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self._reasoning(str(data.get("delta") or ""), out)
        elif kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call":
                self._tool(
                    ToolCallDelta(
                        self._index(data), str(item.get("arguments") or ""), item.get("call_id"), item.get("name")
                    ),
                    out,
                )
        elif kind == "response.function_call_arguments.delta":
            self._tool(ToolCallDelta(self._index(data), str(data.get("delta") or "")), out)
        elif kind == "response.function_call_arguments.done":
            if isinstance(data.get("arguments"), str):
                self.tools.set_arguments(self._index(data), data["arguments"])
        elif kind in ("response.completed", "response.incomplete"):
            response = data.get("response") or {}
            self._usage(response.get("usage"), out)
            self.finish_reason = finish_from_response(response, 1 if self.tools else 0)
            if self.finish_reason == "tool_calls":
                self._finish_tools(out)
            final_text = text_from_items(response.get("output")) if response.get("output") else None
            self._done(out, text=final_text or None, result=response)
        elif kind == "response.failed":
            response = data.get("response") or {}
            err = response.get("error") or {}
            raise self.failed(str(err.get("code") or ""), str(err.get("message") or ""))
        elif kind == "error":
            nested = data.get("error")
            err = nested if isinstance(nested, dict) else data
            raise self.failed(str(err.get("code") or ""), str(err.get("message") or ""))
        return out


class NativeReader(BaseReader):
    """`/api/v1/llm/responses` events; `done` is the only completion signal."""

    door = "native"

    def feed(self, ev: SSEEvent) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        data = _loads(ev.data, self)
        kind = ev.event
        if kind == "delta":
            dtype = data.get("type")
            if dtype == "text":
                self._text(str(data.get("text") or ""), out)
            elif dtype == "reasoning":
                self._reasoning(str(data.get("text") or ""), out)
            elif dtype == "tool_call":
                tc = data.get("tool_call") or {}
                self._tool(
                    ToolCallDelta(
                        int(tc.get("index", 0)), str(tc.get("arguments") or ""), tc.get("id"), tc.get("name")
                    ),
                    out,
                )
        elif kind == "start":
            if data.get("id") and not self.meta.generation_id:
                self.meta.generation_id = str(data["id"])
            out.append(Started(str(data.get("id") or ""), str(data.get("model") or "")))
        elif kind == "status":
            out.append(Status(str(data.get("status") or ""), data.get("provider"), data.get("detail")))
        elif kind == "done":
            out.extend(self.complete_with(done_from_native(data, self.meta)))
        elif kind == "error":
            err = data.get("error") or {}
            partial = data.get("partial_output")
            raise self.failed(
                str(err.get("code") or ""),
                str(err.get("message") or ""),
                partial=partial if isinstance(partial, str) else None,
            )
        return out


READERS: dict[str, type[BaseReader]] = {"chat": ChatReader, "responses": ResponsesReader, "native": NativeReader}
