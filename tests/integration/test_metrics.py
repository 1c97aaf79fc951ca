"""`/metrics` after a scripted mix (CONTRACT §14): successes, fallbacks and mid-stream failures counted
once each, histogram counts that match, the running gauge back at zero; in one process and under
`--workers 2`, where every worker's requests are in any worker's answer (prometheus-client's
multiprocess mode)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from helpers import ServerProcess, sqlite_url, start_server

N = 6  # of each kind of request


def value(text: str, selector: str) -> float:
    name, _, rest = selector.partition("{")
    wanted = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in wanted.items())
    )


@pytest.fixture(params=[1, 2], ids=["one-process", "two-workers"])
def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ServerProcess, OpenAIUpstream]]:
    with OpenAIUpstream() as emu:
        config = tidegate_toml(
            sqlite_url(tmp_path),
            {"emu": {"kind": "openai", "base_url": emu.base_url}},
            {"ok": [("emu", "text")], "fb": [("emu", "http-503"), ("emu", "text")], "mid": [("emu", "error-mid")]},
            server={"breaker_failures": 0},  # every `fb` request falls back (no breaker skips the failing route)
        )
        args = ["--workers", str(request.param)] if request.param > 1 else []
        server = start_server(tmp_path, config, args=args)
        try:
            yield server, emu
        finally:
            server.stop()


def test_a_scripted_mix_is_counted_once_each(gateway: tuple[ServerProcess, OpenAIUpstream]) -> None:
    server, emu = gateway
    for model in ("ok", "fb", "mid"):
        for _ in range(N):  # a new connection each: under --workers 2 they spread over both workers
            with httpx.Client(timeout=30) as client:
                body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
                r = client.post(server.base_url + "/v1/chat/completions", json=body, headers=server.headers)
                assert r.status_code == 200
    deadline = time.monotonic() + 10
    while True:  # a generation's metrics are counted when its record is final, just after the stream
        text = httpx.get(server.base_url + "/metrics").text
        if value(text, 'tidegate_generations_total{model="mid"}') == N or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert value(text, 'tidegate_generations_total{model="ok",provider="emu",status="completed"}') == N
    assert value(text, 'tidegate_generations_total{model="fb",provider="emu",status="completed"}') == N
    assert value(text, 'tidegate_generations_total{model="mid",provider="emu",status="failed"}') == N
    assert value(text, 'tidegate_fallbacks_total{model="fb"}') == N
    assert value(text, 'tidegate_fallbacks_total{model="ok"}') == 0
    assert value(text, 'tidegate_upstream_failures_total{provider="emu",code="upstream_error"}') == 2 * N
    assert value(text, 'tidegate_http_requests_total{route="/v1/chat/completions",status="200"}') == 3 * N
    assert value(text, 'tidegate_time_to_first_token_seconds_count{model="ok"}') == N
    assert value(text, 'tidegate_generation_duration_seconds_count{model="mid",status="failed"}') == N
    assert value(text, 'tidegate_tokens_total{model="ok",kind="completion"}') == N * 7  # the emulator's usage
    assert value(text, "tidegate_generations_running") == 0
    assert emu.counts() == {"text": 2 * N, "http-503": N, "error-mid": N}
