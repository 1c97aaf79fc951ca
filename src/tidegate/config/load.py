"""Loading the config: find the file (docs/api-operations.md §9 lookup order), convert each table to its declared
struct (`config/model.py`), then check what one field's type cannot say. Every error names the key.

Lookup order: `--config`, then `$TIDEGATE_CONFIG`, then `./tidegate.toml`, then the embedded default.
"""

from __future__ import annotations

import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from msgspec import structs

from ..addresses import never_upstream, split_host_port
from ..errors import ConfigError
from ..header_rules import header_problem
from ..store_url import store_backend
from .model import (
    REQUIRED_KEYS,
    CacheConfig,
    Config,
    LoggingConfig,
    McpConfig,
    ModelConfig,
    ProviderConfig,
    StoreConfig,
)
from .server import ServerConfig
from .upstream import check_connection, upstream_url
from .values import check_keys, convert, table
from .where import error_path, line_of

_ROOT_KEYS = {"server", "store", "providers", "models", "mcp", "logging", "cache"}
_ROUTER_ONLY = ("candidates", "policy", "balanced_within_pct")


def _store(raw: dict[str, Any]) -> StoreConfig:
    store = convert("store", raw, StoreConfig)
    if store_backend(store.url) is None:
        scheme = store.url.split("://")[0]
        raise ConfigError(f"store.url: unsupported scheme in {scheme!r} (sqlite, redis, postgresql)")
    return store


def _provider(name: str, raw: dict[str, Any]) -> ProviderConfig:
    where = f"providers.{name}"
    if "name" in raw:  # the table's name is the provider's name
        raise ConfigError(f"{where}.name: unknown key (the provider's name is its table's: [providers.{name}])")
    provider = convert(where, raw, ProviderConfig)
    for key in REQUIRED_KEYS[provider.kind]:
        if key not in raw:
            raise ConfigError(f"{where}.{key}: required for kind = {provider.kind!r}")
    for header, value in provider.headers.items():
        if (problem := header_problem(header, value)) is not None:
            raise ConfigError(f"{where}.headers: provider {name!r}: {problem}")
    urls = {k: upstream_url(f"{where}.{k}", v) for k in ("base_url", "endpoint_url") if (v := raw.get(k)) is not None}
    return check_connection(where, structs.replace(provider, name=name, **urls))


def _model(
    model_id: str, raw: dict[str, Any], providers: dict[str, ProviderConfig], server: ServerConfig
) -> ModelConfig:
    where = f'models."{model_id}"'
    if "id" in raw:  # the table's name is the model's id
        raise ConfigError(f"{where}.id: unknown key (the model's id is its table's name: [models.\"{model_id}\"])")
    model = convert(where, raw, ModelConfig)
    labels = [t.server_label for t in model.server_tools]
    if model.server_tools and model.type != "chat":
        raise ConfigError(f'{where}.server_tools: only for type = "chat" models')
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{where}.server_tools: server_label values must be unique")
    for i, tool in enumerate(model.server_tools):
        _server_url(f"{where}.server_tools[{i}].server_url", tool.server_url)
        for header in tool.headers_env:
            if (problem := header_problem(header, "")) is not None:
                raise ConfigError(f"{where}.server_tools[{i}].headers_env: {problem}")
    if model.type == "router":
        if "routes" in raw:
            raise ConfigError(f"{where}.routes: a router model has candidates, not routes")
        if not model.candidates:
            raise ConfigError(f"{where}.candidates: at least one candidate is required")
    else:
        for key in _ROUTER_ONLY:
            if key in raw:
                raise ConfigError(f'{where}.{key}: only for type = "router" models')
        if not model.routes:
            raise ConfigError(f"{where}.routes: at least one route is required")
        for i, route in enumerate(model.routes):
            if route.provider not in providers:
                raise ConfigError(f"{where}.routes[{i}].provider: no provider named {route.provider!r} in [providers]")
    return structs.replace(
        model,
        id=model_id,
        breaker_failures=server.breaker_failures if model.breaker_failures is None else model.breaker_failures,
        breaker_cooldown_s=server.breaker_cooldown_s if model.breaker_cooldown_s is None else model.breaker_cooldown_s,
    )


