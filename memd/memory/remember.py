"""``remember``: an agent writes one typed memory file and its index line (R-I8, R-M1, R-B4).

Any agent connected through ``memd-mcp`` can save a memory; what it saves reaches Claude
Code's prompts later, so the write goes through the same filters as extraction:

* ``<private>`` spans and likely secrets are scrubbed from the name, the description and the
  content before anything is written (:func:`memd.privacy.scrub_report`);
* the file name is derived from the name (:func:`memory_file_name`): ``<type>_<slug>.md``,
  ASCII letters, digits and ``_`` only, so no name (path separators, ``..``, control
  characters, reserved device names, ``MEMORY``) can point anywhere but one new file in the
  memory dir;
* a memory whose frontmatter already carries the same name (case and spacing ignored) is
  updated in place, under its existing file name;
* the index keeps within its limits (R-M2): a write that would push ``MEMORY.md`` past them
  is refused with a message saying how to make room, since an entry beyond the cut would
  never be loaded;
* the content is limited (``mcp.remember_max_bytes``, 4 KB by default): a memory is a short
  note, not a document;
* the writing agent is recorded in the frontmatter (``agent:``), and the time in
  ``metadata.modified`` (ISO 8601, as Claude Code 2.1.214 on stamps it); an update keeps
  the file's other keys (``metadata.pinned``, ``originSessionId``).

:func:`plan_memory` is pure (validation, naming, rendering); :func:`write_memory` is the
blocking I/O shell around it. The daemon serialises writers of one memory dir.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from memd.confined import Area
from memd.errors import NotFound
from memd.memory.freshness import age_text, freshness_warning
from memd.memory.frontmatter import (
    MEMORY_TYPES,
    Frontmatter,
    FrontmatterForm,
    MemoryType,
    iso_utc,
    normalize_line,
    parse_document,
    parse_memory_type,
)
from memd.memory.index import IndexEntry, load_index, upsert_entry
from memd.memory.scan import MemoryHeader, iso_mtime, scan_memories
from memd.memory.shared import note_of, quarantine_reason
from memd.memory.store import MemoryStore, topic_relative
from memd.privacy import scrub_report, scrub_text

NAME_MAX_CHARS = 120
DESCRIPTION_MAX_CHARS = 300
AGENT_MAX_CHARS = 80
SLUG_MAX_CHARS = 60
READ_MAX_BYTES = 64 * 1024  # read_memory: a memory is a note; the rest stays on disk
_NOT_SLUG = re.compile(r"[^a-z0-9]+")
# Device names Windows refuses as file stems (a memory dir may be synced to such a machine).
_RESERVED = frozenset(
    {"con", "prn", "aux", "nul", "memory"}
    | {f"com{i}" for i in range(10)}
    | {f"lpt{i}" for i in range(10)}
)


class RememberRefused(ValueError):
    """The memory cannot be written as asked; the message says what to change."""


@dataclass(frozen=True)
class MemoryDraft:
    """What an agent asked to remember, before any checks."""

    type: str
    name: str
    description: str
    content: str
    agent: str = ""


@dataclass(frozen=True)
class Limits:
    content_max_bytes: int = 4_096
    index_max_lines: int = 200
    index_max_bytes: int = 25_000
    redact_secrets: bool = True


@dataclass(frozen=True)
class Planned:
    """A checked, scrubbed memory ready to be written."""

    meta: Frontmatter
    body: str
    redacted: Mapping[str, int] = field(default_factory=dict)  # kind → count; private spans


def _hash(text: str, digits: int = 8) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:digits]


def name_key(name: str) -> str:
    """How two names are compared: case, Unicode form and spacing ignored."""
    return normalize_line(unicodedata.normalize("NFKC", name)).casefold()


def memory_file_name(kind: MemoryType, name: str, *, disambiguate: bool = False) -> str:
    """``<type>_<slug>.md`` for ``name``: a single safe file name in the memory dir.

    Letters are folded to ASCII (accents dropped), everything else becomes ``_``. A name
    with nothing left (only symbols or non-Latin script), a reserved stem, or
    ``disambiguate`` (the plain name is taken by another memory) gets a hash of the name.
    """
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = _NOT_SLUG.sub("_", folded.lower()).strip("_")[:SLUG_MAX_CHARS].rstrip("_")
    if not slug or slug in _RESERVED:
        slug = f"{slug}_{_hash(name_key(name))}" if slug else _hash(name_key(name))
    elif disambiguate:
        slug = f"{slug}_{_hash(name_key(name))}"
    return f"{kind}_{slug}.md"


def plan_memory(draft: MemoryDraft, limits: Limits) -> Planned:
    """Validate and scrub ``draft``; :class:`RememberRefused` names the first problem."""
    kind = parse_memory_type(draft.type)
    if kind is None:
        raise RememberRefused(
            f"type {draft.type!r} is not one of {', '.join(MEMORY_TYPES)}: user (who the user "
            "is), feedback (how they want work done), project (facts about this work), "
            "reference (where to find things)"
        )
    redacted: dict[str, int] = {}
    name = _line(_scrub(draft.name, limits, redacted), "name", NAME_MAX_CHARS)
    description = _line(
        _scrub(draft.description, limits, redacted), "description", DESCRIPTION_MAX_CHARS
    )
    size = len(draft.content.encode("utf-8", "surrogatepass"))
    if size > limits.content_max_bytes:
        raise RememberRefused(
            f"content is {size:,} bytes; the limit is {limits.content_max_bytes:,} "
            "(config mcp.remember_max_bytes). Keep one fact per memory and leave out what "
            "the code or git history already says"
        )
    body = _scrub(_valid_text(draft.content), limits, redacted).strip()
    if not body:
        raise RememberRefused("content is empty: say what should be remembered")
    agent = normalize_line(_scrub(draft.agent, limits, {}))[:AGENT_MAX_CHARS]
    extra: tuple[tuple[str, Any], ...] = (("agent", agent),) if agent else ()
    return Planned(Frontmatter(name, description, kind, extra), body + "\n", redacted)


def _valid_text(text: str) -> str:
    """``text`` without lone surrogates and control characters other than tab and newline."""
    clean = text.encode("utf-8", "replace").decode("utf-8")
    return "".join(c for c in clean if c in "\t\n" or unicodedata.category(c) not in ("Cc", "Cs"))


def _scrub(text: str, limits: Limits, redacted: dict[str, int]) -> str:
    report = scrub_report(_valid_text(text), secrets=limits.redact_secrets)
    if report.private_spans:
        redacted["private"] = redacted.get("private", 0) + report.private_spans
    for kind, count in report.secrets.items():
        redacted[kind] = redacted.get(kind, 0) + count
    return report.text


def _line(text: str, what: str, max_chars: int) -> str:
    line = normalize_line(text)
    if not line:
        raise RememberRefused(f"{what} is empty")
    if len(line) > max_chars:
        raise RememberRefused(f"{what} is {len(line)} characters; keep it under {max_chars}")
    return line


# ---------------------------------------------------------------------------------------------
# Writing (blocking; the caller holds the memory dir's write lock)


@dataclass(frozen=True)
class Written:
    relative: str
    path: Path
    created: bool
    redacted: Mapping[str, int]


def choose_file(kind: MemoryType, name: str, headers: Sequence[MemoryHeader]) -> tuple[str, bool]:
    """(relative file, whether it is new): the memory already named ``name``, else a fresh
    file name that no other memory uses."""
    wanted = name_key(name)
    for header in headers:
        if header.name is not None and name_key(header.name) == wanted:
            return header.relative, False
    taken = {h.relative for h in headers}
    plain = memory_file_name(kind, name)
    if plain not in taken:
        return plain, True
    return memory_file_name(kind, name, disambiguate=True), True


def write_memory(
    memory_dir: Path,
    draft: MemoryDraft,
    limits: Limits,
    cite: Callable[[str], list[dict[str, Any]] | None] | None = None,
    form: FrontmatterForm = "metadata",
) -> Written:
    """Write ``draft`` into ``memory_dir`` (see the module docstring); blocking. ``cite``
    gives the ``citations`` frontmatter value for the body (issue 26), replacing any the
    file had (``None``: none is written)."""
    planned = plan_memory(draft, limits)
    cited = cite(planned.body) if cite is not None else None
    if cited is not None:
        meta = planned.meta
        planned = replace(planned, meta=replace(meta, extra=(*meta.extra, ("citations", cited))))
    assert planned.meta.type is not None and planned.meta.name is not None
    store = MemoryStore(memory_dir, redact=limits.redact_secrets, form=form)
    headers = scan_memories(memory_dir, max_files=1 << 30, head_lines=30)
    relative, created = choose_file(planned.meta.type, planned.meta.name, headers)
    entry = IndexEntry(planned.meta.name, relative, planned.meta.description or "")
    _check_index_room(store.index_for_update(), entry, limits)  # Refused for a link
    meta = _stamped(planned.meta if created else _keep_extra(store, relative, planned.meta))
    path = store.write(relative, meta, planned.body)
    store.update_index(entry)
    return Written(relative, path, created, planned.redacted)


def _stamped(meta: Frontmatter) -> Frontmatter:
    """``meta`` with ``metadata.modified`` set to now, as Claude Code 2.1.331 stamps the
    memories it writes (the other ``metadata`` keys kept: ``pinned``, ``originSessionId``)."""
    extra = dict(meta.extra)
    nested = extra.get("metadata")
    now = iso_utc(datetime.now(UTC))
    extra["metadata"] = {**(nested if isinstance(nested, dict) else {}), "modified": now}
    return replace(meta, extra=tuple(extra.items()), modified=now)


def _keep_extra(store: MemoryStore, relative: str, meta: Frontmatter) -> Frontmatter:
    """``meta`` with the other frontmatter keys the existing file has (an update replaces
    name, description, type, agent and the content, nothing else)."""
    try:
        old = store.read(relative).document.meta.extra
    except (NotFound, OSError):
        return meta
    ours = dict(meta.extra)
    kept = tuple((k, v) for k, v in old if k not in ours)
    return replace(meta, extra=kept + meta.extra)


def _check_index_room(index_text: str, entry: IndexEntry, limits: Limits) -> None:
    updated = upsert_entry(index_text, entry)
    loaded = load_index(updated, max_lines=limits.index_max_lines, max_bytes=limits.index_max_bytes)
    if loaded.truncated:
        raise RememberRefused(
            f"MEMORY.md is full ({loaded.total_lines} lines, {loaded.total_bytes:,} bytes with "
            f"this entry; the limits are {limits.index_max_lines} lines and "
            f"{limits.index_max_bytes:,} bytes), so a new entry would never be loaded. Update "
            "an existing memory with the same name instead, or consolidate the index first "
            "(`memdctl dream`)"
        )


# ---------------------------------------------------------------------------------------------
# Reading one memory back (blocking)


def find_memory(memory_dir: Path, wanted: str) -> str:
    """The relative file of the memory ``wanted`` names: a file (``feedback_x.md``, with or
    without ``.md``) or a memory's ``name``. ``NotFound`` when none matches."""
    headers = scan_memories(memory_dir, max_files=1 << 30)
    files = {h.relative for h in headers}
    for candidate in (wanted, f"{wanted}.md"):
        try:
            relative = topic_relative(candidate)
        except ValueError:
            continue  # not a file name (a memory's name may hold any character)
        if relative in files:
            return relative
    key = name_key(wanted)
    for header in headers:
        if header.name is not None and name_key(header.name) == key:
            return header.relative
    raise NotFound(f"no memory named {wanted!r}; list_memories shows the names and files")


