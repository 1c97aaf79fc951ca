"""Processes under test: the upstream emulator, tidegate, LiteLLM proxy and the plain relay (loopback only).

Each is started as a subprocess (optionally pinned with `taskset`), waited on until it answers,
and stopped by its own pid. LiteLLM lives in its own venv, `bench/.venv-litellm`, installed on first
use with `litellm[proxy]==1.80.0` (plus uvloop and py-spy).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
LITELLM_VENV = BENCH / ".venv-litellm"
LITELLM_SPEC = "litellm[proxy]==1.80.0"
TIDEGATE_KEY = "tg-bench-master-key-0123456789"
LITELLM_KEY = "sk-bench-litellm-master-key"
UPSTREAM_KEY = "sk-bench-upstream-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pin(cores: str | None) -> list[str]:
    return ["taskset", "-c", cores] if cores and shutil.which("taskset") else []


def http_status(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def post_json(url: str, body: bytes, key: str, timeout: float = 30.0) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=body, method="POST", headers={"content-type": "application/json", "authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc).encode()


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    key: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def wait_ready(self, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if http_status(self.url + path) == 200:
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready in {timeout:.0f} s:\n{self.log_tail()}")


def _spawn(name: str, cmd: list[str], workdir: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc, log_path


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEGATE_", "LITELLM_"))}
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(k, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["BENCH_UPSTREAM_KEY"] = UPSTREAM_KEY
    return env


def start_emulator(workdir: Path, cores: str | None) -> Service:
    workdir = workdir.resolve()
    port = free_port()
    cmd = [*pin(cores), PY, str(BENCH / "upstream.py"), "--port", str(port)]
    proc, log = _spawn("upstream", cmd, workdir, clean_env())
    svc = Service("upstream", proc, f"http://127.0.0.1:{port}", "", log)
    svc.wait_ready("/health", 30)
    return svc


def tidegate_config(
    emu_url: str,
    shapes: list[str],
    store_url: str,
    keepalive_s: float | None,
    workers: int,
    *,
    raise_limits: bool = False,
    pricing: bool = False,
    passthrough_only: bool = False,
) -> str:
    """A config on the defaults a user gets, but for what the caller names: `keepalive_s` (None: the
    default), `raise_limits` (the 5,000-stream scenario only: past the default 4096 client
    connections per worker and 1000 per provider, which are limits for operators, not what is
    measured), `pricing` (every model priced, so a key's credits reserve and settle money) and
    `passthrough_only` (the OpenAI provider alone: no Anthropic route to translate)."""
    limit = ["max_connections = 8192"] if raise_limits else []
    lines = ["[server]", 'host = "127.0.0.1"', f"workers = {workers}", *limit]
    if keepalive_s is not None:
        lines.append(f"keepalive_s = {keepalive_s}")
    lines += ["[store]", f'url = "{store_url}"']
    providers = [
        ("emu-openai", "openai", f"{emu_url}/v1"),
        ("emu-anthropic", "anthropic", emu_url),
        ("emu-gemini", "gemini", f"{emu_url}/v1beta"),  # the Gemini door's passthrough (doors.py)
        ("emu-responses", "openai", f"{emu_url}/v1"),  # with responses = true: the Responses door's
    ]
    for name, kind, base in providers[:1] if passthrough_only else providers:
        lines += [f"[providers.{name}]", f'kind = "{kind}"', f'base_url = "{base}"']
        lines += ['api_key_env = "BENCH_UPSTREAM_KEY"', *limit]
        if name == "emu-responses":
            lines.append("responses = true")
    price = ["pricing = { prompt = 2.5, completion = 10.0 }"] if pricing else []
    for shape in shapes:
        lines += [f'[models."{shape}"]', f'routes = [{{ provider = "emu-openai", model = "{shape}" }}]', *price]
        if not passthrough_only:
            anth = f'routes = [{{ provider = "emu-anthropic", model = "{shape}" }}]'
            gem = f'routes = [{{ provider = "emu-gemini", model = "{shape}" }}]'
            resp = f'routes = [{{ provider = "emu-responses", model = "{shape}" }}]'
            lines += [f'[models."anth/{shape}"]', anth, *price, f'[models."gem/{shape}"]', gem, *price]
            lines += [f'[models."resp/{shape}"]', resp, *price]
    return "\n".join(lines) + "\n"


def start_tidegate(
    workdir: Path,
    name: str,
    emu_url: str,
    shapes: list[str],
    cores: str | None,
    *,
    workers: int = 1,
    keepalive_s: float | None = None,
    memory_store: bool = False,
    store_url: str | None = None,
    raise_limits: bool = False,
    pricing: bool = False,
    passthrough_only: bool = False,
    extra_env: dict[str, str] | None = None,
    port: int = 0,
) -> Service:
    """`store_url` (any store tidegate takes) overrides the SQLite file or memory store."""
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if store_url is None:
        store_url = "sqlite:///:memory:" if memory_store else f"sqlite:///{workdir / (name + '.db')}"
    for suffix in ("", "-wal", "-shm"):
        (workdir / f"{name}.db{suffix}").unlink(missing_ok=True)
    config_path = workdir / f"{name}.toml"
    config = tidegate_config(
        emu_url,
        shapes,
        store_url,
        keepalive_s,
        workers,
        raise_limits=raise_limits,
        pricing=pricing,
        passthrough_only=passthrough_only,
    )
    config_path.write_text(config)
    return _serve(workdir, name, ["--config", str(config_path)], cores, extra_env, port)


def start_tidegate_default(workdir: Path, cores: str | None) -> Service:
    """`tidegate serve` with no config at all: the embedded default (local models, SQLite in the cwd)."""
    workdir = (workdir / "default-config").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        (workdir / f"tidegate.db{suffix}").unlink(missing_ok=True)
    return _serve(workdir, "default-config", [], cores, None, 0)


def _serve(
    workdir: Path, name: str, args: list[str], cores: str | None, extra_env: dict[str, str] | None, port: int
) -> Service:
    port = port or free_port()
    env = clean_env()
    env["TIDEGATE_MASTER_KEY"] = TIDEGATE_KEY
    env.update(extra_env or {})
    cmd = [*pin(cores), PY, "-m", "tidegate", "serve", *args, "--port", str(port)]
    proc, log = _spawn(name, cmd, workdir, env)
    svc = Service(name, proc, f"http://127.0.0.1:{port}", TIDEGATE_KEY, log)
    svc.wait_ready("/readyz", 60)
    return svc


def start_observers(workdir: Path, scrape_url: str, cores: str | None) -> Service:
    """bench/observers.py: an OTLP/HTTP receiver (its URL is the Service's) scraping `scrape_url` every second."""
    port = free_port()
    cmd = [*pin(cores), PY, str(BENCH / "observers.py"), "--port", str(port), "--scrape", scrape_url]
    proc, log = _spawn(f"observers-{port}", cmd, workdir.resolve(), clean_env())
    svc = Service("observers", proc, f"http://127.0.0.1:{port}", "", log)
    svc.wait_ready("/stats", 30)
    return svc


def start_plain_relay(workdir: Path, emu_url: str, cores: str | None) -> Service:
    """The issue's pilot relay (bench/plain_relay.py): the floor a Python ASGI gateway can reach here."""
    workdir = workdir.resolve()
    port = free_port()
    cmd = [*pin(cores), PY, str(BENCH / "plain_relay.py"), "--port", str(port), "--upstream", emu_url]
    proc, log = _spawn("relay", cmd, workdir, clean_env())
    svc = Service("relay", proc, f"http://127.0.0.1:{port}", "none", log)
    svc.wait_ready("/health", 30)
    return svc


def ensure_litellm(log: Path) -> Path:
    """The LiteLLM venv's `litellm` executable, installing it on first use."""
    exe = LITELLM_VENV / "bin" / "litellm"
    marker = LITELLM_VENV / ".bench-installed"
    if exe.exists() and marker.exists() and marker.read_text().strip() == LITELLM_SPEC:
        return exe
    print(f"installing {LITELLM_SPEC} into {LITELLM_VENV} (first run only) ...", flush=True)
    with open(log, "ab") as out:
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True, stdout=out, stderr=out)
        pip = [str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True, stdout=out, stderr=out)
        subprocess.run([*pip, LITELLM_SPEC, "uvloop", "py-spy"], check=True, stdout=out, stderr=out)
    marker.write_text(LITELLM_SPEC + "\n")
    return exe


def litellm_config(emu_url: str, shapes: list[str]) -> str:
    out = ["model_list:"]
    for shape in shapes:
        out += [
            f'  - model_name: "{shape}"',
            "    litellm_params:",
            f'      model: "openai/{shape}"',
            f'      api_base: "{emu_url}/v1"',
            "      api_key: os.environ/BENCH_UPSTREAM_KEY",
            f'  - model_name: "anth/{shape}"',
            "    litellm_params:",
            f'      model: "anthropic/{shape}"',
            f'      api_base: "{emu_url}"',
            "      api_key: os.environ/BENCH_UPSTREAM_KEY",
        ]
    out += [
        "litellm_settings:",
        "  drop_params: true",
        "  telemetry: false",
        "  request_timeout: 600",
        "general_settings:",
        f'  master_key: "{LITELLM_KEY}"',
    ]
    return "\n".join(out) + "\n"


def start_litellm(workdir: Path, emu_url: str, shapes: list[str], cores: str | None, workers: int = 1) -> Service:
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    exe = ensure_litellm(workdir / "litellm-install.log")
    cfg = workdir / "litellm.yaml"
    cfg.write_text(litellm_config(emu_url, shapes))
    port = free_port()
    env = clean_env()
    env.pop("DATABASE_URL", None)
    env.update(
        {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
            "DISABLE_ADMIN_UI": "True",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    cmd = [
        *pin(cores),
        str(exe),
        "--config",
        str(cfg),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        str(workers),
    ]
    proc, log = _spawn("litellm", cmd, workdir, env)
    svc = Service("litellm", proc, f"http://127.0.0.1:{port}", LITELLM_KEY, log)
    svc.wait_ready("/health/liveliness", 180)
    return svc


def run_load(args: list[str], cores: str | None, timeout: float) -> dict[str, object]:
    """Run bench/load.py in its own process and return its JSON (errors become an `error` key)."""
    import orjson

    cmd = [*pin(cores), PY, str(BENCH / "load.py"), *args]
    try:
        res = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"load generator did not finish in {timeout:.0f} s"}
    if res.returncode != 0:
        return {"error": f"load generator exited {res.returncode}: {res.stderr.decode(errors='replace')[-800:]}"}
    try:
        out: dict[str, object] = orjson.loads(res.stdout)
    except orjson.JSONDecodeError:
        return {"error": "load generator printed no JSON: " + res.stdout.decode(errors="replace")[-300:]}
    return out
