"""The fallback policy's table in docs/fallback.md is the code's (gateway/fallback.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidegate.commit import RouteFailure
from tidegate.errors import InvalidRequest, UnsupportedParameter, UpstreamError
from tidegate.gateway.fallback import (
    ANSWER_NOW,
    END_STREAM,
    NEXT_ROUTE,
    after_failure,
    answer_now,
    final_error,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "fallback.md"


def _table() -> list[tuple[str, bool, str, str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1] in ("yes", "no"):
            rows.append((cells[0], cells[1] == "yes", cells[2], cells[3]))
    return rows


def test_the_doc_has_the_table() -> None:
    assert len(_table()) == 8


@pytest.mark.parametrize(("code", "retriable", "before", "after"), _table())
def test_each_row_of_the_doc_is_what_the_code_does(code: str, retriable: bool, before: str, after: str) -> None:
    assert after_failure(code, retriable, committed=False) == before
    assert after_failure(code, retriable, committed=True) == after == END_STREAM
    assert before in (NEXT_ROUTE, ANSWER_NOW)


def test_answers_and_the_final_error() -> None:
    assert isinstance(answer_now(RouteFailure("p", "invalid_request", "bad field", 400)), InvalidRequest)
    upstream = answer_now(RouteFailure("p", "upstream_error", "no", 500))
    assert isinstance(upstream, UpstreamError) and upstream.message == "p: no"
    refused = final_error(
        [RouteFailure("a", "upstream_error", "boom", 503), RouteFailure("b", "unsupported_parameter", "no tools", 400)]
    )
    assert isinstance(refused, UnsupportedParameter) and refused.status == 400 and refused.message == "no tools"
    assert refused.error_code == "unsupported_parameter"


def test_a_refused_address_is_an_unreachable_provider() -> None:
    both = final_error([RouteFailure("a", "address_refused", "refused"), RouteFailure("b", "connect_error", "down")])
    assert both.status == 503 and both.error_code == "no_provider_available"
    assert "a (address_refused)" in both.message and "b (connect_error)" in both.message


def test_a_failure_names_its_provider_once_and_a_setup_failure_says_what_to_check() -> None:
    # the providers' own messages name them: the answer does not name them again
    not_found = RouteFailure("acme", "upstream_error", "acme: upstream HTTP 404: Not Found; check base_url", 404)
    assert answer_now(not_found).message == "acme: upstream HTTP 404: Not Found; check base_url"
    bare = RouteFailure("acme", "upstream_error", "the upstream broke", 0)
    assert answer_now(bare).message == "acme: the upstream broke"
    refused = RouteFailure("acme", "upstream_error", "acme: upstream HTTP 401; check the credential in $ACME_KEY", 401)
    assert final_error([refused]).message == f"every route failed: {refused.message}"
    other = RouteFailure("beta", "upstream_error", "beta answered HTTP 403; check the credential in $BETA_KEY", 403)
    down = RouteFailure("gamma", "upstream_error", "gamma: upstream HTTP 500", 500)
    message = final_error([refused, other, down]).message
    assert message.startswith("every route failed: acme (upstream_error 401), beta (upstream_error 403), gamma")
    assert "$ACME_KEY" in message and "$BETA_KEY" in message and "gamma: upstream HTTP 500" not in message
