"""Configuration: one TOML file (docs/api-operations.md §9), declared once here.

Each table is a msgspec struct: its fields are the keys, their types and bounds are the validation
(`config/values.py`'s `convert` words the errors), their defaults are the defaults, and their descriptions
are the reference tables of docs/configuration.md and the JSON schema for editors
(`config/reference.py`). What one field's type cannot say (a provider named by a route, a kind's
required keys, files that must load) is checked in `config/load.py`.

Secrets never live in the file: providers name environment variables (`api_key_env`, ...).
"""

# no `from __future__ import annotations`: msgspec reads these annotations at class creation
from typing import Annotated, Literal, get_args

from msgspec import Struct

from .fields import Count, NonNegativeFloat, PositiveFloat, PositiveInt, doc
from .server import ServerConfig

# The provider kinds, and the keys each one requires. Everything else a kind decides (which classes
# serve it, its probe, its fidelity table, ...) is its entry in the registry, providers/kinds.py. These
# two live here because config validation needs them and the configuration is a foundation: it cannot
# import providers/ (`make lint`). The registry checks at import that its entries are exactly these
# kinds (tests/unit/providers/test_kinds.py too), so a kind named here and not registered, or
# registered and not named here, fails at once instead of at its first request.
ProviderKind = Literal["openai", "anthropic", "bedrock", "vertex", "gemini", "local"]
PROVIDER_KINDS: tuple[str, ...] = get_args(ProviderKind)
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("base_url",),
    "anthropic": (),
    "bedrock": ("region",),
    "vertex": ("region",),
    "gemini": (),
    "local": (),
}
ModelType = Literal["chat", "embedding", "image", "router"]
Strategy = Literal["ordered", "weighted", "least_latency", "least_busy"]
Policy = Literal["ordered", "cheapest", "fastest", "balanced"]


class StoreConfig(Struct, frozen=True, forbid_unknown_fields=True):
    url: Annotated[
        str,
        doc(
            "`sqlite:///relative.db`, `sqlite:////abs/path.db`, `redis://host:6379/0` (`?prefix=`, default "
            "`tidegate:`; `&max_connections=`, default 64) or `postgresql://user@host/db` (`?schema=`, default "
            "`public`)"
        ),
    ] = "sqlite:///tidegate.db"
    retention_hours: Annotated[
        float,
        doc("how long Idempotency-Keys and event logs are kept (records stay: they are the ledger)", gt=0),
    ] = 24.0


