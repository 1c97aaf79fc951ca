"""The `[server]` table (docs/configuration.md): the listener, the request limits in front of the
app, the upstream clocks and pools, the drain, leases and route health."""

# no `from __future__ import annotations`: msgspec reads these annotations at class creation
from typing import Annotated

from msgspec import Struct

from .fields import MiB, doc


class ServerConfig(Struct, frozen=True, forbid_unknown_fields=True):
    host: Annotated[str, doc("bind address (`--host` overrides)")] = "127.0.0.1"
    port: Annotated[int, doc("bind port (`--port` overrides)", ge=0, le=65535)] = 8080
    allowed_hosts: Annotated[
        tuple[str, ...] | None,
        doc(
            '`Host` header values (host or host:port patterns, `*.example.com` for subdomains, `"*"` for any) '
            "that the endpoints answering without a key (`/healthz`, `/readyz`, `/metrics`, the console under "
            "`/ui`) accept; any other gets 421. Unset: on a loopback bind `localhost` and loopback addresses, "
            "any port; on another bind, any Host ([security.md](security.md#host-header))"
        ),
    ] = None
    workers: Annotated[int, doc("worker processes (`--workers`)", ge=1)] = 1
    worker_timeout_s: Annotated[
        float,
        doc(
            "with `--workers N` (Linux): a worker whose event loop has not run for this long (a blocking call, "
            "a stopped process) has its threads' stacks written to the log and is killed and replaced; 0 turns "
            "this off",
            ge=0,
        ),
    ] = 30.0
    keepalive_s: Annotated[
        float, doc("write `: <keepalive_text>` after this many seconds without upstream data", gt=0)
    ] = 10.0
    keepalive_text: Annotated[str, doc("the keep-alive comment text")] = "TIDEGATE PROCESSING"
    upstream_idle_timeout_s: Annotated[
        float,
        doc(
            "no upstream byte for this long ends the generation (`upstream_timeout`); keep-alives do not reset it, "
            "and a wait for a free connection (`max_connections`) does not count",
            gt=0,
        ),
    ] = 90.0
    connect_timeout_s: Annotated[
        float,
        doc(
            "bound on opening an upstream connection: name resolution, TCP connect (addresses tried staggered, "
            "250 ms apart), a proxy's `CONNECT` and the TLS handshake; also how long a request waits for a free "
            "connection past a provider's `max_connections`",
            gt=0,
        ),
    ] = 10.0
    max_body_bytes: Annotated[int, doc("larger request bodies get 413 while being read (chunked too)", gt=0)] = 4 * MiB
    max_partial_image_bytes: Annotated[
        int,
        doc(
            "a partial image from an image upstream larger than this (decoded bytes) ends the generation with "
            "`upstream_protocol_error`",
            gt=0,
        ),
    ] = 8 * MiB
    max_image_bytes: Annotated[
        int,
        doc("the same cap for a final image; a non-streaming image answer may be at most `n` such images", gt=0),
    ] = 48 * MiB
    max_header_bytes: Annotated[
        int,
        doc("a request head (request line and headers) larger than this: 431, connection closed", gt=0),
    ] = 65536
    max_headers: Annotated[int, doc("more request headers than this: 431", gt=0)] = 100
    header_timeout_s: Annotated[
        float,
        doc("a request head not complete this long after its first byte (or the connection's start): 408", gt=0),
    ] = 10.0
    body_timeout_s: Annotated[
        float, doc("a request body that sends nothing for this long: the connection is closed", gt=0)
    ] = 30.0
    body_min_bytes_per_s: Annotated[
        int,
        doc(
            "after its first `body_timeout_s`, a request body must have arrived at this average rate or "
            "its connection is closed; and while bodies hold 3/4 of `max_connections`, a new body closes "
            "the slowest one",
            gt=0,
        ),
    ] = 1024
    max_connections: Annotated[
        int,
        doc(
            "open client connections per worker; past it a new connection gets 503 and is closed at once "
            "(running streams go on). Idle keep-alive connections close after 5 s",
            gt=0,
        ),
    ] = 4096
    lease_ttl_s: Annotated[
        float,
        doc(
            "a gateway renews its lease every third of this and sweeps as often; a dead gateway's generations "
            "are `interrupted` at most this plus one sweep after it died (docs/operations.md, Leases)",
            gt=0,
        ),
    ] = 15.0
    drain_s: Annotated[
        float,
        doc(
            "SIGTERM/SIGINT: running streams get this long to finish, then end `interrupted`; 0 ends them at once;"
            " the process exits within `drain_s` + 2 s",
            ge=0,
        ),
    ] = 30.0
    log_requests: Annotated[
        bool,
        doc(
            "one log line per request when it ends (`tidegate.access`): method, path, status, generation id, key "
            "name, model, provider, outcome, time to first token, duration, cost; never a body or a secret"
        ),
    ] = True
    breaker_failures: Annotated[
        int,
        doc(
            "a route's circuit breaker opens after this many consecutive failures before the first byte (a 429 "
            "counts); 0 turns breakers off. Per model too ([routing.md](routing.md))",
            ge=0,
        ),
    ] = 5
    breaker_cooldown_s: Annotated[
        float,
        doc(
            "an open breaker lets one real request probe the route after this long (at least the `Retry-After` "
            "of a 429 that opened it). Per model too",
            gt=0,
        ),
    ] = 30.0
    affinity_ttl_s: Annotated[
        float,
        doc(
            "prompt-cache affinity: a request of the same session, `prompt_cache_key` or prompt prefix prefers "
            "the route that served the last one for this long (a provider's prompt cache); 0 turns it off "
            "([routing.md](routing.md#prompt-cache-affinity))",
            ge=0,
            le=86_400,
        ),
    ] = 300.0
    affinity_long_ttl_s: Annotated[
        float,
        doc('the same for a request with a `cache_control` breakpoint of `ttl: "1h"`', ge=0, le=86_400),
    ] = 3600.0
