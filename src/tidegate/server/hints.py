"""A request's session hints (docs/sessions.md): which agent sent it, in which session,
and the hint fields as sent, for the generation record (`agent_session`, `hints`) and prompt-cache
affinity (gateway/affinity.py). Read once per request from the body the door already parsed.

The session, first found wins:
1. `prompt_cache_key` (Responses and chat doors): Codex CLI sends its conversation id there;
2. the session inside the Messages door's `metadata.user_id`: Claude Code's
   `user_<hash>_account_<uuid>_session_<uuid>`, or the JSON object `{"session_id": ...}`;
3. `user` (Responses and chat doors), or the Messages door's whole `metadata.user_id`.
The Gemini API has no session field: a Gemini door request has none (its agent still shows).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..doors import Door
from ..request import SessionHints

# the fields each door's hints come from (the doors' request parsers checked their types)
DOOR_HINTS: dict[Door, tuple[str, ...]] = {
    Door.RESPONSES: ("prompt_cache_key", "client_metadata", "safety_identifier", "user", "metadata"),
    Door.NATIVE: ("metadata",),
    Door.CHAT: ("prompt_cache_key", "safety_identifier", "user", "metadata"),
    Door.MESSAGES: ("metadata",),
    Door.GEMINI: (),
}
_AGENTS = (
    ("codex", "codex"),
    ("claude-cli", "claude-code"),
    ("claude-code", "claude-code"),
    ("geminicli", "gemini-cli"),
    ("gemini-cli", "gemini-cli"),
)
MAX_STRING = 256  # characters a hint's string keeps
MAX_KEYS = 16  # entries a hint object keeps
MAX_HINTS_BYTES = 2048  # the stored object's JSON at most (then its objects are left out)
# a hint object's entries whose name says they hold a credential are never stored
_SECRET_NAMES = ("secret", "token", "password", "passwd", "api_key", "apikey", "authorization", "credential")


def agent_of(door: Door, user_agent: str | None, claude_shaped: bool) -> str:
    """The agent by its User-Agent (`codex_exec/…`, `claude-cli/…`, `GeminiCLI/…`), else by the
    hints' shape (Claude Code's `metadata.user_id`), else `other`."""
    ua = (user_agent or "").lower()
    for needle, agent in _AGENTS:
        if needle in ua:
            return agent
    return "claude-code" if door == Door.MESSAGES and claude_shaped else "other"


def claude_session(user_id: str) -> str | None:
    """The session in Claude Code's `metadata.user_id`, in either of the shapes it has sent."""
    if user_id.startswith("{"):
        try:
            parsed = orjson.loads(user_id)
        except orjson.JSONDecodeError:
            return None
        found = parsed.get("session_id") if isinstance(parsed, dict) else None
        return found[:MAX_STRING] if isinstance(found, str) and found else None
    head, sep, session = user_id.rpartition("_session_")
    return session[:MAX_STRING] if sep and head.startswith("user_") and session else None


def _capped(value: Any) -> Any:
    if isinstance(value, str):
        return value[:MAX_STRING]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if len(out) == MAX_KEYS:
                break
            name = str(k)[:64]
            if not any(s in name.lower() for s in _SECRET_NAMES):
                out[name] = v[:MAX_STRING] if isinstance(v, str) else _capped(orjson.dumps(v).decode())
        return out
    return None


def _size_capped(hints: dict[str, Any]) -> dict[str, Any]:
    if len(orjson.dumps(hints)) <= MAX_HINTS_BYTES:
        return hints
    kept = {k: v for k, v in hints.items() if not isinstance(v, dict)}  # the objects go first
    kept["truncated"] = True
    return kept


def session_hints(door: Door, body: Any, user_agent: str | None) -> SessionHints | None:
    """The request's hints; None for a door with none (images) or a request with neither a hint
    nor a known agent."""
    fields = DOOR_HINTS.get(door)
    if fields is None or not isinstance(body, dict):
        return None
    hints: dict[str, Any] = {}
    for name in fields:
        value = _capped(body.get(name))
        if value is not None and value != {}:
            hints[name] = value
    user_id = (body.get("metadata") or {}).get("user_id") if door == Door.MESSAGES else None
    user_id = user_id if isinstance(user_id, str) and user_id else None
    from_claude = claude_session(user_id) if user_id else None
    agent = agent_of(door, user_agent, from_claude is not None)
    if not hints and agent == "other":
        return None
    session = hints.get("prompt_cache_key") or from_claude or hints.get("user") or (user_id and user_id[:MAX_STRING])
    return SessionHints(session=session or None, agent=agent, hints=_size_capped({"agent": agent, **hints}))
