"""The active chain of a conversation, walked from its leaf (R-T4; FORMAT.md §6).

From the newest entry, ``parentUuid`` is followed back to a root; a ``compact_boundary`` is a
root (what came before is no longer in context). Parallel tool calls make the transcript a
little tree: each tool_use line gets its own tool_result child and the walk passes through
only one of them, so the other lines of each response on the chain, and the tool results
answering them, are taken back in. :class:`~memd.transcript.conversation.Conversation` keeps
the indexes this reads (:data:`Uuids` values, built with :func:`append`).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

from memd.transcript.model import AssistantEntry, Entry, SystemEntry, UserEntry

Uuids = str | list[str]
"""The uuids an index holds for one key: one as itself, more as a list (most responses have
one line)."""

_AT = operator.attrgetter("at")


def active_chain(
    leaf: str | None,
    entries: Mapping[str, Entry],
    response_lines: Mapping[str, Uuids],
    results_by_parent: Mapping[str, Uuids],
) -> tuple[Entry, ...]:
    """The entries in the model's context, oldest first, from ``leaf`` (resolved to an entry
    of ``entries``): the walk back, then the lines of its responses the walk missed and the
    tool results answering them (``response_lines``: message id to its lines;
    ``results_by_parent``: a line's uuid to the tool-result lines that name it)."""
    spine, on_spine = _spine(leaf, entries)
    extra = _recovered(spine, on_spine, entries, response_lines, results_by_parent)
    if not extra:
        return tuple(spine)
    merged = {entry.uuid: entry for entry in (*spine, *extra)}
    return tuple(sorted(merged.values(), key=_AT))


def _spine(leaf: str | None, entries: Mapping[str, Entry]) -> tuple[list[Entry], set[str]]:
    spine: list[Entry] = []
    seen: set[str] = set()
    current = leaf
    while current is not None and current not in seen:
        entry = entries.get(current)
        if entry is None:
            break
        seen.add(current)
        spine.append(entry)
        if type(entry) is SystemEntry and entry.is_compact_boundary:
            break
        current = entry.parent_uuid
    spine.reverse()
    return spine, seen


def _recovered(
    spine: list[Entry],
    on_spine: set[str],
    entries: Mapping[str, Entry],
    response_lines: Mapping[str, Uuids],
    results: Mapping[str, Uuids],
) -> list[Entry]:
    """Lines of the chain's responses that the walk missed, and their tool results."""
    extra: list[Entry] = []
    responses = {e.message_id for e in spine if type(e) is AssistantEntry}
    for message_id in responses:
        lines = every(response_lines[message_id])
        extra += [entries[uuid] for uuid in lines if uuid not in on_spine]
        missed = [r for uuid in lines for r in every(results.get(uuid, ())) if r not in on_spine]
        if missed:
            called = {i for uuid in lines for i in _calls(entries[uuid])}
            extra += [entries[r] for r in missed if called.intersection(_answers(entries[r]))]
    return extra


def append(index: dict[str, Uuids], key: str, uuid: str) -> None:
    """Add ``uuid`` to what ``index`` holds for ``key``."""
    held = index.get(key)
    if held is None:
        index[key] = uuid
    elif isinstance(held, str):
        index[key] = [held, uuid]
    else:
        held.append(uuid)


def first_of(held: Uuids) -> str:
    return held if isinstance(held, str) else held[0]


def every(held: Uuids | tuple[()]) -> Sequence[str]:
    return (held,) if isinstance(held, str) else held


def _calls(entry: Entry) -> tuple[str, ...]:
    return entry.tool_use_ids if type(entry) is AssistantEntry else ()


def _answers(entry: Entry) -> tuple[str, ...]:
    return entry.tool_result_ids if type(entry) is UserEntry else ()
