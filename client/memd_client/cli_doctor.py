"""``memdctl doctor``: every prerequisite checked, each with ok / warn / fail and the fix (R-B9).

Exit 0 when nothing failed (warnings allowed), 1 otherwise. The checks that need the daemon
(API reachable, its view of its directories) are skipped with a reason when it is down; the
directory and hook checks work without it, since a daemon that refuses to start (exit 3 for
an unsafe runtime dir) is exactly when a person runs the doctor.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from memd_client import service
from memd_client.agents import AGENTS, UNNAMED, named
from memd_client.cli_base import EXIT_OK, EXIT_REMOTE, Ctx, Registrar
from memd_client.cli_doctor_agents import check_agent_hooks, hooks_file, mcp_agents
from memd_client.cli_local import client_version
from memd_client.errors import MemdClientError
from memd_client.hook_record import read_failed_open, record_path
from memd_client.hooks_install import read_settings
from memd_client.paths import default_runtime_dir
from memd_client.render_status import write_fix
from memd_client.status_form import expanded
from memd_client.textfmt import Style

Verdict = Literal["ok", "warn", "fail"]
PROBE_TIMEOUT_S = 75.0  # the daemon probes each backend at once; an agent CLI's start: 60 s


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    detail: str
    fix: str | None = None


@dataclass
class Facts:
    """What the checks read, gathered once: the daemon's answers (or why there are none)."""

    env: dict[str, str]
    home: Path
    hello: dict[str, Any] | None = None
    status: dict[str, Any] | None = None
    down: str | None = None  # why the daemon could not be asked
    probe: dict[str, Any] | None = None
    settings: Path = field(default_factory=Path)
    socket: Path = field(default_factory=Path)


def register(reg: Registrar) -> None:
    p = reg.add("doctor", cmd_doctor, "check every prerequisite; each check says how to fix it")
    p.add_argument(
        "--settings", metavar="FILE", help=f"{UNNAMED.title}'s settings file to check for hooks"
    )


def cmd_doctor(ctx: Ctx) -> int:
    facts = gather(ctx)
    checks = [c for check in CHECKS for c in _each(check(facts))]
    failed = any(c.verdict == "fail" for c in checks)
    data = {"ok": not failed, "checks": [asdict(c) for c in checks]}
    ctx.emit(data, lambda d: render_checks(checks, ctx.style()))
    return EXIT_REMOTE if failed else EXIT_OK


def _each(found: Check | Iterable[Check]) -> Iterable[Check]:
    return (found,) if isinstance(found, Check) else found


def gather(ctx: Ctx) -> Facts:
    given = Path(ctx.args.settings) if getattr(ctx.args, "settings", None) else Path()
    facts = Facts(ctx.env, Path.home(), settings=given, socket=ctx.client().path)
    try:
        facts.hello = ctx.call("hello")
        facts.status = expanded(ctx.call("status"))
    except MemdClientError as exc:
        facts.down = str(exc)
        return facts
    if (facts.status or {}).get("llm", {}).get("enabled"):
        with ctx.progress("asking the API for a token count"):
            try:
                facts.probe = ctx.client(timeout=PROBE_TIMEOUT_S).call("probe_api")
            except MemdClientError as exc:
                facts.probe = {"ok": False, "detail": f"the daemon could not probe: {exc}"}
    return facts


def render_checks(checks: list[Check], st: Style) -> str:
    paint = {"ok": st.ok, "warn": st.warn, "fail": st.bad}
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{paint[c.verdict](c.verdict.ljust(4))}  {c.name.ljust(width)}  {c.detail}")
        if c.fix and c.verdict != "ok":
            lines.append(f"{'':4}  {'':{width}}  fix: {c.fix}")
    failed = sum(c.verdict == "fail" for c in checks)
    warned = sum(c.verdict == "warn" for c in checks)
    lines.append(f"\n{failed} failed, {warned} warnings, {len(checks) - failed - warned} ok")
    return "\n".join(lines)


# -- the checks ---------------------------------------------------------------------------------


