"""The optional semantic recall stage (issue 27): memories found by what they mean.

The lexical ranker misses a memory that shares no word with the prompt ("what pet" against
"guinea pig"). With ``memory.semantic.enabled`` (off by default) and the ``memd[semantic]``
extra, each memory is also embedded by a small static model (model2vec: numpy only, no torch,
no GPU; :mod:`memd.memory.semantic_model`), and a recall adds the memories alike to the
prompt to the lexical ranking:

* **Off the request path.** The model is loaded, and memories are embedded, by
  :meth:`SemanticStage.run` in a worker thread; a recall only embeds its query (tens of
  microseconds for a static model) and takes one matrix product over the vectors already
  made. A memory not embedded yet is ranked lexically only, this time.
* **Cached by file state.** A vector is kept per memory with what identifies its file's
  state (mtime, name, description); only a new or changed memory is read and embedded again,
  and one that cannot be read gets a zero vector until it changes (never retried in a loop).
  Vectors of every memory dir together stay within :data:`MAX_VECTOR_BYTES`; the dirs used
  least recently give way.
* **Fused with the lexical ranking.** Each stage's score counts as a share of its scale: the
  lexical score as a share of the best one, a semantic hit (cosine at least
  ``memory.semantic.min_similarity``) as how far it is from that floor to 1; a memory's
  score is their sum. Every memory at least that alike adds its share (as many as the
  ranking holds), not only the few most alike: capped at 20, a memory that the words and
  the meaning both found lost its share to 20 that only the meaning found. The lexical
  answer's cut (:func:`memd.memory.rank.strong_count`) then works on the fused scores as
  before, and the model's manifest is the fused ranking's best.
* **Never an error on recall.** A missing library, a missing or broken model folder, a model
  that fails to encode: the stage is off with the reason in ``status`` (``recall_stages``),
  and recall answers lexically. A broken model is tried again only when its files change or
  the config names another one.

The daemon never downloads: ``memory.semantic.model`` is a model folder (an absolute path)
or a model id that ``memdctl fetch-model`` saved under ``<state_dir>/models/``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from memd.config import Config, MemoryConfig
from memd.memory import related
from memd.memory.rank import doc_from_header, is_tool_usage_reference
from memd.memory.scan import MemoryHeader, header_from_head, opened_area, read_head
from memd.regular_file import signature

if TYPE_CHECKING:
    from memd.memory.semantic_model import Encoder, Vectors

log = logging.getLogger(__name__)

MAX_VECTOR_BYTES = 32 * 1024 * 1024  # every dir's vectors together (8,192 a dir at 1,024 dims)
BATCH = 64  # memories read and embedded between two publications
QUERY_WAIT_S = 0.1  # a recall waits this long at most for the worker's encode to finish
MAX_WANTED = 64  # memory dirs waiting for the worker
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
OFF = "memory.semantic.enabled is false"

Identity = tuple[int, str | None, str | None]


def missing_extra(exc: ImportError) -> str:
    """What to say when a package of the ``semantic`` extra cannot be imported."""
    return f"{exc}; install memd's semantic extra: pip install 'memd[semantic]'"


def model_folder(model: str, state_dir: Path) -> Path:
    """Where the model named by ``memory.semantic.model`` is: an absolute path is the folder
    itself; a model id ``owner/name`` is ``<state_dir>/models/owner--name`` (where
    ``memdctl fetch-model`` saves it). ``ValueError`` with the fix for anything else."""
    if model.startswith("/"):
        return Path(model)
    if MODEL_ID.fullmatch(model) and ".." not in model:
        return state_dir / "models" / model.replace("/", "--")
    raise ValueError(
        f"memory.semantic.model {model!r} is neither an absolute folder nor a model id like "
        "minishlab/potion-base-8M"
    )


def memory_text(header: MemoryHeader) -> str:
    """What is embedded of a memory: its name, description, file name and body head."""
    stem = Path(header.relative).stem.replace("_", " ").replace("-", " ")
    parts = (header.name or "", header.description or "", stem, header.body_head)
    return "\n".join(p for p in parts if p)


def _identity(header: MemoryHeader) -> Identity:
    return (header.mtime_ms, header.name, header.description)


@dataclass(frozen=True)
class _DirVectors:
    """One memory dir's vectors, replaced whole (readers use it without the lock)."""

    keys: tuple[str, ...]
    identities: dict[str, Identity]
    matrix: Vectors  # one unit row per key


