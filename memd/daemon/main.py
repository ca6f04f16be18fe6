"""``memd``: run the daemon in the foreground (systemd or launchd supervise it).

Exit codes: 0 clean stop (SIGTERM or SIGINT at any instant, start-up included), 2 bad
configuration or usage, 3 another instance is running or a directory is unusable, 1 an
unexpected failure (logged with a traceback).

The signal handlers go in before anything else (:mod:`memd.daemon.signals`), so this module
imports at its top only what the interpreter's start has loaded, and the handlers' module:
what the daemon needs, ``argparse`` and ``json`` included, is imported after them.
"""

from __future__ import annotations

import os
import sys

from memd import __version__
from memd.daemon.signals import Signals, Stopped

TYPE_CHECKING = False  # typing is not loaded yet
if TYPE_CHECKING:
    import argparse

    from memd.config import LoadedConfig

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_STARTUP = 0, 1, 2, 3

DESCRIPTION = """\
memd watches Claude Code transcripts under ~/.claude/projects, keeps per-session working
notes and persistent memories, and serves agents over a Unix socket.

Run it in the foreground; use `memdctl install-service` to have systemd (Linux) or launchd
(macOS) keep it running. Without ANTHROPIC_API_KEY it still tracks every session and serves
everything that needs no model; `memdctl status` says what is disabled and why.
"""

EPILOG = """\
environment:
  MEMD_CONFIG          config file (default ~/.config/memd/config.yaml)
  MEMD_PROJECTS_ROOT   transcripts root (default $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects)
  MEMD_STATE_DIR       state (default $XDG_STATE_HOME/memd or ~/.local/state/memd)
  MEMD_RUNTIME_DIR     socket directory (default $XDG_RUNTIME_DIR/memd or /tmp/memd-<uid>)
  ANTHROPIC_API_KEY    enables the model-backed features

env file:
  $XDG_CONFIG_HOME/memd/env (default ~/.config/memd/env), NAME=VALUE lines, mode 0600: memd
  reads it itself (under systemd, launchd or a shell alike) for the model client's settings,
  e.g. ANTHROPIC_API_KEY; the real environment wins. `memdctl reload` re-reads it.

signals:
  SIGHUP               reload the config and the env file (as `memdctl reload`)
  SIGTERM, SIGINT      stop within 10 s: model calls cancelled, state saved, exit 0

exit codes: 0 stopped cleanly, 1 unexpected failure, 2 bad configuration, 3 cannot start
(another instance is running, or a directory is unusable)
"""


def build_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="memd",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command",
        nargs="?",
        choices=["run", "check-config"],
        default="run",
        help="run (default), or check-config: validate the config and env files and exit",
    )
    parser.add_argument("--config", metavar="FILE", help="config file (overrides $MEMD_CONFIG)")
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override one config key, e.g. --set session_notes.init_tokens=20000",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)"
    )
    parser.add_argument("--json", action="store_true", help="check-config: answer in JSON")
    parser.add_argument("--version", action="version", version=f"memd {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    signals = Signals()
    signals.install()
    try:
        return _main(argv, signals)
    except Stopped as stop:  # before the log is set up, maybe: one line of our own
        print(f"memd: stopped on {stop} while starting", file=sys.stderr, flush=True)
        return EXIT_OK


def _main(argv: list[str] | None, signals: Signals) -> int:
    from memd.config import load_config
    from memd.daemon.logsetup import configure_logging
    from memd.errors import ConfigError, StartupError

    args = build_parser().parse_args(argv)
    if args.command == "check-config":
        return check_config(args.config, as_json=args.json)
    configure_logging(args.verbose)
    overrides: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"memd: --set needs KEY=VALUE, got {item!r}", file=sys.stderr)
            return EXIT_CONFIG
        overrides[key] = value
    try:
        loaded = load_config(config_file=args.config, overrides=overrides)
    except ConfigError as exc:
        print(f"memd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        run(loaded, signals)
    except StartupError as exc:
        print(f"memd: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    except OSError as exc:
        print(f"memd: cannot start: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    return EXIT_OK


def run(loaded: LoadedConfig, signals: Signals | None = None) -> None:
    """Check the runtime dir, take the lock, clean up after a crash, serve until stopped.

    Every refusal is a :class:`StartupError` whose text is one line naming the path, the
    problem and the fix; nothing is created in the runtime dir before it is checked.
    """
    import anyio

    from memd.daemon.pidlock import hold_instance_lock
    from memd.daemon.run import run_daemon
    from memd.daemon.service import Daemon
    from memd.daemon.tempsweep import sweep_stale_temps
    from memd.ipc.socketfile import check_socket_path, prepare_runtime_dir

    paths = loaded.paths
    prepare_runtime_dir(paths.runtime_dir)
    with hold_instance_lock(paths.lock_path, paths.socket_path):
        check_socket_path(paths.socket_path)  # a live socket is probed by the server itself
        sweep_stale_temps(paths.state_dir, paths.projects_root)
        daemon = Daemon.load(loaded, env=dict(os.environ), signals=signals)
        daemon.signals.enter_loop()
        try:
            anyio.run(run_daemon, daemon)
        except BaseExceptionGroup as group:
            startup = _sole_startup_error(group)
            if startup is None:
                raise
            raise startup from None


def _sole_startup_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The StartupError a task group wrapped, if that is all the group holds."""
    from memd.errors import StartupError

    match, rest = group.split(StartupError)
    if match is None or rest is not None:
        return None
    leaf: BaseException = match
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


def check_config(config_file: str | None, *, as_json: bool = False) -> int:
    """``memd check-config``: load the config (file + environment) and read the env file the
    way the daemon would, without starting it. Exit 0 valid, 2 not."""
    from memd.config import load_config
    from memd.envfile import env_file_path, read_env_file
    from memd.errors import ConfigError

    problems: list[str] = []
    try:
        loaded = load_config(config_file=config_file)
        checked = str(loaded.paths.config_file) if loaded.paths.config_file else None
    except ConfigError as exc:
        problems.append(str(exc))
        checked = config_file
    env_file = read_env_file(env_file_path(os.environ))
    if env_file.problem:
        problems.append(env_file.problem)
    report = {
        "ok": not problems,
        "config_file": checked,
        "env_file": env_file.status(),
        "problems": problems,
    }
    if as_json:
        import json

        print(json.dumps(report, indent=2, sort_keys=True))
    elif problems:
        print("\n".join(f"memd: {p}" for p in problems), file=sys.stderr)
    else:
        print(f"ok: {checked or 'no config file; the defaults'} is valid")
    return EXIT_OK if not problems else EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
