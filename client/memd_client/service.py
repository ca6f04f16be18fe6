"""Installing memd as a user service: a systemd user unit on Linux, a launchd agent on macOS.

The unit texts live here (the client is what users run to install them); ``systemd/`` in the
repository holds the same texts with the ``@MEMD@`` placeholder, checked by a test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memd_client.atomic import write_text_atomic

SYSTEMD_UNIT = """\
# systemd user unit for memd. `memdctl install-service` writes this to
# $XDG_CONFIG_HOME/systemd/user/memd.service with ExecStart pointing at your memd.
# memd itself reads ANTHROPIC_API_KEY=... from ~/.config/memd/env (owner-only, mode 0600).
[Unit]
Description=memd: working notes, compaction and memory for coding agents
Documentation=https://github.com/memd/memd#readme

[Service]
Type=notify
NotifyAccess=main
ExecStart=@MEMD@ run
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2
# 2 = bad configuration, 3 = cannot start (unsafe runtime dir, another instance): a restart
# cannot fix either, so systemd leaves memd stopped and `systemctl --user status memd` shows why.
RestartPreventExitStatus=2 3
WatchdogSec=60
TimeoutStopSec=30
KillSignal=SIGTERM

[Install]
WantedBy=default.target
"""

LAUNCHD_PLIST = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- launchd agent for memd (macOS). `memdctl install-service` writes this to
     ~/Library/LaunchAgents/dev.memd.memd.plist with the path of your memd.
     KeepAlive cannot name exit codes: SuccessfulExit=false restarts after any non-zero exit,
     including 2 (bad config) and 3 (cannot start), and Crashed=true would restart only after
     a signal (not after exit 1). ThrottleInterval bounds such a loop to one try per 30 s.
     memd itself reads ANTHROPIC_API_KEY=... from ~/.config/memd/env (mode 0600). -->
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>dev.memd.memd</string>
  <key>ProgramArguments</key>
  <array>
    <string>@MEMD@</string>
    <string>run</string>
  </array>
  <key>RunAtLoad</key>
  <true/>
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key>
    <false/>
  </dict>
  <key>ThrottleInterval</key>
  <integer>30</integer>
  <key>StandardErrorPath</key>
  <string>@LOGDIR@/memd.log</string>
  <key>ProcessType</key>
  <string>Background</string>
</dict>
</plist>
"""

LAUNCHD_LABEL = "dev.memd.memd"


@dataclass(frozen=True)
class ServicePlan:
    kind: str  # "systemd" or "launchd"
    path: Path
    text: str
    commands: tuple[tuple[str, ...], ...]  # start it
    stop_commands: tuple[tuple[str, ...], ...]  # stop and disable it
    log: str  # where its log goes, in words


class NoUserBus(Exception):
    """systemd cannot be asked to start the unit: this login has no user bus."""


def find_memd() -> str:
    """The absolute path of the ``memd`` executable next to this Python, else on PATH."""
    beside = Path(sys.executable).parent / "memd"
    if beside.exists():
        return str(beside)
    found = shutil.which("memd")
    if found is None:
        raise FileNotFoundError("cannot find the memd executable; install memd first (see README)")
    return found


def config_home(home: Path, env: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME`` if set to an absolute path (the XDG rule), else ``~/.config``."""
    value = env.get("XDG_CONFIG_HOME", "")
    return Path(value) if value.startswith("/") else home / ".config"


def launchd_log(home: Path) -> Path:
    return home / "Library" / "Logs" / "memd" / "memd.log"


def plan_service(
    home: Path, memd: str, platform: str = sys.platform, env: Mapping[str, str] | None = None
) -> ServicePlan:
    env = os.environ if env is None else env
    if platform == "darwin":
        text = LAUNCHD_PLIST.replace("@MEMD@", memd).replace(
            "@LOGDIR@", str(launchd_log(home).parent)
        )
        path = home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
        return ServicePlan(
            "launchd",
            path,
            text,
            (("launchctl", "load", "-w", str(path)),),
            (("launchctl", "unload", "-w", str(path)),),
            str(launchd_log(home)),
        )
    path = config_home(home, env) / "systemd" / "user" / "memd.service"
    return ServicePlan(
        "systemd",
        path,
        SYSTEMD_UNIT.replace("@MEMD@", memd),
        (
            ("systemctl", "--user", "daemon-reload"),
            ("systemctl", "--user", "enable", "--now", "memd"),
        ),
        (("systemctl", "--user", "disable", "--now", "memd"),),
        "the journal: journalctl --user -u memd",
    )


def has_user_bus(env: Mapping[str, str]) -> bool:
    """Whether ``systemctl --user`` can reach a user manager from this environment."""
    if env.get("DBUS_SESSION_BUS_ADDRESS"):
        return True
    runtime = env.get("XDG_RUNTIME_DIR")
    return runtime is not None and runtime != "" and (Path(runtime) / "bus").exists()


NO_BUS_HELP = (
    "there is no systemd user bus in this login ($XDG_RUNTIME_DIR/bus is missing), so the "
    "unit cannot be started from here. Log in through a normal session (or run `loginctl "
    "enable-linger $USER` as an administrator and log in again), then run `systemctl --user "
    "daemon-reload && systemctl --user enable --now memd`; `memdctl install-service "
    "--no-start` writes the unit without trying to start it"
)


def install(plan: ServicePlan, *, start: bool, env: Mapping[str, str] | None = None) -> list[str]:
    """Write the unit (keeping a backup of a different existing one) and optionally start it.
    Raises :class:`NoUserBus` (after writing the unit) when systemd cannot be reached, and
    ``subprocess.CalledProcessError`` with the command's output when a command fails."""
    env = os.environ if env is None else env
    done: list[str] = []
    if plan.path.exists() and plan.path.read_text(errors="replace") != plan.text:
        backup = plan.path.with_suffix(plan.path.suffix + ".bak")
        plan.path.replace(backup)
        done.append(f"kept the previous unit as {backup}")
    write_text_atomic(plan.path, plan.text, mode=0o644)
    done.append(f"wrote {plan.path}")
    if start:
        if plan.kind == "systemd" and not has_user_bus(env):
            raise NoUserBus(NO_BUS_HELP)
        for cmd in plan.commands:
            _run(cmd)
            done.append("ran " + " ".join(cmd))
    return done


def uninstall(plan: ServicePlan, *, env: Mapping[str, str] | None = None) -> list[str]:
    """Stop and disable the service when its manager can be reached, then remove the unit."""
    env = os.environ if env is None else env
    done: list[str] = []
    if not plan.path.exists():
        return [f"no {plan.kind} unit at {plan.path}; nothing to remove"]
    if plan.kind == "systemd" and not has_user_bus(env):
        done.append("no systemd user bus here: not stopping the service (it stops at logout)")
    else:
        for cmd in plan.stop_commands:
            _run(cmd)
            done.append("ran " + " ".join(cmd))
    plan.path.unlink()
    done.append(f"removed {plan.path}")
    if plan.kind == "systemd" and has_user_bus(env):
        _run(("systemctl", "--user", "daemon-reload"))
        done.append("ran systemctl --user daemon-reload")
    return done


def _run(cmd: tuple[str, ...]) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)
