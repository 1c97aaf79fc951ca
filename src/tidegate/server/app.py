"""The ASGI application: routing, auth, ids on every response, and the error boundary."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .. import metrics, tracing
from ..config.model import Config
from ..errors import MethodNotAllowed, NoProviderAvailable, NotFound, TidegateError, Unauthorized
from ..gateway.generation import Gateway
from ..gateway.health import route_key
from ..gateway.leases import Leases
from ..gateway.router import Router
from ..ids import new_ulid
from ..keys import Authenticator, unusable
from ..records import ApiKey
from ..store.base import GenerationStore
from ..store.facets import console_of
from ..store.open import open_store
from . import access_log, admin, heap, models, ops, rejections, replay
from .admin import console
from .bodies import UnfinishedBodies
from .doors import chat, embeddings, gemini, images, messages, responses
from .doors.gemini import handler as gemini_door
from .doors.messages import handler as messages_door
from .hosts import HostCheck
from .http import Receive, Request, Scope, Send
from .route import Found, Route, RouteTable
from .runtime import shortcuts
from .runtime.drain import Drain
from .state import AppState

log = logging.getLogger("tidegate.server")
HOUSEKEEPING_INTERVAL_S = 3600.0

# every endpoint that takes a key, one line per package that declares them (server/route.py)
ROUTES = RouteTable(
    (
        *chat.ROUTES,
        *responses.ROUTES,
        *messages.ROUTES,
        *gemini.ROUTES,
        *embeddings.ROUTES,
        *images.ROUTES,
        *admin.ROUTES,
        Route("POST", "/api/v1/llm/responses/replay", replay.replay),
    )
)
_EXIT_S = 0.1  # of a stop's bound, kept for the process to exit once the app's shutdown is over


def _route_label(found: Found) -> str:
    """Low-cardinality route label: a route's path as declared (ids and models in braces)."""
    if found.label is not None:
        return found.label
    path = found.path
    known = ("/v1/", "/v1beta/", "/api/v1/", "/healthz", "/readyz", "/metrics")
    return path if path.startswith(known) and len(path) < 64 else "other"


