"""One tidegate in front of every upstream kind: the emulators, the config and the per-kind routing.

Shared by the conformance suite, the fault matrix and the seed-loop tests. A test names a provider
*kind* and an emulator scenario; `route(kind, scenario)` says which provider entry and upstream model
id reach that scenario (the OpenAI emulator reads the scenario from the model id, the Anthropic-family
emulator from a `--<scenario>` suffix on it). Every kind has a second provider entry (`<name>-b`) so a
fallback can be told apart from the first route in `X-Provider`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.emulators.anthropic_upstream import AnthropicFamilyEmulator
from tests.emulators.gemini_upstream import GeminiEmulator
from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, sqlite_url, start_server
from tests.support.records import wait_record
from tidegate.providers.kinds import KINDS

# the fault matrix, the seed loops and the JS loop run over REMOTE_KINDS; the conformance suite runs
# over ALL_KINDS, every registered kind (providers/kinds.py), Gemini included (its emulator plays the
# conformance scenarios, not the faults)
REMOTE_KINDS = ("openai", "anthropic", "bedrock", "vertex")
ALL_KINDS = tuple(KINDS)

# provider entry name per kind (the `-b` twin is the same upstream under another name)
PROVIDER = {
    "openai": "oai",
    "anthropic": "claude",
    "bedrock": "claude-bedrock",
    "vertex": "claude-vertex",
    "gemini": "gemini",
    "local": "local",
}
_BASE_MODEL = {
    "anthropic": "claude-emu",
    "bedrock": "anthropic.claude-emu-v1:0",
    "vertex": "claude-emu@20250101",
    "gemini": "gemini-emu",
}
LOCAL_MODEL = "smollm2-135m-instruct"
# a kind registered without an emulator entry here fails the suite at collection, not by being left out
_UNWIRED = set(ALL_KINDS) - set(PROVIDER)
assert not _UNWIRED, f"tests/conformance/stack.py: no emulator wired for kind(s) {sorted(_UNWIRED)}"

# Faults after the commit point: fault → (emulator scenario per kind, the failure chunk's error.code).
# The idle stall needs a tidegate with `upstream_idle_timeout_s` well under the 4-5 s of silence.
FAULTS: dict[str, tuple[dict[str, str], str]] = {
    "in-band-error": ({"openai": "error-mid", "bedrock": "exception", "default": "error"}, "upstream_error"),
    "dropped-connection": ({"default": "drop"}, "upstream_error"),
    "idle-stall": ({"openai": "silence:5", "default": "stall"}, "upstream_timeout"),
    "truncated": ({"openai": "eof-mid", "default": "truncated"}, "upstream_error"),
    "corrupt-data": ({"openai": "invalid-json", "bedrock": "badcrc", "default": "badjson"}, "upstream_protocol_error"),
}
FAULT_CASES = [(fault, kind) for fault in FAULTS for kind in REMOTE_KINDS]


def fault_scenario(fault: str, kind: str) -> str:
    table = FAULTS[fault][0]
    return table.get(kind, table["default"])


def route(kind: str, scenario: str, *, twin: bool = False) -> tuple[str, str]:
    """(provider entry, upstream model id) that makes the emulator play `scenario` for `kind`."""
    provider = PROVIDER[kind] + ("-b" if twin else "")
    if kind == "local":
        return provider, LOCAL_MODEL
    if kind == "openai":
        return provider, scenario
    base = _BASE_MODEL[kind]
    return provider, base if scenario == "text" else f"{base}--{scenario}"


def public_id(kind: str, case: str) -> str:
    return f"{kind}/{case}"


def marker() -> str:
    return f"mark-{uuid.uuid4().hex[:12]}"


@dataclass
class Stack:
    """A running tidegate with both emulators behind it."""

    server: ServerProcess
    oai: OpenAIUpstream
    anthropic: AnthropicFamilyEmulator
    gemini: GeminiEmulator

    @property
    def chat_url(self) -> str:
        return self.server.base_url + "/v1/chat/completions"

    def scenarios_seen(self, kind: str, mark: str) -> list[str]:
        """The scenarios the upstream of `kind` played for requests whose body contains `mark`."""
        if kind == "openai":
            return [r.scenario for r in list(self.oai.requests) if mark in repr(r.body)]
        if kind == "gemini":
            return [r.scenario for r in list(self.gemini.requests) if mark in repr(r.body)]
        return [r.scenario for r in list(self.anthropic.requests) if r.dialect == kind and mark in repr(r.body)]

    def received(self, kind: str, mark: str) -> dict[str, Any]:
        """The body the upstream of `kind` received for the one request whose body contains `mark`."""
        if kind == "openai":
            found: list[Any] = [r for r in list(self.oai.requests) if mark in repr(r.body)]
        elif kind == "gemini":
            found = [r for r in list(self.gemini.requests) if mark in repr(r.body)]
        else:
            found = [r for r in list(self.anthropic.requests) if r.dialect == kind and mark in repr(r.body)]
        assert len(found) == 1, f"{kind}: {len(found)} upstream requests carry {mark}"
        body: dict[str, Any] = found[0].body
        return body

    def record(self, gid: str, until: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
        """The generation record, once it left `in_progress` (or reached `until`)."""
        return wait_record(self.server, gid, until=until, within_s=timeout)


def _providers(
    oai: OpenAIUpstream, emu: AnthropicFamilyEmulator, gemini: GeminiEmulator, idle: float | None
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for twin in ("", "-b"):
        out["gemini" + twin] = {
            "kind": "gemini",
            "base_url": gemini.base_url + "/v1beta",
            "api_key_env": "EMU_GEMINI_KEY",
        }
        out["oai" + twin] = {"kind": "openai", "base_url": oai.base_url}
        out["claude" + twin] = {"kind": "anthropic", "base_url": emu.base_url, "api_key_env": "EMU_ANTHROPIC_KEY"}
        out["claude-bedrock" + twin] = {"kind": "bedrock", "region": emu.region, "endpoint_url": emu.base_url}
        out["claude-vertex" + twin] = {
            "kind": "vertex",
            "region": "us-east5",
            "project": emu.vertex_project,
            "base_url": emu.base_url + "/v1",
            "access_token_env": "EMU_VERTEX_TOKEN",
        }
    # one llama.cpp thread: on a shared 2-core machine, spinning thread barriers cost more than they give
    out["local"] = {"kind": "local", "n_threads": 1}
    if idle is not None:  # the local model loads on its first request: never give it a short idle timeout
        out["local"]["upstream_idle_timeout_s"] = 60.0
    return out


def _env(emu: AnthropicFamilyEmulator, gemini: GeminiEmulator, workdir: Path) -> dict[str, str]:
    assert emu.aws.token is not None
    return {
        "EMU_GEMINI_KEY": gemini.api_key,
        "EMU_ANTHROPIC_KEY": emu.api_key,
        "EMU_VERTEX_TOKEN": emu.vertex_token,
        "AWS_ACCESS_KEY_ID": emu.aws.access_key,
        "AWS_SECRET_ACCESS_KEY": emu.aws.secret_key,
        "AWS_SESSION_TOKEN": emu.aws.token,
        "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@contextmanager
def running_stack(
    workdir: Path,
    models: dict[str, list[tuple[str, str]]],
    *,
    server: dict[str, Any] | None = None,
) -> Iterator[Stack]:
    """Both emulators and a tidegate serving `models` (public id → routes from `route(...)`)."""
    oai = OpenAIUpstream().start()
    emu = AnthropicFamilyEmulator().start()
    gemini = GeminiEmulator().__enter__()
    srv: ServerProcess | None = None
    try:
        settings = server or {}
        providers = _providers(oai, emu, gemini, settings.get("upstream_idle_timeout_s"))
        config = tidegate_toml(sqlite_url(workdir), providers, models, server=settings)
        srv = start_server(workdir, config, extra_env=_env(emu, gemini, workdir))
        yield Stack(srv, oai, emu, gemini)
    finally:
        if srv is not None:
            srv.stop()
            log = srv.log()
            assert emu.aws.token is not None
            for secret in (emu.api_key, emu.vertex_token, emu.aws.secret_key, emu.aws.token, gemini.api_key):
                assert secret not in log, "a credential reached the server log"
        gemini.__exit__()
        emu.stop()
        oai.stop()
