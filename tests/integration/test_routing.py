"""Routing end to end (docs/api-operations.md §12): a real `tidegate serve` in front of the OpenAI emulator.

Weighted splits, least latency, circuit breakers, a policy model (`tidegate/auto`) and data residency
(the request's `provider` object), seen from the headers, the records and the emulator's request log.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import ServerProcess, sqlite_url, started_server
from tests.support.records import wait_record

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def config(workdir: Any, emu: OpenAIUpstream) -> str:
    url = emu.base_url
    return f"""
[server]
host = "127.0.0.1"
upstream_idle_timeout_s = 5
breaker_failures = 0

[store]
url = "{sqlite_url(workdir)}"

[providers.a]
kind = "openai"
base_url = "{url}"
[providers.b]
kind = "openai"
base_url = "{url}"
[providers.c]
kind = "openai"
base_url = "{url}"
[providers.eu1]
kind = "openai"
base_url = "{url}"
region = "eu-central-1"
jurisdiction = "eu"
[providers.eu2]
kind = "openai"
base_url = "{url}"
region = "eu-west-1"
jurisdiction = "eu"
[providers.us1]
kind = "openai"
base_url = "{url}"
region = "us-east-1"
jurisdiction = "us"

[models."split"]
strategy = "weighted"
routes = [{{ provider = "a", model = "text", weight = 3 }}, {{ provider = "b", model = "text" }}]

[models."fast"]
strategy = "least_latency"
routes = [{{ provider = "a", model = "late-text:0.3" }}, {{ provider = "b", model = "text:1" }}]

[models."flaky"]
breaker_failures = 2
breaker_cooldown_s = 1
routes = [{{ provider = "c", model = "http-500" }}, {{ provider = "b", model = "text" }}]

[models."down"]
breaker_failures = 1
breaker_cooldown_s = 60
routes = [{{ provider = "c", model = "http-503" }}]

[models."small"]
context_length = 200
pricing = {{ prompt = 0.1, completion = 0.2 }}
routes = [{{ provider = "a", model = "text" }}]

[models."tooly"]
capabilities = ["tools"]
context_length = 200
pricing = {{ prompt = 1.0, completion = 2.0 }}
routes = [{{ provider = "b", model = "text" }}]

[models."big"]
capabilities = ["tools"]
context_length = 100000
pricing = {{ prompt = 5.0, completion = 10.0 }}
routes = [{{ provider = "c", model = "text", pricing = {{ prompt = 4.0, completion = 8.0 }} }}]

[models."tidegate/auto"]
type = "router"
policy = "cheapest"
candidates = ["big", "tooly", "small"]

[models."resident"]
routes = [{{ provider = "eu1", model = "http-500" }}, {{ provider = "us1", model = "text" }}]

