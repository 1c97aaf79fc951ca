"""The scenario of `test_address_rule.py`, run inside a network and mount namespace of its own
(`unshare --net --mount`): nothing here can reach a real network, and names resolve through a hosts
file bind-mounted on /etc/hosts.

169.254.169.254 is put on this namespace's loopback, with a listener (the trap) that records every
connection and every byte; the same port on 127.0.0.1 has another listener (the control), to show
that the provider key does reach an allowed address, so a trap that stays empty means something.
Prints one JSON object: what check-config said, each answer, what each listener saw, the log.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from tests.emulators.openai_upstream import tidegate_toml
from tests.support.process import start_server

CANARY = "sk-canary-provider-key-address-rule-0123456789"
METADATA = "169.254.169.254"
# names the hosts file points at the metadata address, in spellings getaddrinfo hands back
REFUSED_NAMES = {
    "alias": "169.254.169.254",
    "mapped": "::ffff:169.254.169.254",
    "compat": "::169.254.169.254",
    "nat64": "64:ff9b::a9fe:a9fe",
    "sixtofour": "2002:a9fe:a9fe::1",
}


class Trap:
    """Accepts on (host, port) and keeps what each connection sent in its first second."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_server((host, port))
        self.seen: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            conn.settimeout(1.0)
            data = b""
            try:
                while len(data) < 65536:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            self.seen.append(data.decode("latin-1"))
            conn.close()


def _hosts(path: Path, rebind_to: str) -> None:
    lines = ["127.0.0.1 localhost control.test", f"{rebind_to} rebind.test"]
    lines += [f"{address} {name}.test" for name, address in REFUSED_NAMES.items()]
    lines.append(f"{METADATA} proxy.test")
    path.write_text("\n".join(lines) + "\n")  # in place: the bind mount follows the file, not its name


def _check_config(config: Path) -> str:
    cmd = [sys.executable, "-m", "tidegate", "check-config", "--config", str(config)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"CANARY_KEY": CANARY, "PATH": ""})
    return result.stdout + result.stderr


def main(workdir: Path) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "addr", "add", f"{METADATA}/32", "dev", "lo"], check=True)
    hosts = workdir / "hosts"
    _hosts(hosts, "127.0.0.1")
    subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    control, trap = Trap("127.0.0.1", port), Trap(METADATA, port)

    names = ["rebind", "control", *REFUSED_NAMES]
    providers = {
        n: {"kind": "openai", "base_url": f"http://{n}.test:{port}/v1", "api_key_env": "CANARY_KEY"} for n in names
    }
    # an allowed upstream through a proxy whose name resolves to the metadata address
    providers["viaproxy"] = {**providers["control"], "proxy": f"http://proxy.test:{port}"}
    names.append("viaproxy")
    toml = tidegate_toml(f"sqlite:///{workdir / 'tidegate.db'}", providers, {n: [(n, "m")] for n in names})
    config = workdir / "check.toml"
    config.write_text(toml)
    before = _check_config(config)  # rebind.test is 127.0.0.1 now
    _hosts(hosts, METADATA)  # ... and the metadata address from here on
    after = _check_config(config)
    control_before = len(control.seen)

    server = start_server(workdir / "gw", toml, extra_env={"CANARY_KEY": CANARY})
    answers = {}
    try:
        for name in names:
            r = httpx.post(
                f"{server.base_url}/v1/chat/completions",
                json={"model": name, "messages": [{"role": "user", "content": "hi"}], "stream": True},
                headers=server.headers,
                timeout=30,
            )
            answers[name] = {
                "status": r.status_code,
                "body": r.text,
                "nosniff": r.headers.get("x-content-type-options"),
            }
    finally:
        server.stop()
    print(
        json.dumps(
            {
                "check_before": before,
                "check_after": after,
                "answers": answers,
                "control": control.seen[control_before:],
                "trap": trap.seen,
                "log": server.log(),
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
