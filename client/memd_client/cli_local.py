"""``memdctl`` commands that work on this machine without the daemon: install and uninstall
the service and the hooks, read the logs, check a config file, the version."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

from memd_client import hook, hooks_install, service
from memd_client.agents import AGENTS, UNNAMED, choices, named
from memd_client.agents.base import AgentTable, HookFiles
from memd_client.cli_base import EXIT_OK, EXIT_REMOTE, EXIT_USAGE, CliFailure, Ctx, Registrar
from memd_client.config_backup import write_refused
from memd_client.errors import MemdClientError
from memd_client.hooks_install import install_hooks, uninstall_hooks

FOLLOW_POLL_S = 0.5
LOG_TAIL_LINES = 200
# How much of the log's end is read for those lines (a log of many GB is never read whole),
# and how much one look of ``--follow`` reads at most before writing it out.
LOG_TAIL_BYTES = 512 * 1024
LOG_CHUNK_BYTES = 64 * 1024


def version_text() -> str:
    return f"memdctl {client_version()}"


def client_version() -> str:
    try:
        return importlib.metadata.version("memd-client")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def register(reg: Registrar) -> None:
    p = reg.add(
        "install-service",
        cmd_install_service,
        "install the systemd user unit (Linux) or launchd agent (macOS)",
    )
    p.add_argument("--no-start", action="store_true", help="write the unit, do not start it")
    p.add_argument("--print", action="store_true", help="print the unit instead of installing it")
    reg.add("uninstall-service", cmd_uninstall_service, "stop memd's service and remove its unit")
    for name, run, text in (
        (
            "install-hooks",
            cmd_install_hooks,
            "add memd's hooks to an agent's hooks config (idempotent, keeps a backup)",
        ),
        (
            "uninstall-hooks",
            cmd_uninstall_hooks,
            "remove only memd's hooks from an agent's hooks config",
        ),
    ):
        p = reg.add(name, run, text)
        if name == "install-hooks":
            p.add_argument(
                "--compact-takeover",
                action="store_true",
                help="also take over /compact: memd forks the session from its notes (no "
                "model call) and the agent says how to resume it (off without this flag; "
                "for an agent whose compaction memd can take over)",
            )
        p.add_argument(
            "--agent",
            choices=choices(hooks=True),
            default=UNNAMED.name,
            help=f"whose hooks: {_agents_help()}",
        )
        p.add_argument(
            "--settings",
            metavar="FILE",
            help="the agent's hooks file, if not the one it reads by default",
        )
    p = reg.add("logs", cmd_logs, "show memd's log (journald under systemd, else its log file)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")


def _agents_help() -> str:
    """Each agent with hooks and its default hooks file, for ``--help``."""
    return "; ".join(
        f"{t.name}{' (default)' if t is UNNAMED else ''}: {t.title}"
        for t in AGENTS
        if t.hooks is not None
    )


def agent_table(ctx: Ctx) -> tuple[AgentTable, HookFiles]:
    """The agent ``--agent`` names (default: the unnamed agent's) and its hooks."""
    table = named(getattr(ctx.args, "agent", UNNAMED.name)) or UNNAMED
    if table.hooks is None:
        raise CliFailure(f"memd installs no hooks for {table.title}", EXIT_USAGE)
    return table, table.hooks


def settings_path(ctx: Ctx) -> Path:
    if ctx.args.settings:
        return Path(ctx.args.settings)
    return agent_table(ctx)[1].settings(ctx.env, Path.home())


def hook_command(table: AgentTable = UNNAMED) -> str | None:
    """This interpreter running the installed ``memd_client/hook.py`` (the fast form, see
    :mod:`memd_client.hooks_install`), naming the agent where its hooks do; the
    ``memd-hook`` console script when this process cannot name its interpreter; ``None``
    when there is neither."""
    agent = table.hook_name
    if sys.executable and os.path.isabs(sys.executable):
        file = os.path.abspath(hook.__file__)
        return hooks_install.hook_command(sys.executable, file, agent)
    script = shutil.which("memd-hook")
    return shlex.join([script, agent]) if script and agent else script


def _plan(ctx: Ctx) -> service.ServicePlan:
    try:
        memd = service.find_memd()
    except FileNotFoundError as exc:
        raise CliFailure(str(exc), EXIT_USAGE) from None
    return service.plan_service(Path.home(), memd, env=ctx.env)


def cmd_install_service(ctx: Ctx) -> int:
    plan = _plan(ctx)
    if ctx.args.print:
        ctx.out.write(plan.text)
        return EXIT_OK
    try:
        done = service.install(plan, start=not ctx.args.no_start, env=ctx.env)
    except service.NoUserBus as exc:
        raise CliFailure(f"wrote {plan.path}, but {exc}") from None
    except subprocess.CalledProcessError as exc:
        raise CliFailure(_command_failed(plan, exc)) from None
    except OSError as exc:
        raise CliFailure(f"installing the {plan.kind} service failed: {exc}") from None
    done.append(f"its log: {plan.log}")
    return ctx.emit({"kind": plan.kind, "path": str(plan.path), "done": done}, _lines)


def cmd_uninstall_service(ctx: Ctx) -> int:
    plan = _plan(ctx)
    try:
        done = service.uninstall(plan, env=ctx.env)
    except subprocess.CalledProcessError as exc:
        raise CliFailure(_command_failed(plan, exc)) from None
    except OSError as exc:
        raise CliFailure(f"removing the {plan.kind} service failed: {exc}") from None
    return ctx.emit({"kind": plan.kind, "path": str(plan.path), "done": done}, _lines)


def _command_failed(plan: service.ServicePlan, exc: subprocess.CalledProcessError) -> str:
    said = (exc.stderr or exc.stdout or "").strip().splitlines()
    why = f": {said[-1]}" if said else ""
    return (
        f"`{' '.join(exc.cmd)}` failed with exit code {exc.returncode}{why}. The unit is at "
        f"{plan.path}; `memdctl install-service --no-start` writes it without starting it"
    )


def cmd_install_hooks(ctx: Ctx) -> int:
    table, hooks = agent_table(ctx)
    settings = settings_path(ctx)
    command = hook_command(table)
    if command is None:
        raise CliFailure(
            "cannot find a Python interpreter or the memd-hook command to register; "
            "reinstall memd-client",
            EXIT_USAGE,
        )
    spec = hooks.spec
    if ctx.args.compact_takeover:
        if hooks.takeover is None:
            raise CliFailure(
                f"memd cannot take over {table.title}'s compaction (--compact-takeover)",
                EXIT_USAGE,
            )
        spec = hooks.takeover
    if hooks.installer is not None:
        args = ["install", f"--command={command}"]
        args += ["--compact-takeover"] if ctx.args.compact_takeover else []
        done = _installer(ctx, table, hooks.installer, args)
        return ctx.emit({"agent": table.name, "settings": str(settings), "done": done}, _lines)
    try:
        done = install_hooks(settings, command, spec)
    except OSError as exc:
        raise CliFailure(write_refused(exc, settings)) from None
    except ValueError as exc:
        hint = hooks.edit_hint if "not valid JSON" in str(exc) else ""
        raise CliFailure(str(exc) + hint, EXIT_USAGE) from None
    return ctx.emit({"agent": table.name, "settings": str(settings), "done": done}, _lines)


def cmd_uninstall_hooks(ctx: Ctx) -> int:
    table, hooks = agent_table(ctx)
    settings = settings_path(ctx)
    if hooks.installer is not None:
        done = _installer(ctx, table, hooks.installer, ["uninstall"])
        return ctx.emit({"agent": table.name, "settings": str(settings), "done": done}, _lines)
    try:
        done = uninstall_hooks(settings)
    except OSError as exc:
        raise CliFailure(write_refused(exc, settings)) from None
    except ValueError as exc:
        raise CliFailure(str(exc), EXIT_USAGE) from None
    return ctx.emit({"agent": table.name, "settings": str(settings), "done": done}, _lines)


def _installer(ctx: Ctx, table: AgentTable, module: str, args: list[str]) -> list[str]:
    """Hooks that take more than a JSON edit (Codex's trust in its config.toml, which takes
    a TOML editor that keeps comments): the memd package's ``module``, run with this
    interpreter, as ``install-mcp`` does."""
    argv = [sys.executable, "-m", module, *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=ctx.env)
    if "No module named memd" in done.stderr:
        raise CliFailure(
            f"the {table.title} hooks need the memd package in {sys.executable}; "
            "install memd there",
            EXIT_USAGE,
        )
    if done.returncode != 0:
        said = done.stderr.strip() or f"exit code {done.returncode}"
        raise CliFailure(said, EXIT_USAGE if done.returncode == EXIT_USAGE else EXIT_REMOTE)
    return done.stdout.strip().splitlines()


def _lines(result: dict[str, object]) -> str:
    done = result["done"]
    return "\n".join(str(line) for line in done) if isinstance(done, list) else str(done)


def log_location(ctx: Ctx) -> dict[str, str]:
    """Where memd logs: what the running daemon says, else what its service manager uses."""
    try:
        log = ctx.call("status").get("daemon", {}).get("log")
        if isinstance(log, dict) and log.get("kind"):
            return {k: str(v) for k, v in log.items()}
    except MemdClientError:
        pass
    if sys.platform == "darwin":
        return {"kind": "file", "path": str(service.launchd_log(Path.home()))}
    return {"kind": "journald", "unit": "memd"}


def cmd_logs(ctx: Ctx) -> int:
    where = log_location(ctx)
    if where["kind"] == "journald":
        cmd = ["journalctl", "--user", "-u", where.get("unit", "memd"), "-n", str(LOG_TAIL_LINES)]
        if ctx.args.follow:
            cmd.append("-f")
        try:
            return subprocess.run(cmd, check=False).returncode
        except FileNotFoundError:
            raise CliFailure("journalctl is not installed; memd logs to the journal") from None
    if where["kind"] == "file":
        return _show_file(ctx, Path(where["path"]))
    raise CliFailure(
        f"memd logs to {where.get('path') or 'the stderr of the process that started it'}, "
        "which memdctl cannot read; run it under `memdctl install-service` to keep a log"
    )


def _last_lines(f: BinaryIO) -> bytes:
    """The last :data:`LOG_TAIL_LINES` lines of ``f``, from at most its last
    :data:`LOG_TAIL_BYTES` (a partial first line dropped); ``f`` left at its end."""
    size = f.seek(0, os.SEEK_END)
    start = max(0, size - LOG_TAIL_BYTES)
    f.seek(start)
    lines = f.read(size - start).splitlines(keepends=True)
    if start > 0 and lines:
        lines = lines[1:]
    return b"".join(lines[-LOG_TAIL_LINES:])


def _show_file(ctx: Ctx, path: Path) -> int:
    try:
        with path.open("rb") as f:
            ctx.out.write(_last_lines(f).decode("utf-8", errors="replace"))
            ctx.out.flush()
            while ctx.args.follow:
                chunk = f.read(LOG_CHUNK_BYTES)
                if chunk:
                    ctx.out.write(chunk.decode("utf-8", errors="replace"))
                    ctx.out.flush()
                else:
                    time.sleep(FOLLOW_POLL_S)
    except FileNotFoundError:
        raise CliFailure(f"no log file at {path} yet (memd has not run as a service)") from None
    except OSError as exc:
        raise CliFailure(f"cannot read memd's log {path}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def check_config(ctx: Ctx, file: str | None) -> int:
    """Validate a config file with memd's own loader, in a separate process: memdctl does not
    import memd, but the memd package beside it (or the ``memd`` command) can check it."""
    if importlib.util.find_spec("memd") is not None:
        cmd = [sys.executable, "-m", "memd.daemon.main", "check-config"]
    else:
        try:
            cmd = [service.find_memd(), "check-config"]
        except FileNotFoundError as exc:
            raise CliFailure(f"cannot check the config: {exc}", EXIT_USAGE) from None
    if file:
        cmd += ["--config", os.path.abspath(file)]
    if ctx.json:
        cmd.append("--json")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=ctx.env)
    ctx.out.write(done.stdout)
    ctx.err.write(done.stderr)
    return EXIT_OK if done.returncode == 0 else EXIT_REMOTE
