"""The web console at `/ui` (docs/api-edges.md §14): its static files, its login and its session.

Login takes the master key or an admin key once and answers with a session cookie: `HttpOnly`
(scripts never see it), `SameSite=Strict` (no other site's page sends it), `Path=/`, 12 hours. The
cookie is signed, not stored: `base64(key id, expiry) . HMAC-SHA256`, with a secret made of 32
random bytes kept in the store (`ConsoleStore.session_secret`: the first gateway to start writes them,
every other instance and every restart reads the same) and `TIDEGATE_MASTER_KEY` when there is one
(a new master key ends the sessions the old one signed). It never holds the key. Each request
checks the key again (a revoked key or a lost admin flag ends its sessions at once). A request that
changes anything must also carry `X-CSRF-Token`, an HMAC of the cookie that the page reads from
`/ui/session`.

Over HTTPS the cookie is also `Secure`: when the server itself took the request over TLS, or when a
trusted proxy says so with `X-Forwarded-Proto: https` (a proxy is trusted when the connection comes
from loopback, where docs/deployment.md's nginx runs, or from `TIDEGATE_FORWARDED_ALLOW_IPS`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import time
from importlib import resources
from typing import Any

import orjson

from ...errors import Forbidden, InvalidRequest, MethodNotAllowed, NotFound, Unauthorized
from ...keys import MASTER_ID, unusable
from ...records import ApiKey
from ..http import Request
from ..state import AppState

COOKIE = "tidegate_session"
SESSION_S = 12 * 3600
_MODULES = ("app", "lib", "chart", "overview", "keys", "routes", "logs", "generation", "audit", "cache", "playground")
# the page, its ES modules and the chart library `make install` copies into vendor/ (package.json)
STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.css": "text/css",
    **{f"{name}.js": "text/javascript" for name in _MODULES},
    "favicon.svg": "image/svg+xml",
    "vendor/uPlot.iife.min.js": "text/javascript",
    "vendor/uPlot.min.css": "text/css",
}
# what answers like GET: a HEAD is a GET without the body (uvicorn drops it and keeps the length),
# which is how probes such as Claude Code's `HEAD /` check that a gateway is there
READS = ("GET", "HEAD")
# the console's own files only: no inline script, no other origin
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'"
FORWARDED_ALLOW = "TIDEGATE_FORWARDED_ALLOW_IPS"
_MASTER = os.environ.get("TIDEGATE_MASTER_KEY")


async def open_sessions(state: AppState) -> None:
    """Read (or, on a new store, make) the secret that signs console sessions; at startup, once the
    store is open. Never logged."""
    stored = await state.console.session_secret(os.urandom(32))
    state.console_secret = hmac.new(stored, b"tidegate-console\0" + (_MASTER or "").encode(), hashlib.sha256).digest()


def _trusted_proxies(spec: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network] | None:
    """`TIDEGATE_FORWARDED_ALLOW_IPS`: addresses or networks, comma-separated; `*` (None) trusts any."""
    if spec.strip() == "*":
        return None
    try:
        return [ipaddress.ip_network(part.strip(), strict=False) for part in spec.split(",") if part.strip()]
    except ValueError as exc:
        raise ValueError(f"{FORWARDED_ALLOW}: {exc} (addresses or networks, comma-separated, or *)") from None


_PROXIES = _trusted_proxies(os.environ.get(FORWARDED_ALLOW, "127.0.0.0/8, ::1"))


def over_https(req: Request) -> bool:
    """Whether the browser reached the gateway over HTTPS: a TLS connection to this server, or one to
    a proxy in front of it that says so and whose address is trusted."""
    if req.scope.get("scheme") == "https":
        return True
    proto = (req.header("x-forwarded-proto") or "").split(",")[0].strip().lower()
    if proto != "https":
        return False
    if _PROXIES is None:
        return True
    try:
        peer = ipaddress.ip_address(req.client_host)
    except ValueError:  # a Unix socket: no address to trust
        return False
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
        peer = peer.ipv4_mapped
    return any(peer in network for network in _PROXIES)


def _cookie(req: Request, value: str, max_age: int) -> str:
    secure = "; Secure" if over_https(req) else ""
    return f"{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"


def _sign(state: AppState, data: bytes) -> str:
    if not state.console_secret:  # before startup read it: nothing is signed with an empty key
        raise Unauthorized("the console is not ready yet: try again")
    return hmac.new(state.console_secret, data, hashlib.sha256).hexdigest()


def csrf_token(state: AppState, cookie: str) -> str:
    return _sign(state, b"csrf\0" + cookie.encode())[:32]


def _cookie_value(state: AppState, key_id: str) -> str:
    payload = base64.urlsafe_b64encode(orjson.dumps({"k": key_id, "e": int(time.time()) + SESSION_S})).decode()
    return f"{payload}.{_sign(state, payload.encode())}"


def session_cookie(req: Request) -> str | None:
    for part in (req.header("cookie") or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value
    return None


async def session_key(req: Request, state: AppState, cookie: str) -> ApiKey:
    """The admin key behind a session cookie, checked now; CSRF-checked for anything but a read."""
    payload, _, signature = cookie.partition(".")
    if not hmac.compare_digest(_sign(state, payload.encode()), signature):
        raise Unauthorized("the console session is not valid: log in again")
    try:
        data: dict[str, Any] = orjson.loads(base64.urlsafe_b64decode(payload.encode()))
    except (ValueError, orjson.JSONDecodeError):
        raise Unauthorized("the console session is not valid: log in again") from None
    if int(data.get("e", 0)) < time.time():
        raise Unauthorized("the console session has expired: log in again")
    if req.method not in ("GET", "HEAD") and not hmac.compare_digest(
        req.header("x-csrf-token") or "", csrf_token(state, cookie)
    ):
        raise Forbidden("a console request that changes something needs its X-CSRF-Token header")
    key_id = str(data.get("k"))
    if key_id == MASTER_ID:
        if not _MASTER:
            raise Unauthorized("the console session is not valid: log in again")
        return ApiKey(id=MASTER_ID, name="master", secret_hash="", created_at=0.0, is_master=True)
    key = await state.store.get_key(key_id)
    if key is None or unusable(key, time.time()) is not None or not key.admin:
        raise Unauthorized("the key of this console session can no longer be used: log in again")
    return key


async def _login(req: Request, state: AppState) -> None:
    body = await req.json(4096)
    secret = body.get("key") if isinstance(body, dict) else None
    if not isinstance(secret, str) or not secret:
        raise InvalidRequest('send {"key": "<the master key or an admin key>"}')
    key = await state.auth.authenticate(f"Bearer {secret}")
    if key is None or unusable(key, time.time()) is not None:
        raise Unauthorized("this key cannot log in: unknown, revoked or expired")
    if not (key.is_master or key.admin):
        raise Forbidden('the console needs the master key or a key with "admin": true')
    cookie = _cookie_value(state, key.id)
    attributes = _cookie(req, cookie, SESSION_S)
    await req.respond_json(200, {"name": key.name, "csrf": csrf_token(state, cookie)}, {"set-cookie": attributes})


async def serve(req: Request, state: AppState) -> None:
    """`/` (a browser is sent to the console), `/favicon.ico` and everything under `/ui`."""
    path = req.path
    if path == "/" or path == "/ui":
        if req.method not in READS:
            raise MethodNotAllowed(f"use GET {path}")
        await req.respond_bytes(302, b"", "text/plain", {"location": "/ui/"})
        return
    if path == "/ui/login":
        if req.method != "POST":
            raise MethodNotAllowed("use POST /ui/login")
        await _login(req, state)
        return
    if path in ("/ui/session", "/ui/logout"):
        cookie = session_cookie(req)
        if cookie is None:
            raise Unauthorized("not logged in")
        key = await session_key(req, state, cookie)
        if path == "/ui/session":
            await req.respond_json(200, {"name": key.name, "csrf": csrf_token(state, cookie)})
            return
        if req.method != "POST":
            raise MethodNotAllowed("use POST /ui/logout")
        await req.respond_json(200, {"logged_out": True}, {"set-cookie": _cookie(req, "", 0)})
        return
    # a browser asks for /favicon.ico on its own for any page of the host, the API's included
    name = "index.html" if path == "/ui/" else "favicon.svg" if path == "/favicon.ico" else path.removeprefix("/ui/")
    if name not in STATIC:
        raise NotFound(f"no console page {path}")
    if req.method not in READS:
        raise MethodNotAllowed(f"use GET {path}")
    file = resources.files("tidegate.console").joinpath(name)
    if not file.is_file():  # vendor/ before `make install` copied it
        raise NotFound(f"no console file {path}: run `make install` (it copies the chart library)")
    data = file.read_bytes()
    await req.respond_bytes(200, data, STATIC[name], {"content-security-policy": CSP, "cache-control": "no-cache"})
