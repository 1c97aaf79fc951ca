"""GenerationRequest (OpenAI chat shape) → Anthropic Messages body."""

from __future__ import annotations

from typing import Any

import pytest

from tests.emulators.anthropic_upstream import check_messages_body
from tidegate.errors import ProviderFailure
from tidegate.providers.anthropic.request import messages_body
from tidegate.request import GenerationRequest, ReasoningOptions


def body_of(messages: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    body = messages_body(GenerationRequest(model="pub", messages=messages, **kw), model="claude-x")
    assert check_messages_body(body) is None, check_messages_body(body)
    return body


def test_minimal() -> None:
    body = body_of([{"role": "user", "content": "hi"}])
    assert body == {
        "model": "claude-x",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": True,
    }
    no_model = messages_body(GenerationRequest(model="p", messages=[{"role": "user", "content": "x"}]), model=None)
    assert "model" not in no_model


def test_system_developer_and_merged_turns() -> None:
    body = body_of(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {"role": "user", "content": "one"},
            {"role": "user", "content": [{"type": "text", "text": "two"}]},
            {"role": "assistant", "content": "ok"},
            {"role": "assistant", "content": "more"},
            {"role": "user", "content": "three"},
        ]
    )
    assert body["system"] == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric units."}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"] == [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert body["messages"][1]["content"] == [{"type": "text", "text": "ok"}, {"type": "text", "text": "more"}]


def test_images() -> None:
    body = body_of(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}},
                ],
            }
        ]
    )
    content = body["messages"][0]["content"]
    assert content[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert content[2] == {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}


@pytest.mark.parametrize(
    "url",
    ["data:image/bmp;base64,AAAA", "data:image/png,notbase64", "ftp://x/y.png"],
)
def test_bad_images_are_400(url: str) -> None:
    with pytest.raises(ProviderFailure) as info:
        body_of([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}])
    assert info.value.status == 400 and not info.value.retriable
    assert "messages[0].content[0]" in info.value.message


def test_tools_and_tool_choice() -> None:
    tools = [
        {
            "type": "function",
            "function": {"name": "lookup", "description": "Look up", "parameters": {"type": "object"}},
        },
        {"type": "function", "function": {"name": "noargs"}},
    ]
    msgs = [{"role": "user", "content": "x"}]
    body = body_of(msgs, tools=tools)
    assert body["tools"] == [
        {"name": "lookup", "description": "Look up", "input_schema": {"type": "object"}},
        {"name": "noargs", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert "tool_choice" not in body
    expected = {
        "auto": {"type": "auto"},
        "none": {"type": "none"},
        "required": {"type": "any"},
    }
    for choice, anthropic in expected.items():
        assert body_of(msgs, tools=tools, tool_choice=choice)["tool_choice"] == anthropic
    forced = body_of(msgs, tools=tools, tool_choice={"type": "function", "function": {"name": "lookup"}})
    assert forced["tool_choice"] == {"type": "tool", "name": "lookup"}
    serial = body_of(msgs, tools=tools, parallel_tool_calls=False)
    assert serial["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert "tool_choice" not in body_of(msgs, tool_choice="auto")  # no tools: no tool_choice


def test_tool_loop_continuation() -> None:
    body = body_of(
        [
            {"role": "user", "content": "weather in paris and rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"c":"paris"}'},
                    },
                    {"id": "toolu_2", "type": "function", "function": {"name": "weather", "arguments": ""}},
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "rain"}]},
            {"role": "user", "content": "thanks"},
        ]
    )
    assistant, results = body["messages"][1], body["messages"][2]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"c": "paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {}},
        ],
    }
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "rain"}]},
            {"type": "text", "text": "thanks"},
        ],
    }


def test_bad_tool_arguments_are_400() -> None:
    msgs = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "{oops"}}]},
    ]
    with pytest.raises(ProviderFailure) as info:
        body_of(msgs)
    assert "messages[1].tool_calls[0].function.arguments" in info.value.message


def test_sampling_fields() -> None:
    body = body_of(
        [{"role": "user", "content": "x"}], max_tokens=100, temperature=1.5, top_p=0.5, stop=["END"], user="u-1"
    )
    assert body["max_tokens"] == 100
    assert body["temperature"] == 1.0  # Anthropic's range is 0–1
    assert body["top_p"] == 0.5
    assert body["stop_sequences"] == ["END"]
    assert body["metadata"] == {"user_id": "u-1"}


@pytest.mark.parametrize(
    ("reasoning", "max_tokens", "budget", "sent_max"),
    [
        (ReasoningOptions(effort="low"), None, 2048, 4096),
        (ReasoningOptions(effort="high"), None, 16384, 16384 + 4096),
        (ReasoningOptions(effort="medium"), 20000, 8192, 20000),
        (ReasoningOptions(max_tokens=3000), 1000, 3000, 4000),
        (ReasoningOptions(max_tokens=10), None, 1024, 4096),
    ],
)
def test_reasoning_to_thinking(reasoning: ReasoningOptions, max_tokens: int | None, budget: int, sent_max: int) -> None:
    body = body_of([{"role": "user", "content": "x"}], reasoning=reasoning, max_tokens=max_tokens, temperature=0.2)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == sent_max and body["max_tokens"] > budget
    assert "temperature" not in body  # Anthropic rejects temperature != 1 with thinking


def test_reasoning_effort_none_is_no_thinking() -> None:
    assert "thinking" not in body_of([{"role": "user", "content": "x"}], reasoning=ReasoningOptions(effort="none"))


def test_reasoning_details_replayed_verbatim() -> None:
    body = body_of(
        [
            {"role": "user", "content": "2+2?"},
            {
                "role": "assistant",
                "content": "4",
                "reasoning": "Let me think about it.",
                "reasoning_details": [
                    # streamed fragments of one block, as a client accumulates them
                    {"type": "reasoning.text", "text": "Let me think", "index": 0},
                    {"type": "reasoning.text", "text": " about it.", "index": 0},
                    {"type": "reasoning.text", "text": "", "signature": "SIG==", "index": 0},
                    {"type": "reasoning.encrypted", "data": "OPAQUE", "index": 1},
                    {"type": "reasoning.text", "text": "unsigned: dropped", "index": 2},
                    {"type": "reasoning.summary", "summary": "no anthropic form", "index": 3},
                ],
            },
            {"role": "user", "content": "and 3+3?"},
        ]
    )
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Let me think about it.", "signature": "SIG=="},
        {"type": "redacted_thinking", "data": "OPAQUE"},
        {"type": "text", "text": "4"},
    ]


def test_unsupported_part_is_400() -> None:
    with pytest.raises(ProviderFailure) as info:
        body_of([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}])
    assert "input_audio" in info.value.message and info.value.status == 400
