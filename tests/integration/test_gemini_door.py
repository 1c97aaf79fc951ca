"""The Gemini API door (`/v1beta/models/...`, `/v1/models/...`; docs/agents.md) against a real `tidegate
serve` and real upstream emulators, read by the official `google-genai` SDK and raw HTTP: an
OpenAI-compatible chat route (translated) and a Gemini route (passthrough: the body as sent, the
chunks untouched)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.emulators.gemini_upstream import SIGNATURE, THOUGHT, GeminiEmulator, scenario_chunks
from tests.emulators.openai_upstream import TEXT_PIECES, OpenAIUpstream
from tests.support.process import ServerProcess, running_server, sqlite_url
from tidegate.ids import is_ulid

HELLO = "".join(TEXT_PIECES)
LOOKUP = types.FunctionDeclaration(
    name="lookup",
    description="Look a thing up",
    parameters=types.Schema(type=types.Type.OBJECT, properties={"q": types.Schema(type=types.Type.STRING)}),
)


@pytest.fixture(scope="module")
def gemini() -> Iterator[GeminiEmulator]:
    with GeminiEmulator() as emu:
        yield emu


@pytest.fixture(scope="module")
def chat() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, gemini: GeminiEmulator, chat: OpenAIUpstream
) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("gemini-door")
    config = f"""