def check_daemon(f: Facts) -> Check:
    if f.down is not None:
        return Check(
            "daemon",
            "fail",
            f.down,
            "start it: `systemctl --user start memd` (after `memdctl install-service`), or run "
            "`memd` in a terminal; `memdctl logs` shows why it stopped",
        )
    d = (f.status or {}).get("daemon", {})
    return Check("daemon", "ok", f"memd {d.get('version')} (pid {d.get('pid')}) answers")


def check_versions(f: Facts) -> Check:
    mine = client_version()
    if f.hello is None:
        return Check("versions", "warn", f"memdctl {mine}; the daemon could not be asked")
    theirs = str(f.hello.get("version"))
    if theirs != mine:
        return Check(
            "versions",
            "warn",
            f"daemon {theirs}, memdctl {mine}",
            "install the same version of memd and memd-client, then restart memd",
        )
    return Check("versions", "ok", f"daemon and memdctl are both {mine}")


def check_api(f: Facts) -> Check:
    if f.status is None:
        return Check("model", "warn", "not checked: the daemon is not running")
    llm = f.status.get("llm", {})
    env_file = f.status.get("daemon", {}).get("env_file") or {}
    served = _served(llm)
    if not llm.get("enabled"):
        ways = "; ".join(f"{n}: {how}" for n, how in (llm.get("turn_on") or {}).items())
        return Check(
            "model",
            "warn",
            f"model features are off ({llm.get('reason')}); tracking, recall and level-1 "
            "compaction from existing notes still work",
            ways
            or f"put ANTHROPIC_API_KEY=… in {env_file.get('path') or '~/.config/memd/env'} "
            "(chmod 600), then `memdctl reload`",
        )
    probe = f.probe or {}
    if not probe.get("ok"):
        return Check(
            "model",
            "fail",
            str(probe.get("detail") or "the API did not answer") + served,
            "check the key, the network, and the backend's base URL (llm.base_url, "
            "llm.<backend>.base_url); then `memdctl reload`",
        )
    return Check("model", "ok", str(probe.get("detail")) + served)


def _served(llm: dict[str, Any]) -> str:
    """Which backend serves each job and what was found unused, for the doctor's line."""
    jobs = llm.get("jobs") or {}
    by: dict[str, list[str]] = {}
    for kind, job in jobs.items():
        by.setdefault(str(job.get("backend") or "off"), []).append(kind)
    text = "; ".join(f"{name} serves {', '.join(kinds)}" for name, kinds in by.items())
    unused = ", ".join(f"{n} ({d})" for n, d in (llm.get("found_unused") or {}).items())
    clis = ", ".join(_cli_word(n, c) for n, c in (llm.get("clis") or {}).items())
    return (
        (f" [{text}]" if text else "")
        + (f" [found, not used: {unused}]" if unused else "")
        + (f" [agent CLIs: {clis}]" if clis else "")
    )


def _cli_word(name: str, cli: Any) -> str:
    """One agent CLI in a few words: on, or off and what it lacks and how to turn it on."""
    if not isinstance(cli, dict):
        return name
    if cli.get("on"):
        return f"{name} on"
    lacks = (
        "not installed"
        if not cli.get("command")
        else "installed, not logged in"
        if not cli.get("login")
        else "installed and logged in"
    )
    return f"{name} off ({lacks}; turn on: {cli.get('turn_on')})"


def check_env_file(f: Facts) -> Check:
    env_file = ((f.status or {}).get("daemon") or {}).get("env_file")
    path = Path(env_file["path"]) if env_file else _env_file_path(f)
    problem = env_file.get("problem") if env_file else _env_file_problem(path)
    if problem:
        return Check("env file", "fail", str(problem), f"chmod 600 {path}; then `memdctl reload`")
    if not path.exists():
        return Check("env file", "ok", f"none at {path} (optional: holds the API key)")
    return Check("env file", "ok", f"{path} is yours and private")


