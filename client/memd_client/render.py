"""Text rendering of daemon answers for ``memdctl`` (``--json`` prints them as they come).

Status has its own module (:mod:`memd_client.render_status`); these are the others. Every
figure carries its unit, times are relative ("3 min ago"), ids are as long as needed to be
unique in what is shown, and nothing prints a Python repr.
"""

from __future__ import annotations

import json
from typing import Any

from memd_client.agents import UNNAMED
from memd_client.textfmt import (
    ago,
    duration,
    size,
    table,
    to_epoch,
    tokens,
    tokens_bare,
    unique_prefixes,
)


def render_sessions(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return (
            "no sessions yet (memd follows Claude Code's, Codex's and Gemini's as they are written)"
        )
    short = unique_prefixes([str(r["session_id"]) for r in rows])
    body = []
    for r in rows:
        ctx = "-"
        if r.get("parsed"):
            ctx = (
                f"{tokens_bare(r.get('context_tokens'))}/{tokens_bare(r.get('compact_threshold'))}"
            )
            if r.get("context_stale"):
                ctx += "*"
        problems = _row_problems(r)
        body.append(
            [
                short[str(r["session_id"])],
                str(r.get("agent", UNNAMED.name)),
                ctx,
                str(r.get("message_count", 0)),
                ago(r.get("last_activity")),
                str(r.get("project", "")) + (f"  ({problems})" if problems else ""),
            ]
        )
    head = ["SESSION", "AGENT", "CONTEXT (tok)", "MSGS", "ACTIVE", "PROJECT"]
    out = table(head, body, right=(2, 3))
    if any(r.get("context_stale") for r in rows):
        out += "\n* estimated: compacted since the last model response"
    return out


def _row_problems(r: dict[str, Any]) -> str:
    parts = []
    if r.get("bad_lines"):
        parts.append(f"{r['bad_lines']} bad lines")
    if r.get("ignored"):
        parts.append(f"not followed: {r['ignored']}")
    unreadable = r.get("unreadable")
    if unreadable:
        parts.append(f"unreadable: {unreadable}" if isinstance(unreadable, str) else "unreadable")
    return ", ".join(parts)


SESSION_FIELDS = (
    ("agent", "agent", str),
    ("ignored", "not followed", str),
    ("project", "project", str),
    ("cwd", "cwd", str),
    ("path", "transcript", str),
    ("message_count", "messages", str),
    ("lines", "lines", str),
    ("bad_lines", "bad lines", str),
    ("tool_uses", "tool uses", str),
    ("turn_ends", "turns", str),
    ("boundaries_seen", "compactions", str),
    ("bytes_parsed", "read", size),
    ("size", "file size", size),
)


def render_session(r: dict[str, Any]) -> str:
    ctx = f"{tokens(r.get('context_tokens'))} of {tokens(r.get('compact_threshold'))} (compaction)"
    if r.get("context_stale"):
        ctx += ", estimated: compacted since the last model response"
    elif r.get("context_estimated_tail"):
        ctx += f", {tokens(r['context_estimated_tail'])} of it estimated"
    rows: list[tuple[str, str]] = [("session", str(r.get("session_id"))), ("context", ctx)]
    if r.get("context_window"):
        rows.append(("window", f"{tokens(r['context_window'])} ({r.get('window_source')})"))
    rows.append(("last active", ago(r.get("last_activity"))))
    for key, label, fmt in SESSION_FIELDS:
        if key in r and r[key] is not None:
            rows.append((label, fmt(r[key])))
    if r.get("unreadable"):
        rows.append(("unreadable", str(r["unreadable"])))
    unknown = r.get("unknown_types")
    if isinstance(unknown, dict) and unknown:
        said = ", ".join(f"{name} x{count}" for name, count in unknown.items())
        rows.append(("unknown types", f"{said} (lines memd skipped: a newer format?)"))
    if r.get("opted_out"):
        rows.append(("memory", f"off for this project: {r['opted_out']}"))
    rows += _notes_rows(r.get("notes"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _notes_rows(n: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not n:
        return [("notes", "no notes status (session notes are off or not loaded yet)")]
    state = notes_state(n)
    runs = f"{n.get('extractions', 0)} runs"
    if n.get("last_extracted_at"):
        runs += f", last {ago(n['last_extracted_at'])} ({tokens(n.get('last_cost_tokens'))} billed)"
    rows = [
        ("notes", f"{state}; {runs}"),
        ("notes file", str(n.get("notes_path", "-"))),
        (
            "next notes",
            f"at {tokens(n.get('next_trigger_tokens'))} of context "
            f"({n.get('next_trigger_condition', '')})",
        ),
    ]
    if n.get("last_error"):
        rows.append(("notes error", f"{n['last_error']} ({ago(n.get('last_error_at'))})"))
    return rows


def notes_state(n: dict[str, Any]) -> str:
    """fresh, due, running, waiting (why), failed, or none yet: one word a person can act on."""
    phase = n.get("phase")
    if phase == "running":
        return f"running for {duration(n.get('running_for_s'))}"
    if phase == "waiting":
        return f"waiting: {n.get('waiting_reason') or 'for its turn'}"
    if phase == "queued" or n.get("pending"):
        return "due"
    err_at, done_at = to_epoch(n.get("last_error_at")), to_epoch(n.get("last_extracted_at"))
    if err_at and (done_at is None or err_at > done_at):
        return "failed"
    if not n.get("extractions"):
        return "none yet"
    if n.get("context_tokens", 0) >= n.get("next_trigger_tokens", 0) > 0:
        return "due"
    return "fresh"


def render_reload(r: dict[str, Any]) -> str:
    lines = [str(r.get("result"))]
    if r.get("env_file_problem"):
        lines.append(f"env file: {r['env_file_problem']}")
    for key in r.get("restart_needed") or []:
        lines.append(
            f"{key} changed: it takes effect after a restart (systemctl --user restart memd)"
        )
    return "\n".join(lines)


def render_memories(r: dict[str, Any]) -> str:
    if r.get("opted_out"):
        return f"memory is off for this project: {r['opted_out']}"
    rows = r.get("memories") or r.get("rows") or []
    if not rows:
        why = f" ({r['disabled']})" if r.get("disabled") else ""
        return f"no memories yet in {r['memory_dir']}{why}"
    body = [
        [
            str(m.get("type") or "?"),
            _written(m),
            "pinned" if m.get("pinned") is True else "",
            str(m.get("relative") or m.get("path")),
            _by(m),
            str(m.get("quarantined") or m.get("description") or ""),
        ]
        for m in rows
    ]
    heads = ["TYPE", "WRITTEN", "PIN", "FILE", "BY", "DESCRIPTION"]
    listing = f"{r['memory_dir']}:\n" + table(heads, body)
    if "checked" not in r:
        return listing
    return listing + "\n\n" + render_checks(rows, str(r["checked"]))


def _by(row: dict[str, Any]) -> str:
    """Who shared a team memory, with which agent (issue 37); ``-`` for one not shared."""
    author = row.get("author")
    if not author:
        return "-"
    name = str(author).split(" <", 1)[0]
    return f"{name} ({row['agent']})" if row.get("agent") else name


def render_archived(r: dict[str, Any]) -> str:
    """``memories --archived``: what the archive beside the memory dir holds."""
    rows = r.get("archived") or []
    if not rows:
        return f"no archived memories in {r.get('archive_dir')}"
    body = [
        [
            str(m.get("type") or "?"),
            ago(m.get("archived_at")) if m.get("archived_at") else "-",
            str(m.get("archived")),
            str(m.get("description") or ""),
        ]
        for m in rows
    ]
    listing = table(["TYPE", "ARCHIVED", "FILE", "DESCRIPTION"], body)
    hint = "memdctl memories --restore FILE puts one back"
    return f"{r.get('archive_dir')}:\n{listing}\n\n{hint}"


def render_restored(r: dict[str, Any]) -> str:
    """``memories --restore``: where the memory is now."""
    index = "its line is back in MEMORY.md" if r.get("index") else "MEMORY.md unchanged"
    return f"restored {r.get('archived')} to {r.get('path')} ({index})"


def _written(row: dict[str, Any]) -> str:
    """How long ago a memory was written: from ``written`` (its ``modified`` when older than
    the file, as the hook ages it), else the mtime (an older daemon), else the age text."""
    when = row.get("written") or row.get("mtime")
    return ago(when) if when else str(row.get("age") or "-")


def render_checks(rows: list[dict[str, Any]], checked: str) -> str:
    """``memories --check``: per memory, what it cites and what no longer holds."""
    lines = [checked]
    for m in rows:
        cited = m.get("citations") or []
        if not cited:
            continue
        verdict = {True: "verified", False: "FAILS", None: "unchecked"}[m.get("verified")]
        lines.append(f"{m.get('relative')}: {verdict} ({', '.join(map(str, cited))})")
        lines += [f"  - {w}" for w in m.get("checks") or []]
    if len(lines) == 1:
        lines.append("no memory cites a file of this repository")
    return "\n".join(lines)


def render_recall(r: dict[str, Any]) -> str:
    if r.get("opted_out"):
        return f"memory is off for this project: {r['opted_out']}"
    found = r.get("memories") or []
    head = f"{len(found)} memories ({r.get('method')}: {r.get('reason')})"
    lines = [head]
    for m in found:
        lines.append(f"- {m.get('relative') or m.get('path')} [{m.get('type')}], {m.get('age')}")
        if m.get("warning"):
            lines.append(f"  {m['warning']}")
        lines += [f"  checked against the code: {w}" for w in m.get("checks") or []]
    if r.get("caveat"):
        lines += ["", str(r["caveat"])]
    return "\n".join(lines)


def render_notes(v: dict[str, Any]) -> str:
    if v["text"] is None:
        st = v["status"]
        head = f"no notes yet for {v['session_id']} ({v['path']})"
        if v.get("disabled"):
            return f"{head}; session notes are {v['disabled']}"
        return (
            f"{head}; the first extraction starts at {tokens(st['next_trigger_tokens'])} "
            f"of context (now {tokens(st['context_tokens'])})"
        )
    return str(v["text"]).rstrip("\n")


def render_notes_status(s: dict[str, Any]) -> str:
    runs = f"{s.get('extractions', 0)}"
    if s.get("last_extracted_at"):
        runs += f", last {ago(s['last_extracted_at'])}, {tokens(s.get('last_cost_tokens'))} billed"
    lines = [
        f"session   {s['session_id']}  (notes {notes_state(s)})",
        f"notes     {s['notes_path']}",
        f"runs      {runs}",
        f"next      at {tokens(s['next_trigger_tokens'])} of context "
        f"({s['next_trigger_condition']})",
    ]
    if s.get("last_error"):
        lines.append(f"error     {s['last_error']} ({ago(s.get('last_error_at'))})")
    return "\n".join(lines)


def render_compact(r: dict[str, Any]) -> str:
    took = r.get("server_ms")
    text = _render_compact(r)
    if isinstance(took, dict) and isinstance(took.get("total"), int | float):
        text += f"\n(memd took {took['total']:.0f} ms"
        if isinstance(took.get("input"), int | float):
            text += f", {took['input']:.0f} ms of it getting the session's messages"
        text += ")"
    return text


def render_fork(r: dict[str, Any]) -> str:
    """``compact --fork``: the new session and how to go on in it."""
    return (
        f"forked into session {r['session']} ({tokens(r['tokens_before'])} -> "
        f"{tokens(r['tokens_after'])}, {r['kept_messages']} recent messages kept, no model "
        f"call); the old session is unchanged\n"
        f"resume it with: {r['resume']}"
    )


def _render_compact(r: dict[str, Any]) -> str:
    if r.get("dry_run") and r.get("level") is None:
        return (
            f"would not compact: level 1 does not apply ({r['reason']}) and level 2 needs the "
            f"model, which is disabled: {r.get('disabled')}"
        )
    if r.get("dry_run"):
        head = f"would use level {r['level']}: the messages hold ~{tokens(r['tokens_before'])}"
        if r.get("context_tokens"):
            head += f" (live context with system prompt and tools: {tokens(r['context_tokens'])})"
        if r["level"] == 1:
            return (
                f"{head} -> {tokens(r['tokens_after'])} after (no model call)\n"
                f"cut before message {r['cut_index']}: {r['dropped_messages']} replaced by the "
                f"notes, {r['kept_messages']} kept"
                + (
                    f"; sections cut: {', '.join(r['truncated_sections'])}"
                    if r["truncated_sections"]
                    else ""
                )
            )
        return f"{head}; level 1 does not apply: {r['reason']} (a summary call would be needed)"
    if not r.get("compacted"):
        return f"not compacted: {r['reason']}"
    return (
        f"level {r['level']}: {tokens(r['tokens_before'])} -> {tokens(r['tokens_after'])}, "
        f"{r['api_calls']} API calls, {len(r['messages'])} messages, "
        f"{len(r['restore']['files'])} files to restore"
    )


def render_config(c: dict[str, Any]) -> str:
    lines = [
        f"# {k}: {v if v is not None else '(none: defaults only)'}" for k, v in c["paths"].items()
    ]
    for section, values in c["config"].items():
        lines.append(f"{section}:")
        lines += _yaml_lines(values, "  ")
    return "\n".join(lines)


def _yaml_lines(values: dict[str, Any], indent: str) -> list[str]:
    out: list[str] = []
    for key, value in values.items():
        if isinstance(value, dict):
            out.append(f"{indent}{key}:")
            out += _yaml_lines(value, indent + "  ")
        else:
            out.append(f"{indent}{key}: {json.dumps(value)}")
    return out
