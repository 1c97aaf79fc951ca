"""docs/modules.md names every module of the package, one line each, and nothing that is not one: the
map a newcomer reads stays the house as built."""

from __future__ import annotations

import re
from pathlib import Path

import tidegate

ROOT = Path(tidegate.__file__).parent
MAP = Path(__file__).resolve().parents[2] / "docs" / "modules.md"
SKIPPED = {"migrations", "vendor", "__pycache__"}


def test_the_module_map_names_every_module_and_only_those() -> None:
    on_disk = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if not SKIPPED & set(p.relative_to(ROOT).parts)}
    lines = [m.groups() for m in re.finditer(r"^- `([^`]+\.py)` — (.*)$", MAP.read_text(), flags=re.M)]
    listed = [path for path, _ in lines]
    assert len(listed) == len(set(listed)), "a module listed twice"
    assert sorted(on_disk - set(listed)) == [], "modules docs/modules.md does not name"
    assert sorted(set(listed) - on_disk) == [], "docs/modules.md names modules that do not exist"
    assert [path for path, text in lines if len(text.strip()) < 12] == [], (
        "a module without a line that says what it is"
    )
