"""Upstream connections through a real `tidegate serve` (docs/api-edges.md §15): an openai-kind provider behind
a real forward proxy (`proxy.py`) set per provider or by `HTTP_PROXY`, `proxy = false` going direct
past the environment's proxy, a proxy refusing `CONNECT` falling back to the next route, and the
warning `verify = false` logs at start. The proxy's password is never logged or answered."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.forward_proxy import PASSWORD, ForwardProxy
from tests.support.process import ServerProcess, free_port, running_server, sqlite_url, start_server
from tests.support.streams import stream_sse
from tests.support.waits import poll_until

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    p = ForwardProxy(tmp_path_factory.mktemp("proxy"))
    yield p
    p.stop()


@pytest.fixture(scope="module")
def emu_env() -> Iterator[OpenAIUpstream]:
    """A second emulator, reached through the environment's proxy."""
    with OpenAIUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def server(
    emu: OpenAIUpstream, emu_env: OpenAIUpstream, proxy: ForwardProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("upstream-proxy")
    # idle upstream connections close quickly: the proxy logs a request when its connection closes
    fast = {"pool_idle_timeout_s": 0.3}
    providers = {
        "viaproxy": {"kind": "openai", "base_url": emu.base_url, "proxy": proxy.url, **fast},
        "envproxy": {"kind": "openai", "base_url": emu_env.base_url, **fast},
        "direct": {"kind": "openai", "base_url": emu.base_url, "proxy": False},
        "refused": {"kind": "openai", "base_url": "https://localhost:9/v1", "proxy": proxy.bare_url},
        "insecure": {"kind": "openai", "base_url": "https://localhost:9/v1", "verify": False, "proxy": False},
    }
    models = {
        "m/proxy": [("viaproxy", "text")],
        "m/env": [("envproxy", "text")],
        "m/direct": [("direct", "text")],
        "fb/refused": [("refused", "text"), ("direct", "text")],
        "all/refused": [("refused", "text")],
    }
    config = tidegate_toml(sqlite_url(workdir), providers, models, server={"connect_timeout_s": 3})
    # (an empty lower-case variable unsets its upper-case one, as in urllib and requests)
    env = {"HTTP_PROXY": proxy.url, "http_proxy": proxy.url, "NO_PROXY": "", "no_proxy": ""}
    with running_server(workdir, config, extra_env=env) as srv:
        yield srv


def _requests_through(proxy: ForwardProxy, emu: OpenAIUpstream) -> int:
    return proxy.log().count(f"POST 127.0.0.1:{emu.port}{CHAT}")


@pytest.mark.parametrize(("model", "through"), [("m/proxy", "emu"), ("m/env", "emu_env")])
def test_a_stream_through_the_proxy(
    server: ServerProcess, proxy: ForwardProxy, model: str, through: str, request: pytest.FixtureRequest
) -> None:
    upstream: OpenAIUpstream = request.getfixturevalue(through)
    before = _requests_through(proxy, upstream)
    r = stream_sse(server.base_url + CHAT, {"model": model, "messages": HI, "stream": True}, server.headers)
    assert r.status == 200 and r.done, r.raw[:300]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in r.json_events() if c.get("choices"))
    # logged once the pooled connection closes
    assert poll_until(lambda: _requests_through(proxy, upstream) != before, 5), proxy.log()
    assert PASSWORD not in server.log()


def test_proxy_false_goes_direct_past_the_environment(server: ServerProcess, emu: OpenAIUpstream) -> None:
    emu.reset()
    resp = httpx.post(server.base_url + CHAT, json={"model": "m/direct", "messages": HI}, headers=server.headers)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-provider"] == "direct" and len(emu.requests) == 1


def test_a_proxy_refusing_connect_falls_back_to_the_next_route(server: ServerProcess, proxy: ForwardProxy) -> None:
    r = stream_sse(server.base_url + CHAT, {"model": "fb/refused", "messages": HI, "stream": True}, server.headers)
    assert r.status == 200 and r.done
    assert r.headers["x-provider"] == "direct" and r.headers["x-provider-attempts"] == "2"
    resp = httpx.post(server.base_url + CHAT, json={"model": "all/refused", "messages": HI}, headers=server.headers)
    assert resp.status_code in (502, 503), resp.text
    assert resp.json()["error"]["code"] in ("upstream_error", "no_provider_available")
    assert PASSWORD not in resp.text and PASSWORD not in server.log()
    assert "ProxyAuthenticationFailed" in proxy.wait_for_log("CONNECT None:None")  # refused before it connected


def test_verify_false_is_named_in_a_warning_at_start(server: ServerProcess) -> None:
    log = server.log()
    assert "provider insecure: verify = false" in log
    assert "provider direct: verify" not in log


def test_a_bad_proxy_setting_stops_the_start_naming_the_key(tmp_path_factory: pytest.TempPathFactory) -> None:
    workdir = tmp_path_factory.mktemp("bad-proxy")
    providers = {"p": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "proxy": "socks5://u:pw@h:1"}}
    config = tidegate_toml(sqlite_url(workdir), providers, {"m": [("p", "text")]})
    with pytest.raises(RuntimeError) as info:
        start_server(workdir, config, port=free_port())
    assert "providers.p.proxy: must start with http://" in str(info.value)
    assert "u:pw" not in str(info.value)
