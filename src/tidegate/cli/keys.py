"""`tidegate keys`: the keys admin API of a running gateway (docs/api-operations.md §11), from the command line.

Against `$TIDEGATE_URL` (default http://127.0.0.1:8080) with `$TIDEGATE_MASTER_KEY` or `--api-key`.
With `--config` instead, `create`, `list` and `revoke` write the store directly: how the first key of a
gateway with no master key is made (bootstrapping); everything else needs a running gateway.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import click
import httpx

from ..config.load import load_config
from ..errors import ConfigError
from ..keys import make_key
from ..store.open import open_store

DEFAULT_URL = "http://127.0.0.1:8080"


def _api(api_key: str | None, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    url = os.environ.get("TIDEGATE_URL", DEFAULT_URL).rstrip("/")
    secret = api_key or os.environ.get("TIDEGATE_MASTER_KEY")
    if not secret:
        raise click.ClickException("set TIDEGATE_MASTER_KEY (or pass --api-key) with an admin key")
    try:
        resp = httpx.request(
            method, url + path, json=body, headers={"authorization": f"Bearer {secret}"}, timeout=30.0, trust_env=False
        )
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the gateway at {url}: {exc}") from None
    try:
        payload = resp.json()
    except ValueError:
        payload = None
    if resp.status_code >= 400:
        error = (payload or {}).get("error", {}) if isinstance(payload, dict) else {}
        raise click.ClickException(f"{resp.status_code} {error.get('code', '')}: {error.get('message', resp.text)}")
    return payload


def _settings(
    credits: str | None,
    budget_period: str | None,
    rpm: int | None,
    tpm: int | None,
    concurrent: int | None,
    models: tuple[str, ...],
    expires_at: float | None,
    admin: bool | None,
    metadata: str | None,
) -> dict[str, Any]:
    """The options given, as the API's fields (`--credits unlimited`: null; `--budget-period none`: null)."""
    body: dict[str, Any] = {}
    if credits is not None:
        body["credits"] = None if credits == "unlimited" else _number("--credits", credits)
    if budget_period is not None:
        body["budget_period"] = None if budget_period == "none" else budget_period
    limits = {name: value for name, value in (("rpm", rpm), ("tpm", tpm), ("concurrent", concurrent)) if value}
    if limits:
        body["limits"] = limits
    if models:
        body["models"] = list(models)
    if expires_at is not None:
        body["expires_at"] = expires_at
    if admin is not None:
        body["admin"] = admin
    if metadata is not None:
        try:
            body["metadata"] = json.loads(metadata)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from None
    return body


def _number(hint: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise click.BadParameter("a number of USD, or 'unlimited'", param_hint=hint) from None


def _show(key: dict[str, Any]) -> None:
    click.echo(json.dumps(key, indent=2, sort_keys=True))


_KEY_OPTIONS = [
    click.option("--credits", default=None, help="USD budget, or 'unlimited'"),
    click.option("--budget-period", type=click.Choice(["daily", "monthly", "none"]), default=None),
    click.option("--rpm", type=int, default=None, help="requests per minute"),
    click.option("--tpm", type=int, default=None, help="tokens per minute"),
    click.option("--concurrent", type=int, default=None, help="generations at once"),
    click.option("--model", "models", multiple=True, help="a model it may use (repeat; default all)"),
    click.option("--expires-at", type=float, default=None, help="Unix seconds"),
    click.option("--admin/--no-admin", default=None, help="may use the admin API"),
    click.option("--metadata", default=None, help="a JSON object"),
]


def key_options(fn: Any) -> Any:
    for option in reversed(_KEY_OPTIONS):
        fn = option(fn)
    return fn


api_key_option = click.option("--api-key", default=None, help="an admin key (default $TIDEGATE_MASTER_KEY)")
config_option = click.option(
    "--config", "config_path", type=click.Path(), default=None, help="write the store directly (bootstrapping)"
)


def _direct(config_path: str, fn: Any) -> Any:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(f"config error: {exc}") from None

    async def run() -> Any:
        store = open_store(config.store.url)
        await store.open()
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(run())


@click.group()
def keys() -> None:
    """Manage API keys through a running gateway's admin API."""


@keys.command("create")
@click.option("--name", required=True, help="a label for the key")
@key_options
@api_key_option
@config_option
def keys_create(name: str, api_key: str | None, config_path: str | None, **options: Any) -> None:
    """Create a key; its secret is printed once, alone on the last line."""
    body = {"name": name, **_settings(**options)}
    if config_path is not None:
        if set(body) - {"name", "credits"}:
            raise click.UsageError("--config creates a plain key (name, credits); set the rest through the API")
        if body.get("credits") is not None and body["credits"] < 0:
            raise click.BadParameter("must be >= 0", param_hint="--credits")
        key, secret = make_key(name, body.get("credits"))
        _direct(config_path, lambda store: store.create_key(key))
        key_id = key.id
    else:
        created = _api(api_key, "POST", "/api/v1/keys", body)
        key_id, secret = created["id"], created["key"]
    click.echo(f"created key {key_id} ({name}); store the secret now, it is not shown again:")
    click.echo(secret)


@keys.command("list")
@api_key_option
@config_option
def keys_list(api_key: str | None, config_path: str | None) -> None:
    """List keys (never their secrets)."""
    if config_path is not None:
        rows = [k.public() for k in _direct(config_path, lambda store: store.list_keys())]
    else:
        rows = _api(api_key, "GET", "/api/v1/keys")["data"]
    for k in rows:
        credits = "unlimited" if k["credits"] is None else f"{_usd(k['credits'])} USD"
        state = "revoked" if k["revoked"] else "active"
        click.echo(f"{k['id']}\t{k['name']}\t{state}\tcredits={credits}\tspent={_usd(k['spent'])} USD")


def _usd(amount: float) -> str:
    """A fixed decimal, never an exponent (a few requests to a cheap model spend 7.5e-05): to a
    billionth of a dollar, the trailing zeros dropped."""
    text = f"{amount:.9f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


@keys.command("get")
@click.argument("key_id")
@api_key_option
def keys_get(key_id: str, api_key: str | None) -> None:
    """Show one key as JSON."""
    _show(_api(api_key, "GET", f"/api/v1/keys/{key_id}"))


@keys.command("update")
@click.argument("key_id")
@click.option("--name", default=None)
@key_options
@api_key_option
def keys_update(key_id: str, name: str | None, api_key: str | None, **options: Any) -> None:
    """Change a key's settings (only the options given)."""
    body = _settings(**options)
    if name is not None:
        body["name"] = name
    if not body:
        raise click.UsageError("nothing to change: give at least one option")
    _show(_api(api_key, "PATCH", f"/api/v1/keys/{key_id}", body))


@keys.command("revoke")
@click.argument("key_id")
@api_key_option
@config_option
def keys_revoke(key_id: str, api_key: str | None, config_path: str | None) -> None:
    """Revoke a key (by id; by id or name with --config)."""
    if config_path is not None:
        if not _direct(config_path, lambda store: store.revoke_key(key_id)):
            raise click.ClickException(f"no active key {key_id!r}")
    else:
        _api(api_key, "DELETE", f"/api/v1/keys/{key_id}")
    click.echo(f"revoked {key_id}")


@keys.command("topup")
@click.argument("key_id")
@click.argument("amount", type=float)
@api_key_option
def keys_topup(key_id: str, amount: float, api_key: str | None) -> None:
    """Add AMOUNT USD to a key's credits."""
    _show(_api(api_key, "POST", f"/api/v1/keys/{key_id}/credits", {"amount": amount}))
