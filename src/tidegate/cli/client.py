"""Client-side commands (`chat`, `embed`, `replay`, `generations show`, `models`), built on `tidegate.client`.

They reach a running gateway at `--base-url` / $TIDEGATE_URL with `--api-key` / $TIDEGATE_API_KEY.
Exit codes: 0 complete, 1 incomplete or failed, 2 usage error.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
import httpx
import orjson
from rich.console import Console

from ..client import (
    Client,
    Done,
    IncompleteStream,
    KeepAlive,
    ReasoningDelta,
    Stream,
    StreamFailed,
    TextDelta,
    TidegateAPIError,
    TidegateClientError,
    ToolCall,
)
from ..client.base import DEFAULT_TIMEOUT, auth_headers, check_json, resolve_base_url
from .common import cli_command

F = TypeVar("F", bound=Callable[..., Any])
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def _opts(f: F) -> F:
    f = click.option("--base-url", envvar="TIDEGATE_URL", default=None, help="gateway URL [$TIDEGATE_URL]")(f)
    f = click.option("--api-key", envvar="TIDEGATE_API_KEY", default=None, help="API key [$TIDEGATE_API_KEY]")(f)
    return f


def _client(base_url: str | None, api_key: str | None) -> Client:
    if not api_key:
        raise click.UsageError("no API key: set $TIDEGATE_API_KEY or pass --api-key")
    return Client(base_url, api_key)


def _dump(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode()


class TurnView:
    """Renders one streamed answer: text on stdout, reasoning dimmed on stderr, a keep-alive spinner."""

    def __init__(self, err: Console, *, json_mode: bool) -> None:
        self.err = err
        self.json_mode = json_mode
        self.tty = err.is_terminal
        self.started = time.monotonic()
        self.spinning = False
        self.frame = 0
        self.wrote_text = False
        self.wrote_reasoning = False

    def spin(self) -> None:
        if not self.tty or self.wrote_text or self.wrote_reasoning:
            return
        self.frame += 1
        elapsed = time.monotonic() - self.started
        self.err.file.write(f"\r{SPINNER[self.frame % len(SPINNER)]} waiting for the model… {elapsed:.0f}s")
        self.err.file.flush()
        self.spinning = True

    def unspin(self) -> None:
        if self.spinning:
            self.err.file.write("\r\x1b[K")
            self.err.file.flush()
            self.spinning = False

    def event(self, ev: object) -> None:
        if isinstance(ev, KeepAlive):
            self.spin()
            return
        if self.json_mode:
            return
        if isinstance(ev, ReasoningDelta) and ev.text:
            self.unspin()
            self.err.print(ev.text, style="dim", end="", markup=False, highlight=False)
            self.wrote_reasoning = True
        elif isinstance(ev, TextDelta) and ev.text:
            self.unspin()
            if self.wrote_reasoning and not self.wrote_text:
                self.err.print()
            sys.stdout.write(ev.text)
            sys.stdout.flush()
            self.wrote_text = True
        elif isinstance(ev, ToolCall):
            self.unspin()
            self.err.print(f"tool call {ev.name}({ev.arguments})", style="cyan", markup=False, highlight=False)

    def done(self, done: Done) -> None:
        self.unspin()
        if self.json_mode:
            sys.stdout.write(_dump(done.as_dict()) + "\n")
        else:
            if done.text and not self.wrote_text:  # a buffered JSON answer arrives whole
                sys.stdout.write(done.text)
                self.wrote_text = True
            if self.wrote_text:
                sys.stdout.write("\n")
            elif self.wrote_reasoning:
                self.err.print()
        sys.stdout.flush()

    def failed(self, message: str, record: dict[str, Any] | None = None) -> None:
        self.unspin()
        if self.wrote_text:
            sys.stdout.write("\n")
            sys.stdout.flush()
        if self.json_mode and record is not None:
            sys.stdout.write(_dump(record) + "\n")
            sys.stdout.flush()
        self.err.print(message, style="bold red", markup=False, highlight=False)


def _incomplete_message(exc: IncompleteStream, stream: Stream) -> tuple[str, dict[str, Any]]:
    gid = exc.generation_id or stream.generation_id or "unknown"
    key = exc.idempotency_key or stream.idempotency_key
    what = f"{exc.code}: {exc.message}" if isinstance(exc, StreamFailed) else exc.reason
    hint = f"; recover with `{cli_command()} replay {key}`" if key and not isinstance(exc, StreamFailed) else ""
    msg = f"error: the answer is incomplete ({what}); generation {gid}{hint}"
    record = {
        "status": "incomplete",
        "generation_id": gid,
        "idempotency_key": key,
        "error": {"code": exc.code, "message": what},
        "partial_text": exc.partial_text,
    }
    return msg, record


def run_turn(
    client: Client, err: Console, model: str, messages: list[dict[str, Any]], *, json_mode: bool, **params: Any
) -> Done | None:
    """Stream one answer; the Done when complete, None (after saying why) otherwise."""
    view = TurnView(err, json_mode=json_mode)
    view.spin()
    stream = client.chat_stream(model=model, messages=messages, **params)
    try:
        with stream:
            for ev in stream:
                view.event(ev)
                if isinstance(ev, Done):
                    view.done(ev)
                    return ev
    except IncompleteStream as exc:
        msg, record = _incomplete_message(exc, stream)
        view.failed(msg, record)
    except TidegateAPIError as exc:
        gid = exc.generation_id or "unknown"
        record = {"status": "failed", "generation_id": gid, "error": {"code": exc.code, "message": exc.message}}
        view.failed(f"error: {exc.code}: {exc.message} (HTTP {exc.status}, generation {gid})", record)
    except TidegateClientError as exc:
        view.failed(f"error: {exc}")
    except KeyboardInterrupt:
        running = stream.generation_id
        if running:  # a keyed request keeps generating when we leave: stop it upstream
            try:
                client.cancel(running)
            except TidegateClientError:
                pass
        view.failed(f"error: cancelled; the answer is incomplete; generation {running or 'unknown'}")
    return None


@click.command("chat")
@click.argument("model")
@click.argument("prompt", required=False)
@click.option("--max-tokens", type=click.IntRange(min=1), default=None, help="limit the answer length")
@click.option("--json", "json_mode", is_flag=True, help="print the final record as JSON instead of streaming")
@click.option("--system", default=None, help="a system message")
@_opts
def chat(
    model: str,
    prompt: str | None,
    max_tokens: int | None,
    json_mode: bool,
    system: str | None,
    base_url: str | None,
    api_key: str | None,
) -> None:
    """Stream an answer: text on stdout, reasoning on stderr; exit 1 if it is incomplete.

    Without PROMPT the prompt is read from stdin; when stdin is a terminal, chat turn by turn.
    """
    client = _client(base_url, api_key)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    if prompt is None and sys.stdin.isatty():
        _interactive(client, err, model, history, json_mode=json_mode, max_tokens=max_tokens)
        return
    if prompt is None:
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise click.UsageError("empty prompt")
    done = run_turn(
        client, err, model, [*history, {"role": "user", "content": prompt}], json_mode=json_mode, max_tokens=max_tokens
    )
    client.close()
    sys.exit(0 if done is not None else 1)


def _interactive(
    client: Client, err: Console, model: str, history: list[dict[str, Any]], *, json_mode: bool, **params: Any
) -> None:
    err.print(f"chatting with {model}; an empty line or Ctrl-D ends", style="dim")
    while True:
        try:
            line = err.input("[bold green]you>[/] ")
        except (EOFError, KeyboardInterrupt):
            err.print()
            break
        if not line.strip() or line.strip() in ("/exit", "/quit"):
            break
        turn = [*history, {"role": "user", "content": line}]
        done = run_turn(client, err, model, turn, json_mode=json_mode, **params)
        if done is not None:  # only a complete answer joins the conversation
            history[:] = [*turn, {"role": "assistant", "content": done.text}]
    client.close()


@click.command("replay")
@click.argument("idempotency_key")
@click.option("--text", "text_only", is_flag=True, help="print only the answer text")
@_opts
def replay(idempotency_key: str, text_only: bool, base_url: str | None, api_key: str | None) -> None:
    """Fetch a stored result by its Idempotency-Key (never starts a generation)."""
    with _client(base_url, api_key) as client:
        try:
            done = client.replay(idempotency_key)
        except StreamFailed as exc:
            click.echo(_dump({"status": "incomplete", "error": {"code": exc.code, "message": exc.message},
                              "partial_output": exc.partial_text}))  # fmt: skip
            raise click.ClickException(
                f"the generation did not complete ({exc.code}: {exc.message}); incomplete"
            ) from None
        except TidegateAPIError as exc:
            raise click.ClickException(f"{exc.code}: {exc.message} (HTTP {exc.status})") from None
        except TidegateClientError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(done.text if text_only else _dump(done.result if done.result is not None else done.as_dict()))


@click.group("generations")
def generations() -> None:
    """Inspect generation records."""


@generations.command("show")
@click.argument("generation_id")
@_opts
def generations_show(generation_id: str, base_url: str | None, api_key: str | None) -> None:
    """Print a generation record (status, provider, usage, cost, timings) as JSON."""
    with _client(base_url, api_key) as client:
        try:
            record = client.generation(generation_id)
        except TidegateAPIError as exc:
            raise click.ClickException(f"{exc.code}: {exc.message} (HTTP {exc.status})") from None
        except TidegateClientError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(_dump(record))


@click.command("models")
@_opts
def models_cmd(base_url: str | None, api_key: str | None) -> None:
    """Print the catalog's model ids."""
    with _client(base_url, api_key) as client:
        try:
            models = client.models()
        except TidegateAPIError as exc:
            raise click.ClickException(f"{exc.code}: {exc.message} (HTTP {exc.status})") from None
        except TidegateClientError as exc:
            raise click.ClickException(str(exc)) from None
    for m in models:
        click.echo(m["id"])


