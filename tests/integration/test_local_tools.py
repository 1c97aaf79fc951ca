"""The local model's function calling (providers/local/tools.py, docs/local-agents.md) on
every door of a real `tidegate serve`: the model's call, written under its schema's grammar, comes
back as the door's own tool call; a tool result in the history is fed back and the model answers;
thinking the model meets by doing nothing is ignored, and a budget is refused by the name sent.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.process import ServerProcess

MODEL = "local/smollm2"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ASK = "What is the weather in Paris?"


def post(server: ServerProcess, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {**server.headers, "anthropic-version": "2023-06-01"}
    return httpx.post(server.base_url + path, json=body, headers=headers, timeout=300)


def arguments_fit(arguments: Any) -> None:
    """What the grammar guarantees: an object with the schema's required string."""
    parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert isinstance(parsed, dict) and isinstance(parsed["city"], str), arguments


def test_chat_door_tool_call_then_answer(local_server: ServerProcess) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": ASK}]
    first = post(
        local_server,
        "/v1/chat/completions",
        {"model": MODEL, "messages": messages, "tools": tools, "tool_choice": "required"},
    )
    assert first.status_code == 200, first.text
    choice = first.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and call["id"].startswith("call_")
    arguments_fit(call["function"]["arguments"])
    messages += [choice["message"], {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 C"}]
    # the same call again would be an echo of the one just answered: the model writes its message
    again = {"model": MODEL, "messages": messages, "tools": tools, "max_tokens": 24, "temperature": 0}
    second = post(local_server, "/v1/chat/completions", again)
    assert second.status_code == 200, second.text
    answer = second.json()["choices"][0]
    assert answer["finish_reason"] in ("stop", "length") and answer["message"]["content"], answer
    assert second.json()["usage"]["prompt_tokens"] > first.json()["usage"]["prompt_tokens"]


def test_messages_door_renders_tool_use(local_server: ServerProcess) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": ASK}],
        "tools": [{"name": "get_weather", "input_schema": SCHEMA}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "thinking": {"type": "adaptive"},  # met by not thinking: ignored
        "output_config": {"effort": "high"},
    }
    resp = post(local_server, "/v1/messages", body)
    assert resp.status_code == 200, resp.text
    message = resp.json()
    assert message["stop_reason"] == "tool_use"
    (use,) = [b for b in message["content"] if b["type"] == "tool_use"]
    assert use["name"] == "get_weather"
    arguments_fit(use["input"])


def test_responses_door_renders_function_call(local_server: ServerProcess) -> None:
    body = {
        "model": MODEL,
        "input": ASK,
        "tools": [{"type": "function", "name": "get_weather", "parameters": SCHEMA}, {"type": "web_search"}],
        "tool_choice": "required",
        "reasoning": {"effort": "high"},  # ignored on the local model
    }
    resp = post(local_server, "/v1/responses", body)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-tidegate-dropped"] == "web_search"  # left out by default, named
    (call,) = [item for item in resp.json()["output"] if item["type"] == "function_call"]
    assert call["name"] == "get_weather"
    arguments_fit(call["arguments"])


def test_gemini_door_renders_function_call(local_server: ServerProcess) -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": ASK}]}],
        "tools": [{"functionDeclarations": [{"name": "get_weather", "parametersJsonSchema": SCHEMA}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
    }
    resp = post(local_server, f"/v1beta/models/{MODEL}:generateContent", body)
    assert resp.status_code == 200, resp.text
    parts = resp.json()["candidates"][0]["content"]["parts"]
    (call,) = [p["functionCall"] for p in parts if "functionCall" in p]
    assert call["name"] == "get_weather"
    arguments_fit(call["args"])


def test_a_thinking_budget_is_refused_by_the_name_sent(local_server: ServerProcess) -> None:
    ask = [{"role": "user", "content": ASK}]
    sent = {
        "/v1/messages": (
            {"max_tokens": 8, "messages": ask, "thinking": {"type": "enabled", "budget_tokens": 2048}},
            "'thinking'",
        ),
        "/v1/chat/completions": ({"messages": ask, "reasoning": {"max_tokens": 2048}}, "'reasoning'"),
        f"/v1beta/models/{MODEL}:generateContent": (
            {
                "contents": [{"role": "user", "parts": [{"text": ASK}]}],
                "generationConfig": {"thinkingConfig": {"thinkingBudget": 2048}},
            },
            "'generationConfig.thinkingConfig'",
        ),
    }
    for path, (body, named) in sent.items():
        resp = post(local_server, path, {"model": MODEL, **body})
        assert resp.status_code == 400, (path, resp.text)
        assert named in resp.text and "'reasoning'" not in resp.text.replace(named, ""), (path, resp.text)
    # an effort alone the local model meets by doing nothing
    effort = post(
        local_server,
        "/v1/chat/completions",
        {"model": MODEL, "messages": ask, "max_tokens": 4, "reasoning_effort": "high"},
    )
    assert effort.status_code == 200, effort.text


def test_a_required_call_is_made_even_when_it_repeats_the_last(local_server: ServerProcess) -> None:
    # the echo guard leaves the model's message only where the model chose: `required` asks for a call
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 21 C"},
    ]
    body = {"model": MODEL, "messages": messages, "tools": tools, "tool_choice": "required"}
    resp = post(local_server, "/v1/chat/completions", body)
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["tool_calls"], choice
