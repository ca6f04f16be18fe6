"""YAML frontmatter of memory topic files: tolerant parsing and rendering (R-M1).

A topic file looks like::

    ---
    name: Debugging patterns
    description: Token rotation and DB connection troubleshooting
    type: reference
    ---

    ## Auth token issues
    ...

Claude Code 2.1.197 asks its agent for the type under ``metadata:`` instead
(``metadata:\n  type: feedback``); both forms are read (top-level ``type`` wins), and
:func:`render_document` writes either (``form``), keeping the other ``metadata`` keys.
Claude Code 2.1.331 writes a kebab-case ``name`` and stamps ``modified`` (ISO 8601, UTC;
2.1.214 on) and ``originSessionId`` under ``metadata``; ``metadata.pinned: true`` marks a
memory loaded into every session. ``modified`` and ``pinned`` are read from either place
(:attr:`Frontmatter.modified`, :attr:`Frontmatter.pinned`) and kept where they were when a
file is written back. ``[[name]]`` in a body links to the memory of that ``name``
(:func:`links`).

Parsing never raises: whatever is wrong (no frontmatter, an unclosed block, invalid YAML, a
type outside {user, feedback, project, reference}) is reported in ``Document.problems`` and the
fields that could be read are kept. Invalid YAML falls back to reading plain ``key: value``
lines, because the commonest breakage is an unquoted colon inside a description.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Literal, get_args

import yaml

MemoryType = Literal["user", "feedback", "project", "reference"]
FrontmatterForm = Literal["metadata", "top-level"]
MEMORY_TYPES: tuple[MemoryType, ...] = get_args(MemoryType)

_FENCE = "---"
_KNOWN = ("name", "description", "type")
_PLAIN_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)\s*:\s?(.*)$")
_SPACES = re.compile(r"\s+")
# The C build of the same safe loader when PyYAML has it: ~10x faster on frontmatter.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_LINK = re.compile(r"\[\[([^\[\]\n|#]{1,120})(?:[|#][^\[\]\n]{0,200})?\]\]")
MAX_LINKS = 32  # of one memory's body


@dataclass(frozen=True)
class Frontmatter:
    """The fields memd uses; any other keys are kept in ``extra`` in file order."""

    name: str | None = None
    description: str | None = None
    type: MemoryType | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    modified: str | None = None  # ISO 8601 UTC (``…Z``), from ``modified`` or ``metadata.modified``
    pinned: bool = False  # ``metadata.pinned: true`` (or a top-level ``pinned: true``)


@dataclass(frozen=True)
class Document:
    """A parsed topic file. ``problems`` is empty when the frontmatter is complete and valid."""

    meta: Frontmatter
    body: str
    has_frontmatter: bool
    problems: tuple[str, ...] = field(default=())


def parse_memory_type(value: object) -> MemoryType | None:
    """The memory type named by ``value`` (case and spaces ignored), else ``None``."""
    if not isinstance(value, str):
        return None
    wanted = value.strip().lower()
    for kind in MEMORY_TYPES:
        if kind == wanted:
            return kind
    return None


def parse_document(text: str) -> Document:
    """Split ``text`` into frontmatter and body; report, never raise, what is wrong.

    ``text`` may be only the head of a file (the scan reads 30 lines): a block that does not
    close within it is reported as unclosed and its lines are still read.
    """
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        return Document(Frontmatter(), text, False, ("no frontmatter",))
    close = next((i for i in range(1, len(lines)) if lines[i].strip() in (_FENCE, "...")), None)
    problems: list[str] = []
    if close is None:
        problems.append("frontmatter is not closed with '---'")
        block, body = "".join(lines[1:]), ""
    else:
        block, body = "".join(lines[1:close]), "".join(lines[close + 1 :])
    raw = _load_block(block, problems)
    meta = _meta_from(raw, problems)
    return Document(meta, body.removeprefix("\n"), True, tuple(problems))


def _load_block(block: str, problems: list[str]) -> Mapping[str, Any]:
    try:
        loaded = yaml.load(block, Loader=_SAFE_LOADER) if block.strip() else {}
    except (yaml.YAMLError, RecursionError, ValueError) as exc:  # ValueError: an integer
        # of over 4,300 digits, which Python refuses to read
        problems.append(f"frontmatter is not valid YAML ({_first_line(exc)}); read line by line")
        return _plain_pairs(block)
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        problems.append("frontmatter is not a mapping of keys to values")
        return {}
    return {str(key): value for key, value in loaded.items()}


def _plain_pairs(block: str) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    for line in block.splitlines():
        match = _PLAIN_LINE.match(line)
        if match:
            value = match.group(2).strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            pairs.setdefault(match.group(1), value)
    return pairs


def _first_line(exc: Exception) -> str:
    problem = getattr(exc, "problem", None)
    lines = str(problem or exc).splitlines()
    return lines[0] if lines else type(exc).__name__


def _meta_from(raw: Mapping[str, Any], problems: list[str]) -> Frontmatter:
    name = _one_line(raw.get("name"), "name", problems)
    description = _one_line(raw.get("description"), "description", problems)
    nested = raw.get("metadata")
    given: object = raw.get("type")
    if "type" not in raw and isinstance(nested, dict) and "type" in nested:
        given = nested["type"]
    kind = parse_memory_type(given)
    if "type" not in raw and not (isinstance(nested, dict) and "type" in nested):
        problems.append("no type (expected one of " + ", ".join(MEMORY_TYPES) + ")")
    elif kind is None:
        problems.append(f"type {str(given)[:80]!r} is not one of " + ", ".join(MEMORY_TYPES))
    if description is None:
        problems.append("no description")
    extra = tuple(_without_nested_type(k, v) for k, v in raw.items() if k not in _KNOWN)
    inner: Mapping[str, Any] = nested if isinstance(nested, dict) else {}
    modified = iso_utc(raw.get("modified", inner.get("modified")))
    pinned = raw.get("pinned", inner.get("pinned")) is True
    kept = tuple((k, _plain(v)) for k, v in extra if v != {})
    return Frontmatter(name, description, kind, kept, modified, pinned)


def iso_utc(value: object) -> str | None:
    """A timestamp (YAML's datetime or ISO 8601 text) as ``YYYY-MM-DDTHH:MM:SS.mmmZ``;
    ``None`` for anything else (a date alone, a number, text that is not a time)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    try:
        moment = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except (OverflowError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def modified_ms(meta: Frontmatter) -> int | None:
    """``meta.modified`` in milliseconds since the epoch, ``None`` without one."""
    return _iso_ms(meta.modified)


def _iso_ms(modified: str | None) -> int | None:
    if modified is None:
        return None
    return int(datetime.fromisoformat(modified.replace("Z", "+00:00")).timestamp() * 1000)


def written_ms(mtime_ms: int, modified: str | None) -> int:
    """When a memory was last written, for its age (R-M7): the file's mtime, or the
    ``modified`` Claude Code stamps in it (:attr:`Frontmatter.modified`, which a scanned
    header carries too) when that is earlier. A copy, a checkout or a sync gives an old memory
    a new mtime; a hand edit that leaves ``modified`` behind makes it look older than it is,
    the safe side for a warning about stale memories. What recall, the hook and ``memdctl
    memories`` age a memory from."""
    stamped = _iso_ms(modified)
    return mtime_ms if stamped is None or stamped < 0 else min(mtime_ms, stamped)


def links(body: str) -> tuple[str, ...]:
    """The names ``[[name]]`` links point at in ``body``, in order, each once (at most
    :data:`MAX_LINKS`); ``[[name|label]]`` and ``[[name#part]]`` name ``name``."""
    found: dict[str, None] = {}
    for match in _LINK.finditer(body):
        name = normalize_line(match.group(1))
        if name:
            found.setdefault(name, None)
            if len(found) >= MAX_LINKS:
                break
    return tuple(found)


def _without_nested_type(key: str, value: Any) -> tuple[str, Any]:
    """``metadata.type`` is the type (in ``Frontmatter.type``), not an extra key."""
    if key == "metadata" and isinstance(value, dict):
        return key, {k: v for k, v in value.items() if k != "type"}
    return key, value


def _one_line(value: object, key: str, problems: list[str]) -> str | None:
    if value is None:
        return None
    if isinstance(value, list | dict):
        problems.append(f"{key} should be a single line of text")
        return None
    text = normalize_line(str(value))
    return text or None


def normalize_line(text: str) -> str:
    """Collapse all whitespace (newlines included) to single spaces and trim."""
    return _SPACES.sub(" ", text).strip()


def _plain(value: Any) -> Any:
    """``value`` with timestamps as the ISO text Claude Code writes (YAML reads them as
    datetimes and would write ``2026-01-02 03:04:05+00:00``)."""
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def render_document(meta: Frontmatter, body: str, *, form: FrontmatterForm = "metadata") -> str:
    """Frontmatter block, a blank line, then ``body``; parses back to the same fields. The
    type goes where ``form`` says (``metadata``: Claude Code 2.1.197 and later)."""
    data: dict[str, Any] = {}
    if meta.name is not None:
        data["name"] = normalize_line(meta.name)
    if meta.description is not None:
        data["description"] = normalize_line(meta.description)
    if meta.type is not None and form == "top-level":
        data["type"] = meta.type
    for key, value in meta.extra:
        if key not in _KNOWN:
            data[key] = value
    nested = data.get("metadata")
    if isinstance(nested, dict):
        nested = {k: v for k, v in nested.items() if k != "type"}
    if meta.type is not None and form == "metadata":
        nested = {**(nested if isinstance(nested, dict) else {}), "type": meta.type}
    if isinstance(nested, dict):
        if nested:
            data["metadata"] = nested
        else:
            data.pop("metadata", None)
    data = {key: _plain(value) for key, value in data.items()}
    block = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1 << 30) if data else ""
    return f"{_FENCE}\n{block}{_FENCE}\n\n{body}"
