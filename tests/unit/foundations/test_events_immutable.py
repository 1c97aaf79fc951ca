"""Canonical events (`@event`): slots dataclasses with value equality and a hash, which the type
checker keeps immutable (`mypy --strict` refuses an assignment to any event's field), built
without a frozen dataclass's `object.__setattr__` per field."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from tidegate import events

EVENT_CLASSES = [
    cls
    for _, cls in inspect.getmembers(events, inspect.isclass)
    if cls.__module__ == events.__name__ and dataclasses.is_dataclass(cls)
]


def example(cls: type) -> object:
    """An instance with every required field set to a value of its annotated kind."""
    values: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        kind = str(f.type)
        values[f.name] = b"x" if "bytes" in kind else 1 if kind.startswith("int") else "stop"
    return cls(**values)


def test_every_event_class_is_declared_with_event() -> None:
    assert len(EVENT_CLASSES) == 11
    source = inspect.getsource(events)
    for cls in EVENT_CLASSES:
        assert f"@event\nclass {cls.__name__}" in source


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda c: c.__name__)
def test_an_event_has_slots_value_equality_and_a_hash(cls: type) -> None:
    one, other = example(cls), example(cls)
    assert not hasattr(one, "__dict__")
    assert one == other and one is not other
    if all(not isinstance(getattr(one, f.name), (dict, list)) for f in dataclasses.fields(cls)):
        assert hash(one) == hash(other) and len({one, other}) == 1


def test_mypy_refuses_an_assignment_to_an_events_field(tmp_path: Path) -> None:
    snippet = tmp_path / "assigns.py"
    snippet.write_text(
        "from tidegate.events import RawFrame, TextDelta, Finished\n"
        'TextDelta("a").text = "b"\n'
        'RawFrame(b"").data = b"x"\n'
        'Finished("stop").reason = "length"\n'
    )
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(snippet)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert 'Property "text" defined in "TextDelta" is read-only' in run.stdout
    assert 'Property "data" defined in "RawFrame" is read-only' in run.stdout
    assert 'Property "reason" defined in "Finished" is read-only' in run.stdout
