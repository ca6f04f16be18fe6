"""A hostile config file stops the start with one line naming it and exit 2, never a hang
or a traceback: a FIFO, a device, a huge or non-UTF-8 file, deep nesting, no permission."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memd.daemon.main import main
from tests.daemon_harness import fake_home
from tests.uid_support import IS_ROOT, NOBODY, run_forked

EXIT_CONFIG = 2


def memd_with_config(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    with fake_home(tmp_path) as home:
        return subprocess.run(
            [sys.executable, "-m", "memd.daemon.main", "--config", str(config)],
            env=home.env,
            capture_output=True,
            text=True,
            timeout=60,  # a start that waits on the file would hang here
        )


def make(kind: str, path: Path) -> None:
    match kind:
        case "fifo":
            os.mkfifo(path)
        case "device":
            path.symlink_to("/dev/zero")
        case "directory":
            path.mkdir()
        case "huge":
            path.write_bytes(b"# " + b"x" * (2 * 1024 * 1024) + b"\n")
        case "not-utf8":
            path.write_bytes(b"session_notes:\n  init_tokens: \xff\xfe\n")
        case "deep":
            path.write_text("[" * 200_000 + "]" * 200_000)
        case "not-a-mapping":
            path.write_text("- just\n- a list\n")


@pytest.mark.parametrize(
    "kind", ["fifo", "device", "directory", "huge", "not-utf8", "deep", "not-a-mapping"]
)
def test_a_hostile_config_file_is_one_line_and_exit_2(tmp_path: Path, kind: str) -> None:
    config = tmp_path / "config.yaml"
    make(kind, config)
    done = memd_with_config(tmp_path, config)
    assert done.returncode == EXIT_CONFIG, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(config) in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture
def locked_dir() -> Iterator[Path]:
    """A config dir uid 65534 may not enter."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="memd-c"))
    path.chmod(0o711)
    inner = path / "conf"
    inner.mkdir(mode=0o700)
    (inner / "config.yaml").write_text("session_notes:\n  init_tokens: 20000\n")
    try:
        yield inner / "config.yaml"
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to act as another user")
def test_a_config_file_behind_a_folder_we_cannot_enter_is_exit_2_naming_it(
    locked_dir: Path,
) -> None:
    env = {"HOME": "/nonexistent", "PATH": os.environ.get("PATH", "")}
    exited = run_forked(lambda: main(["--config", str(locked_dir)]), uid=NOBODY, env=env)
    assert exited.code == EXIT_CONFIG, exited.stderr
    assert str(locked_dir) in exited.stderr and "Permission denied" in exited.stderr
    assert "Traceback" not in exited.stderr
