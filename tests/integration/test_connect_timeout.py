"""An upstream whose connection never completes (a TLS handshake nobody answers) is bounded by
`server.connect_timeout_s` on every door and both response modes: the route fails as `connect_error`
(the next route serves, or 503 `no_provider_available`), and the request's own
task is never the one the timeout cancels.

A streaming request's upstream open runs its first step in the request's task and the rest in a task
of its own (`gateway/opening.py`); the connect timeout entered in that first step must cancel the
open, not the request that started it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, running_server, sqlite_url
from tests.support.streams import stream_sse

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
CONNECT_TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A listening socket that never accepts: the kernel completes TCP connects, nobody answers TLS."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture(scope="module")
def server(emu: OpenAIUpstream, silent_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("connect-timeout")
    providers = {
        "hung": {"kind": "openai", "base_url": f"https://127.0.0.1:{silent_port}/v1"},
        "emu": {"kind": "openai", "base_url": emu.base_url},
    }
    models = {"fb/hung": [("hung", "text"), ("emu", "text")], "all/hung": [("hung", "text")]}
    config = tidegate_toml(
        sqlite_url(workdir), providers, models, server={"connect_timeout_s": CONNECT_TIMEOUT_S, "keepalive_s": 30}
    )
    with running_server(workdir, config) as srv:
        yield srv


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_a_connect_that_never_completes_falls_back_after_the_connect_timeout(
    server: ServerProcess, stream: bool
) -> None:
    t0 = time.monotonic()
    body = {"model": "fb/hung", "messages": HI, "stream": stream}
    if stream:
        r = stream_sse(server.base_url + CHAT, body, server.headers, timeout=30)
        status, headers = r.status, r.headers
        assert r.done
    else:
        resp = httpx.post(server.base_url + CHAT, json=body, headers=server.headers, timeout=30)
        status, headers = resp.status_code, resp.headers
    elapsed = time.monotonic() - t0
    assert status == 200
    assert headers["x-provider"] == "emu" and headers["x-provider-attempts"] == "2"
    assert CONNECT_TIMEOUT_S <= elapsed < CONNECT_TIMEOUT_S + 3


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_every_route_timing_out_on_connect_is_a_503(server: ServerProcess, stream: bool) -> None:
    t0 = time.monotonic()
    body = {"model": "all/hung", "messages": HI, "stream": stream}
    resp = httpx.post(server.base_url + CHAT, json=body, headers=server.headers, timeout=30)
    assert time.monotonic() - t0 < CONNECT_TIMEOUT_S + 3
    assert resp.status_code == 503, resp.text
    error = orjson.loads(resp.content)["error"]
    assert error["code"] == "no_provider_available"
    assert error["message"] == "no provider could be reached: hung (connect_error)"
    assert resp.headers["x-provider-attempts"] == "1"
