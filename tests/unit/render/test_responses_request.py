"""Responses / native request bodies → `GenerationRequest`: input items, tools, the 400s naming fields.

(Lives beside the renderer tests: the request side of the same two doors.)"""

from __future__ import annotations

from typing import Any

import pytest

from tidegate.errors import InvalidRequest
from tidegate.server.doors.responses.request import parse_native_request, parse_responses_request


def test_string_input_instructions_and_options() -> None:
    parsed = parse_responses_request(
        {
            "model": "m",
            "input": "hi",
            "instructions": "be brief",
            "max_output_tokens": 20,
            "temperature": 0.5,
            "top_p": 0.9,
            "metadata": {"k": "v"},
            "reasoning": {"effort": "low", "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
            "store": False,
            "parallel_tool_calls": False,
            "stream": True,
        }
    )
    r = parsed.request
    assert r.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert (r.max_tokens, r.temperature, r.top_p, r.stream) == (20, 0.5, 0.9, True)
    assert r.parallel_tool_calls is False
    assert r.reasoning is not None and (r.reasoning.effort, r.reasoning.summary) == ("low", "auto")
    assert r.raw_body == {}  # nothing from a Responses body is forwarded as chat fields
    echo = parsed.echo()
    assert echo["instructions"] == "be brief" and echo["metadata"] == {"k": "v"}
    assert echo["reasoning"] == {"effort": "low", "summary": "auto"} and echo["parallel_tool_calls"] is False
    assert parse_responses_request({"model": "m", "input": "x"}).request.stream is False
    assert parse_native_request({"model": "m", "input": "x"}).request.stream is True


def test_message_parts_and_images() -> None:
    r = parse_responses_request(
        {
            "model": "m",
            "input": [
                {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "what is this?"},
                        {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
                    ],
                },
                {
                    "type": "message",
                    "id": "msg_1",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "A cat.", "annotations": []}],
                },
            ],
        }
    ).request
    assert r.messages == [
        {"role": "developer", "content": [{"type": "text", "text": "rules"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": "A cat."},
    ]


def test_tool_loop_items_with_reasoning_merge_into_one_assistant_turn() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "input": [
            {"role": "user", "content": "Weather in Berlin and Paris?"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Two calls."}],
                "encrypted_content": "SIG",
            },
            {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "REDACTED"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "w", "arguments": '{"c":"Berlin"}'},
            {"type": "function_call", "call_id": "call_b", "name": "w", "arguments": '{"c":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_a", "output": "12C"},
            {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "15C"}]},
        ],
        "tools": [{"type": "function", "name": "w", "description": "weather", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "w"},
    }
    parsed = parse_responses_request(body)
    r = parsed.request
    assert r.messages == [
        {"role": "user", "content": "Weather in Berlin and Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_details": [
                {"type": "reasoning.text", "text": "Two calls.", "index": 0, "signature": "SIG"},
                {"type": "reasoning.encrypted", "data": "REDACTED", "index": 1},
            ],
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "w", "arguments": '{"c":"Berlin"}'}},
                {"id": "call_b", "type": "function", "function": {"name": "w", "arguments": '{"c":"Paris"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "12C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "15C"},
    ]
    assert r.tools == [
        {"type": "function", "function": {"name": "w", "parameters": {"type": "object"}, "description": "weather"}}
    ]
    assert r.tool_choice == {"type": "function", "function": {"name": "w"}}
    assert parsed.tool_choice == {"type": "function", "name": "w"}
    assert parsed.tools[0]["name"] == "w" and parsed.tools[0]["type"] == "function"


def test_function_call_without_preceding_assistant_starts_a_turn() -> None:
    r = parse_responses_request(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "x"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
                {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
            ],
        }
    ).request
    assert [m["role"] for m in r.messages] == ["user", "assistant", "tool", "assistant"]
    assert r.messages[1]["content"] is None and r.messages[3]["tool_calls"][0]["id"] == "c2"


@pytest.mark.parametrize(
    ("body", "mentions"),
    [
        ({"model": "m"}, "'input'"),
        ({"input": "x"}, "'model'"),
        ({"model": "m", "input": 5}, "'input'"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "'input[0].role'"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "'input[0].content[0].type'",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "'input[0].content[0].image_url'",
        ),
        ({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "'input[0].call_id'"),
        ({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}, "'input[0].call_id'"),
        ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "'tools[0].name'"),
        ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "'tool_choice'"),
        ({"model": "m", "input": "x", "reasoning": {"effort": "extreme"}}, "'reasoning.effort'"),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "'max_output_tokens'"),
        ({"model": "m", "input": "x", "temperature": 3}, "'temperature'"),
        ({"model": "m", "input": "x", "stream": "yes"}, "'stream'"),
        ({"model": "m", "input": "x", "metadata": {"k": 1}}, "'metadata.k'"),
        ({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}, "'text.format.type'"),
        ({"model": "m", "input": "x", "include": ["everything"]}, "'include[0]'"),
        ({"model": "m", "input": "x", "tools": [{"type": "telepathy"}]}, "'tools[0].type'"),
        ({"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "n", "tools": []}]}, "'tools[0].tools'"),
        ({"model": "m", "input": "x", "tools": [{"type": "custom"}]}, "'tools[0].name'"),
        ({"model": "m", "input": [{"type": "custom_tool_call", "call_id": "c", "name": "p"}]}, "'input[0].arguments'"),
    ],
)
def test_responses_400_names_the_field(body: dict[str, Any], mentions: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        parse_responses_request(body)
    assert mentions in exc.value.message


@pytest.mark.parametrize(
    ("body", "only"),
    [
        ({"previous_response_id": "resp_1"}, {"previous_response_id": "resp_1"}),
        ({"truncation": "auto", "background": True}, {"truncation": "auto", "background": True}),
        ({"truncation": "disabled", "background": False, "service_tier": "auto"}, {}),
        ({"input": [{"type": "item_reference", "id": "x"}]}, {"input[0].type": "item_reference"}),
        ({"text": {"verbosity": "high"}}, {"text.verbosity": "high"}),
        ({"reasoning": {"context": "all_turns"}}, {"reasoning.context": "all_turns"}),
        (
            {"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}},
            {"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}},
        ),
        ({"prompt_cache_key": "k", "client_metadata": {"a": "b"}, "store": False, "user": "u"}, {}),
    ],
)
def test_responses_only_fields_are_kept_by_name(body: dict[str, Any], only: dict[str, Any]) -> None:
    """Fields only a Responses API route honours: refused by name on the others (providers/fidelity.py)."""
    parsed = parse_responses_request({"model": "m", "input": "x", **body})
    assert parsed.request.as_sent is not None and parsed.request.as_sent.only == only


def test_responses_hosted_tools_and_text_format() -> None:
    parsed = parse_responses_request(
        {
            "model": "m",
            "input": "x",
            "tools": [{"type": "web_search", "external_web_access": False}, {"type": "function", "name": "f"}],
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
        }
    )
    sent, tools = parsed.request.as_sent, parsed.request.responses_tools
    assert sent is not None and tools is not None
    assert tools.hosted == {"tools[0]": "web_search"} and not sent.only
    assert [t["function"]["name"] for t in parsed.request.tools or []] == ["f"]
    assert parsed.request.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "object"}},
    }
    assert parsed.echo()["tools"][0] == {"type": "web_search", "external_web_access": False}


@pytest.mark.parametrize("field", ["tool_choice", "temperature", "include", "store", "messages"])
def test_native_rejects_fields_outside_its_contract(field: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        parse_native_request({"model": "m", "input": "x", field: None})
    assert f"'{field}'" in exc.value.message and "/api/v1/llm/responses" in exc.value.message
