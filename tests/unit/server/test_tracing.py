"""Traces (docs/api-edges.md §14, tracing.py) with the OpenTelemetry SDK's in-memory exporter: a fallback gives one
generation span and one child span per upstream attempt, with the GenAI semantic conventions'
attributes; no prompt or output is recorded unless the operator opts in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.loop import serving_asgi
from tidegate import tracing
from tidegate.config.load import load_text
from tidegate.keys import make_key
from tidegate.server.app import TidegateApp


@pytest.fixture(scope="module")
def emu() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as upstream:
        yield upstream


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    yield exporter
    tracing._tracer = None  # off again for the rest of the suite


async def _chat(emu: OpenAIUpstream, model: str, stream: bool) -> httpx.Response:
    config = load_text(
        tidegate_toml(
            "sqlite:///:memory:",
            {"a": {"kind": "openai", "base_url": emu.base_url}, "b": {"kind": "openai", "base_url": emu.base_url}},
            {"fb": [("a", "http-503"), ("b", "text")]},
            server={"breaker_failures": 0},
        ),
        "test",
    )
    app = TidegateApp(config)
    await app.state.store.open()
    await app.state.leases.start()
    key, secret = make_key("t")
    await app.state.store.create_key(key)

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        await app(scope, receive, send)

    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": "a secret prompt"}]}
    try:
        async with serving_asgi(handler) as port, httpx.AsyncClient(timeout=30) as client:
            return await client.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}
            )
    finally:
        await app.state.gateway.aclose()
        await app.state.leases.stop()
        await app.state.store.close()


@pytest.mark.parametrize("stream", [True, False])
async def test_a_fallback_is_a_generation_span_with_an_attempt_span_per_route(
    emu: OpenAIUpstream, spans: InMemorySpanExporter, stream: bool
) -> None:
    resp = await _chat(emu, "fb", stream)
    assert resp.status_code == 200
    finished = spans.get_finished_spans()
    generation = next(s for s in finished if s.kind == SpanKind.SERVER)
    attempts = sorted((s for s in finished if s.kind == SpanKind.CLIENT), key=lambda s: s.start_time or 0)
    assert generation.name == "chat fb" and [a.name for a in attempts] == ["chat http-503", "chat text"]
    assert all(a.parent is not None and a.parent.span_id == generation.context.span_id for a in attempts)
    assert all(a.context.trace_id == generation.context.trace_id for a in attempts)
    g = dict(generation.attributes or {})
    assert g["gen_ai.operation.name"] == "chat" and g["gen_ai.request.model"] == "fb"
    assert g["gen_ai.response.model"] == "text" and g["tidegate.attempts"] == 2
    assert g["gen_ai.usage.input_tokens"] == 11 and g["gen_ai.usage.output_tokens"] == 7
    assert g["gen_ai.response.finish_reasons"] == ("stop",)
    assert g["tidegate.generation.id"] == resp.headers["x-generation-id"]
    first, second = (dict(a.attributes or {}) for a in attempts)
    assert first["gen_ai.provider.name"] == "openai" and first["tidegate.provider"] == "a"
    assert first["error.type"] == "upstream_error" and attempts[0].status.status_code == StatusCode.ERROR
    assert second["tidegate.served"] is True and "error.type" not in second
    assert generation.status.status_code != StatusCode.ERROR
    everything = str([dict(s.attributes or {}) for s in finished])
    assert "a secret prompt" not in everything and "Hello" not in everything  # no content unless opted in
