"""A provider's connection limit (`max_connections`): a request that waits for a connection has not
started. With keep-alives due before the wait ends, no 200 is committed while it waits: it falls back
to the next route, or answers the door's JSON error, before any byte. The wait is counted in
`tidegate_upstream_pool_waits_total{provider}` and logged once, naming the setting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, running_server, sqlite_url
from tests.support.streams import RawStream

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
CONNECT_TIMEOUT_S = 2.0  # how long a request waits for a connection
KEEPALIVE_S = 0.5  # keep-alives fall due four times while it waits


@pytest.fixture(scope="module")
def server(emu: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("pool")
    providers = {
        "tight": {"kind": "openai", "base_url": emu.base_url, "max_connections": 2},
        "spare": {"kind": "openai", "base_url": emu.base_url},
    }
    models = {
        "hold": [("tight", "slow:0.1")],
        "fb/tight": [("tight", "text"), ("spare", "text")],
        "only/tight": [("tight", "text")],
    }
    config = tidegate_toml(
        sqlite_url(workdir),
        providers,
        models,
        server={"connect_timeout_s": CONNECT_TIMEOUT_S, "keepalive_s": KEEPALIVE_S, "upstream_idle_timeout_s": 30},
    )
    with running_server(workdir, config) as srv:
        yield srv


def _hold_both(server: ServerProcess) -> list[RawStream]:
    """Two endless streams on `tight`: its two connections are busy."""
    held = []
    for _ in range(2):
        s = RawStream(server.base_url, CHAT, {"model": "hold", "messages": HI, "stream": True}, server.headers)
        assert s.status == 200
        s.read_events(2)
        held.append(s)
    return held


def _pool_waits(server: ServerProcess) -> float:
    text = httpx.get(server.base_url + "/metrics", headers=server.headers).text
    line = next(
        (ln for ln in text.splitlines() if ln.startswith('tidegate_upstream_pool_waits_total{provider="tight"}')), ""
    )
    return float(line.split()[-1]) if line else 0.0


def test_a_request_waiting_for_a_connection_falls_back_or_fails_before_any_byte(server: ServerProcess) -> None:
    before = _pool_waits(server)
    held = _hold_both(server)
    try:
        results: dict[str, httpx.Response] = {}

        def send(name: str, model: str) -> None:
            body = {"model": model, "messages": HI, "stream": True}
            results[name] = httpx.post(server.base_url + CHAT, json=body, headers=server.headers, timeout=30)

        t0 = time.monotonic()
        threads = [threading.Thread(target=send, args=a) for a in (("fb", "fb/tight"), ("only", "only/tight"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        waited = time.monotonic() - t0
    finally:
        for s in held:
            s.close()
    assert waited >= CONNECT_TIMEOUT_S - 0.2
    fb = results["fb"]
    assert fb.status_code == 200 and fb.headers["x-provider"] == "spare", fb.text
    assert fb.headers["x-provider-attempts"] == "2"
    assert b"data: [DONE]" in fb.content and b": keep-alive" not in fb.content.split(b"data:")[0]
    only = results["only"]  # nothing started: the JSON error, not a 200 with an error chunk
    assert only.status_code == 503 and only.headers["content-type"].startswith("application/json"), only.text
    assert only.json()["error"]["code"] == "no_provider_available"
    assert _pool_waits(server) >= before + 2
    assert server.log().count("raise providers.tight.max_connections") == 1  # once a minute at most


SHORT_IDLE_S = 1.0  # shorter than the connect timeout: the slot wait must not end as an idle timeout
LONG_CONNECT_S = 2.5


@pytest.fixture(scope="module")
def short_idle(emu: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("pool-short-idle")
    config = tidegate_toml(
        sqlite_url(workdir),
        {"tight": {"kind": "openai", "base_url": emu.base_url, "max_connections": 2}},
        {"hold": [("tight", "slow:0.1")], "only/tight": [("tight", "text")]},
        server={"connect_timeout_s": LONG_CONNECT_S, "upstream_idle_timeout_s": SHORT_IDLE_S},
    )
    with running_server(workdir, config) as srv:
        yield srv


@pytest.mark.parametrize("stream", [True, False])
def test_a_slot_wait_is_bounded_by_the_connect_timeout_not_the_idle_one(
    short_idle: ServerProcess, stream: bool
) -> None:
    """No slot comes free: the request waits the whole connect timeout (past the idle timeout) and
    ends as the connect failure it is, 503, not as a 504 `upstream_timeout`."""
    held = _hold_both(short_idle)
    try:
        t0 = time.monotonic()
        body = {"model": "only/tight", "messages": HI, "stream": stream}
        r = httpx.post(short_idle.base_url + CHAT, json=body, headers=short_idle.headers, timeout=30)
        waited = time.monotonic() - t0
    finally:
        for s in held:
            s.close()
    assert r.status_code == 503, r.text
    assert r.json()["error"] == {
        "code": "no_provider_available",
        "message": "no provider could be reached: tight (connect_error)",
        "type": "server_error",
    }
    assert LONG_CONNECT_S - 0.2 <= waited < LONG_CONNECT_S + 1.5


@pytest.mark.parametrize("stream", [True, False])
def test_the_idle_timeout_starts_once_a_slot_is_free(short_idle: ServerProcess, stream: bool) -> None:
    """A slot comes free after longer than the idle timeout: the request goes on and is answered."""
    held = _hold_both(short_idle)
    timer = threading.Timer(SHORT_IDLE_S * 1.6, held[0].close)
    try:
        timer.start()
        t0 = time.monotonic()
        body = {"model": "only/tight", "messages": HI, "stream": stream}
        r = httpx.post(short_idle.base_url + CHAT, json=body, headers=short_idle.headers, timeout=30)
        waited = time.monotonic() - t0
    finally:
        timer.join()
        for s in held:
            s.close()
    assert r.status_code == 200, r.text
    assert waited >= SHORT_IDLE_S * 1.5
    assert (b"data: [DONE]" in r.content) if stream else r.json()["choices"][0]["message"]["content"]
