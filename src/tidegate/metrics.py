"""A small Prometheus registry (per worker process): counters, gauges and histograms with labels."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: LabelValues, extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class Counter:
    def __init__(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> None:
        self.name, self.help, self.label_names = name, help_text, labels
        self._values: dict[LabelValues, float] = {}
        self._lock = threading.Lock()

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        with self._lock:
            self._values[labels] = self._values.get(labels, 0.0) + amount

    def value(self, *labels: str) -> float:
        return self._values.get(labels, 0.0)

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        for labels, value in sorted(self._values.items()):
            out.append(f"{self.name}{_labels(self.label_names, labels)} {value:g}")
        return out


class Gauge:
    def __init__(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        self.name, self.help, self._read = name, help_text, read

    def render(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge", f"{self.name} {self._read():g}"]


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...], labels: tuple[str, ...] = ()) -> None:
        self.name, self.help, self.buckets, self.label_names = name, help_text, buckets, labels
        self._counts: dict[LabelValues, list[int]] = {}
        self._sums: dict[LabelValues, float] = {}
        self._lock = threading.Lock()

    def observe(self, value: float, *labels: str) -> None:
        with self._lock:
            counts = self._counts.setdefault(labels, [0] * (len(self.buckets) + 1))
            counts[bisect.bisect_left(self.buckets, value)] += 1
            self._sums[labels] = self._sums.get(labels, 0.0) + value

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for labels, counts in sorted(self._counts.items()):
            running = 0
            for bound, count in zip(self.buckets, counts, strict=False):
                running += count
                le = 'le="' + format(bound, "g") + '"'
                out.append(f"{self.name}_bucket{_labels(self.label_names, labels, le)} {running}")
            running += counts[-1]
            inf = 'le="+Inf"'
            out.append(f"{self.name}_bucket{_labels(self.label_names, labels, inf)} {running}")
            out.append(f"{self.name}_sum{_labels(self.label_names, labels)} {self._sums[labels]:g}")
            out.append(f"{self.name}_count{_labels(self.label_names, labels)} {running}")
        return out


HTTP_REQUESTS = Counter("tidegate_http_requests_total", "HTTP responses by route and status", ("route", "status"))
GENERATIONS = Counter(
    "tidegate_generations_total", "Finished generations by model, provider and status", ("model", "provider", "status")
)
TOKENS = Counter("tidegate_tokens_total", "Tokens by model and kind (prompt, completion)", ("model", "kind"))
COST = Counter("tidegate_cost_usd_total", "Billed USD by model", ("model",))
UPSTREAM_FAILURES = Counter(
    "tidegate_upstream_failures_total", "Upstream failures by provider and code", ("provider", "code")
)
TTFT = Histogram(
    "tidegate_time_to_first_token_seconds",
    "Time from request to first token",
    (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    ("model",),
)

_gauges: list[Gauge] = []


def register_gauge(name: str, help_text: str, read: Callable[[], float]) -> None:
    _gauges[:] = [g for g in _gauges if g.name != name]
    _gauges.append(Gauge(name, help_text, read))


def render_all() -> bytes:
    lines: list[str] = []
    for metric in (HTTP_REQUESTS, GENERATIONS, TOKENS, COST, UPSTREAM_FAILURES, TTFT):
        lines.extend(metric.render())
    for gauge in _gauges:
        lines.extend(gauge.render())
    return ("\n".join(lines) + "\n").encode()
