"""One spelling per host, so that every address rule compares like with like.

A resolver reads far more than dotted quads: `2852039166`, `0xA9FEA9FE`, `0251.0376.0251.0376` and
`169.254.43518` are all 169.254.169.254 to `inet_aton` (which `getaddrinfo` uses for numeric hosts),
`[::ffff:169.254.169.254]` and `[::ffff:a9fe:a9fe]` reach the IPv4 address through the IPv4-mapped
range, `[::169.254.169.254]` through the IPv4-compatible one, `::ffff:0:a9fe:a9fe` through SIIT,
`64:ff9b::a9fe:a9fe` through a NAT64 gateway, and `169.254.169.254.` is the same host with the
root's dot. A rule that compares the text misses each of them, so every rule (a provider's base URL
and proxy, an MCP server and `[mcp] allowed_hosts`, the `Host` header against `[server]
allowed_hosts`) first passes the host through `canonical_host` / `address_of` here.

Other IPv6 addresses carry an IPv4 address that a relay on the way may deliver to: 6to4
(`2002:a9fe:a9fe::`), Teredo (its server and its obfuscated client), NAT64's local-use prefix
(`64:ff9b:1::/48`, every RFC 6052 prefix length) and ISATAP interface identifiers. They are other
hosts, so their canonical spelling stays IPv6, but the address rule (`never_upstream_address`)
looks at every IPv4 address they carry (`embedded_ipv4`).
"""

from __future__ import annotations

