"""Gemini API request bodies (`generateContent`, `streamGenerateContent`) → `GenerationRequest`.

The wire format is the Gemini API reference's `GenerateContentRequest` (`contents`, `systemInstruction`,
`tools`, `toolConfig`, `safetySettings`, `generationConfig`, `cachedContent`) as the google-genai SDKs
send it (camelCase). Contents become OpenAI-chat-shaped messages, the canonical form every provider
builds from:
- `systemInstruction` → a system message; `user` / `model` turns → user / assistant messages;
- `text` parts → text; `inlineData` images → `image_url` data URLs; `functionCall` parts → the
  assistant's `tool_calls` (the call's `id`, else one made from its place); `functionResponse`
  parts → `tool` messages, matched to their call by `id`, else by name in order;
- a `thoughtSignature` tidegate wrote (render/gemini.py: the thinking of a translated route, packed
  with its own signature) → the turn's `reasoning_details`, so that route can check its own thinking;
  thought text without one is not sent back (the Gemini API does not read it either);
- `generationConfig` sampling fields, `thinkingConfig` (budget or level → the route's thinking),
  `responseMimeType: application/json` with `responseSchema` / `responseJsonSchema` → structured output;
- function declarations → functions (`parameters` in the API's OpenAPI subset → JSON Schema);
  `functionCallingConfig` → `tool_choice`.

What only a Gemini route can honour (a hosted tool such as `googleSearch`, `cachedContent`, a part
kind the canonical form has no room for, `topK`, a safety threshold that blocks more) goes to `only`
by its place: a route of kind `gemini` gets the body as sent, every other route refuses it by that
name (providers/fidelity.py).
"""

from __future__ import annotations

from typing import Any

import orjson

from ....errors import InvalidRequest, quote
from ....gateway.routing import parse_provider_prefs
from ....render.gemini import SKIP_SIGNATURE, unpack_reasoning
from ....request import AsSent, GenerationRequest, ReasoningOptions, WireFormat

# the fields of GenerateContentRequest (REST reference) the door reads; `provider` is tidegate's routing
FIELDS = frozenset(
    {
        "contents",
        "systemInstruction",
        "tools",
        "toolConfig",
        "safetySettings",
        "generationConfig",
        "cachedContent",
        "labels",
        "model",
        "provider",
    }
)
# generationConfig fields with a canonical meaning, or whose neutral value asks for nothing
NEUTRAL_CONFIG: dict[str, tuple[Any, ...]] = {
    "candidateCount": (1,),
    "presencePenalty": (0, 0.0),
    "frequencyPenalty": (0, 0.0),
    "responseLogprobs": (False,),
    "responseModalities": (["TEXT"], ["text"], []),
    "enableEnhancedCivicAnswers": (False,),
}
# sampling fields no other API has room for: a route that is not `gemini` leaves them out and says so
# in `X-Tidegate-Dropped` (Gemini CLI sends `topK: 64` on every request: refusing it would refuse
# every translated route)
DROPPED_CONFIG = frozenset({"topK"})
READ_CONFIG = frozenset(
    {
        "maxOutputTokens",
        "temperature",
        "topP",
        "stopSequences",
        "seed",
        "responseMimeType",
        "responseSchema",
        "responseJsonSchema",
        "_responseJsonSchema",
        "thinkingConfig",
    }
)
# thresholds that block nothing: what a route without Google's filters does anyway
OPEN_THRESHOLDS = frozenset({"BLOCK_NONE", "OFF", "HARM_BLOCK_THRESHOLD_UNSPECIFIED"})
LEVELS = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high"}
THINKING = "generationConfig.thinkingConfig"  # what a refusal of its thinking names


def _camel(obj: dict[str, Any]) -> dict[str, Any]:
    """One level of field names in lowerCamelCase: the API reads protobuf JSON, which takes a field's
    proto name too (`include_thoughts`), and the Python SDK sends some of those (inside `thinkingConfig`).
    Applied to the request's own objects only, never to what a client put in them (args, schemas)."""
    if not any("_" in k[1:] for k in obj):
        return obj
    out = {}
    for k, v in obj.items():
        head, *rest = k.split("_") if not k.startswith("_") else (k,)
        out[head + "".join(w[:1].upper() + w[1:] for w in rest)] = v
    return out


