"""Client-side commands: they reach a running gateway at $TIDEGATE_URL with $TIDEGATE_API_KEY."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import httpx
import orjson

from .sse import SSEDecoder

DEFAULT_URL = "http://127.0.0.1:8080"


F = TypeVar("F", bound=Callable[..., Any])


def _opts(f: F) -> F:
    f = click.option("--base-url", envvar="TIDEGATE_URL", default=DEFAULT_URL, show_default=True)(f)
    f = click.option("--api-key", envvar="TIDEGATE_API_KEY", default=None)(f)
    return f


def _headers(api_key: str | None) -> dict[str, str]:
    if not api_key:
        raise click.ClickException("no API key: set $TIDEGATE_API_KEY or pass --api-key")
    return {"Authorization": f"Bearer {api_key}"}


def _root(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def _fail_http(resp: httpx.Response) -> None:
    try:
        err = resp.json()["error"]
        msg = f"{err.get('code')}: {err.get('message')}"
    except Exception:
        msg = resp.text[:200]
    raise click.ClickException(f"HTTP {resp.status_code} {msg}")


@click.command("models")
@_opts
def models_cmd(base_url: str, api_key: str | None) -> None:
    """Print the catalog's model ids."""
    resp = httpx.get(f"{_root(base_url)}/v1/models", headers=_headers(api_key), timeout=30)
    if resp.status_code != 200:
        _fail_http(resp)
    for m in resp.json()["data"]:
        click.echo(m["id"])


@click.command("chat")
@click.argument("model")
@click.argument("prompt", required=False)
@click.option("--max-tokens", type=int, default=None)
@_opts
def chat(model: str, prompt: str | None, max_tokens: int | None, base_url: str, api_key: str | None) -> None:
    """Stream an answer: text on stdout, reasoning on stderr; exit 1 if incomplete."""
    if prompt is None:
        prompt = sys.stdin.read()
    body: dict[str, object] = {"model": model, "stream": True, "messages": [{"role": "user", "content": prompt}]}
    if max_tokens:
        body["max_tokens"] = max_tokens
    complete = False
    gen_id = ""
    try:
        with httpx.stream(
            "POST",
            f"{_root(base_url)}/v1/chat/completions",
            headers=_headers(api_key),
            content=orjson.dumps(body),
            timeout=httpx.Timeout(30.0, read=None),
        ) as resp:
            gen_id = resp.headers.get("x-generation-id", "")
            if resp.status_code != 200:
                resp.read()
                _fail_http(resp)
            decoder = SSEDecoder()
            for raw in resp.iter_raw():
                for ev in decoder.feed(raw):
                    if ev.data == "[DONE]":
                        complete = True
                        break
                    chunk = orjson.loads(ev.data)
                    if chunk.get("error"):
                        err = chunk["error"]
                        click.echo(f"\nerror: {err.get('code')}: {err.get('message')}", err=True)
                        break
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        if delta.get("reasoning"):
                            click.secho(delta["reasoning"], nl=False, dim=True, err=True)
                        if delta.get("content"):
                            click.echo(delta["content"], nl=False)
                if complete:
                    break
    except httpx.HTTPError as exc:
        click.echo(f"\nconnection error: {type(exc).__name__}", err=True)
    click.echo()
    if not complete:
        click.echo(f"answer incomplete (generation {gen_id or 'unknown'})", err=True)
        sys.exit(1)


@click.command("replay")
@click.argument("idempotency_key")
@_opts
def replay(idempotency_key: str, base_url: str, api_key: str | None) -> None:
    """Fetch a stored result by its Idempotency-Key (never starts a generation)."""
    headers = {**_headers(api_key), "Idempotency-Key": idempotency_key}
    resp = httpx.post(f"{_root(base_url)}/api/v1/llm/responses/replay", headers=headers, timeout=30)
    if resp.status_code != 200:
        _fail_http(resp)
    click.echo(orjson.dumps(resp.json(), option=orjson.OPT_INDENT_2).decode())
