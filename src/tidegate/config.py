"""Configuration: one TOML file (CONTRACT §9), validated with messages that name the bad key.

Lookup order: `--config`, then `$TIDEGATE_CONFIG`, then `./tidegate.toml`, then the embedded default.
Secrets never live in the file: providers name environment variables (`api_key_env`, ...).
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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

    def provider_idle_timeout(self, provider: str) -> float:
        p = self.providers.get(provider)
        if p is not None and p.upstream_idle_timeout_s is not None:
            return p.upstream_idle_timeout_s
        return self.server.upstream_idle_timeout_s


def _check_keys(where: str, table: dict[str, Any], allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key (allowed: {', '.join(sorted(allowed))})")


def _typed(where: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else ()):
        raise ConfigError(f"{where}: expected {what}, got a boolean")
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: expected {what}, got {type(value).__name__}")
    return value


def _positive(where: str, value: Any) -> float:
    num = float(_typed(where, value, (int, float), "a number"))
    if not num > 0:  # nan too
        raise ConfigError(f"{where}: must be > 0, got {value}")
    return num


def _not_negative(where: str, value: Any) -> float:
    num = float(_typed(where, value, (int, float), "a number"))
    if not num >= 0:  # nan too
        raise ConfigError(f"{where}: must be >= 0, got {value}")
    return num


def _table(where: str, value: Any) -> dict[str, Any]:
    return dict(_typed(where, value, dict, "a table"))


def _parse_server(raw: dict[str, Any]) -> ServerConfig:
    _check_keys("server", raw, set(ServerConfig.__dataclass_fields__))
    d = ServerConfig()
    port = int(_typed("server.port", raw.get("port", d.port), int, "an integer"))
    if not 0 <= port <= 65535:
        raise ConfigError(f"server.port: must be 0-65535, got {port}")
    return ServerConfig(
        host=str(_typed("server.host", raw.get("host", d.host), str, "a string")),
        port=port,
        keepalive_s=_positive("server.keepalive_s", raw.get("keepalive_s", d.keepalive_s)),
        keepalive_text=str(
            _typed("server.keepalive_text", raw.get("keepalive_text", d.keepalive_text), str, "a string")
        ),
        upstream_idle_timeout_s=_positive(
            "server.upstream_idle_timeout_s", raw.get("upstream_idle_timeout_s", d.upstream_idle_timeout_s)
        ),
        connect_timeout_s=_positive("server.connect_timeout_s", raw.get("connect_timeout_s", d.connect_timeout_s)),
        max_body_bytes=int(_positive("server.max_body_bytes", raw.get("max_body_bytes", d.max_body_bytes))),
        workers=int(_positive("server.workers", raw.get("workers", d.workers))),
        worker_timeout_s=_not_negative("server.worker_timeout_s", raw.get("worker_timeout_s", d.worker_timeout_s)),
        max_partial_image_bytes=int(
            _positive("server.max_partial_image_bytes", raw.get("max_partial_image_bytes", d.max_partial_image_bytes))
        ),
        max_image_bytes=int(_positive("server.max_image_bytes", raw.get("max_image_bytes", d.max_image_bytes))),
        max_header_bytes=int(_positive("server.max_header_bytes", raw.get("max_header_bytes", d.max_header_bytes))),
        max_headers=int(_positive("server.max_headers", raw.get("max_headers", d.max_headers))),
        header_timeout_s=_positive("server.header_timeout_s", raw.get("header_timeout_s", d.header_timeout_s)),
        body_timeout_s=_positive("server.body_timeout_s", raw.get("body_timeout_s", d.body_timeout_s)),
        max_connections=int(_positive("server.max_connections", raw.get("max_connections", d.max_connections))),
        lease_ttl_s=_positive("server.lease_ttl_s", raw.get("lease_ttl_s", d.lease_ttl_s)),
        drain_s=_not_negative("server.drain_s", raw.get("drain_s", d.drain_s)),
        breaker_failures=_count("server.breaker_failures", raw.get("breaker_failures", d.breaker_failures)),
        breaker_cooldown_s=_positive("server.breaker_cooldown_s", raw.get("breaker_cooldown_s", d.breaker_cooldown_s)),
    )


def _count(where: str, value: Any) -> int:
    num = _typed(where, value, int, "an integer")
    if num < 0:
        raise ConfigError(f"{where}: must be >= 0, got {value}")
    return int(num)


def _parse_store(raw: dict[str, Any]) -> StoreConfig:
    _check_keys("store", raw, {"url", "retention_hours"})
    d = StoreConfig()
    url = str(_typed("store.url", raw.get("url", d.url), str, "a string"))
    if not url.startswith(("sqlite://", "redis://", "rediss://", "postgresql://", "postgres://")):
        raise ConfigError(f"store.url: unsupported scheme in {url.split('://')[0]!r} (sqlite, redis, postgresql)")
    return StoreConfig(
        url=url,
        retention_hours=_positive("store.retention_hours", raw.get("retention_hours", d.retention_hours)),
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
    _check_keys(where, raw, _PROVIDER_KEYS)
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
            values[key] = str(_typed(f"{where}.{key}", raw[key], str, "a string"))
    for key in ("base_url", "endpoint_url"):
        if key in values:
            values[key] = _upstream_url(f"{where}.{key}", values[key])
    if "upstream_idle_timeout_s" in raw:
        values["upstream_idle_timeout_s"] = _positive(
            f"{where}.upstream_idle_timeout_s", raw["upstream_idle_timeout_s"]
        )
    if "headers" in raw:
        headers = _table(f"{where}.headers", raw["headers"])
        for hk, hv in headers.items():
            _typed(f"{where}.headers.{hk}", hv, str, "a string")
        values["headers"] = {str(k): str(v) for k, v in headers.items()}
    if "n_ctx" in raw:
        values["n_ctx"] = int(_positive(f"{where}.n_ctx", raw["n_ctx"]))
    if "n_threads" in raw:
        values["n_threads"] = int(_positive(f"{where}.n_threads", raw["n_threads"]))
    values.update(_connection_options(where, raw))
    return ProviderConfig(name=name, kind=kind, **values)


# Cloud instance-metadata endpoints: an upstream there hands out the host's credentials
_METADATA_HOSTS = frozenset({"169.254.169.254", "fd00:ec2::254", "metadata.google.internal", "100.100.100.200"})


def _link_local(host: str) -> bool:
    """169.254.0.0/16 and fe80::/10 however written (`2852039166` is 169.254.169.254 to a resolver)."""
    try:
        address = ipaddress.ip_address(int(host) if host.isdigit() else host)
    except ValueError:
        return False
    return address.is_link_local


def _upstream_url(where: str, url: str) -> str:
    """A provider's base URL: http(s), no control characters (a CR/LF would split the request head),
    no user info (credentials come from the environment, and `user:pass@` was silently dropped), no
    cloud metadata address. Returned without a trailing slash."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ConfigError(f"{where}: contains a control character (CR, LF, tab...)")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: must start with http:// or https://")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise ConfigError(f"{where}: not a valid URL ({exc})") from None
    if not parts.hostname:
        raise ConfigError(f"{where}: has no host")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ConfigError(f"{where}: must not carry user info (user:pass@); provider credentials come from api_key_env")
    if parts.hostname.lower() in _METADATA_HOSTS or _link_local(parts.hostname):
        raise ConfigError(f"{where}: {parts.hostname} is a link-local or cloud metadata address, never an upstream")
    return url.rstrip("/")


