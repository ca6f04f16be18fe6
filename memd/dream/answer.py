"""A one-answer dream's answer (issue 34), checked whole before anything changes (pure).

The model answers ``{"summary": …, "operations": [...]}`` with these operations:

* ``{"op": "merge", "files": [a, b, …], "text": …}``: ``a`` holds ``text``, the others are
  deleted as merged into it;
* ``{"op": "edit", "file": f, "text": …}`` (the whole new note) or ``{"op": "edit",
  "file": f, "old": …, "new": …}`` (``old`` found exactly once);
* ``{"op": "delete", "file": f, "merged_into": g}``: ``g`` is a note this answer merges
  into or edits (R-M8: a memory is deleted only once its content lives in another);
* ``{"op": "index", "lines": [...]}``: MEMORY.md's new lines, entries and headings.

:func:`plan` turns them into a :class:`Plan` or raises
:class:`~memd.errors.MalformedAnswer`, which changes nothing. It holds when:

* every name is one of the topic files memd showed whole, exactly (memd named them: nothing
  the model writes is resolved as a path), each in one operation at most; no new file;
* ``team/`` is kept as the tool loop keeps it (:func:`memd.dream.tools.team_denial`): never
  merged into from a personal note, never deleted but for a sync's conflict copy merged into
  the note its ``reconcile_with`` names;
* every note written has valid frontmatter (name, description, a valid type), is at most
  :data:`TEXT_MAX_BYTES`, and keeps at least a third of the longest note it replaces;
* every index line is an entry for a note that remains, or a heading; the index is within
  R-M2's limits;
* the R-B3 guard (:func:`memd.dream.wipe.problems`) finds nothing in the memory dir as it
  would be after: no empty index, no deleting most files.

Without an ``index`` operation, the lines of deleted notes are dropped from the index and a
note merged into that has no line gets one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from memd.dream import wipe
from memd.dream.tools import team_denial
from memd.errors import MalformedAnswer
from memd.llm.client import LLMReply
from memd.memory.frontmatter import parse_document
from memd.memory.index import IndexEntry, parse_entry, render_entry, upsert_entry
from memd.memory.operations import json_object
from memd.privacy import scrub_text
from memd.team.provenance import provenance

MAX_OPERATIONS = 40
TEXT_MAX_BYTES = 16_384
KEEP_AT_LEAST = 1 / 3  # of the longest note's body a note written in its place keeps
KEEP_FROM_CHARS = 200  # bodies shorter than this may shrink freely
OPS = ("merge", "edit", "delete", "index")


@dataclass(frozen=True)
class Step:
    """One operation as it will be applied (progress in ``status`` shows it)."""

    op: str
    touched: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    writes: dict[str, bytes]  # topic file → its new bytes, in the order given
    deletes: dict[str, str]  # topic file → the file it was merged into
    index: bytes | None  # MEMORY.md's new bytes; None: unchanged
    steps: tuple[Step, ...]
    summary: str = ""


@dataclass(frozen=True)
class Shown:
    """What the answer is checked against: the files shown whole (their bytes before), every
    topic file there was, the index before, the limits."""

    whole: Mapping[str, bytes]
    files: Set[str]  # every file the memory dir held (the snapshot's)
    index: bytes | None
    limits: wipe.Limits
    secrets: bool = True


@dataclass
class _Draft:
    writes: dict[str, bytes] = field(default_factory=dict)
    deletes: dict[str, str] = field(default_factory=dict)
    index: bytes | None = None
    steps: list[Step] = field(default_factory=list)
    claimed: set[str] = field(default_factory=set)


def operations_of(reply: LLMReply) -> tuple[list[dict[str, Any]], str]:
    """The operations and summary of an answer; :class:`MalformedAnswer` when it is cut
    short, not JSON, not that shape, or holds too many."""
    if reply.cut_short:
        raise MalformedAnswer("the answer was cut short at the output limit; nothing changed")
    data = json_object(reply.text)
    ops = data.get("operations") if isinstance(data, dict) else None
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise MalformedAnswer('the answer is not {"operations": [{...}, ...]}; nothing changed')
    if len(ops) > MAX_OPERATIONS:
        raise MalformedAnswer(f"{len(ops)} operations, over {MAX_OPERATIONS}; nothing changed")
    summary = data.get("summary")
    return ops, (summary.strip()[:500] if isinstance(summary, str) else "")


def plan(ops: Sequence[Mapping[str, Any]], shown: Shown, summary: str = "") -> Plan:
    """The changes ``ops`` ask for, every one checked (see the module docstring)."""
    draft = _Draft()
    for number, op in enumerate(ops, 1):
        try:
            _add(draft, op, shown)
        except _Bad as bad:
            why = f"operation {number} ({_kind(op)}): {bad}; nothing changed"
            raise MalformedAnswer(why) from None
    for relative, into in draft.deletes.items():
        if into not in draft.writes:
            raise MalformedAnswer(
                f"{relative} would be deleted as merged into {into}, which this answer does "
                "not merge into or edit; nothing changed"
            )
    if draft.index is None and draft.deletes:
        draft.index = _pruned_index(shown.index, draft)
    problems = wipe.problems(set(shown.files), shown.index, _after(draft, shown), shown.limits)
    if problems:
        raise MalformedAnswer(f"the answer would leave: {'; '.join(problems)}; nothing changed")
    steps = tuple(draft.steps)
    return Plan(draft.writes, draft.deletes, draft.index, steps, summary)


class _Bad(Exception):
    """Why one operation cannot be applied (the caller names it)."""


def _kind(op: Mapping[str, Any]) -> str:
    kind = op.get("op")
    return kind if isinstance(kind, str) and kind in OPS else "unknown"


def _add(draft: _Draft, op: Mapping[str, Any], shown: Shown) -> None:
    match op.get("op"):
        case "merge":
            _merge(draft, op, shown)
        case "edit":
            _edit(draft, op, shown)
        case "delete":
            _delete(draft, op, shown)
        case "index":
            _index(draft, op, shown)
        case other:
            raise _Bad(f"{str(other)[:40]!r} is none of {', '.join(OPS)}")


def _named(draft: _Draft, value: object, shown: Shown) -> str:
    """A file name the model gave: exactly a file shown whole, not yet in an operation."""
    if not isinstance(value, str) or value not in shown.whole:
        return _refuse_name(value)
    if value in draft.claimed:
        raise _Bad(f"{value} is in an earlier operation already")
    draft.claimed.add(value)
    return value


def _refuse_name(value: object) -> str:
    named = repr(value)[:80]
    raise _Bad(f"{named} is not one of the notes shown whole (name them exactly as shown)")


def _merge(draft: _Draft, op: Mapping[str, Any], shown: Shown) -> None:
    files = op.get("files")
    if not isinstance(files, list) or len(files) < 2:
        raise _Bad("files must list two notes or more")
    names = [_named(draft, value, shown) for value in files]
    into, rest = names[0], names[1:]
    for relative in rest:
        _deletable(relative, into, shown)
    draft.writes[into] = _checked_text(op.get("text"), names, shown)
    for relative in rest:
        draft.deletes[relative] = into
    draft.steps.append(Step("merge", tuple(names)))


def _edit(draft: _Draft, op: Mapping[str, Any], shown: Shown) -> None:
    relative = _named(draft, op.get("file"), shown)
    text, old, new = op.get("text"), op.get("old"), op.get("new")
    if text is None and isinstance(old, str) and isinstance(new, str):
        current = shown.whole[relative].decode("utf-8")
        if not old or current.count(old) != 1:
            raise _Bad(f"old must be text found exactly once in {relative}")
        text = current.replace(old, new)
    elif not isinstance(text, str) or old is not None or new is not None:
        raise _Bad("an edit gives either text (the whole note) or old and new")
    draft.writes[relative] = _checked_text(text, [relative], shown)
    draft.steps.append(Step("edit", (relative,)))


def _delete(draft: _Draft, op: Mapping[str, Any], shown: Shown) -> None:
    relative = _named(draft, op.get("file"), shown)
    into = op.get("merged_into")
    if not isinstance(into, str) or into not in shown.whole or into == relative:
        raise _Bad("merged_into must name the note (shown whole) that now holds its content")
    _deletable(relative, into, shown)
    draft.deletes[relative] = into
    draft.steps.append(Step("delete", (relative,)))


def _deletable(relative: str, into: str, shown: Shown) -> None:
    """``relative`` may be deleted as merged into ``into``: a personal note into a personal
    one; a team note only when it is a sync's conflict copy whose ``reconcile_with`` names
    ``into`` (issue 37, as the tool loop's Delete allows)."""
    if _team(into) and not _team(relative):
        raise _Bad(f"{into} is a team memory; a personal one is never merged into team/")
    denied = team_denial("Delete", relative, exists=True)
    if denied is None:
        return
    meta = parse_document(shown.whole[relative].decode("utf-8", "replace")).meta
    if provenance(meta).reconcile_with != into:
        raise _Bad(denied.reason.removeprefix("denied: "))


def _team(relative: str) -> bool:
    return team_denial("Delete", relative, exists=True) is not None


def _checked_text(value: object, replaces: Sequence[str], shown: Shown) -> bytes:
    """A note's new text, scrubbed and checked: size, frontmatter, what it keeps."""
    if not isinstance(value, str) or not value.strip():
        raise _Bad("text must be the whole note")
    text = scrub_text(value, secrets=shown.secrets)
    text = text if text.endswith("\n") else text + "\n"
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from the JSON
        raise _Bad("the note is not plain UTF-8 text") from None
    if len(data) > TEXT_MAX_BYTES:
        raise _Bad(f"the note is {len(data)} bytes, over {TEXT_MAX_BYTES}")
    if "\x00" in text:
        raise _Bad("the note holds a NUL character")
    bad = wipe.frontmatter_problem(text)
    if bad is not None:
        raise _Bad(f"the note's {bad}")
    longest = max(_body_chars(shown.whole[r].decode("utf-8")) for r in replaces)
    if longest > KEEP_FROM_CHARS and _body_chars(text) < longest * KEEP_AT_LEAST:
        raise _Bad(f"the note drops most of what {', '.join(replaces)} held")
    return data


def _body_chars(text: str) -> int:
    return len(parse_document(text).body.strip())


def _index(draft: _Draft, op: Mapping[str, Any], shown: Shown) -> None:
    lines = op.get("lines")
    if draft.index is not None:
        raise _Bad("one index operation at most")
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise _Bad("lines must be a list of the index's lines")
    remaining = {f for f in shown.files if wipe.is_topic(f)} - set(draft.deletes)
    out: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#") and "\n" not in stripped and "\x00" not in stripped:
            out.append(stripped)
            continue
        entry = parse_entry(stripped)
        if entry is None or "\n" in stripped or "\x00" in stripped:
            raise _Bad(f"{stripped[:80]!r} is no entry (- [Title](file.md) — hook) or heading")
        file = entry.file.removeprefix("./")
        if file not in remaining:
            raise _Bad(f"the line for {file[:80]!r} points at no note that remains")
        out.append(render_entry(IndexEntry(entry.title, file, entry.hook)))
    text = scrub_text("".join(f"{line}\n" for line in out), secrets=shown.secrets)
    _within_limits(text, shown.limits)
    try:
        draft.index = text.encode("utf-8")
    except UnicodeEncodeError:
        raise _Bad("the index is not plain UTF-8 text") from None
    draft.steps.append(Step("index", ("MEMORY.md",)))


def _within_limits(text: str, limits: wipe.Limits) -> None:
    lines, size = len(text.splitlines()), len(text.encode("utf-8", "replace"))
    if lines > limits.index_max_lines or size > limits.index_max_bytes:
        raise _Bad(
            f"the index would be {lines} lines and {size} bytes, over R-M2's "
            f"{limits.index_max_lines} lines and {limits.index_max_bytes} bytes"
        )


def _pruned_index(index: bytes | None, draft: _Draft) -> bytes | None:
    """The index without the lines of deleted notes, a line added for a note merged into that
    had none; ``None`` when that changes nothing."""
    if index is None:
        return None
    text = index.decode("utf-8", "replace")
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if (entry := parse_entry(line)) is None
        or entry.file.removeprefix("./") not in draft.deletes
    ]
    pruned = "".join(kept)
    listed = {e.file.removeprefix("./") for line in kept if (e := parse_entry(line))}
    for into in dict.fromkeys(draft.deletes.values()):
        if into not in listed:
            meta = parse_document(draft.writes[into].decode("utf-8")).meta
            entry = IndexEntry(meta.name or into, into, meta.description or "")
            pruned = upsert_entry(pruned, entry)
    data = pruned.encode("utf-8")
    if data != index:
        draft.steps.append(Step("index", ("MEMORY.md",)))
    return data if data != index else None


def _after(draft: _Draft, shown: Shown) -> wipe.After:
    files = (set(shown.files) | set(draft.writes)) - set(draft.deletes)
    index = draft.index if draft.index is not None else shown.index
    if index is not None:
        files.add("MEMORY.md")
    texts = {r: data.decode("utf-8", "replace") for r, data in draft.writes.items()}
    return wipe.After(files, index, texts)
