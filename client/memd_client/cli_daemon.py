"""``memdctl`` commands that ask the running daemon: status, sessions, notes, memories, …"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memd_client import render
from memd_client.cli_base import (
    COUNT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REMOTE,
    EXIT_USAGE,
    TOKENS,
    CliFailure,
    Ctx,
    Registrar,
)
from memd_client.errors import RemoteError
from memd_client.render_status import render_status
from memd_client.status_form import expanded

EXTRACT_WAIT_S = 60
# The daemon waits up to EXTRACT_WAIT_S for the run; a full compaction is a model call or more.
EXTRACT_TIMEOUT_S, COMPACT_TIMEOUT_S = 90.0, 600.0


def register_session_commands(reg: Registrar) -> None:
    reg.add("status", cmd_status, "health, sessions and what is queued")
    p = reg.add("sessions", cmd_sessions, "list every known session, newest first")
    p.add_argument(
        "--project", metavar="PROJECT", help="only this project (folder name or repository path)"
    )
    p.add_argument("--limit", type=COUNT, default=0, help="at most this many (0: all)")
    for name, run, text, timeout in (
        ("session", cmd_session, "one session in detail, with its notes status", None),
        ("notes", cmd_notes, "print a session's working notes", None),
        ("extract", cmd_extract, "update a session's notes now, ignoring the thresholds", 90.0),
        ("compact", cmd_compact, "compact a session (see --dry-run)", COMPACT_TIMEOUT_S),
    ):
        p = reg.add(name, run, text, timeout=timeout)
        p.add_argument("session_id", metavar="ID", help="session id or a unique prefix")
        if name == "extract":
            p.add_argument("--no-wait", action="store_true", help="queue the run, return at once")
        if name == "compact":
            p.add_argument(
                "--dry-run",
                action="store_true",
                help="show the level that would serve, tokens before/after and the cut; no model",
            )
            p.add_argument(
                "--fork",
                action="store_true",
                help="write the compaction from the notes as a new Claude Code session beside "
                "this one (no model call; the old session is not touched) and print how to "
                "resume it",
            )
            p.add_argument(
                "--context-window", type=TOKENS, help="the model's window (default: config)"
            )
            p.add_argument("--max-output", type=TOKENS, help="the model's max output tokens")


def register_memory_commands(reg: Registrar) -> None:
    p = reg.add("memories", cmd_memories, "list a project's memories, newest first")
    p.add_argument(
        "project",
        nargs="?",
        help="project folder name or repository path (default: the current directory's)",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--check",
        action="store_true",
        help="check what each memory cites against the project's code (needs its path)",
    )
    which.add_argument(
        "--archived",
        action="store_true",
        help="list the memories archived as unused (memory.archive_unused_days), beside "
        "the memory dir",
    )
    which.add_argument(
        "--restore",
        metavar="MEMORY",
        help="put an archived memory back (its file or name, as --archived lists it), with "
        "its line in MEMORY.md",
    )
    p = reg.add("recall", cmd_recall, "the memories memd would recall for a query")
    p.add_argument("query")
    p.add_argument(
        "--project", metavar="DIR", help="the project's directory (default: the current directory)"
    )


def register_admin_commands(reg: Registrar) -> None:
    p = reg.add("config", cmd_config, "print the effective configuration, or check a file")
    p.add_argument(
        "--check",
        nargs="?",
        const="",
        metavar="FILE",
        help="validate FILE (default: the config file memd would load) without a daemon",
    )
    reg.add("reload", cmd_reload, "re-read the config file and the env file (like SIGHUP)")


def project_params(value: str | None) -> dict[str, str]:
    """A project typed by a person: a folder name such as ``-home-me-proj``, or a path."""
    if not value:
        return {"cwd": os.getcwd()}
    if not value.startswith("-") and (
        value in (".", "..") or "/" in value or value.startswith("~")
    ):
        path = Path(value).expanduser()
        if not path.is_dir():
            raise CliFailure(f"{value}: no such directory", EXIT_USAGE)
        return {"cwd": str(path.resolve())}
    return {"project": value}


def resolve_session(ctx: Ctx, ident: str) -> dict[str, Any]:
    """The ``session`` answer for ``ident`` (an id or a unique prefix). A prefix that matches
    several sessions is a usage error listing them (the list is fetched only then)."""
    try:
        found: dict[str, Any] = ctx.call("session", {"session": ident})
        return found
    except RemoteError as exc:
        if exc.code != "invalid_params" or " matches " not in exc.message:
            raise
    rows: list[dict[str, Any]] = ctx.call("sessions")
    matches = [str(r["session_id"]) for r in rows if str(r["session_id"]).startswith(ident)]
    shown = ", ".join(matches[:10]) + (", …" if len(matches) > 10 else "")
    raise CliFailure(
        f"{ident!r} matches {len(matches)} sessions ({shown}); give more of the id",
        EXIT_USAGE,
        "ambiguous",
        candidates=matches,
    )


def session_id(ctx: Ctx, ident: str) -> str:
    return str(resolve_session(ctx, ident)["session_id"])


def cmd_status(ctx: Ctx) -> int:
    status = expanded(ctx.call("status"))  # the rows as maps, each reason in place
    return ctx.emit(status, lambda s: render_status(s, ctx.style()))


def cmd_sessions(ctx: Ctx) -> int:
    params: dict[str, Any] = {"limit": ctx.args.limit}
    if ctx.args.project:
        params.update(project_params(ctx.args.project))
    return ctx.emit(ctx.call("sessions", params), render.render_sessions)


def cmd_session(ctx: Ctx) -> int:
    return ctx.emit(resolve_session(ctx, ctx.args.session_id), render.render_session)


def cmd_notes(ctx: Ctx) -> int:
    sid = session_id(ctx, ctx.args.session_id)
    notes = ctx.call("notes", {"session": sid})
    ctx.emit(notes, render.render_notes)
    return EXIT_NOT_FOUND if notes.get("text") is None else EXIT_OK  # no notes: say so in $?


def cmd_extract(ctx: Ctx) -> int:
    session = resolve_session(ctx, ctx.args.session_id)
    sid = str(session["session_id"])
    if ctx.args.no_wait:
        return ctx.emit(
            ctx.call("extract", {"session": sid, "wait": 0}), render.render_notes_status
        )
    before = session.get("notes") or {}
    with ctx.progress(f"extracting notes for {sid[:12]} (waiting for the model)"):
        after = ctx.call("extract", {"session": sid, "wait": EXTRACT_WAIT_S})
    ctx.emit(after, render.render_notes_status)
    failure = extraction_failure(before, after, EXTRACT_WAIT_S)
    if failure is not None:
        ctx.warn(failure)
        return EXIT_REMOTE
    return EXIT_OK


def extraction_failure(before: dict[str, Any], after: dict[str, Any], waited: float) -> str | None:
    """Pure: why an ``extract`` did not produce notes, or ``None`` when it did (or had
    nothing new to do)."""
    if after.get("extractions", 0) > before.get("extractions", 0):
        return None
    error_at = after.get("last_error_at")
    if error_at and error_at != before.get("last_error_at"):
        return f"the extraction failed: {after.get('last_error')}"
    phase = after.get("phase")
    if phase in ("queued", "waiting", "running"):
        why = f": {after['waiting_reason']}" if after.get("waiting_reason") else ""
        return (
            f"the extraction did not finish within {waited:g} s (it is {phase}{why}); "
            "`memdctl session ID` shows when it does"
        )
    return None


def cmd_compact(ctx: Ctx) -> int:
    sid = session_id(ctx, ctx.args.session_id)
    if ctx.args.fork and ctx.args.dry_run:
        raise CliFailure("--fork and --dry-run do not go together", EXIT_USAGE)
    params: dict[str, Any] = {"session": sid, "dry_run": ctx.args.dry_run}
    if ctx.args.fork:
        params = {"session": sid, "fork": True}
    if ctx.args.context_window:
        params["context_window"] = ctx.args.context_window
    if ctx.args.max_output:
        params["max_output_tokens"] = ctx.args.max_output
    with ctx.progress(f"compacting {sid[:12]}"):
        result = ctx.call("compact", params)
    if ctx.args.fork:
        if not result.get("forked"):
            raise CliFailure(f"not forked: {result.get('reason')}", EXIT_REMOTE, "not_forked")
        return ctx.emit(result, render.render_fork)
    return ctx.emit(result, render.render_compact)


def cmd_memories(ctx: Ctx) -> int:
    params: dict[str, Any] = dict(project_params(ctx.args.project))
    if ctx.args.restore is not None:
        params["memory"] = ctx.args.restore
        return ctx.emit(ctx.call("restore_memory", params), render.render_restored)
    if ctx.args.archived:
        params["archived"] = True
        return ctx.emit(ctx.call("memories", params), render.render_archived)
    if ctx.args.check:
        params["check"] = True
    return ctx.emit(ctx.call("memories", params), render.render_memories)


def cmd_recall(ctx: Ctx) -> int:
    cwd = project_params(ctx.args.project).get("cwd") if ctx.args.project else os.getcwd()
    if cwd is None:
        raise CliFailure("recall --project takes the project's directory", EXIT_USAGE)
    result = ctx.call("recall", {"query": ctx.args.query, "cwd": cwd})
    return ctx.emit(result, render.render_recall)


def cmd_config(ctx: Ctx) -> int:
    if ctx.args.check is not None:
        from memd_client.cli_local import check_config

        return check_config(ctx, ctx.args.check or None)
    return ctx.emit(ctx.call("config"), render.render_config)


def cmd_reload(ctx: Ctx) -> int:
    try:
        result = ctx.call("reload")
    except RemoteError as exc:
        raise CliFailure(f"reload failed: {exc.message}") from None
    ctx.emit(result, render.render_reload)
    reloaded = str(result.get("result", "")).startswith("reloaded")
    return EXIT_OK if reloaded and not result.get("env_file_problem") else EXIT_REMOTE
