"""A provider's connection options (docs/api-edges.md §15): parsed with defaults, and every bad value is a
config error naming its key, never repeating a proxy's password."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from tidegate.config.load import load_text
from tidegate.errors import ConfigError

BASE = "[providers.p]\nkind = 'openai'\nbase_url = 'https://api.example/v1'\n"


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pems")
    ca = trustme.CA()
    issued = ca.issue_cert("tidegate@example.com")
    paths = {name: str(d / f"{name}.pem") for name in ("ca", "cert", "key", "both", "junk")}
    ca.cert_pem.write_to_path(paths["ca"])
    issued.cert_chain_pems[0].write_to_path(paths["cert"])
    issued.private_key_pem.write_to_path(paths["key"])
    issued.private_key_and_cert_chain_pem.write_to_path(paths["both"])
    Path(paths["junk"]).write_text("not a certificate\n")
    return paths


def test_defaults() -> None:
    p = load_text(BASE, "t.toml").providers["p"]
    assert (p.proxy, p.ca_file, p.client_cert, p.client_key, p.verify) == (None, None, None, None, True)
    assert (p.max_connections, p.pool_idle_timeout_s) == (1000, 15.0)


def test_every_option(pems: dict[str, str]) -> None:
    toml = BASE + (
        'proxy = "http://u:pw@proxy.internal:3128"\n'
        f"ca_file = {pems['ca']!r}\nclient_cert = {pems['cert']!r}\nclient_key = {pems['key']!r}\n"
        "verify = false\nmax_connections = 8\npool_idle_timeout_s = 30\n"
    )
    p = load_text(toml, "t.toml").providers["p"]
    assert p.proxy == "http://u:pw@proxy.internal:3128" and "pw" not in repr(p)
    assert (p.ca_file, p.client_cert, p.client_key) == (pems["ca"], pems["cert"], pems["key"])
    assert (p.verify, p.max_connections, p.pool_idle_timeout_s) == (False, 8, 30.0)
    assert load_text(BASE + "proxy = false\n", "t.toml").providers["p"].proxy is False
    assert load_text(BASE + f"client_cert = {pems['both']!r}\n", "t.toml").providers["p"].client_cert == pems["both"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("proxy = true\n", 'providers.p.proxy: expected "http://host:port" or false'),
        ("proxy = 3128\n", "providers.p.proxy: expected"),
        ('proxy = "https://u:s3cret@proxy:3128"\n', "providers.p.proxy: must start with http://"),
        ('proxy = "socks5://proxy:1080"\n', "providers.p.proxy: must start with http://"),
        ('proxy = "http://u:s3cret@proxy:99999"\n', "providers.p.proxy: the port"),
        ('proxy = "http://u:s3cret@proxy:3128/path"\n', "providers.p.proxy: must be http://host:port"),
        ('proxy = "http://"\n', "providers.p.proxy: has no host"),
        ('ca_file = "/nonexistent/ca.pem"\n', "providers.p.ca_file: no such file"),
        ("ca_file = 1\n", "providers.p.ca_file: expected a string"),
        ("ca_file = '{junk}'\n", "providers.p.ca_file: not a PEM certificate bundle"),
        ("client_cert = '{junk}'\n", "providers.p.client_cert: the certificate and its key do not load"),
        ("client_cert = '{cert}'\n", "providers.p.client_cert: the certificate and its key do not load"),
        ("client_key = '{key}'\n", "providers.p.client_key: needs client_cert"),
        ('verify = "no"\n', "providers.p.verify: expected true or false"),
        ("max_connections = 0\n", "providers.p.max_connections: must be >= 1"),
        ("max_connections = 1.5\n", "providers.p.max_connections: expected an integer"),
        ("max_connections = true\n", "providers.p.max_connections: expected an integer"),
        ("pool_idle_timeout_s = 0\n", "providers.p.pool_idle_timeout_s: must be > 0"),
    ],
)
def test_bad_options_name_the_key(pems: dict[str, str], extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_text(BASE + extra.format(**pems), "t.toml")
    assert message in str(info.value)
    assert "s3cret" not in str(info.value)


def test_the_documented_example_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/configuration.md's "Upstream connections" example, with its certificate files in place."""
    doc = (Path(__file__).parents[3] / "docs" / "configuration.md").read_text()
    section = doc.split("## Upstream connections", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    ca = trustme.CA()
    issued = ca.issue_cert("tidegate@example.com")
    (tmp_path / "certs").mkdir()
    ca.cert_pem.write_to_path(str(tmp_path / "certs" / "corp-ca.pem"))
    issued.cert_chain_pems[0].write_to_path(str(tmp_path / "certs" / "tidegate.pem"))
    issued.private_key_pem.write_to_path(str(tmp_path / "certs" / "tidegate.key"))
    monkeypatch.chdir(tmp_path)
    providers = load_text(example, "configuration.md").providers
    assert (providers["openai"].max_connections, providers["openai"].pool_idle_timeout_s) == (200, 30.0)
    assert providers["internal"].proxy == "http://proxy.corp.example:3128"
    assert providers["internal"].client_key == "certs/tidegate.key"
    assert providers["lab"].proxy is False and providers["lab"].verify is False
