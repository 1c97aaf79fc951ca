"""check-config and serve tell the truth about each provider: an unset credential variable, a base URL
that does not answer as the kind's API (named, with what to check), an unresolvable host; a request
to such a provider fails with a message that names it once and says what to check."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.emulators.anthropic_upstream import AnthropicFamilyEmulator
from tests.emulators.openai_upstream import REFUSED_KEY, OpenAIUpstream, tidegate_toml
from tests.support.process import sqlite_url, start_server


def _check(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROBE_")}
    return subprocess.run(
        [sys.executable, "-m", "tidegate", "check-config", "--config", str(path)],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=120,
    )


def _lines(stdout: str) -> dict[str, str]:
    return {ln.strip().split(" ")[0]: ln for ln in stdout.splitlines() if ln.startswith("    ")}


def _config(tmp_path: Path, providers: dict[str, dict[str, str]]) -> Path:
    models = {f"m-{name}": [(name, "text")] for name in providers}
    path = tmp_path / "probe.toml"
    path.write_text(tidegate_toml(sqlite_url(tmp_path), providers, models))
    return path


def test_each_provider_problem_is_named_and_exits_1(tmp_path: Path) -> None:
    with OpenAIUpstream() as upstream:
        root = upstream.base_url.removesuffix("/v1")
        path = _config(
            tmp_path,
            {
                "good": {"kind": "openai", "base_url": upstream.base_url, "api_key_env": "PROBE_GOOD"},
                "unset": {"kind": "openai", "base_url": upstream.base_url, "api_key_env": "PROBE_UNSET"},
                "nov1": {"kind": "openai", "base_url": root, "api_key_env": "PROBE_GOOD"},
                "refused": {"kind": "openai", "base_url": upstream.base_url, "api_key_env": "PROBE_REFUSED"},
                "nohost": {"kind": "openai", "base_url": "http://no-such-host.invalid/v1"},
            },
        )
        out = _check(path, {"PROBE_GOOD": "sk-probe-good-secret", "PROBE_REFUSED": REFUSED_KEY})
    lines = _lines(out.stdout)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "4 problems found" in out.stderr
    assert f"ok: GET {upstream.base_url}/models answered 200; $PROBE_GOOD set" in lines["good"]
    assert "PROBLEM:" in lines["unset"] and "$PROBE_UNSET NOT SET" in lines["unset"]
    assert f"PROBLEM: GET {root}/models answered 404: check that base_url ends with /v1" in lines["nov1"]
    assert f"GET {upstream.base_url}/models answered 401" in lines["refused"]
    assert "check $PROBE_REFUSED" in lines["refused"]
    assert "PROBLEM: cannot resolve host no-such-host.invalid" in lines["nohost"], lines["nohost"]
    assert "tried http://no-such-host.invalid/v1/models" in lines["nohost"] and "gaierror" not in out.stdout
    assert "sk-probe-good-secret" not in out.stdout + out.stderr and REFUSED_KEY not in out.stdout + out.stderr
    assert upstream.requests == []  # a model list, never a generation


def test_serve_warns_at_start_and_still_serves(tmp_path: Path) -> None:
    with OpenAIUpstream() as upstream:
        root = upstream.base_url.removesuffix("/v1")
        providers = {
            "acme": {"kind": "openai", "base_url": root, "api_key_env": "PROBE_ACME"},
            "unset": {"kind": "openai", "base_url": upstream.base_url, "api_key_env": "PROBE_UNSET"},
        }
        models = {"m-acme": [("acme", "text")], "m-unset": [("unset", "text")]}
        server = start_server(
            tmp_path, tidegate_toml(sqlite_url(tmp_path), providers, models), extra_env={"PROBE_ACME": "sk-acme-secret"}
        )
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and server.log().count("warning: provider") < 2:
                time.sleep(0.2)
            log = server.log()
            assert f"warning: provider acme: GET {root}/models answered 404: check that base_url ends with /v1" in log
            assert "warning: provider unset:" in log and "$PROBE_UNSET NOT SET" in log
            # serve still started, and a request to the wrong base URL says what to check, naming acme once
            r = httpx.post(
                server.base_url + "/v1/chat/completions",
                json={"model": "m-acme", "messages": [{"role": "user", "content": "hi"}]},
                headers=server.headers,
                timeout=30,
            )
            assert r.status_code == 502, r.text
            message = r.json()["error"]["message"]
            assert message.count("acme") == 1, message  # named once
            assert "404" in message and "check that base_url ends with /v1" in message
            assert "sk-acme-secret" not in r.text + server.log()
        finally:
            server.stop()


def test_a_refused_credential_names_its_variable(tmp_path: Path) -> None:
    with OpenAIUpstream() as upstream:
        providers = {"acme": {"kind": "openai", "base_url": upstream.base_url, "api_key_env": "PROBE_ACME"}}
        models = {"m": [("acme", "http-401")]}
        server = start_server(
            tmp_path, tidegate_toml(sqlite_url(tmp_path), providers, models), extra_env={"PROBE_ACME": "sk-acme-secret"}
        )
        try:
            r = httpx.post(
                server.base_url + "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                headers=server.headers,
                timeout=30,
            )
            assert r.status_code == 502, r.text
            message = r.json()["error"]["message"]
            assert "401" in message and "check the credential in $PROBE_ACME" in message, message
            assert message.count("acme") == 1, message
            assert "sk-acme-secret" not in r.text
        finally:
            server.stop()


def test_an_anthropic_base_url_is_probed_at_its_model_list(tmp_path: Path) -> None:
    emu = AnthropicFamilyEmulator().start()
    try:
        path = _config(
            tmp_path,
            {
                "claude": {"kind": "anthropic", "base_url": emu.base_url, "api_key_env": "PROBE_CLAUDE"},
                "claude-v1": {"kind": "anthropic", "base_url": emu.base_url + "/v1", "api_key_env": "PROBE_CLAUDE"},
            },
        )
        out = _check(path, {"PROBE_CLAUDE": "sk-ant-probe-secret"})
    finally:
        emu.stop()
    lines = _lines(out.stdout)
    assert out.returncode == 1 and "1 problem found" in out.stderr, out.stdout + out.stderr
    assert f"ok: GET {emu.base_url}/v1/models answered 200; $PROBE_CLAUDE set" in lines["claude"]
    assert (
        f"PROBLEM: GET {emu.base_url}/v1/v1/models answered 404: check base_url: the host without /v1"
        in lines["claude-v1"]
    )
    assert "sk-ant-probe-secret" not in out.stdout + out.stderr
    assert emu.requests == []
