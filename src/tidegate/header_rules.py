"""Which extra headers tidegate forwards: a provider's `headers` (the operator's file) and a request's
MCP tool `headers` (any client).

A header the gateway's HTTP client writes itself, or one that steers the connection rather than the
request, is refused: `Host` would send the request to another virtual host than the one checked
(and, for MCP, than the one `[mcp] allowed_hosts` admitted), `Content-Length` and
`Transfer-Encoding` would frame the body differently from the bytes sent (request smuggling on a
shared connection), and the hop-by-hop ones (RFC 9110 §7.6.1) belong to one connection, not to the
request. A CR or LF in a name or value would start a header of the client's choosing.
"""

from __future__ import annotations

import re

# RFC 9110 §5.6.2: a field name is a token
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
REFUSED = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
    }
)


def header_problem(name: str, value: str, ascii_only: bool = False) -> str | None:
    """Why `name: value` may not be forwarded (a phrase naming the header, never its value), or None.
    `ascii_only`: the value must be ASCII too (the MCP client's HTTP library writes header values
    as ASCII, and anything else would fail the call itself rather than the request)."""
    shown = repr(name[:64]) + ("…" if len(name) > 64 else "")  # a client's name: quoted, capped
    if not _TOKEN.match(name):
        return f"header name {shown} is not a valid HTTP field name"
    lower = name.lower()
    if lower in REFUSED or lower.startswith("proxy-"):
        return f"header {shown} is set by the gateway's connection, not by a caller"
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value):
        return f"header {shown} has a control character (CR, LF...) in its value"
    if ascii_only and not value.isascii():
        return f"header {shown} has a character outside ASCII in its value (encode it, e.g. percent-encoding)"
    return None