@click.command("embed")
@click.argument("model")
@click.argument("texts", nargs=-1)
@click.option("--dimensions", type=click.IntRange(min=1), default=None, help="ask for vectors this long")
@click.option("--json", "json_mode", is_flag=True, help="print the whole answer (the vectors too) as JSON")
@_opts
def embed(
    model: str,
    texts: tuple[str, ...],
    dimensions: int | None,
    json_mode: bool,
    base_url: str | None,
    api_key: str | None,
) -> None:
    """Embed TEXTS through the gateway's /v1/embeddings: each vector's length on stdout (or --json).

    Without TEXTS, stdin is one text.
    """
    if not api_key:
        raise click.UsageError("no API key: set $TIDEGATE_API_KEY or pass --api-key")
    inputs = list(texts) or [sys.stdin.read()]
    if not all(t.strip() for t in inputs):
        raise click.UsageError("empty text")
    body: dict[str, Any] = {"model": model, "input": inputs}
    if dimensions is not None:
        body["dimensions"] = dimensions
    url = resolve_base_url(base_url) + "/v1/embeddings"
    try:
        resp = httpx.post(url, json=body, headers=auth_headers(api_key), timeout=DEFAULT_TIMEOUT)
        answer: dict[str, Any] = check_json(resp.status_code, resp.headers, resp.content)
    except TidegateAPIError as exc:
        gid = exc.generation_id or "unknown"
        raise click.ClickException(f"{exc.code}: {exc.message} (HTTP {exc.status}, generation {gid})") from None
    except (TidegateClientError, httpx.HTTPError) as exc:
        raise click.ClickException(f"cannot embed through {url}: {exc}") from None
    if json_mode:
        click.echo(_dump(answer))
        return
    for item in answer.get("data") or []:
        vector = item.get("embedding") or []
        head = ", ".join(f"{v:.4f}" for v in vector[:4])
        click.echo(f"{item.get('index')}\t{len(vector)} dims\t[{head}{', …' if len(vector) > 4 else ''}]")
    usage = answer.get("usage") or {}
    gid = resp.headers.get("x-generation-id", "unknown")
    click.echo(f"{answer.get('model')}: {usage.get('prompt_tokens', 0)} tokens, generation {gid}", err=True)