def _schema(value: Any) -> Any:
    """The API's OpenAPI-subset `Schema` (upper-case `type`, `nullable`, `propertyOrdering`) → JSON Schema."""
    if isinstance(value, list):
        return [_schema(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k == "type" and isinstance(v, str):
            out["type"] = v.lower()
        elif k in ("properties", "$defs", "definitions") and isinstance(v, dict):
            out[k] = {name: _schema(s) for name, s in v.items()}
        elif k in ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
            out[k] = _schema(v)
        elif k in ("nullable", "propertyOrdering"):
            continue
        else:
            out[k] = v
    if value.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


class _Contents:
    """Builds the chat messages from `contents`; calls wait in `pending` for their responses."""

    def __init__(self, only: dict[str, Any]) -> None:
        self.only = only
        self.out: list[dict[str, Any]] = []
        self.pending: list[tuple[str, str]] = []  # (call id, function name) not yet answered

    def turn(self, content: Any, where: str) -> None:
        if not isinstance(content, dict):
            raise InvalidRequest(f"'{where}' must be a Content object ({{'role', 'parts'}})")
        content = _camel(content)
        role = content.get("role") or "user"
        parts = content.get("parts")
        if not isinstance(parts, list):
            raise InvalidRequest(f"'{where}.parts' must be an array of parts")
        if role == "model":
            self._model(parts, where)
        elif role in ("user", "function"):
            self._user(parts, where)
        else:
            raise InvalidRequest(f"'{where}.role' must be 'user' or 'model', got {quote(role)}")

    def _part(self, part: Any, where: str) -> dict[str, Any]:
        if not isinstance(part, dict):
            raise InvalidRequest(f"'{where}' must be a Part object")
        fields = _camel(part)
        for name in fields:
            if name in ("videoMetadata", "fileData", "executableCode", "codeExecutionResult", "mediaResolution"):
                self.only[f"{where}.{name}"] = fields[name]
        return fields

    def _user(self, parts: list[Any], where: str) -> None:
        content: list[dict[str, Any]] = []
        for j, raw in enumerate(parts):
            pw = f"{where}.parts[{j}]"
            part = self._part(raw, pw)
            if "functionResponse" in part:
                self.out.append(self._response(part["functionResponse"], pw))
            elif isinstance(part.get("text"), str):
                if part["text"] and part.get("thought") is not True:
                    content.append({"type": "text", "text": part["text"]})
            elif "inlineData" in part:
                image = self._image(part["inlineData"], pw)
                if image is not None:
                    content.append(image)
        if content:
            self.out.append({"role": "user", "content": content})

    def _image(self, data: Any, where: str) -> dict[str, Any] | None:
        if not isinstance(data, dict) or not isinstance(data.get("data"), str):
            raise InvalidRequest(f"'{where}.inlineData' must be {{'mimeType', 'data' (base64)}}")
        data = _camel(data)
        mime = str(data.get("mimeType") or "")
        if not mime.startswith("image/"):  # audio, video, PDF: only Gemini reads them
            self.only[f"{where}.inlineData"] = mime
            return None
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data['data']}"}}

    def _response(self, response: Any, where: str) -> dict[str, Any]:
        if not isinstance(response, dict) or not isinstance(response.get("name"), str):
            raise InvalidRequest(f"'{where}.functionResponse' must have a 'name' and a 'response' object")
        if response.get("parts"):
            self.only[f"{where}.functionResponse.parts"] = True
        name, cid = response["name"], response.get("id")
        match = next((p for p in self.pending if p[0] == cid), None) if isinstance(cid, str) and cid else None
        match = match or next((p for p in self.pending if p[1] == name), None)
        if match is None:
            raise InvalidRequest(f"'{where}.functionResponse' answers no earlier functionCall of {quote(name)}")
        self.pending.remove(match)
        payload = response.get("response")
        text = payload if isinstance(payload, str) else orjson.dumps(payload if payload is not None else {}).decode()
        return {"role": "tool", "tool_call_id": match[0], "content": text}

    def _model(self, parts: list[Any], where: str) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": None}
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        details: list[dict[str, Any]] = []
        for j, raw in enumerate(parts):
            pw = f"{where}.parts[{j}]"
            part = self._part(raw, pw)
            signature = part.get("thoughtSignature")
            if isinstance(signature, str) and signature != SKIP_SIGNATURE:
                details.extend(unpack_reasoning(signature) or [])
            call = part.get("functionCall")
            if isinstance(call, dict):
                calls.append(self._call(call, f"{pw}.functionCall", len(self.out), j))
            elif isinstance(part.get("text"), str) and part.get("thought") is not True:
                texts.append(part["text"])
        if texts:
            message["content"] = "".join(texts)
        if calls:
            message["tool_calls"] = calls
        if details:
            message["reasoning_details"] = details
        if texts or calls or details:
            self.out.append(message)

    def _call(self, call: dict[str, Any], where: str, turn: int, j: int) -> dict[str, Any]:
        name = call.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"'{where}.name' must be a non-empty string")
        args = call.get("args")
        if args is not None and not isinstance(args, dict):
            raise InvalidRequest(f"'{where}.args' must be an object")
        cid = call.get("id")
        cid = cid if isinstance(cid, str) and cid else f"call_{turn}_{j}"
        self.pending.append((cid, name))
        arguments = orjson.dumps(args or {}).decode()
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def _system(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("systemInstruction")
    if isinstance(raw, dict):
        raw = _camel(raw)
    if raw is None:
        return []
    if isinstance(raw, str):  # (the SDKs send a Content; the REST API also takes a bare string)
        return [{"role": "system", "content": raw}] if raw else []
    parts = raw.get("parts") if isinstance(raw, dict) else None
    if not isinstance(parts, list):
        raise InvalidRequest("'systemInstruction' must be a Content object with text parts")
    texts = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise InvalidRequest(f"'systemInstruction.parts[{j}]' must be a text part")
        texts.append(part["text"])
    text = "\n".join(t for t in texts if t)
    return [{"role": "system", "content": text}] if text else []


def _tools(body: dict[str, Any], only: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("tools")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest("'tools' must be an array of Tool objects")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise InvalidRequest(f"'tools[{i}]' must be a Tool object")
        for kind, value in _camel(tool).items():
            if kind != "functionDeclarations":
                only[f"tools[{i}].{kind}"] = value  # googleSearch, codeExecution, urlContext, ...: Google runs them
                continue
            if not isinstance(value, list):
                raise InvalidRequest(f"'tools[{i}].functionDeclarations' must be an array")
            for k, decl in enumerate(value):
                out.append(_declaration(decl, f"tools[{i}].functionDeclarations[{k}]", only))
    return out


def _declaration(decl: Any, where: str, only: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(decl, dict) or not isinstance(decl.get("name"), str) or not decl["name"]:
        raise InvalidRequest(f"'{where}.name' must be a non-empty string")
    decl = _camel(decl)
    fn: dict[str, Any] = {"name": decl["name"]}
    if isinstance(decl.get("description"), str):
        fn["description"] = decl["description"]
    schema = decl.get("parametersJsonSchema")
    if schema is None and decl.get("parameters") is not None:
        schema = _schema(decl["parameters"])
    fn["parameters"] = schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
    if decl.get("behavior") not in (None, "BLOCKING", "UNSPECIFIED"):
        only[f"{where}.behavior"] = decl["behavior"]
    return {"type": "function", "function": fn}


def _tool_choice(body: dict[str, Any], only: dict[str, Any]) -> Any:
    config = body.get("toolConfig")
    if config is None:
        return None
    if not isinstance(config, dict):
        raise InvalidRequest("'toolConfig' must be an object")
    config = _camel(config)
    for name in config:
        if name != "functionCallingConfig":
            only[f"toolConfig.{name}"] = config[name]
    fcc = config.get("functionCallingConfig") or {}
    fcc = _camel(fcc) if isinstance(fcc, dict) else {}
    mode = fcc.get("mode") or "AUTO"
    names = fcc.get("allowedFunctionNames") or []
    if mode in ("AUTO", "MODE_UNSPECIFIED"):
        return None
    if mode == "NONE":
        return "none"
    if mode == "ANY" and len(names) == 1:
        return {"type": "function", "function": {"name": names[0]}}
    if mode == "ANY" and not names:
        return "required"
    if mode == "ANY":
        only["toolConfig.functionCallingConfig.allowedFunctionNames"] = names
        return "required"
    only["toolConfig.functionCallingConfig.mode"] = mode  # VALIDATED: Gemini's own constrained decoding
    return None


def _thinking(config: dict[str, Any]) -> ReasoningOptions | None:
    """`thinkingConfig`: a budget (0 off, -1 the model's own choice) or a level. `includeThoughts`
    alone asks for no thinking: it says whether thinking is shown (as `reasoning.summary` does)."""
    raw = config.get("thinkingConfig")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("'generationConfig.thinkingConfig' must be an object")
    raw = _camel(raw)
    budget, level = raw.get("thinkingBudget"), raw.get("thinkingLevel")
    shown = raw.get("includeThoughts") is True
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < -1):
        raise InvalidRequest("'generationConfig.thinkingConfig.thinkingBudget' must be an integer >= -1")
    if level is not None and level not in LEVELS and level != "THINKING_LEVEL_UNSPECIFIED":
        raise InvalidRequest(f"'generationConfig.thinkingConfig.thinkingLevel' must be one of {', '.join(LEVELS)}")
    if budget == 0:
        return ReasoningOptions(effort="none", field=THINKING)
    if isinstance(level, str) and level in LEVELS:
        return ReasoningOptions(effort=LEVELS[level], exclude=not shown, field=THINKING)
    if budget == -1:
        return ReasoningOptions(effort="medium", exclude=not shown, field=THINKING)
    if isinstance(budget, int):
        effort = "low" if budget <= 2048 else "medium" if budget <= 16384 else "high"
        return ReasoningOptions(effort=effort, max_tokens=budget, exclude=not shown, field=THINKING)
    return None


def _response_format(config: dict[str, Any], only: dict[str, Any]) -> dict[str, Any] | None:
    mime = config.get("responseMimeType")
    schema = config.get("responseJsonSchema", config.get("_responseJsonSchema"))
    if schema is None and config.get("responseSchema") is not None:
        schema = _schema(config["responseSchema"])
    if mime in (None, "text/plain") and schema is None:
        return None
    if mime != "application/json":
        only["generationConfig.responseMimeType"] = mime  # text/x.enum and the like
        return None
    if not isinstance(schema, dict):
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema, "strict": False}}