[models."anywhere"]
routes = [{{ provider = "us1", model = "text" }}, {{ provider = "eu2", model = "text" }}]
"""


@pytest.fixture(scope="module")
def server(emu: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with started_server(tmp_path_factory, "routing", lambda workdir: config(workdir, emu)) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _fresh(emu: OpenAIUpstream) -> None:
    emu.reset()


def chat(client: httpx.Client, server: ServerProcess, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": HI, **extra}
    return client.post(server.base_url + CHAT, json=body, headers=server.headers, timeout=30)


def routes_of(server: ServerProcess, model: str) -> dict[str, dict[str, Any]]:
    r = httpx.get(server.base_url + "/api/v1/routes", headers=server.headers)
    assert r.status_code == 200, r.text
    return {e["provider"]: e for e in r.json()["data"] if e["model"] == model}


def test_weighted_split_follows_the_weights(server: ServerProcess) -> None:
    served: dict[str, int] = {}
    with httpx.Client() as client:
        for _ in range(400):
            r = chat(client, server, "split")
            assert r.status_code == 200, r.text
            served[r.headers["x-provider"]] = served.get(r.headers["x-provider"], 0) + 1
    assert served.keys() == {"a", "b"}
    assert abs(served["a"] / 400 - 0.75) <= 0.05, served


def test_least_latency_moves_to_the_faster_route(server: ServerProcess) -> None:
    with httpx.Client() as client:
        first = [chat(client, server, "fast").headers["x-provider"] for _ in range(2)]
        later = [chat(client, server, "fast").headers["x-provider"] for _ in range(6)]
    assert sorted(first) == ["a", "b"]  # each unmeasured route is measured once
    assert later == ["b"] * 6
    stats = routes_of(server, "fast")
    assert stats["a"]["ttft_ms_p50"] >= 300 > stats["b"]["ttft_ms_p50"]


def test_breaker_opens_skips_and_half_opens(server: ServerProcess, emu: OpenAIUpstream) -> None:
    with httpx.Client() as client:
        for _ in range(2):
            r = chat(client, server, "flaky")
            assert r.status_code == 200 and r.headers["x-provider"] == "b"
            assert r.headers["x-provider-attempts"] == "2"
        assert emu.counts().get("http-500") == 2
        assert routes_of(server, "flaky")["c"]["state"] == "open"
        for _ in range(3):  # skipped while open: the failing route sees nothing
            r = chat(client, server, "flaky")
            assert r.status_code == 200 and r.headers["x-provider-attempts"] == "1"
        assert emu.counts().get("http-500") == 2
        time.sleep(1.1)
        assert routes_of(server, "flaky")["c"]["state"] == "half_open"
        r = chat(client, server, "flaky")  # the one probe: fails, so open again
        assert r.status_code == 200 and r.headers["x-provider-attempts"] == "2"
        assert emu.counts().get("http-500") == 3
        assert routes_of(server, "flaky")["c"]["state"] == "open"
        assert chat(client, server, "flaky").headers["x-provider-attempts"] == "1"
        assert emu.counts().get("http-500") == 3


def test_every_breaker_open_is_503_no_provider_available(server: ServerProcess, emu: OpenAIUpstream) -> None:
    with httpx.Client() as client:
        assert chat(client, server, "down").status_code == 502
        r = chat(client, server, "down")
    assert r.status_code == 503
    error = r.json()["error"]
    assert error["code"] == "no_provider_available"
    assert "circuit breaker is open" in error["message"] and "c/http-503" in error["message"]
    assert emu.counts().get("http-503") == 1


def test_routes_endpoint_is_admin_only(server: ServerProcess) -> None:
    r = httpx.get(server.base_url + "/api/v1/routes", headers={"Authorization": "Bearer sk-not-a-key"})
    assert r.status_code == 401
    entry = routes_of(server, "resident")["eu1"]
    assert entry["region"] == "eu-central-1" and entry["jurisdiction"] == "eu"
    assert {"state", "ttft_ms_p50", "error_rate", "in_flight"} <= entry.keys()


def test_auto_picks_by_what_the_request_needs(server: ServerProcess) -> None:
    with httpx.Client() as client:
        plain = chat(client, server, "tidegate/auto")
        tools = chat(client, server, "tidegate/auto", tools=TOOLS)
        long = chat(client, server, "tidegate/auto", messages=[{"role": "user", "content": "word " * 400}])
    assert [r.status_code for r in (plain, tools, long)] == [200, 200, 200]
    assert plain.headers["x-provider"] == "a"  # the cheapest candidate
    assert tools.headers["x-provider"] == "b"  # the cheapest with tools
    assert long.headers["x-provider"] == "c"  # the one whose context holds the prompt
    rec = wait_record(server, long.headers["x-generation-id"])
    assert rec["model"] == "tidegate/auto"
    assert rec["route_reason"].startswith("policy=cheapest chose big")
    assert "context_length 200" in rec["route_reason"]
    usage = rec["usage"]
    assert rec["cost"] == pytest.approx((usage["prompt_tokens"] * 4.0 + usage["completion_tokens"] * 8.0) / 1e6)
    assert "needs tools" in wait_record(server, tools.headers["x-generation-id"])["route_reason"]


def test_models_lists_router_models_with_candidates(server: ServerProcess) -> None:
    data = httpx.get(server.base_url + "/v1/models", headers=server.headers).json()["data"]
    auto = next(m for m in data if m["id"] == "tidegate/auto")
    assert auto["type"] == "router" and auto["candidates"] == ["big", "tooly", "small"]
    assert auto["policy"] == "cheapest"


def test_residency_never_falls_back_outside_the_jurisdiction(server: ServerProcess, emu: OpenAIUpstream) -> None:
    with httpx.Client() as client:
        r = chat(client, server, "resident", provider={"jurisdictions": ["eu"]})
    assert r.status_code == 503
    error = r.json()["error"]
    assert error["code"] == "no_provider_available"
    assert "provider.jurisdictions=['eu'] excluded us1" in error["message"]
    assert emu.counts() == {"http-500": 1}  # no attempt in the US
    rec = wait_record(server, r.headers["x-generation-id"])
    assert rec["attempts"] == 1 and rec["provider"] is None
    assert "excluded by provider.jurisdictions" in rec["route_reason"]


def test_a_keys_jurisdictions_hold_like_the_requests(server: ServerProcess, emu: OpenAIUpstream) -> None:
    """A key made with `jurisdictions` by the keys API (docs/api-operations.md §11, §12) is never served
    outside them."""
    made = httpx.post(
        server.base_url + "/api/v1/keys", json={"name": "eu-team", "jurisdictions": ["eu"]}, headers=server.headers
    )
    assert made.status_code == 201 and made.json()["jurisdictions"] == ["eu"]
    eu_key = made.json()["key"]
    headers = {"Authorization": f"Bearer {eu_key}"}
    with httpx.Client() as client:
        r = client.post(server.base_url + CHAT, json={"model": "resident", "messages": HI}, headers=headers)
        assert r.status_code == 503
        assert "the key's jurisdictions=['eu'] excluded us1" in r.json()["error"]["message"]
        assert emu.counts() == {"http-500": 1}  # the EU route failed; no attempt in the US
        anywhere = client.post(server.base_url + CHAT, json={"model": "anywhere", "messages": HI}, headers=headers)
    assert anywhere.status_code == 200 and anywhere.headers["x-served-region"].startswith("eu-")


def test_without_a_rule_the_fallback_leaves_the_region(server: ServerProcess) -> None:
    with httpx.Client() as client:
        r = chat(client, server, "resident")
    assert r.status_code == 200
    assert r.headers["x-provider"] == "us1" and r.headers["x-served-region"] == "us-east-1"


def test_provider_object_filters_orders_and_is_not_forwarded(server: ServerProcess, emu: OpenAIUpstream) -> None:
    with httpx.Client() as client:
        eu = chat(client, server, "anywhere", provider={"jurisdictions": ["eu"]})
        ordered = chat(client, server, "anywhere", provider={"order": ["eu2", "us1"]})
        ignored = chat(client, server, "anywhere", provider={"ignore": ["us1"]})
        only = chat(client, server, "anywhere", provider={"only": ["nowhere"]})
        bad = chat(client, server, "anywhere", provider={"sort": "price"})
    assert eu.headers["x-served-region"] == "eu-west-1"
    assert ordered.headers["x-provider"] == "eu2" and ignored.headers["x-provider"] == "eu2"
    assert only.status_code == 503 and "provider.only excluded" in only.json()["error"]["message"]
    assert bad.status_code == 400 and "provider.sort" in bad.json()["error"]["message"]
    assert all("provider" not in rec.body for rec in emu.requests)


def test_allow_fallbacks_false_tries_exactly_one_provider_on_every_door(
    server: ServerProcess, emu: OpenAIUpstream
) -> None:
    """`resident` fails on eu1 before the first byte and would fall back to us1: not with
    `allow_fallbacks: false`, on the chat, Responses and native doors, streamed or not."""
    no_fallback = {"allow_fallbacks": False}
    bodies = [
        (CHAT, {"model": "resident", "messages": HI, "provider": no_fallback}),
        (CHAT, {"model": "resident", "messages": HI, "provider": no_fallback, "stream": True}),
        ("/v1/responses", {"model": "resident", "input": "hi", "provider": no_fallback}),
        ("/api/v1/llm/responses", {"model": "resident", "input": "hi", "stream": False, "provider": no_fallback}),
    ]
    with httpx.Client() as client:
        for path, body in bodies:
            emu.reset()
            r = client.post(server.base_url + path, json=body, headers=server.headers, timeout=30)
            assert r.status_code >= 500, (path, r.text)
            assert r.headers["x-provider-attempts"] == "1", path
            assert emu.counts() == {"http-500": 1}, path  # us1 never tried
            rec = wait_record(server, r.headers["x-generation-id"])
            assert rec["attempts"] == 1 and "provider.allow_fallbacks=false: only eu1" in rec["route_reason"]
        allowed = chat(client, server, "resident", provider={"allow_fallbacks": True})
    assert allowed.status_code == 200 and allowed.headers["x-provider"] == "us1"


def test_native_door_takes_the_provider_object(server: ServerProcess, emu: OpenAIUpstream) -> None:
    body = {"model": "resident", "input": "hi", "stream": False, "provider": {"jurisdictions": ["eu"]}}
    with httpx.Client() as client:
        r = client.post(server.base_url + "/api/v1/llm/responses", json=body, headers=server.headers, timeout=30)
        bad = client.post(
            server.base_url + "/api/v1/llm/responses",
            json={**body, "provider": {"sort": "price"}},
            headers=server.headers,
            timeout=30,
        )
    assert r.status_code == 503 and "provider.jurisdictions=['eu'] excluded us1" in r.json()["error"]["message"]
    assert emu.counts() == {"http-500": 1}
    assert bad.status_code == 400 and "provider.sort" in bad.json()["error"]["message"]


def test_responses_door_takes_the_provider_object(server: ServerProcess) -> None:
    body = {"model": "anywhere", "input": "hi", "provider": {"only": ["eu2"]}}
    r = httpx.post(server.base_url + "/v1/responses", json=body, headers=server.headers, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["x-provider"] == "eu2" and r.headers["x-served-region"] == "eu-west-1"


def test_a_repeated_idempotency_key_answers_with_the_region_too(server: ServerProcess) -> None:
    body = {"model": "anywhere", "messages": HI, "provider": {"only": ["eu2"]}}
    headers = {**server.headers, "Idempotency-Key": f"routing-{time.time_ns()}"}
    url = server.base_url + CHAT
    first = httpx.post(url, json=body, headers=headers, timeout=30)
    again = httpx.post(url, json=body, headers=headers, timeout=30)
    assert first.status_code == again.status_code == 200
    assert again.headers.get("idempotent-replayed") == "true"
    assert first.headers["x-served-region"] == again.headers["x-served-region"] == "eu-west-1"
