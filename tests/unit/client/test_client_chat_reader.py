"""The chat stream reader, fed real SSE bytes split at every offset: the seeds' nine-point checklist."""

from __future__ import annotations

import pytest

from tests.unit.client.client_kit import chat_frames, chunk, run, splits, usage_chunk
from tidegate.client import (
    Done,
    IncompleteStream,
    KeepAlive,
    ReasoningDelta,
    StreamFailed,
    StreamProtocolError,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from tidegate.client.types import StreamEvent


def texts(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


HAPPY = chat_frames(
    [
        chunk({"role": "assistant", "content": "Hal"}),
        chunk({"content": "lo "}),
        chunk({"content": "wörld ✓"}),
        chunk({}, "stop"),
        usage_chunk(),
        "[DONE]",
    ],
    comments_at=(0, 2, 5),
)


@pytest.mark.parametrize("parts", list(splits(HAPPY)), ids=lambda p: str(len(p[0])))
def test_happy_stream_every_split(parts: list[bytes]) -> None:
    events, exc, s = run("chat", parts)
    assert exc is None
    assert texts(events) == "Hallo wörld ✓"
    assert sum(isinstance(e, KeepAlive) for e in events) == 3
    usage = [e for e in events if isinstance(e, Usage)]
    assert usage == [Usage(3, 5, 8, 2, None)]
    done = events[-1]
    assert isinstance(done, Done)
    assert done.text == "Hallo wörld ✓" and done.finish_reason == "stop" and done.usage == usage[0]
    assert done.generation_id == "01J0000000000000000000GEN1"
    assert done.provider == "prov-a" and done.served_model == "served-1" and done.idempotency_key == "key-1"
    assert s.last_event_id == "5"


def test_bytes_after_done_are_ignored() -> None:
    events, exc, _ = run("chat", [HAPPY + b'id: 9\ndata: {"oops\n\n'])
    assert exc is None and isinstance(events[-1], Done)


ERROR_MID = chat_frames(
    [
        chunk({"role": "assistant", "content": "partial "}),
        chunk({"content": "answer"}),
        chunk(
            {"content": ""},
            "error",
            provider="bedrock",
            error={"code": "upstream_timeout", "message": "the provider went quiet"},
        ),
    ]
)


@pytest.mark.parametrize("parts", list(splits(ERROR_MID)), ids=lambda p: str(len(p[0])))
def test_error_chunk_raises_with_partial_text(parts: list[bytes]) -> None:
    events, exc, _ = run("chat", parts, recover=True)
    assert isinstance(exc, StreamFailed)
    assert exc.code == "upstream_timeout" and exc.message == "the provider went quiet"
    assert exc.provider == "bedrock"
    assert exc.partial_text == "partial answer" == texts(events)
    assert exc.generation_id == "01J0000000000000000000GEN1"
    assert not any(isinstance(e, Done) for e in events)


def test_finish_reason_error_without_error_object_raises() -> None:
    data = chat_frames([chunk({"content": "a"}), chunk({}, "error")])
    for parts in splits(data):
        _events, exc, _ = run("chat", parts, recover=True)
        assert isinstance(exc, StreamFailed) and exc.code == "upstream_error" and exc.partial_text == "a"


TRUNCATED = chat_frames([chunk({"role": "assistant", "content": "short"}), chunk({}, "stop"), usage_chunk()])


@pytest.mark.parametrize("cut", range(len(TRUNCATED) + 1))
def test_eof_without_done_is_incomplete_never_final(cut: int) -> None:
    # Every prefix of a stream that lacks [DONE] ends in IncompleteStream, even after finish_reason stop.
    events, exc, _ = run("chat", [TRUNCATED[:cut]])
    assert isinstance(exc, IncompleteStream) and not isinstance(exc, StreamFailed)
    assert "incomplete" in str(exc) and "01J0000000000000000000GEN1" in str(exc)
    assert exc.partial_text == texts(events)
    assert exc.idempotency_key == "key-1"
    assert not any(isinstance(e, Done) for e in events)


def test_eof_with_recovery_schedules_a_resume_from_the_last_id() -> None:
    _events, exc, s = run("chat", [TRUNCATED], recover=True)
    assert exc is None and not s.finished
    req = s.request()
    assert s.phase == "resume"
    assert req.headers["Last-Event-ID"] == "2"
    assert req.headers["Idempotency-Key"] == "key-1"
    assert req.headers["Accept"] == "text/event-stream"
    assert req.path == "/v1/chat/completions"


REASONING = chat_frames(
    [
        chunk(
            {
                "role": "assistant",
                "reasoning": "Comparing the ",
                "reasoning_details": [{"type": "reasoning.text", "text": "Comparing the ", "index": 0}],
            }
        ),
        chunk({"reasoning_content": "tenths…"}),
        chunk({"content": "9.9 is larger."}),
        chunk({}, "stop"),
        "[DONE]",
    ]
)


@pytest.mark.parametrize("parts", list(splits(REASONING))[::7], ids=lambda p: str(len(p[0])))
def test_reasoning_is_apart_from_the_answer(parts: list[bytes]) -> None:
    events, exc, _ = run("chat", parts)
    assert exc is None
    reasoning = [e for e in events if isinstance(e, ReasoningDelta)]
    assert "".join(r.text for r in reasoning) == "Comparing the tenths…"
    assert reasoning[0].details == ({"type": "reasoning.text", "text": "Comparing the ", "index": 0},)
    assert texts(events) == "9.9 is larger."
    done = events[-1]
    assert isinstance(done, Done) and done.text == "9.9 is larger." and done.reasoning == "Comparing the tenths…"


def _tc(index: int, *, id: str | None = None, name: str | None = None, args: str = "") -> dict[str, object]:
    call: dict[str, object] = {"index": index, "function": {"arguments": args}}
    if id:
        call["id"] = id
        call["type"] = "function"
        call["function"] = {"name": name, "arguments": args}
    return call


PARALLEL_TOOLS = [
    chunk({"role": "assistant", "tool_calls": [_tc(0, id="call_a", name="get_weather")]}),
    chunk({"tool_calls": [_tc(1, id="call_b", name="get_time")]}),
    chunk({"tool_calls": [_tc(1, args='{"tz":')]}),
    chunk({"tool_calls": [_tc(0, args='{"ci')]}),
    chunk({"tool_calls": [_tc(0, args='ty":"Berlin"}')]}),
    chunk({"tool_calls": [_tc(1, args='"CET"}')]}),
]
TOOLS_OK = chat_frames([*PARALLEL_TOOLS, chunk({}, "tool_calls"), usage_chunk(), "[DONE]"])


@pytest.mark.parametrize("parts", list(splits(TOOLS_OK))[::11], ids=lambda p: str(len(p[0])))
def test_parallel_tool_calls_accumulate_by_index(parts: list[bytes]) -> None:
    events, exc, _ = run("chat", parts)
    assert exc is None
    kinds = [type(e).__name__ for e in events]
    # fragments stream as they come; whole calls only after finish_reason tool_calls
    assert kinds.index("ToolCall") > max(i for i, k in enumerate(kinds) if k == "ToolCallDelta")
    assert sum(isinstance(e, ToolCallDelta) for e in events) == 6
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.index, c.id, c.name, c.parsed) for c in calls] == [
        (0, "call_a", "get_weather", {"city": "Berlin"}),
        (1, "call_b", "get_time", {"tz": "CET"}),
    ]
    done = events[-1]
    assert isinstance(done, Done) and done.finish_reason == "tool_calls" and done.tool_calls == tuple(calls)


