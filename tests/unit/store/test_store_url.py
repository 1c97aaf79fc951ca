"""One scheme table (store_url.store_backend) decides the store a `store.url` names: the config
check, `open_store` and `tidegate db upgrade` (tests/integration/test_migrations.py) all read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidegate.config.load import load_text
from tidegate.errors import ConfigError
from tidegate.store.open import open_store
from tidegate.store.postgres import PostgresStore
from tidegate.store.redis import RedisStore
from tidegate.store.sqlite import SQLiteStore
from tidegate.store_url import store_backend


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        ("sqlite://:memory:", "sqlite"),
        ("sqlite:///var/lib/tidegate.db", "sqlite"),
        ("redis://127.0.0.1:6379/0", "redis"),
        ("rediss://cache.example:6380", "redis"),
        ("postgresql://127.0.0.1:5432/test", "postgres"),
        ("postgres://u@h/db", "postgres"),
        ("mysql://h/db", None),
        ("sqlite:/relative.db", None),
        ("", None),
    ],
)
def test_the_scheme_names_the_store(url: str, backend: str | None) -> None:
    assert store_backend(url) == backend


def test_open_store_builds_the_store_the_scheme_names(tmp_path: Path) -> None:
    assert isinstance(open_store(f"sqlite:///{tmp_path}/t.db"), SQLiteStore)
    assert isinstance(open_store("rediss://127.0.0.1:6379/0"), RedisStore)
    assert isinstance(open_store("postgres://127.0.0.1:5432/test"), PostgresStore)
    with pytest.raises(ValueError, match="scheme not available in this build: mysql"):
        open_store("mysql://h/db")


def test_the_config_refuses_a_scheme_no_store_has() -> None:
    with pytest.raises(ConfigError, match=r"store\.url: unsupported scheme in 'mysql'"):
        load_text('[store]\nurl = "mysql://h/db"\n', "<test>")
    assert load_text('[store]\nurl = "rediss://h:6380/0"\n', "<test>").store.url == "rediss://h:6380/0"
