"""Fixtures the integration modules share."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.emulators.openai_upstream import OpenAIUpstream


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the console tests write their screenshots: docs/ only under `make screenshots` (which
    names it in TIDEGATE_SCREENSHOTS), a temporary directory on every other run, so that a test run
    never rewrites a tracked file."""
    target = os.environ.get("TIDEGATE_SCREENSHOTS")
    return Path(target) if target else tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def emu() -> Iterator[OpenAIUpstream]:
    """The fault-injecting OpenAI emulator, one per module (its request log and counters reset with
    `emu.reset()`). Modules whose upstream is another emulator define their own `emu`."""
    with OpenAIUpstream() as upstream:
        yield upstream