def check_agents(f: Facts) -> list[Check]:
    """Each agent's hooks (:mod:`memd_client.cli_doctor_agents`)."""
    over_mcp = mcp_agents(f.env, f.home)
    return [check_agent_hooks(t, f, Check, over_mcp) for t in AGENTS if t.hooks is not None]


def check_agent(f: Facts, name: str) -> Check:
    """One agent's hooks check, by its name."""
    table = named(name)
    assert table is not None and table.hooks is not None, name
    result: Check = check_agent_hooks(table, f, Check, mcp_agents(f.env, f.home))
    return result


def check_hook_failures(f: Facts) -> Check:
    """The hook fails open silently for the agent; its record says when it did, and why."""
    record = read_failed_open(f.socket)
    if record is None:
        return Check("hook runs", "ok", "the hook has not failed open")
    if isinstance(record, str):
        return Check("hook runs", "warn", record, f"remove {record_path(f.socket)}")
    if not record.recent():
        return Check("hook runs", "ok", f"over a day ago, {record.summary()}")
    answers = " (memd answers now)" if f.down is None else ""
    return Check("hook runs", "warn", record.summary() + answers, record.fix())


def check_service(f: Facts) -> Check:
    plan = service.plan_service(f.home, "memd", env=f.env)
    fix = "run `memdctl install-service`"
    if not plan.path.exists():
        return Check("service", "warn", f"no {plan.kind} unit at {plan.path}", fix)
    if plan.kind == "systemd":
        wants = plan.path.parent / "default.target.wants" / plan.path.name
        if not wants.exists():
            return Check(
                "service",
                "warn",
                f"{plan.path} is installed but not enabled",
                "systemctl --user enable --now memd",
            )
    return Check("service", "ok", f"{plan.kind} unit {plan.path}")


def check_dirs(f: Facts) -> Check:
    d = (f.status or {}).get("daemon", {})
    runtime = Path(d["socket"]).parent if d.get("socket") else default_runtime_dir(f.env)
    state = Path(d["state_dir"]) if d.get("state_dir") else _state_dir(f)
    problems = [p for p in (_dir_problem(runtime), _dir_problem(state)) if p]
    if problems:
        return Check("directories", "fail", "; ".join(p[0] for p in problems), problems[0][1])
    return Check("directories", "ok", f"{runtime} and {state} are yours and private")


def _dir_problem(path: Path) -> tuple[str, str] | None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None  # memd creates it, owner-only
    except OSError as exc:
        return (f"cannot inspect {path}: {exc.strerror}", f"check {path}")
    if not stat.S_ISDIR(info.st_mode):
        return (f"{path} is not a directory", f"remove {path}; memd creates it")
    if info.st_uid != os.getuid():
        return (f"{path} belongs to uid {info.st_uid}, not you", f"remove {path}; memd creates it")
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        return (f"{path} is open to others (mode {mode:04o})", f"chmod 700 {path}")
    return None


def check_writes(f: Facts) -> Check:
    """Files the daemon cannot write now (a full or read-only disk, no descriptor left)."""
    if f.status is None:
        return Check("writes", "warn", "not checked: the daemon is not running")
    w = f.status.get("writes") or {}
    rows = [r for r in w.get("paths") or [] if isinstance(r, dict)]
    if not w.get("failing") or not rows:
        return Check("writes", "ok", "every file memd wrote lately was written")
    first = rows[0]
    detail = "; ".join(
        f"{r.get('path')}: {r.get('error')} ({r.get('message')}) since {r.get('since')}"
        for r in rows[:3]
    )
    if w["failing"] > 3:
        detail += f"; and {w['failing'] - 3} more"
    detail += " (memd serves from memory and writes them when it can)"
    return Check("writes", "fail", detail, write_fix(first.get("error")))


def check_transcripts(f: Facts) -> Check:
    d = (f.status or {}).get("daemon", {})
    root = Path(d["projects_root"]) if d.get("projects_root") else _projects_root(f)
    if not root.is_dir():
        return Check(
            "transcripts",
            "warn",
            f"{root} does not exist yet",
            "run Claude Code once (it creates it), or set MEMD_PROJECTS_ROOT",
        )
    return Check("transcripts", "ok", f"{root}")