def _connection_options(where: str, raw: dict[str, Any]) -> dict[str, Any]:
    """`proxy`, `ca_file`, `client_cert`, `client_key`, `verify`, `max_connections`, `pool_idle_timeout_s`:
    files are loaded here once so that a bad one is a config error naming its key, not a failed request."""
    values: dict[str, Any] = {}
    if "proxy" in raw:
        proxy = raw["proxy"]
        if proxy is not False and not isinstance(proxy, str):
            raise ConfigError(f'{where}.proxy: expected "http://host:port" or false, got {proxy!r}')
        if isinstance(proxy, str):
            values["proxy"] = _proxy_url(f"{where}.proxy", proxy)
        else:
            values["proxy"] = False
    for key in ("ca_file", "client_cert", "client_key"):
        if key in raw:
            path = str(_typed(f"{where}.{key}", raw[key], str, "a path"))
            if not Path(path).is_file():
                raise ConfigError(f"{where}.{key}: no such file: {path}")
            values[key] = path
    if "client_key" in values and "client_cert" not in values:
        raise ConfigError(f"{where}.client_key: needs client_cert (the certificate it belongs to)")
    if "verify" in raw:
        values["verify"] = bool(_typed(f"{where}.verify", raw["verify"], bool, "true or false"))
    if "max_connections" in raw:
        count = _typed(f"{where}.max_connections", raw["max_connections"], int, "an integer")
        if count < 1:
            raise ConfigError(f"{where}.max_connections: must be >= 1, got {count}")
        values["max_connections"] = int(count)
    if "pool_idle_timeout_s" in raw:
        values["pool_idle_timeout_s"] = _positive(f"{where}.pool_idle_timeout_s", raw["pool_idle_timeout_s"])
    if "ca_file" in values:
        try:
            ssl.create_default_context(cafile=values["ca_file"])
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"{where}.ca_file: not a PEM certificate bundle ({type(exc).__name__})") from None
    if "client_cert" in values:
        try:
            ssl.create_default_context().load_cert_chain(values["client_cert"], values.get("client_key"))
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"{where}.client_cert: the certificate and its key do not load ({type(exc).__name__}: a PEM "
                "certificate, with its unencrypted key in client_key or in the same file)"
            ) from None
    return values


