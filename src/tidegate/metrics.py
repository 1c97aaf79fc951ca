"""Prometheus metrics (docs/api-edges.md §14), with `prometheus-client`.

One registry per process; under `tidegate serve --workers N` the supervisor gives every worker the
same `PROMETHEUS_MULTIPROC_DIR` (server/runtime/workers.py) and `/metrics` in any worker answers for all of
them (`MultiProcessCollector`). Labels are bounded: routes with ids replaced, catalog model ids,
configured provider names, failure codes, statuses; never a key, a prompt or free text. Nothing
here runs per chunk: a generation's metrics are counted once, when it ends.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)

disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series beside every counter: nothing here reads them
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REGISTRY = CollectorRegistry()
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

HTTP_REQUESTS = Counter(
    "tidegate_http_requests", "HTTP responses by route and status", ("route", "status"), registry=REGISTRY
)
REQUESTS = Counter(
    "tidegate_requests",
    "Finished generations by door (chat, responses, native, ...), model, provider and status",
    ("door", "model", "provider", "status"),
    registry=REGISTRY,
)
REJECTED = Counter(
    "tidegate_rejected",
    "API requests refused before a generation began (server/rejections.py), by error code",
    ("code",),
    registry=REGISTRY,
)
STREAM_FAILURES = Counter(
    "tidegate_stream_failures",
    "Generations that did not complete (failed, cancelled, interrupted), by error code and provider",
    ("code", "provider"),
    registry=REGISTRY,
)
CHUNKS = Counter(
    "tidegate_chunks_relayed",
    "Content deltas (text, reasoning, tool arguments) relayed to clients, by model; added when a generation ends",
    ("model",),
    registry=REGISTRY,
)
TOKENS = Counter(
    "tidegate_tokens", "Tokens by model and kind (prompt, completion)", ("model", "kind"), registry=REGISTRY
)
COST = Counter("tidegate_cost_usd", "Billed USD by model", ("model",), registry=REGISTRY)
ROUTE_AFFINITY = Counter(
    "tidegate_route_affinity",
    "Requests prompt-cache affinity decided, by model and result (hit: the remembered route first; miss)",
    ("model", "result"),
    registry=REGISTRY,
)
UPSTREAM_FAILURES = Counter(
    "tidegate_upstream_failures", "Upstream failures by provider and code", ("provider", "code"), registry=REGISTRY
)
UPSTREAM_POOL_WAITS = Counter(
    "tidegate_upstream_pool_waits",
    "Upstream requests that waited for a connection: the provider's max_connections were all open",
    ("provider",),
    registry=REGISTRY,
)
FALLBACKS = Counter(
    "tidegate_fallbacks",
    "Generations that moved to another route before answering, by model",
    ("model",),
    registry=REGISTRY,
)
LIMIT_REJECTIONS = Counter(
    "tidegate_limit_rejections",
    "Requests a key's credits or limits refused, by reason (credits, rpm, tpm, concurrent)",
    ("reason",),
    registry=REGISTRY,
)
CACHE_REQUESTS = Counter(
    "tidegate_cache_requests",
    "Requests of models or keys with the response cache on, by result (hit, miss, bypass)",
    ("model", "result"),
    registry=REGISTRY,
)
CACHE_BYTES = Counter(
    "tidegate_cache_bytes", "Bytes of cached answers (their events) served by hits", registry=REGISTRY
)
CACHE_EVICTIONS = Counter(
    "tidegate_cache_evictions",
    "Cache entries evicted, least recently used first, to keep the store under [cache] max_total_bytes",
    registry=REGISTRY,
)
CACHE_SAVED_COST = Counter(
    "tidegate_cache_saved_cost",
    "USD the original answers cost, served again by cache hits",
    ("model",),
    registry=REGISTRY,
)
TTFT = Histogram(
    "tidegate_ttft_seconds",
    "Time from request to first token",
    ("model",),
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
DURATION = Histogram(
    "tidegate_generation_duration_seconds",
    "Time from request to the generation's end, by model and status",
    ("model", "status"),
    buckets=_SECONDS,
    registry=REGISTRY,
)
BREAKER_OPEN = Gauge(
    "tidegate_route_breaker_open",
    "1 while a route's circuit breaker is open or half-open (in any worker), else 0; route = provider/model",
    ("route",),
    multiprocess_mode="livemax",
    registry=REGISTRY,
)
KEEPALIVES = Counter(
    "tidegate_keepalives", "Keep-alive comments written to clients while the upstream was silent", registry=REGISTRY
)
LOG_FLUSH = Histogram(
    "tidegate_log_flush_seconds",
    "One flusher round: storing the running keyed generations' pending event logs (the store's lag)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=REGISTRY,
)
RUNNING = Gauge("tidegate_generations_running", "Generations running", multiprocess_mode="livesum", registry=REGISTRY)
OPEN_STREAMS = Gauge(
    "tidegate_open_streams",
    "Streaming (SSE) generation responses open now",
    multiprocess_mode="livesum",
    registry=REGISTRY,
)


def render() -> bytes:
    """The exposition: this process's metrics, or every worker's under `--workers`."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(REGISTRY)
