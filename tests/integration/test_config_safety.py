"""What the config and the gateway refuse to point at or forward,
through real `tidegate check-config` and `tidegate serve` processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, free_port, running_server, sqlite_url, start_server
from tests.support.store_backends import postgres_url, redis_url
from tests.support.waits import wait_ready

# 169.254.169.254 as resolvers, URL parsers and the kernel also read it
METADATA_SPELLINGS = [
    "0xA9FEA9FE",
    "0251.0376.0251.0376",
    "169.254.43518",
    "0xa9.0xfe.0xa9.0xfe",
    "[::ffff:169.254.169.254]",
    "[::ffff:a9fe:a9fe]",
    "[64:ff9b::a9fe:a9fe]",
    "[::169.254.169.254]",
    "[::ffff:0:a9fe:a9fe]",
    "[2002:a9fe:a9fe::1]",
    "[64:ff9b:1::a9fe:a9fe]",
    "169.254.169.254.",
    "METADATA.GOOGLE.INTERNAL.",
]


def check_config(tmp_path: Path, toml: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "t.toml"
    path.write_text(toml)
    return subprocess.run(
        [sys.executable, "-m", "tidegate", "check-config", "--config", str(path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_provider(tmp_path: Path, **keys: object) -> str:
    return tidegate_toml(sqlite_url(tmp_path), {"p": {"kind": "openai", **keys}}, {"m": [("p", "m")]})


@pytest.mark.parametrize("host", METADATA_SPELLINGS)
def test_every_spelling_of_the_metadata_address_is_refused_as_a_base_url(tmp_path: Path, host: str) -> None:
    """Probing included: check-config stops at the config error, before any connection."""
    result = check_config(tmp_path, one_provider(tmp_path, base_url=f"http://{host}/v1"))
    assert result.returncode == 1, result.stdout
    assert "providers.p.base_url: " in result.stderr and "metadata" in result.stderr
    assert "config OK" not in result.stdout


@pytest.mark.parametrize("host", [*METADATA_SPELLINGS, "169.254.169.254", "[fe80::1]"])
def test_a_proxy_at_a_metadata_or_link_local_address_is_refused(tmp_path: Path, host: str) -> None:
    toml = one_provider(tmp_path, base_url="https://api.example.com/v1", proxy=f"http://user:pw-123@{host}:80")
    result = check_config(tmp_path, toml)
    assert result.returncode == 1
    assert "providers.p.proxy: " in result.stderr and "link-local or cloud metadata" in result.stderr
    assert "pw-123" not in result.stderr + result.stdout


def test_a_catalog_mcp_server_at_the_metadata_address_is_a_config_error(tmp_path: Path) -> None:
    toml = one_provider(tmp_path, base_url="https://api.example.com/v1")
    toml += '[models."t"]\nroutes = [{ provider = "p", model = "m" }]\n'
    toml += 'server_tools = [{ server_label = "md", server_url = "http://0xA9FEA9FE/mcp" }]\n'
    result = check_config(tmp_path, toml, "--no-probe")
    assert result.returncode == 1
    assert 'models."t".server_tools[0].server_url: ' in result.stderr and "metadata" in result.stderr


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as emu:
        yield emu


@pytest.fixture(scope="module")
def mcp_gateway(
    upstream: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, str]]:
    """(the gateway, an MCP URL every check admits): MCP allowed on a loopback port where nothing
    listens (so an admitted tool fails to connect: 502) and on the metadata address written as
    IPv4-mapped IPv6, listed exactly."""
    workdir = tmp_path_factory.mktemp("mcp-safety")
    toml = tidegate_toml(
        sqlite_url(workdir), {"emu": {"kind": "openai", "base_url": upstream.base_url}}, {"m": [("emu", "mcp-agent")]}
    )
    port = free_port()
    toml += f'[mcp]\nallowed_hosts = ["127.0.0.1:{port}", "::ffff:169.254.169.254"]\ncall_timeout_s = 3\n'
    server = start_server(workdir, toml)
    yield server, f"http://127.0.0.1:{port}/mcp"
    server.stop()


def _mcp_request(server: ServerProcess, url: str, headers: dict[str, str]) -> httpx.Response:
    tool = {"type": "mcp", "server_label": "s", "server_url": url, "require_approval": "never", "headers": headers}
    body = {"model": "m", "input": "call add", "tools": [tool]}
    return httpx.post(server.base_url + "/v1/responses", json=body, headers=server.headers, timeout=30)


def test_an_mcp_server_at_the_metadata_address_in_ipv6_form_is_refused_even_listed_exactly(
    mcp_gateway: tuple[ServerProcess, str],
) -> None:
    server, _ = mcp_gateway
    for url in ("http://[::ffff:169.254.169.254]/mcp", "http://[::ffff:a9fe:a9fe]/mcp"):
        r = _mcp_request(server, url, {})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "mcp_server_not_allowed"


REFUSED_HEADERS = ["Host", "content-length", "Connection", "Keep-Alive", "Proxy-Authorization", "TE", "Trailer"]


@pytest.mark.parametrize("name", [*REFUSED_HEADERS, "Transfer-Encoding", "Upgrade"])
def test_a_client_cannot_set_host_or_hop_by_hop_headers_for_an_mcp_server(
    mcp_gateway: tuple[ServerProcess, str], name: str
) -> None:
    server, url = mcp_gateway
    r = _mcp_request(server, url, {name: "internal.example"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request" and f"'{name}'" in error["message"]
    assert "internal.example" not in r.text


def test_an_mcp_header_value_with_cr_lf_is_refused_without_echoing_it(mcp_gateway: tuple[ServerProcess, str]) -> None:
    server, url = mcp_gateway
    r = _mcp_request(server, url, {"X-Trace": "a\r\nHost: internal.example"})
    assert r.status_code == 400 and "'X-Trace'" in r.json()["error"]["message"]
    assert "internal.example" not in r.text
    # a header the rule allows passes it, on to the server (which is not there: the connect fails)
    assert _mcp_request(server, url, {"Authorization": "Bearer x"}).status_code != 400


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nb", "a\rb"])
def test_a_provider_header_with_cr_or_lf_is_refused_at_load(tmp_path: Path, value: str) -> None:
    toml = one_provider(tmp_path, base_url="https://api.example.com/v1", headers={"X-Title": value})
    result = check_config(tmp_path, toml, "--no-probe")
    assert result.returncode == 1
    assert "providers.p.headers: provider 'p': header 'X-Title'" in result.stderr
    assert "X-Injected" not in result.stderr


def test_a_provider_header_the_connection_owns_is_refused_at_load(tmp_path: Path) -> None:
    toml = one_provider(tmp_path, base_url="https://api.example.com/v1", headers={"Transfer-Encoding": "chunked"})
    result = check_config(tmp_path, toml, "--no-probe")
    assert result.returncode == 1 and "header 'Transfer-Encoding'" in result.stderr


# --- 47.8: the Host header on the endpoints without a key ------------------------------------------
OPEN = ["/metrics", "/healthz", "/readyz", "/ui/", "/ui/app.js"]


@pytest.fixture(scope="module")
def loopback_gateway(upstream: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("hosts")
    toml = tidegate_toml(sqlite_url(workdir), {"emu": {"kind": "openai", "base_url": upstream.base_url}}, {})
    with running_server(workdir, toml) as server:
        yield server


@pytest.mark.parametrize("path", OPEN)
def test_a_loopback_gateway_refuses_another_host_name_without_a_key(loopback_gateway: ServerProcess, path: str) -> None:
    """A DNS-rebinding page: its browser sends the page's name in Host."""
    r = httpx.get(loopback_gateway.base_url + path, headers={"Host": "attacker.example"})
    assert r.status_code == 421, r.text
    assert r.json()["error"]["code"] == "host_not_allowed" and "tidegate_" not in r.text
    port = loopback_gateway.base_url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "127.0.0.2", f"[::1]:{port}", "LOCALHOST."):
        assert httpx.get(loopback_gateway.base_url + path, headers={"Host": host}).status_code == 200, host


