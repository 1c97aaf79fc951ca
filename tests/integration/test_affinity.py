"""Prompt-cache affinity (docs/routing.md, "Prompt-cache affinity") through real gateways and two
OpenAI emulators (scenario `prefix-cache`: each reports the prompt as cached once it has seen its
first message): one session keeps one route of a weighted 50/50 pool for 10 turns while two
sessions spread; an affine route that fails falls back and the affinity moves; two `tidegate serve`
processes on one store share it; it expires after `affinity_ttl_s`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import ServerProcess, start_server
from tests.support.store_backends import shared_store_url

SYSTEM = {"role": "system", "content": "You are a coding agent. " * 200}  # ~5 KB: a provider caches it


@pytest.fixture()
def upstreams() -> Iterator[tuple[OpenAIUpstream, OpenAIUpstream]]:
    with OpenAIUpstream() as a, OpenAIUpstream() as b:
        yield a, b


def config(store_url: str, a: OpenAIUpstream, b: OpenAIUpstream, ttl_s: float = 300) -> str:
    return f"""
[server]
host = "127.0.0.1"
affinity_ttl_s = {ttl_s}
affinity_long_ttl_s = 3600
breaker_failures = 1
breaker_cooldown_s = 60
[store]
url = "{store_url}"
[providers.pa]
kind = "openai"
base_url = "{a.base_url}"
[providers.pb]
kind = "openai"
base_url = "{b.base_url}"
[models."pool"]
strategy = "weighted"
routes = [
    {{ provider = "pa", model = "prefix-cache", weight = 1 }},
    {{ provider = "pb", model = "prefix-cache", weight = 1 }},
]
"""


class Conversation:
    """One agent session's turns: the same system prompt and first message, one more turn each time."""

    def __init__(self, session: str | None, first: str = "fix the bug") -> None:
        self.session = session
        self.messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": first}]

    def turn(self, server: ServerProcess) -> httpx.Response:
        body: dict[str, Any] = {"model": "pool", "messages": self.messages}
        if self.session is not None:
            body["prompt_cache_key"] = self.session
        r = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=server.headers, timeout=30)
        assert r.status_code == 200, r.text
        self.messages = [*self.messages, r.json()["choices"][0]["message"], {"role": "user", "content": "go on"}]
        return r


def post_short(server: ServerProcess) -> httpx.Response:
    body = {"model": "pool", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=server.headers, timeout=30)
    assert r.status_code == 200, r.text
    return r


