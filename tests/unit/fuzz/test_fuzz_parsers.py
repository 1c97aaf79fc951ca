"""Property tests of what reads untrusted input from clients and operators: every door's
request parser and the config loader. For any JSON a client can send, a parser returns its typed
request or raises the contract's error (`TidegateError`, answered as a 4xx JSON error); for any TOML
document an operator can write, the loader returns a config or raises `ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.config.load import parse_config
from tidegate.errors import ConfigError, TidegateError
from tidegate.server.doors.chat.request import parse_chat_request
from tidegate.server.doors.embeddings.request import parse_embedding_request
from tidegate.server.doors.images.request import parse_image_request
from tidegate.server.doors.responses.request import parse_native_request, parse_responses_request

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=5)),
    max_leaves=25,
)

CHAT_KEYS = [
    "model",
    "messages",
    "stream",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "stream_options",
    "reasoning",
    "reasoning_effort",
    "stop",
    "n",
    "user",
    "metadata",
]
RESPONSES_KEYS = ["model", "input", "instructions", "tools", "reasoning", "max_output_tokens", "stream", "metadata"]
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "developer", "x"])},
    optional={"content": json_values, "tool_calls": json_values, "tool_call_id": json_values, "name": json_values},
)


def _bodies(keys: list[str], extra: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Bodies shaped like the door's (its keys, with any values; near-valid ones) and any JSON."""
    fields = {k: extra.get(k, json_values) for k in keys}
    shaped = st.fixed_dictionaries({}, optional=fields)
    return st.one_of(shaped, json_values)


def _only_contract_errors(parse: Callable[[Any], object], body: Any) -> None:
    try:
        parse(body)
    except TidegateError as exc:
        assert 400 <= exc.status < 500
        assert len(exc.message) < 2000


@FUZZ
@given(_bodies(CHAT_KEYS, {"model": st.just("m"), "messages": st.lists(MESSAGE, max_size=4)}))
def test_chat_request_parser(body: Any) -> None:
    _only_contract_errors(parse_chat_request, body)


@pytest.mark.parametrize("parse", [parse_responses_request, parse_native_request], ids=["responses", "native"])
@FUZZ
@given(body=_bodies(RESPONSES_KEYS, {"model": st.just("m")}))
def test_responses_and_native_request_parsers(parse: Callable[[Any], object], body: Any) -> None:
    _only_contract_errors(parse, body)


@FUZZ
@given(_bodies(["model", "input", "encoding_format", "dimensions", "stream", "user"], {"model": st.just("m")}))
def test_embedding_request_parser(body: Any) -> None:
    _only_contract_errors(parse_embedding_request, body)


@FUZZ
@given(
    body=_bodies(
        ["model", "prompt", "n", "size", "quality", "background", "output_format", "partial_images", "stream"],
        {"model": st.just("m")},
    ),
    stream=st.booleans(),
)
def test_image_request_parser(body: Any, stream: bool) -> None:
    _only_contract_errors(lambda b: parse_image_request(b, default_stream=stream), body)


toml_scalars = st.one_of(st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True), st.text(max_size=30))
toml_values = st.recursive(
    toml_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
PROVIDER = st.fixed_dictionaries(
    {"kind": st.sampled_from(["openai", "anthropic", "bedrock", "vertex", "local", "nope"])},
    optional={
        "base_url": st.one_of(
            st.sampled_from(["http://127.0.0.1:9/v1", "https://api.example.com", "ftp://x", "http://[::1"]),
            st.text(max_size=30),
        ),
        "api_key_env": toml_values,
        "region": toml_values,
        "headers": toml_values,
        "upstream_idle_timeout_s": toml_values,
    },
)
CONFIG = st.fixed_dictionaries(
    {},
    optional={
        "server": st.dictionaries(
            st.sampled_from(["host", "port", "keepalive_s", "max_body_bytes", "lease_ttl_s", "drain_s", "bogus"]),
            toml_values,
            max_size=4,
        ),
        "store": st.dictionaries(st.sampled_from(["url", "retention_hours"]), toml_values, max_size=2),
        "providers": st.dictionaries(st.sampled_from(["a", "b"]), PROVIDER, max_size=2),
        "models": st.dictionaries(
            st.sampled_from(["m", "n"]),
            st.fixed_dictionaries(
                {},
                optional={
                    "routes": st.one_of(
                        st.lists(
                            st.fixed_dictionaries(
                                {"provider": st.sampled_from(["a", "b", "c"]), "model": st.text(max_size=5)}
                            ),
                            max_size=3,
                        ),
                        toml_values,
                    ),
                    "type": st.sampled_from(["chat", "embedding", "image", "other"]),
                    "pricing": toml_values,
                },
            ),
            max_size=2,
        ),
    },
)


@FUZZ
@given(st.one_of(CONFIG, st.dictionaries(st.text(max_size=8), toml_values, max_size=4)))
def test_config_loader(data: dict[str, Any]) -> None:
    try:
        parse_config(data)
    except ConfigError as exc:
        assert str(exc)
