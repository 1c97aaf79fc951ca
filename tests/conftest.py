from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import ServerProcess, local_config, start_server


@pytest.fixture(scope="session")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real tidegate with the embedded local model, shared by the tests that only read from it."""
    workdir = tmp_path_factory.mktemp("local-server")
    server = start_server(workdir, local_config(workdir))
    yield server
    server.stop()
