"""Breakers shared by two `tidegate serve` instances on one Redis store (docs/api-operations.md §12): a route that
failed on one instance is skipped by the other, which never sent it a request; with SQLite each
instance keeps its own (docs/routing.md says why)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import ServerProcess, start_server
from tests.support.store_backends import redis_url, shared_store_url
from tests.support.waits import poll_until

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=["redis", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with shared_store_url(request.param, tmp_path, "routes") as url:
        yield url


def config(store_url: str, emu: OpenAIUpstream) -> str:
    return f"""
[server]
host = "127.0.0.1"
breaker_failures = 2
breaker_cooldown_s = 60
[store]
url = "{store_url}"
[providers.bad]
kind = "openai"
base_url = "{emu.base_url}"
[providers.good]
kind = "openai"
base_url = "{emu.base_url}"
[models."m"]
routes = [{{ provider = "bad", model = "http-500" }}, {{ provider = "good", model = "text" }}]
"""


def chat(server: ServerProcess) -> httpx.Response:
    body = {"model": "m", "messages": HI}
    return httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=server.headers, timeout=30)


def state(server: ServerProcess) -> str:
    data = httpx.get(server.base_url + "/api/v1/routes", headers=server.headers).json()["data"]
    return str(next(e["state"] for e in data if e["provider"] == "bad"))


def test_a_breaker_opened_on_one_instance_is_open_on_the_other(
    store_url: str, emu: OpenAIUpstream, tmp_path: Path
) -> None:
    emu.reset()
    cfg = config(store_url, emu)
    a = start_server(tmp_path / "a", cfg)
    b = start_server(tmp_path / "b", cfg)
    try:
        assert chat(b).headers["x-provider-attempts"] == "2"  # b's one failure, counted in Redis too
        assert chat(a).headers["x-provider-attempts"] == "2"  # a's: two in all, and a's first
        shared = store_url.startswith("redis")
        assert state(a) == ("open" if shared else "closed")
        if shared:  # b reads the open routes once a second
            poll_until(lambda: state(b) == "open", 5, poll_s=0.1)
        assert state(b) == ("open" if shared else "closed")
        r = chat(b)
        assert r.status_code == 200 and r.headers["x-provider"] == "good"
        assert r.headers["x-provider-attempts"] == ("1" if shared else "2")
        assert emu.counts().get("http-500") == (2 if shared else 3)
    finally:
        a.stop()
        b.stop()


def test_after_the_cooldown_one_instance_probes_for_all(emu: OpenAIUpstream, tmp_path: Path) -> None:
    """Three gateways on one Redis: the breaker opens everywhere, and after the cooldown exactly one
    request (from whichever instance claimed the probe) tries the failing route, not one per instance."""
    base, why = redis_url()
    if base is None:
        pytest.skip(why)
    emu.reset()
    with shared_store_url("redis", tmp_path, "probe") as url:
        cfg = config(url, emu).replace("breaker_cooldown_s = 60", "breaker_cooldown_s = 2")
        gateways = [start_server(tmp_path / f"g{i}", cfg) for i in range(3)]
        try:
            chat(gateways[0])
            chat(gateways[1])  # the second failure: open for every instance
            poll_until(lambda: all(state(g) == "open" for g in gateways), 5, poll_s=0.1)
            assert [state(g) for g in gateways] == ["open"] * 3
            assert emu.counts().get("http-500") == 2
            scraped = httpx.get(gateways[2].base_url + "/metrics").text
            assert 'tidegate_route_breaker_open{route="bad/http-500"} 1.0' in scraped
            time.sleep(2.5)  # the cooldown is over everywhere
            for _ in range(4):
                for g in gateways:
                    r = chat(g)
                    assert r.status_code == 200 and r.headers["x-provider"] == "good"
                    time.sleep(0.05)
            assert emu.counts().get("http-500") == 3  # one probe for the service (it failed: open again)
        finally:
            for g in gateways:
                g.stop()