def _proxy_url(where: str, url: str) -> str:
    """An `http://[user:pass@]host[:port]` proxy URL; the message never repeats it (it may hold a password)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http":
        raise ConfigError(f'{where}: must start with http:// (an HTTP proxy; "https://" proxies are not supported)')
    try:
        parts.port  # noqa: B018 (validates the port)
    except ValueError:
        raise ConfigError(f"{where}: the port is not a number 0-65535") from None
    if not parts.hostname:
        raise ConfigError(f"{where}: has no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"{where}: must be http://host:port (no path)")
    return url


def _parse_pricing(where: str, raw: Any) -> Pricing:
    pr = _table(where, raw)
    _check_keys(where, pr, {"prompt", "completion"})
    return Pricing(
        prompt=float(_typed(f"{where}.prompt", pr.get("prompt", 0.0), (int, float), "a number")),
        completion=float(_typed(f"{where}.completion", pr.get("completion", 0.0), (int, float), "a number")),
    )


_MODEL_KEYS = {
    "type",
    "routes",
    "pricing",
    "owned_by",
    "capabilities",
    "context_length",
    "strategy",
    "breaker_failures",
    "breaker_cooldown_s",
    "candidates",
    "policy",
    "balanced_within_pct",
}


def _parse_routes(where: str, raw: dict[str, Any], providers: dict[str, ProviderConfig]) -> tuple[Route, ...]:
    routes_raw = _typed(f"{where}.routes", raw.get("routes"), list, "a list of {provider, model} tables")
    if not routes_raw:
        raise ConfigError(f"{where}.routes: at least one route is required")
    routes: list[Route] = []
    for i, r in enumerate(routes_raw):
        rw = f"{where}.routes[{i}]"
        r = _table(rw, r)
        _check_keys(rw, r, {"provider", "model", "weight", "pricing"})
        prov = r.get("provider")
        if prov not in providers:
            raise ConfigError(f"{rw}.provider: no provider named {prov!r} in [providers]")
        served = _typed(f"{rw}.model", r.get("model"), str, "a string (the upstream's model id)")
        weight = _positive(f"{rw}.weight", r.get("weight", 1))
        pricing = _parse_pricing(f"{rw}.pricing", r["pricing"]) if "pricing" in r else None
        routes.append(Route(provider=str(prov), model=str(served), weight=weight, pricing=pricing))
    return tuple(routes)


def _parse_model(
    model_id: str, raw: dict[str, Any], providers: dict[str, ProviderConfig], server: ServerConfig
) -> ModelConfig:
    where = f'models."{model_id}"'
    _check_keys(where, raw, _MODEL_KEYS)
    mtype = raw.get("type", "chat")
    if mtype not in MODEL_TYPES:
        raise ConfigError(f"{where}.type: must be one of {', '.join(MODEL_TYPES)}, got {mtype!r}")
    candidates: tuple[str, ...] = ()
    policy = str(raw.get("policy", "ordered"))
    if mtype == "router":
        if "routes" in raw:
            raise ConfigError(f"{where}.routes: a router model has candidates, not routes")
        cands = _typed(f"{where}.candidates", raw.get("candidates"), list, "a list of catalog model ids")
        if not cands:
            raise ConfigError(f"{where}.candidates: at least one candidate is required")
        candidates = tuple(str(_typed(f"{where}.candidates[]", c, str, "a string")) for c in cands)
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
        cooldown_s=_positive(f"{where}.breaker_cooldown_s", raw.get("breaker_cooldown_s", server.breaker_cooldown_s)),
    )
    pricing = _parse_pricing(f"{where}.pricing", raw["pricing"]) if "pricing" in raw else None
    caps = tuple(
        str(_typed(f"{where}.capabilities[]", c, str, "a string"))
        for c in _typed(f"{where}.capabilities", raw.get("capabilities", []), list, "a list")
    )
    owned_by = raw.get("owned_by")
    if owned_by is not None:
        _typed(f"{where}.owned_by", owned_by, str, "a string")
    ctx = raw.get("context_length")
    if ctx is not None:
        ctx = int(_positive(f"{where}.context_length", ctx))
    return ModelConfig(
        id=model_id,
        type=str(mtype),
        routes=routes,
        pricing=pricing,
        owned_by=owned_by,
        capabilities=caps,
        context_length=ctx,
        strategy=str(strategy),
        breaker=breaker,
        candidates=candidates,
        policy=policy,
        balanced_within_pct=_not_negative(f"{where}.balanced_within_pct", raw.get("balanced_within_pct", 20.0)),
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
    _check_keys("<root>", data, {"server", "store", "providers", "models"})
    server = _parse_server(_table("server", data.get("server", {})))
    store = _parse_store(_table("store", data.get("store", {})))
    providers: dict[str, ProviderConfig] = {}
    for name, praw in _table("providers", data.get("providers", {})).items():
        providers[name] = _parse_provider(name, _table(f"providers.{name}", praw))
    models: dict[str, ModelConfig] = {}
    for mid, mraw in _table("models", data.get("models", {})).items():
        models[mid] = _parse_model(mid, _table(f'models."{mid}"', mraw), providers, server)
    _check_candidates(models)
    return Config(server=server, store=store, providers=providers, models=models, source=source)


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
