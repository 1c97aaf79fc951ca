"""Routing decisions and the breaker state machine (gateway/routing.py, gateway/health.py) on real
configs, with a settable clock for the breaker's cooldown."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tidegate.config.load import load_text
from tidegate.config.model import Breaker
from tidegate.errors import ConfigError, NoProviderAvailable
from tidegate.gateway.health import CLOSED, HALF_OPEN, OPEN, Health
from tidegate.gateway.routing import Routing, needs, prompt_tokens_estimate
from tidegate.request import GenerationRequest, ProviderPrefs

BASE = """
[providers.a]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
region = "eu-central-1"
jurisdiction = "eu"
[providers.b]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
jurisdiction = "us"
[providers.c]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
"""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_breaker_opens_skips_half_opens_and_closes() -> None:
    clock = Clock()
    health, breaker = Health(clock), Breaker(failures=3, cooldown_s=30)
    for _ in range(2):
        assert health.allow("r", breaker)
        health.failed("r", breaker, None)
    assert health.state("r") == CLOSED
    health.succeeded("r", 0.1)  # a success resets the count
    for _ in range(3):
        health.failed("r", breaker, None)
    assert health.state("r") == OPEN and not health.allow("r", breaker)
    clock.now += 30
    assert health.state("r") == HALF_OPEN
    assert health.allow("r", breaker)  # the probe
    assert not health.allow("r", breaker)  # one at a time
    health.failed("r", breaker, None)
    assert health.state("r") == OPEN
    clock.now += 30
    assert health.allow("r", breaker)
    health.succeeded("r", 0.2)
    assert health.state("r") == CLOSED and health.allow("r", breaker) and health.allow("r", breaker)


def test_a_breaker_opened_by_a_429_stays_open_its_retry_after() -> None:
    clock = Clock()
    health, breaker = Health(clock), Breaker(failures=1, cooldown_s=5)
    health.failed("r", breaker, 60.0)
    clock.now += 30
    assert not health.allow("r", breaker)
    clock.now += 30
    assert health.allow("r", breaker)


def test_breaker_failures_zero_turns_it_off() -> None:
    health, breaker = Health(Clock()), Breaker(failures=0)
    for _ in range(50):
        health.failed("r", breaker, None)
    assert health.allow("r", breaker) and health.state("r") == CLOSED
    assert health.snapshot("r")["error_rate"] == 1.0


def test_a_probe_that_ends_with_no_verdict_lets_the_next_one_through() -> None:
    clock = Clock()
    health, breaker = Health(clock), Breaker(failures=1, cooldown_s=1)
    health.failed("r", breaker, None)
    clock.now += 1
    assert health.allow("r", breaker)
    health.begin("r")
    health.end("r")  # cancelled before it answered
    assert health.allow("r", breaker)


def test_weighted_is_exact_over_each_round() -> None:
    cfg = load_text(
        BASE
        + """[models.m]
strategy = "weighted"
routes = [{ provider = "a", model = "x", weight = 3 }, { provider = "b", model = "x" }]
""",
        "t",
    )
    routing = Routing(cfg, Health())
    firsts = [routing.plan(cfg.models["m"], None).routes[0][1].provider for _ in range(8)]
    assert firsts == ["a", "a", "b", "a"] * 2  # interleaved, and exact over each round of 4
    plan = routing.plan(cfg.models["m"], None)
    assert len(plan.routes) == 2  # the other route stays as the fallback


def test_least_busy_prefers_fewer_in_flight() -> None:
    cfg = load_text(
        BASE
        + """[models.m]
strategy = "least_busy"
routes = [{ provider = "a", model = "x" }, { provider = "b", model = "x" }]
""",
        "t",
    )
    health = Health()
    routing = Routing(cfg, health)
    assert routing.plan(cfg.models["m"], None).routes[0][1].provider == "a"
    health.begin("a/x")
    assert routing.plan(cfg.models["m"], None).routes[0][1].provider == "b"


def test_key_jurisdictions_and_a_provider_without_one() -> None:
    cfg = load_text(
        BASE
        + """[models.m]
routes = [{ provider = "c", model = "x" }, { provider = "a", model = "x" }]
""",
        "t",
    )
    routing = Routing(cfg, Health())
    plan = routing.plan(cfg.models["m"], None, None, ("eu",))
    assert [r.provider for _, r in plan.routes] == ["a"]
    assert plan.excluded == "the key's jurisdictions=['eu'] excluded c (no jurisdiction)"
    with pytest.raises(NoProviderAvailable, match=r"provider\.allow_fallbacks=false excluded"):
        routing.plan(cfg.models["m"], None, ProviderPrefs(order=("b",), allow_fallbacks=False))


def test_auto_with_nothing_that_fits_names_why() -> None:
    cfg = load_text(
        BASE
        + """[models.m]
