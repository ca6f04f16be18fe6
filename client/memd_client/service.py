"""Installing memd as a user service: a systemd user unit on Linux, a launchd agent on macOS.

The unit texts live here (the client is what users run to install them); ``systemd/`` in the
repository holds the same texts with the ``@MEMD@`` placeholder, checked by a test.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SYSTEMD_UNIT = """\
# systemd user unit for memd. `memdctl install-service` writes this to
# ~/.config/systemd/user/memd.service with ExecStart pointing at your memd.
# Put ANTHROPIC_API_KEY=... in ~/.config/memd/env to enable the model-backed features.
[Unit]
Description=memd: working notes, compaction and memory for coding agents
Documentation=https://github.com/memd/memd#readme

[Service]
Type=notify
NotifyAccess=main
ExecStart=@MEMD@ run
ExecReload=/bin/kill -HUP $MAINPID
EnvironmentFile=-%h/.config/memd/env
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
     a signal (not after exit 1). ThrottleInterval bounds such a loop to one try per 30 s. -->
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
    commands: tuple[tuple[str, ...], ...]


def find_memd() -> str:
    """The absolute path of the ``memd`` executable next to this Python, else on PATH."""
    beside = Path(sys.executable).parent / "memd"
    if beside.exists():
        return str(beside)
    found = shutil.which("memd")
    if found is None:
        raise FileNotFoundError("cannot find the memd executable; install memd first (see README)")
    return found


def plan_service(home: Path, memd: str, platform: str = sys.platform) -> ServicePlan:
    if platform == "darwin":
        logdir = home / "Library" / "Logs" / "memd"
        text = LAUNCHD_PLIST.replace("@MEMD@", memd).replace("@LOGDIR@", str(logdir))
        path = home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
        return ServicePlan("launchd", path, text, (("launchctl", "load", "-w", str(path)),))
    path = home / ".config" / "systemd" / "user" / "memd.service"
    return ServicePlan(
        "systemd",
        path,
        SYSTEMD_UNIT.replace("@MEMD@", memd),
        (
            ("systemctl", "--user", "daemon-reload"),
            ("systemctl", "--user", "enable", "--now", "memd"),
        ),
    )


def install(plan: ServicePlan, *, start: bool) -> list[str]:
    """Write the unit (keeping a backup of a different existing one) and optionally start it."""
    done: list[str] = []
    plan.path.parent.mkdir(parents=True, exist_ok=True)
    if plan.path.exists() and plan.path.read_text() != plan.text:
        backup = plan.path.with_suffix(plan.path.suffix + ".bak")
        plan.path.replace(backup)
        done.append(f"kept the previous unit as {backup}")
    plan.path.write_text(plan.text)
    done.append(f"wrote {plan.path}")
    if start:
        for cmd in plan.commands:
            subprocess.run(cmd, check=True)
            done.append("ran " + " ".join(cmd))
    return done