class ProviderConfig(Struct, frozen=True, forbid_unknown_fields=True):
    kind: Annotated[ProviderKind, doc("the upstream's API")]
    name: Annotated[str, doc("(the table's name; not a key)")] = ""
    base_url: Annotated[
        str | None,
        doc(
            "upstream base URL: openai (required, includes `/v1`), anthropic (bare host), vertex and gemini "
            "(include the version: `/v1`, Google AI's `/v1beta`)"
        ),
    ] = None
    api_key_env: Annotated[
        str | None, doc("openai, anthropic, gemini (Google AI): the environment variable holding the API key")
    ] = None
    region: Annotated[
        str | None,
        doc(
            "bedrock, vertex (required); any kind (optional): cloud region, and what `X-Served-Region` says when "
            "this provider answered"
        ),
    ] = None
    jurisdiction: Annotated[
        str | None,
        doc(
            "e.g. `\"eu\"`: matched by a request's `provider.jurisdictions` and a key's `jurisdictions` "
            "([routing.md](routing.md))"
        ),
    ] = None
    endpoint_url: Annotated[
        str | None,
        doc("bedrock: bare host override (the adapter adds `/model/{id}/invoke-with-response-stream`)"),
    ] = None
    project: Annotated[
        str | None, doc("vertex: GCP project (else the ADC default); gemini: set, the provider is Gemini on Vertex AI")
    ] = None
    access_token_env: Annotated[str | None, doc("vertex: a static OAuth token variable instead of google-auth ADC")] = (
        None
    )
    upstream_idle_timeout_s: Annotated[
        PositiveFloat | None, doc("this provider's idle timeout (slow image models); default: `[server]`'s")
    ] = None
    headers: Annotated[dict[str, str], doc('openai: extra static headers (`{ "X-Title" = "..." }`)')] = {}
    responses: Annotated[
        bool,
        doc(
            "openai: the upstream speaks the Responses API too (`POST {base_url}/responses`): a `/v1/responses` "
            "request reaches it as sent and its events pass through untouched ([agents.md](agents.md))"
        ),
    ] = False
    model_path: Annotated[str | None, doc("local: a GGUF file instead of the bundled SmolLM2")] = None
    n_ctx: Annotated[int, doc("local: context size", gt=0)] = 2048
    n_threads: Annotated[PositiveInt | None, doc("local: threads (default: llama.cpp's)")] = None
    proxy: Annotated[
        str | bool | None,
        doc(
            '`"http://[user:password@]host:port"`: this provider\'s HTTP proxy (`NO_PROXY` does not apply to '
            "it); `false`: always direct; unset: the environment ([Upstream connections](#upstream-connections))"
        ),
    ] = None
    ca_file: Annotated[
        str | None, doc("a PEM bundle that **replaces** the system trust store for this provider (a private CA)")
    ] = None
    client_cert: Annotated[
        str | None,
        doc("client certificate (PEM, its chain after it) for mTLS; its unencrypted key may follow it in the file"),
    ] = None
    client_key: Annotated[str | None, doc("the client certificate's unencrypted key (PEM)")] = None
    verify: Annotated[
        bool, doc("`false` skips certificate and host name checks for this provider; every start logs a warning")
    ] = True
    max_connections: Annotated[
        int,
        doc(
            "open connections to this provider at most (idle, busy or connecting); a request past it waits for "
            "one to come free for up to `[server] connect_timeout_s` (counted in "
            "`tidegate_upstream_pool_waits_total`, a warning logged), then fails as a connect error before any "
            "byte (a fallback moves on); one stream holds one connection (docs/operations.md)",
            ge=1,
        ),
    ] = 1000
    pool_idle_timeout_s: Annotated[
        float, doc("an idle keep-alive connection is closed after this many seconds", gt=0)
    ] = 15.0

    def __repr__(self) -> str:
        # a proxy URL may carry a password: never in a repr, a log line or a traceback
        return f"ProviderConfig(name={self.name!r}, kind={self.kind!r})"


class Pricing(Struct, frozen=True, forbid_unknown_fields=True):
    prompt: Annotated[float, doc("USD per million prompt tokens", ge=0)] = 0.0
    completion: Annotated[float, doc("USD per million completion tokens", ge=0)] = 0.0
    cache_read: Annotated[
        NonNegativeFloat | None,
        doc("USD per million prompt tokens read from the provider's prompt cache; default: `prompt`"),
    ] = None
    cache_write: Annotated[
        NonNegativeFloat | None,
        doc("USD per million prompt tokens written to the provider's prompt cache; default: `prompt`"),
    ] = None


class CacheSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """The exact response cache of a model or a key (docs/api-edges.md §18)."""

    ttl_s: Annotated[float, doc("how long an entry is served, in seconds", gt=0, le=31_536_000)] = 3600.0
    max_bytes: Annotated[
        int, doc("an answer larger than this (its events, encoded) is not stored", ge=1, le=67_108_864)
    ] = 1_048_576


class Route(Struct, frozen=True, forbid_unknown_fields=True):
    provider: Annotated[str, doc("a `[providers.NAME]`")]
    model: Annotated[str, doc("the upstream's model id")]
    weight: Annotated[float, doc('`strategy = "weighted"`: this route\'s share', gt=0)] = 1.0
    pricing: Annotated[Pricing | None, doc("overrides the model's for this route")] = None


