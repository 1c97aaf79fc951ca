"""The keys admin API and the usage report (docs/api-operations.md §11): `/api/v1/keys[/{id}[/credits]]`,
`/api/v1/usage`.

Bodies are validated by msgspec structs that refuse unknown fields; a change is checked whole before
anything is written, so a bad PATCH changes nothing. The secret is in the creation's answer only.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import msgspec

from ...config.model import CacheSettings
from ...errors import Forbidden, InvalidRequest, MethodNotAllowed, NotFound
from ...keys import make_key
from ...records import ApiKey, KeyLimits
from ...store.console import SeriesQuery
from ..http import Request
from ..state import AppState
from . import audit

Positive = Annotated[int, msgspec.Meta(ge=1, le=1_000_000_000)]
Usd = Annotated[float, msgspec.Meta(ge=0, le=1e9)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Label = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
METADATA_BYTES = 16_384
GROUPS = ("key", "model", "provider", "day")
DEFAULT_USAGE_S = 30 * 86_400


class Limits(msgspec.Struct, forbid_unknown_fields=True):
    rpm: Positive | None = None
    tpm: Positive | None = None
    concurrent: Positive | None = None


class KeyChange(msgspec.Struct, forbid_unknown_fields=True):
    """A PATCH: every field optional; `null` where the contract gives it a meaning (unlimited, none)."""

    name: Name | msgspec.UnsetType = msgspec.UNSET
    credits: Usd | msgspec.UnsetType | None = msgspec.UNSET
    budget_period: Literal["daily", "monthly"] | msgspec.UnsetType | None = msgspec.UNSET
    limits: Limits | msgspec.UnsetType = msgspec.UNSET
    models: Annotated[list[Label], msgspec.Meta(max_length=1000)] | msgspec.UnsetType | None = msgspec.UNSET
    expires_at: Annotated[float, msgspec.Meta(gt=0)] | msgspec.UnsetType | None = msgspec.UNSET
    admin: bool | msgspec.UnsetType = msgspec.UNSET
    log_bodies: bool | msgspec.UnsetType = msgspec.UNSET
    metadata: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    jurisdictions: Annotated[list[Label], msgspec.Meta(max_length=50)] | msgspec.UnsetType | None = msgspec.UNSET
    # the response cache: {ttl_s, max_bytes} wins over the model's; false: off; null: the model's
    cache: CacheSettings | bool | msgspec.UnsetType | None = msgspec.UNSET


class KeyCreate(KeyChange, forbid_unknown_fields=True):
    pass


class TopUp(msgspec.Struct, forbid_unknown_fields=True):
    amount: Annotated[float, msgspec.Meta(gt=0, le=1e9)]


def require_admin(key: ApiKey, what: str) -> None:
    if not (key.is_master or key.admin):
        raise Forbidden(f'{what} is an admin endpoint: use the master key or a key with "admin": true')


def _decode(raw: bytes, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"invalid key settings: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None


def _apply(key: ApiKey, change: KeyChange, state: AppState) -> None:
    """`change` onto `key`, after checking what the types cannot (the catalog, sizes, the clock)."""
    if change.models is not msgspec.UNSET and change.models is not None:
        unknown = [m for m in change.models if m not in state.config.models]
        if unknown:
            raise InvalidRequest(f"models: not in the catalog: {', '.join(sorted(unknown)[:10])}")
    if change.metadata is not msgspec.UNSET and len(msgspec.json.encode(change.metadata)) > METADATA_BYTES:
        raise InvalidRequest(f"metadata: at most {METADATA_BYTES} bytes of JSON")
    if change.expires_at not in (msgspec.UNSET, None) and float(change.expires_at) <= time.time():
        raise InvalidRequest("expires_at: must be in the future (Unix seconds)")
    for name in ("name", "credits", "budget_period", "expires_at", "admin", "log_bodies", "metadata"):
        value = getattr(change, name)
        if value is not msgspec.UNSET:
            setattr(key, name, value)
    for name in ("models", "jurisdictions"):  # lists in JSON, tuples on the key
        value = getattr(change, name)
        if value is not msgspec.UNSET:
            setattr(key, name, tuple(value) if value is not None else None)
    if change.limits is not msgspec.UNSET:
        key.limits = KeyLimits(change.limits.rpm, change.limits.tpm, change.limits.concurrent)
    if change.cache is True:
        raise InvalidRequest("cache: { ttl_s, max_bytes } to turn it on, false to turn it off, null for the model's")
    if change.cache is not msgspec.UNSET:
        key.cache = msgspec.to_builtins(change.cache) if isinstance(change.cache, CacheSettings) else change.cache


def _changed(change: KeyChange) -> dict[str, Any]:
    """The fields a change set, by name, as the audit log keeps them (a key's settings hold no secret)."""
    return {
        f: msgspec.to_builtins(getattr(change, f))
        for f in change.__struct_fields__
        if getattr(change, f) is not msgspec.UNSET
    }


async def _spend_series(state: AppState, key_id: str) -> list[dict[str, Any]]:
    """[{t, cost}] for the last 30 UTC days, oldest first, zeros where the key spent nothing."""
    end = (int(time.time()) // 86_400 + 1) * 86_400
    start = end - 30 * 86_400
    cost: dict[float, float] = {}
    for b in await state.console.series(SeriesQuery(86_400, start, end, "none", key_id=key_id)):
        cost[b.t] = cost.get(b.t, 0.0) + b.cost
    return [{"t": t, "cost": round(cost.get(float(t), 0.0), 10)} for t in range(start, end, 86_400)]


async def _found(state: AppState, key_id: str) -> ApiKey:
    key = await state.store.get_key(key_id)
    if key is None:
        raise NotFound(f"no API key {key_id}")
    return key


async def keys_collection(req: Request, state: AppState, caller: ApiKey) -> None:
    """POST creates (201, the secret once), GET lists."""
    require_admin(caller, "/api/v1/keys")
    if req.method == "GET":
        keys = [await state.store.get_key(k.id) for k in await state.store.list_keys()]
        await req.respond_json(200, {"object": "list", "data": [k.public() for k in keys if k is not None]})
        return
    if req.method != "POST":
        raise MethodNotAllowed("use GET or POST /api/v1/keys")
    change: KeyCreate = _decode(await req.body(state.config.server.max_body_bytes), KeyCreate)
    if change.name is msgspec.UNSET:
        raise InvalidRequest("name: required")
    key, secret = make_key(change.name)
    _apply(key, change, state)
    await state.store.create_key(key)
    await audit.record(state, caller, "key.create", key.id, _changed(change))
    await req.respond_json(201, {**key.public(), "key": secret})


async def key_item(req: Request, state: AppState, caller: ApiKey) -> None:
    """GET, PATCH, DELETE (revokes) one key."""
    require_admin(caller, "/api/v1/keys/{id}")
    key = await _found(state, req.path_params["id"])
    if req.method == "PATCH":
        change: KeyChange = _decode(await req.body(state.config.server.max_body_bytes), KeyChange)
        _apply(key, change, state)
        await state.store.save_key(key)
        await audit.record(state, caller, "key.update", key.id, _changed(change))
    elif req.method == "DELETE":
        key.revoked = True
        await state.store.save_key(key)
        await audit.record(state, caller, "key.revoke", key.id, {"name": key.name})
    elif req.method != "GET":
        raise MethodNotAllowed("use GET, PATCH or DELETE /api/v1/keys/{id}")
    else:  # the key page's chart: 30 daily costs from the rollups (one query over 30 day rows per group)
        await req.respond_json(200, {**key.public(), "spend_series": await _spend_series(state, key.id)})
        return
    await req.respond_json(200, key.public())


async def key_credits(req: Request, state: AppState, caller: ApiKey) -> None:
    """POST adds `amount` USD to the key's credits."""
    require_admin(caller, "/api/v1/keys/{id}/credits")
    key = await _found(state, req.path_params["id"])
    top: TopUp = _decode(await req.body(state.config.server.max_body_bytes), TopUp)
    if key.credits is None:
        raise InvalidRequest(f"key {key.id} has unlimited credits: set credits with PATCH first")
    updated = await state.store.top_up(key.id, top.amount)
    if updated is None:
        raise NotFound(f"no API key {key.id} with credits")
    await audit.record(state, caller, "key.credits", key.id, {"amount": top.amount, "credits": updated.credits})
    await req.respond_json(200, updated.public())


def _seconds(req: Request, name: str, default: float) -> float:
    raw = req.query(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"{name}: Unix seconds expected") from None
    if not 0 <= value < 1e11:
        raise InvalidRequest(f"{name}: Unix seconds expected")
    return value


async def usage_report(req: Request, state: AppState, caller: ApiKey) -> None:
    require_admin(caller, "/api/v1/usage")
    now = time.time()
    end = _seconds(req, "to", now)
    start = _seconds(req, "from", end - DEFAULT_USAGE_S)
    group_by = req.query("group_by") or "key"
    if group_by not in GROUPS:
        raise InvalidRequest(f"group_by: one of {', '.join(GROUPS)}")
    if start > end:
        raise InvalidRequest("from: must not be after to")
    rows = await state.store.usage(start, end, group_by)
    rows.sort(key=lambda r: (r["group"] is None, str(r["group"])))
    await req.respond_json(200, {"object": "list", "data": rows})