def test_tool_calls_without_tool_calls_finish_are_never_offered() -> None:
    data = chat_frames([*PARALLEL_TOOLS[:4], chunk({}, "length"), "[DONE]"])
    events, exc, _ = run("chat", [data])
    assert exc is None
    assert not any(isinstance(e, ToolCall) for e in events)
    done = events[-1]
    assert isinstance(done, Done) and done.finish_reason == "length" and done.tool_calls == ()


def test_tool_calls_cut_before_finish_are_incomplete() -> None:
    data = chat_frames([*PARALLEL_TOOLS, chunk({}, "tool_calls")])
    events, exc, _ = run("chat", [data])
    assert isinstance(exc, IncompleteStream)
    assert not any(isinstance(e, Done) for e in events)


def test_invalid_json_is_a_protocol_error() -> None:
    _events, exc, _ = run("chat", [chat_frames([chunk({"content": "a"}), '{"choices": [', "[DONE]"])])
    assert isinstance(exc, StreamProtocolError) and exc.partial_text == "a"


def test_oversize_line_is_a_protocol_error() -> None:
    _events, exc, _ = run("chat", [b"data: " + b"x" * (5 * 1024 * 1024)])
    assert isinstance(exc, StreamProtocolError)


def test_oversize_line_after_whole_chunks_in_one_read_delivers_them_first() -> None:
    over = b"data: " + b"x" * (5 * 1024 * 1024)
    events, exc, _ = run("chat", [chat_frames([chunk({"content": "a"}), chunk({"content": "b"})]) + over])
    assert isinstance(exc, StreamProtocolError) and exc.partial_text == "ab"
    assert texts(events) == "ab"
    events, exc, _ = run("chat", [chat_frames([chunk({"content": "a"}), chunk({}, "stop"), "[DONE]"]) + over])
    assert exc is None and isinstance(events[-1], Done)  # the answer ended before the over-cap line


def test_usage_only_from_usage_chunk_and_include_usage_false() -> None:
    data = chat_frames([chunk({"content": "a"}), chunk({}, "stop"), "[DONE]"])
    events, exc, _ = run("chat", [data])
    assert exc is None and not any(isinstance(e, Usage) for e in events)
    assert isinstance(events[-1], Done) and events[-1].usage is None
