"""What an operator should check when an upstream refuses: one sentence per status, shared by the
runtime errors (`transport.HttpProvider`, the embedding providers) and the start probe
(`listing.py`), so both name the same setting. A credential is named by its variable, never its value.
"""

from __future__ import annotations

from ..config.model import ProviderConfig

# what a 404 at the kind's base URL most likely means
BASE_URL_HINTS = {
    "openai": "check that base_url ends with /v1 (the path before /chat/completions)",
    "anthropic": "check base_url: the host without /v1 (tidegate adds /v1/messages)",
    "gemini": "check that base_url includes the API version (e.g. .../v1beta)",
}


def credential_of(config: ProviderConfig) -> str:
    env = config.api_key_env or config.access_token_env
    return f"${env}" if env else "the provider's credential"


def what_to_check(status: int, config: ProviderConfig) -> str:
    """The operator's next step for an upstream status, or "" when the status says nothing about setup.
    The message it ends already names the provider: this names its settings only."""
    if status in (401, 403):
        return f"check the credential in {credential_of(config)}"
    if status == 404:
        base = BASE_URL_HINTS.get(config.kind, "check base_url")
        return f"{base} and that the route's model exists upstream"
    return ""