[server]
host = "127.0.0.1"
[store]
url = "{sqlite_url(workdir)}"
[providers.gemini]
kind = "gemini"
base_url = "{gemini.base_url}/v1beta"
api_key_env = "EMU_GEMINI_KEY"
[providers.gemini-vertex]
kind = "gemini"
project = "{gemini.project}"
region = "us-central1"
base_url = "{gemini.base_url}/v1"
access_token_env = "EMU_GEMINI_TOKEN"
[providers.chat]
kind = "openai"
base_url = "{chat.base_url}"
[models."google/gemini-flash"]
routes = [{{ provider = "gemini", model = "gemini-2.5-flash" }}]
[models."vertex/gemini-pro"]
routes = [{{ provider = "gemini-vertex", model = "gemini-2.5-flash" }}]
[models."gpt"]
routes = [{{ provider = "chat", model = "text" }}]
[models."gpt-tools"]
routes = [{{ provider = "chat", model = "tools" }}]
[models."gpt-reasoning"]
routes = [{{ provider = "chat", model = "reasoning_details" }}]
[models."gpt-breaks"]
routes = [{{ provider = "chat", model = "error-mid" }}]
[models."fallback"]
routes = [{{ provider = "gemini", model = "gemini-2.5-flash--500" }}, {{ provider = "chat", model = "text" }}]
"""
    env = {"EMU_GEMINI_KEY": gemini.api_key, "EMU_GEMINI_TOKEN": gemini.token}
    with running_server(workdir, config, extra_env=env) as proc:
        yield proc


def sdk(server: ServerProcess, version: str = "v1beta") -> genai.Client:
    return genai.Client(
        api_key=server.key, http_options=types.HttpOptions(base_url=server.base_url, api_version=version)
    )


def post(server: ServerProcess, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, headers={"x-goog-api-key": server.key, **headers}, timeout=30)


def user(text: str) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}]}


@pytest.mark.parametrize("version", ["v1beta", "v1"])
def test_sdk_generate_content_and_stream_on_a_chat_route(server: ServerProcess, version: str) -> None:
    client = sdk(server, version)
    answer = client.models.generate_content(model="gpt", contents="Say hello")
    assert answer.text == HELLO and answer.candidates is not None
    assert answer.candidates[0].finish_reason == types.FinishReason.STOP
    assert answer.usage_metadata is not None and answer.usage_metadata.total_token_count
    assert answer.response_id is not None and is_ulid(answer.response_id)
    chunks = list(client.models.generate_content_stream(model="gpt", contents="Say hello"))
    assert "".join(c.text or "" for c in chunks) == HELLO
    assert [c.candidates[0].finish_reason for c in chunks if c.candidates][-1] == types.FinishReason.STOP
    assert chunks[-1].usage_metadata is not None and chunks[-1].usage_metadata.prompt_token_count
    assert all(c.usage_metadata is None for c in chunks[:-1])


def test_sdk_function_tool_and_thinking_round_trip_on_a_chat_route(server: ServerProcess, chat: OpenAIUpstream) -> None:
    client = sdk(server)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[LOOKUP])],
        thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=1024),
        system_instruction="Be brief.",
    )
    chunks = list(client.models.generate_content_stream(model="gpt-tools", contents="Find paris", config=config))
    calls = [fc for c in chunks for fc in c.function_calls or []]
    assert [(c.name, c.args) for c in calls] == [("lookup", {"q": "paris"}), ("clock", {"tz": "UTC"})]
    sent = chat.last("tools").body
    assert sent["tools"][0]["function"] == {
        "name": "lookup",
        "description": "Look a thing up",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."} and sent["reasoning_effort"] == "low"
    # the thinking of a chat route (text + signature) comes back as thought parts and a signature
    thinking = list(client.models.generate_content_stream(model="gpt-reasoning", contents="Think", config=config))
    parts = [p for c in thinking if c.candidates for p in c.candidates[0].content.parts or []]  # type: ignore[union-attr]
    assert "".join(p.text or "" for p in parts if p.thought) == "Thinking."
    assert "".join(p.text or "" for p in parts if not p.thought) == "Done."
    signed = [p for p in parts if p.thought_signature]
    assert len(signed) == 1 and not signed[0].thought
    # the history as google-genai sends it back (thought parts dropped, as Gemini CLI does): the
    # signature alone brings the route its own reasoning back, and the call's response its result
    model_turn = types.Content(
        role="model", parts=[p for p in parts if not p.thought] + [types.Part(function_call=calls[0])]
    )
    history = [
        types.Content(role="user", parts=[types.Part(text="Find paris")]),
        model_turn,
        types.Content(role="user", parts=[types.Part.from_function_response(name="lookup", response={"r": "ok"})]),
    ]
    client.models.generate_content(model="gpt", contents=history, config=config)
    messages = chat.last("text").body["messages"]
    assistant = next(m for m in messages if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q":"paris"}'}
    assert assistant["reasoning_details"] == [
        {"type": "reasoning.text", "text": "Thinking.", "signature": "sig-abc"},
        {"type": "reasoning.encrypted", "data": "b3BhcXVl", "index": 1},
    ]
    assert messages[-1] == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": '{"r":"ok"}'}


@pytest.mark.parametrize(
    ("model", "provider", "dialect"),
    [("google/gemini-flash", "gemini", "google-ai"), ("vertex/gemini-pro", "gemini-vertex", "vertex")],
)
def test_a_gemini_route_gets_the_body_as_sent_and_its_chunks_back_untouched(
    server: ServerProcess, gemini: GeminiEmulator, model: str, provider: str, dialect: str
) -> None:
    """On Google AI and on Vertex AI (`project` set: the `publishers/google` path, a bearer token)."""
    mark = f"req-{uuid.uuid4().hex[:10]}"
    body = {
        **user(f"[[thinking]] {mark}"),
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_LOW_AND_ABOVE"}],
        "tools": [{"googleSearch": {}}],
        "generationConfig": {"topK": 3, "thinkingConfig": {"includeThoughts": True}},
    }
    path = model.replace("/", "%2F")
    r = post(server, f"/v1beta/models/{path}:streamGenerateContent?alt=sse", body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-provider"] == provider and is_ulid(r.headers["x-generation-id"])
    assert "x-tidegate-dropped" not in r.headers  # topK went as sent
    rec = next(x for x in gemini.requests if mark in repr(x.body))
    assert rec.body == body and rec.model == "gemini-2.5-flash" and rec.dialect == dialect
    expected = [orjson.dumps(c) for c in scenario_chunks("thinking", "gemini-2.5-flash")]
    assert r.content == b"".join(b"data: " + c + b"\n\n" for c in expected)
    # the same request as JSON: the chunks merged into one response (the bare id names the model)
    answer = post(server, f"/v1beta/models/{model.split('/')[1]}:generateContent", body).json()
    parts = answer["candidates"][0]["content"]["parts"]
    assert parts == [
        {"text": THOUGHT, "thought": True},
        {"text": "The answer is 4.", "thoughtSignature": SIGNATURE},  # (text after text joins it)
    ]
    assert answer["usageMetadata"]["thoughtsTokenCount"] == 12 and answer["candidates"][0]["finishReason"] == "STOP"


def test_what_only_a_gemini_route_honours_is_refused_by_name_elsewhere(server: ServerProcess) -> None:
    r = post(server, "/v1beta/models/gpt:generateContent", {**user("hi"), "tools": [{"googleSearch": {}}]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert (
        error["status"] == "INVALID_ARGUMENT" and error["code"] == 400 and "tools[0].googleSearch" in error["message"]
    )
    assert error["details"][0]["reason"] == "UNSUPPORTED_PARAMETER"
    open_safety = {"safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]}
    assert post(server, "/v1beta/models/gpt:generateContent", {**user("hi"), **open_safety}).status_code == 200
    strict = {"safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"}]}
    r = post(server, "/v1beta/models/gpt:generateContent", {**user("hi"), **strict})
    assert r.status_code == 400 and "safetySettings[0].threshold" in r.json()["error"]["message"]
    # topK (Gemini CLI sends 64 on every request): left out of a translated route, and said so
    sampled = {"generationConfig": {"topK": 64, "temperature": 1}}
    r = post(server, "/v1beta/models/gpt:generateContent", {**user("hi"), **sampled})
    assert r.status_code == 200 and r.headers["x-tidegate-dropped"] == "generationConfig.topK"


def test_keys_errors_and_identity_in_googles_shape(server: ServerProcess) -> None:
    url = server.base_url + "/v1beta/models/gpt:generateContent"
    r = httpx.post(url, json=user("hi"), timeout=30)
    assert (
        r.status_code == 401
        and r.json()["error"]["status"] == "UNAUTHENTICATED"
        and is_ulid(r.headers["x-generation-id"])
    )
    r = httpx.post(url + f"?key={server.key}", json=user("hi"), timeout=30)
    assert r.status_code == 200 and r.json()["candidates"][0]["content"]["parts"] == [{"text": HELLO}]
    r = httpx.post(url, json=user("hi"), headers={"authorization": f"Bearer {server.key}"}, timeout=30)
    assert r.status_code == 200 and r.headers["x-provider"] == "chat"
    r = post(server, "/v1beta/models/nope:generateContent", user("hi"))
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    r = post(server, "/v1beta/models/gpt:generateContent", {"contents": []})
    assert r.status_code == 400 and "'contents'" in r.json()["error"]["message"]
    client = sdk(server)  # (held: a client closes its connections when it is collected)
    with pytest.raises(genai_errors.ClientError) as raised:
        client.models.generate_content(model="nope", contents="hi")
    assert raised.value.code == 404 and raised.value.status == "NOT_FOUND"


def test_a_failure_after_the_first_byte_is_an_error_never_a_finished_answer(server: ServerProcess) -> None:
    r = post(server, "/v1beta/models/gpt-breaks:streamGenerateContent?alt=sse", user("hi"))
    assert r.status_code == 200 and b"finishReason" not in r.content
    last = r.content.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    error = orjson.loads(last)["error"]
    assert error["code"] == 502 and error["status"] == "UNAVAILABLE" and error["message"]
    client = sdk(server)
    with pytest.raises(genai_errors.ServerError) as raised:
        for _ in client.models.generate_content_stream(model="gpt-breaks", contents="hi"):
            pass
    assert raised.value.code == 502


def test_the_json_array_stream_and_a_fallback_before_the_first_byte(server: ServerProcess) -> None:
    r = post(server, "/v1beta/models/fallback:streamGenerateContent", user("hi"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.headers["x-provider"] == "chat" and r.headers["x-provider-attempts"] == "2"
    chunks = orjson.loads(r.content)
    assert "".join(p["text"] for c in chunks for p in c["candidates"][0]["content"]["parts"]) == HELLO
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in chunks[-1]


def test_count_tokens_and_the_model_list(server: ServerProcess) -> None:
    client = sdk(server)
    counted = client.models.count_tokens(model="gpt", contents="Hello there, how are you?")
    assert counted.total_tokens is not None and 5 <= counted.total_tokens <= 20
    names = [m.name for m in client.models.list()]
    assert "models/gpt" in names and "models/google/gemini-flash" in names
    got = client.models.get(model="gemini-flash")
    assert got.name == "models/google/gemini-flash"
    assert "streamGenerateContent" in (got.supported_actions or [])
    listed = httpx.get(server.base_url + "/v1/models", headers={"x-goog-api-key": server.key}).json()
    assert "models/gpt" in [m["name"] for m in listed["models"]]


def test_an_idempotency_key_replays_the_stream(server: ServerProcess, chat: OpenAIUpstream) -> None:
    key = f"idem-{uuid.uuid4().hex}"
    path = "/v1beta/models/gpt:streamGenerateContent?alt=sse"
    first = post(server, path, user("hi"), **{"idempotency-key": key})
    seen = len(chat.requests)
    again = post(server, path, user("hi"), **{"idempotency-key": key})
    assert again.headers["idempotent-replayed"] == "true" and again.content == first.content
    assert len(chat.requests) == seen
    record = httpx.get(
        f"{server.base_url}/api/v1/generations/{first.headers['x-generation-id']}", headers=server.headers
    )
    assert record.json()["status"] == "completed" and record.json()["model"] == "gpt"
