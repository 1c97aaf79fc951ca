"""The `gemini` kind end to end: a real tidegate in front of the Gemini emulator, on Google AI
(`x-goog-api-key`) and on Vertex AI (`project`, a bearer token), driven with the official `openai` SDK
and raw SSE reads. Each test asserts what the upstream received and what the client got back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.emulators.gemini_upstream import SIGNATURE, THOUGHT, GeminiEmulator, Recorded, vector_for
from tests.support.process import ServerProcess, running_server, sqlite_url
from tests.support.streams import stream_sse
from tidegate.providers.anthropic.request import EFFORT_BUDGETS

CHAT = "/v1/chat/completions"
MODELS = {"google/gemini": "google-ai", "vertex/gemini": "vertex"}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "lookup", "description": "Look a thing up", "parameters": {"type": "object"}},
    },
    {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}},
]


@pytest.fixture(scope="module")
def emulator() -> Iterator[GeminiEmulator]:
    with GeminiEmulator() as emu:
        yield emu


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, emulator: GeminiEmulator) -> Iterator[ServerProcess]:
    workdir: Path = tmp_path_factory.mktemp("gemini")
    config = f"""
[store]
url = "{sqlite_url(workdir)}"
[providers.gemini]
kind = "gemini"
base_url = "{emulator.base_url}/v1beta"
api_key_env = "EMU_GEMINI_KEY"
[providers.gemini-b]
kind = "gemini"
base_url = "{emulator.base_url}/v1beta"
api_key_env = "EMU_GEMINI_KEY"
[providers.gemini-vertex]
kind = "gemini"
project = "{emulator.project}"
region = "us-central1"
base_url = "{emulator.base_url}/v1"
access_token_env = "EMU_GEMINI_TOKEN"
[models."google/gemini"]
routes = [{{ provider = "gemini", model = "gemini-2.5-flash" }}]
[models."vertex/gemini"]
routes = [{{ provider = "gemini-vertex", model = "gemini-2.5-flash" }}]
[models."gemini-embed"]
type = "embedding"
routes = [{{ provider = "gemini", model = "gemini-embedding-001" }}]
[models."fallback/gemini"]
routes = [{{ provider = "gemini", model = "gemini-2.5-flash--429" }},
          {{ provider = "gemini-b", model = "gemini-2.5-flash" }}]
