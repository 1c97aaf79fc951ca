"""No conversation crosses keys (docs/security.md, "Conversations"): the ids a Responses API upstream
resolves (`previous_response_id`, `conversation`, an `item_reference`) are bound to the key they were
handed to, and another key's is a 404 before anything reaches the upstream, on SQLite, Redis and
PostgreSQL. A real tidegate, the stateful Responses API emulator, two keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.emulators.openai_agent_upstream import AgentOpenAIUpstream
from tests.emulators.openai_responses_upstream import ResponsesUpstream
from tests.support.process import MASTER_KEY, ServerProcess, start_server
from tests.support.store_backends import shared_store_url
from tests.support.streams import stream_sse

RESPONSES = "/v1/responses"
SECRET = "my bank PIN is 4321"


def _config(store_url: str, upstream: ResponsesUpstream, chat: AgentOpenAIUpstream) -> str:
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{store_url}"
[providers.oai]
kind = "openai"
base_url = "{upstream.base_url}"
responses = true
[providers.chat]
kind = "openai"
base_url = "{chat.base_url}"
[models.gpt]
routes = [{{ provider = "oai", model = "recall" }}]
[models.translated]
routes = [{{ provider = "chat", model = "text" }}]
"""


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[ResponsesUpstream, AgentOpenAIUpstream]]:
    upstream, chat = ResponsesUpstream().start(), AgentOpenAIUpstream().start()
    yield upstream, chat
    upstream.stop()
    chat.stop()


def _key(server: ServerProcess, name: str, **fields: Any) -> dict[str, str]:
    master = {"Authorization": f"Bearer {MASTER_KEY}"}
    resp = httpx.post(server.base_url + "/api/v1/keys", json={"name": name, **fields}, headers=master)
    assert resp.status_code == 201, resp.text
    return {"Authorization": f"Bearer {resp.json()['key']}"}


def _post(server: ServerProcess, headers: dict[str, str], body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.base_url + RESPONSES, json=body, headers=headers, timeout=30)


def _text(answer: dict[str, Any]) -> str:
    return "".join(p["text"] for item in answer["output"] if item["type"] == "message" for p in item["content"])


def _refused(resp: httpx.Response, where: str) -> None:
    assert resp.status_code == 404, resp.text
    error = resp.json()["error"]
    assert error["code"] == "response_not_found" and error["type"] == "invalid_request_error"
    assert f"'{where}'" in error["message"] and "4321" not in resp.text


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
def test_another_keys_conversation_is_a_404_before_the_upstream(
    backend: str, tmp_path: Path, upstreams: tuple[ResponsesUpstream, AgentOpenAIUpstream]
) -> None:
    upstream, chat = upstreams
    with shared_store_url(backend, tmp_path, "owners") as url:
        server = start_server(tmp_path / "gw", _config(url, upstream, chat))
        try:
            owner, other, admin = _key(server, "o"), _key(server, "n"), _key(server, "a", admin=True)
            first = stream_sse(server.base_url + RESPONSES, {"model": "gpt", "input": SECRET, "stream": True}, owner)
            assert first.status == 200
            final = orjson.loads(first.events[-1].data)
            assert first.events[-1].event == "response.completed" and final["response"]["id"].startswith("resp_emu")
            rid, item = final["response"]["id"], final["response"]["output"][0]["id"]

            # the owner continues at once: bound before the terminal event went out, streaming or not
            again = _post(server, owner, {"model": "gpt", "input": "what did I say?", "previous_response_id": rid})
            assert again.status_code == 200, again.text
            assert _text(again.json()) == f"You said: {SECRET} | what did I say?"
            nested = again.json()["id"]
            ref = {"model": "gpt", "input": [{"type": "item_reference", "id": item}], "stream": True}
            assert stream_sse(server.base_url + RESPONSES, ref, owner).status == 200

            seen = len(upstream.requests)
            for who in (other, admin):  # an admin key gets no exception (docs/security.md)
                for prev in (rid, nested, "resp_never_made"):
                    body = {"model": "gpt", "input": "what did I say?", "previous_response_id": prev}
                    _refused(_post(server, who, body), "previous_response_id")
                    _refused(_post(server, who, {**body, "stream": True}), "previous_response_id")
                item_ref = {"model": "gpt", "input": ["x", {"type": "item_reference", "id": item}]}
                item_ref["input"][0] = {"role": "user", "content": "x"}
                _refused(_post(server, who, item_ref), "input[1].id")
                _refused(_post(server, who, {**item_ref, "model": "translated"}), "input[1].id")
            assert len(upstream.requests) == seen  # nothing reached the upstream
        finally:
            server.stop()


def test_a_conversation_the_gateway_never_handed_out_is_refused(
    tmp_path: Path, upstreams: tuple[ResponsesUpstream, AgentOpenAIUpstream]
) -> None:
    upstream, chat = upstreams
    server = start_server(tmp_path / "gw", _config(f"sqlite:///{tmp_path / 'gw.db'}", upstream, chat))
    try:
        key = _key(server, "o")
        # made with the upstream's own credentials (an operator's), never through the gateway
        conv = httpx.post(upstream.base_url + "/conversations", json={}).json()["id"]
        seen = len(upstream.requests)
        for value in (conv, {"id": conv}):
            _refused(_post(server, key, {"model": "gpt", "input": "hi", "conversation": value}), "conversation")
        assert len(upstream.requests) == seen
        bad = _post(server, key, {"model": "gpt", "input": "hi", "previous_response_id": 7})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    finally:
        server.stop()


def test_a_translated_routes_own_ids_belong_to_their_key(
    tmp_path: Path, upstreams: tuple[ResponsesUpstream, AgentOpenAIUpstream]
) -> None:
    upstream, chat = upstreams
    server = start_server(tmp_path / "gw", _config(f"sqlite:///{tmp_path / 'gw.db'}", upstream, chat))
    try:
        owner, other = _key(server, "o"), _key(server, "n")
        made = openai.OpenAI(base_url=server.base_url + "/v1", api_key=owner["Authorization"][7:])
        rid = made.responses.create(model="translated", input="hi").id
        assert rid.startswith("resp_")
        body = {"model": "translated", "input": "and?", "previous_response_id": rid}
        mine = _post(server, owner, body)  # the owner's: the route's refusal of the field, by name
        assert mine.status_code == 400 and mine.json()["error"]["code"] == "unsupported_parameter"
        assert "'previous_response_id'" in mine.json()["error"]["message"]
        _refused(_post(server, other, body), "previous_response_id")
        _refused(_post(server, other, {**body, "model": "gpt"}), "previous_response_id")
    finally:
        server.stop()
