"""How one provider reaches its upstream: the proxy for each origin, the TLS context, the pool limits.

Decided once per provider (`Upstream.for_provider`, when the provider is built) and once per origin
(`Upstream.proxy_for`, cached with the origin by `http_client`), never per request. The proxy
environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, lower-case first) is read with the
standard library's documented `urllib.request.getproxies()`; `NO_PROXY` is matched here
(`no_proxy_matches`: curl's and requests' rules, IP networks included), because the standard
library's matcher is not public API and knows no IP networks. A provider's own
`proxy = "http://..."` is used for all its upstreams (`NO_PROXY` does not apply to an explicit
setting); `proxy = false` always goes direct.
A proxy's user info becomes a `Proxy-Authorization: Basic` header; only `host:port` is ever shown.
"""

from __future__ import annotations

import base64
import ipaddress
import ssl
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from ...config.model import ProviderConfig

DEFAULT_MAX_CONNECTIONS: Final = 1000
DEFAULT_POOL_IDLE_TIMEOUT_S: Final = 15.0


class Proxy:
    """An HTTP proxy: where it listens, its `Proxy-Authorization` value (or None), how it is shown."""

    __slots__ = ("authorization", "host", "port", "shown")

    def __init__(self, url: str) -> None:
        if "://" not in url:
            url = "http://" + url  # `HTTPS_PROXY=host:port`, as requests and curl read it
        parts = urlsplit(url)
        if parts.scheme.lower() != "http":
            raise ValueError(f"proxy scheme {parts.scheme!r} is not supported (http:// proxies only)")
        try:
            port = parts.port or 80
        except ValueError:
            raise ValueError("the proxy URL's port is not a number 0-65535") from None
        if not parts.hostname:
            raise ValueError("the proxy URL has no host")
        self.host = parts.hostname
        self.port = port
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.shown = f"{shown}:{port}"
        self.authorization: str | None = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            self.authorization = "Basic " + base64.b64encode(pair).decode()

    def __repr__(self) -> str:  # never the credentials
        return f"Proxy({self.shown})"


def no_proxy_matches(no_proxy: str, host: str, port: int) -> bool:
    """`NO_PROXY` as curl and requests read it: `*`; a host name or domain (with or without a leading
    dot) matching the host and its subdomains; `name:port` only on that port; an IP address or
    network (`10.0.0.0/8`, `::1`) containing an IP-literal host. Case-insensitive."""
    host = host.lower().rstrip(".")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry.strip("[]"), strict=False):
                    return True
                continue
            except ValueError:
                pass
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        name = name.lstrip(".").rstrip(".")
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


@dataclass(frozen=True, slots=True)
class Upstream:
    """One provider's connection settings; `proxy` is None (the environment), False (direct) or a URL."""

    name: str = "upstream"
    connect_timeout_s: float = 10.0
    pool_idle_timeout_s: float = DEFAULT_POOL_IDLE_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    proxy: str | bool | None = None
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    verify: bool = True

    def __repr__(self) -> str:  # the proxy URL may carry credentials
        return f"Upstream({self.name!r})"

    @classmethod
    def for_provider(cls, config: ProviderConfig, connect_timeout_s: float) -> Upstream:
        return cls(
            name=config.name,
            connect_timeout_s=connect_timeout_s,
            pool_idle_timeout_s=config.pool_idle_timeout_s,
            max_connections=config.max_connections,
            proxy=config.proxy,
            ca_file=config.ca_file,
            client_cert=config.client_cert,
            client_key=config.client_key,
            verify=config.verify,
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The provider's own TLS context when it sets `ca_file`, a client certificate or `verify =
        false` (built once by the caller); None for the shared system one (`connect.tls_context`)."""
        if self.ca_file is None and self.client_cert is None and self.verify:
            return None
        ctx = ssl.create_default_context(cafile=self.ca_file)  # a cafile replaces the system store
        ctx.set_alpn_protocols(["http/1.1"])
        if self.client_cert is not None:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def proxies(self) -> dict[str, str]:
        """The proxy environment as the standard library reads it (lower-case names first)."""
        if self.proxy is False:
            return {}
        if isinstance(self.proxy, str):
            return {"http": self.proxy, "https": self.proxy}
        return urllib.request.getproxies()

    def proxy_for(self, scheme: str, host: str, port: int, proxies: dict[str, str]) -> Proxy | None:
        """The proxy for one origin, or None to go direct (`proxies` from `proxies()`)."""
        url = proxies.get(scheme) or proxies.get("all")
        if not url:
            return None
        if self.proxy is None and no_proxy_matches(proxies.get("no", ""), host, port):
            return None
        return Proxy(url)
