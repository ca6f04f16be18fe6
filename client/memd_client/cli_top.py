"""``memdctl top``: a live full-screen view of what the daemon is doing (R-B9).

Stdlib ``curses``, one ``status`` call a second, ``q`` quits. Each active session gets a bar
of its context against the compaction threshold with the notes trigger marked ``|``, and its
notes state; then the jobs, spend against the budgets, and dream when the daemon has it.
:func:`screen_lines` is pure (status map and size in, lines out) so it is tested without a
terminal; :func:`run_top` only draws them.
"""

from __future__ import annotations

import time
from typing import Any

from memd_client.agents import UNNAMED, named
from memd_client.cli_base import EXIT_OK, EXIT_USAGE, CliFailure, Ctx, Registrar
from memd_client.errors import MemdClientError
from memd_client.hook_record import FailOpenRecord, read_failed_open
from memd_client.render import notes_state
from memd_client.status_form import expanded
from memd_client.textfmt import ago, bar, duration, size, tokens, tokens_bare, unique_prefixes

REFRESH_S = 1.0
MIN_WIDTH, MIN_HEIGHT = 40, 8


def register(reg: Registrar) -> None:
    reg.add("top", cmd_top, "a live view of sessions, jobs and spend (q quits)")


def cmd_top(ctx: Ctx) -> int:
    if ctx.json:
        raise CliFailure("top is a live view for a terminal; use `status --json`", EXIT_USAGE)
    if not (ctx.out.isatty() and ctx.err.isatty()):
        raise CliFailure("top needs a terminal; `memdctl status` prints once", EXIT_USAGE)
    import curses

    curses.wrapper(lambda screen: run_top(screen, ctx))
    return EXIT_OK


def run_top(screen: Any, ctx: Ctx) -> None:
    import curses

    curses.curs_set(0)
    screen.timeout(int(REFRESH_S * 1000))
    while True:
        try:
            status: dict[str, Any] | None = expanded(
                ctx.call("status", {"limit": 100, "notes": True})
            )
            problem = None
        except MemdClientError as exc:
            status, problem = None, str(exc)
        hook = hook_line(read_failed_open(ctx.client().path))
        height, width = screen.getmaxyx()
        screen.erase()
        for y, line in enumerate(screen_lines(status, problem, width, height, hook)):
            try:
                screen.addnstr(y, 0, line, width - 1)
            except curses.error:  # the terminal shrank between getmaxyx and here
                break
        screen.refresh()
        key = screen.getch()  # waits up to REFRESH_S
        if key in (ord("q"), ord("Q"), 27):
            return


def hook_line(record: FailOpenRecord | str | None) -> str | None:
    """The hook's last failure to reach memd, when it is recent (or its record is damaged)."""
    if isinstance(record, str):
        return f"hook   {record}"
    if record is None or not record.recent():
        return None
    return f"hook   FAILED OPEN: {record.summary()}"


def screen_lines(
    status: dict[str, Any] | None,
    problem: str | None,
    width: int,
    height: int,
    hook: str | None = None,
) -> list[str]:
    """Pure: the screen for one status reply (or the reason there is none), with the hook's
    last failure to reach memd when there is one to show."""
    stamp = time.strftime("%H:%M:%S")
    hook_lines = [hook] if hook else []
    if width < MIN_WIDTH or height < MIN_HEIGHT:
        return [f"memdctl top needs {MIN_WIDTH}x{MIN_HEIGHT}"]
    if status is None:
        return [
            f"memdctl top  {stamp}  (q quits)",
            "",
            f"{problem}",
            "retrying every second",
            *hook_lines,
        ]
    d = status.get("daemon", {})
    head = [
        f"memd {d.get('version')}  pid {d.get('pid')}  up {duration(d.get('uptime_s'))}  "
        f"rss {size(d.get('rss_bytes'))}  {stamp}  (q quits)",
        *hook_lines,
        _model_line(status.get("llm", {})),
        *_job_lines(status),
        *_spend_lines(status, width),
        *_dream_lines(status.get("dream")),
        "",
    ]
    rows = _session_lines(status, width, max(0, height - len(head)))
    return [line[: width - 1] for line in head + rows][:height]