class TidegateApp:
    def __init__(self, config: Config, store: GenerationStore | None = None, *, settle_heap: bool = False) -> None:
        """`settle_heap`: a server worker freezes its startup heap and tunes the collector (server/heap.py)."""
        self.config = config
        self._settle_heap = settle_heap
        store = store or open_store(config.store.url)
        router = Router(config)
        gateway = Gateway(config, store, router)
        self.state = AppState(
            config=config,
            store=store,
            gateway=gateway,
            auth=Authenticator(store),
            leases=Leases(store, gateway.instance, config.server.lease_ttl_s),
            console=console_of(store),
        )
        self.bodies = UnfinishedBodies()
        self.hosts = HostCheck(config.server.allowed_hosts)
        self.rejections = rejections.Rejections(config, store, self.state.console)
        self.in_flight = 0  # API requests let in and not yet answered to the end: what the drain waits for
        self.drain = Drain(
            config.server.drain_s,
            self._not_ready,
            gateway.interrupt_all,
            lambda: len(gateway.running),
            lambda: self.in_flight,
        )
        self._access_log = config.server.log_requests

    def _not_ready(self) -> None:
        self.state.ready = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        req = Request.from_scope(scope, receive, send)
        found = ROUTES.find(req.path)
        refused = self.drain.refusing and found.generates
        # a probe, a console page or a refused generation is over at once: only the rest holds a drain
        holds_drain = req.path.startswith(("/v1/", "/v1beta/", "/api/v1/")) and not refused
        self.in_flight += holds_drain
        started = time.perf_counter()
        try:
            await self._dispatch(req, found, refused)
        except TidegateError as exc:
            if not req.started:
                if access_log.RECORD not in req.scope and rejections.recorded(req, exc, found.generates):
                    record = await self.rejections.refused(req, exc, _route_label(found))
                    req.scope[access_log.RECORD] = record
                await req.respond_error(exc)
        except Exception:
            log.exception("unhandled error on %s %s", req.method, req.path)
            if not req.started:
                await req.respond_json(
                    500,
                    {"error": {"code": "internal_error", "message": "internal error", "type": "server_error"}},
                )
        finally:
            self.in_flight -= holds_drain
            metrics.HTTP_REQUESTS.labels(_route_label(found), str(req.status)).inc()
            if self._access_log:
                access_log.write(req, time.perf_counter() - started)

    async def _dispatch(self, req: Request, found: Found, refused: bool) -> None:
        path = req.path
        if path.startswith(("/v1/", "/v1beta/", "/api/v1/")):
            req.generation_id = new_ulid()
            if messages_door.wants_anthropic_shape(req):  # its errors in Anthropic's shape, a 401 too
                req.error_shape = messages_door.anthropic_error
            elif gemini_door.wants_gemini_shape(req):  # Google's, on the Gemini door
                req.error_shape = gemini_door.gemini_error
        self.hosts.check(req)  # the endpoints without a key answer only to allowed Host names
        if refused:
            raise NoProviderAvailable(
                "this gateway is shutting down and starts no new generation: send it to another instance",
                code="shutting_down",
                retry_after=1,
            )
        if path == "/healthz":
            await ops.healthz(req)
            return
        if path == "/readyz":
            await ops.readyz(req, self.state, self.drain.draining)
            return
        if path == "/metrics":
            if not ops.on_loopback(req):  # docs/api-edges.md §14: no key on a loopback bind, a key otherwise
                await self._authenticate(req)
            await ops.metrics_endpoint(req, self.state)
            return
        if path == "/" or path == "/ui" or path.startswith("/ui/") or path == "/favicon.ico":
            await console.serve(req, self.state)
            return
        if path == "/v1/models":
            if req.method != "GET":
                raise MethodNotAllowed("use GET /v1/models")
            key = await self._authenticate(req)
            if req.error_shape is gemini_door.gemini_error:  # a google-genai client at API version v1
                await gemini_door.list_models(req, self.state, key)
                return
            if req.error_shape is not None:  # an Anthropic client: Anthropic's list shape
                await messages_door.list_models(req, self.config)
                return
            await models.list_models(req, self.config)
            return
        picked = found.pick(req.method)  # 405 for a route's path asked with another method
        if picked is not None:
            route, req.path_params = picked
            key = await self._authenticate(req)
            if req.method != "POST":
                await route.handler(req, self.state, key)
                return
            req.body_read = free = self.bodies.enter(key)
            try:
                await route.handler(req, self.state, key)
            finally:
                free()
            return
        req.scope[rejections.UNROUTED] = True
        raise NotFound(f"no endpoint {req.method} {path}")

    async def _authenticate(self, req: Request) -> ApiKey:
        key = await self._key_of(req)
        req.scope[access_log.KEY_NAME] = key.name
        req.scope[rejections.KEY] = key
        return key

    async def _key_of(self, req: Request) -> ApiKey:
        header = req.header("authorization")
        if header is None and req.error_shape is not None and (api_key := req.header("x-api-key")):
            header = f"Bearer {api_key}"  # Anthropic's own key header, on the Messages door (docs/agents.md)
        if header is None and req.error_shape is gemini_door.gemini_error:
            header = gemini_door.gemini_key(req)  # `x-goog-api-key` or `?key=`, on the Gemini door
        if header is None and (cookie := console.session_cookie(req)) is not None:
            return await console.session_key(req, self.state, cookie)  # the web console (server/admin/console.py)
        key = await self.state.auth.authenticate(header)
        if key is None:
            raise Unauthorized("missing or unknown API key: send 'Authorization: Bearer <key>'")
        reason = unusable(key, time.time())
        if reason is not None:
            raise Unauthorized(reason)
        return key

    async def _housekeeping(self) -> None:
        """Forget idempotency keys and logs past `store.retention_hours`, once an hour."""
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            try:
                await self.state.store.prune(time.time() - self.config.store.retention_hours * 3600)
                await self.state.console.prune(time.time(), self.config.logging.body_retention_s)
                if self.state.cache is not None:  # expired cache entries (a hit deletes its own lazily)
                    await self.state.cache.store.prune(time.time())
            except Exception:
                log.warning("retention pruning failed", exc_info=True)

    def _share_route_health(self) -> None:
        """With a store that shares route health (Redis), breakers open in every instance."""
        shared = self.state.store.route_health()
        if shared is None:
            return
        health = self.state.gateway.router.health
        health.shared = shared
        keys = sorted({route_key(r.provider, r.model) for m in self.config.models.values() for r in m.routes})
        self.state.tasks.add(asyncio.ensure_future(health.sync_forever(keys)))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message: dict[str, Any] = dict(await receive())
            if message["type"] == "lifespan.startup":
                try:
                    log.info("server shortcuts %s (server/runtime/shortcuts.py)", shortcuts.STATUS)
                    tracing.configure()
                    await self.state.store.open()
                    await console.open_sessions(self.state)
                    await self.state.leases.start()  # a lease, and one sweep, before /readyz
                    self.drain.install()
                    self.state.gateway.router.warm()
                    self.state.tasks.add(asyncio.ensure_future(self._housekeeping()))
                    self._share_route_health()
                    if self._settle_heap:
                        heap.settle()
                    self.state.ready = True
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.state.ready = False
                left = self.drain.remaining()  # a stop's bound (server/runtime/drain.py); None: no signal
                try:
                    async with asyncio.timeout(None if left is None else max(0.0, left - _EXIT_S)):
                        await self._shut_down()
                except TimeoutError:
                    log.error("stopping: the app's shutdown (lease, store) did not finish within the stop's bound")
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _shut_down(self) -> None:
        await self.drain.finish()
        for task in self.state.tasks:
            task.cancel()
        await asyncio.gather(*self.state.tasks, return_exceptions=True)
        await self.state.gateway.aclose()
        await self.state.leases.stop()
        await self.state.store.close()
