"""`memdctl logs` reads the end of memd's log, never the whole file (a log of many GB is
shown at once, in bounded memory), and says what is wrong with a log it cannot read."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memd_client import cli_local
from memd_client.cli_base import CliFailure, Ctx

# Run in a child limited to 512 MiB of address space: reading the log whole cannot fit.
_SHOW = """
import argparse, io, pathlib, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
from memd_client import cli_local
from memd_client.cli_base import Ctx
out = io.StringIO()
cli_local._show_file(Ctx(argparse.Namespace(follow=False), out=out), pathlib.Path(sys.argv[1]))
sys.stdout.write(out.getvalue())
"""


def test_a_huge_log_shows_its_last_lines_in_bounded_memory(tmp_path: Path) -> None:
    log = tmp_path / "memd.log"
    with open(log, "wb") as f:
        f.truncate(8 << 30)  # 8 GB of a log with no newline in it (sparse: nothing on disk)
        f.seek(0, os.SEEK_END)
        f.write(b"".join(b"line %d\n" % n for n in range(1000)))
    done = subprocess.run(
        [sys.executable, "-c", _SHOW, str(log)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines == [f"line {n}" for n in range(1000 - cli_local.LOG_TAIL_LINES, 1000)]


def test_a_short_log_shows_whole(tmp_path: Path) -> None:
    log = tmp_path / "memd.log"
    log.write_bytes(b"one\ntwo\n")
    out = io.StringIO()
    cli_local._show_file(Ctx(argparse.Namespace(follow=False), out=out), log)
    assert out.getvalue() == "one\ntwo\n"


def test_a_log_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    (tmp_path / "memd.log").mkdir()
    with pytest.raises(CliFailure, match="cannot read memd's log"):
        cli_local._show_file(Ctx(argparse.Namespace(follow=False)), tmp_path / "memd.log")
