"""`Route`: one endpoint a package serves (its method, its path, its handler, whether it starts a
generation), and `RouteTable`, which finds the routes of a request's path once per request.

Each door package and the admin package declare their routes (`ROUTES`); `app.py` gathers them, one
line per package, and everything else follows from them: the paths a draining gateway refuses, the
metrics label of each path, and 405 with `Allow` for a known path asked with another method."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from ..errors import MethodNotAllowed
from ..records import ApiKey
from .http import Request
from .state import AppState

KeyedHandler = Callable[[Request, AppState, ApiKey], Awaitable[None]]
ANY = "*"  # the handler answers its path's methods itself (a collection's GET, POST and DELETE)

# what a `{name}` in a route's path matches; `{name:path}` matches any characters (a Gemini model
# before its action: everything up to the last `:`)
_PARAMS = {
    "id": r"[0-9A-Za-z_]{1,64}",
    "version": r"v1beta|v1",
    "model": r"[^:]+",
    "method": r"[A-Za-z]+",
}
_PATH = r".+"
_PARAM = re.compile(r"\{([a-z_]+)(:path)?\}")


def _compile(path: str) -> re.Pattern[str] | None:
    """The path's pattern; None for a path without `{name}` (found by a dict look-up)."""
    if "{" not in path:
        return None
    parts, at = [], 0
    for m in _PARAM.finditer(path):
        parts.append(re.escape(path[at : m.start()]))
        parts.append(f"(?P<{m[1]}>{_PATH if m[2] else _PARAMS[m[1]]})")
        at = m.end()
    parts.append(re.escape(path[at:]))
    return re.compile("^" + "".join(parts) + "$")


@dataclass(frozen=True, slots=True)
class Route:
    method: str  # GET, POST, or ANY
    path: str  # `{name}` stands for a path parameter (`_PARAMS`); the path as written is its metrics label
    handler: KeyedHandler
    generates: bool = False  # starts a generation: a draining gateway refuses it
    pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    label: str = field(init=False, repr=False, compare=False)  # the path, `{name:path}` written `{name}`

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", _compile(self.path))
        object.__setattr__(self, "label", _PARAM.sub(r"{\1}", self.path))

    def params(self, path: str) -> dict[str, str] | None:
        """The path's parameters when this route's path matches it (None: it does not)."""
        if self.pattern is None:
            return {} if path == self.path else None
        m = self.pattern.match(path)
        return None if m is None else m.groupdict()


@dataclass(frozen=True, slots=True)
class Found:
    """The routes whose path matches one request's path, in the order they were declared."""

    path: str
    routes: tuple[tuple[Route, dict[str, str]], ...]

    @property
    def label(self) -> str | None:
        return self.routes[0][0].label if self.routes else None

    @property
    def generates(self) -> bool:
        return any(route.generates for route, _ in self.routes)

    def pick(self, method: str) -> tuple[Route, dict[str, str]] | None:
        """The route for `method` (None: the path is no route's); 405 when only other methods have it."""
        if not self.routes:
            return None
        for route, params in self.routes:
            if route.method in (method, ANY):
                return route, params
        allowed = sorted({route.method for route, _ in self.routes})
        error = MethodNotAllowed(f"use {' or '.join(allowed)} {self.path}")
        error.headers = {"allow": ", ".join(allowed)}
        raise error


class RouteTable:
    """The routes, found by path: a plain path by one dict look-up, a templated one by its pattern."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self.routes = tuple(routes)
        self._plain: dict[str, list[Route]] = {}
        self._templated: list[Route] = []
        for route in self.routes:
            if route.pattern is None:
                self._plain.setdefault(route.path, []).append(route)
            else:
                self._templated.append(route)

    def find(self, path: str) -> Found:
        found: list[tuple[Route, dict[str, str]]] = [(route, {}) for route in self._plain.get(path, ())]
        if not found:
            for route in self._templated:
                params = route.params(path)
                if params is not None:
                    found.append((route, params))
        return Found(path, tuple(found))
