"""Responses passthrough (docs/agents.md): a provider of kind `openai` with `responses = true` gets a
`/v1/responses` request as sent, and its events go back untouched (parsed only for usage, the record
and errors). A real tidegate, the Responses API emulator, the official SDK with strict validation."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from tests.emulators.openai_agent_upstream import AgentOpenAIUpstream
from tests.emulators.openai_responses_upstream import TEXT, ResponsesUpstream
from tests.support.process import ServerProcess, sqlite_url, start_server
from tests.support.records import fetch_record
from tests.support.streams import stream_sse


def config(workdir: Path, upstream: ResponsesUpstream, chat: AgentOpenAIUpstream) -> str:
    routes = {
        "gpt": [("oai", "text")],
        "gpt-tool": [("oai", "tool")],
        "gpt-breaks": [("oai", "fail-mid")],
        "gpt-fallback": [("oai", "http-500"), ("chat", "text")],
    }
    lines = [
        "[server]",
        'host = "127.0.0.1"',
        "[store]",
        f'url = "{sqlite_url(workdir)}"',
        "[providers.oai]",
        'kind = "openai"',
        f'base_url = "{upstream.base_url}"',
        "responses = true",
        "[providers.chat]",
        'kind = "openai"',
        f'base_url = "{chat.base_url}"',
    ]
    for model, rs in routes.items():
        lines.append(f'[models."{model}"]')
        lines.append("routes = [" + ", ".join(f'{{ provider = "{p}", model = "{m}" }}' for p, m in rs) + "]")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ResponsesUpstream]]:
    upstream, chat = ResponsesUpstream().start(), AgentOpenAIUpstream().start()
    workdir = tmp_path_factory.mktemp("responses-passthrough")
    server = start_server(workdir, config(workdir, upstream, chat))
    yield server, upstream
    server.stop()
    upstream.stop()
    chat.stop()


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key, _strict_response_validation=True)


def test_the_request_goes_as_sent_and_the_events_come_back_untouched(
    stack: tuple[ServerProcess, ResponsesUpstream],
) -> None:
    server, upstream = stack
    mark = uuid.uuid4().hex
    body: dict[str, Any] = {
        "model": "gpt",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": f"hi {mark}"}]}],
        "stream": True,
        "prompt_cache_key": "thread-1",
        "client_metadata": {"session_id": "s"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "tools": [{"type": "web_search"}, {"type": "custom", "name": "patch"}],
        "truncation": "auto",  # what only a Responses API route honours
        "provider": {"allow_fallbacks": False},
    }
    r = stream_sse(server.base_url + "/v1/responses", body, server.headers)
    assert r.status == 200 and r.headers["x-provider"] == "oai"
    sent = next(rec for rec in upstream.requests if mark in repr(rec.body))
    expected = {k: v for k, v in body.items() if k != "provider"}
    assert sent.body == {**expected, "model": "text"}
    assert [e.data.encode() for e in r.events] == sent.sent  # byte for byte
    assert [e.event for e in r.events] == [orjson.loads(p)["type"] for p in sent.sent]
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    gid = r.headers["x-generation-id"]
    rec = fetch_record(server, gid)
    assert rec["status"] == "completed" and rec["output_text"] == "".join(TEXT)
    usage = rec["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["cached_tokens"]) == (17, 9, 4)


def test_the_sdk_reads_a_passed_through_stream_and_json(stack: tuple[ServerProcess, ResponsesUpstream]) -> None:
    server, _ = stack
    with client(server).responses.stream(model="gpt", input="hi") as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert text == "".join(TEXT) and final.output_text == text and final.id.startswith("resp_emu")
    answer = client(server).responses.create(model="gpt", input="hi", store=False)
    assert answer.id.startswith("resp_emu") and answer.output_text == "".join(TEXT)
    assert answer.usage is not None and answer.usage.input_tokens == 17


def test_a_function_call_passes_through(stack: tuple[ServerProcess, ResponsesUpstream]) -> None:
    server, _ = stack
    raw = client(server).responses.with_raw_response.create(
        model="gpt-tool", input="Paris?", tools=[{"type": "function", "name": "lookup", "parameters": {}}]
    )
    answer = raw.parse()
    call = answer.output[0]
    assert call.type == "function_call" and call.name == "lookup" and call.arguments == '{"q": "paris"}'
    assert fetch_record(server, raw.headers["x-generation-id"])["finish_reason"] == "tool_calls"


def test_the_upstreams_failure_is_the_one_terminal_event(stack: tuple[ServerProcess, ResponsesUpstream]) -> None:
    server, _ = stack
    r = stream_sse(
        server.base_url + "/v1/responses", {"model": "gpt-breaks", "input": "x", "stream": True}, server.headers
    )
    types = [e.event for e in r.events]
    assert types[-1] == "response.failed" and sum(t.startswith("response.failed") for t in types) == 1
    assert orjson.loads(r.events[-1].data)["response"]["error"]["message"] == "The model crashed mid-answer"
    rec = fetch_record(server, r.headers["x-generation-id"])
    assert rec["status"] == "failed" and "crashed mid-answer" in rec["error"]["message"]


def test_a_failure_before_the_first_byte_falls_back_to_a_translated_route(
    stack: tuple[ServerProcess, ResponsesUpstream],
) -> None:
    server, _ = stack
    raw = client(server).responses.with_raw_response.create(model="gpt-fallback", input="hi", stream=True)
    events = list(raw.parse())
    assert raw.headers["x-provider"] == "chat" and raw.headers["x-provider-attempts"] == "2"
    assert events[-1].type == "response.completed" and events[-1].response.id.startswith("resp_")
    assert events[-1].response.output_text == "Hello, world \u00e9\u2713!"