class ServerTool(Struct, frozen=True, forbid_unknown_fields=True):
    server_label: Annotated[str, doc("the MCP server's name in answers and records (unique per model)")]
    server_url: Annotated[
        str, doc("its streamable-HTTP endpoint; must match `[mcp] allowed_hosts` like a request's ([mcp.md](mcp.md))")
    ]
    allowed_tools: Annotated[tuple[str, ...] | None, doc("only these of its tools; unset: all")] = None
    headers_env: Annotated[
        dict[str, str],
        doc('headers sent to it, each value read from an environment variable: `{ Authorization = "CALC_AUTH" }`'),
    ] = {}


class Breaker(Struct, frozen=True):
    """A model's routes' breaker settings (`ModelConfig.breaker`), not a table of the file."""

    failures: int = 5
    cooldown_s: float = 30.0


class ModelConfig(Struct, frozen=True, forbid_unknown_fields=True):
    id: Annotated[str, doc("(the table's name; not a key)")] = ""
    log_bodies: Annotated[
        bool,
        doc(
            "keep each generation's request as received and its final answer, apart from the record, for "
            "`[logging] body_retention_s` ([security.md](security.md#body-logging))"
        ),
    ] = False
    type: Annotated[
        ModelType,
        doc(
            "`chat`, `embedding`, `image` or `router` (a policy model over other chat models, served on the chat "
            "doors); a model used on another door is a 400"
        ),
    ] = "chat"
    routes: Annotated[
        tuple[Route, ...],
        doc(
            '`[{ provider = "NAME", model = "upstream-model-id", weight = 1, pricing = {…} }, …]`: ordered by '
            "`strategy`, then tried in that order (fallback); required but for routers"
        ),
    ] = ()
    pricing: Annotated[
        Pricing | None, doc("USD per million tokens: `{ prompt, completion, cache_read, cache_write }` (below)")
    ] = None
    owned_by: Annotated[str | None, doc("shown in `GET /v1/models`")] = None
    capabilities: Annotated[
        tuple[str, ...],
        doc(
            "shown in `GET /v1/models`; a router reads them from its candidates: `tools`, `vision`, `reasoning`, "
            "`json_schema`"
        ),
    ] = ()
    context_length: Annotated[
        PositiveInt | None, doc("shown in `GET /v1/models`; bounds the prompt a router sends here")
    ] = None
    max_output_tokens: Annotated[
        PositiveInt | None,
        doc("the output cap a credit reservation assumes when a request names none (4096; [keys.md](keys.md))"),
    ] = None
    strategy: Annotated[
        Strategy,
        doc("how the routes are ordered ([routing.md](routing.md)); embedding models take the order only"),
    ] = "ordered"
    breaker_failures: Annotated[Count | None, doc("this model's routes' breaker threshold; default: `[server]`'s")] = (
        None
    )
    breaker_cooldown_s: Annotated[
        PositiveFloat | None, doc("this model's routes' breaker cooldown; default: `[server]`'s")
    ] = None
    server_tools: Annotated[
        tuple[ServerTool, ...],
        doc(
            "chat models: MCP servers whose tools the gateway runs for every chat completion of this model, "
            "answered buffered (`X-Kendr-Buffered-Reason: server_tools`; [mcp.md](mcp.md))"
        ),
    ] = ()
    drop_hosted_tools: Annotated[
        bool,
        doc(
            "`/v1/responses`: a route that cannot run a hosted tool (`web_search`, ...) leaves it out of its "
            "request (the default), and the answer says so in `X-Tidegate-Dropped`; `false`: such a route "
            "refuses the request with 400 naming the tool as sent ([agents.md](agents.md))"
        ),
    ] = True
    candidates: Annotated[
        tuple[str, ...], doc('`type = "router"` only (required): the catalog chat model ids it chooses among')
    ] = ()
    policy: Annotated[Policy, doc('`type = "router"` only: how it chooses ([routing.md](routing.md))')] = "ordered"
    balanced_within_pct: Annotated[
        float,
        doc("`balanced`: the fastest of the candidates whose cost is within this % of the cheapest", ge=0),
    ] = 20.0
    cache: Annotated[
        CacheSettings | None,
        doc(
            "the exact response cache for this model: `{ ttl_s, max_bytes }` (below); a key's own `cache` setting "
            "wins; unset: off ([api-edges.md](api-edges.md) §18)"
        ),
    ] = None

    @property
    def breaker(self) -> Breaker:
        """The routes' breaker settings (the loader fills in `[server]`'s where the model sets none)."""
        defaults = Breaker()
        return Breaker(
            defaults.failures if self.breaker_failures is None else self.breaker_failures,
            defaults.cooldown_s if self.breaker_cooldown_s is None else self.breaker_cooldown_s,
        )


