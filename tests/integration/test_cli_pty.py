"""The `tidegate chat` CLI in a real pseudo-terminal, against a real tidegate and the Anthropic emulator.

The CLI runs as the session leader of a fresh pty (its controlling terminal, so the terminal's own
line discipline turns a written Ctrl-C byte into SIGINT, as for a user). The output is read as it
arrives and also replayed through a tiny screen model (carriage return, line feed, erase-line, SGR
dim), so the tests judge what the user would see:

- streaming text appears progressively: several reads see a growing answer before the end;
- reasoning is rendered apart: dimmed, on its own line before the answer, still on screen at the end
  (keep-alives arrive between reasoning deltas, so the keep-alive spinner must not erase it);
- Ctrl-C cancels the generation upstream: the emulator sees its connection close within 1 s, the CLI
  exits 1 saying the answer is incomplete, and the record is `cancelled`;
- `make serve` on a terminal stops on Ctrl-C and make itself exits 0 (docs/operations.md).
"""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conformance.stack import Stack, marker, route, running_stack
from tests.emulators.anthropic_upstream import SLOW_ANSWER, SLOW_THINKING
from tests.emulators.openai_upstream import tidegate_toml
from tests.support.process import MASTER_KEY, free_port, sqlite_url
from tests.support.waits import is_ready, poll_until

REPO = Path(__file__).resolve().parents[2]

KEEPALIVE = 0.1  # shorter than the emulator's pauses between deltas: keep-alives land mid-reasoning
CSI = re.compile(r"\x1b\[([0-9;?<>=]*)([@-~])")
OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
GENERATION = re.compile(r"generation ([0-9A-HJKMNP-TV-Z]{26})")


def plain(text: str) -> str:
    return CSI.sub("", OSC.sub("", text))


