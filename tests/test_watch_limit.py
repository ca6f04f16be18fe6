"""Running out of inotify watches while memd runs (issue 9), against the real daemon process.

watchfiles drops the watch on a folder made after the limit is reached without a word. memd
runs here in a user namespace of its own (``unshare``), whose inotify watch limit
(``/proc/sys/user/max_inotify_watches``: per namespace, and counted against every namespace
above it) the test sets low, and later raises from outside through ``nsenter``: the machine's
own ``fs.inotify.max_user_watches`` is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.test_hostile_transcripts import GOOD, NO_DAC, SETPRIV, expected
from tests.uid_support import IS_ROOT, NOBODY

pytestmark = pytest.mark.slow

UNSHARE, NSENTER = shutil.which("unshare"), shutil.which("nsenter")
LIMIT_FILE = "/proc/sys/user/max_inotify_watches"
WARNING = "out of inotify watches"
# The memory quiet timer catches a grown session up with its file 30 s after the growth it
# saw: out of the way, so that only the watcher can find the growth.
SETTINGS = (
    "--set",
    "transcripts.poll_interval_ms=200",
    "--set",
    "memory.extraction_quiet_s=3600",
)


def _userns_works() -> bool:
    if UNSHARE is None or NSENTER is None:
        return False
    done = subprocess.run(
        [UNSHARE, "--user", "--map-root-user", "sh", "-c", f"echo 3 > {LIMIT_FILE}"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def in_userns(limit: int) -> list[str]:
    """A command prefix: a new user namespace whose watch limit is ``limit``, then the rest."""
    script = f'echo {limit} > {LIMIT_FILE} && exec "$@"'
    return [UNSHARE or "unshare", "--user", "--map-root-user", "sh", "-c", script, "sh"]


def set_limit(pid: int, limit: int) -> None:
    """Set the watch limit of the user namespace ``pid`` runs in."""
    script = f"echo {limit} > {LIMIT_FILE}"
    nsenter = NSENTER or "nsenter"
    subprocess.run([nsenter, "--user", f"--target={pid}", "sh", "-c", script], check=True)


def followed(home: Home, session_id: str, path: Path) -> bool:
    """The session's figures match its file read to the end, as the daemon knows them from
    its own reading (``sessions``; ``session`` would catch up with the file itself)."""
    rows = call(home, "sessions", {"project": path.parent.name})
    row = next((r for r in rows if r["session_id"] == session_id), None)
    if row is None or row["offset"] != path.stat().st_size:
        return False
    return (row["message_count"], row["context_tokens"]) == expected(path)


def watcher(home: Home) -> dict[str, Any]:
    result: dict[str, Any] = call(home, "status")["ingest"]["watcher"]
    return result


def inotify_watches(pid: int) -> int:
    """How many inotify watches the process holds (its ``fdinfo`` lines)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                count += text.count("inotify wd:")
        except OSError:
            continue
    return count


def new_session(home: Home, project: str, lines: list[bytes]) -> Path:
    """A project folder made now, and a transcript written into it at once."""
    folder = home.projects / project
    folder.mkdir()
    path = folder / f"{project.strip('-')}.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def append(path: Path, lines: list[bytes]) -> None:
    with path.open("ab") as f:
        f.write(b"".join(lines))


def log_text(home: Home) -> str:
    return (home.root / "memd.log").read_text(errors="replace")


def memdctl_status(home: Home) -> str:
    done = memdctl(home, "status")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(not _userns_works(), reason="needs user namespaces, unshare and nsenter")
