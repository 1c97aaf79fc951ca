"""Schema migrations of the SQL stores, with yoyo-migrations (docs/api-operations.md §10).

The migrations are SQL files in `store/migrations/<backend>/`, applied in order and recorded in the
database (`_yoyo_migration`) under yoyo's lock, so gateways starting together apply each once. A
store applies what is pending when it opens (`tidegate db upgrade` does the same without serving);
a database that has a migration this version does not know is refused, naming both versions.
Redis keeps no schema.

A new in-memory SQLite database (tests, `sqlite:///:memory:`) has nothing to migrate from and no
second connection can reach it: it gets the migrations' SQL in order on its own connection.
"""

from __future__ import annotations

import sqlite3
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from ..errors import ConfigError

MIGRATION_TABLE = "_yoyo_migration"


class SchemaTooNew(ConfigError):
    """The database was migrated by a newer tidegate."""


def _directory(backend: str) -> Path:
    return Path(str(resources.files("tidegate.store") / "migrations" / backend))


def known(backend: str) -> list[str]:
    """This version's migration ids for `backend` (`sqlite` | `postgres`), in order."""
    return sorted(p.stem for p in _directory(backend).glob("*.sql"))


def _yoyo_uri(backend: str, target: str, schema: str | None) -> str:
    if backend == "sqlite":
        return "sqlite:///" + target  # yoyo's database is the path after the third slash
    uri = "postgresql+psycopg://" + target.split("://", 1)[1]
    if schema:
        uri += ("&" if "?" in uri else "?") + urlencode({"schema": schema})
    return uri


def upgrade(backend: str, target: str, schema: str | None = None) -> list[str]:
    """Apply the pending migrations to the database at `target` (a SQLite path, or a PostgreSQL
    DSN with `schema`); returns the ids applied. Raises `SchemaTooNew` before applying anything
    when the database knows a migration this version does not. Blocking: run it off the loop."""
    from yoyo import get_backend, read_migrations

    if backend == "postgres" and schema:
        _create_namespace(target, schema)
    db: Any = get_backend(_yoyo_uri(backend, target, schema), migration_table=MIGRATION_TABLE)
    try:
        with db.lock():
            db.ensure_internal_schema_updated()  # yoyo's own tables, on a new database
            ours = set(known(backend))
            applied = [row[0] for row in db.execute(f"SELECT migration_id FROM {MIGRATION_TABLE}").fetchall()]
            newer = sorted(set(applied) - ours)
            if newer:
                raise SchemaTooNew(
                    f"the {backend} database's schema is at migration {newer[-1]}, newer than this tidegate"
                    f" knows (up to {known(backend)[-1]}): run a tidegate at least as new, or another store"
                )
            pending = db.to_apply(read_migrations(str(_directory(backend))))
            db.apply_migrations(pending)
            return [m.id for m in pending]
    finally:
        db.connection.close()


def _create_namespace(dsn: str, schema: str) -> None:
    """The PostgreSQL schema the store URL names, before yoyo makes its tables in it."""
    import psycopg
    from psycopg import errors, sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        except (errors.UniqueViolation, errors.DuplicateSchema):
            pass  # another gateway made it at the same moment


def apply_in_memory(conn: sqlite3.Connection) -> None:
    """A new in-memory SQLite database: every migration's SQL, in order, on its one connection."""
    for migration in known("sqlite"):
        conn.executescript((_directory("sqlite") / f"{migration}.sql").read_text())