def _model_line(llm: dict[str, Any]) -> str:
    if llm.get("unreachable_since"):
        return f"model  UNREACHABLE since {ago(llm['unreachable_since'])} ({llm.get('base_url')})"
    if llm.get("enabled"):
        return f"model  enabled ({llm.get('provider')})"
    return f"model  {llm.get('reason')}"


def _job_lines(status: dict[str, Any]) -> list[str]:
    notes, memory = status.get("notes", {}), status.get("memory", {})
    pipe = status.get("pipeline") or {}
    return [
        f"jobs   notes {notes.get('running', 0)} running, {notes.get('queued', 0)} queued; "
        f"memory {memory.get('running', 0)} running, {memory.get('queued', 0)} queued; "
        f"work {pipe.get('state', '-')}; errors {status.get('errors_last_hour', 0)} in 1 h"
    ]


def _spend_lines(status: dict[str, Any], width: int) -> list[str]:
    guard, usage = status.get("guard") or {}, status.get("usage") or {}
    budget = guard.get("budget") or {}
    lines = []
    for label, key, window in (("hour", "hour", "last_hour"), ("day", "day", "last_day")):
        limit = (budget.get(key) or {}).get("limit") or 0
        spent = (budget.get(key) or {}).get("spent", (usage.get(window) or {}).get("billed", 0))
        text = f"spend  {label:<4} {tokens(spent)} of {tokens(limit) if limit else 'no limit'}"
        room = width - len(text) - 4
        if limit and room > 10:
            text += "  " + bar(spent, limit, min(30, room - 2))
        lines.append(text)
    if budget.get("paused_until"):
        lines.append(f"PAUSED until {ago(budget['paused_until'])}: the budget is spent")
    return lines


def _dream_lines(dream: Any) -> list[str]:
    if not isinstance(dream, dict):
        return []
    projects = dream.get("projects")
    running = (
        [p for p in projects if isinstance(p, dict) and p.get("running")]
        if isinstance(projects, list)
        else []
    )
    state = dream.get("state") or ("running" if running else "idle")
    return [f"dream  {state}; {len(projects) if isinstance(projects, list) else 0} projects"]


def _agent(name: object) -> str:
    """An agent's name in six columns (its table's short name)."""
    table = named(str(name or UNNAMED.name))
    return table.short if table is not None else str(name)[:6]


def _session_lines(status: dict[str, Any], width: int, room: int) -> list[str]:
    sessions = [s for s in status.get("sessions") or [] if s.get("parsed")]
    if room < 2:
        return []
    if not sessions:
        return ["no active sessions yet"]
    notes = {n.get("session_id"): n for n in (status.get("notes") or {}).get("sessions") or []}
    short = unique_prefixes([str(s["session_id"]) for s in sessions])
    id_w = max(len(v) for v in short.values())
    bar_w = max(10, min(40, width - id_w - 52))
    out = [
        f"{'SESSION':<{id_w}}  {'AGENT':<6}  {'CONTEXT (tok)':>13}  "
        f"{'BAR (| notes)':<{bar_w + 2}}  NOTES"
    ]
    known = (status.get("ingest") or {}).get("parsed")
    total = max(len(sessions), known if isinstance(known, int) else 0)
    shown = room - 1 if total <= room - 1 else room - 2
    for s in sessions[:shown]:
        n = notes.get(s["session_id"]) or {}
        ctx_tok, limit = s.get("context_tokens", 0), s.get("compact_threshold", 0)
        trigger = n.get("next_trigger_tokens") or 0
        figure = f"{tokens_bare(ctx_tok)}/{tokens_bare(limit)}"
        state = notes_state(n) if n else "-"
        out.append(
            f"{short[s['session_id']]:<{id_w}}  {_agent(s.get('agent')):<6}  "
            f"{figure:>13}  "
            f"{bar(ctx_tok, limit, bar_w, [trigger])}  {state}"
        )
    hidden = total - min(shown, len(sessions))
    if hidden > 0:
        out.append(f"... {hidden} more sessions not shown (a taller terminal, or memdctl sessions)")
    return out
