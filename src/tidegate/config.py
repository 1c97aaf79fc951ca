"""Configuration: one TOML file (CONTRACT §9), validated with messages that name the bad key.

Lookup order: `--config`, then `$TIDEGATE_CONFIG`, then `./tidegate.toml`, then the embedded default.
Secrets never live in the file: providers name environment variables (`api_key_env`, ...).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .config_mcp import McpConfig, parse_mcp
from .config_upstream import connection_options, upstream_url
from .config_values import check_keys, not_negative, positive, table, typed
from .errors import ConfigError

PROVIDER_KINDS = ("openai", "anthropic", "bedrock", "vertex", "local")
MODEL_TYPES = ("chat", "embedding", "image", "router")
STRATEGIES = ("ordered", "weighted", "least_latency", "least_busy")
POLICIES = ("ordered", "cheapest", "fastest", "balanced")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    keepalive_s: float = 10.0
    keepalive_text: str = "TIDEGATE PROCESSING"
    upstream_idle_timeout_s: float = 90.0
    connect_timeout_s: float = 10.0
    max_body_bytes: int = 4 * 1024 * 1024
    workers: int = 1
    worker_timeout_s: float = 30.0  # --workers N: a worker whose event loop is silent this long is replaced
    max_partial_image_bytes: int = 8 * 1024 * 1024  # decoded bytes of one partial image from an upstream
    max_image_bytes: int = 48 * 1024 * 1024  # decoded bytes of one final image from an upstream
    max_header_bytes: int = 65536  # a request head larger than this: 431 (CONTRACT §16, server/guard.py)
    max_headers: int = 100
    header_timeout_s: float = 10.0  # a request head must arrive within this
    body_timeout_s: float = 30.0  # a request body may send nothing for this long
    max_connections: int = 4096  # open client connections per worker; past it a new one is refused
    lease_ttl_s: float = 15.0  # a generation's owner renews its lease every third of this (CONTRACT §10)
    drain_s: float = 30.0  # SIGTERM: running streams get this long to finish
    breaker_failures: int = 5  # consecutive failures before the first byte that open a route's breaker; 0 = off
    breaker_cooldown_s: float = 30.0  # an open breaker lets one probe through after this long


@dataclass(frozen=True, slots=True)
class StoreConfig:
    url: str = "sqlite:///tidegate.db"
    retention_hours: float = 24.0


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    kind: str
    base_url: str | None = None
    api_key_env: str | None = None
    region: str | None = None
    jurisdiction: str | None = None  # e.g. "eu": what a request's or key's `jurisdictions` match
    endpoint_url: str | None = None
    project: str | None = None
    access_token_env: str | None = None
    upstream_idle_timeout_s: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    model_path: str | None = None
    n_ctx: int = 2048
    n_threads: int | None = None
    # how the HTTP kinds connect (CONTRACT §15; `providers/upstream.py`)
    proxy: str | bool | None = field(default=None, repr=False)  # None: the environment; may hold credentials
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    verify: bool = True
    max_connections: int = 100
    pool_idle_timeout_s: float = 15.0


@dataclass(frozen=True, slots=True)
class Pricing:
    prompt: float = 0.0
    completion: float = 0.0


@dataclass(frozen=True, slots=True)
class Route:
    provider: str
    model: str
    weight: float = 1.0  # strategy = "weighted": this route's share
    pricing: Pricing | None = None  # overrides the model's for this route


@dataclass(frozen=True, slots=True)
class Breaker:
    failures: int = 5
    cooldown_s: float = 30.0


@dataclass(frozen=True, slots=True)
class ModelConfig:
    id: str
    type: str
    routes: tuple[Route, ...]
    pricing: Pricing | None = None
    owned_by: str | None = None
    capabilities: tuple[str, ...] = ()
    context_length: int | None = None
    max_output_tokens: int | None = None  # what a reservation assumes when a request names no cap (§11)
    strategy: str = "ordered"
    breaker: Breaker = Breaker()
    candidates: tuple[str, ...] = ()  # type = "router": catalog model ids
    policy: str = "ordered"  # type = "router"
    balanced_within_pct: float = 20.0  # policy = "balanced": cost within this % of the cheapest


@dataclass(frozen=True, slots=True)
class Config:
    server: ServerConfig
    store: StoreConfig
    providers: dict[str, ProviderConfig]
    models: dict[str, ModelConfig]
    source: str = "<embedded default>"
    mcp: McpConfig = field(default_factory=McpConfig)

    def provider_idle_timeout(self, provider: str) -> float:
        p = self.providers.get(provider)
        if p is not None and p.upstream_idle_timeout_s is not None:
            return p.upstream_idle_timeout_s
        return self.server.upstream_idle_timeout_s


def _parse_server(raw: dict[str, Any]) -> ServerConfig:
    check_keys("server", raw, set(ServerConfig.__dataclass_fields__))
    d = ServerConfig()
    port = int(typed("server.port", raw.get("port", d.port), int, "an integer"))
    if not 0 <= port <= 65535:
        raise ConfigError(f"server.port: must be 0-65535, got {port}")
    return ServerConfig(
        host=str(typed("server.host", raw.get("host", d.host), str, "a string")),
        port=port,
        keepalive_s=positive("server.keepalive_s", raw.get("keepalive_s", d.keepalive_s)),
        keepalive_text=str(
            typed("server.keepalive_text", raw.get("keepalive_text", d.keepalive_text), str, "a string")
        ),
        upstream_idle_timeout_s=positive(
            "server.upstream_idle_timeout_s", raw.get("upstream_idle_timeout_s", d.upstream_idle_timeout_s)
        ),
        connect_timeout_s=positive("server.connect_timeout_s", raw.get("connect_timeout_s", d.connect_timeout_s)),
        max_body_bytes=int(positive("server.max_body_bytes", raw.get("max_body_bytes", d.max_body_bytes))),
        workers=int(positive("server.workers", raw.get("workers", d.workers))),
        worker_timeout_s=not_negative("server.worker_timeout_s", raw.get("worker_timeout_s", d.worker_timeout_s)),
        max_partial_image_bytes=int(
            positive("server.max_partial_image_bytes", raw.get("max_partial_image_bytes", d.max_partial_image_bytes))
        ),
        max_image_bytes=int(positive("server.max_image_bytes", raw.get("max_image_bytes", d.max_image_bytes))),
        max_header_bytes=int(positive("server.max_header_bytes", raw.get("max_header_bytes", d.max_header_bytes))),
        max_headers=int(positive("server.max_headers", raw.get("max_headers", d.max_headers))),
        header_timeout_s=positive("server.header_timeout_s", raw.get("header_timeout_s", d.header_timeout_s)),
        body_timeout_s=positive("server.body_timeout_s", raw.get("body_timeout_s", d.body_timeout_s)),
        max_connections=int(positive("server.max_connections", raw.get("max_connections", d.max_connections))),
        lease_ttl_s=positive("server.lease_ttl_s", raw.get("lease_ttl_s", d.lease_ttl_s)),
        drain_s=not_negative("server.drain_s", raw.get("drain_s", d.drain_s)),
        breaker_failures=_count("server.breaker_failures", raw.get("breaker_failures", d.breaker_failures)),
        breaker_cooldown_s=positive("server.breaker_cooldown_s", raw.get("breaker_cooldown_s", d.breaker_cooldown_s)),
    )


def _count(where: str, value: Any) -> int:
    num = typed(where, value, int, "an integer")
    if num < 0:
        raise ConfigError(f"{where}: must be >= 0, got {value}")
    return int(num)


def _parse_store(raw: dict[str, Any]) -> StoreConfig:
    check_keys("store", raw, {"url", "retention_hours"})
    d = StoreConfig()
    url = str(typed("store.url", raw.get("url", d.url), str, "a string"))
    if not url.startswith(("sqlite://", "redis://", "rediss://", "postgresql://", "postgres://")):
        raise ConfigError(f"store.url: unsupported scheme in {url.split('://')[0]!r} (sqlite, redis, postgresql)")
    return StoreConfig(
        url=url,
        retention_hours=positive("store.retention_hours", raw.get("retention_hours", d.retention_hours)),
    )


_PROVIDER_KEYS = set(ProviderConfig.__dataclass_fields__) - {"name"}
_REQUIRED_BY_KIND: dict[str, tuple[str, ...]] = {
    "openai": ("base_url",),
    "anthropic": (),
    "bedrock": ("region",),
    "vertex": ("region",),
    "local": (),
}


def _parse_provider(name: str, raw: dict[str, Any]) -> ProviderConfig:
    where = f"providers.{name}"
    check_keys(where, raw, _PROVIDER_KEYS)
    kind = raw.get("kind")
    if kind not in PROVIDER_KINDS:
        raise ConfigError(f"{where}.kind: must be one of {', '.join(PROVIDER_KINDS)}, got {kind!r}")
    for key in _REQUIRED_BY_KIND[kind]:
        if key not in raw:
            raise ConfigError(f"{where}.{key}: required for kind = {kind!r}")
    str_keys = (
        "base_url",
        "api_key_env",
        "region",
        "jurisdiction",
        "endpoint_url",
        "project",
        "access_token_env",
        "model_path",
    )
    values: dict[str, Any] = {}
    for key in str_keys:
        if key in raw:
            values[key] = str(typed(f"{where}.{key}", raw[key], str, "a string"))
    for key in ("base_url", "endpoint_url"):
        if key in values:
            values[key] = upstream_url(f"{where}.{key}", values[key])
    if "upstream_idle_timeout_s" in raw:
        values["upstream_idle_timeout_s"] = positive(f"{where}.upstream_idle_timeout_s", raw["upstream_idle_timeout_s"])
    if "headers" in raw:
        headers = table(f"{where}.headers", raw["headers"])
        for hk, hv in headers.items():
            typed(f"{where}.headers.{hk}", hv, str, "a string")
        values["headers"] = {str(k): str(v) for k, v in headers.items()}
    if "n_ctx" in raw:
        values["n_ctx"] = int(positive(f"{where}.n_ctx", raw["n_ctx"]))
    if "n_threads" in raw:
        values["n_threads"] = int(positive(f"{where}.n_threads", raw["n_threads"]))
    values.update(connection_options(where, raw))
    return ProviderConfig(name=name, kind=kind, **values)


def _parse_pricing(where: str, raw: Any) -> Pricing:
    pr = table(where, raw)
    check_keys(where, pr, {"prompt", "completion"})
    return Pricing(
        prompt=float(typed(f"{where}.prompt", pr.get("prompt", 0.0), (int, float), "a number")),
        completion=float(typed(f"{where}.completion", pr.get("completion", 0.0), (int, float), "a number")),
    )


_MODEL_KEYS = {
    "type",
    "routes",
    "pricing",
    "owned_by",
    "capabilities",
    "context_length",
    "max_output_tokens",
    "strategy",
    "breaker_failures",
    "breaker_cooldown_s",
    "candidates",
    "policy",
    "balanced_within_pct",
}


def _parse_routes(where: str, raw: dict[str, Any], providers: dict[str, ProviderConfig]) -> tuple[Route, ...]:
    routes_raw = typed(f"{where}.routes", raw.get("routes"), list, "a list of {provider, model} tables")
    if not routes_raw:
        raise ConfigError(f"{where}.routes: at least one route is required")
    routes: list[Route] = []
    for i, r in enumerate(routes_raw):
        rw = f"{where}.routes[{i}]"
        r = table(rw, r)
        check_keys(rw, r, {"provider", "model", "weight", "pricing"})
        prov = r.get("provider")
        if prov not in providers:
            raise ConfigError(f"{rw}.provider: no provider named {prov!r} in [providers]")
        served = typed(f"{rw}.model", r.get("model"), str, "a string (the upstream's model id)")
        weight = positive(f"{rw}.weight", r.get("weight", 1))
        pricing = _parse_pricing(f"{rw}.pricing", r["pricing"]) if "pricing" in r else None
        routes.append(Route(provider=str(prov), model=str(served), weight=weight, pricing=pricing))
    return tuple(routes)


def _parse_model(
    model_id: str, raw: dict[str, Any], providers: dict[str, ProviderConfig], server: ServerConfig
) -> ModelConfig:
    where = f'models."{model_id}"'
    check_keys(where, raw, _MODEL_KEYS)
    mtype = raw.get("type", "chat")
    if mtype not in MODEL_TYPES:
        raise ConfigError(f"{where}.type: must be one of {', '.join(MODEL_TYPES)}, got {mtype!r}")
    candidates: tuple[str, ...] = ()
    policy = str(raw.get("policy", "ordered"))
    if mtype == "router":
        if "routes" in raw:
            raise ConfigError(f"{where}.routes: a router model has candidates, not routes")
        cands = typed(f"{where}.candidates", raw.get("candidates"), list, "a list of catalog model ids")
        if not cands:
            raise ConfigError(f"{where}.candidates: at least one candidate is required")
        candidates = tuple(str(typed(f"{where}.candidates[]", c, str, "a string")) for c in cands)
        if policy not in POLICIES:
            raise ConfigError(f"{where}.policy: must be one of {', '.join(POLICIES)}, got {policy!r}")
        routes: tuple[Route, ...] = ()
    else:
        for key in ("candidates", "policy", "balanced_within_pct"):
            if key in raw:
                raise ConfigError(f'{where}.{key}: only for type = "router" models')
        routes = _parse_routes(where, raw, providers)
    strategy = raw.get("strategy", "ordered")
    if strategy not in STRATEGIES:
        raise ConfigError(f"{where}.strategy: must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    breaker = Breaker(
        failures=_count(f"{where}.breaker_failures", raw.get("breaker_failures", server.breaker_failures)),
        cooldown_s=positive(f"{where}.breaker_cooldown_s", raw.get("breaker_cooldown_s", server.breaker_cooldown_s)),
    )
    pricing = _parse_pricing(f"{where}.pricing", raw["pricing"]) if "pricing" in raw else None
    caps = tuple(
        str(typed(f"{where}.capabilities[]", c, str, "a string"))
        for c in typed(f"{where}.capabilities", raw.get("capabilities", []), list, "a list")
    )
    owned_by = raw.get("owned_by")
    if owned_by is not None:
        typed(f"{where}.owned_by", owned_by, str, "a string")
    ctx = raw.get("context_length")
    if ctx is not None:
        ctx = int(positive(f"{where}.context_length", ctx))
    max_out = raw.get("max_output_tokens")
    if max_out is not None:
        max_out = int(positive(f"{where}.max_output_tokens", max_out))
    return ModelConfig(
        id=model_id,
        type=str(mtype),
        routes=routes,
        pricing=pricing,
        owned_by=owned_by,
        capabilities=caps,
        context_length=ctx,
        max_output_tokens=max_out,
        strategy=str(strategy),
        breaker=breaker,
        candidates=candidates,
        policy=policy,
        balanced_within_pct=not_negative(f"{where}.balanced_within_pct", raw.get("balanced_within_pct", 20.0)),
    )


def _check_candidates(models: dict[str, ModelConfig]) -> None:
    for m in models.values():
        for c in m.candidates:
            target = models.get(c)
            if target is None:
                raise ConfigError(f'models."{m.id}".candidates: no model {c!r} in the catalog')
            if target.type != "chat":
                raise ConfigError(f'models."{m.id}".candidates: {c!r} is a {target.type} model, not a chat model')


def parse_config(data: dict[str, Any], source: str = "<memory>") -> Config:
    check_keys("<root>", data, {"server", "store", "providers", "models", "mcp"})
    server = _parse_server(table("server", data.get("server", {})))
    store = _parse_store(table("store", data.get("store", {})))
    providers: dict[str, ProviderConfig] = {}
    for name, praw in table("providers", data.get("providers", {})).items():
        providers[name] = _parse_provider(name, table(f"providers.{name}", praw))
    models: dict[str, ModelConfig] = {}
    for mid, mraw in table("models", data.get("models", {})).items():
        models[mid] = _parse_model(mid, table(f'models."{mid}"', mraw), providers, server)
    _check_candidates(models)
    mcp = parse_mcp(table("mcp", data.get("mcp", {})))
    return Config(server=server, store=store, providers=providers, models=models, source=source, mcp=mcp)


def load_text(text: str, source: str) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from None
    return parse_config(data, source)


def default_config_text() -> str:
    return resources.files("tidegate").joinpath("default_config.toml").read_text("utf-8")


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Load the config by the CONTRACT §9 lookup order."""
    candidates: list[Path] = []
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"--config: no such file: {p}")
        candidates.append(p)
    elif os.environ.get("TIDEGATE_CONFIG"):
        p = Path(os.environ["TIDEGATE_CONFIG"])
        if not p.is_file():
            raise ConfigError(f"$TIDEGATE_CONFIG: no such file: {p}")
        candidates.append(p)
    elif Path("tidegate.toml").is_file():
        candidates.append(Path("tidegate.toml"))
    if candidates:
        return load_text(candidates[0].read_text("utf-8"), str(candidates[0]))
    return load_text(default_config_text(), "<embedded default>")
