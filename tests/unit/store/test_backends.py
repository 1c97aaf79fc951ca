"""A store backend is one package (store/<name>/) exporting one `Backend`, and the scheme table names
it: the packages on disk, the names `store.url` can pick and the registry agree (docs/architecture.md,
"Adding a store backend")."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import get_args

import pytest

import tidegate.store
from tidegate.store.backends import backend
from tidegate.store.facets import affinity_of, cache_store, console_of, owners_of, sessions_of
from tidegate.store.open import open_store
from tidegate.store_url import StoreBackend

NAMES = get_args(StoreBackend)
CONCERNS = ("cache", "sessions", "console", "affinity", "owners")


def test_each_package_under_store_is_a_backend_the_scheme_table_names() -> None:
    root = Path(tidegate.store.__file__).parent
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    assert packages == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_backend_is_its_package_and_its_store_names_it(name: str) -> None:
    chosen = backend(name)
    assert chosen.name == name
    parts = [chosen.store, *(getattr(chosen, concern) for concern in CONCERNS)]
    # every class the backend hands out lives in its own package
    assert {inspect.getmodule(part).__name__.rsplit(".", 1)[0] for part in parts} == {f"tidegate.store.{name}"}
    assert chosen.store.backend_name == name


def test_the_opened_store_brings_its_backends_concerns(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/t.db")
    sides = [cache_store(store), sessions_of(store), console_of(store), affinity_of(store), owners_of(store)]
    assert [type(s).__module__ for s in sides] == [f"tidegate.store.sqlite.{c}" for c in CONCERNS]
