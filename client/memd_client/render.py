"""Text rendering of daemon answers for ``memdctl`` (the JSON is printed as it comes)."""

from __future__ import annotations

import json
import time
from typing import Any


def _k(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def render_status(s: dict[str, Any]) -> str:
    d, ing, llm = s["daemon"], s["ingest"], s["llm"]
    lines = [
        f"memd {d['version']}  pid {d['pid']}  up {d['uptime_s']:.0f}s  "
        f"rss {d['rss_bytes'] / 2**20:.1f} MiB",
        f"socket    {d['socket']}",
        f"projects  {d['projects_root']}",
        f"model     {'enabled (' + llm['provider'] + ')' if llm['enabled'] else llm['reason']}",
        f"sessions  {ing['sessions']} known, {ing['parsed']} parsed, {ing['in_memory']} in memory; "
        f"{ing['queued']} queued for reading",
        f"ingest    {ing['bytes_parsed'] / 2**20:.1f} MiB in {ing['lines']} lines, "
        f"{ing['bad_lines']} bad lines skipped",
        f"errors    {s['errors_last_hour']} in the last hour"
        + (f" (last: {s['last_error']})" if s["last_error"] else ""),
        *render_spend(s.get("usage"), s.get("guard")),
        *render_pipeline(s.get("pipeline")),
    ]
    if s["sessions"]:
        lines += ["", render_sessions(s["sessions"])]
    return "\n".join(lines)


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(ts))


def render_spend(usage: dict[str, Any] | None, guard: dict[str, Any] | None) -> list[str]:
    """Token spend, budget left and back-off state (R-A4, R-B1, R-B8)."""
    if not usage or not guard:
        return []
    hour, day = guard["budget"]["hour"], guard["budget"]["day"]

    def left(window: dict[str, Any]) -> str:
        if not window["limit"]:
            return "unlimited"
        return f"{_k(max(0, window['limit'] - window['spent']))} left of {_k(window['limit'])}"

    lines = [
        f"tokens    last hour {_k(usage['last_hour']['billed'])} billed in "
        f"{usage['last_hour']['calls']} calls; today {_k(usage['last_day']['billed'])}",
        f"budget    hour: {left(hour)}; day: {left(day)}",
    ]
    if guard["budget"]["paused_until"]:
        lines.append(
            "PAUSED    background work waits for budget until "
            + _when(guard["budget"]["paused_until"])
        )
    if guard.get("account_blocked"):
        lines.append(f"BLOCKED   {guard['account_blocked']}")
    for kind, k in guard["kinds"].items():
        if k["consecutive_failures"] or k["parked"]:
            lines.append(
                f"backoff   {kind}: {k['consecutive_failures']} failures in a row, next try "
                f"{_when(k['next_retry_at'])}; last error: {k['last_error']}"
                + (f"; {len(k['parked'])} parked" if k["parked"] else "")
            )
    return lines


def render_pipeline(p: dict[str, Any] | None) -> list[str]:
    if not p:
        return []
    line = (
        f"work      {p['state']}: {p['pending']} pending, last done {_when(p['last_progress_at'])}"
    )
    if p["state"] == "stalled":
        line += "  <- STALLED: work is queued and nothing finished for a long time"
    return [line]


def render_sessions(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no sessions yet (memd watches Claude Code transcripts as they are written)"
    out = [f"{'SESSION':<10} {'CONTEXT':>16} {'MSGS':>5} {'LAST ACTIVITY':<26} PROJECT"]
    for r in rows:
        ctx = "-" if not r["parsed"] else f"{_k(r['context_tokens'])}/{_k(r['compact_threshold'])}"
        if r["context_stale"]:
            ctx += "*"
        out.append(
            f"{r['session_id'][:8]:<10} {ctx:>16} {r['message_count']:>5} "
            f"{r['last_activity']:<26} {r['project']}"
        )
    if any(r["context_stale"] for r in rows):
        out.append("* estimated: compacted since the last model response")
    return "\n".join(out)


def render_session(r: dict[str, Any]) -> str:
    keys = [
        "session_id", "project", "cwd", "path", "message_count", "context_tokens",
        "context_from_usage", "context_estimated_tail", "context_stale", "compact_threshold",
        "last_activity", "boundaries_seen", "tool_uses", "turn_ends", "bytes_parsed", "offset",
        "size", "lines", "bad_lines",
    ]  # fmt: skip
    lines = [f"{k:<24} {r.get(k)}" for k in keys]
    for b in r.get("boundaries", []):
        lines.append(f"{'boundary':<24} {b}")
    return "\n".join(lines)


def render_memories(r: dict[str, Any]) -> str:
    if r.get("opted_out"):
        return f"memory is off for this project: {r['opted_out']}"
    rows = r.get("memories") or r.get("rows") or []
    if not rows:
        return f"no memories yet in {r['memory_dir']}"
    lines = [f"{r['memory_dir']}:"]
    for m in rows:
        lines.append(
            f"  [{m.get('type') or '?'}] {m.get('relative') or m.get('path')} "
            f"({m.get('age') or m.get('mtime')}): {m.get('description') or ''}"
        )
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
            f"{head}; the first extraction starts at {_k(st['next_trigger_tokens'])} tokens "
            f"of context (now {_k(st['context_tokens'])})"
        )
    return str(v["text"]).rstrip("\n")


def render_notes_status(s: dict[str, Any]) -> str:
    lines = [
        f"session   {s['session_id']}  ({s['phase']})",
        f"notes     {s['notes_path']}",
        f"runs      {s['extractions']}, last at {_when(s['last_extracted_at'])}, "
        f"{_k(s['last_cost_tokens'])} tokens billed",
        f"next      at {_k(s['next_trigger_tokens'])} tokens ({s['next_trigger_condition']})",
    ]
    if s["last_error"]:
        lines.append(f"error     {s['last_error']}")
    return "\n".join(lines)


def render_compact(r: dict[str, Any]) -> str:
    if r.get("dry_run"):
        head = f"would use level {r['level']}: the messages hold ~{_k(r['tokens_before'])} tokens"
        if r.get("context_tokens"):
            head += f" (live context with system prompt and tools: {_k(r['context_tokens'])})"
        if r["level"] == 1:
            return (
                f"{head} -> {_k(r['tokens_after'])} after (no model call)\n"
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
        f"level {r['level']}: {_k(r['tokens_before'])} -> {_k(r['tokens_after'])} tokens, "
        f"{r['api_calls']} API calls, {len(r['messages'])} messages, "
        f"{len(r['restore']['files'])} files to restore"
    )


def render_config(c: dict[str, Any]) -> str:
    lines = [f"# {k}: {v}" for k, v in c["paths"].items()]
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
