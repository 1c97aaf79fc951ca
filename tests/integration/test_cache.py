"""The exact response cache through real gateways (docs/api-edges.md §18): a miss stored and served
again on every door in its own shape (byte-valid for the official SDKs), never across keys, never an
error, a failure, a cancel or a cut answer, expiring with its TTL, shared by instances on Redis and
PostgreSQL, the request's Cache-Control, the purge and stats APIs, and the record and budget of a hit."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types

from tests.emulators.anthropic_upstream import AnthropicFamilyEmulator
from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import MASTER_KEY, ServerProcess, running_server, start_server
from tests.support.records import fetch_record
from tests.support.store_backends import shared_store_url

CHAT = "/v1/chat/completions"
MASTER = {"Authorization": f"Bearer {MASTER_KEY}"}
TEXT = "Hello, world \u00e9\u2713!"
ASK = {"model": "cached", "messages": [{"role": "user", "content": "hi"}]}


def _config(store_url: str, emu: OpenAIUpstream, ttl_s: float = 300.0) -> str:
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{store_url}"
[providers.emu]
kind = "openai"
base_url = "{emu.base_url}"
[models.cached]
routes = [{{ provider = "emu", model = "text" }}]
pricing = {{ prompt = 1000, completion = 1000 }}
cache = {{ ttl_s = {ttl_s}, max_bytes = 65536 }}
[models.short]
routes = [{{ provider = "emu", model = "text" }}]
cache = {{ ttl_s = 1, max_bytes = 65536 }}
[models.tiny]
routes = [{{ provider = "emu", model = "text" }}]
cache = {{ ttl_s = 300, max_bytes = 10 }}
[models.cut]
routes = [{{ provider = "emu", model = "cut" }}]
cache = {{ ttl_s = 300, max_bytes = 65536 }}
[models.broken]
routes = [{{ provider = "emu", model = "error-mid" }}]
cache = {{ ttl_s = 300, max_bytes = 65536 }}
[models.failing]
routes = [{{ provider = "emu", model = "http-500" }}]
cache = {{ ttl_s = 300, max_bytes = 65536 }}
[models.slow]
routes = [{{ provider = "emu", model = "slow:0.05" }}]
cache = {{ ttl_s = 300, max_bytes = 65536 }}
[models.plain]
routes = [{{ provider = "emu", model = "text" }}]
"""


@pytest.fixture
def emu() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as upstream:
        yield upstream


@pytest.fixture
def gateway(tmp_path: Path, emu: OpenAIUpstream) -> Iterator[ServerProcess]:
    with running_server(tmp_path / "gw", _config(f"sqlite:///{tmp_path / 'gw.db'}", emu)) as server:
        yield server


def _key(server: ServerProcess, **fields: Any) -> str:
    resp = httpx.post(server.base_url + "/api/v1/keys", json={"name": "t", **fields}, headers=MASTER)
    assert resp.status_code == 201, resp.text
    secret: str = resp.json()["key"]
    return secret


