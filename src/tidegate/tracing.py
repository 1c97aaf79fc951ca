"""OpenTelemetry traces (docs/api-edges.md §14), optional: `pip install 'tidegate[otel]'`.

One span per generation (`chat {model}`, the public model id) and one child span per upstream attempt
(`chat {served model}`, kind CLIENT), with the OpenTelemetry GenAI semantic conventions' attributes:
`gen_ai.operation.name`, `gen_ai.provider.name` (and the older `gen_ai.system`), `gen_ai.request.model`,
`gen_ai.response.model`, `gen_ai.usage.input_tokens` / `output_tokens`, `gen_ai.response.finish_reasons`,
`error.type`. Prompts and outputs are recorded only when the operator opts in with the convention's
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.

Off unless an OTLP exporter is asked for with the standard variables (`OTEL_TRACES_EXPORTER=otlp`, or
`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); the SDK's exporter and resource
read the rest (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, headers, protocol). Off, nothing here
runs but one `is None` test per generation and per attempt; on, nothing runs per chunk.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import orjson

log = logging.getLogger("tidegate.tracing")

_tracer: Any = None  # an opentelemetry Tracer when tracing is on
_capture_content = False


def use(provider: Any) -> None:
    """Trace into `provider` (an `opentelemetry.sdk.trace.TracerProvider`): what `configure` does with
    the OTLP exporter, and what a test does with the SDK's in-memory exporter."""
    global _tracer, _capture_content
    _tracer = provider.get_tracer("tidegate")
    _capture_content = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").lower() == "true"


def configure() -> None:
    """At a worker's start: the OTLP exporter when the environment asks for one."""
    wanted = os.environ.get("OTEL_TRACES_EXPORTER", "").lower()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if wanted == "none" or not (wanted == "otlp" or endpoint):
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_* asks for traces but the OpenTelemetry SDK is not installed: pip install 'tidegate[otel]'")
        return
    provider = TracerProvider(
        resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "tidegate")})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    use(provider)
    log.info("tracing: OTLP export on")


def start_generation(public_model: str, generation_id: str, max_tokens: int | None, messages: Any) -> Any:
    """The generation's span, or None when tracing is off."""
    if _tracer is None:
        return None
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": public_model,
        "tidegate.generation.id": generation_id,
    }
    if max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    if _capture_content:
        attributes["gen_ai.input.messages"] = orjson.dumps(messages).decode()
    return _tracer.start_span(f"chat {public_model}", kind=SpanKind.SERVER, attributes=attributes)


def end_generation(span: Any, record: Any) -> None:
    """The record's outcome on the generation's span, which ends."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("tidegate.status", record.status)
    span.set_attribute("gen_ai.usage.input_tokens", record.usage.prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", record.usage.completion_tokens)
    span.set_attribute("tidegate.attempts", record.attempts)
    if record.provider:
        span.set_attribute("tidegate.provider", record.provider)
    if record.served_model:
        span.set_attribute("gen_ai.response.model", record.served_model)
    if record.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [record.finish_reason])
    if _capture_content and record.output_text:
        span.set_attribute(
            "gen_ai.output.messages", orjson.dumps([{"role": "assistant", "content": record.output_text}]).decode()
        )
    if record.status != "completed":
        code = (record.error or {}).get("code") or record.status
        span.set_attribute("error.type", str(code))
        span.set_status(Status(StatusCode.ERROR, str(code)))
    span.end()


def start_attempt(parent: Any, provider: str, system: str, served_model: str) -> Any:
    """An upstream attempt's span, a child of the generation's. `system`: gen_ai.provider.name's
    well-known value for the provider's kind (its `otel_name`, providers/kinds.py)."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": system,
        "gen_ai.system": system,
        "gen_ai.request.model": served_model,
        "tidegate.provider": provider,
    }
    context = trace.set_span_in_context(parent)
    return _tracer.start_span(f"chat {served_model}", context=context, kind=SpanKind.CLIENT, attributes=attributes)


def end_attempt(span: Any, served: bool, failure_code: str | None) -> None:
    """`served`: this attempt's route answered (the response started from it)."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("tidegate.served", served)
    if failure_code is not None:
        span.set_attribute("error.type", failure_code)
        span.set_status(Status(StatusCode.ERROR, failure_code))
    span.end()