def test_keyed_endpoints_do_not_check_host(loopback_gateway: ServerProcess) -> None:
    r = httpx.get(
        loopback_gateway.base_url + "/v1/models", headers={**loopback_gateway.headers, "Host": "attacker.example"}
    )
    assert r.status_code == 200


def test_allowed_hosts_replaces_the_default(upstream: OpenAIUpstream, tmp_path: Path) -> None:
    toml = tidegate_toml(
        sqlite_url(tmp_path),
        {"emu": {"kind": "openai", "base_url": upstream.base_url}},
        {},
        server={"allowed_hosts": ["gateway.example.com", "*.internal.example:8443"]},
    )
    server = start_server(tmp_path, toml, wait_ready=False)
    try:
        url = server.base_url + "/metrics"
        # (start_server's own wait asks /readyz with a Host this gateway refuses)
        wait_ready(server.base_url, headers={"Host": "gateway.example.com"}, proc=server.proc, log=server.log)
        assert httpx.get(url, headers={"Host": "gateway.example.com:9999"}).status_code == 200
        assert httpx.get(url, headers={"Host": "a.internal.example:8443"}).status_code == 200
        for refused in ("a.internal.example:8080", "127.0.0.1", "internal.example:8443"):
            r = httpx.get(url, headers={"Host": refused})
            assert r.status_code == 421 and r.json()["error"]["code"] == "host_not_allowed", refused
    finally:
        server.stop()


