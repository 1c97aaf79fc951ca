"""Agent sessions in the generation record and `GET /api/v1/sessions` (docs/sessions.md):
each door's hints reach the record on SQLite, Redis and PostgreSQL through a real gateway, with the
session the precedence picks, the agent its User-Agent or its hints' shape names, and no
credential-named metadata; the sessions list groups them, all keys' for an admin, a key's own for it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import ServerProcess, running_server
from tests.support.records import fetch_record
from tests.support.store_backends import shared_store_url

HI = [{"role": "user", "content": "hi"}]
CODEX_UA = "codex_exec/0.169.0 (Ubuntu 24.4.0; x86_64) xterm (codex_exec; 0.169.0)"
GEMINI_UA = "GeminiCLI/0.61.0/chat-emu (linux; x64)"


@pytest.fixture(scope="module", params=["sqlite", "redis", "postgres"])
def server(
    request: pytest.FixtureRequest, emu: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp(f"sessions-{request.param}")
    with shared_store_url(request.param, tmp, "sessions") as url:
        config = f"""
[server]
host = "127.0.0.1"
[store]
url = "{url}"
[providers.emu]
kind = "openai"
base_url = "{emu.base_url}"
[models."chat-emu"]
routes = [{{ provider = "emu", model = "text" }}]
pricing = {{ prompt = 1.0, completion = 2.0 }}
[models."other-emu"]
routes = [{{ provider = "emu", model = "text" }}]
[models."down-emu"]
routes = [{{ provider = "emu", model = "http-500" }}]
"""
        with running_server(tmp, config) as gateway:
            yield gateway


def post(server: ServerProcess, path: str, body: dict[str, Any], **headers: str) -> str:
    """The generation id of a completed request."""
    r = httpx.post(server.base_url + path, json=body, headers={**server.headers, **headers}, timeout=30)
    assert r.status_code == 200, r.text
    return r.headers["x-generation-id"]


def test_the_chat_doors_hints_reach_the_record(server: ServerProcess) -> None:
    body = {
        "model": "chat-emu",
        "messages": HI,
        "prompt_cache_key": "chat-pck-1",
        "user": "alice",
        "metadata": {"run": "r1", "api_token": "tg-must-not-be-stored"},
    }
    got = fetch_record(server, post(server, "/v1/chat/completions", body))
    assert got["agent_session"] == "chat-pck-1"  # prompt_cache_key before user
    assert got["hints"] == {
        "agent": "other",
        "prompt_cache_key": "chat-pck-1",
        "user": "alice",
        "metadata": {"run": "r1"},
    }
    only_user = fetch_record(
        server, post(server, "/v1/chat/completions", {"model": "chat-emu", "messages": HI, "user": "bob"})
    )
    assert only_user["agent_session"] == "bob" and only_user["hints"] == {"agent": "other", "user": "bob"}
    bare = fetch_record(server, post(server, "/v1/chat/completions", {"model": "chat-emu", "messages": HI}))
    assert bare["agent_session"] is None and bare["hints"] is None


def test_the_responses_doors_hints_reach_the_record(server: ServerProcess) -> None:
    body = {
        "model": "chat-emu",
        "input": "hi",
        "prompt_cache_key": "codex-conv-7",
        "client_metadata": {"originator": "codex_exec"},
        "safety_identifier": "sid-1",
        "user": "carol",
        "metadata": {"task": "t1"},
    }
    got = fetch_record(server, post(server, "/v1/responses", body, **{"user-agent": CODEX_UA}))
    assert got["agent_session"] == "codex-conv-7"
    assert got["hints"] == {
        "agent": "codex",
        "prompt_cache_key": "codex-conv-7",
        "client_metadata": {"originator": "codex_exec"},
        "safety_identifier": "sid-1",
        "user": "carol",
        "metadata": {"task": "t1"},
    }


def test_the_messages_doors_claude_code_session_reaches_the_record(server: ServerProcess) -> None:
    user_id = "user_" + "ab" * 32 + "_account_0f0e_session_5d2c-41aa"
    body = {"model": "chat-emu", "max_tokens": 16, "messages": HI, "metadata": {"user_id": user_id}}
    got = fetch_record(server, post(server, "/v1/messages", body, **{"anthropic-version": "2023-06-01"}))
    assert got["agent_session"] == "5d2c-41aa"  # the session part, by its shape: Claude Code
    assert got["hints"] == {"agent": "claude-code", "metadata": {"user_id": user_id}}
    shaped = '{"device_id":"d1","account_uuid":"","session_id":"9b7e-json"}'
    body["metadata"] = {"user_id": shaped}
    got = fetch_record(
        server, post(server, "/v1/messages", body, **{"user-agent": "claude-cli/2.1.328 (external, cli)"})
    )
    assert got["agent_session"] == "9b7e-json" and got["hints"]["agent"] == "claude-code"
    body["metadata"] = {"user_id": "plain-user"}
    got = fetch_record(server, post(server, "/v1/messages", body))
    assert got["agent_session"] == "plain-user" and got["hints"]["agent"] == "other"


def test_the_gemini_door_has_no_session_but_names_its_agent(server: ServerProcess) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    got = fetch_record(
        server, post(server, "/v1beta/models/chat-emu:generateContent", body, **{"user-agent": GEMINI_UA})
    )
    assert got["agent_session"] is None and got["hints"] == {"agent": "gemini-cli"}


def test_hints_are_capped_in_size(server: ServerProcess) -> None:
    body = {
        "model": "chat-emu",
        "input": "hi",
        "prompt_cache_key": "k" * 5000,
        "metadata": {f"m{i}": "v" * 500 for i in range(16)},
    }
    got = fetch_record(server, post(server, "/v1/responses", body))
    assert got["agent_session"] == "k" * 256
    assert got["hints"] == {"agent": "other", "prompt_cache_key": "k" * 256, "truncated": True}


def test_sessions_lists_each_session_and_a_key_sees_its_own(server: ServerProcess) -> None:
    since = time.time()
    for model in ("chat-emu", "other-emu", "chat-emu"):
        post(
            server,
            "/v1/responses",
            {"model": model, "input": "hi", "prompt_cache_key": "listed-1"},
            **{"user-agent": CODEX_UA},
        )
    made = httpx.post(server.base_url + "/api/v1/keys", json={"name": "sessions-own"}, headers=server.headers)
    assert made.status_code in (200, 201), made.text
    own = ServerProcess(
        server.base_url, made.json()["key"], server.proc, server.workdir, server.config_path, server.log_path
    )
    post(own, "/v1/chat/completions", {"model": "chat-emu", "messages": HI, "user": "own-user"})

    listed = httpx.get(f"{server.base_url}/api/v1/sessions?since={since}", headers=server.headers)
    assert listed.status_code == 200, listed.text
    data = {s["session"]: s for s in listed.json()["data"]}
    assert listed.json()["object"] == "list" and set(data) == {"listed-1", "own-user"}
    s = data["listed-1"]
    assert s["agent"] == "codex" and s["requests"] == 3 and s["models"] == ["chat-emu", "other-emu"]
    assert s["input_tokens"] > 0 and s["output_tokens"] > 0 and s["cost"] > 0 and s["failed"] == 0
    assert since <= s["first_at"] <= s["last_at"] <= time.time()
    assert list(data) == ["own-user", "listed-1"]  # the most recently active first

    mine = httpx.get(f"{server.base_url}/api/v1/sessions?since={since}", headers=own.headers).json()["data"]
    assert [m["session"] for m in mine] == ["own-user"] and mine[0]["agent"] == "other"
    one = httpx.get(f"{server.base_url}/api/v1/sessions?since={since}&limit=1", headers=server.headers).json()["data"]
    assert [o["session"] for o in one] == ["own-user"]
    later = httpx.get(f"{server.base_url}/api/v1/sessions?since={time.time() + 60}", headers=server.headers)
    assert later.json()["data"] == []
    for bad in ("since=yesterday", "limit=0", "limit=201", "since=-1"):
        r = httpx.get(f"{server.base_url}/api/v1/sessions?{bad}", headers=server.headers)
        assert r.status_code == 400 and r.json()["error"]["code"], r.text


def test_a_sessions_failed_requests_are_counted(server: ServerProcess) -> None:
    """A session whose requests failed before any token is not a quiet 0-token session: `failed`
    counts them (the console marks the session failed)."""
    since = time.time()
    body = {"model": "down-emu", "messages": HI, "prompt_cache_key": "failing-1"}
    for _ in range(2):
        r = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=server.headers, timeout=30)
        assert r.status_code >= 500, r.text
    post(server, "/v1/chat/completions", {"model": "chat-emu", "messages": HI, "prompt_cache_key": "mixed-1"})
    r = httpx.post(
        server.base_url + "/v1/chat/completions", json={**body, "prompt_cache_key": "mixed-1"}, headers=server.headers
    )
    assert r.status_code >= 500, r.text
    listed = httpx.get(f"{server.base_url}/api/v1/sessions?since={since}", headers=server.headers)
    data = {s["session"]: s for s in listed.json()["data"]}
    failing, mixed = data["failing-1"], data["mixed-1"]
    assert failing["requests"] == 2 and failing["failed"] == 2 and failing["output_tokens"] == 0, failing
    assert mixed["requests"] == 2 and mixed["failed"] == 1 and mixed["output_tokens"] > 0, mixed
