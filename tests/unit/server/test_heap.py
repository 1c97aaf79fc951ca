"""A server worker settles its heap once startup is done (server/heap.py) and builds its HTTP
providers before the first request. Both are process-wide, so each case runs in a fresh interpreter:
the worker that uvicorn starts (`factory.create_app`) and a plain `TidegateApp`, which must leave
the collector alone (tests and embedders run many apps in one process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_PROBE = """
import asyncio, gc, json, os, sys
from tidegate.server.runtime import factory
from tidegate.server.app import TidegateApp
from tidegate.config.load import load_config

async def main(app):
    inbox = [{"type": "lifespan.startup"}]
    sent = []
    async def receive():
        if inbox:
            return inbox.pop(0)
        await asyncio.sleep(3600)
    async def send(message):
        sent.append(message["type"])
    task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send))
    while not sent:
        await asyncio.sleep(0.01)
    print(json.dumps({
        "sent": sent,
        "frozen": gc.get_freeze_count(),
        "threshold": list(gc.get_threshold()),
        "provider_module_loaded": "tidegate.providers.openai.chat" in sys.modules,
        "tls_context_built": getattr(sys.modules.get("tidegate.providers.http.connect"), "_TLS", None) is not None,
    }))
    task.cancel()

before = list(gc.get_threshold())
app = factory.create_app() if sys.argv[1] == "worker" else TidegateApp(load_config(os.environ["TIDEGATE_CONFIG"]))
assert "tidegate.providers.openai.chat" not in sys.modules, "imported before startup: the probe proves nothing"
assert gc.get_freeze_count() == 0
print(json.dumps({"default_threshold": before}))
asyncio.run(main(app))
"""

_CONFIG = """
[store]
url = "sqlite:///:memory:"
[providers.up]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
[models."m"]
routes = [{ provider = "up", model = "m" }]
"""


def _probe(tmp_path: Path, which: str) -> tuple[dict[str, object], dict[str, object]]:
    config = tmp_path / "tidegate.toml"
    config.write_text(_CONFIG)
    env = {"PATH": "/usr/bin:/bin", "TIDEGATE_CONFIG": str(config), "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, which], capture_output=True, text=True, timeout=120, env=env, check=True
    )
    first, second = out.stdout.strip().splitlines()[-2:]
    return json.loads(first), json.loads(second)


def test_a_worker_freezes_its_startup_heap_and_raises_the_young_threshold(tmp_path: Path) -> None:
    from tidegate.server import heap

    before, after = _probe(tmp_path, "worker")
    assert after["sent"] == ["lifespan.startup.complete"]
    assert isinstance(after["frozen"], int) and after["frozen"] > 10_000  # modules, config, providers
    assert after["threshold"] == [heap.YOUNG_THRESHOLD, heap.MIDDLE_THRESHOLD, heap.OLD_THRESHOLD]
    assert after["threshold"] != before["default_threshold"]


def test_http_providers_are_built_at_startup_not_on_the_first_request(tmp_path: Path) -> None:
    _, after = _probe(tmp_path, "worker")
    assert after["provider_module_loaded"] is True and after["tls_context_built"] is True


def test_an_app_built_directly_leaves_the_collector_alone(tmp_path: Path) -> None:
    before, after = _probe(tmp_path, "app")
    assert after["sent"] == ["lifespan.startup.complete"]
    assert after["frozen"] == 0
    assert after["threshold"] == before["default_threshold"]
    assert after["provider_module_loaded"] is True  # warming is not tied to the heap settings
