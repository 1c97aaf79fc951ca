"""Anthropic Messages SSE → canonical events, on recorded streams split at every byte offset.

The expected events and the split helpers here are reused by the Bedrock decoder tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import orjson
import pytest

from tests.emulators.anthropic_upstream import REDACTED_DATA, SIGNATURE, sse_frame
from tidegate.config.model import ProviderConfig
from tidegate.events import Event, Failed, Finished, ReasoningDelta, Started, TextDelta, ToolCallDelta, UsageReport
from tidegate.providers.anthropic.messages import AnthropicAdapter, AnthropicSSEDecoder, MessagesEventDecoder
from tidegate.providers.http.transport import sanitize

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
P = "prov"
MODEL = "claude-fixture"


class Decoder(Protocol):
    def feed(self, chunk: bytes) -> list[Event]: ...
    def end(self) -> list[Event]: ...


def run(factory: Callable[[], Decoder], pieces: list[bytes]) -> list[Event]:
    """Feed pieces then EOF, stopping after the first failure like the transport does."""
    dec = factory()
    out: list[Event] = []
    for piece in pieces:
        out.extend(dec.feed(piece))
        if any(isinstance(e, Failed) for e in out):
            return out
    out.extend(dec.end())
    return out


def check_every_split(factory: Callable[[], Decoder], data: bytes, expected: list[Event]) -> None:
    assert run(factory, [data]) == expected
    assert run(factory, [data[i : i + 1] for i in range(len(data))]) == expected
    for cut in range(1, len(data)):
        assert run(factory, [data[:cut], data[cut:]]) == expected, f"split at byte {cut}"


TEXT = [
    Started(P, MODEL, "msg_emu_text"),
    TextDelta("Hello"),
    TextDelta(" from"),
    TextDelta(" the emulator."),
    UsageReport(prompt=57, completion=12, cached=10, cache_write=5),
    Finished("stop"),
]
THINKING = [
    Started(P, MODEL, "msg_emu_think"),
    ReasoningDelta("Let me think", index=0),
    ReasoningDelta(" about 2+2.", index=0),
    ReasoningDelta("", signature=SIGNATURE, index=0),
    TextDelta("The answer"),
    TextDelta(" is 4."),
    UsageReport(prompt=30, completion=40, cached=0),  # output_tokens replaced (1 → 40), never added
    Finished("stop"),
]
REDACTED = [
    Started(P, MODEL, "msg_emu_redacted"),
    ReasoningDelta("", kind="encrypted", data=REDACTED_DATA, index=0),
    TextDelta("Done."),
    UsageReport(prompt=20, completion=9, cached=0),
    Finished("stop"),
]
TOOLS = [
    Started(P, MODEL, "msg_emu_tools"),
    TextDelta("Let me check."),
    ToolCallDelta(0, "", id="toolu_emu_A", name="lookup"),  # content block 1 → call index 0
    ToolCallDelta(0, '{"q": "pa'),
    ToolCallDelta(0, 'ris"}'),
    ToolCallDelta(1, "", id="toolu_emu_B", name="weather"),  # content block 2 → call index 1
    ToolCallDelta(1, '{"city": "Paris", "days": 2}'),
    UsageReport(prompt=50, completion=27, cached=0),
    Finished("tool_calls"),
]
NO_STOP = Failed("upstream_error", "the upstream stream ended without message_stop", P)


def partial(name: str) -> list[Event]:
    return [Started(P, MODEL, f"msg_emu_{name}"), TextDelta("Partial"), TextDelta(" answer")]


CASES: dict[str, list[Event]] = {
    "text": TEXT,
    "crlf": TEXT,
    "thinking": THINKING,
    "redacted": REDACTED,
    "tools": TOOLS,
    "error": [*partial("error"), Failed("upstream_error", "overloaded_error: Overloaded", P, True)],
    "truncated": [*partial("truncated"), NO_STOP],
    "cut": [*TEXT[:4], NO_STOP],
    "maxtokens": [
        Started(P, MODEL, "msg_emu_len"),
        TextDelta("Cut"),
        UsageReport(prompt=8, completion=3, cached=0),
        Finished("length"),
    ],
    "refusal": [
        Started(P, MODEL, "msg_fx_refusal"),
        UsageReport(prompt=3, completion=1, cached=0),
        Finished("content_filter"),
    ],
    "unknown": [
        Started(P, MODEL, "msg_fx_unknown"),
        TextDelta("Cited"),
        ToolCallDelta(0, "", id="toolu_fx", name="calc"),  # after a skipped server_tool_use block
        ToolCallDelta(0, '{"a": 1}'),
        UsageReport(prompt=7, completion=5, cached=0),
        Finished("tool_calls"),
    ],
}


def factory() -> AnthropicSSEDecoder:
    return AnthropicSSEDecoder(P, "route-model")


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_every_split(name: str) -> None:
    data = (FIXTURES / "anthropic" / f"{name}.sse").read_bytes()
    check_every_split(factory, data, CASES[name])


def test_every_fixture_has_a_case() -> None:
    assert {p.stem for p in (FIXTURES / "anthropic").glob("*.sse")} == set(CASES)


def test_finished_only_at_message_stop_and_nothing_after() -> None:
    dec = factory()
    data = (FIXTURES / "anthropic" / "text.sse").read_bytes()
    before_stop = data[: data.index(b"event: message_stop")]
    events = dec.feed(before_stop)
    assert not any(isinstance(e, (Finished, UsageReport)) for e in events)
    tail = dec.feed(data[len(before_stop) :])
    assert tail == [UsageReport(prompt=57, completion=12, cached=10, cache_write=5), Finished("stop")]
    assert dec.feed(sse_frame("content_block_delta", {"type": "content_block_delta", "index": 0})) == []
    assert dec.end() == []


def test_invalid_json_is_a_protocol_error() -> None:
    with pytest.raises(ValueError):
        factory().feed(b"event: message_start\ndata: {not json\n\n")


@pytest.mark.parametrize(
    "bad",
    [
        b"event: content_block_delta\ndata: {not json\n\n",
        b"event: content_block_delta\ndata: " + b"A" * (4 * 1024 * 1024 + 16),  # an over-cap line
    ],
)
def test_a_bad_event_after_whole_ones_in_one_read_keeps_them(bad: bytes) -> None:
    data = (FIXTURES / "anthropic" / "text.sse").read_bytes()
    before = data[: data.index(b"event: content_block_stop")]
    got = factory().feed(before + bad)
    assert got[:-1] == TEXT[:-2]
    assert isinstance(got[-1], Failed) and got[-1].code == "upstream_protocol_error" and got[-1].provider == P


def test_usage_overrides_from_message_delta() -> None:
    dec = MessagesEventDecoder(P, MODEL)
    dec.handle("message_start", {"message": {"id": "m", "usage": {"input_tokens": 100, "output_tokens": 1}}})
    dec.handle("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}})
    dec.handle(
        "message_delta",
        {"delta": {}, "usage": {"output_tokens": 9, "input_tokens": 90, "cache_read_input_tokens": 7}},
    )
    assert dec.handle("message_stop", {"type": "message_stop"}) == [
        UsageReport(prompt=97, completion=9, cached=7),
        Finished("stop"),
    ]


def test_message_start_model_and_fallback_to_route_model() -> None:
    dec = MessagesEventDecoder(P, "route-model")
    assert dec.handle("message_start", {"message": {"id": "m1"}}) == [Started(P, "route-model", "m1")]


@pytest.mark.parametrize(
    ("etype", "retriable"),
    [("overloaded_error", True), ("api_error", True), ("invalid_request_error", False), ("billing_error", False)],
)
def test_error_event_retriability(etype: str, retriable: bool) -> None:
    dec = MessagesEventDecoder(P, MODEL)
    out = dec.handle("error", {"type": "error", "error": {"type": etype, "message": "boom"}})
    assert out == [Failed("upstream_error", f"{etype}: boom", P, retriable)]
    assert dec.end() == []


def test_error_message_is_sanitised() -> None:
    nasty = "line1\nline2\x1b[31m" + "x" * 1000
    dec = MessagesEventDecoder(P, MODEL)
    [failed] = dec.handle("error", {"type": "error", "error": {"type": "api_error", "message": nasty}})
    assert isinstance(failed, Failed)
    assert "\n" not in failed.message and "\x1b" not in failed.message
    assert len(failed.message) < 400
    assert sanitize(None) == ""


def test_map_error_anthropic_bodies() -> None:
    adapter = AnthropicAdapter(ProviderConfig(name="a", kind="anthropic", api_key_env="X"))

    def body(etype: str, msg: str) -> bytes:
        return orjson.dumps({"type": "error", "error": {"type": etype, "message": msg}, "request_id": "req_1"})

    f = adapter.map_error(429, {"retry-after": "7"}, body("rate_limit_error", "slow down"))
    assert (f.status, f.retriable, f.retry_after) == (429, True, 7.0)
    assert "rate_limit_error: slow down" in f.message and "req_1" not in f.message
    f = adapter.map_error(529, {}, body("overloaded_error", "Overloaded"))
    assert f.retriable and f.status == 529
    for status in (401, 403, 500, 503):
        assert adapter.map_error(status, {}, body("api_error", "x")).retriable
    f = adapter.map_error(400, {}, body("invalid_request_error", "max_tokens: Field required"))
    assert (f.retriable, f.code, f.status) == (False, "invalid_request", 400)
    assert "max_tokens: Field required" in f.message
    f = adapter.map_error(502, {}, b"<html>bad gateway</html>")
    assert f.retriable and f.message == "a answered HTTP 502"


async def test_build_request_headers_and_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from tidegate.request import GenerationRequest

    monkeypatch.setenv("EMU_KEY", "sk-ant-secret")
    adapter = AnthropicAdapter(
        ProviderConfig(name="a", kind="anthropic", api_key_env="EMU_KEY", base_url="http://127.0.0.1:9")
    )
    req = await adapter.build_request(GenerationRequest(model="pub", messages=[{"role": "user", "content": "hi"}]), "m")
    assert req.url == "http://127.0.0.1:9/v1/messages"
    assert req.headers["x-api-key"] == "sk-ant-secret" and req.headers["anthropic-version"] == "2023-06-01"
    body = orjson.loads(req.body)
    assert body["model"] == "m" and body["stream"] is True and body["max_tokens"] == 4096
    assert AnthropicAdapter(ProviderConfig(name="b", kind="anthropic")).url == "https://api.anthropic.com/v1/messages"


async def test_missing_key_is_a_provider_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from tidegate.errors import ProviderFailure
    from tidegate.request import GenerationRequest

    monkeypatch.delenv("NOPE_KEY", raising=False)
    adapter = AnthropicAdapter(ProviderConfig(name="a", kind="anthropic", api_key_env="NOPE_KEY"))
    with pytest.raises(ProviderFailure) as info:
        await adapter.build_request(GenerationRequest(model="p", messages=[{"role": "user", "content": "x"}]), "m")
    assert "NOPE_KEY" in info.value.message


def test_run_helper_stops_at_failure() -> None:
    data = (FIXTURES / "anthropic" / "error.sse").read_bytes()
    events = run(factory, [data, b"event: ping\ndata: {}\n\n"])
    assert isinstance(events[-1], Failed)


def test_the_response_format_tool_is_the_answer_text_and_other_tools_stay_calls() -> None:
    """`response_format`: the forced `json_answer` tool's input streams as text and ends `stop`; without
    the flag (or for another tool) the same events are tool calls ending `tool_calls`."""
    from tests.emulators.anthropic_upstream import FORCED_INPUT, forced_tool_events

    stream = b"".join(sse_frame(name, data) for name, data in forced_tool_events("json_answer", "m"))
    answer = run(lambda: AnthropicSSEDecoder("p", "m", json_answer=True), [stream])
    assert "".join(e.text for e in answer if isinstance(e, TextDelta)) == "".join(FORCED_INPUT)
    assert not [e for e in answer if isinstance(e, ToolCallDelta)]
    assert [e for e in answer if isinstance(e, Finished)] == [Finished("stop")]
    for json_answer, tool in ((False, "json_answer"), (True, "lookup")):
        other = b"".join(sse_frame(n, d) for n, d in forced_tool_events(tool, "m"))
        calls = run(lambda flag=json_answer: AnthropicSSEDecoder("p", "m", json_answer=flag), [other])
        assert "".join(e.arguments for e in calls if isinstance(e, ToolCallDelta)) == "".join(FORCED_INPUT)
        assert [e for e in calls if isinstance(e, Finished)] == [Finished("tool_calls")]
