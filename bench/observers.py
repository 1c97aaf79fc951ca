"""What watches a gateway as deployed: an OTLP/HTTP trace receiver and a Prometheus scraper, in one process.

    python bench/observers.py --port 4318 --scrape http://127.0.0.1:8080/metrics --interval 1

`POST /v1/traces` takes an OTLP/HTTP export (protobuf, as the OpenTelemetry SDK's exporter sends it),
parses it with `opentelemetry-proto` and counts its spans: a real receiver, so the gateway pays for a
real export (serialising, the HTTP round trip). The scraper GETs the gateway's `/metrics` every
`--interval` seconds, as Prometheus would. `GET /stats` answers `{"exports", "spans", "scrapes",
"scrape_errors", "scrape_bytes"}`, which the harness reads to show that both really ran.
"""

from __future__ import annotations

import argparse
import http.server
import json
import threading
import time
import urllib.request
from typing import Any, ClassVar

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Counts:
    lock = threading.Lock()
    values: ClassVar[dict[str, int]] = {"exports": 0, "spans": 0, "scrapes": 0, "scrape_errors": 0, "scrape_bytes": 0}

    @classmethod
    def add(cls, **deltas: int) -> None:
        with cls.lock:
            for name, delta in deltas.items():
                cls.values[name] += delta


class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the exporter keeps its connection open between exports

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path != "/v1/traces":
            self._answer(404, b"", "text/plain")
            return
        export = ExportTraceServiceRequest.FromString(body)
        spans = sum(len(scope.spans) for rs in export.resource_spans for scope in rs.scope_spans)
        Counts.add(exports=1, spans=spans)
        self._answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def do_GET(self) -> None:
        with Counts.lock:
            body = json.dumps(Counts.values).encode()
        self._answer(200 if self.path == "/stats" else 404, body, "application/json")

    def _answer(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def scrape_forever(url: str, interval: float) -> None:
    """One GET of /metrics every `interval` seconds, on a fixed schedule (a slow answer does not drift it)."""
    next_at = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                Counts.add(scrapes=1, scrape_bytes=len(resp.read()))
        except OSError:
            Counts.add(scrape_errors=1)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--scrape", default="", help="the gateway's /metrics URL (none: no scraping)")
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Receiver)
    if args.scrape:
        threading.Thread(target=scrape_forever, args=(args.scrape, args.interval), daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
