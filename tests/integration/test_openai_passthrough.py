"""`openai` kind end to end: a real tidegate server in front of the fault-injecting OpenAI emulator.

Passthrough bytes, include_usage rules, usage estimation, the non-stream path, fallback before the
commit point (with the headers naming what served) and the JSON errors when every route failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, free_port, running_server, sqlite_url
from tests.support.records import wait_record
from tests.support.streams import SSEResult, stream_sse

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
EMU_KEY = "sk-emu-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def server(emu: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("openai-passthrough")
    dead = f"http://127.0.0.1:{free_port()}/v1"
    providers = {
        "emu": {"kind": "openai", "base_url": emu.base_url, "api_key_env": "EMU_KEY"},
        "emu2": {"kind": "openai", "base_url": emu.base_url, "headers": {"x-extra": "yes"}},
        "dead": {"kind": "openai", "base_url": dead},
        # by host name: aiohttp's default cookie jar ignores cookies from IP addresses
        "emu-by-name": {"kind": "openai", "base_url": emu.base_url.replace("127.0.0.1", "localhost")},
    }
    models: dict[str, list[tuple[str, str]]] = {
        f"p/{s}": [("emu", s)]
        for s in ("text", "reasoning", "reasoning_content", "reasoning_details", "tools", "no-usage")
    }
    models["p/by-name"] = [("emu-by-name", "text")]
    for fault in ("http-401", "http-403", "http-429", "http-500", "http-503", "slow-first-byte:5"):
        models[f"fb/{fault}"] = [("emu", fault), ("emu2", "text")]
    models["fb/headers-then-silence"] = [("emu", "headers-then-silence:5"), ("emu2", "text")]
    models["fb/error-first"] = [("emu", "error-first"), ("emu2", "text")]
    models["fb/connect"] = [("dead", "text"), ("emu2", "text")]
    models["fb/http-400"] = [("emu", "http-400"), ("emu2", "text")]
    models["all/429"] = [("emu", "http-429:7"), ("emu2", "http-429:3")]
    models["all/5xx"] = [("emu", "http-500"), ("emu2", "http-503")]
    models["all/401"] = [("emu", "http-401")]
    models["all/timeout"] = [("emu", "slow-first-byte:5"), ("emu2", "slow-first-byte:5")]
    models["all/connect"] = [("dead", "text")]
    config = tidegate_toml(
        sqlite_url(workdir),
        providers,
        models,
        server={"keepalive_s": 30, "upstream_idle_timeout_s": 1.0},
    )
    with running_server(workdir, config, extra_env={"EMU_KEY": EMU_KEY}) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _fresh(emu: OpenAIUpstream) -> None:
    emu.reset()


def chat(server: ServerProcess, model: str, **extra: Any) -> SSEResult:
    body = {"model": model, "messages": HI, "stream": True, **extra}
    return stream_sse(server.base_url + CHAT, body, server.headers, timeout=30)


# ---- passthrough --------------------------------------------------------------------------------
def test_passthrough_bytes_identical(server: ServerProcess, emu: OpenAIUpstream) -> None:
    r = chat(server, "p/text")
    assert r.status == 200 and r.done
    sent = emu.last("text").sent
    received = [e.data.encode() for e in r.events if e.data != "[DONE]"]
    assert received == sent  # upstream usage chunk included, nothing added
    for payload in sent:  # byte level: the exact payload bytes on one data line
        assert b"data: " + payload + b"\n\n" in r.raw
    chunks = r.json_events()
    assert {c["id"] for c in chunks} == {f"chatcmpl-emu{emu.last('text').n}"}
    assert {c["model"] for c in chunks} == {"text"}  # the upstream's model id, not the public one
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    assert r.headers["x-provider"] == "emu" and r.headers["x-served-model"] == "text"
    assert r.headers["x-provider-attempts"] == "1"
    rec = wait_record(server, r.headers["x-generation-id"])
    assert rec["status"] == "completed" and rec["output_text"] == "Hello, world \u00e9\u2713!"
    assert rec["usage"]["prompt_tokens"] == 11 and rec["usage"]["cached_tokens"] == 3
    assert rec["usage_estimated"] is False


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_forwarded_as_named_and_normalised(server: ServerProcess, emu: OpenAIUpstream, field: str) -> None:
    r = chat(server, f"p/{field}")
    assert r.done
    deltas = [c["choices"][0]["delta"] for c in r.json_events() if c["choices"]]
    assert "".join(d.get(field) or "" for d in deltas) == "Let me think \u00fcber it."
    other = "reasoning" if field == "reasoning_content" else "reasoning_content"
    assert not any(other in d for d in deltas)
    assert "".join(d.get("content") or "" for d in deltas) == "42"  # reasoning never in content
    # the non-stream door sees the same reasoning normalised
    resp = httpx.post(
        server.base_url + CHAT, json={"model": f"p/{field}", "messages": HI}, headers=server.headers, timeout=30
    )
    message = resp.json()["choices"][0]["message"]
    assert message["reasoning"] == "Let me think \u00fcber it." and message["content"] == "42"
    assert resp.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] == 5


def test_reasoning_details_normalised_for_non_stream(server: ServerProcess) -> None:
    resp = httpx.post(
        server.base_url + CHAT, json={"model": "p/reasoning_details", "messages": HI}, headers=server.headers
    )
    message = resp.json()["choices"][0]["message"]
    assert message["content"] == "Done."
    assert message["reasoning_details"] == [
        {"type": "reasoning.text", "text": "Thinking.", "index": 0, "signature": "sig-abc"},
        {"type": "reasoning.encrypted", "data": "b3BhcXVl", "index": 1},
    ]


def test_include_usage_injected_when_client_sent_no_stream_options(server: ServerProcess, emu: OpenAIUpstream) -> None:
    r = chat(server, "p/text", logit_bias={"50256": -100}, x_vendor_field={"keep": [1, 2]})
    got = emu.last("text").body
    assert got["stream_options"] == {"include_usage": True} and got["stream"] is True
    assert got["model"] == "text"
    assert got["logit_bias"] == {"50256": -100} and got["x_vendor_field"] == {"keep": [1, 2]}
    chunks = r.json_events()
    usage_chunks = [c for c in chunks if c.get("usage")]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and chunks[-1]["choices"] == []
    assert r.done


@pytest.mark.parametrize("opts", [{"include_usage": False}, {"include_usage": True}, {}])
def test_client_stream_options_win(server: ServerProcess, emu: OpenAIUpstream, opts: dict[str, Any]) -> None:
    r = chat(server, "p/text", stream_options=opts)
    assert emu.last("text").body["stream_options"] == opts
    usage_chunks = [c for c in r.json_events() if c.get("usage")]
    assert len(usage_chunks) == (1 if opts.get("include_usage") else 0)
    assert r.done
    rec = wait_record(server, r.headers["x-generation-id"])
    assert rec["usage_estimated"] is (not opts.get("include_usage"))  # billed either way
    assert rec["usage"]["total_tokens"] > 0


def test_usage_estimated_when_upstream_sends_none(server: ServerProcess, emu: OpenAIUpstream) -> None:
    r = chat(server, "p/no-usage")
    assert r.done
    chunks = r.json_events()
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert chunks[-1]["id"] == f"chatcmpl-emu{emu.last('no-usage').n}"
    assert [c for c in chunks if c.get("usage")] == [chunks[-1]]
    # every upstream payload still forwarded byte for byte before tidegate's usage chunk
    assert [e.data.encode() for e in r.events[:-2]] == emu.last("no-usage").sent
    rec = wait_record(server, r.headers["x-generation-id"])
    assert rec["usage_estimated"] is True and rec["usage"]["completion_tokens"] > 0


def test_auth_header_from_env_and_extra_headers(server: ServerProcess, emu: OpenAIUpstream) -> None:
    chat(server, "p/text")
    assert emu.last("text").headers["authorization"] == f"Bearer {EMU_KEY}"
    chat(server, "fb/http-500")
    second = emu.for_model("text")[-1]
    assert second.headers.get("x-extra") == "yes" and "authorization" not in second.headers


def test_openai_sdk_accumulates_parallel_tool_calls(server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key)
    tools: Any = [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}},
    ]
    with client.chat.completions.stream(model="p/tools", messages=HI, tools=tools) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        ("call_a", "lookup", '{"q": "paris"}'),
        ("call_b", "clock", '{"tz": "UTC"}'),
    ]
    # the non-stream door assembles the same calls from the same stream
    resp = httpx.post(server.base_url + CHAT, json={"model": "p/tools", "messages": HI}, headers=server.headers)
    body = resp.json()
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert [c["function"]["arguments"] for c in body["choices"][0]["message"]["tool_calls"]] == [
        '{"q": "paris"}',
        '{"tz": "UTC"}',
    ]


def test_non_stream_request_streams_upstream(server: ServerProcess, emu: OpenAIUpstream) -> None:
    resp = httpx.post(server.base_url + CHAT, json={"model": "p/text", "messages": HI}, headers=server.headers)
    assert resp.status_code == 200
    body = resp.json()
    assert body["object"] == "chat.completion" and body["model"] == "p/text"
    assert body["choices"][0]["message"]["content"] == "Hello, world \u00e9\u2713!"
    assert body["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    got = emu.last("text").body
    assert got["stream"] is True and got["stream_options"] == {"include_usage": True}


# ---- fallback before the commit point -----------------------------------------------------------------
FALLBACK = [
    ("fb/http-401", "http-401"),
    ("fb/http-403", "http-403"),
    ("fb/http-429", "http-429"),
    ("fb/http-500", "http-500"),
    ("fb/http-503", "http-503"),
    ("fb/slow-first-byte:5", "slow-first-byte"),
    ("fb/headers-then-silence", "headers-then-silence"),
    ("fb/error-first", "error-first"),
    ("fb/connect", None),
]


@pytest.mark.parametrize(("model", "scenario"), FALLBACK, ids=[m for m, _ in FALLBACK])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_fallback_before_commit(
    server: ServerProcess, emu: OpenAIUpstream, model: str, scenario: str | None, stream: bool
) -> None:
    if stream:
        r = chat(server, model)
        assert r.status == 200 and r.done
        headers = r.headers
        assert [c for c in r.json_events() if "error" in c] == []
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in r.json_events() if c["choices"]) == (
            "Hello, world \u00e9\u2713!"
        )
    else:
        resp = httpx.post(server.base_url + CHAT, json={"model": model, "messages": HI}, headers=server.headers)
        assert resp.status_code == 200, resp.text
        headers = resp.headers
        assert resp.json()["choices"][0]["message"]["content"] == "Hello, world \u00e9\u2713!"
    assert headers["x-provider"] == "emu2"
    assert headers["x-served-model"] == "text"
    assert headers["x-provider-attempts"] == "2"
    counts = emu.counts()
    assert counts.get("text") == 1
    if scenario is not None:
        assert counts.get(scenario) == 1
    rec = wait_record(server, headers["x-generation-id"])
    assert rec["status"] == "completed" and rec["provider"] == "emu2" and rec["attempts"] == 2


def test_upstream_400_is_not_retried(server: ServerProcess, emu: OpenAIUpstream) -> None:
    r = chat(server, "fb/http-400")
    assert r.status == 400
    assert orjson.loads(r.raw)["error"]["code"] == "invalid_request"
    assert emu.counts() == {"http-400": 1}


ALL_FAILED = [
    ("all/429", 429, "rate_limited"),
    ("all/5xx", 502, "upstream_error"),
    ("all/401", 502, "upstream_error"),
    ("all/timeout", 504, "upstream_timeout"),
    ("all/connect", 503, "no_provider_available"),
]


@pytest.mark.parametrize(("model", "status", "code"), ALL_FAILED, ids=[m for m, _, _ in ALL_FAILED])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_every_route_failed_is_a_json_error(
    server: ServerProcess, model: str, status: int, code: str, stream: bool
) -> None:
    resp = httpx.post(
        server.base_url + CHAT,
        json={"model": model, "messages": HI, "stream": stream},
        headers=server.headers,
        timeout=30,
    )
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.json()["error"]["code"] == code
    assert EMU_KEY not in resp.text and "emu-secret" not in resp.text
    assert resp.headers["x-generation-id"]
    if status == 429:
        assert resp.headers["retry-after"] == "3"  # from the upstream (the shortest wait)
    rec = wait_record(server, resp.headers["x-generation-id"])
    assert rec["status"] == "failed"
    assert EMU_KEY not in orjson.dumps(rec).decode()


def test_cookies_an_upstream_sets_never_reach_another_request(server: ServerProcess, emu: OpenAIUpstream) -> None:
    """The upstream sets a cookie on every answer (as Cloudflare does in front of api.openai.com); one
    tenant's cookie must not ride on the next request, whoever sends it."""
    body = {"model": "p/by-name", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):
        assert stream_sse(server.base_url + "/v1/chat/completions", body, server.headers).done
    recent = emu.requests[-3:]
    assert all("cookie" not in r.headers for r in recent), [r.headers.get("cookie") for r in recent]
