"""Fixtures the integration modules share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emulators.openai_upstream import OpenAIUpstream


@pytest.fixture(scope="module")
def emu() -> Iterator[OpenAIUpstream]:
    """The fault-injecting OpenAI emulator, one per module (its request log and counters reset with
    `emu.reset()`). Modules whose upstream is another emulator define their own `emu`."""
    with OpenAIUpstream() as upstream:
        yield upstream
