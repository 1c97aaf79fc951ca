"""The provider-kind registry (providers/kinds.py) is the one place a kind is decided: config names
exactly the registered kinds, and every entry has what the router, check-config's probe, the
fidelity table and the doors ask of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tidegate.config.model import PROVIDER_KINDS, REQUIRED_KEYS, ProviderConfig
from tidegate.config.server import ServerConfig
from tidegate.errors import NoProviderAvailable
from tidegate.providers import fidelity
from tidegate.providers.kinds import (
    KINDS,
    Kind,
    build_chat_provider,
    build_embedding_provider,
    build_image_provider,
    speaking,
)
from tidegate.request import WireFormat

SRC = Path(__file__).resolve().parents[3] / "src" / "tidegate"


def test_config_names_exactly_the_registered_kinds() -> None:
    # config/model.py cannot import providers/ (the layers), so it keeps the names and each kind's
    # required keys itself; a kind added on one side only fails here (and at import of the registry)
    assert tuple(KINDS) == PROVIDER_KINDS
    assert set(REQUIRED_KEYS) == set(PROVIDER_KINDS)
    assert all(KINDS[name].name == name for name in KINDS)


@pytest.mark.parametrize("name", PROVIDER_KINDS)
def test_every_kind_has_what_its_readers_ask_for(name: str) -> None:
    kind = KINDS[name]
    assert isinstance(kind, Kind)
    assert callable(kind.chat)  # the router's chat provider
    assert isinstance(kind.fidelity, fidelity.Fidelity)  # the relay's refusals, docs/translation.md
    assert kind.otel_name  # tracing's gen_ai.provider.name
    assert kind.embeddings is None or callable(kind.embeddings)
    assert kind.images is None or callable(kind.images)
    assert kind.required_keys == REQUIRED_KEYS[name]
    # check-config: a probe of its own, or a URL to connect to
    assert kind.check is not None or kind.upstream is not None
    assert kind.http == (kind.check is None)  # a kind without an HTTP upstream is probed its own way


def _config(name: str, **keys: object) -> ProviderConfig:
    required: dict[str, object] = {"base_url": "https://upstream.test/v1", "region": "us-east-1"}
    return ProviderConfig(kind=name, name=f"p-{name}", **{k: required[k] for k in REQUIRED_KEYS[name]}, **keys)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [n for n in PROVIDER_KINDS if KINDS[n].http])
def test_the_http_kinds_build_their_providers(name: str) -> None:
    kind = KINDS[name]
    provider = build_chat_provider(_config(name, responses=True))
    assert provider.name == f"p-{name}"
    assert provider.kind == name
    assert (WireFormat.RESPONSES in provider.speaks) is kind.responses  # only a kind that honours `responses`
    if kind.embeddings is None:
        with pytest.raises(NoProviderAvailable, match="serves no embeddings"):
            build_embedding_provider(_config(name))
    else:
        assert build_embedding_provider(_config(name)).name == f"p-{name}"
    if kind.images is None:
        with pytest.raises(NoProviderAvailable, match='image models need kind = "openai"'):
            build_image_provider(_config(name), ServerConfig())
    else:
        assert build_image_provider(_config(name), ServerConfig()).name == f"p-{name}"


def test_what_each_kind_speaks_follows_its_entry_and_the_responses_switch() -> None:
    """The doors' passthrough routes and each built provider's `speaks` come from the entries."""
    configs = {name: _config(name) for name in PROVIDER_KINDS} | {"openai-r": _config("openai", responses=True)}
    assert speaking(configs, WireFormat.MESSAGES) == {"anthropic", "bedrock", "vertex"}
    assert speaking(configs, WireFormat.GEMINI) == {"gemini"}
    assert speaking(configs, WireFormat.RESPONSES) == {"openai-r"}
    assert build_chat_provider(configs["openai-r"]).speaks == {WireFormat.RESPONSES}
    assert build_chat_provider(configs["openai"]).speaks == frozenset()
    assert build_chat_provider(configs["bedrock"]).speaks == {WireFormat.MESSAGES}


def _named_kinds(path: Path) -> list[str]:
    """Comparisons of a `kind` with a kind's name (`x.kind == "openai"`, `kind in ("bedrock", ...)`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        left = node.left
        named = (isinstance(left, ast.Name) and left.id == "kind") or (
            isinstance(left, ast.Attribute) and left.attr == "kind"
        )
        if not named:
            continue
        for right in node.comparators:
            values = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
            found += [v.value for v in values if isinstance(v, ast.Constant) and v.value in PROVIDER_KINDS]
    return found


def test_no_module_decides_by_a_kind_name() -> None:
    # the registry is the single source: nowhere else compares a provider's kind with a kind's name
    offenders = {
        str(path.relative_to(SRC)): names
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "kinds.py" and (names := _named_kinds(path))
    }
    assert offenders == {}


def test_check_config_probes_a_gemini_provider_where_it_sends_requests() -> None:
    """Google AI by default, Vertex AI's regional host with `project` (as the adapter chooses)."""
    upstream = KINDS["gemini"].upstream
    assert upstream is not None
    assert upstream(ProviderConfig(kind="gemini", name="g")) == "https://generativelanguage.googleapis.com/v1beta"
    vertex = ProviderConfig(kind="gemini", name="v", project="p", region="europe-west4")
    assert upstream(vertex) == "https://europe-west4-aiplatform.googleapis.com/v1"
    assert upstream(ProviderConfig(kind="gemini", name="o", base_url="http://127.0.0.1:9/v1beta")) == (
        "http://127.0.0.1:9/v1beta"
    )
    assert KINDS["gemini"].warm  # built at startup, as every HTTP kind