"""
    env = {"EMU_GEMINI_KEY": emulator.api_key, "EMU_GEMINI_TOKEN": emulator.token}
    with running_server(workdir, config, extra_env=env) as srv:
        yield srv
    log = srv.log()
    assert emulator.api_key not in log and emulator.token not in log


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key, max_retries=0)


def received(emu: GeminiEmulator, mark: str) -> Recorded:
    found = [r for r in emu.requests if mark in repr(r.body)]
    assert len(found) == 1, f"expected one upstream request with {mark}, got {len(found)}"
    return found[0]


def chat_stream(server: ServerProcess, model: str, messages: list[dict[str, Any]], **extra: Any) -> Any:
    body = {"model": model, "stream": True, "messages": messages, "stream_options": {"include_usage": True}, **extra}
    return stream_sse(server.base_url + CHAT, body, server.headers)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_text_usage_and_what_the_upstream_received(server: ServerProcess, emulator: GeminiEmulator, model: str) -> None:
    mark = f"req-{uuid.uuid4().hex[:10]}"
    messages: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"hi {mark}"}]
    text, usage, finish = [], None, None
    with client(server).chat.completions.create(
        model=model,
        messages=messages,
        stream=True,
        max_tokens=64,
        temperature=0.5,
        top_p=0.9,
        stop=["END"],
        seed=7,
        stream_options={"include_usage": True},
    ) as stream:
        for chunk in stream:
            usage = chunk.usage or usage
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
    assert "".join(text) == "Hello from Gemini." and finish == "stop"
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (20, 5)
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 8
    rec = received(emulator, mark)
    assert rec.dialect == MODELS[model] and rec.model == "gemini-2.5-flash"
    assert rec.body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert rec.body["contents"] == [{"role": "user", "parts": [{"text": f"hi {mark}"}]}]
    assert rec.body["generationConfig"] == {
        "maxOutputTokens": 64,
        "temperature": 0.5,
        "topP": 0.9,
        "stopSequences": ["END"],
        "seed": 7,
    }


def test_thinking_streams_as_reasoning_with_its_signature(server: ServerProcess, emulator: GeminiEmulator) -> None:
    mark = f"req-{uuid.uuid4().hex[:10]}"
    r = chat_stream(
        server, "google/gemini", [{"role": "user", "content": f"[[thinking]] {mark}"}], reasoning_effort="low"
    )
    assert r.done
    deltas = [c["choices"][0]["delta"] for c in r.json_events() if c.get("choices")]
    assert "".join(d.get("reasoning") or "" for d in deltas) == THOUGHT
    assert "".join(d.get("content") or "" for d in deltas) == "The answer is 4."
    details = [x for d in deltas for x in d.get("reasoning_details") or []]
    assert any(x.get("signature") == SIGNATURE for x in details)
    usage = [c["usage"] for c in r.json_events() if c.get("usage")][-1]
    assert usage["completion_tokens"] == 17 and usage["completion_tokens_details"]["reasoning_tokens"] == 12
    thinking = received(emulator, mark).body["generationConfig"]["thinkingConfig"]
    assert thinking == {"thinkingBudget": EFFORT_BUDGETS["low"], "includeThoughts": True}


def test_parallel_function_calls_and_the_loop_continuation(server: ServerProcess, emulator: GeminiEmulator) -> None:
    mark = f"req-{uuid.uuid4().hex[:10]}"
    sdk = client(server)
    first = sdk.chat.completions.create(
        model="google/gemini",
        messages=[{"role": "user", "content": f"[[tools]] {mark}"}],
        tools=TOOLS,
        tool_choice="required",
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        ("lookup", '{"q": "paris"}'),
        ("weather", '{"city": "Paris", "days": 2}'),
    ]
    rec = received(emulator, mark)
    assert rec.body["tools"] == [
        {
            "functionDeclarations": [
                {"name": "lookup", "description": "Look a thing up", "parametersJsonSchema": {"type": "object"}},
                {"name": "weather", "parametersJsonSchema": {"type": "object"}},
            ]
        }
    ]
    assert rec.body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    mark2 = f"req-{uuid.uuid4().hex[:10]}"
    messages: list[Any] = [
        {"role": "user", "content": f"look up paris {mark2}"},
        {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": '{"found": true}'},
        {"role": "tool", "tool_call_id": calls[1].id, "content": "sunny"},
    ]
    again = sdk.chat.completions.create(model="google/gemini", messages=messages, tools=TOOLS)
    assert again.choices[0].message.content == "Hello from Gemini."
    turns = received(emulator, mark2).body["contents"]
    assert [t["role"] for t in turns] == ["user", "model", "user"]
    assert turns[1]["parts"] == [
        {"functionCall": {"name": "lookup", "args": {"q": "paris"}}},
        {"functionCall": {"name": "weather", "args": {"city": "Paris", "days": 2}}},
    ]
    assert turns[2]["parts"] == [
        {"functionResponse": {"name": "lookup", "response": {"found": True}}},
        {"functionResponse": {"name": "weather", "response": {"result": "sunny"}}},
    ]


@pytest.mark.parametrize(("scenario", "text"), [("safety", "Partial"), ("blocked", "")])
def test_safety_stops_are_content_filter(server: ServerProcess, scenario: str, text: str) -> None:
    r = chat_stream(server, "google/gemini", [{"role": "user", "content": f"[[{scenario}]]"}])
    assert r.done
    chunks = [c for c in r.json_events() if c.get("choices")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == text
    assert chunks[-1]["choices"][0]["finish_reason"] == "content_filter"


def test_a_broken_answer_is_a_failure_never_a_stop(server: ServerProcess) -> None:
    """Text, then the stream ends without a finishReason: the failure chunk, no [DONE]."""
    r = chat_stream(server, "google/gemini", [{"role": "user", "content": "[[truncated]]"}])
    assert r.status == 200 and not r.done
    last = r.json_events()[-1]
    assert last["error"]["code"] == "upstream_error" and last["choices"][0]["finish_reason"] == "error"
    # MALFORMED_FUNCTION_CALL before anything was written: a route failure, answered before the stream
    bad = chat_stream(server, "google/gemini", [{"role": "user", "content": "[[malformed]]"}])
    assert bad.status == 502 and orjson.loads(bad.raw)["error"]["code"] == "upstream_error"


def test_a_429_falls_back_and_a_400_is_answered_at_once(server: ServerProcess) -> None:
    r = httpx.post(
        server.base_url + CHAT,
        headers=server.headers,
        timeout=30,
        json={"model": "fallback/gemini", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 200 and r.headers["x-provider"] == "gemini-b"
    bad = httpx.post(
        server.base_url + CHAT,
        headers=server.headers,
        timeout=30,
        json={"model": "google/gemini", "messages": [{"role": "user", "content": "[[400]]"}]},
    )
    assert bad.status_code == 400 and "INVALID_ARGUMENT" in bad.json()["error"]["message"]


def test_structured_output_and_the_fields_it_cannot_honour(server: ServerProcess, emulator: GeminiEmulator) -> None:
    mark = f"req-{uuid.uuid4().hex[:10]}"
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    body = {
        "model": "google/gemini",
        "messages": [{"role": "user", "content": mark}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema, "strict": True}},
    }
    assert httpx.post(server.base_url + CHAT, json=body, headers=server.headers, timeout=30).status_code == 200
    config = received(emulator, mark).body["generationConfig"]
    assert config == {"responseMimeType": "application/json", "responseJsonSchema": schema}
    before = len(emulator.requests)
    marked = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]
    for extra, field in (
        ({"tools": TOOLS, "parallel_tool_calls": False}, "parallel_tool_calls"),
        ({"logprobs": True}, "logprobs"),
        ({"messages": marked}, "cache_control"),
    ):
        r = httpx.post(
            server.base_url + CHAT,
            headers=server.headers,
            timeout=30,
            json={"model": "google/gemini", "messages": [{"role": "user", "content": "hi"}], **extra},
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_parameter", (field, r.text)
        assert f"'{field}'" in r.json()["error"]["message"]
    assert len(emulator.requests) == before  # refused before any upstream request


def test_the_served_model_is_the_upstreams_model_version(server: ServerProcess) -> None:
    r = chat_stream(server, "vertex/gemini", [{"role": "user", "content": "hi"}])
    assert r.done and r.headers["x-served-model"] == "gemini-2.5-flash"  # the upstream's modelVersion


def test_embeddings_use_batch_embed_contents(server: ServerProcess, emulator: GeminiEmulator) -> None:
    mark = f"emb-{uuid.uuid4().hex[:8]}"
    texts = [f"first {mark}", "second"]
    r = httpx.post(
        server.base_url + "/v1/embeddings",
        headers=server.headers,
        timeout=30,
        json={"model": "gemini-embed", "input": texts, "dimensions": 3},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["embedding"] for d in body["data"]] == [vector_for(t, 3) for t in texts]
    assert body["usage"]["prompt_tokens"] > 0  # Gemini sends no count: the gateway counted
    rec = received(emulator, mark)
    assert rec.dialect == "embed" and rec.model == "gemini-embedding-001"
    assert rec.body == {
        "requests": [
            {"model": "models/gemini-embedding-001", "outputDimensionality": 3, "content": {"parts": [{"text": t}]}}
            for t in texts
        ]
    }