def test_allowed_hosts_star_accepts_any_host(tmp_path: Path) -> None:
    server = start_server(tmp_path, tidegate_toml(sqlite_url(tmp_path), {}, {}, server={"allowed_hosts": ["*"]}))
    try:
        assert httpx.get(server.base_url + "/metrics", headers={"Host": "attacker.example"}).status_code == 200
    finally:
        server.stop()


# --- 55.7: where an error is, what was meant; the store --------------------------------------------


def test_a_config_error_names_the_file_line_and_the_nearest_key(tmp_path: Path) -> None:
    result = check_config(tmp_path, '[server]\nport = 8080\nmax_conections = 5\n[store]\nurl = "sqlite:///x.db"\n')
    assert result.returncode == 1
    assert f"{tmp_path / 't.toml'}:3: server.max_conections: unknown key" in result.stderr
    assert "did you mean `max_connections`?" in result.stderr
    toml = '[providers.p]\nkind = "local"\n\n[models."m"]\nroutes = [\n  { provider = "p", model = "x" },\n'
    toml += '  { provider = "p", modle = "y" },\n]\n'
    result = check_config(tmp_path, toml)
    assert 't.toml:7: models."m".routes[1].modle: unknown key' in result.stderr
    assert "did you mean `model`?" in result.stderr
    result = check_config(tmp_path, "[sever]\nport = 1\n")
    assert "t.toml:1: <root>.sever: unknown key" in result.stderr and "did you mean `server`?" in result.stderr


def _store_line(result: subprocess.CompletedProcess[str]) -> str:
    return next(line for line in result.stdout.splitlines() if line.strip().startswith("store:"))


def test_check_config_fails_when_the_sqlite_store_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store's directory would be\n")
    toml = tidegate_toml(f"sqlite:///{blocker / 'sub' / 'g.db'}", {}, {})
    result = check_config(tmp_path, toml)
    assert result.returncode == 1 and "PROBLEM" in _store_line(result)
    assert "1 problem found" in result.stderr
    ok = check_config(tmp_path, tidegate_toml(f"sqlite:///{tmp_path / 'new' / 'g.db'}", {}, {}))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "store: sqlite: ok: writable" in ok.stdout and not (tmp_path / "new").exists()  # checked, not made


def test_check_config_connects_to_redis_and_postgresql_stores(tmp_path: Path) -> None:
    dead = free_port()
    for url in (f"redis://:pw-secret@127.0.0.1:{dead}/0", f"postgresql://u:pw-secret@127.0.0.1:{dead}/db"):
        result = check_config(tmp_path, tidegate_toml(url, {}, {}))
        assert result.returncode == 1, result.stdout
        assert f"PROBLEM: unreachable (127.0.0.1:{dead}" in _store_line(result)
        assert "pw-secret" not in result.stdout + result.stderr
    live = [u for u, _ in (redis_url(), postgres_url()) if u is not None]
    if not live:
        pytest.skip("neither Redis nor PostgreSQL is reachable")
    for url in live:
        result = check_config(tmp_path, tidegate_toml(url, {}, {}))
        assert result.returncode == 0, result.stdout + result.stderr
        assert ": ok: reachable" in _store_line(result)
