"""How a provider reaches its upstream, validated: its base URL (never user info, control characters
or a cloud metadata address) and its connection options (proxy, TLS files, limits)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..addresses import canonical_host, never_upstream
from ..errors import ConfigError

if TYPE_CHECKING:
    from .model import ProviderConfig


def upstream_url(where: str, url: str) -> str:
    """A provider's base URL: http(s), no control characters (a CR/LF would split the request head),
    no user info (credentials come from the environment, and `user:pass@` was silently dropped), no
    cloud metadata address. Returned without a trailing slash."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ConfigError(f"{where}: contains a control character (CR, LF, tab...)")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: must start with http:// or https://")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise ConfigError(f"{where}: not a valid URL ({exc})") from None
    if not parts.hostname:
        raise ConfigError(f"{where}: has no host")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ConfigError(f"{where}: must not carry user info (user:pass@); provider credentials come from api_key_env")
    _reachable_host(where, parts.hostname)
    return url.rstrip("/")


def _reachable_host(where: str, host: str) -> None:
    """Refuse a metadata or link-local host in any spelling (`addresses.py`): a provider or proxy
    there would hand the host's credentials to whoever asks through the gateway."""
    if never_upstream(host):
        shown = canonical_host(host)
        raise ConfigError(f"{where}: {shown} is a link-local or cloud metadata address, never an upstream")


def check_connection(where: str, provider: ProviderConfig) -> ProviderConfig:
    """`proxy`, `ca_file`, `client_cert`, `client_key` beyond their types: files are loaded here once so
    that a bad one is a config error naming its key, not a failed request."""
    if provider.proxy is True:
        raise ConfigError(f'{where}.proxy: expected "http://host:port" or false, got true')
    if isinstance(provider.proxy, str):
        _proxy_url(f"{where}.proxy", provider.proxy)
    for key, path in (("ca_file", provider.ca_file), ("client_cert", provider.client_cert)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{where}.{key}: no such file: {path}")
    if provider.client_key is not None:
        if provider.client_cert is None:
            raise ConfigError(f"{where}.client_key: needs client_cert (the certificate it belongs to)")
        if not Path(provider.client_key).is_file():
            raise ConfigError(f"{where}.client_key: no such file: {provider.client_key}")
    if provider.ca_file is not None:
        try:
            ssl.create_default_context(cafile=provider.ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"{where}.ca_file: not a PEM certificate bundle ({type(exc).__name__})") from None
    if provider.client_cert is not None:
        try:
            ssl.create_default_context().load_cert_chain(provider.client_cert, provider.client_key)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"{where}.client_cert: the certificate and its key do not load ({type(exc).__name__}: a PEM "
                "certificate, with its unencrypted key in client_key or in the same file)"
            ) from None
    return provider


def _proxy_url(where: str, url: str) -> str:
    """An `http://[user:pass@]host[:port]` proxy URL; the message never repeats it (it may hold a password)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ConfigError(f"{where}: contains a control character (CR, LF, tab...)")
    parts = urlsplit(url)
    if parts.scheme.lower() != "http":
        raise ConfigError(f'{where}: must start with http:// (an HTTP proxy; "https://" proxies are not supported)')
    try:
        parts.port  # noqa: B018 (validates the port)
    except ValueError:
        raise ConfigError(f"{where}: the port is not a number 0-65535") from None
    if not parts.hostname:
        raise ConfigError(f"{where}: has no host")
    _reachable_host(where, parts.hostname)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"{where}: must be http://host:port (no path)")
    return url
