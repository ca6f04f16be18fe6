"""The semantic stage's model: a model2vec static embedding model read from a local folder.

Imported only when ``memory.semantic.enabled`` is on, and only in a worker thread: it needs
the ``memd[semantic]`` extra (``model2vec``, which brings ``numpy``, ``tokenizers`` and
``safetensors``). The daemon never downloads: :func:`load_encoder` reads the folder's three
files itself (``model.safetensors``, ``tokenizer.json``, ``config.json``: the layout model2vec
saves), as regular files, each within its size budget, and hands the bytes to the library;
``memdctl fetch-model`` is what fetches a model once (:mod:`memd.memory.semantic_fetch`).

What is in the folder is hostile like any byte from disk: a truncated or forged tensor file, a
tokenizer that is not one, vectors of NaN, a token mapping that points outside the matrix.
Every such folder raises :class:`ModelProblem` with a sentence for ``status``, never anything
else; :meth:`Encoder.encode` raises it too for what only shows when encoding.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from memd.regular_file import read_regular, reason

MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE = "model.safetensors", "tokenizer.json", "config.json"
FILES = (MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE)
MAX_MODEL_BYTES = 512 * 1024 * 1024  # potion-base-8M is 30 MB, potion-base-32M 130 MB
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
MAX_TOKENS = 256  # of one text (a memory's head or a query); the rest adds little to a mean
MAX_TEXT_CHARS = 4_000  # cut before tokenizing, so a huge query costs nothing

Vectors = npt.NDArray[np.float32]
T = TypeVar("T")


class ModelProblem(Exception):
    """The model cannot be used; the message says why and what to do, for ``status``."""


class Busy(Exception):
    """The model is encoding for another caller: try again later (nothing is wrong)."""


def import_library() -> Any:
    """The ``model2vec`` module, or :class:`ModelProblem` naming the extra to install.

    The tokenizers library forks nothing of its own here, but its thread pool warns in every
    child a later ``fork`` makes (the sub-agents' shell): it is told not to start one."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return importlib.import_module("model2vec")
    except ImportError as exc:
        raise ModelProblem(
            f"the model2vec library is not installed ({exc}); install memd's semantic extra: "
            "pip install 'memd[semantic]'"
        ) from None


def guarded(problem: str, call: Callable[[], T]) -> T:
    """``call()``; whatever the library raises (its own error classes, ``ValueError``,
    ``IndexError`` …) becomes :class:`ModelProblem`: ``problem`` and the error."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - a third-party library's errors, every kind
        raise ModelProblem(f"{problem} ({type(exc).__name__}: {exc})") from None


def _read(folder: Path, name: str, limit: int) -> bytes:
    path = folder / name
    try:
        data = read_regular(path, limit + 1)
    except FileNotFoundError:
        raise ModelProblem(
            f"{path} is missing: fetch the model with `memdctl fetch-model` or name a "
            "model2vec folder in memory.semantic.model"
        ) from None
    except OSError as exc:
        raise ModelProblem(f"{path} cannot be read: {reason(exc)}") from None
    if len(data) > limit:
        raise ModelProblem(f"{path} is over {limit // (1024 * 1024)} MiB: not a small model")
    return data


def _tensors(path: Path, data: bytes) -> dict[str, Any]:
    load = importlib.import_module("safetensors.numpy").load
    tensors = guarded(f"{path} is not a readable safetensors file", partial(load, data))
    if not isinstance(tensors, dict):
        raise ModelProblem(f"{path} holds no tensors")
    return tensors


def _matrix(path: Path, tensors: dict[str, Any]) -> Vectors:
    embeddings = tensors.get("embeddings")
    if not isinstance(embeddings, np.ndarray) or embeddings.ndim != 2 or not embeddings.size:
        raise ModelProblem(f"{path} has no 2-D 'embeddings' tensor: not a model2vec model")
    if embeddings.dtype.kind not in "fiu":
        raise ModelProblem(f"{path}: the embeddings are {embeddings.dtype}, not numbers")
    with np.errstate(all="ignore"):
        matrix = embeddings.astype(np.float32)
    return np.ascontiguousarray(np.nan_to_num(matrix, nan=0.0, posinf=0.0, neginf=0.0))


def _extras(path: Path, tensors: dict[str, Any], rows: int, vocab: int) -> dict[str, Any]:
    """The optional ``weights`` (one per token) and ``mapping`` (token → row), checked."""
    extras: dict[str, Any] = {"weights": None, "token_mapping": None}
    weights, mapping = tensors.get("weights"), tensors.get("mapping")
    if weights is not None:
        if not isinstance(weights, np.ndarray) or weights.shape != (vocab,):
            raise ModelProblem(f"{path}: 'weights' does not give one weight per token")
        extras["weights"] = np.nan_to_num(weights.astype(np.float32))
    if mapping is not None:
        ok = isinstance(mapping, np.ndarray) and mapping.shape == (vocab,)
        if not ok or mapping.dtype.kind not in "iu" or (vocab and mapping.min() < 0):
            raise ModelProblem(f"{path}: 'mapping' does not map every token to a row")
        if vocab and mapping.max() >= rows:
            raise ModelProblem(f"{path}: 'mapping' points past the {rows} rows of embeddings")
        extras["token_mapping"] = mapping.astype(np.int64)
    elif rows != vocab:
        raise ModelProblem(f"{path}: {rows} vectors for a vocabulary of {vocab} tokens")
    return extras


def _tokenizer(folder: Path) -> Any:
    path = folder / TOKENIZER_FILE
    data = _read(folder, TOKENIZER_FILE, MAX_TOKENIZER_BYTES)
    tokenizers = importlib.import_module("tokenizers")
    text = data.decode("utf-8", errors="replace")
    tokenizer = guarded(f"{path} is not a tokenizer", partial(tokenizers.Tokenizer.from_str, text))
    if not guarded(f"{path} is not a tokenizer", tokenizer.get_vocab_size):
        raise ModelProblem(f"{path} has an empty vocabulary")
    return tokenizer


def _config(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG_FILE
    try:
        config = json.loads(_read(folder, CONFIG_FILE, MAX_CONFIG_BYTES))
    except (ValueError, RecursionError) as exc:
        raise ModelProblem(f"{path} is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ModelProblem(f"{path} is not a JSON object")
    return config


def load_encoder(folder: Path) -> Encoder:
    """The model saved in ``folder`` (blocking; seconds for a big one): see the module
    docstring. Raises :class:`ModelProblem` only."""
    library = import_library()
    if not folder.is_dir():
        raise ModelProblem(
            f"no model folder at {folder}: fetch the model with `memdctl fetch-model` or name "
            "a model2vec folder in memory.semantic.model"
        )
    config, tokenizer = _config(folder), _tokenizer(folder)
    path = folder / MODEL_FILE
    tensors = _tensors(path, _read(folder, MODEL_FILE, MAX_MODEL_BYTES))
    matrix = _matrix(path, tensors)
    extras = _extras(path, tensors, matrix.shape[0], tokenizer.get_vocab_size())
    build = partial(
        library.StaticModel,
        vectors=matrix,
        tokenizer=tokenizer,
        config={},
        normalize=True,
        max_length=MAX_TOKENS,
        **extras,
    )
    model = guarded(f"{folder} is not a usable model2vec model", build)
    encoder = Encoder(model, str(config.get("model_name") or folder.name))
    encoder.encode(["memd"])  # what only shows when encoding shows now
    return encoder


class Encoder:
    """A loaded model: texts to unit vectors. Thread-safe (one encode at a time: the library
    sets the tokenizer's truncation per call)."""

    def __init__(self, model: Any, name: str) -> None:
        self._model = model
        self.name = name
        self.dim = int(model.dim)
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str], *, wait: float = -1) -> Vectors:
        """One unit-length row per text (a text with no known token: zeros). Waits ``wait``
        seconds at most (-1: as long as it takes) for another encode to finish, then raises
        :class:`Busy`: a recall does not queue behind the worker's batch, nor behind an
        encode stuck on a text (a hostile tokenizer's pattern)."""
        cut = [t[:MAX_TEXT_CHARS] for t in texts]
        encode = partial(
            self._model.encode,
            cut,
            max_length=MAX_TOKENS,
            normalize=False,
            use_multiprocessing=False,
        )
        if not self._lock.acquire(timeout=wait):
            raise Busy(f"the model was still encoding after {wait} s")
        try:
            with np.errstate(all="ignore"):
                rows = guarded("the model failed to encode", encode)
        finally:
            self._lock.release()
        return unit_rows(np.asarray(rows, dtype=np.float32).reshape(len(cut), self.dim))