import ipaddress

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud instance-metadata endpoints: whatever answers there hands out the host's credentials
METADATA_ADDRESSES: frozenset[Address] = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
METADATA_NAMES = frozenset({"metadata.google.internal", "metadata.goog", "instance-data.ec2.internal"})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_COMPATIBLE = ipaddress.ip_network("::/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_ISATAP_IDS = (0x00005EFE, 0x02005EFE)
_DIGITS = {8: frozenset("01234567"), 10: frozenset("0123456789"), 16: frozenset("0123456789abcdef")}


def _number(part: str) -> int | None:
    """One part of an `inet_aton` address: `0x` hexadecimal, a leading `0` octal, else decimal."""
    if part[:2] == "0x":
        digits, base = part[2:], 16
        if not digits:
            return 0  # glibc reads a bare "0x" as 0: treated as an address, so it is checked
    elif len(part) > 1 and part[0] == "0":
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    if not digits or not set(digits) <= _DIGITS[base]:
        return None
    return int(digits, base)


def parse_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """`text` as `inet_aton` reads it (1 to 4 parts, the last filling the remaining bytes), or None."""
    parts = text.lower().split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = [_number(p) for p in parts]
    if any(v is None for v in values):
        return None
    *head, last = [v for v in values if v is not None]
    spare_bits = 8 * (4 - len(head))
    if any(v > 255 for v in head) or last >= 1 << spare_bits:
        return None
    number = 0
    for v in head:
        number = number << 8 | v
    return ipaddress.IPv4Address(number << spare_bits | last)


def _bare(host: str) -> str:
    """Lower case, no brackets, no zone (`%eth0`), no trailing root dot."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        text = text.split("%", 1)[0]
    return text.rstrip(".")


def unwrap(addr: Address) -> Address:
    """The IPv4 address an IPv6 one is another spelling of (IPv4-mapped, IPv4-compatible, SIIT's
    IPv4-translated, NAT64's well-known prefix), else itself. `::` and `::1` stay IPv6."""
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return addr.ipv4_mapped
        if addr in _NAT64 or addr in _TRANSLATED or (addr in _COMPATIBLE and int(addr) > 1):
            return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return addr


def _rfc6052(number: int) -> list[ipaddress.IPv4Address]:
    """The IPv4 address a `64:ff9b:1::/48` address carries at each RFC 6052 prefix length (48, 56,
    64, 96): bits 64-71 are the reserved `u` octet, skipped."""
    octets = number.to_bytes(16, "big")
    return [
        ipaddress.IPv4Address(octets[6:8] + octets[9:11]),
        ipaddress.IPv4Address(octets[7:8] + octets[9:12]),
        ipaddress.IPv4Address(octets[9:13]),
        ipaddress.IPv4Address(octets[12:16]),
    ]


def embedded_ipv4(addr: Address) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address an IPv6 address carries, for the address rule: its own spelling
    (`unwrap`), 6to4's, Teredo's server and client, NAT64's local-use prefix and ISATAP's."""
    if not isinstance(addr, ipaddress.IPv6Address):
        return []
    found: list[ipaddress.IPv4Address] = []
    same = unwrap(addr)
    if isinstance(same, ipaddress.IPv4Address):
        found.append(same)
    if addr.sixtofour is not None:
        found.append(addr.sixtofour)
    if addr.teredo is not None:
        found.extend(addr.teredo)
    number = int(addr)
    if addr in _NAT64_LOCAL:
        found.extend(_rfc6052(number))
    if (number >> 32) & 0xFFFFFFFF in _ISATAP_IDS:
        found.append(ipaddress.IPv4Address(number & 0xFFFFFFFF))
    return found


def address_of(host: str) -> Address | None:
    """The address `host` spells in any form a resolver accepts, unwrapped; None for a name."""
    text = _bare(host)
    if ":" in text:
        try:
            return unwrap(ipaddress.IPv6Address(text))
        except ValueError:
            return None
    return parse_ipv4(text)


def canonical_host(host: str) -> str:
    """An address as `ipaddress` writes it (IPv6 without brackets), a name lower-cased without its
    root dot: two spellings of one host give one string."""
    addr = address_of(host)
    return str(addr) if addr is not None else _bare(host)


def split_host_port(text: str) -> tuple[str, int | None]:
    """(canonical host, port or None) of `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6
    address; ValueError for a port that is not 1-65535."""
    text = text.strip()
    port = ""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError("text after ']' that is not ':port'")
            port = rest[1:]
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host = text
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError("the port must be 1-65535")
    return canonical_host(host), int(port) if port else None


def is_metadata(host: str) -> bool:
    """A cloud metadata endpoint, by name or by address in any spelling."""
    addr = address_of(host)
    return is_metadata_address(addr) if addr is not None else _bare(host) in METADATA_NAMES


def is_metadata_address(addr: Address) -> bool:
    """A metadata address itself or carried inside an IPv6 one (`embedded_ipv4`)."""
    return addr in METADATA_ADDRESSES or any(v4 in METADATA_ADDRESSES for v4 in embedded_ipv4(addr))


def never_upstream_address(addr: Address) -> bool:
    """A metadata or link-local address (169.254.0.0/16, fe80::/10), itself or carried inside an
    IPv6 address: never connected to for a provider, a proxy or a probe."""
    return any(a in METADATA_ADDRESSES or a.is_link_local for a in (addr, *embedded_ipv4(addr)))


def never_upstream(host: str) -> bool:
    """A metadata endpoint or a link-local address, by name or in any spelling (`never_upstream_address`)."""
    addr = address_of(host)
    return never_upstream_address(addr) if addr is not None else _bare(host) in METADATA_NAMES


def refused_address(host: str, addresses: list[str]) -> str | None:
    """The refusal, worded once for check-config and every connection: the first of `host`'s
    resolved addresses the rule refuses, or None when all may be connected to."""
    for text in addresses:
        if never_upstream(text):
            return f"{host} resolves to {canonical_host(text)}, a link-local or metadata address, never an upstream"
    return None


def host_matches(pattern: str, host: str, port: int | None) -> tuple[bool, bool]:
    """(matches, exactly) for an allowed-hosts entry (`config/load.py`'s `host_pattern`'s canonical form) and a
    canonical host: `exactly` when the entry names this host itself, not through `*.`. A port in the
    entry must equal `port`; an entry without one matches any port."""
    p_host, p_port = split_host_port(pattern)
    if p_port is not None and p_port != port:
        return False, False
    if p_host.startswith("*."):
        return host.endswith(p_host[1:]) and host != p_host[2:], False
    return p_host == host, True