def check_claude_features(f: Facts) -> Check:
    """Claude Code's own writers of the files memd writes (its auto memory and dream)."""
    file = hooks_file(UNNAMED, f)
    try:
        settings = read_settings(file)
    except (OSError, ValueError):
        settings = {}
    fights = [
        f"{key} is on in {file}: Claude Code's own {what} writes the same files as memd"
        for key, what in (("autoMemoryEnabled", "auto memory"), ("autoDreamEnabled", "dream"))
        if settings.get(key) is True
    ]
    if fights:
        return Check(
            "claude code",
            "warn",
            "; ".join(fights),
            'set them to false in settings.json ("autoMemoryEnabled": false) so one writer '
            "owns the notes and memories",
        )
    return Check("claude code", "ok", "no Claude Code setting turns on a second memory writer")


def check_refused(f: Facts) -> Check:
    """Links, hard links and special files memd found in memory dirs and did not read."""
    if f.status is None:
        return Check("memory dirs", "warn", "not checked: the daemon is not running")
    refused = f.status.get("refused")
    if not isinstance(refused, dict) or not refused.get("count"):
        return Check("memory dirs", "ok", "no links, hard links or special files found in them")
    entries = [e for e in refused.get("entries") or [] if isinstance(e, dict)]
    shown = "; ".join(f"{e.get('path')} is {e.get('kind')}" for e in entries)
    more = refused["count"] - len(entries)
    return Check(
        "memory dirs",
        "warn",
        f"not read or written (memd follows no link there): {shown}"
        + (f"; and {more} more" if more > 0 else ""),
        "remove each one (`rm PATH` removes the link itself, never what it points to), or "
        "replace it with a plain file of your own; a memory dir holds only plain files",
    )


def check_foreign_files(f: Facts) -> Check:
    """Other tools' files the daemon could not use: a git pointer over its cap or with a
    NUL, a settings file that is a FIFO, too deep or not UTF-8 (:mod:`memd.foreign_reads`)."""
    if f.status is None:
        return Check("other tools' files", "warn", "not checked: the daemon is not running")
    found = f.status.get("foreign_files")
    if not isinstance(found, dict) or not found.get("count"):
        return Check("other tools' files", "ok", "every one memd read was usable")
    entries = [e for e in found.get("entries") or [] if isinstance(e, dict)]
    first = entries[0] if entries else {}
    more = found["count"] - 1
    return Check(
        "other tools' files",
        "warn",
        f"{first.get('path')} {first.get('problem')}"
        + (f"; and {more} more (`memdctl status` lists them)" if more > 0 else ""),
        str(first.get("fix")),
    )


def _env_file_path(f: Facts) -> Path:
    xdg = f.env.get("XDG_CONFIG_HOME", "")
    return (Path(xdg) if xdg.startswith("/") else f.home / ".config") / "memd" / "env"


def _env_file_problem(path: Path) -> str | None:
    try:
        info = path.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        return f"{path} can be read or written by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _state_dir(f: Facts) -> Path:
    if f.env.get("MEMD_STATE_DIR"):
        return Path(f.env["MEMD_STATE_DIR"])
    xdg = f.env.get("XDG_STATE_HOME", "")
    return (Path(xdg) if xdg.startswith("/") else f.home / ".local" / "state") / "memd"


def _projects_root(f: Facts) -> Path:
    if f.env.get("MEMD_PROJECTS_ROOT"):
        return Path(f.env["MEMD_PROJECTS_ROOT"])
    return Path(f.env.get("CLAUDE_CONFIG_DIR") or f.home / ".claude") / "projects"


CHECKS: tuple[Callable[[Facts], Check | list[Check]], ...] = (
    check_daemon,
    check_versions,
    check_env_file,
    check_api,
    check_agents,
    check_hook_failures,
    check_service,
    check_dirs,
    check_writes,
    check_transcripts,
    check_claude_features,
    check_refused,
    check_foreign_files,
)
