"""No conversation crosses keys (docs/security.md, "Conversations"): the ids a Responses API upstream
resolves (`previous_response_id`, `conversation`, an `item_reference` input item) must belong to the
key that sends them, or the request is a 404 before anything reaches an upstream; and the ids an
upstream hands a key (its response's id and its output items' ids) are bound to that key before the
answer's terminal event goes out.

A request that carries none of these ids costs nothing here; one that does costs one store read
(plus one record read for an id the gateway minted itself on a translated route, `resp_<generation
id>`, which the generation's record owns). An id the gateway never saw bound is refused too: it was
not handed out through it. Admin and master keys get no exception: they read other keys'
generations through the generations API, never by continuing their conversations.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ....errors import InvalidRequest, ResponseNotFound, quote
from ....records import ApiKey
from ....store.facets import owners_of
from ....store.owners import KEPT_S, OwnerStore
from ...state import AppState

log = logging.getLogger("tidegate.server")

MINTED = "resp_"  # the gateway's own response ids: `resp_<generation id>` (render/responses.py)


def _store(state: AppState) -> OwnerStore:
    if state.owners is None:
        state.owners = owners_of(state.store)
    return state.owners


def _is_reference(item: dict[str, Any]) -> bool:
    """An input item that stands for a stored item by its id alone (the API's `ItemReference`,
    whose `type` may be left out)."""
    itype = item.get("type")
    return itype == "item_reference" or (itype is None and "role" not in item and "id" in item)


def claimed_ids(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, id) of every id in the body that an upstream would resolve to stored state."""
    out: list[tuple[str, str]] = []
    previous = body.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str) or not previous:
            raise InvalidRequest("'previous_response_id' must be a non-empty string")
        out.append(("previous_response_id", previous))
    conversation = body.get("conversation")
    if conversation is not None:
        cid = conversation.get("id") if isinstance(conversation, dict) else conversation
        if not isinstance(cid, str) or not cid:
            raise InvalidRequest("'conversation' must be a conversation id or an object with an 'id'")
        out.append(("conversation", cid))
    items = body.get("input")
    if isinstance(items, list):
        for i, item in enumerate(items):
            if isinstance(item, dict) and _is_reference(item):
                rid = item.get("id")
                if not isinstance(rid, str) or not rid:
                    raise InvalidRequest(f"'input[{i}].id' must be a non-empty string")
                out.append((f"input[{i}].id", rid))
    return out


async def _minted_by(state: AppState, key: ApiKey, rid: str) -> bool:
    """Whether `rid` is the gateway's own id of one of this key's generations."""
    if not rid.startswith(MINTED) or not rid[len(MINTED) :].isalnum():
        return False
    record = await state.store.get_generation(rid[len(MINTED) :])
    return record is not None and record.key_id == key.id


async def check_owner(state: AppState, key: ApiKey, body: dict[str, Any]) -> None:
    """A 404 when the body names an id that is not this key's (nor anyone's: no oracle)."""
    claimed = claimed_ids(body)
    if not claimed:
        return
    owners = await _store(state).owners(list(dict.fromkeys(rid for _, rid in claimed)), time.time())
    for where, rid in claimed:
        owner = owners.get(rid)
        if owner == key.id or (owner is None and await _minted_by(state, key, rid)):
            continue
        raise ResponseNotFound(f"'{where}' {quote(rid)} was not found")


def handed_out(response: dict[str, Any] | None) -> list[str]:
    """The ids an upstream's final `response` object gives its client: its own and its output items'."""
    if not isinstance(response, dict):
        return []
    ids = [response.get("id")]
    output = response.get("output")
    if isinstance(output, list):
        ids.extend(item.get("id") for item in output if isinstance(item, dict))
    return [i for i in ids if isinstance(i, str) and i]


async def bind(state: AppState, key: ApiKey, response: dict[str, Any] | None) -> None:
    """Bind what an upstream's answer handed out to `key`. A store failure is logged, never the
    answer's: the ids stay unbound, so continuing from them is refused (fails closed)."""
    ids = handed_out(response)
    if not ids:
        return
    try:
        await _store(state).bind(key.id, ids, time.time() + KEPT_S)
    except Exception:
        log.warning("binding %d response ids to key %s failed", len(ids), key.id, exc_info=True)
