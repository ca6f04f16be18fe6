"""``status``'s reply as it reads in full: what the daemon sends once, written out again.

The daemon keeps ``status`` small (a client decodes ~4 µs a KB, on every refresh of
``memdctl top``): the session rows come as columns (``{"columns", "compact_threshold",
"rows"}``, see ``memd/ipc/status_rows.py``) and a section off because the model is says
:data:`~memd_client.protocol.SAME_AS_LLM` instead of ``llm.reason``'s sentence.
:func:`expanded` gives the map every renderer (and ``memdctl status --json``) reads: rows
as maps, reasons in place. Defensive like the renderers: a reply that lacks a part, or an
older daemon's that has rows as maps already, passes through.
"""

from __future__ import annotations

from typing import Any

from memd_client.protocol import LLM_REASON_AT, SAME_AS_LLM


def expanded(status: Any) -> Any:
    """``status`` with its session rows as maps and the model's reason in every section that
    points to it (a new map: the reply is not changed)."""
    if not isinstance(status, dict):
        return status
    out = dict(status)
    sessions = out.get("sessions")
    if isinstance(sessions, dict):
        out["sessions"] = rows_as_maps(sessions)
    llm = out.get("llm")
    reason = llm.get("reason") if isinstance(llm, dict) else None
    for path in LLM_REASON_AT:
        out = _reason_written(out, path, reason)
    return out


def rows_as_maps(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a ``sessions`` section in columns as maps (each with the threshold and its
    marks, as ``status`` listed them before)."""
    columns, rows = section.get("columns"), section.get("rows")
    if not isinstance(columns, list) or not isinstance(rows, list):
        return []
    out = []
    for row in rows:
        if not isinstance(row, list):
            continue
        named = dict(zip(columns, row, strict=False))
        named["compact_threshold"] = section.get("compact_threshold")
        marks = row[len(columns)] if len(row) > len(columns) else None
        if isinstance(marks, dict):
            named.update(marks)
        out.append(named)
    return out


def _reason_written(tree: dict[str, Any], path: tuple[str, ...], reason: Any) -> dict[str, Any]:
    """``tree`` with the value at ``path`` replaced by ``reason`` if it is the pointer."""
    inner = tree.get(path[0])
    if len(path) == 1:
        return {**tree, path[0]: reason} if inner == SAME_AS_LLM else tree
    if not isinstance(inner, dict):
        return tree
    written = _reason_written(inner, path[1:], reason)
    return tree if written is inner else {**tree, path[0]: written}
