"""A longer, coverage-guided fuzz run with atheris (issue 42), kept out of CI: the normal suite runs
the same properties with hypothesis for a bounded time (tests/unit/fuzz/).

    .venv/bin/pip install atheris
    .venv/bin/python bench/fuzz.py openai -atheris_runs=200000
    .venv/bin/python bench/fuzz.py chat -max_total_time=600

Targets: `openai`, `anthropic`, `bedrock` (stream decoders: bytes in, split at a point the input
chooses; anything but events or a ValueError is a finding), `chat`, `responses` (request parsers: JSON
in; anything but a request or a TidegateError is a finding), `config` (TOML in; anything but a config
or a ConfigError). A finding is an uncaught exception: atheris stops and writes the input to a
`crash-*` file to replay with `bench/fuzz.py TARGET crash-…`.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable

import orjson


def _split_feed(make: Callable[[], object], data: bytes) -> None:
    if not data:
        return
    cut = data[0] % (len(data) or 1)
    decoder = make()
    try:
        for part in (data[1 : cut + 1], data[cut + 1 :]):
            decoder.feed(part)  # type: ignore[attr-defined]
    except ValueError:
        pass  # the transport turns it into the stream's failure


def _target(name: str) -> Callable[[bytes], None]:
    from tidegate.config import parse_config
    from tidegate.errors import ConfigError, TidegateError

    if name == "openai":
        from tidegate.providers.openai import OpenAIDecoder

        return lambda data: _split_feed(lambda: OpenAIDecoder("p", "m"), data)
    if name == "anthropic":
        from tidegate.providers.anthropic import AnthropicSSEDecoder

        return lambda data: _split_feed(lambda: AnthropicSSEDecoder("p", "m"), data)
    if name == "bedrock":
        from tidegate.providers.bedrock import BedrockStreamDecoder

        return lambda data: _split_feed(lambda: BedrockStreamDecoder("p", "m"), data)
    if name in ("chat", "responses"):
        from tidegate.server.chat_request import parse_chat_request
        from tidegate.server.responses_request import parse_responses_request

        parse = parse_chat_request if name == "chat" else parse_responses_request

        def one(data: bytes) -> None:
            try:
                body = orjson.loads(data)
            except orjson.JSONDecodeError:
                return  # the door answers 400 before parsing
            try:
                parse(body)
            except TidegateError:
                pass

        return one
    if name == "config":

        def config(data: bytes) -> None:
            try:
                parsed = tomllib.loads(data.decode("utf-8", "replace"))
            except tomllib.TOMLDecodeError:
                return
            try:
                parse_config(parsed)
            except ConfigError:
                pass

        return config
    raise SystemExit(f"unknown target {name!r}")


def main() -> None:
    import atheris

    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    test = _target(sys.argv[1])
    atheris.instrument_all()
    atheris.Setup([sys.argv[0], *sys.argv[2:]], test)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