@dataclass
class _Model:
    """The model the config names, once looked at: loaded, or why not."""

    key: tuple[Any, ...]  # the folder and its files' signatures: a change means try again
    name: str
    encoder: Encoder | None
    problem: str | None


class SemanticStage:
    """The stage of one daemon; see the module docstring. :meth:`fuse` is thread-safe;
    :meth:`want`, :meth:`wake` and :meth:`run` belong to the event loop."""

    def __init__(self, config_of: Callable[[], MemoryConfig], state_dir: Path) -> None:
        self._config_of = config_of
        self._state_dir = state_dir
        self._lock = threading.Lock()
        self._model: _Model | None = None
        self._dirs: OrderedDict[str, _DirVectors] = OrderedDict()
        self._wanted: OrderedDict[str, Sequence[MemoryHeader]] = OrderedDict()
        self._wake = anyio.Event()
        self.embedded = 0  # memories embedded since the start

    @property
    def enabled(self) -> bool:
        return self._config_of().semantic.enabled

    # -- the event loop's side ---------------------------------------------------------------

    def want(self, memory_dir: Path, headers: Sequence[MemoryHeader]) -> None:
        """Recall saw these memories (newest first): the worker embeds what is missing."""
        if not self.enabled:
            return
        key = str(memory_dir)
        with self._lock:
            self._wanted[key] = headers
            self._wanted.move_to_end(key)
            while len(self._wanted) > MAX_WANTED:
                self._wanted.popitem(last=False)
        self._wake.set()

    def wake(self) -> None:
        """The config may have changed: the worker looks at the model again."""
        self._wake.set()

    async def run(self) -> None:
        """The worker, until cancelled: loads the model and embeds what recalls saw."""
        self._wake.set()
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await anyio.to_thread.run_sync(self.work, abandon_on_cancel=True)

    # -- the worker thread ---------------------------------------------------------------------

    def work(self) -> None:
        """One round (blocking): the model the config names, then every dir wanted."""
        try:
            encoder = self._prepare()
            while encoder is not None:
                with self._lock:
                    if not self._wanted:
                        return
                    key, headers = self._wanted.popitem(last=False)
                encoder = self._embed_dir(encoder, Path(key), headers)
        except Exception as exc:  # the worker never dies: the stage turns off and says why
            log.exception("semantic recall: the worker failed")
            self._broken(f"the semantic worker failed ({type(exc).__name__}: {exc})")

    def embed(self, memory_dir: Path, headers: Sequence[MemoryHeader]) -> None:
        """Blocking, now: the model loaded and ``headers`` embedded (``bench/``, which has no
        worker running; the daemon's recalls go through :meth:`want`)."""
        encoder = self._prepare()
        if encoder is not None:
            self._embed_dir(encoder, memory_dir, headers)

    def _prepare(self) -> Encoder | None:
        """The model the config names, loaded when it (or its files) changed."""
        config = self._config_of().semantic
        if not config.enabled:
            with self._lock:
                self._model, self._wanted = None, OrderedDict()
                self._dirs.clear()
            return None
        try:
            folder = model_folder(config.model, self._state_dir)
        except ValueError as exc:
            self._set_model(_Model(("bad", config.model), config.model, None, str(exc)))
            return None
        try:
            from memd.memory.semantic_model import FILES
        except ImportError as exc:  # numpy, which the extra brings, is missing
            why = missing_extra(exc)
            self._set_model(_Model(("missing", str(exc)), config.model, None, why))
            return None
        key = (str(folder), *(signature(folder / name) for name in FILES))
        known = self._model
        if known is not None and known.key == key:
            return known.encoder
        self._set_model(_Model(key, config.model, None, f"loading the model from {folder}"))
        self._set_model(self._load(key, config.model, folder))
        return self._model.encoder if self._model is not None else None

    @staticmethod
    def _load(key: tuple[Any, ...], name: str, folder: Path) -> _Model:
        from memd.memory.semantic_model import ModelProblem, load_encoder

        try:
            encoder = load_encoder(folder)
        except ModelProblem as exc:
            log.warning("semantic recall is off: %s", exc)
            return _Model(key, name, None, str(exc))
        log.info("semantic recall: model %s loaded from %s (%d dims)", name, folder, encoder.dim)
        return _Model(key, name, encoder, None)

    def _set_model(self, model: _Model) -> None:
        with self._lock:
            if self._model is None or self._model.encoder is not model.encoder:
                self._dirs.clear()  # another model's vectors do not compare with this one's
            self._model = model

    def _broken(self, problem: str) -> None:
        """The model failed after loading: off until its files or the config change."""
        with self._lock:
            if self._model is not None:
                self._model = _Model(self._model.key, self._model.name, None, problem)
            self._dirs.clear()

    def _embed_dir(
        self, encoder: Encoder, memory_dir: Path, headers: Sequence[MemoryHeader]
    ) -> Encoder | None:
        """Bring one dir's vectors in step with ``headers`` (the newest that fit the budget),
        publishing after every batch; ``None`` when the model broke."""
        from memd.memory.semantic_model import ModelProblem

        key = str(memory_dir)
        kept = list(headers[: max(1, MAX_VECTOR_BYTES // (4 * encoder.dim))])
        with self._lock:
            known = self._dirs.get(key)
        current = _retain(known, kept)
        missing = [h for h in kept if current.identities.get(h.relative) != _identity(h)]
        head_lines = self._config_of().frontmatter_lines
        for start in range(0, len(missing), BATCH):
            batch = missing[start : start + BATCH]
            texts = _read_texts(memory_dir, batch, head_lines)
            try:
                vectors = encoder.encode(texts)
            except ModelProblem as exc:
                self._broken(str(exc))
                return None
            current = _with_rows(current, batch, vectors)
            self.embedded += len(batch)
            self._publish(key, current)
        if not missing:
            self._publish(key, current)
        return encoder

    def _publish(self, key: str, vectors: _DirVectors) -> None:
        dim_bytes = 4 * int(vectors.matrix.shape[1]) if vectors.matrix.ndim == 2 else 4
        with self._lock:
            self._dirs[key] = vectors
            self._dirs.move_to_end(key)
            while len(self._dirs) > 1 and self._rows() * dim_bytes > MAX_VECTOR_BYTES:
                self._dirs.popitem(last=False)

    def _rows(self) -> int:
        return sum(len(v.keys) for v in self._dirs.values())

    # -- the request path (any thread) ---------------------------------------------------------

    def fuse(
        self,
        memory_dir: Path,
        query: str,
        candidates: Sequence[MemoryHeader],
        ranked: Sequence[tuple[MemoryHeader, float]],
        *,
        limit: int,
        recent_tools: Sequence[str] = (),
    ) -> list[tuple[MemoryHeader, float]]:
        """``ranked`` (the lexical ranking, best first) with the memories among
        ``candidates`` alike to ``query`` fused in (the ``limit`` most alike at most), at
        most ``limit``; ``ranked`` itself while the stage has nothing to add. Never raises."""
        with self._lock:
            model = self._model
            vectors = self._dirs.get(str(memory_dir))
        if model is None or model.encoder is None or vectors is None or not vectors.keys:
            return list(ranked)
        hits = self._hits(model.encoder, vectors, query, candidates, recent_tools, limit)
        if not hits:
            return list(ranked)
        return fused(ranked, hits, self._config_of().semantic.min_similarity)[:limit]

    def _hits(
        self,
        encoder: Encoder,
        vectors: _DirVectors,
        query: str,
        candidates: Sequence[MemoryHeader],
        recent_tools: Sequence[str],
        limit: int,
    ) -> list[tuple[MemoryHeader, float]]:
        """The ``limit`` candidates most alike to ``query`` at most, each at least
        ``min_similarity`` alike, best first."""
        from memd.memory.semantic_model import Busy, ModelProblem, similarities

        try:
            wanted = encoder.encode([query], wait=QUERY_WAIT_S)[0]
        except Busy:
            return []  # the words alone this time
        except ModelProblem as exc:
            self._broken(str(exc))
            return []
        floor = self._config_of().semantic.min_similarity
        by_key = {h.relative: h for h in candidates}
        hits: list[tuple[MemoryHeader, float]] = []
        # Room among the most alike for those surfaced already and the tool rule's leavings.
        most = 2 * limit + max(0, len(vectors.keys) - len(candidates))
        for at, score in similarities(vectors.matrix, wanted, floor, most):
            header = by_key.get(vectors.keys[at])
            if header is None:
                continue
            # The tool rule reads the memory as a document: built only after tools were used.
            if recent_tools and is_tool_usage_reference(doc_from_header(header), recent_tools):
                continue
            hits.append((header, score))
            if len(hits) >= limit:
                break
        return hits

    # -- status --------------------------------------------------------------------------------

    def statistics(self) -> dict[str, Any]:
        """For ``status`` (``recall_stages.semantic``): on, or off and why."""
        config = self._config_of().semantic
        if not config.enabled:
            return {"on": False, "model": config.model, "off_reason": OFF}
        with self._lock:
            model, dirs, rows = self._model, len(self._dirs), self._rows()
            waiting = len(self._wanted)
        if model is None or model.encoder is None:
            why = model.problem if model is not None else "the model is not loaded yet"
            return {"on": False, "model": config.model, "off_reason": why}
        return {
            "on": True,
            "model": config.model,
            "dims": model.encoder.dim,
            "embedded_memories": rows,
            "embedded_dirs": dirs,
            "dirs_waiting": waiting,
            "min_similarity": config.min_similarity,
        }


def fused(
    ranked: Sequence[tuple[MemoryHeader, float]],
    hits: Sequence[tuple[MemoryHeader, float]],
    floor: float,
) -> list[tuple[MemoryHeader, float]]:
    """The lexical ranking and the semantic hits as one (see the module docstring): each
    lexical score as a share of the best, plus each hit's ``(cosine - floor) / (1 - floor)``;
    ties keep the lexical order, then the semantic one."""
    best = max((score for _, score in ranked), default=0.0)
    scores: dict[str, float] = {}
    headers: dict[str, MemoryHeader] = {}
    for header, score in ranked:
        headers.setdefault(header.relative, header)
        scores[header.relative] = score / best if best > 0 else 0.0
    span = max(1e-9, 1.0 - floor)
    for header, similarity in hits:
        headers.setdefault(header.relative, header)
        share = min(1.0, max(0.0, (similarity - floor) / span))
        scores[header.relative] = scores.get(header.relative, 0.0) + share
    order = {key: at for at, key in enumerate(headers)}
    keys = sorted(scores, key=lambda k: (-scores[k], order[k]))
    return [(headers[k], scores[k]) for k in keys]


def _retain(known: _DirVectors | None, kept: Collection[MemoryHeader]) -> _DirVectors:
    """``known`` without the memories that are gone (or no longer among the newest kept)."""
    from memd.memory.semantic_model import empty_vectors

    if known is None:
        return _DirVectors((), {}, empty_vectors())
    wanted = {h.relative for h in kept}
    rows = [at for at, key in enumerate(known.keys) if key in wanted]
    if len(rows) == len(known.keys):
        return known
    keys = tuple(known.keys[at] for at in rows)
    identities = {k: known.identities[k] for k in keys}
    return _DirVectors(keys, identities, known.matrix[rows])


def _with_rows(
    current: _DirVectors, batch: Sequence[MemoryHeader], vectors: Vectors
) -> _DirVectors:
    """A new :class:`_DirVectors`: ``current`` with the rows of ``batch`` put or replaced."""
    from memd.memory.semantic_model import stacked

    where = {key: at for at, key in enumerate(current.keys)}
    keys = list(current.keys)
    identities = dict(current.identities)
    rows: list[int] = []
    for header in batch:
        at = where.get(header.relative)
        if at is None:
            at = where[header.relative] = len(keys)
            keys.append(header.relative)
        rows.append(at)
        identities[header.relative] = _identity(header)
    return _DirVectors(tuple(keys), identities, stacked(current.matrix, len(keys), rows, vectors))


def _read_texts(memory_dir: Path, batch: Sequence[MemoryHeader], head_lines: int) -> list[str]:
    """What is embedded of each memory in ``batch``, read beneath the memory dir (an
    unreadable or refused file embeds as nothing: a zero vector until it changes)."""
    texts: list[str] = []
    with opened_area(memory_dir) as area:
        for header in batch:
            if area is None:
                texts.append("")
                continue
            try:
                head = read_head(area, header.relative, max_lines=head_lines)
            except OSError:
                texts.append("")
                continue
            texts.append(memory_text(header_from_head(header.path, header.relative, head)))
    return texts


def recall_stages(
    config: Config, indexed: tuple[int, int], model_off: str | None, semantic: SemanticStage
) -> dict[str, Any]:
    """Which recall stages are on, for ``status``: the lexical ranker always, over every
    memory of a project (``indexed``: dirs, memories) with its related-words table
    (:func:`memd.memory.related.statistics`); the model selector with a key, shown
    the ranker's best (R-M4's cap); the semantic stage when enabled and its model loaded,
    else why not."""
    dirs, memories = indexed
    return {
        "lexical": {
            "on": True,
            "indexed_dirs": dirs,
            "indexed_memories": memories,
            "related": related.statistics(),
        },
        "model": {
            "on": model_off is None,
            "model": config.llm.models.recall,
            "manifest": config.memory.scan_max_files,
            "off_reason": model_off,
        },
        "semantic": semantic.statistics(),
    }
