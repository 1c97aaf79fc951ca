"""`/metrics` after a scripted mix (docs/api-edges.md §14): successes, fallbacks and mid-stream failures counted
once each, histogram counts that match, the running gauge back at zero; in one process and under
`--workers 2`, where every worker's requests are in any worker's answer (prometheus-client's
multiprocess mode)."""

from __future__ import annotations

import http.server
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.emulators.openai_upstream import TEXT_PIECES, OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, sqlite_url, start_server
from tests.support.waits import poll_until

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
            {
                "ok": [("emu", "text")],
                "fb": [("emu", "http-503"), ("emu", "text")],
                "mid": [("emu", "error-mid")],
                "quiet": [("emu", "silence:0.6")],
            },
            # every `fb` request falls back (no breaker skips the failing route); `quiet` gets keep-alives
            server={"breaker_failures": 0, "keepalive_s": 0.2},
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
        if value(text, 'tidegate_requests_total{model="mid"}') == N or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert value(text, 'tidegate_requests_total{door="chat",model="ok",provider="emu",status="completed"}') == N
    assert value(text, 'tidegate_requests_total{door="chat",model="fb",provider="emu",status="completed"}') == N
    assert value(text, 'tidegate_requests_total{door="chat",model="mid",provider="emu",status="failed"}') == N
    assert value(text, 'tidegate_stream_failures_total{code="upstream_error",provider="emu"}') == N  # the mid ones
    assert value(text, "tidegate_stream_failures_total") == N
    pieces = len(TEXT_PIECES)  # the emulator's text deltas per answer
    assert value(text, 'tidegate_chunks_relayed_total{model="ok"}') == N * pieces
    assert value(text, 'tidegate_chunks_relayed_total{model="fb"}') == N * pieces
    assert value(text, 'tidegate_fallbacks_total{model="fb"}') == N
    assert value(text, 'tidegate_fallbacks_total{model="ok"}') == 0
    assert value(text, 'tidegate_upstream_failures_total{provider="emu",code="upstream_error"}') == 2 * N
    assert value(text, 'tidegate_http_requests_total{route="/v1/chat/completions",status="200"}') == 3 * N
    assert value(text, 'tidegate_ttft_seconds_count{model="ok"}') == N
    assert value(text, 'tidegate_generation_duration_seconds_count{model="mid",status="failed"}') == N
    assert value(text, 'tidegate_tokens_total{model="ok",kind="completion"}') == N * 7  # the emulator's usage
    assert value(text, "tidegate_generations_running") == 0
    assert value(text, "tidegate_open_streams") == 0
    assert emu.counts() == {"text": 2 * N, "http-503": N, "error-mid": N}


def test_keepalives_and_the_log_flusher_are_counted(gateway: tuple[ServerProcess, OpenAIUpstream]) -> None:
    """A silent upstream gets keep-alives (each counted once); a keyed stream's event log is flushed
    while it runs, and each flusher round's time is observed (the store's lag)."""
    server, _ = gateway
    for i in range(2):
        body = {"model": "quiet", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        headers = {**server.headers, "Idempotency-Key": f"quiet-{i}-{time.monotonic_ns()}"}
        r = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
        assert r.status_code == 200 and r.text.count(": TIDEGATE PROCESSING") >= 2
    text = httpx.get(server.base_url + "/metrics").text
    assert value(text, "tidegate_keepalives_total") >= 4
    body = {"model": "quiet", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, headers=server.headers) as r:
        next(r.iter_lines())  # the head and a first keep-alive: the stream is open
        during = httpx.get(server.base_url + "/metrics").text
    assert value(during, "tidegate_open_streams") == 1 and value(during, "tidegate_generations_running") == 1
    assert value(text, "tidegate_log_flush_seconds_count") >= 1


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps each export's spans (name -> attributes)."""

    received: ClassVar[list[dict[str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        export = ExportTraceServiceRequest.FromString(body)
        spans = {
            span.name: {a.key: a.value for a in span.attributes}
            for resource in export.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        }
        if self.path == "/v1/traces":
            self.received.append(spans)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_traces_leave_by_otlp_when_the_standard_variables_ask(tmp_path: Path) -> None:
    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    with OpenAIUpstream() as emu:
        config = tidegate_toml(
            sqlite_url(tmp_path), {"emu": {"kind": "openai", "base_url": emu.base_url}}, {"ok": [("emu", "text")]}
        )
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "tidegate-test",
        }
        server = start_server(tmp_path, config, extra_env=env)
        try:
            body = {"model": "ok", "messages": [{"role": "user", "content": "hi"}]}
            assert (
                httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=server.headers).status_code
                == 200
            )
            poll_until(lambda: any("chat ok" in spans for spans in _Collector.received), 10, poll_s=0.1)
        finally:
            server.stop()
            collector.shutdown()
    spans = {name: attrs for export in _Collector.received for name, attrs in export.items()}
    assert "chat ok" in spans and "chat text" in spans, spans.keys()
    assert spans["chat text"]["gen_ai.provider.name"].string_value == "openai"
    assert spans["chat ok"]["gen_ai.usage.output_tokens"].int_value == 7
    assert "tracing: OTLP export on" in server.log()
