"""What memd gathers itself for a dream asked for one answer (issue 34): the work of the
Orient and Gather phases that a model driving tools would do with Read, Glob and
TranscriptGrep, done by memd within fixed budgets (blocking; run it in a thread).

* The index and the topic files are read from the run's snapshot (memd's own copy, taken
  before anything changes, so what the model is shown is exactly what the answer's changes
  are checked against). The index is shown as far as R-M2 loads it.
* A topic file is shown whole when it fits :data:`FILE_MAX_BYTES` and the files shown so far
  leave room in :data:`FILES_MAX_BYTES`; only a file shown whole may be changed. A larger
  one is shown in part, the rest by name and description (cut to :data:`NAMED_CHARS`, all
  of them within :data:`NAMED_MAX_BYTES`; the model is told it may not change them), at
  most :data:`MAX_LISTED` in all. A request the model's context cannot take is asked again
  with what it showed cut to fit (:meth:`Budget.shrunk`). Files are taken in the order the index
  lists them, then by name, so what the index points at comes first.
* Transcript excerpts: a narrow search of the sessions since the last consolidation for the
  distinctive words of the memories' names and descriptions
  (:func:`memd.dream.transcripts.excerpts`): a few short, scrubbed excerpts, never a whole
  transcript.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.confined import Area
from memd.dream import transcripts, wipe
from memd.dream.runs import SNAPSHOT
from memd.dream.snapshot import FILES
from memd.memory.frontmatter import parse_document
from memd.memory.index import load_index, parse_index
from memd.memory.terms import STOPWORDS
from memd.sources.base import DreamScope

FILE_MAX_BYTES = 6_000  # a topic file shown whole, at most
FILES_MAX_BYTES = 40_000  # every topic file shown whole or in part, together
PART_BYTES = 600  # what is shown of a file too large to show whole
NAMED_CHARS = 150  # what is shown of a file named only: its description, cut (an index hook)
NAMED_MAX_BYTES = 24_000  # every file named only (its name and description), together
MAX_LISTED = 200  # topic files named at all (R-M4 keeps 200 too)
MAX_TERMS = 12
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{4,39}")


@dataclass(frozen=True)
class Shown:
    """A topic file as the model is shown it. ``whole``: its bytes (it may be changed);
    ``None``: shown in part or by name only (it may not)."""

    relative: str
    text: str  # what the request holds of it (its head, or its description)
    whole: bytes | None
    named: bool = False  # shown by name and description only


@dataclass(frozen=True)
class Budget:
    """How much of the memory dir and the sessions a request may show (bytes of topic files,
    characters of excerpts)."""

    files_bytes: int = FILES_MAX_BYTES
    excerpt_chars: int = transcripts.GATHER_MAX_CHARS
    named_bytes: int = NAMED_MAX_BYTES

    def shrunk(self, found: Gathered, actual: int | None, limit: int | None) -> Budget:
        """A budget for a request whose last one (showing ``found``) was ``actual`` tokens,
        over the model's ``limit``: what was shown, times the share that fits with a margin
        (at most half; half when the model did not say its figures)."""
        share = 0.5 if not actual or not limit else min(0.5, 0.8 * limit / actual)
        shown = sum(len(f.text.encode()) for f in found.files if not f.named)
        named = sum(_named_bytes(f.relative, f.text) for f in found.files if f.named)
        excerpts = sum(len(x) + 1 for x in found.excerpts)
        return Budget(int(shown * share), int(excerpts * share), int(named * share))


@dataclass(frozen=True)
class Gathered:
    index: str  # what R-M2 loads of MEMORY.md
    files: tuple[Shown, ...]
    excerpts: tuple[str, ...]
    terms: tuple[str, ...]

    def whole(self) -> dict[str, bytes]:
        """The files the answer may change, and their bytes before the run."""
        return {f.relative: f.whole for f in self.files if f.whole is not None}

    def topics(self) -> frozenset[str]:
        return frozenset(f.relative for f in self.files)


def gather(
    run_dir: Path,
    before: Mapping[str, str],
    index: bytes | None,
    scopes: Sequence[DreamScope],
    sessions: Sequence[str],
    *,
    index_max_lines: int,
    index_max_bytes: int,
    secrets: bool = True,
    budget: Budget = Budget(),
) -> Gathered:
    """What a one-answer dream shows the model (see the module docstring), within
    ``budget``. ``before``: the snapshot's manifest (the files the memory dir held);
    ``index``: its MEMORY.md."""
    text = (index or b"").decode("utf-8", "replace")
    shown = load_index(text, max_lines=index_max_lines, max_bytes=index_max_bytes).text
    with Area.open(run_dir / SNAPSHOT / FILES) as saved:
        files = _files(saved, _ordered(before, text), budget)
    terms = _terms(files)
    found = transcripts.excerpts(
        scopes, terms, sessions=sessions, secrets=secrets, max_chars=budget.excerpt_chars
    )
    return Gathered(shown, tuple(files), tuple(found), terms)


def _ordered(before: Mapping[str, str], index: str) -> list[str]:
    """The topic files: those the index points at in its order, then the rest by name."""
    topics = sorted(f for f in before if wipe.is_topic(f))
    present = set(topics)
    first = [e.file.removeprefix("./") for e in parse_index(index)]
    listed = [f for f in dict.fromkeys(first) if f in present]
    rest = [f for f in topics if f not in set(listed)]
    return (listed + rest)[:MAX_LISTED]


def _files(saved: Area, names: Sequence[str], budget: Budget) -> list[Shown]:
    """The files shown whole or in part within ``budget.files_bytes``, the rest named within
    ``budget.named_bytes``."""
    out: list[Shown] = []
    room, named = budget.files_bytes, budget.named_bytes
    for relative in names:
        data = _read(saved, relative, FILE_MAX_BYTES + 1)
        if data is None:
            continue
        text = _text(data)
        if text is not None and len(data) <= min(FILE_MAX_BYTES, room):
            out.append(Shown(relative, text, data))
            room -= len(data)
        elif text is not None and room >= PART_BYTES:
            head = data[:PART_BYTES].decode("utf-8", "ignore")
            out.append(Shown(relative, head, None))
            room -= len(head.encode())
        else:
            meta = parse_document(text or "").meta
            said = (meta.description or meta.name or "")[:NAMED_CHARS]
            named -= _named_bytes(relative, said)
            if named < 0:
                break
            out.append(Shown(relative, said, None, named=True))
    return out


def _named_bytes(relative: str, said: str) -> int:
    return len(relative.encode("utf-8", "replace")) + len(said.encode("utf-8", "replace"))


def _read(area: Area, relative: str, cap: int) -> bytes | None:
    try:
        data, _ = area.read(relative, max_bytes=cap)
    except (OSError, ValueError):
        return None
    return data


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _terms(files: Sequence[Shown]) -> tuple[str, ...]:
    """The words to search the sessions for: each memory's distinctive words (of its name,
    then its description; in at most two memories or a third of them), two a memory, the first
    :data:`MAX_TERMS`."""
    words: list[list[str]] = []
    for shown in files:
        meta = parse_document(shown.text).meta if shown.whole is not None else None
        head = f"{meta.name or ''} {meta.description or ''}" if meta else shown.text[:200]
        found = [w.lower() for w in _WORD.findall(head) if w.lower() not in STOPWORDS]
        words.append(list(dict.fromkeys(found)))
    seen = Counter(w for found in words for w in found)
    common = max(2, len(files) // 3)
    terms: list[str] = []
    for found in words:
        terms.extend([w for w in found if seen[w] <= common and w not in terms][:2])
    return tuple(terms[:MAX_TERMS])
