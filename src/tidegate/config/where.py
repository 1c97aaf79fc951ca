"""The line of the TOML file a config error is about (`tidegate.toml:7: server.prot: unknown key`).

`tomllib` gives values, not positions, and every config error already starts with the dotted path of
its key (`config/values.py`). So the key is found again in the text: each line is read as a table
header (`[models."m"]`) or a `key = ...` line under the last header, giving its full path, and the
line whose path is the longest prefix of the error's path is the one shown; a key left over that
lives inside an inline table (`routes = [{ provider = ... }]`) is then looked for on the lines that
follow, up to the next header. A heuristic, not a parser: it only chooses a line to point at, and an
error whose key it cannot place is shown without one.
"""

from __future__ import annotations

import re

# a dotted key path at the start of an error message: `server.port`, `models."a/b".routes[0].provider`
_PATH = re.compile(r'^((?:"[^"]*"|[^\s".:\[]+)(?:\[\d+\])*(?:\.(?:"[^"]*"|[^\s".:\[]+)(?:\[\d+\])*)*): ')
_SEGMENT = re.compile(r'"([^"]*)"|([^\s".\[\]]+)')
_KEY = r'(?:"(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_\-]+)'
_HEADER = re.compile(rf"^\s*\[\[?\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*\]\]?")
_ASSIGN = re.compile(rf"^\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*=")
_PART = re.compile(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([A-Za-z0-9_\-]+)')


def error_path(message: str) -> list[str]:
    """The key path an error message starts with, without list indices (`<root>.` dropped)."""
    found = _PATH.match(message)
    if found is None:
        return []
    parts = [quoted or bare for quoted, bare in _SEGMENT.findall(found.group(1))]
    return parts[1:] if parts[:1] == ["<root>"] else parts


def _keys(text: str) -> list[str]:
    return [a or b or c for a, b, c in _PART.findall(text)]


def _paths(lines: list[str]) -> list[tuple[int, list[str], bool]]:
    """(line index, the full key path it declares, whether it is a header) for each header or key line."""
    found: list[tuple[int, list[str], bool]] = []
    table: list[str] = []
    in_string = False
    for i, line in enumerate(lines):
        quotes = line.count('"""') + line.count("'''")
        if in_string:
            in_string = quotes % 2 == 0
            continue
        if header := _HEADER.match(line):
            table = _keys(header.group(1))
            found.append((i, table, True))
        elif assign := _ASSIGN.match(line):
            found.append((i, table + _keys(assign.group(1)), False))
        in_string = quotes % 2 == 1
    return found


def line_of(text: str, path: list[str]) -> int | None:
    """The 1-based line of `text` that declares `path` (or the closest enclosing key or table)."""
    if not path:
        return None
    lines = text.splitlines()
    paths = _paths(lines)
    best: tuple[int, int] | None = None  # (prefix length, line index)
    for i, declared, _ in paths:
        if declared and declared == path[: len(declared)] and (best is None or len(declared) > best[0]):
            best = (len(declared), i)
    if best is None:
        return None
    depth, at = best
    if depth < len(path):  # a key inside an inline table: on this line or the next ones of its table
        key = re.compile(rf"(?:^|[{{,\s]){re.escape(path[-1])}\s*=")
        next_header = min((i for i, _, header in paths if header and i > at), default=len(lines))
        for i in range(at, next_header):
            if key.search(lines[i] if i != at else lines[i].split("=", 1)[-1]):
                return i + 1
    return at + 1