def unit_rows(matrix: Vectors) -> Vectors:
    """Each row scaled to length 1; a row of zeros, NaN or overflow becomes zeros."""
    with np.errstate(all="ignore"):
        matrix = np.nan_to_num(matrix, nan=0.0, posinf=0.0, neginf=0.0)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        unit: Vectors = np.zeros_like(matrix)
        np.divide(matrix, norms, out=unit, where=norms > 0)
        return np.nan_to_num(unit, nan=0.0, posinf=0.0, neginf=0.0)


def empty_vectors() -> Vectors:
    return np.zeros((0, 0), dtype=np.float32)


def stacked(matrix: Vectors, count: int, rows: Sequence[int], vectors: Vectors) -> Vectors:
    """A new ``count`` x dims matrix: ``matrix``'s rows, then ``vectors`` put at ``rows``."""
    out = np.zeros((count, vectors.shape[1]), dtype=np.float32)
    if matrix.ndim == 2 and matrix.shape[1] == vectors.shape[1]:
        out[: matrix.shape[0]] = matrix[:count]
    out[list(rows)] = vectors
    return out


def similarities(
    matrix: Vectors, query: Vectors, floor: float, most: int
) -> list[tuple[int, float]]:
    """The ``most`` rows of ``matrix`` most alike to ``query`` (unit vectors) whose cosine is
    at least ``floor``, as (row, cosine), most alike first; none for a query of zeros. The
    product is numpy's own loop (``einsum``), not BLAS: BLAS's thread pool waits for threads
    the scheduler has parked when the machine is busy (milliseconds, on the prompt's path)."""
    if not query.any() or matrix.ndim != 2 or matrix.shape[1] != query.shape[0]:
        return []
    with np.errstate(all="ignore"):
        scores = np.einsum("ij,j->i", matrix, query)
    found = np.flatnonzero(scores >= floor)
    if len(found) > most:
        found = found[np.argpartition(-scores[found], most - 1)[:most]]
    order = found[np.argsort(-scores[found], kind="stable")]
    return [(int(at), float(scores[at])) for at in order]