def _number(config: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = config.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise InvalidRequest(f"'generationConfig.{name}' must be a number between {lo:g} and {hi:g}")
    return float(value)


def _generation(config: Any, request: GenerationRequest, only: dict[str, Any]) -> tuple[str, ...]:
    """The generation settings into `request`; what only a `gemini` route honours into `only`;
    returns the sampling fields other routes leave out (`DROPPED_CONFIG`)."""
    if config is None:
        return ()
    if not isinstance(config, dict):
        raise InvalidRequest("'generationConfig' must be an object")
    config = _camel(config)
    dropped = tuple(f"generationConfig.{n}" for n in DROPPED_CONFIG if config.get(n) is not None)
    for name, value in config.items():
        if name in DROPPED_CONFIG:
            continue
        if name not in READ_CONFIG and value is not None and value not in NEUTRAL_CONFIG.get(name, ()):
            only[f"generationConfig.{name}"] = value  # topK, logprobs, speechConfig, ...: no canonical field
    tokens = config.get("maxOutputTokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise InvalidRequest("'generationConfig.maxOutputTokens' must be an integer >= 1")
    request.max_tokens = tokens
    request.temperature = _number(config, "temperature", 0.0, 2.0)
    request.top_p = _number(config, "topP", 0.0, 1.0)
    stop = config.get("stopSequences")
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
        raise InvalidRequest("'generationConfig.stopSequences' must be an array of strings")
    request.stop = list(stop or [])
    seed = config.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InvalidRequest("'generationConfig.seed' must be an integer")
    request.seed = seed
    request.reasoning = _thinking(config)
    request.response_format = _response_format(config, only)
    return dropped


def _safety(body: dict[str, Any], only: dict[str, Any]) -> None:
    """A threshold that blocks nothing asks for nothing (a translated route has no such filter); one
    that blocks more only Google's filters can honour."""
    raw = body.get("safetySettings")
    if raw is None:
        return
    if not isinstance(raw, list):
        raise InvalidRequest("'safetySettings' must be an array of {category, threshold}")
    for i, setting in enumerate(raw):
        if not isinstance(setting, dict):
            raise InvalidRequest(f"'safetySettings[{i}]' must be an object")
        if setting.get("threshold") not in OPEN_THRESHOLDS:
            only[f"safetySettings[{i}].threshold"] = setting.get("threshold")


def parse_gemini_request(body: Any, model: str, stream: bool) -> GenerationRequest:
    """A `generateContent` body for `model` (from the path; a `model` in the body is not read)."""
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    sent = {k: v for k, v in body.items() if k not in ("provider", "model")}  # routing is tidegate's
    body = _camel(body)
    for name in body:
        if name not in FIELDS:
            raise InvalidRequest(f"'{name}' is not a field of GenerateContentRequest")
    only: dict[str, Any] = {}
    raw = body.get("contents")
    if isinstance(raw, dict):  # (the REST API takes one Content too)
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("'contents' is required: an array of Content objects ({'role', 'parts'})")
    contents = _Contents(only)
    for i, content in enumerate(raw):
        contents.turn(content, f"contents[{i}]")
    if body.get("cachedContent") is not None:
        only["cachedContent"] = body["cachedContent"]
    _safety(body, only)
    tools = _tools(body, only)
    request = GenerationRequest(
        model=model,
        messages=_system(body) + contents.out,
        stream=stream,
        tools=tools or None,
        provider=parse_provider_prefs(body.get("provider")),
    )
    request.tool_choice = _tool_choice(body, only) if tools else None
    dropped = _generation(body.get("generationConfig"), request, only)
    request.as_sent = AsSent(WireFormat.GEMINI, sent, only=only, dropped=dropped)
    return request
