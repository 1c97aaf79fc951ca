"""The Gemini `generateContent` request body from a canonical chat request (the `gemini` kind).

Sources of the wire format: the Gemini API reference (ai.google.dev/api: `GenerateContentRequest`,
`Content`, `Part`, `GenerationConfig`, `ThinkingConfig`, `Tool.functionDeclarations`,
`ToolConfig.functionCallingConfig`) and the google-genai SDK types. OpenAI messages become
`contents` with roles `user` and `model`; system and developer text becomes `systemInstruction`;
a tool result becomes a `functionResponse` part in a user turn (the calls of one assistant turn
answered together); an image is `inlineData` (base64 data URLs only: the Gemini API reads remote
images from uploaded files, not from any URL).
"""

from __future__ import annotations

from typing import Any

import orjson

from ...errors import ProviderFailure, quote
from ...request import GenerationRequest
from ..anthropic.request import EFFORT_BUDGETS, IMAGE_MEDIA_TYPES, add_turn, call_arguments


def _invalid(message: str) -> ProviderFailure:
    return ProviderFailure("invalid_request", message, status=400, retriable=False)


def _parts(content: Any, where: str, *, images: bool) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        pw = f"{where}.content[{j}]"
        ptype = part.get("type") if isinstance(part, dict) else None
        if ptype in ("text", "input_text", "output_text"):
            if part.get("text"):
                parts.append({"text": str(part["text"])})
        elif ptype == "image_url" and images:
            parts.append(_image(part, pw))
        else:
            raise _invalid(f"'{pw}.type' {quote(ptype)} is not supported by this provider")
    return parts


def _image(part: dict[str, Any], where: str) -> dict[str, Any]:
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str) or not url.startswith("data:"):
        raise _invalid(f"'{where}.image_url.url' must be a base64 data: URL for a gemini provider")
    header, sep, data = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    if not sep or encoding != "base64" or media_type not in IMAGE_MEDIA_TYPES:
        raise _invalid(f"'{where}.image_url.url': a base64 data URL of {', '.join(IMAGE_MEDIA_TYPES)}")
    return {"inlineData": {"mimeType": media_type, "data": data}}


def _signature(details: Any) -> str | None:
    """The thought signature the model returned with this turn (reasoning_details), to send back."""
    for d in details or []:
        if isinstance(d, dict) and isinstance(d.get("signature"), str) and d["signature"]:
            return str(d["signature"])
    return None


def _calls(message: dict[str, Any], where: str, names: dict[str, str]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for j, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        args = call_arguments(fn, f"{where}.tool_calls[{j}]")
        names[str(call.get("id"))] = str(fn.get("name"))
        parts.append({"functionCall": {"name": str(fn.get("name")), "args": args}})
    return parts


def _tool_result(message: dict[str, Any], where: str, names: dict[str, str]) -> dict[str, Any]:
    call_id = str(message.get("tool_call_id"))
    name = names.get(call_id)
    if name is None:
        raise _invalid(f"'{where}.tool_call_id' {quote(call_id)} answers no earlier assistant tool call")
    content = message.get("content")
    text = (
        content
        if isinstance(content, str)
        else "".join(p.get("text", "") for p in _parts(content, where, images=False))
    )
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    response = value if isinstance(value, dict) else {"result": text}  # `response` must be an object
    return {"functionResponse": {"name": name, "response": response}}


def contents_of(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """OpenAI chat messages → (systemInstruction parts, alternating `contents`)."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id → function name (a functionResponse names the function)

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        add_turn(contents, role, parts, "parts")

    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role")
        if role in ("system", "developer"):
            system.extend(_parts(m.get("content"), where, images=False))
        elif role == "user":
            add("user", _parts(m.get("content"), where, images=True))
        elif role == "tool":
            add("user", [_tool_result(m, where, names)])
        elif role == "assistant":
            parts = _parts(m.get("content"), where, images=False) + _calls(m, where, names)
            signature = _signature(m.get("reasoning_details"))
            if parts and signature:
                parts[0] = {**parts[0], "thoughtSignature": signature}
            add("model", parts)
        else:
            raise _invalid(f"'{where}.role' {quote(role)} is not supported by this provider")
    if not contents:
        raise _invalid("'messages' needs at least one user message with content")
    return system, contents


def _tool_config(request: GenerationRequest) -> dict[str, Any] | None:
    choice = request.tool_choice
    if choice is None:
        return None
    if choice in ("auto", "none", "required"):
        mode = {"auto": "AUTO", "none": "NONE", "required": "ANY"}[str(choice)]
        return {"functionCallingConfig": {"mode": mode}}
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(name, str):
        raise _invalid("'tool_choice' must be 'auto', 'none', 'required' or {type: function, function: {name}}")
    return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}


def _generation_config(request: GenerationRequest) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    if request.temperature is not None:
        config["temperature"] = float(request.temperature)
    if request.top_p is not None:
        config["topP"] = float(request.top_p)
    if request.stop:
        config["stopSequences"] = list(request.stop)
    if request.seed is not None:
        config["seed"] = request.seed
    rf = request.response_format or {}
    if rf.get("type") in ("json_object", "json_schema"):
        config["responseMimeType"] = "application/json"
        spec = rf.get("json_schema")
        if isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
            config["responseJsonSchema"] = spec["schema"]
    r = request.reasoning
    if r is not None and (r.max_tokens is not None or (r.effort is not None and r.effort != "none")):
        budget = r.max_tokens if r.max_tokens is not None else EFFORT_BUDGETS.get(r.effort or "", 8192)
        config["thinkingConfig"] = {"thinkingBudget": budget, "includeThoughts": not r.exclude}
    elif r is not None and r.effort == "none":
        config["thinkingConfig"] = {"thinkingBudget": 0}
    return config


def gemini_body(request: GenerationRequest) -> dict[str, Any]:
    """The `generateContent` / `streamGenerateContent` body (the model is in the URL)."""
    system, contents = contents_of(request.messages)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": system}
    config = _generation_config(request)
    if config:
        body["generationConfig"] = config
    if request.tools:
        declarations = []
        for t in request.tools:
            fn = t.get("function") or {}
            declaration: dict[str, Any] = {"name": fn.get("name")}
            if fn.get("description"):
                declaration["description"] = fn["description"]
            if fn.get("parameters"):
                declaration["parametersJsonSchema"] = fn["parameters"]
            declarations.append(declaration)
        body["tools"] = [{"functionDeclarations": declarations}]
        tool_config = _tool_config(request)
        if tool_config is not None:
            body["toolConfig"] = tool_config
    return body