@pytest.mark.timeout(300)
def test_project_folders_made_after_the_watches_ran_out_are_still_followed(
    tmp_path: Path,
) -> None:
    lines = GOOD.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 12
    first, middle, last = lines[:4], lines[4:8], lines[8:]
    with fake_home(tmp_path) as home:
        s0 = home.projects / "-p0" / "p0.jsonl"
        s0.parent.mkdir(parents=True)
        s0.write_bytes(b"".join(lines))
        # Watches at start: the root and -p0. One is left, for -p1; none for -p2 and -p3.
        proc = start_memd(home, *SETTINGS, prefix=in_userns(3))
        try:
            wait_for(lambda: followed(home, "p0", s0), timeout=60, what="the session at start")
            # after the start-up scan's second look: from here on only the watcher finds files
            wait_for(lambda: "startup scan:" in log_text(home), timeout=60, what="the scan")
            assert watcher(home)["mode"] == "inotify"
            s1 = new_session(home, "-p1", first)
            wait_for(lambda: followed(home, "p1", s1), timeout=60, what="-p1 (the last watch)")
            assert inotify_watches(proc.pid) == 3
            s2, s3 = new_session(home, "-p2", first), new_session(home, "-p3", first)
            wait_for(lambda: watcher(home)["unwatched"] == 2, timeout=60, what="the two gaps")
            state = watcher(home)
            assert state["mode"] == "inotify+scan"
            assert "out of inotify watches" in state["reason"], state
            assert "max_user_watches" in state["fix"], state
            text = memdctl_status(home)
            assert "2 project folders scanned instead" in text and "fix:" in text, text
            for part in (middle, last[:2], last[2:]):  # they grow: the scan follows them
                append(s2, part)
                append(s3, part)
                for sid, path in (("p2", s2), ("p3", s3)):
                    wait_for(partial(followed, home, sid, path), timeout=60, what=f"{sid} grown")
            assert inotify_watches(proc.pid) == 3  # still: -p2 and -p3 were never watched

            set_limit(proc.pid, 100)  # the fix: memd watches them again by itself
            wait_for(lambda: watcher(home)["mode"] == "inotify", timeout=60, what="inotify")
            assert watcher(home) == {
                "mode": "inotify",
                "reason": None,
                "unwatched": 0,
                "fix": None,
                "skipped_count": 0,
                "skipped": [],
            }
            assert inotify_watches(proc.pid) == 5  # the root and the four projects
            s4 = new_session(home, "-p4", lines)
            wait_for(lambda: followed(home, "p4", s4), timeout=60, what="a project after the fix")
        finally:
            code = stop_memd(proc, timeout=60)
        log = log_text(home)
    assert code == 0, read_log(home)
    assert log.count(WARNING) == 1, log  # once, however many folders
    assert "-p2" in log and "raise the limit" in log
    assert "watching" in log and "with inotify again" in log


@pytest.mark.skipif(not IS_ROOT or shutil.which("setpriv") is None, reason="needs root, setpriv")
@pytest.mark.timeout(300)
def test_a_folder_memd_may_not_read_is_skipped_and_named_the_others_watched(
    tmp_path: Path,
) -> None:
    """watchfiles, told to skip what it may not read, stopped adding watches at the first
    such folder, and the project folders met after it went unwatched. memd adds its watches
    one folder at a time: the folder it may not read is skipped and named in ``status``;
    every other one is watched (no scan), and followed."""
    lines = GOOD.read_bytes().splitlines(keepends=True)
    with fake_home(tmp_path) as home:
        paths = {}
        for name in ("-a", "-b", "-y", "-z"):
            paths[name.strip("-")] = path = home.projects / name / f"{name.strip('-')}.jsonl"
            path.parent.mkdir(parents=True)
            path.write_bytes(b"".join(lines[:4]))
        secret = home.projects / "-secret"
        (secret / "inside").mkdir(parents=True)
        os.chown(secret, NOBODY, NOBODY)
        secret.chmod(0o700)  # another uid's private folder: not even root without DAC reads it
        no_dac = [SETPRIV, f"--bounding-set={NO_DAC}", f"--inh-caps={NO_DAC}"]
        proc = start_memd(home, *SETTINGS, prefix=no_dac)
        try:
            wait_for(lambda: "startup scan:" in log_text(home), timeout=60, what="the scan")
            state = wait_for(
                lambda: (w := watcher(home))["skipped_count"] and w,
                timeout=60,
                what="the folder it may not read",
            )
            assert state["mode"] == "inotify" and state["unwatched"] == 0, state
            assert state["skipped"] == [{"path": str(secret), "reason": "Permission denied"}]
            assert inotify_watches(proc.pid) == 5  # the root and the four it may read
            for part in (lines[4:8], lines[8:]):
                for path in paths.values():
                    append(path, part)
                for sid, path in paths.items():
                    wait_for(partial(followed, home, sid, path), timeout=60, what=f"{sid} grown")
        finally:
            code = stop_memd(proc, timeout=60)
    assert code == 0, read_log(home)
