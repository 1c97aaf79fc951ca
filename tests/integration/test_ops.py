"""Operator endpoints: /metrics counts what happened; /readyz; check-config."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, sqlite_url, start_server


def _metric(text: str, selector: str) -> float:
    """The sum of the samples `name{label="value",...}` selects (labels in any order), read with
    prometheus-client's own parser."""
    name, _, rest = selector.partition("{")
    wanted = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in wanted.items()):
                total += sample.value
    return total


def test_metrics_count_requests_generations_and_tokens(local_server: ServerProcess) -> None:
    before = httpx.get(local_server.base_url + "/metrics").text
    resp = httpx.post(
        local_server.base_url + "/v1/chat/completions",
        headers=local_server.headers,
        json={"model": "local/smollm2", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert resp.status_code == 200
    httpx.get(local_server.base_url + "/v1/models")  # a 401
    after_resp = httpx.get(local_server.base_url + "/metrics")
    assert after_resp.headers["content-type"].startswith("text/plain")
    after = after_resp.text
    ok = 'tidegate_http_requests_total{route="/v1/chat/completions",status="200"}'
    assert _metric(after, ok) == _metric(before, ok) + 1
    unauthorized = 'tidegate_http_requests_total{route="/v1/models",status="401"}'
    assert _metric(after, unauthorized) == _metric(before, unauthorized) + 1
    done = 'tidegate_requests_total{model="local/smollm2",provider="local",status="completed"}'
    assert _metric(after, done) == _metric(before, done) + 1
    completion = 'tidegate_tokens_total{model="local/smollm2",kind="completion"}'
    usage = resp.json()["usage"]
    assert _metric(after, completion) == _metric(before, completion) + usage["completion_tokens"]
    assert "tidegate_ttft_seconds_bucket" in after
    assert "tidegate_generations_running 0" in after


def test_answers_carry_a_date_and_do_not_name_the_server_software(local_server: ServerProcess) -> None:
    for resp in (
        httpx.get(local_server.base_url + "/healthz"),
        httpx.get(local_server.base_url + "/v1/models"),  # a 401
        httpx.get(local_server.base_url + "/v1/models", headers=local_server.headers),
    ):
        assert "date" in resp.headers
        assert "server" not in resp.headers, resp.headers


def test_a_gateway_says_at_start_whether_its_server_shortcuts_are_on(local_server: ServerProcess) -> None:
    expected = (
        "server shortcuts off: TIDEGATE_SERVER_SHORTCUTS=off"
        if os.environ.get("TIDEGATE_TEST_SHORTCUTS") == "off"
        else "server shortcuts on (uvicorn 0."
    )
    assert expected in local_server.log()


def test_metrics_count_upstream_failures_and_fallbacks(tmp_path: Path) -> None:
    with OpenAIUpstream() as upstream:
        config = tidegate_toml(
            sqlite_url(tmp_path),
            {"emu": {"kind": "openai", "base_url": upstream.base_url}},
            {"m": [("emu", "http-503"), ("emu", "text")]},
        )
        server = start_server(tmp_path, config)
        try:
            resp = httpx.post(
                server.base_url + "/v1/chat/completions",
                headers=server.headers,
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert resp.status_code == 200 and resp.headers["x-provider-attempts"] == "2"
            text = httpx.get(server.base_url + "/metrics").text
        finally:
            server.stop()
    assert _metric(text, 'tidegate_upstream_failures_total{provider="emu",code="upstream_error"}') == 1
    assert _metric(text, 'tidegate_requests_total{model="m",provider="emu",status="completed"}') == 1


def test_check_config_names_bad_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nport = 8080\nkeepalive = 3\n")
    out = subprocess.run(
        [sys.executable, "-m", "tidegate", "check-config", "--config", str(bad)], capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "server.keepalive: unknown key" in out.stderr
    good = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidegate",
            "check-config",
            "--config",
            str(Path(__file__).parents[2] / "src/tidegate/default_config.toml"),
        ],
        capture_output=True,
        text=True,
    )
    assert good.returncode == 0 and "local/smollm2" in good.stdout


def test_check_config_reports_reachability_without_generating(tmp_path: Path) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    with OpenAIUpstream() as upstream:
        config = tidegate_toml(
            sqlite_url(tmp_path),
            {
                "up": {"kind": "openai", "base_url": upstream.base_url, "api_key_env": "PROBE_SECRET"},
                "down": {"kind": "openai", "base_url": f"http://127.0.0.1:{dead_port}/v1"},
                "local": {"kind": "local"},
            },
            {"m": [("up", "text")]},
        )
        path = tmp_path / "probe.toml"
        path.write_text(config)
        env = {**os.environ, "PROBE_SECRET": "sk-very-secret-value"}
        out = subprocess.run(
            [sys.executable, "-m", "tidegate", "check-config", "--config", str(path)],
            capture_output=True,
            text=True,
            env=env,
        )
        assert out.returncode == 1, out.stderr  # "down" is a problem: check-config says so in its status
        lines = {ln.strip().split(" ")[0]: ln for ln in out.stdout.splitlines()}
        assert f"ok: GET {upstream.base_url}/models answered 200" in lines["up"] and "$PROBE_SECRET set" in lines["up"]
        assert "PROBLEM: unreachable" in lines["down"] and "connection refused" in lines["down"]
        assert f"tried http://127.0.0.1:{dead_port}/v1/models" in lines["down"]
        assert "ok: model found" in lines["local"]
        assert "sk-very-secret-value" not in out.stdout + out.stderr
        assert upstream.requests == []  # reachability only: no generation was sent
