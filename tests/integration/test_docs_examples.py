"""The examples of docs/routing.md and docs/keys.md, run against a real `tidegate serve`:
the router model block served and asked, the key-creating requests sent to a gateway with the default
catalog, and what `tidegate keys list` then prints."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import MASTER_KEY, ServerProcess, sqlite_url, start_server
from tests.support.records import wait_record

DOCS = Path(__file__).resolve().parents[2] / "docs"
CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
IMAGE = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    }
]


def _block(page: str, lang: str, containing: str) -> str:
    blocks = [b for b in re.findall(rf"```{lang}\n(.*?)```", (DOCS / page).read_text(), re.S) if containing in b]
    assert len(blocks) == 1, f"{page}: one {lang} block with {containing!r}"
    return blocks[0]


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    block = _block("routing.md", "toml", 'type = "router"')
    workdir = tmp_path_factory.mktemp("routing-doc")
    with OpenAIUpstream() as emu:
        # the block as written; only where it sends requests changes: the emulator, which answers
        # the `text` scenario for either upstream model
        served = re.sub(r'base_url = "[^"]*"', f'base_url = "{emu.base_url}"', block)
        served = re.sub(r'(routes = \[\{ provider = "openai", model = )"[^"]*"', r'\1"text"', served)
        assert served.count('model = "text"') == 2
        config = f'[server]\nhost = "127.0.0.1"\n[store]\nurl = "{sqlite_url(workdir)}"\n{served}'
        server = start_server(workdir, config, extra_env={"OPENAI_API_KEY": "sk-docs-example-not-a-real-key"})
        try:
            yield server, emu
        finally:
            server.stop()


def test_the_router_example_of_routing_md_chooses_as_the_page_says(routed: Any) -> None:
    server, emu = routed
    with httpx.Client(timeout=30, headers=server.headers) as client:
        plain = client.post(server.base_url + CHAT, json={"model": "tidegate/auto", "messages": HI})
        assert plain.status_code == 200, plain.text
        assert plain.headers["x-provider"] == "openai"
        assert (
            wait_record(server, plain.headers["x-generation-id"])["route_reason"] == "policy=cheapest chose gpt-4o-mini"
        )
        seen = client.post(server.base_url + CHAT, json={"model": "tidegate/auto", "messages": IMAGE})
        assert seen.status_code == 200, seen.text
        reason = wait_record(server, seen.headers["x-generation-id"])["route_reason"]
        assert reason == "policy=cheapest chose gpt-4o (needs vision); skipped gpt-4o-mini: the request has images"
    listed = httpx.get(server.base_url + "/v1/models", headers=server.headers).json()["data"]
    auto = next(m for m in listed if m["id"] == "tidegate/auto")
    assert auto["type"] == "router" and auto["candidates"] == ["gpt-4o", "gpt-4o-mini"]
    assert len(emu.requests) == 2


def test_a_jurisdiction_refusal_names_each_provider_once(routed: Any) -> None:
    """Both candidates' routes are on `openai`, which declares no jurisdiction: the refusal names it
    once, not once per route."""
    server, emu = routed
    emu.reset()
    body = {"model": "tidegate/auto", "messages": HI, "provider": {"jurisdictions": ["eu"]}}
    r = httpx.post(server.base_url + CHAT, json=body, headers=server.headers, timeout=30)
    assert r.status_code == 503, r.text
    message = r.json()["error"]["message"]
    assert (
        message
        == "no allowed provider for this request: provider.jurisdictions=['eu'] excluded openai (no jurisdiction)"
    )
    assert emu.requests == []


def _keys_cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGATE_")}
    env.update({"TIDEGATE_URL": server.base_url, "TIDEGATE_MASTER_KEY": MASTER_KEY})
    return subprocess.run(
        [sys.executable, "-m", "tidegate", *args], env=env, capture_output=True, text=True, timeout=60
    )


def _chat(server: ServerProcess, secret: str) -> httpx.Response:
    body = {"model": "local/smollm2", "messages": HI, "max_tokens": 4}
    return httpx.post(server.base_url + CHAT, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=120)


def test_the_keys_md_examples_work_with_the_default_catalog(local_server: ServerProcess) -> None:
    """keys.md's curl body and `tidegate keys create` line, as written, against a gateway serving the
    default catalog's models; a key that spent a few millionths of a dollar lists them as a decimal."""
    curl = _block("keys.md", "sh", "curl -s localhost:8080/api/v1/keys")
    body = json.loads(curl.split("-d '", 1)[1].split("'", 1)[0])
    made = httpx.post(local_server.base_url + "/api/v1/keys", json=body, headers=local_server.headers)
    assert made.status_code == 201, made.text
    assert made.json()["models"] == ["local/smollm2"] and _chat(local_server, made.json()["key"]).status_code == 200

    line = next(x for x in _block("keys.md", "sh", "tidegate keys create").splitlines() if "keys create" in x)
    args = shlex.split(line.split("#", 1)[0])
    assert args[:3] == [".venv/bin/tidegate", "keys", "create"]  # the CLI `make serve` installs (README.md)
    created = _keys_cli(local_server, *args[1:])
    assert created.returncode == 0, created.stderr
    key_id, secret = created.stdout.split()[2], created.stdout.strip().splitlines()[-1]
    assert _chat(local_server, secret).status_code == 200

    deadline = time.monotonic() + 10
    while True:
        listed = _keys_cli(local_server, "keys", "list")
        assert listed.returncode == 0, listed.stderr
        row = next(x for x in listed.stdout.splitlines() if x.startswith(key_id))
        spent = row.split("spent=", 1)[1]
        if spent != "0 USD" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "credits=2 USD" in row and "e-" not in row, row
    assert re.fullmatch(r"0\.0000\d+ USD", spent), row