routes = [{ provider = "a", model = "x" }]
[models.auto]
type = "router"
candidates = ["m"]
""",
        "t",
    )
    tools = [{"type": "function", "function": {"name": "f"}}]
    req = GenerationRequest(model="auto", messages=[{"role": "user", "content": "hi"}], tools=tools)
    with pytest.raises(NoProviderAvailable, match="m: the request has tools"):
        Routing(cfg, Health()).plan(cfg.models["auto"], req)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('[models.m]\nstrategy = "random"\nroutes = [{ provider = "a", model = "x" }]', 'models."m".strategy'),
        ('[models.m]\nroutes = [{ provider = "a", model = "x", weight = 0 }]', 'models."m".routes[0].weight'),
        ('[models.m]\nbreaker_failures = -1\nroutes = [{ provider = "a", model = "x" }]', "breaker_failures"),
        ('[models.r]\ntype = "router"\ncandidates = ["nope"]', "no model 'nope'"),
        ('[models.r]\ntype = "router"\ncandidates = []', 'models."r".candidates'),
        (
            '[models.m]\nroutes = [{ provider = "a", model = "x" }]\n[models.r]\ntype = "router"\n'
            'candidates = ["m"]\npolicy = "random"',
            'models."r".policy',
        ),
        ('[models.m]\npolicy = "cheapest"\nroutes = [{ provider = "a", model = "x" }]', 'models."m".policy'),
    ],
)
def test_config_errors_name_the_key(extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        load_text(BASE + extra, "t")


def test_server_breaker_defaults_and_per_model_override() -> None:
    cfg = load_text(
        "[server]\nbreaker_failures = 2\n"
        + BASE
        + '[models.m]\nbreaker_cooldown_s = 7\nroutes = [{ provider = "a", model = "x" }]\n',
        "t",
    )
    assert cfg.server.breaker_failures == 2 and cfg.server.breaker_cooldown_s == 30
    assert cfg.models["m"].breaker == Breaker(failures=2, cooldown_s=7)
    with pytest.raises(ConfigError, match=r"server\.breaker_failures"):
        load_text("[server]\nbreaker_failures = 1.5\n", "t")


def test_the_readme_routing_config_loads() -> None:
    """README's routing example is a config this tidegate accepts (docs show only configs a test uses)."""
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    section = readme.split("## Routing", 1)[1]
    block = section.split("```toml", 1)[1].split("```", 1)[0]
    cfg = load_text(block, "README.md")
    auto = cfg.models["tidegate/auto"]
    assert auto.type == "router" and auto.policy == "balanced"
    assert cfg.models["openai/gpt-4o-mini"].routes[0].weight == 3
    assert cfg.providers["mistral-eu"].jurisdiction == "eu"


def test_the_prompt_estimate_counts_text_not_image_bytes() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 40_000}}
    text = {"type": "text", "text": "x" * 400}
    req = GenerationRequest(model="m", messages=[{"role": "user", "content": [text, image]}])
    assert prompt_tokens_estimate(req) == 100
    assert needs(req) == [("vision", "the request has images")]


@pytest.mark.parametrize(
    ("policy", "first"),
    [("ordered", "pricey"), ("cheapest", "cheap"), ("fastest", "quick"), ("balanced", "quick")],
)
def test_policies(policy: str, first: str) -> None:
    cfg = load_text(
        BASE
        + f"""[models.pricey]
pricing = {{ prompt = 9.0, completion = 9.0 }}
routes = [{{ provider = "a", model = "pricey" }}]
[models.cheap]
pricing = {{ prompt = 1.0, completion = 1.0 }}
routes = [{{ provider = "b", model = "cheap" }}]
[models.quick]
routes = [{{ provider = "c", model = "quick", pricing = {{ prompt = 1.1, completion = 1.1 }} }}]
[models.auto]
type = "router"
policy = "{policy}"
candidates = ["pricey", "cheap", "quick"]
""",
        "t",
    )
    health = Health()
    for key, ttft in (("a/pricey", 0.5), ("b/cheap", 0.9), ("c/quick", 0.1)):
        health.succeeded(key, ttft)
    req = GenerationRequest(model="auto", messages=[{"role": "user", "content": "hi"}])
    plan = Routing(cfg, health).plan(cfg.models["auto"], req)
    assert plan.routes[0][0].id == first and len(plan.routes) == 3
    assert plan.reason.startswith(f"policy={policy} chose {first}")


class FakeShared:
    """A store that shares route health (the Redis one's semantics, in memory) for two instances."""

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.open: dict[str, float] = {}
        self.probe: set[str] = set()

    async def route_failed(self, route: str, threshold: int, open_s: float) -> float | None:
        self.failures[route] = self.failures.get(route, 0) + 1
        if self.failures[route] >= threshold:
            self.open[route] = time.time() + open_s
            return self.open[route]
        return None

    async def route_recovered(self, route: str) -> None:
        self.failures.pop(route, None)
        self.open.pop(route, None)
        self.probe.discard(route)

    async def open_routes(self, routes: list[str]) -> dict[str, float]:
        return {r: self.open[r] for r in routes if r in self.open and self.open[r] > time.time()}

    async def claim_probe(self, route: str, ttl_s: float) -> bool:
        won = route not in self.probe
        self.probe.add(route)
        return won

    async def recovered_routes(self, routes: list[str]) -> set[str]:
        return {r for r in routes if r not in self.failures}


async def test_one_instance_probes_for_all_and_its_success_closes_the_others() -> None:
    shared, clock = FakeShared(), Clock()
    a, b = Health(clock), Health(clock)
    a.shared = b.shared = shared
    breaker, key = Breaker(failures=1, cooldown_s=5), "p/m"
    assert a.enter(key, breaker)
    a.failed(key, breaker, None)
    a.end(key)
    await asyncio.sleep(0)  # the shared write
    await b.sync([key])
    assert a.state(key) == b.state(key) == "open"
    clock.now += 6  # the cooldown is over for both
    assert not a.allow(key, breaker) and not b.allow(key, breaker)  # both ask for the probe
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert a.allow(key, breaker)  # a claimed it first: its next request is the probe
    assert not b.allow(key, breaker)  # b skips the route another cooldown
    a.succeeded(key, 0.1)
    await asyncio.sleep(0)
    await b.sync([key])
    assert a.state(key) == b.state(key) == "closed"
    assert b.allow(key, breaker)
