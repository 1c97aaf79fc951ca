"""The route table (server/route.py): each door package declares its routes and `app.py` gathers one
line per package; what the drain refuses, each path's metrics label and 405 follow from the routes."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tidegate.server.doors
from tidegate.errors import MethodNotAllowed
from tidegate.server.app import ROUTES
from tidegate.server.route import ANY


def test_every_door_package_declares_routes_and_the_app_serves_them_all() -> None:
    doors = [m.name for m in pkgutil.iter_modules(tidegate.server.doors.__path__) if m.ispkg]
    assert doors, "no door packages"
    for name in doors:
        declared = importlib.import_module(f"tidegate.server.doors.{name}").ROUTES
        assert declared and set(declared) <= set(ROUTES.routes), name


def test_a_plain_path_is_no_templated_routes_path() -> None:
    """A plain path is found by one dict look-up, before any pattern is tried: so none may match one."""
    plain = [r.path for r in ROUTES.routes if r.pattern is None]
    templated = [r for r in ROUTES.routes if r.pattern is not None]
    assert [(p, r.path) for p in plain for r in templated if r.params(p) is not None] == []


def test_the_generating_routes_are_the_ones_a_draining_gateway_refuses() -> None:
    assert sorted(r.label for r in ROUTES.routes if r.generates) == [
        "/api/v1/images/generations",
        "/api/v1/llm/responses",
        "/v1/chat/completions",
        "/v1/embeddings",
        "/v1/images/generations",
        "/v1/messages",
        "/v1/responses",
        "/{version}/models/{model}:generateContent",
        "/{version}/models/{model}:streamGenerateContent",
    ]


@pytest.mark.parametrize(
    ("path", "label", "generates", "params"),
    [
        ("/v1beta/models/local/smollm2:generateContent", "/{version}/models/{model}:generateContent", True, None),
        ("/v1/models/a:b:streamGenerateContent", "/{version}/models/{model}:streamGenerateContent", True, None),
        ("/v1beta/models/m:countTokens", "/{version}/models/{model}:{method}", False, None),
        ("/api/v1/keys/key_01ab/credits", "/api/v1/keys/{id}/credits", False, {"id": "key_01ab"}),
        ("/api/v1/generations/01J0", "/api/v1/generations/{id}", False, {"id": "01J0"}),
        ("/v1/nothing", None, False, None),
    ],
)
def test_a_path_finds_its_route_label_and_parameters(
    path: str, label: str | None, generates: bool, params: dict[str, str] | None
) -> None:
    found = ROUTES.find(path)
    assert (found.label, found.generates) == (label, generates)
    if params is not None:
        picked = found.pick("POST" if path.endswith("credits") else "GET")
        assert picked is not None and picked[1] == params
    if label and label.startswith("/{version}"):
        picked = found.pick("POST")
        assert picked is not None and picked[1]["model"] == path.split("/models/", 1)[1].rpartition(":")[0]


def test_another_method_on_a_routes_path_is_405_naming_the_allowed_ones() -> None:
    with pytest.raises(MethodNotAllowed) as refused:
        ROUTES.find("/v1/chat/completions").pick("GET")
    assert refused.value.headers == {"allow": "POST"}
    assert ROUTES.find("/v1/nothing").pick("GET") is None  # no route's path: the app's 404
    route, _ = ROUTES.find("/api/v1/keys").pick("DELETE") or (None, None)
    assert route is not None and route.method == ANY  # the handler answers its own methods
