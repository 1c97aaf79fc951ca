"""The address rule where connections are made (docs/security.md, Addresses): a provider whose name
resolves to the metadata address when `serve` connects is refused before any byte is sent, however
that address is spelled, and even when `check-config` saw the name resolve elsewhere.

Names resolve through a hosts file inside a network and mount namespace of the test's own
(`tests/support/netns_address_rule.py`, run under `unshare --net --mount`): the metadata address is a listener
on that namespace's loopback, never a real one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from tests.support.netns_address_rule import CANARY, REFUSED_NAMES
from tests.support.process import REPO

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare for a namespace"
)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("address-rule")
    result = subprocess.run(
        ["unshare", "--net", "--mount", sys.executable, "-m", "tests.support.netns_address_rule", str(workdir)],
        cwd=REPO,  # where `tests` imports from
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def _line(report: str, provider: str) -> str:
    return next(line for line in report.splitlines() if line.strip().startswith(f"{provider} (openai):"))


def test_check_config_saw_the_name_allowed_then_refused(outcome: dict[str, Any]) -> None:
    before = _line(outcome["check_before"], "rebind")
    # allowed: the probe reached the listener on 127.0.0.1 (which answers nothing: a problem of its own)
    assert "GET http://rebind.test:" in before and "link-local or metadata" not in before, before
    refused = "PROBLEM: refused: rebind.test resolves to 169.254.169.254, a link-local or metadata address"
    assert refused in _line(outcome["check_after"], "rebind")


def test_the_control_listener_sees_the_key_when_the_address_is_allowed(outcome: dict[str, Any]) -> None:
    """What makes the empty trap below mean something: the same request to an allowed address
    carries the key."""
    assert any(f"authorization: Bearer {CANARY}" in seen for seen in outcome["control"])


@pytest.mark.parametrize("provider", ["rebind", *REFUSED_NAMES])
def test_serve_refuses_the_metadata_address_in_every_spelling(outcome: dict[str, Any], provider: str) -> None:
    answer = outcome["answers"][provider]
    assert answer["status"] == 503
    error = json.loads(answer["body"])["error"]
    assert error["code"] == "no_provider_available"
    assert error["message"] == f"no provider could be reached: {provider} (address_refused)"
    assert f"provider {provider}: refused: {provider}.test resolves to " in outcome["log"]
    assert check_config_refuses(outcome["check_after"], provider)


def check_config_refuses(report: str, provider: str) -> bool:
    return "PROBLEM: refused: " in _line(report, provider)


def test_nothing_reached_the_metadata_listener(outcome: dict[str, Any]) -> None:
    """Not a connection, so not a byte of the request and not the key."""
    assert outcome["trap"] == []
    assert CANARY not in outcome["log"]


def test_a_proxy_whose_name_resolves_to_the_metadata_address_is_refused(outcome: dict[str, Any]) -> None:
    answer = outcome["answers"]["viaproxy"]
    assert answer["status"] == 503
    assert json.loads(answer["body"])["error"]["message"] == "no provider could be reached: viaproxy (address_refused)"
    assert "provider viaproxy: proxy proxy.test:" in outcome["log"]
    assert ": refused: proxy.test resolves to 169.254.169.254" in outcome["log"]
