"""Hostile input on the gateway side, each reproduced against a real `tidegate serve`
(docs/api-edges.md §16): an out-of-range `Last-Event-ID`, a 1.9 MB model name echoed whole, `/metrics` without
a key on a non-loopback bind, and provider URLs that must never be accepted.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, free_port, running_server, start_server
from tests.support.streams import stream_sse

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, emu: OpenAIUpstream) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("hostile")
    config = tidegate_toml(
        f"sqlite:///{tmp / 'g.db'}", {"emu": {"kind": "openai", "base_url": emu.base_url}}, {"m": [("emu", "text")]}
    )
    with running_server(tmp / "gw", config) as server:
        yield server


@pytest.mark.parametrize("value", ["99999999999999999999", str(2**63), "-5", "seven"])
def test_an_out_of_range_last_event_id_is_a_400_before_anything_starts(gateway: ServerProcess, value: str) -> None:
    idem = "lei-" + uuid.uuid4().hex
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    first = stream_sse(gateway.base_url + CHAT, body, {**gateway.headers, "Idempotency-Key": idem})
    assert first.done
    sse = {"Idempotency-Key": idem, "Accept": "text/event-stream", "Last-Event-ID": value}
    replay = httpx.post(gateway.base_url + "/api/v1/llm/responses/replay", headers={**gateway.headers, **sse})
    assert replay.status_code == 400, replay.text
    assert replay.json()["error"]["code"] == "invalid_request" and "Last-Event-ID" in replay.json()["error"]["message"]
    again = httpx.post(gateway.base_url + CHAT, json=body, headers={**gateway.headers, **sse})
    assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_request"


def test_the_largest_event_id_is_still_an_empty_resume_not_an_error(gateway: ServerProcess) -> None:
    idem = "lei-max-" + uuid.uuid4().hex
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    stream_sse(gateway.base_url + CHAT, body, {**gateway.headers, "Idempotency-Key": idem})
    sse = {"Idempotency-Key": idem, "Accept": "text/event-stream", "Last-Event-ID": str(2**63 - 1)}
    replay = httpx.post(gateway.base_url + "/api/v1/llm/responses/replay", headers={**gateway.headers, **sse})
    assert replay.status_code == 200 and replay.content == b""


def test_an_error_quotes_at_most_200_characters_of_what_the_client_sent(gateway: ServerProcess) -> None:
    name = "m" * 1_900_000
    resp = httpx.post(
        gateway.base_url + CHAT,
        json={"model": name, "messages": [{"role": "user", "content": "hi"}]},
        headers=gateway.headers,
    )
    assert resp.status_code == 404
    message = resp.json()["error"]["message"]
    assert "m" * 200 in message and "m" * 201 not in message and "1,900,000 characters" in message
    assert len(resp.content) < 1000
    role = "r" * 50_000
    bad = httpx.post(
        gateway.base_url + CHAT,
        json={"model": "m", "messages": [{"role": role, "content": "x"}]},
        headers=gateway.headers,
    )
    assert bad.status_code == 400 and "r" * 201 not in bad.json()["error"]["message"]


def test_metrics_need_a_key_on_a_non_loopback_bind(tmp_path: Path, emu: OpenAIUpstream) -> None:
    config = tidegate_toml(
        f"sqlite:///{tmp_path / 'g.db'}",
        {"emu": {"kind": "openai", "base_url": emu.base_url}},
        {"m": [("emu", "text")]},
    )
    port = free_port()
    server = start_server(tmp_path / "wide", config, args=["--host", "0.0.0.0"], port=port, wait_ready=False)
    try:
        local = ServerProcess(
            f"http://127.0.0.1:{port}", server.key, server.proc, server.workdir, server.config_path, server.log_path
        )
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            try:
                if httpx.get(local.base_url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        anonymous = httpx.get(local.base_url + "/metrics")
        assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthorized"
        keyed = httpx.get(local.base_url + "/metrics", headers=local.headers)
        assert keyed.status_code == 200 and "tidegate_" in keyed.text
    finally:
        server.stop()


def test_metrics_need_no_key_on_a_loopback_bind(gateway: ServerProcess) -> None:
    assert httpx.get(gateway.base_url + "/metrics").status_code == 200


@pytest.mark.parametrize(
    ("base_url", "says"),
    [
        ("http://169.254.169.254/v1", "metadata"),
        ("http://2852039166/v1", "metadata"),
        ("http://[fd00:ec2::254]/v1", "metadata"),
        ("https://user:secret-pass@api.example.com/v1", "user info"),
        ("https://api.example.com/v1\r\nX-Injected: 1", "control character"),
    ],
)
def test_a_provider_url_that_must_never_be_used_is_a_config_error_naming_the_key(
    tmp_path: Path, base_url: str, says: str
) -> None:
    config = tmp_path / "t.toml"
    config.write_text(
        tidegate_toml(
            f"sqlite:///{tmp_path / 'g.db'}", {"bad": {"kind": "openai", "base_url": base_url}}, {"m": [("bad", "m")]}
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "tidegate", "check-config", "--no-probe", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "providers.bad.base_url" in result.stderr and says in result.stderr
    assert "secret-pass" not in result.stderr + result.stdout
