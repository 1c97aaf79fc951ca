"""A worker's one loaded config gives both its app and the guard's limits; the Supervisor hands its
workers the file serve read, absolute, and nothing for the embedded default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidegate.config.load import load_config, load_text
from tidegate.server.runtime import factory, guard
from tidegate.server.runtime.factory import build_app
from tidegate.server.runtime.run import config_file, uvicorn_options

CONFIG = """
[server]
max_headers = 37
max_connections = 40
drain_s = 3
"""


def test_the_app_and_the_guard_come_from_the_same_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "_limits", None)
    monkeypatch.setattr(factory, "configure_logging", lambda: None)  # the process-wide logging stays the tests'
    with pytest.raises(RuntimeError):
        guard.limits()  # never a default in place of the worker's settings
    config = load_text(CONFIG, "t.toml")
    app = build_app(config)
    assert app.config is config
    limits = guard.limits()
    assert (limits.max_headers, limits.max_connections, limits.body_share) == (37, 40, 30)
    assert limits == guard.Limits.of(config.server)


def test_workers_are_handed_the_file_serve_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tidegate.toml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIDEGATE_CONFIG", raising=False)
    assert config_file(load_config("tidegate.toml")) == os.path.join(tmp_path, "tidegate.toml")
    assert config_file(load_text("", "<embedded default>")) is None


def test_uvicorn_is_given_neither_the_app_nor_the_protocol_by_name() -> None:
    options = uvicorn_options(load_text(CONFIG, "t.toml"))
    assert not {"app", "factory", "http", "host", "port"} & set(options)
    assert options["timeout_graceful_shutdown"] == 5  # drain_s + 2 s, the stop's bound (server/runtime/drain.py)
