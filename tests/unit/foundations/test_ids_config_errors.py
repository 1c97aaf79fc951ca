from __future__ import annotations

import time

import pytest

from tidegate.config.load import default_config_text, load_text
from tidegate.errors import ConfigError, InvalidRequest, PayloadTooLarge, RateLimited
from tidegate.ids import is_ulid, new_ulid


def test_ulid_shape_and_order() -> None:
    ids = [new_ulid() for _ in range(2000)]
    assert all(len(i) == 26 and is_ulid(i) for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def _crockford(value: int, length: int) -> str:
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    return "".join(alphabet[(value >> (5 * i)) & 31] for i in reversed(range(length)))


def test_ulid_encodes_the_millisecond_clock_then_randomness() -> None:
    """The spec's layout: 10 characters of 48-bit Unix milliseconds, 16 of 80 random bits."""
    before = time.time_ns() // 1_000_000
    ulid = new_ulid()
    after = time.time_ns() // 1_000_000
    assert ulid[:10] in {_crockford(ms, 10) for ms in range(before, after + 1)}
    second = new_ulid()
    if second[:10] == ulid[:10]:  # same millisecond: the random part counts up by one
        alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
        rand = sum(alphabet.index(c) << (5 * i) for i, c in enumerate(reversed(ulid[10:])))
        assert second[10:] == _crockford(rand + 1, 16)


def test_error_bodies() -> None:
    e = InvalidRequest("bad 'messages'")
    assert e.status == 400
    assert e.body() == {
        "error": {"code": "invalid_request", "message": "bad 'messages'", "type": "invalid_request_error"}
    }
    assert PayloadTooLarge("x").status == 413
    assert RateLimited("x", retry_after=3).retry_after == 3


def test_default_config_parses() -> None:
    cfg = load_text(default_config_text(), "default")
    assert cfg.models["local/smollm2"].type == "chat"
    assert cfg.models["local/e5-small"].type == "embedding"
    assert cfg.providers["local"].kind == "local"
    assert cfg.server.keepalive_s == 10
    assert cfg.server.upstream_idle_timeout_s == 90


CONTRACT_EXAMPLE = """
[server]
host = "127.0.0.1"
port = 8080
[store]
url = "sqlite:///tidegate.db"
[providers.local]
kind = "local"
[providers.mistral]
kind = "openai"
base_url = "https://api.mistral.ai/v1"
api_key_env = "MISTRAL_API_KEY"
[providers.anthropic]
kind = "anthropic"
base_url = "https://api.anthropic.com"
api_key_env = "ANTHROPIC_API_KEY"
[providers.claude-eu]
kind = "bedrock"
region = "eu-central-1"
endpoint_url = "https://bedrock-runtime.eu-central-1.amazonaws.com"
[providers.claude-vertex]
kind = "vertex"
project = "my-project"
region = "europe-west1"
base_url = "https://europe-west1-aiplatform.googleapis.com/v1"
[models."local/e5-small"]
type = "embedding"
routes = [{ provider = "local", model = "e5-small" }]
[models."bedrock/claude-sonnet-5"]
routes = [{ provider = "claude-eu", model = "anthropic.claude-sonnet-5-v1:0" },
          { provider = "claude-vertex", model = "claude-sonnet-5" }]
pricing = { prompt = 3.0, completion = 15.0 }
"""


def test_contract_example_parses() -> None:
    cfg = load_text(CONTRACT_EXAMPLE, "example")
    m = cfg.models["bedrock/claude-sonnet-5"]
    assert [r.provider for r in m.routes] == ["claude-eu", "claude-vertex"]
    assert m.pricing is not None and m.pricing.completion == 15.0


def test_worker_timeout_defaults_to_30_s_and_0_turns_it_off() -> None:
    assert load_text("", "t.toml").server.worker_timeout_s == 30.0
    assert load_text("[server]\nworker_timeout_s = 0\n", "t.toml").server.worker_timeout_s == 0.0


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[server]\nprot = 1\n", "server.prot: unknown key"),
        ("[server]\nport = 'x'\n", "server.port: expected an integer"),
        ("[server]\nkeepalive_s = -1\n", "server.keepalive_s: must be > 0"),
        ("[server]\nkeepalive_s = nan\n", "server.keepalive_s: must be > 0"),
        ("[server]\nworker_timeout_s = -1\n", "server.worker_timeout_s: must be >= 0"),
        ("[server]\nworker_timeout_s = nan\n", "server.worker_timeout_s: must be >= 0"),
        ("[server]\nworker_timeout_s = '30'\n", "server.worker_timeout_s: expected a number"),
        ("[bogus]\n", "<root>.bogus: unknown key"),
        ("[providers.p]\nkind = 'nope'\n", "providers.p.kind: must be one of"),
        ("[providers.p]\nkind = 'openai'\n", "providers.p.base_url: required"),
        ("[providers.p]\nkind = 'openai'\nbase_url = 'ftp://x'\n", "providers.p.base_url: must start with http"),
        ("[providers.p]\nkind = 'local'\napi_key = 'sk-secret'\n", "providers.p.api_key: unknown key"),
        ('[models."m"]\nroutes = [{ provider = "nope", model = "x" }]\n', 'models."m".routes[0].provider'),
        (
            '[providers.local]\nkind="local"\n[models."m"]\ntype = "video"\nroutes=[{provider="local",model="x"}]\n',
            'models."m".type',
        ),
        ('[providers.local]\nkind="local"\n[models."m"]\nroutes = []\n', 'models."m".routes: at least one'),
        ("[store]\nurl = 'mysql://x'\n", "store.url"),
        ("not toml = = =", "invalid TOML"),
    ],
)
def test_config_errors_name_the_key(toml: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_text(toml, "t.toml")
    assert message in str(info.value)
    assert "sk-secret" not in str(info.value)