@dataclass
class Screen:
    """Enough of a terminal to know what stays visible: cells are (char, dim)."""

    lines: list[list[tuple[str, bool]]] = field(default_factory=lambda: [[]])
    row: int = 0
    col: int = 0
    dim: bool = False

    def feed(self, text: str) -> None:
        text = OSC.sub("", text)
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\x1b":
                m = CSI.match(text, i)
                if m:
                    self._csi(m.group(1), m.group(2))
                    i = m.end()
                else:
                    i += 2  # a two-byte escape: nothing that changes text
                continue
            if ch == "\r":
                self.col = 0
            elif ch == "\n":
                self.row += 1
                while len(self.lines) <= self.row:
                    self.lines.append([])
            elif ch == "\b":
                self.col = max(0, self.col - 1)
            elif ch >= " ":
                line = self.lines[self.row]
                while len(line) <= self.col:
                    line.append((" ", False))
                line[self.col] = (ch, self.dim)
                self.col += 1
            i += 1

    def _csi(self, params: str, final: str) -> None:
        if final == "m":
            for p in params.split(";") if params else ["0"]:
                if p in ("", "0", "22"):
                    self.dim = False
                elif p == "2":
                    self.dim = True
        elif final == "K":
            line = self.lines[self.row]
            if params in ("", "0"):
                del line[self.col :]
            elif params == "2":
                line.clear()

    def text(self) -> list[str]:
        return ["".join(c for c, _ in line).rstrip() for line in self.lines]

    def dim_of(self, row: int) -> set[bool]:
        return {d for c, d in self.lines[row] if c.strip()}


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class PtyCli:
    """`python -m tidegate ARGS` (or `program`) with stdin/stdout/stderr on a new pty that is its
    controlling terminal."""

    def __init__(self, args: list[str], env: dict[str, str], program: list[str] | None = None) -> None:
        setsid = shutil.which("setsid")
        assert setsid is not None, "util-linux `setsid` is needed to give the CLI a controlling terminal"
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
        # `setsid --ctty`: a new session whose controlling terminal is the pty on stdin (no fork: the
        # child of Popen is not a process group leader), then exec the CLI
        self.proc = subprocess.Popen(
            [setsid, "--ctty", *(program or [sys.executable, "-m", "tidegate"]), *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            close_fds=True,
            # a CLI on a real terminal has SIGINT at its default; a test runner started in the
            # background (`cmd &` in a script) ignores it, and an ignored signal stays ignored
            # across exec, so Ctrl-C would do nothing
            preexec_fn=_default_sigint,
        )
        os.close(slave)
        self.master = master
        self.reads: list[tuple[float, str]] = []
        self.eof = False
        self._raw = b""

    @property
    def output(self) -> str:
        return self._raw.decode("utf-8", errors="replace")

    def _read_once(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError as exc:  # EIO: every slave fd is closed (the CLI exited)
            if exc.errno != errno.EIO:
                raise
            data = b""
        if not data:
            self.eof = True
            return False
        self._raw += data
        self.reads.append((time.monotonic(), self.output))
        return True

    def read_until(self, done: Callable[[str], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done(plain(self.output)):
            left = deadline - time.monotonic()
            if left <= 0 or self.eof:
                pytest.fail(f"the CLI did not show what was expected:\n{self.output!r}")
            self._read_once(min(left, 0.2))

    def read_to_end(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while not self.eof:
            if time.monotonic() > deadline:
                pytest.fail(f"the CLI did not finish:\n{self.output!r}")
            self._read_once(0.2)
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    models = {"cli/slowthink": [route("anthropic", "slowthink")], "cli/slow": [route("anthropic", "slow")]}
    settings = {"keepalive_s": KEEPALIVE, "upstream_idle_timeout_s": 5.0}
    with running_stack(tmp_path_factory.mktemp("cli-pty"), models, server=settings) as st:
        yield st


def cli_env_for(stack: Stack) -> dict[str, str]:
    drop = ("TIDEGATE_", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update({"TIDEGATE_URL": stack.server.base_url, "TIDEGATE_API_KEY": stack.server.key, "TERM": "xterm-256color"})
    return env


def shows(piece: str) -> Callable[[str], bool]:
    return lambda text: piece in text


def chat(env: dict[str, str], model: str, prompt: str) -> PtyCli:
    return PtyCli(["chat", model, prompt], env)


@dataclass
class Finished:
    code: int
    output: str
    reads: list[tuple[float, str]]  # (when, everything shown so far)


@pytest.fixture(scope="module")
def reasoned_answer(stack: Stack) -> Finished:
    """One `tidegate chat` of a model that reasons (slowly) before it answers (slowly)."""
    cli = chat(cli_env_for(stack), "cli/slowthink", f"hi {marker()}")
    try:
        code = cli.read_to_end(timeout=60)
    finally:
        cli.close()
    return Finished(code, cli.output, cli.reads)


def first_seen(run: Finished, piece: str) -> int:
    return next(i for i, (_, seen) in enumerate(run.reads) if piece in plain(seen))


def test_text_streams_progressively(reasoned_answer: Finished) -> None:
    run = reasoned_answer
    assert run.code == 0, run.output
    assert "incomplete" not in plain(run.output)
    # the answer grew across several reads, over the ~1 s the emulator took to send it
    grown: list[tuple[float, int]] = []
    for at, seen in run.reads:
        text = plain(seen)
        shown = max(i for i in range(len(SLOW_ANSWER) + 1) if "".join(SLOW_ANSWER[:i]) in text)
        if not grown or shown > grown[-1][1]:
            grown.append((at, shown))
    partial = [(at, n) for at, n in grown if 0 < n < len(SLOW_ANSWER)]
    assert len(partial) >= 3, f"the answer did not appear progressively: {grown}"
    assert grown[-1][1] == len(SLOW_ANSWER)
    assert grown[-1][0] - partial[0][0] >= 0.4, grown
    # the reasoning streamed too, piece by piece, all of it before the answer began
    thinking = [first_seen(run, piece) for piece in SLOW_THINKING]
    assert thinking == sorted(thinking) and len(set(thinking)) >= 2, thinking
    assert thinking[-1] < first_seen(run, SLOW_ANSWER[0])


def test_reasoning_is_rendered_apart(reasoned_answer: Finished) -> None:
    run = reasoned_answer
    answer, reasoning = "".join(SLOW_ANSWER), "".join(SLOW_THINKING)
    assert run.code == 0, run.output
    # when the answer begins, the whole reasoning is on screen, dimmed, on its own line above it
    at_answer = Screen()
    at_answer.feed(run.reads[first_seen(run, SLOW_ANSWER[0])][1])
    lines = at_answer.text()
    assert reasoning in lines, f"the reasoning is not on screen when the answer begins:\n{lines}"
    # at the end: the reasoning dimmed on a line of its own, then the answer on another, not dimmed
    screen = Screen()
    screen.feed(run.output)
    lines = screen.text()
    assert reasoning in lines, f"the reasoning is not on a line of its own at the end:\n{lines}"
    assert answer in lines, lines
    r_row, a_row = lines.index(reasoning), lines.index(answer)
    assert r_row < a_row
    assert screen.dim_of(r_row) == {True}, "the reasoning is not dimmed"
    assert screen.dim_of(a_row) == {False}, "the answer is dimmed"
    assert not any("waiting for the model" in line for line in lines), lines  # the spinner cleaned up


def test_ctrl_c_cancels_the_generation_upstream(stack: Stack) -> None:
    mark = marker()
    cli = chat(cli_env_for(stack), "cli/slow", f"hi {mark}")
    try:
        sizes: list[int] = []
        for n in range(1, 5):  # progressive here too: tick after tick, while the answer never ends
            cli.read_until(shows(f"tick{n} "), timeout=60)
            sizes.append(len(plain(cli.output)))
        assert sizes == sorted(sizes) and cli.proc.poll() is None
        cli.send(b"\x03")  # Ctrl-C, through the terminal's line discipline
        interrupted_at = time.monotonic()
        code = cli.read_to_end(timeout=20)
    finally:
        cli.close()
    text = plain(cli.output)
    assert code == 1, text
    assert "cancelled" in text and "incomplete" in text, text
    found = GENERATION.search(text)
    assert found, text
    gid = found.group(1)
    upstream = [q for q in list(stack.anthropic.requests) if q.dialect == "anthropic" and mark in repr(q.body)]
    assert len(upstream) == 1 and upstream[0].scenario == "slow"
    deadline = interrupted_at + 3
    while upstream[0].closed_at is None and time.monotonic() < deadline:
        time.sleep(0.02)
    closed_at = upstream[0].closed_at
    assert closed_at is not None, "the emulator never saw the upstream connection close"
    assert closed_at - interrupted_at < 1.0, closed_at - interrupted_at
    rec = stack.record(gid, until="cancelled")
    assert rec["status"] == "cancelled", rec
    assert rec["output_text"].startswith("tick0 tick1 tick2 tick3 ")


def test_make_serve_stops_on_ctrl_c_with_exit_0(tmp_path: Path) -> None:
    """Ctrl-C on the terminal of `make serve`: the gateway stops, and make exits with its 0, not
    killed by the same SIGINT (130, `make: *** [serve] Interrupt`): the gateway holds the terminal's
    foreground alone (cli/terminal.py). The stamps are taken as made (`-o`): the test never installs."""
    make = shutil.which("make")
    assert make is not None, "make is needed: `make serve` is what it tests"
    config = tmp_path / "tidegate.toml"
    config.write_text(
        tidegate_toml(
            sqlite_url(tmp_path),
            {"emu": {"kind": "openai", "base_url": "http://127.0.0.1:9"}},
            {"m": [("emu", "text")]},
        )
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEGATE_", "MAKE", "MFLAGS"))}
    env["TIDEGATE_MASTER_KEY"] = MASTER_KEY
    program = [make, "-C", str(REPO), "-o", ".venv/.installed", "-o", "src/tidegate/console/vendor/.installed", "serve"]
    run = PtyCli([f"ARGS=--config {config} --port {port}"], env, program)
    try:
        run.read_until(shows("tidegate: serving"), timeout=60)
        poll_until(lambda: is_ready(f"http://127.0.0.1:{port}"), 30, poll_s=0.1)
        run.send(b"\x03")  # Ctrl-C, through the terminal's line discipline
        code = run.read_to_end(timeout=30)
    finally:
        run.close()
    text = plain(run.output)
    assert code == 0, text
    assert "Interrupt" not in text and "Error" not in text, text
