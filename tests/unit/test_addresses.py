"""`addresses.py`: every spelling a resolver accepts gives one canonical host, and every IPv6 address
that reaches or carries a refused IPv4 address is refused."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from tidegate.addresses import (
    address_of,
    canonical_host,
    embedded_ipv4,
    host_matches,
    is_metadata,
    is_metadata_address,
    never_upstream,
    refused_address,
    split_host_port,
)

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


# Every IPv6 spelling that reaches 169.254.169.254: the same address (mapped, compatible, SIIT,
# NAT64's well-known prefix) or one that carries it to a relay (6to4, Teredo's client (obfuscated) and
# server, NAT64's local-use prefix at each RFC 6052 length, ISATAP)
IPV6_SAME_ADDRESS = [
    "::ffff:169.254.169.254",
    "::ffff:a9fe:a9fe",
    "::169.254.169.254",
    "::a9fe:a9fe",
    "::ffff:0:169.254.169.254",
    "::ffff:0:a9fe:a9fe",
    "64:ff9b::169.254.169.254",
    "64:ff9b::a9fe:a9fe",
]
IPV6_CARRIERS = [
    "2002:a9fe:a9fe::1",
    "2002:a9fe:a9fe:1234::abcd",
    "2001:0:a9fe:a9fe::1",
    "2001:0:4136:e378:8000:63bf:5601:5601",
    "64:ff9b:1:a9fe:a9:fe00::",  # /48
    "64:ff9b:1:a9:fe:a9fe::",  # /56
    "64:ff9b:1:0:a9:fea9:fe00:0",  # /64
    "64:ff9b:1::a9fe:a9fe",  # /96
    "2001:db8::5efe:a9fe:a9fe",
    "2001:db8::200:5efe:169.254.169.254",
]


@pytest.mark.parametrize("text", IPV6_SAME_ADDRESS)
def test_ipv6_spellings_of_the_same_address_are_that_address(text: str) -> None:
    for written in (text, f"[{text}]", f"[{text.upper()}%eth0]"):
        assert canonical_host(written) == "169.254.169.254" and never_upstream(written) and is_metadata(written)
    assert refused_address("name.test", [text]) == (
        "name.test resolves to 169.254.169.254, a link-local or metadata address, never an upstream"
    )


@pytest.mark.parametrize("text", IPV6_CARRIERS)
def test_ipv6_addresses_carrying_the_metadata_address_are_refused(text: str) -> None:
    addr = ipaddress.ip_address(text)
    assert ipaddress.ip_address("169.254.169.254") in embedded_ipv4(addr)
    assert never_upstream(f"[{text}]") and is_metadata(text) and is_metadata_address(addr)
    assert canonical_host(text) == str(addr)  # another host: its spelling stays IPv6


@pytest.mark.parametrize("text", ["2002:a9fe:1::1", "::169.254.0.1", "64:ff9b::169.254.1.1", "::ffff:169.254.9.9"])
def test_ipv6_addresses_carrying_a_link_local_address_are_refused(text: str) -> None:
    assert never_upstream(text) and not is_metadata(text)


@pytest.mark.parametrize(
    "text", ["::1", "::", "2606:4700::1111", "64:ff9b::1.1.1.1", "2002:808:808::1", "2001:db8::5efe:808:808"]
)
def test_ipv6_addresses_carrying_public_ones_are_allowed(text: str) -> None:
    assert not never_upstream(text)
    assert refused_address("name.test", [text, "127.0.0.1"]) is None


def test_one_refused_address_of_a_name_refuses_it() -> None:
    found = refused_address("api.test", ["93.184.216.34", "fe80::1%lo", "169.254.169.254"])
    assert found == "api.test resolves to fe80::1, a link-local or metadata address, never an upstream"
