"""Schema migrations (docs/api-operations.md §10): `tidegate db upgrade`, and a gateway that refuses a schema newer
than it knows, on SQLite and PostgreSQL (yoyo-migrations; `src/tidegate/store/migrations/`)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.support.process import local_config, sqlite_url, start_server
from tests.support.store_backends import drop_postgres_schema, postgres_url, unique_name, with_query
from tidegate.store.schema import known

FUTURE = "9999_from_a_newer_tidegate"


def _tidegate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidegate", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(backend, store url) of a fresh database."""
    if request.param == "sqlite":
        yield "sqlite", sqlite_url(tmp_path)
        return
    base, why = postgres_url()
    if base is None:
        pytest.skip(why)
    schema = unique_name("mig")
    yield "postgres", with_query(base, schema=schema)
    drop_postgres_schema(base, schema)


def _mark_future(backend: str, url: str, tmp_path: Path) -> None:
    """What a newer tidegate's migration leaves in the database."""
    insert = "INSERT INTO _yoyo_migration (migration_hash, migration_id, applied_at_utc) VALUES ('f', '{}', {})"
    if backend == "sqlite":
        with sqlite3.connect(tmp_path / "tidegate.db") as db:
            db.execute(insert.format(FUTURE, "'2027-01-01 00:00:00'"))
        return
    base, schema = url.split("?schema=")

    async def _insert() -> None:
        conn = await asyncpg.connect(base)
        try:
            await conn.execute(f'SET search_path TO "{schema}"')
            await conn.execute(insert.format(FUTURE, "now()"))
        finally:
            await conn.close()

    asyncio.run(_insert())


def test_db_upgrade_applies_once_and_a_newer_schema_is_refused(store: tuple[str, str], tmp_path: Path) -> None:
    backend, url = store
    config = tmp_path / "tidegate.toml"
    config.write_text(local_config(tmp_path).replace(sqlite_url(tmp_path), url))
    ids = known(backend)
    assert ids[:2] == ["0001_initial", "0002_leases"]

    first = _tidegate("db", "upgrade", "--config", str(config), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert [line for line in first.stdout.splitlines() if line.startswith("applied")] == [f"applied {i}" for i in ids]
    assert first.stdout.splitlines()[-1] == f"schema up to date: {ids[-1]}"
    again = _tidegate("db", "upgrade", "--config", str(config), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.splitlines() == [f"schema up to date: {ids[-1]}"]

    _mark_future(backend, url, tmp_path)
    refused = _tidegate("db", "upgrade", "--config", str(config), cwd=tmp_path)
    assert refused.returncode != 0
    assert FUTURE in refused.stderr and ids[-1] in refused.stderr
    with pytest.raises(RuntimeError) as serve:
        start_server(tmp_path / "serve", config.read_text())
    assert FUTURE in str(serve.value) and ids[-1] in str(serve.value)
