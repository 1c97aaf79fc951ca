"""What the SQLite store binds: None, bytes and bool go through a registered adapter (one dict hit
and a C call) instead of sqlite3's failed `__adapt__` lookup, which builds and drops a formatted
AttributeError per value (~11 per stream, the record's empty columns), and the stored values are
what sqlite3 stores without them: NULL, a BLOB, the integer 1. And the record's usage as the stores
keep it (a dict by field name: orjson on the slots dataclass builds an exception the same way)."""

from __future__ import annotations

import sqlite3

import tidegate.store.sqlite  # noqa: F401  (registers the adapters)


def test_none_bytes_and_bool_have_an_adapter() -> None:
    for kind in (type(None), bytes, bool):
        assert (kind, sqlite3.PrepareProtocol) in sqlite3.adapters, kind


def test_the_values_stored_are_unchanged() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (a, b, c, d)")
    db.execute("INSERT INTO t VALUES (?, ?, ?, ?)", (None, b"\x00blob", True, False))
    row = db.execute("SELECT a, b, c, d, typeof(a), typeof(b), typeof(c) FROM t").fetchone()
    assert row == (None, b"\x00blob", 1, 0, "null", "blob", "integer")


def test_usage_is_kept_by_field_name_in_order() -> None:
    """`usage_dict` (SQL rows and Redis alike): every field of `Usage`, by name, in order."""
    from dataclasses import asdict

    from tidegate.records import Usage, usage_dict

    usage = Usage(prompt_tokens=11, completion_tokens=5, total_tokens=16, reasoning_tokens=None, cached_tokens=3)
    assert list(usage_dict(usage).items()) == list(asdict(usage).items())
