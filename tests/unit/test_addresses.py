"""`addresses.py`: every spelling a resolver accepts gives one canonical host (issue 47.6)."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from tidegate.addresses import address_of, canonical_host, host_matches, never_upstream, split_host_port

INET_ATON_FORMS = [
    "169.254.169.254",
    "2852039166",
    "0xA9FEA9FE",
    "0xa9fea9fe",
    "0251.0376.0251.0376",
    "169.254.43518",
    "169.16689662",
    "0xa9.0xfe.0xa9.0xfe",
    "0251.254.0xa9.254",
    "127.1",
    "0",
    "10.0.0.01",
]


@pytest.mark.parametrize("text", INET_ATON_FORMS)
def test_inet_aton_forms_read_as_the_system_resolver_reads_them(text: str) -> None:
    assert str(address_of(text)) == socket.inet_ntoa(socket.inet_aton(text))


@pytest.mark.parametrize("text", ["08.1.1.1", "1.2.3.4.5", "256.1.1.1", "1.2.3.256", "4294967296", "api.example"])
def test_what_is_not_an_ipv4_address_is_a_name(text: str) -> None:
    assert address_of(text) is None
    assert canonical_host(text) == text


@pytest.mark.parametrize(
    "text",
    [
        *INET_ATON_FORMS[:9],
        "[::ffff:169.254.169.254]",
        "::ffff:a9fe:a9fe",
        "[64:ff9b::a9fe:a9fe]",
        "169.254.169.254.",
        " 169.254.169.254 ",
    ],
)
def test_every_spelling_of_the_metadata_address_is_one_host(text: str) -> None:
    assert canonical_host(text) == "169.254.169.254" and never_upstream(text)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("METADATA.GOOGLE.INTERNAL.", "metadata.google.internal"),
        ("[FE80::1%eth0]", "fe80::1"),
        ("[fd00:ec2::254]", "fd00:ec2::254"),
        ("100.100.100.200", "100.100.100.200"),
    ],
)
def test_other_metadata_and_link_local_hosts(text: str, canonical: str) -> None:
    assert canonical_host(text) == canonical and never_upstream(text)


def test_ordinary_hosts_are_allowed_upstreams() -> None:
    for host in ("api.openai.com", "10.0.0.5", "127.0.0.1", "::1", "[2001:db8::1]"):
        assert not never_upstream(host), host
    assert address_of("::1") == ipaddress.ip_address("::1")  # not an IPv4-compatible 0.0.0.1


def test_split_host_port_and_matching() -> None:
    assert split_host_port("[::1]:8080") == ("::1", 8080)
    assert split_host_port("Gateway.Example.COM.:443") == ("gateway.example.com", 443)
    assert split_host_port("0x7f000001:9") == ("127.0.0.1", 9)
    assert split_host_port("::1") == ("::1", None)
    with pytest.raises(ValueError):
        split_host_port("host:99999")
    assert host_matches("127.0.0.1:9", "127.0.0.1", 9) == (True, True)
    assert host_matches("127.0.0.1:9", "127.0.0.1", 10) == (False, False)
    assert host_matches("*.example.com", "a.example.com", 1) == (True, False)
    assert host_matches("*.example.com", "example.com", 1) == (False, False)
    assert host_matches("[::1]:8080", "::1", 8080) == (True, True)