class McpConfig(Struct, frozen=True, forbid_unknown_fields=True):
    allowed_hosts: Annotated[
        tuple[str, ...],
        doc(
            "host or host:port patterns the gateway may call as MCP servers; `*.example.com` matches any "
            "subdomain. Empty: no MCP server allowed ([mcp.md](mcp.md))"
        ),
    ] = ()
    max_turns: Annotated[int, doc("model turns per request, the last one included", ge=1, le=64)] = 8
    call_timeout_s: Annotated[float, doc("one tools/call (and the connect and tools/list of one server)", gt=0)] = 30.0
    deadline_s: Annotated[float, doc("the whole loop: every model turn and every call", gt=0)] = 120.0


class LoggingConfig(Struct, frozen=True, forbid_unknown_fields=True):
    body_retention_s: Annotated[
        float,
        doc(
            "how long a logged request and answer are kept (body logging is off unless a model's `log_bodies` or "
            "a key's `log_bodies` turns it on; [security.md](security.md#body-logging))",
            gt=0,
            le=31_536_000,
        ),
    ] = 604_800.0


class CacheConfig(Struct, frozen=True, forbid_unknown_fields=True):
    max_total_bytes: Annotated[
        int,
        doc(
            "the response cache's ceiling in the store, every entry's events together: past it the least "
            "recently used entries are evicted ([api-edges.md](api-edges.md#18-response-cache))",
            ge=1,
        ),
    ] = 268_435_456


class Config(Struct, frozen=True):
    server: ServerConfig
    store: StoreConfig
    providers: dict[str, ProviderConfig]
    models: dict[str, ModelConfig]
    source: str = "<embedded default>"
    mcp: McpConfig = McpConfig()
    logging: LoggingConfig = LoggingConfig()
    cache: CacheConfig = CacheConfig()

    def provider_idle_timeout(self, provider: str) -> float:
        p = self.providers.get(provider)
        if p is not None and p.upstream_idle_timeout_s is not None:
            return p.upstream_idle_timeout_s
        return self.server.upstream_idle_timeout_s


# the tables of the file, in the order the reference shows them
TABLES: dict[str, type[Struct]] = {
    "server": ServerConfig,
    "store": StoreConfig,
    "providers.NAME": ProviderConfig,
    'models."ID"': ModelConfig,
    'models."ID".pricing': Pricing,
    'models."ID".server_tools': ServerTool,
    'models."ID".cache': CacheSettings,
    "mcp": McpConfig,
    "logging": LoggingConfig,
    "cache": CacheConfig,
}

__all__ = [
    "PROVIDER_KINDS",
    "REQUIRED_KEYS",
    "Breaker",
    "CacheConfig",
    "CacheSettings",
    "Config",
    "LoggingConfig",
    "McpConfig",
    "ModelConfig",
    "Pricing",
    "ProviderConfig",
    "Route",
    "ServerTool",
    "StoreConfig",
]