def _post(server: ServerProcess, secret: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    auth = {"Authorization": f"Bearer {secret}", **headers}
    return httpx.post(server.base_url + CHAT, json=body, headers=auth, timeout=30)


def test_a_complete_answer_is_stored_and_served_again_as_a_new_generation(
    gateway: ServerProcess, emu: OpenAIUpstream
) -> None:
    secret = _key(gateway)
    first = _post(gateway, secret, ASK)
    assert first.status_code == 200 and first.headers["x-cache"] == "miss"
    again = _post(gateway, secret, {**ASK, "user": "someone", "metadata": {"a": "b"}})
    assert again.status_code == 200, again.text
    assert again.headers["x-cache"] == "hit" and again.headers["x-provider"] == "cache"
    assert len(emu.requests) == 1  # the hit never reached the upstream
    one, two = first.json(), again.json()
    assert two["choices"][0]["message"]["content"] == TEXT == one["choices"][0]["message"]["content"]
    assert two["usage"] == one["usage"] and two["id"] != one["id"]
    record = fetch_record(gateway, again.headers["x-generation-id"])
    assert record["status"] == "completed" and record["provider"] == "cache" and record["cost"] == 0
    original = fetch_record(gateway, first.headers["x-generation-id"])
    assert original["cost"] > 0
    assert record["cached_from"] == {"generation_id": original["id"], "usage": original["usage"]}
    # a different answer-changing field is another entry
    other = _post(gateway, secret, {**ASK, "temperature": 0.5})
    assert other.headers["x-cache"] == "miss" and len(emu.requests) == 2


def test_entries_are_never_shared_across_keys(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    a, b = _key(gateway), _key(gateway)
    assert _post(gateway, a, ASK).headers["x-cache"] == "miss"
    assert _post(gateway, b, ASK).headers["x-cache"] == "miss"
    assert _post(gateway, a, ASK).headers["x-cache"] == "hit"
    assert _post(gateway, b, ASK).headers["x-cache"] == "hit"
    assert len(emu.requests) == 2


def test_a_model_without_cache_has_no_x_cache(gateway: ServerProcess) -> None:
    resp = _post(gateway, _key(gateway), {**ASK, "model": "plain"})
    assert resp.status_code == 200 and "x-cache" not in resp.headers


def test_a_keys_own_setting_wins_over_the_models(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    on = _key(gateway, cache={"ttl_s": 60, "max_bytes": 65536})
    off = _key(gateway, cache=False)
    bad = httpx.post(gateway.base_url + "/api/v1/keys", json={"name": "x", "cache": {"ttl_s": 0}}, headers=MASTER)
    assert bad.status_code == 400 and "ttl_s" in bad.json()["error"]["message"]
    shown = httpx.get(gateway.base_url + "/api/v1/keys", headers=MASTER).json()["data"]
    assert {"ttl_s": 60.0, "max_bytes": 65536} in [k["cache"] for k in shown]
    plain = {**ASK, "model": "plain"}
    assert [_post(gateway, on, plain).headers["x-cache"] for _ in range(2)] == ["miss", "hit"]
    assert ["x-cache" in _post(gateway, off, ASK).headers for _ in range(2)] == [False, False]
    assert len(emu.requests) == 3


@pytest.mark.parametrize("model", ["cut", "broken", "failing"])
def test_errors_failures_and_cut_answers_are_not_stored(
    gateway: ServerProcess, emu: OpenAIUpstream, model: str
) -> None:
    secret = _key(gateway)
    for _ in range(2):
        with httpx.stream(
            "POST",
            gateway.base_url + CHAT,
            json={**ASK, "model": model, "stream": True},
            headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
        ) as resp:
            resp.read()
            assert resp.headers.get("x-cache", "miss") == "miss"
    assert len(emu.requests) == 2


def test_a_cancelled_stream_is_not_stored(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    secret = _key(gateway)
    body = {**ASK, "model": "slow", "stream": True}
    auth = {"Authorization": f"Bearer {secret}"}
    for _ in range(2):
        with httpx.stream("POST", gateway.base_url + CHAT, json=body, headers=auth, timeout=30) as resp:
            assert resp.headers["x-cache"] == "miss"
            for _line in resp.iter_lines():
                break  # the client goes away mid-stream
        time.sleep(0.5)
    assert len(emu.requests) == 2


def test_an_answer_larger_than_max_bytes_is_not_stored(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    secret = _key(gateway)
    assert _post(gateway, secret, {**ASK, "model": "tiny"}).headers["x-cache"] == "miss"
    assert _post(gateway, secret, {**ASK, "model": "tiny"}).headers["x-cache"] == "miss"


def test_an_entry_expires_with_its_ttl(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    secret = _key(gateway)
    body = {**ASK, "model": "short"}
    assert _post(gateway, secret, body).headers["x-cache"] == "miss"
    assert _post(gateway, secret, body).headers["x-cache"] == "hit"
    time.sleep(1.2)
    assert _post(gateway, secret, body).headers["x-cache"] == "miss"
    assert len(emu.requests) == 2


def test_cache_control_no_cache_and_no_store(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    secret = _key(gateway)
    assert _post(gateway, secret, ASK, **{"Cache-Control": "no-store"}).headers["x-cache"] == "miss"
    assert _post(gateway, secret, ASK).headers["x-cache"] == "miss"  # nothing was stored
    assert _post(gateway, secret, ASK, **{"Cache-Control": "no-cache"}).headers["x-cache"] == "bypass"
    assert _post(gateway, secret, ASK).headers["x-cache"] == "hit"
    both = _post(gateway, secret, ASK, **{"Cache-Control": "no-cache, no-store"})
    assert both.headers["x-cache"] == "bypass"
    assert len(emu.requests) == 4  # the two bypasses went upstream; the first bypass stored again


def test_a_hit_streams_byte_valid_for_the_openai_sdk(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=_key(gateway), max_retries=0)
    for expected in ("miss", "hit"):
        raw = client.chat.completions.with_raw_response.create(
            model="cached",
            messages=[{"role": "user", "content": "sdk"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        assert raw.headers["x-cache"] == expected
        chunks = list(raw.parse())
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    raw_json = client.chat.completions.with_raw_response.create(
        model="cached", messages=[{"role": "user", "content": "sdk"}]
    )
    assert raw_json.headers["x-cache"] == "hit"  # a stream's entry serves the JSON answer too
    assert raw_json.parse().choices[0].message.content == TEXT
    assert len(emu.requests) == 1


def test_a_hit_on_the_messages_door_for_the_anthropic_sdk(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=_key(gateway), max_retries=0)
    ask: dict[str, Any] = {"model": "cached", "max_tokens": 64, "messages": [{"role": "user", "content": "m"}]}
    for _ in range(2):
        with client.messages.stream(**ask) as stream:
            assert stream.get_final_text() == TEXT
            final = stream.get_final_message()
            assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    assert len(emu.requests) == 1
    message = client.messages.with_raw_response.create(**ask)
    assert message.headers["x-cache"] == "hit"  # the stream's entry serves the JSON answer too
    block = message.parse().content[0]
    assert block.type == "text" and block.text == TEXT
    assert len(emu.requests) == 1


def test_a_hit_on_the_gemini_door_for_google_genai(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    client = genai.Client(
        api_key=_key(gateway), http_options=types.HttpOptions(base_url=gateway.base_url, api_version="v1beta")
    )
    for _ in range(2):
        chunks = list(client.models.generate_content_stream(model="cached", contents="g"))
        assert "".join(c.text or "" for c in chunks) == TEXT
        assert chunks[-1].usage_metadata is not None and chunks[-1].usage_metadata.candidates_token_count
    assert len(emu.requests) == 1
    for _ in range(2):
        assert client.models.generate_content(model="cached", contents="g").text == TEXT
    assert len(emu.requests) <= 2
    generations = httpx.get(gateway.base_url + "/api/v1/generations", headers=MASTER).json()["data"]
    assert generations[0]["provider"] == "cache"


def test_purge_by_model_by_key_and_all_and_the_stats(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    a, b = _key(gateway), _key(gateway)
    since = time.time()
    for secret in (a, b):
        _post(gateway, secret, ASK)
        _post(gateway, secret, {**ASK, "model": "short"})
        assert _post(gateway, secret, ASK).headers["x-cache"] == "hit"
    key_a = httpx.get(gateway.base_url + "/v1/models", headers={"Authorization": f"Bearer {a}"})
    assert key_a.status_code == 200
    stats = httpx.get(gateway.base_url + f"/api/v1/cache/stats?since={since}", headers=MASTER).json()
    assert (stats["hits"], stats["misses"], stats["bypasses"]) == (2, 4, 0)
    original = fetch_record(gateway, _post(gateway, a, {**ASK, "model": "plain"}).headers["x-generation-id"])
    assert stats["saved_cost"] > 0 and stats["bytes"] > 0 and original["provider"] == "emu"
    assert {m["model"]: m["hits"] for m in stats["by_model"]} == {"cached": 2, "short": 0}
    assert sorted(k["hits"] for k in stats["by_key"]) == [1, 1]
    metrics = httpx.get(gateway.base_url + "/metrics").text
    assert 'tidegate_cache_requests_total{model="cached",result="hit"} 2.0' in metrics
    assert 'tidegate_cache_saved_cost_total{model="cached"}' in metrics and "tidegate_cache_bytes_total" in metrics
    refused = httpx.delete(gateway.base_url + "/api/v1/cache", headers={"Authorization": f"Bearer {a}"})
    assert refused.status_code == 403 and refused.json()["error"]["code"]
    bad = httpx.get(gateway.base_url + "/api/v1/cache/stats?since=soon", headers=MASTER)
    assert bad.status_code == 400
    purged = httpx.delete(gateway.base_url + "/api/v1/cache?model=short", headers=MASTER).json()
    assert purged["purged"] == 2
    assert _post(gateway, a, ASK).headers["x-cache"] == "hit"
    key_id = httpx.get(gateway.base_url + "/api/v1/keys", headers=MASTER).json()["data"]
    ids = [k["id"] for k in key_id]
    purged_a = sum(
        httpx.delete(gateway.base_url + f"/api/v1/cache?key_id={i}", headers=MASTER).json()["purged"] for i in ids
    )
    assert purged_a == 2  # one `cached` entry per key
    assert _post(gateway, a, ASK).headers["x-cache"] == "miss"
    assert httpx.delete(gateway.base_url + "/api/v1/cache", headers=MASTER).json()["purged"] == 1
    assert _post(gateway, a, ASK).headers["x-cache"] == "miss"
    audit = httpx.get(gateway.base_url + "/api/v1/audit", headers=MASTER).json()["data"]
    assert [e["action"] for e in audit].count("cache.purge") == 2 + len(ids)


def test_a_hit_counts_in_the_budget_at_zero_cost_and_still_meets_the_rate_limit(
    gateway: ServerProcess, emu: OpenAIUpstream
) -> None:
    resp = httpx.post(
        gateway.base_url + "/api/v1/keys", json={"name": "b", "credits": 10.0, "limits": {"rpm": 2}}, headers=MASTER
    )
    secret, key_id = resp.json()["key"], resp.json()["id"]
    miss = _post(gateway, secret, ASK)
    spent = httpx.get(gateway.base_url + f"/api/v1/keys/{key_id}", headers=MASTER).json()["spent"]
    assert miss.headers["x-cache"] == "miss" and spent > 0
    hit = _post(gateway, secret, ASK)
    assert hit.headers["x-cache"] == "hit"
    after = httpx.get(gateway.base_url + f"/api/v1/keys/{key_id}", headers=MASTER).json()
    assert after["spent"] == spent and after["reserved"] == 0
    limited = _post(gateway, secret, ASK)  # the third request in the minute: a hit is a request too
    assert limited.status_code == 429 and "requests per minute" in limited.json()["error"]["message"]


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_an_answer_cached_by_one_instance_is_a_hit_on_another(
    tmp_path: Path, emu: OpenAIUpstream, backend: str
) -> None:
    with shared_store_url(backend, tmp_path, "cache") as url:
        a = start_server(tmp_path / "a", _config(url, emu))
        b = start_server(tmp_path / "b", _config(url, emu))
        try:
            secret = _key(a)
            body = {**ASK, "stream": True, "stream_options": {"include_usage": True}}
            for server, expected in ((a, "miss"), (b, "hit"), (a, "hit")):
                text = _streamed_text(server, secret, body, expected)
                assert text == TEXT
            assert len(emu.requests) == 1
            assert httpx.delete(b.base_url + "/api/v1/cache", headers=MASTER).json()["purged"] == 1
            assert _post(a, secret, ASK).headers["x-cache"] == "miss"
        finally:
            a.stop()
            b.stop()


def _streamed_text(server: ServerProcess, secret: str, body: dict[str, Any], expected: str) -> str:
    auth = {"Authorization": f"Bearer {secret}"}
    parts: list[str] = []
    with httpx.stream("POST", server.base_url + CHAT, json=body, headers=auth, timeout=30) as resp:
        assert resp.status_code == 200 and resp.headers["x-cache"] == expected
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                parts += [c["delta"].get("content") or "" for c in chunk["choices"]]
    return "".join(parts)


def test_a_hit_on_the_responses_door_for_the_openai_sdk(gateway: ServerProcess, emu: OpenAIUpstream) -> None:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=_key(gateway), max_retries=0)
    for _ in range(2):
        events = list(client.responses.create(model="cached", input="r", stream=True))
        assert events[-1].type == "response.completed"
        assert events[-1].response.output_text == TEXT and events[-1].response.usage is not None
    answer = client.responses.with_raw_response.create(model="cached", input="r")
    assert answer.headers["x-cache"] == "hit" and answer.parse().output_text == TEXT
    assert len(emu.requests) == 1


def _ceiling_config(store_url: str, emu: OpenAIUpstream, max_total: int, **providers: str) -> str:
    extra = "".join(f"[providers.{n}]\n{v}\n" for n, v in providers.items())
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{store_url}"
[cache]
max_total_bytes = {max_total}
[providers.emu]
kind = "openai"
base_url = "{emu.base_url}"
{extra}
[models.big]
routes = [{{ provider = "emu", model = "big:90000" }}]
cache = {{ ttl_s = 300, max_bytes = 2000000 }}
[models.huge]
routes = [{{ provider = "emu", model = "big:950000" }}]
cache = {{ ttl_s = 300, max_bytes = 2000000 }}
[models.nofinish]
routes = [{{ provider = "emu", model = "no-finish" }}]
cache = {{ ttl_s = 300, max_bytes = 65536 }}
""" + "".join(
        f'[models.{n}]\nroutes = [{{ provider = "{n}", model = "claude-emu" }}]\ncache = {{}}\n' for n in providers
    )


def _big(server: ServerProcess, secret: str, word: str) -> str:
    resp = _post(server, secret, {"model": "big", "messages": [{"role": "user", "content": word}]})
    assert resp.status_code == 200, resp.text
    assert len(resp.json()["choices"][0]["message"]["content"]) == 90000
    return resp.headers["x-cache"]


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
def test_the_store_keeps_its_ceiling_evicting_the_least_recently_used(
    tmp_path: Path, emu: OpenAIUpstream, backend: str
) -> None:
    # each entry is ~90 KB of events: two fit under the ceiling, a third evicts the least recently used
    with shared_store_url(backend, tmp_path, "ceiling") as url:
        server = start_server(tmp_path / "gw", _ceiling_config(url, emu, 250_000))
        try:
            secret = _key(server)
            assert [_big(server, secret, w) for w in ("alpha ", "bravo ", "alpha ")] == ["miss", "miss", "hit"]
            assert _big(server, secret, "charlie ") == "miss"  # bravo, used least recently, goes
            assert [_big(server, secret, w) for w in ("alpha ", "charlie ")] == ["hit", "hit"]
            assert _big(server, secret, "bravo ") == "miss"  # evicted; stored again, evicting alpha
            assert _big(server, secret, "charlie ") == "hit"
            for i in range(12):  # far more than fits: the total never passes the ceiling
                _big(server, secret, f"w{i} ")
            metrics = httpx.get(server.base_url + "/metrics").text
            evicted = next(line for line in metrics.splitlines() if line.startswith("tidegate_cache_evictions_total"))
            assert float(evicted.split()[-1]) >= 13
            if backend == "sqlite":
                with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
                    (total,) = db.execute("SELECT bytes FROM cache_total").fetchone()
                    (summed, count) = db.execute("SELECT SUM(length(events)), COUNT(*) FROM cache_entries").fetchone()
                assert total == summed <= 250_000 and count == 2
        finally:
            server.stop()


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def test_clients_that_never_read_a_hit_share_one_copy_of_it(tmp_path: Path, emu: OpenAIUpstream) -> None:
    server = start_server(tmp_path / "gw", _ceiling_config(f"sqlite:///{tmp_path / 'gw.db'}", emu, 50_000_000))
    secret = _key(server)
    ask = {"model": "huge", "messages": [{"role": "user", "content": "0123456789"}], "stream": True}
    assert _streamed_text(server, secret, ask, "miss") == ("0123456789" * 95000)
    raw = json.dumps(ask).encode()
    head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\nContent-Type: application/json\r\n"
    request = head.encode() + b"Content-Length: %d\r\n\r\n" % len(raw) + raw
    clients: list[socket.socket] = []
    try:
        before = _rss_kib(server.proc.pid)
        for _ in range(60):  # each asks for the ~1 MB answer and never reads it
            sock = socket.create_connection(("127.0.0.1", int(server.base_url.rsplit(":", 1)[1])))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(request)
            clients.append(sock)
        time.sleep(3)
        grown = _rss_kib(server.proc.pid) - before
        # one shared copy and a piece per client (a copy each was ~1.3 MB a client: 78 MB here)
        assert grown < 24_000, f"RSS grew {grown} KiB for 60 clients"
    finally:
        for sock in clients:
            sock.close()
        server.stop()


def test_a_hit_replays_no_invented_finish_reason_and_a_fresh_message_id(tmp_path: Path, emu: OpenAIUpstream) -> None:
    claude = AnthropicFamilyEmulator().start()
    provider = f'kind = "anthropic"\nbase_url = "{claude.base_url}"\napi_key_env = "EMU_ANTHROPIC_KEY"'
    config = _ceiling_config(f"sqlite:///{tmp_path / 'gw.db'}", emu, 1_000_000, claude=provider)
    server = start_server(tmp_path / "gw", config, extra_env={"EMU_ANTHROPIC_KEY": claude.api_key})
    try:
        secret = _key(server)
        auth = {"Authorization": f"Bearer {secret}"}
        body = {"model": "nofinish", "messages": [{"role": "user", "content": "n"}], "stream": True}
        for expected in ("miss", "hit"):
            with httpx.stream("POST", server.base_url + CHAT, json=body, headers=auth, timeout=30) as resp:
                assert resp.headers["x-cache"] == expected
                lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
            assert lines[-1] == "data: [DONE]"
            chunks = [json.loads(line[6:]) for line in lines[:-1]]
            assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == TEXT
            assert all(c["finish_reason"] is None for ch in chunks for c in ch["choices"]), expected  # as the upstream
        client = anthropic.Anthropic(base_url=server.base_url, api_key=secret, max_retries=0)
        ask: dict[str, Any] = {"model": "claude", "max_tokens": 64, "messages": [{"role": "user", "content": "m"}]}
        ids = []
        for expected in ("miss", "hit", "hit"):
            raw = client.messages.with_raw_response.create(**ask)
            assert raw.headers["x-cache"] == expected
            ids.append(raw.parse().id)
        assert ids[0] == "msg_emu_text" and len(set(ids)) == 3 and all(i.startswith("msg_") for i in ids)
    finally:
        server.stop()
        claude.stop()