def messages_turn(server: ServerProcess, ttl: str) -> httpx.Response:
    """A Messages door request whose system prompt is a `cache_control` breakpoint of `ttl`."""
    system = [{"type": "text", "text": "You review code.", "cache_control": {"type": "ephemeral", "ttl": ttl}}]
    body = {"model": "pool", "max_tokens": 16, "system": system, "messages": [{"role": "user", "content": "hi"}]}
    headers = {**server.headers, "anthropic-version": "2023-06-01"}
    r = httpx.post(server.base_url + "/v1/messages", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r


def cached_tokens(server: ServerProcess, r: httpx.Response) -> int | None:
    gid = r.headers["x-generation-id"]
    record = httpx.get(f"{server.base_url}/api/v1/generations/{gid}", headers=server.headers).json()
    return record["usage"]["cached_tokens"]  # type: ignore[no-any-return]


def test_one_session_keeps_its_route_for_ten_turns_and_two_sessions_spread(
    upstreams: tuple[OpenAIUpstream, OpenAIUpstream], tmp_path: Path
) -> None:
    a, b = upstreams
    server = start_server(tmp_path, config(f"sqlite:///{tmp_path / 't.db'}", a, b))
    try:
        one = Conversation("codex-session-1")
        turns = [one.turn(server) for _ in range(10)]
        assert len({r.headers["x-provider"] for r in turns}) == 1  # the weighted pool alternates without it
        assert [r.headers["x-route-affinity"] for r in turns] == ["miss"] + ["hit"] * 9
        assert cached_tokens(server, turns[0]) == 0
        assert all(cached_tokens(server, r) == 11 for r in turns[1:])  # the provider's cache held the prefix
        assert len(a.requests) + len(b.requests) == 10 and 0 in (len(a.requests), len(b.requests))

        first, second = Conversation("session-a", "task a"), Conversation("session-b", "task b")
        served: dict[str, set[str]] = {"a": set(), "b": set()}
        for _ in range(5):
            served["a"].add(first.turn(server).headers["x-provider"])
            served["b"].add(second.turn(server).headers["x-provider"])
        assert len(served["a"]) == len(served["b"]) == 1 and served["a"] != served["b"]  # spread, each kept

        plain = [Conversation(None, f"question {i}").turn(server).headers["x-provider"] for i in range(4)]
        assert sorted(plain) == ["pa", "pa", "pb", "pb"]  # no shared prefix: the pool's own 50/50
        short = [post_short(server) for _ in range(4)]  # one short prompt, no session: nothing a provider caches
        assert sorted(r.headers["x-provider"] for r in short) == ["pa", "pa", "pb", "pb"]
        assert all("x-route-affinity" not in r.headers for r in short)
        again = [Conversation(None, "same long prompt").turn(server) for _ in range(3)]  # a long shared prefix
        assert [r.headers["x-route-affinity"] for r in again] == ["miss", "hit", "hit"]
        assert len({r.headers["x-provider"] for r in again}) == 1
        metrics = httpx.get(server.base_url + "/metrics").text
        assert 'tidegate_route_affinity_total{model="pool",result="hit"} 19.0' in metrics
    finally:
        server.stop()


def test_an_affine_route_that_fails_falls_back_and_the_affinity_moves(tmp_path: Path) -> None:
    a, b = OpenAIUpstream().start(), OpenAIUpstream().start()
    running = {"pa": a, "pb": b}
    server = start_server(tmp_path, config(f"sqlite:///{tmp_path / 't.db'}", a, b))
    try:
        talk = Conversation("falls-back")
        first = talk.turn(server)
        affine = first.headers["x-provider"]
        running.pop(affine).stop()  # the affine route's upstream goes away
        moved = talk.turn(server)
        assert moved.headers["x-provider"] != affine and moved.headers["x-provider-attempts"] == "2"
        assert moved.headers["x-route-affinity"] == "hit"  # chosen first, then the fallback served
        after = [talk.turn(server) for _ in range(3)]  # its breaker is open: the new route is the affine one
        assert {r.headers["x-provider"] for r in after} == {moved.headers["x-provider"]}
        assert all(r.headers["x-route-affinity"] == "hit" and r.headers["x-provider-attempts"] == "1" for r in after)
    finally:
        server.stop()
        for upstream in running.values():
            upstream.stop()


@pytest.mark.parametrize("backend", ["redis", "postgres", "sqlite"])
def test_two_instances_share_the_affinity(
    backend: str, upstreams: tuple[OpenAIUpstream, OpenAIUpstream], tmp_path: Path
) -> None:
    a, b = upstreams
    with shared_store_url(backend, tmp_path, "affinity") as url:
        cfg = config(url, a, b)
        one, two = start_server(tmp_path / "one", cfg), start_server(tmp_path / "two", cfg)
        try:
            talk = Conversation("shared-session")
            affine = talk.turn(one).headers["x-provider"]
            Conversation("another-session", "warm up").turn(two)  # two's weighted pool moves on
            turns = [talk.turn(server) for server in (two, one, two)]
            assert all(r.headers["x-route-affinity"] == "hit" for r in turns)
            assert {r.headers["x-provider"] for r in turns} == {affine}
        finally:
            one.stop()
            two.stop()


def test_the_affinity_expires_after_its_ttl(upstreams: tuple[OpenAIUpstream, OpenAIUpstream], tmp_path: Path) -> None:
    a, b = upstreams
    server = start_server(tmp_path, config(f"sqlite:///{tmp_path / 't.db'}", a, b, ttl_s=1.5))
    try:
        talk = Conversation("expires")
        assert [talk.turn(server).headers["x-route-affinity"] for _ in range(2)] == ["miss", "hit"]
        long = [messages_turn(server, ttl) for ttl in ("1h", "1h")]  # a one-hour breakpoint, no session
        assert [r.headers["x-route-affinity"] for r in long] == ["miss", "hit"]
        time.sleep(2.0)
        assert talk.turn(server).headers["x-route-affinity"] == "miss"
        assert talk.turn(server).headers["x-route-affinity"] == "hit"  # remembered again
        assert messages_turn(server, "1h").headers["x-route-affinity"] == "hit"  # affinity_long_ttl_s holds
    finally:
        server.stop()


def test_a_single_route_model_has_no_affinity_header(tmp_path: Path) -> None:
    with OpenAIUpstream() as a:
        cfg = config(f"sqlite:///{tmp_path / 't.db'}", a, a)
        server = start_server(
            tmp_path, cfg.replace('    { provider = "pb", model = "prefix-cache", weight = 1 },\n', "")
        )
        try:
            r = Conversation("alone").turn(server)
            assert "x-route-affinity" not in r.headers and r.headers["x-provider"] == "pa"
        finally:
            server.stop()
