"""The `Host` check on the endpoints that answer without a key (`[server] allowed_hosts`).

A page on `attacker.example` whose name is then re-pointed at 127.0.0.1 (DNS rebinding) makes the
victim's browser send same-origin requests to a gateway on the victim's loopback: without a key,
`/metrics` would answer it. The browser still sends the page's own name in `Host`, which is what is
checked here. Keyed endpoints need no such check: the page has no key, and the console's cookie is
bound to the gateway's own name, so the browser never sends it to the attacker's.

Rule: with `allowed_hosts` set, the Host must match one of its patterns (`"*"`: any); unset, a gateway
bound to loopback accepts `localhost` and loopback addresses (any port), and one bound elsewhere any
Host (it is reachable directly, and there `/metrics` asks for a key). A request without `Host` (HTTP/1.0)
passes: no browser sends one.
"""

from __future__ import annotations

from ..addresses import address_of, host_matches, split_host_port
from ..errors import TidegateError, quote
from . import ops
from .http import Request

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/", "/ui", "/favicon.ico"})


class HostNotAllowed(TidegateError):
    status = 421
    code = "host_not_allowed"
    type = "invalid_request_error"


class HostCheck:
    def __init__(self, allowed_hosts: tuple[str, ...] | None) -> None:
        self._allowed = allowed_hosts
        self._any = allowed_hosts is not None and "*" in allowed_hosts

    def check(self, req: Request) -> None:
        """Raise 421 `host_not_allowed` when `req` is for an endpoint without a key and its Host is not
        one this gateway answers to; every other request passes at the cost of one set lookup."""
        path = req.path
        if (path not in OPEN_PATHS and not path.startswith("/ui/")) or self._any:
            return
        raw = req.header("host")
        if raw is None:
            return
        try:
            host, port = split_host_port(raw)
        except ValueError:
            host, port = "", None
        if self._allowed is not None:
            if any(host_matches(p, host, port)[0] for p in self._allowed):
                return
        elif not ops.on_loopback(req) or _loopback_name(host):
            return
        raise HostNotAllowed(
            f"this gateway does not answer to Host {quote(raw)} on {path} (an endpoint without a key): "
            "list the name in [server] allowed_hosts to allow it"
        )


def _loopback_name(host: str) -> bool:
    if host == "localhost":
        return True
    addr = address_of(host)
    return addr is not None and addr.is_loopback
