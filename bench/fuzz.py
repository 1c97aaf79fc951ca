"""A longer, coverage-guided fuzz run with atheris, kept out of CI: the normal suite runs
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


_KEYS = [
    "model",
    "messages",
    "input",
    "instructions",
    "stream",
    "max_tokens",
    "max_output_tokens",
    "tools",
    "tool_choice",
    "reasoning",
    "reasoning_effort",
    "stop",
    "n",
    "metadata",
    "response_format",
    "temperature",
]
_ROLES = ["user", "assistant", "system", "tool", "developer"]


def _shaped_body(data: bytes) -> dict[str, object]:
    """A request body driven by the input's bytes: the doors' keys with values of every JSON type,
    messages and items nested a level, so the fuzzer reaches the parsers' branches."""
    import atheris

    fdp = atheris.FuzzedDataProvider(data)

    def value(depth: int = 0) -> object:
        kind = fdp.ConsumeIntInRange(0, 7 if depth < 2 else 4)
        if kind == 0:
            return None
        if kind == 1:
            return fdp.ConsumeBool()
        if kind == 2:
            return fdp.ConsumeIntInRange(-(2**40), 2**40)
        if kind == 3:
            return fdp.ConsumeUnicodeNoSurrogates(12)
        if kind == 4:
            return fdp.ConsumeRegularFloat()
        if kind == 5:
            return [value(depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
        if kind == 6:
            return {"role": fdp.PickValueInList(_ROLES), "content": value(depth + 1), "type": value(depth + 1)}
        return {fdp.PickValueInList(_KEYS): value(depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))}

    body: dict[str, object] = {"model": "m"}
    for _ in range(fdp.ConsumeIntInRange(0, 8)):
        body[fdp.PickValueInList(_KEYS)] = value()
    return body


def _target(name: str) -> Callable[[bytes], None]:
    from tidegate.config.load import parse_config
    from tidegate.errors import ConfigError, TidegateError

    if name == "openai":
        from tidegate.providers.openai.chat import OpenAIDecoder

        return lambda data: _split_feed(lambda: OpenAIDecoder("p", "m"), data)
    if name == "anthropic":
        from tidegate.providers.anthropic.messages import AnthropicSSEDecoder

        return lambda data: _split_feed(lambda: AnthropicSSEDecoder("p", "m"), data)
    if name == "bedrock":
        from tidegate.providers.aws.bedrock import BedrockStreamDecoder

        return lambda data: _split_feed(lambda: BedrockStreamDecoder("p", "m"), data)
    if name in ("chat", "responses"):
        from tidegate.server.doors.chat.request import parse_chat_request
        from tidegate.server.doors.responses.request import parse_responses_request

        parse = parse_chat_request if name == "chat" else parse_responses_request

        def one(data: bytes) -> None:
            try:
                body = orjson.loads(data)
            except orjson.JSONDecodeError:
                body = _shaped_body(data)  # random bytes are rarely JSON: build a body of the door's keys
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
