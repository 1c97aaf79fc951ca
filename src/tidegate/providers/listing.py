"""The cheapest authenticated call of each HTTP kind that has one: its model list (`GET .../models`).

`tidegate check-config` and `serve`'s start probe call it to learn whether a base URL answers as the
kind's API and whether the credential is accepted, without sending a generation. The answer is
judged here; probe.py words it. Kinds whose listing needs a signature or an OAuth token (bedrock,
vertex, Gemini on Vertex) have none: a TCP connect is their probe.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import orjson

from ..config.model import ProviderConfig
from .hints import BASE_URL_HINTS, credential_of
from .http.connect import ConnectFailed
from .http.connection import UpstreamHttpError
from .http.transport import http_client_for

PROBE_TIMEOUT_S = 3.0
MAX_LISTING_BODY = 1 << 20


@dataclass(frozen=True, slots=True)
class Listing:
    url: str
    headers: dict[str, str]
    field: str  # the JSON list a real answer carries ("data" for OpenAI and Anthropic, "models" for Gemini)
    base_hint: str  # what a 404 there most likely means


@dataclass(frozen=True, slots=True)
class ListingAnswer:
    ok: bool
    detail: str


def _key(p: ProviderConfig) -> str:
    return os.environ.get(p.api_key_env, "") if p.api_key_env else ""


def openai_listing(p: ProviderConfig) -> Listing | None:
    if not p.base_url:
        return None
    headers = dict(p.headers)
    if key := _key(p):
        headers["authorization"] = f"Bearer {key}"
    return Listing(p.base_url.rstrip("/") + "/models", headers, "data", BASE_URL_HINTS["openai"])


def anthropic_listing(p: ProviderConfig) -> Listing:
    from .anthropic.messages import ANTHROPIC_VERSION, DEFAULT_BASE_URL

    headers = {"anthropic-version": ANTHROPIC_VERSION}
    if key := _key(p):
        headers["x-api-key"] = key
    url = (p.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/models"
    return Listing(url, headers, "data", BASE_URL_HINTS["anthropic"])


def gemini_listing(p: ProviderConfig) -> Listing | None:
    from .google.gemini import GOOGLE_AI_BASE_URL

    if p.project is not None:  # Gemini on Vertex: OAuth, probed by a connect
        return None
    headers = {"x-goog-api-key": key} if (key := _key(p)) else {}
    url = (p.base_url or GOOGLE_AI_BASE_URL).rstrip("/") + "/models"
    return Listing(url, headers, "models", BASE_URL_HINTS["gemini"])


def _judge(listing: Listing, credential: str, status: int, body: bytes) -> ListingAnswer:
    where = f"GET {listing.url}"
    if status in (401, 403):
        return ListingAnswer(
            False, f"{where} answered {status}: the upstream refused the credential; check {credential}"
        )
    if status == 404:
        return ListingAnswer(False, f"{where} answered 404: {listing.base_hint}")
    if status >= 300:
        return ListingAnswer(False, f"{where} answered HTTP {status}")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get(listing.field), list):
        return ListingAnswer(False, f"{where} answered 200 but not with a model list: {listing.base_hint}")
    return ListingAnswer(True, f"{where} answered 200")


async def call_listing(p: ProviderConfig, listing: Listing) -> ListingAnswer:
    """One GET through the provider's own connection settings (proxy, TLS); never raises."""
    credential = credential_of(p)
    client = http_client_for(p.name, PROBE_TIMEOUT_S, p)
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S * 2):
            response = await client.request("GET", listing.url, {"accept": "application/json", **listing.headers})
            try:
                body = await response.read(MAX_LISTING_BODY)
            finally:
                response.close()
    except TimeoutError:
        return ListingAnswer(False, f"GET {listing.url}: no answer within {PROBE_TIMEOUT_S * 2:g} s")
    except (ConnectFailed, UpstreamHttpError, OSError, ValueError) as exc:
        return ListingAnswer(False, f"GET {listing.url}: {exc}")
    finally:
        await client.aclose()
    return _judge(listing, credential, response.status, body)