def read_memory(memory_dir: Path, wanted: str, *, now_ms: int, secrets: bool) -> dict[str, Any]:
    """One memory in full (up to :data:`READ_MAX_BYTES`), scrubbed, with its age and
    freshness warning (R-M7)."""
    relative = find_memory(memory_dir, wanted)
    path = memory_dir / relative
    try:
        with Area.open(memory_dir) as area:
            data, info = area.read(relative, max_bytes=READ_MAX_BYTES + 1)
    except OSError as exc:
        raise NotFound(f"memory {relative!r} cannot be read: {exc.strerror or exc}") from None
    mtime_ms = info.st_mtime_ns // 1_000_000
    text = data[:READ_MAX_BYTES].decode("utf-8", errors="replace")
    document = parse_document(text)
    meta = document.meta
    agent = dict(meta.extra).get("agent")
    body = scrub_text(document.body, secrets=secrets)
    quarantined = quarantine_reason(relative, text)  # issue 37: never into a context
    if quarantined is not None:
        body = f"[memd: this team memory is {quarantined}; it is not shown]\n"
        meta = replace(meta, name=None, description=None)
    if len(data) > READ_MAX_BYTES:
        body += f"\n[memd: cut at {READ_MAX_BYTES:,} bytes; the file is longer]\n"
    return {
        "file": relative,
        "path": str(path),
        "name": scrub_text(meta.name or PurePosixPath(relative).stem, secrets=secrets),
        "description": scrub_text(meta.description or "", secrets=secrets),
        "type": meta.type,
        "agent": scrub_text(str(agent), secrets=secrets) if agent is not None else None,
        "content": body,
        "problems": list(document.problems),
        "mtime": iso_mtime(mtime_ms),
        "age": age_text(mtime_ms, now_ms),
        "warning": freshness_warning(mtime_ms, now_ms),
        "team": asdict(note) if (note := note_of(relative, meta)) is not None else None,
    }
