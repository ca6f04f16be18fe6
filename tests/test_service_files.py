"""The service units shipped in systemd/ are the ones `memdctl install-service` writes."""

from __future__ import annotations

import plistlib
from pathlib import Path

import pytest

from memd_client import service
from memd_client.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_repository_units_match_the_installed_texts() -> None:
    assert (ROOT / "systemd" / "memd.service").read_text() == service.SYSTEMD_UNIT
    assert (ROOT / "systemd" / "dev.memd.memd.plist").read_text() == service.LAUNCHD_PLIST


def test_systemd_unit_is_notify_with_watchdog_and_restart(tmp_path: Path) -> None:
    plan = service.plan_service(tmp_path, "/opt/bin/memd", platform="linux")
    assert plan.path == tmp_path / ".config/systemd/user/memd.service"
    lines = plan.text.splitlines()
    for expected in (
        "Type=notify",
        "ExecStart=/opt/bin/memd run",
        "Restart=on-failure",
        "RestartPreventExitStatus=2 3",
        "WatchdogSec=60",
        "WantedBy=default.target",
    ):
        assert expected in lines


def test_launchd_plist_is_valid_and_keeps_memd_alive(tmp_path: Path) -> None:
    plan = service.plan_service(tmp_path, "/opt/bin/memd", platform="darwin")
    doc = plistlib.loads(plan.text.encode())
    assert doc["ProgramArguments"] == ["/opt/bin/memd", "run"]
    assert doc["KeepAlive"] == {"SuccessfulExit": False}
    assert doc["Label"] == service.LAUNCHD_LABEL


def test_install_keeps_a_backup_of_a_different_unit(tmp_path: Path) -> None:
    plan = service.plan_service(tmp_path, "/opt/bin/memd", platform="linux")
    plan.path.parent.mkdir(parents=True)
    plan.path.write_text("[Service]\nExecStart=/old/memd\n")
    done = service.install(plan, start=False)
    assert plan.path.read_text() == plan.text
    assert plan.path.with_suffix(".service.bak").read_text() == "[Service]\nExecStart=/old/memd\n"
    assert any("kept the previous unit" in line for line in done)
    assert service.install(plan, start=False) == [f"wrote {plan.path}"]


def test_memdctl_install_service_print(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install-service", "--print"]) == 0
    out = capsys.readouterr().out
    assert "Type=notify" in out and "@MEMD@" not in out
