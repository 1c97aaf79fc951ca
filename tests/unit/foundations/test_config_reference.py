"""Configuration declared once: the reference tables in docs/configuration.md and the JSON
schema in docs/tidegate.schema.json are made from `config/model.py`'s structs, and both agree with the loader."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from tidegate.cli.main import main
from tidegate.config.load import default_config_text, load_text, parse_config
from tidegate.config.model import TABLES
from tidegate.config.reference import BEGIN, END, reference, schema, schema_text
from tidegate.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"


def _toml_blocks() -> list[tuple[str, str]]:
    found = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for i, block in enumerate(re.findall(r"```toml\n(.*?)```", page.read_text(), re.S)):
            found.append((f"{page.name}#{i}", block))
    return found


def test_the_reference_in_the_docs_is_the_generated_one() -> None:
    text = (DOCS / "configuration.md").read_text()
    between = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n")
    assert between == reference(), "run: python -m tidegate.config.reference, paste between the markers"


def test_the_schema_file_is_the_generated_one_and_the_cli_prints_it() -> None:
    assert (DOCS / "tidegate.schema.json").read_text() == schema_text()
    printed = CliRunner().invoke(main, ["config-schema"])
    assert printed.exit_code == 0 and printed.output == schema_text()


def test_every_key_is_described() -> None:
    for heading, struct in TABLES.items():
        for line in reference().split(f"## `[{heading}]`")[1].split("\n## ")[0].splitlines()[3:]:
            assert line.rstrip(" |").split(" | ")[-1].strip(), f"[{heading}] {line}: no description"
        assert struct.__struct_config__.forbid_unknown_fields


@pytest.mark.parametrize(("where", "block"), _toml_blocks(), ids=lambda v: v if "#" in str(v) else "")
def test_every_config_the_docs_show_loads_and_fits_the_schema(where: str, block: str) -> None:
    data: dict[str, Any] = tomllib.loads(block)
    jsonschema.Draft202012Validator(schema()).validate(data)
    try:
        load_text(block, where)
    except ConfigError as exc:  # files the example names (certificates) do not exist here
        assert "no such file" in str(exc), exc


def test_the_embedded_default_fits_the_schema() -> None:
    jsonschema.Draft202012Validator(schema()).validate(tomllib.loads(default_config_text()))


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"server": {"prot": 1}},
            "server.prot: unknown key (allowed: affinity_long_ttl_s, affinity_ttl_s, allowed_hosts, body_",
        ),
        ({"server": {"keepalive_s": 0}}, "server.keepalive_s: must be > 0, got 0"),
        ({"server": {"port": 70000}}, "server.port: must be <= 65535, got 70000"),
        (
            {"providers": {"p": {"kind": "nope"}}},
            "providers.p.kind: must be one of anthropic, bedrock, gemini, local, openai, vertex",
        ),
        ({"providers": {"p": {}}}, "providers.p.kind: required"),
        ({"providers": {"p": {"kind": "local", "n_threads": 0}}}, "providers.p.n_threads: must be >= 1, got 0"),
        ({"providers": {"p": {"kind": "local", "name": "q"}}}, "providers.p.name: unknown key"),
        ({"mcp": {"max_turns": 65}}, "mcp.max_turns: must be <= 64, got 65"),
        (
            {
                "providers": {"p": {"kind": "local"}},
                "models": {"m": {"routes": [{"provider": "p", "model": "x", "w": 1}]}},
            },
            'models."m".routes[0].w: unknown key (allowed: model, pricing, provider, weight)',
        ),
        (
            {"providers": {"p": {"kind": "local"}}, "models": {"m": {"routes": [{"provider": "p", "model": 1}]}}},
            'models."m".routes[0].model: expected a string, got an integer',
        ),
    ],
)
def test_the_schema_and_the_loader_refuse_the_same_documents(document: dict[str, Any], message: str) -> None:
    """What the schema refuses the loader refuses too, with a message that names the key."""
    with pytest.raises(ConfigError) as info:
        parse_config(document)
    assert message in str(info.value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema()).validate(document)
