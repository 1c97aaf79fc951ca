from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.process import STARTED, ServerProcess, local_config, secrets_of, started_server


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_gateways_log_or_store() -> Iterator[None]:
    """Every gateway of the suite runs at DEBUG logging; when the session ends, no log and no
    store file of any of them holds a secret it was given (its master key, its provider keys, AWS's)."""
    yield
    for server in STARTED:  # a gateway a test left running (its log is whole): it must not outlive the session
        server.kill()
    leaks = []
    for server in STARTED:
        secrets = secrets_of(server)
        files = [server.log_path, *server.workdir.glob("*.db*"), *server.workdir.parent.glob("*.db*")]
        for path in files:
            if not path.is_file():
                continue
            data = path.read_bytes()
            leaks += [f"{path}: a secret of {server.base_url}" for secret in secrets if secret.encode() in data]
    assert not leaks, "\n".join(sorted(set(leaks))[:20])


@pytest.fixture(scope="session")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real tidegate with the embedded local model, shared by the tests that only read from it."""
    with started_server(tmp_path_factory, "local-server", local_config) as server:
        yield server
