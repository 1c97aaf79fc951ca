"""What a real `tidegate serve` tells its operator: the startup line, the first start's admin key,
and one access-log line per request (never a body or a secret; `[server] log_requests = false` turns
it off)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import MASTER_KEY, start_server
from tests.support.streams import stream_sse
from tests.support.waits import poll_until

PROMPT = "a-private-prompt-7f3a9c"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as emu:
        yield emu


def _config(tmp_path: Path, emu: OpenAIUpstream, **server: object) -> str:
    return tidegate_toml(
        f"sqlite:///{tmp_path / 'tidegate.db'}",
        {"emu": {"kind": "openai", "base_url": emu.base_url}},
        {"text": [("emu", "text")]},
        server=server,
    )


def _chat(stream: bool) -> dict[str, object]:
    return {"model": "text", "stream": stream, "messages": [{"role": "user", "content": PROMPT}]}


def _access_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "tidegate.access:" in line]


def test_the_startup_line_names_the_address_the_config_the_store_and_the_console(
    upstream: OpenAIUpstream, tmp_path: Path
) -> None:
    server = start_server(tmp_path, _config(tmp_path, upstream))
    try:
        base = server.base_url
        expected = (
            f"tidegate: serving {base} (config: {server.config_path}; store: sqlite:///{tmp_path / 'tidegate.db'};"
            f" console: {base}/ui)"
        )
        # printed once listening: a moment after the first answer at most
        poll_until(lambda: expected in server.log().splitlines(), 10)
        assert expected in server.log().splitlines(), server.log()
    finally:
        server.stop()


def test_the_store_is_shown_without_its_password_or_query() -> None:
    from tidegate.cli.serve import redacted_store_url

    shown = redacted_store_url("postgresql://app:s3cret-pw@db.internal:5432/tidegate?password=other&schema=x")
    assert shown == "postgresql://app:***@db.internal:5432/tidegate"
    assert redacted_store_url("redis://:s3cret-pw@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert redacted_store_url("sqlite:///tidegate.db") == "sqlite:///tidegate.db"


def test_a_first_start_prints_an_admin_key_once_that_opens_the_console_and_the_admin_api(
    upstream: OpenAIUpstream, tmp_path: Path
) -> None:
    config = _config(tmp_path, upstream)
    # as after `make serve`: the CLI is installed in the venv, which is not on the PATH
    server = start_server(tmp_path / "first", config, master_key=None, extra_env={"PATH": _path_without_venv()})
    try:
        log = server.log()
        secret = next(line for line in log.splitlines() if line.startswith("tg-"))
        assert log.count(secret) == 1, log  # printed once; the access log names the key, never its secret
        assert f"{server.base_url}/ui" in log
        hint = re.search(r"manages keys: (.+ keys create --name my-app --api-key) \.\.\.$", log, re.M)
        assert hint is not None, log
        # the hint works as printed, in the shell serve ran from (no "command not found")
        listed = subprocess.run(
            ["sh", "-c", f"{hint.group(1).replace('create --name my-app', 'list')} {secret}"],
            capture_output=True,
            text=True,
            cwd=server.workdir,
            env={
                **{k: v for k, v in server.env.items() if not k.startswith("TIDEGATE_")},
                "TIDEGATE_URL": server.base_url,
            },
        )
        assert listed.returncode == 0 and "admin" in listed.stdout, (hint.group(1), listed.stderr)
        bearer = {"Authorization": f"Bearer {secret}"}
        assert httpx.get(server.base_url + "/api/v1/keys", headers=bearer).status_code == 200
        assert httpx.get(server.base_url + "/api/v1/usage", headers=bearer).status_code == 200
        login = httpx.post(server.base_url + "/ui/login", json={"key": secret})
        assert login.status_code == 200 and login.json()["name"] == "admin"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGATE_")}
        env["TIDEGATE_URL"] = server.base_url
        made = subprocess.run(
            [sys.executable, "-m", "tidegate", "keys", "create", "--name", "my-app", "--api-key", secret],
            capture_output=True,
            text=True,
            env=env,
        )
        assert made.returncode == 0, made.stderr
        app_key = made.stdout.strip().splitlines()[-1]
        ok = httpx.post(
            server.base_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {app_key}"}, json=_chat(False)
        )
        assert ok.status_code == 200
        assert secret not in server.log().replace(secret, "", 1)
    finally:
        server.stop()
    again = start_server(tmp_path / "again", config, master_key=None)  # the same store: keys exist now
    again.stop()
    assert "tg-" not in again.log()


def _path_without_venv() -> str:
    venv_bin = str(Path(sys.executable).parent)
    return os.pathsep.join(p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p != venv_bin)


def test_the_cli_hint_names_the_venvs_tidegate_from_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    """From the repository's root, where `make serve` runs, with the venv off the PATH: the hints say
    `.venv/bin/tidegate` (README.md's commands); with the venv on the PATH, plain `tidegate`."""
    from tidegate.cli.common import cli_command

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PATH", _path_without_venv())
    assert cli_command() == ".venv/bin/tidegate"
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + _path_without_venv())
    assert cli_command() == "tidegate"


def test_one_access_log_line_per_request_with_the_generation_and_never_a_body_or_secret(
    upstream: OpenAIUpstream, tmp_path: Path
) -> None:
    server = start_server(tmp_path, _config(tmp_path, upstream))
    try:
        streamed = stream_sse(server.base_url + "/v1/chat/completions", _chat(True), server.headers)
        assert streamed.done
        plain = httpx.post(server.base_url + "/v1/chat/completions", headers=server.headers, json=_chat(False))
        assert plain.status_code == 200
        refused = httpx.get(server.base_url + "/v1/models", headers={"Authorization": "Bearer tg-wrong-secret-1"})
        assert refused.status_code == 401
        answer = plain.json()["choices"][0]["message"]["content"]
    finally:
        server.stop()
    log = server.log()
    # the start's /readyz polls have lines of their own; the last may follow the first request's
    lines = [line for line in _access_lines(log) if " /readyz " not in line]
    assert len(lines) == 3, lines
    for resp_headers, line in ((streamed.headers, lines[0]), (plain.headers, lines[1])):
        gid = resp_headers["x-generation-id"]
        assert sum(gid in x for x in lines) == 1  # one line per request, at its end
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        assert line.split("tidegate.access:")[1].startswith("POST /v1/chat/completions 200 "), line
        assert fields["generation"] == gid and fields["key"] == "master"
        assert fields["model"] == "text" and fields["provider"] == "emu" and fields["outcome"] == "completed"
        assert float(fields["ttft_ms"]) >= 0 and float(fields["duration_ms"]) > 0 and float(fields["cost"]) >= 0
    refusal = r"GET /v1/models 401 generation=\w+ model=- outcome=rejected error=unauthorized duration_ms="
    assert re.search(refusal, lines[2]), lines[2]
    for secret in (PROMPT, answer, MASTER_KEY, "tg-wrong-secret-1"):
        assert secret not in log


def test_the_access_log_is_switched_off_by_config(upstream: OpenAIUpstream, tmp_path: Path) -> None:
    server = start_server(tmp_path, _config(tmp_path, upstream, log_requests=False))
    try:
        assert stream_sse(server.base_url + "/v1/chat/completions", _chat(True), server.headers).done
        assert httpx.get(server.base_url + "/readyz").status_code == 200
    finally:
        server.stop()
    assert _access_lines(server.log()) == []