def _server_url(where: str, url: str) -> None:
    """A catalog MCP server: http(s), and never a metadata or link-local host in any spelling (the
    request-time guard refuses it too; refused here it is a config error, not a failed request)."""
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: must start with http:// or https://")
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        raise ConfigError(f"{where}: not a valid URL") from None
    if never_upstream(host):
        raise ConfigError(f"{where}: a link-local or cloud metadata address is never an MCP server")


def _check_candidates(models: dict[str, ModelConfig]) -> None:
    for m in models.values():
        for c in m.candidates:
            target = models.get(c)
            if target is None:
                raise ConfigError(f'models."{m.id}".candidates: no model {c!r} in the catalog')
            if target.type != "chat":
                raise ConfigError(f'models."{m.id}".candidates: {c!r} is a {target.type} model, not a chat model')


def host_pattern(where: str, value: str) -> str:
    """An allowed-hosts entry (`[mcp]`, `[server]`): `host`, `host:port`, `[v6]:port`, `*.` only as a
    subdomain wildcard. Kept in the one spelling `addresses.canonical_host` gives, so that
    `0x7f000001:8931` and `127.0.0.1:8931` are one entry and matching compares canonical forms."""
    shape = f"{where}: {value!r} is not a host or host:port pattern (e.g. 'mcp.example.com:443')"
    if any(c in value for c in "/@ \t\r\n"):
        raise ConfigError(shape)
    try:
        host, port = split_host_port(value)
    except ValueError:
        raise ConfigError(f"{where}: the port of {value!r} must be 1-65535") from None
    if not host or "*" in host.removeprefix("*.") or "[" in host or "]" in host:
        raise ConfigError(shape)
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


def _server(raw: dict[str, Any]) -> ServerConfig:
    server = convert("server", raw, ServerConfig)
    if server.allowed_hosts is None:
        return server
    hosts = tuple(
        "*" if h.strip() == "*" else host_pattern(f"server.allowed_hosts[{i}]", h)
        for i, h in enumerate(server.allowed_hosts)
    )
    return structs.replace(server, allowed_hosts=hosts)


def _mcp(raw: dict[str, Any]) -> McpConfig:
    mcp = convert("mcp", raw, McpConfig)
    hosts = tuple(host_pattern(f"mcp.allowed_hosts[{i}]", h) for i, h in enumerate(mcp.allowed_hosts))
    return structs.replace(mcp, allowed_hosts=hosts)


def parse_config(data: dict[str, Any], source: str = "<memory>") -> Config:
    check_keys("<root>", data, _ROOT_KEYS)
    server = _server(table("server", data.get("server", {})))
    store = _store(table("store", data.get("store", {})))
    providers = {
        name: _provider(name, table(f"providers.{name}", raw))
        for name, raw in table("providers", data.get("providers", {})).items()
    }
    models = {
        mid: _model(mid, table(f'models."{mid}"', raw), providers, server)
        for mid, raw in table("models", data.get("models", {})).items()
    }
    _check_candidates(models)
    mcp = _mcp(table("mcp", data.get("mcp", {})))
    logging = convert("logging", table("logging", data.get("logging", {})), LoggingConfig)
    cache = convert("cache", table("cache", data.get("cache", {})), CacheConfig)
    return Config(
        server=server,
        store=store,
        providers=providers,
        models=models,
        source=source,
        mcp=mcp,
        logging=logging,
        cache=cache,
    )


def load_text(text: str, source: str) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from None
    try:
        return parse_config(data, source)
    except ConfigError as exc:  # named by file and line, so an editor can jump to the key
        line = line_of(text, error_path(str(exc)))
        raise ConfigError(f"{source}:{line}: {exc}" if line else f"{source}: {exc}") from None


def default_config_text() -> str:
    return resources.files("tidegate").joinpath("default_config.toml").read_text("utf-8")


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Load the config by the docs/api-operations.md §9 lookup order."""
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
