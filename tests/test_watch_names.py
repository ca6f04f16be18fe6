"""Names that are not UTF-8 and links under the projects root, against the real daemon (issue 23).

A transcript or project folder named with a Latin-1 byte ended memd with watchfiles'
``WatchfilesRustInternalError``, at every start while the name was there; a project folder
linked to a big tree cost a watch for each folder in it. Here: each name variant (file,
folder, both), made before the start and while running, is followed, shown escaped by
``memdctl`` (text and JSON) and found again in that form; the daemon stops cleanly and
starts again. Links cost no watch and are named in ``status``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from memd.daemon.watch_tree import LINK
from memd_client.errors import RemoteError
from memd_client.names import escape_name
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
from tests.test_hostile_transcripts import GOOD, expected
from tests.test_watch_limit import inotify_watches

pytestmark = pytest.mark.slow

# (project folder, transcript name): bytes, as on disk
VARIANTS = {
    "file": (b"-home-user-work", b"caf\xe9"),
    "folder": (b"-home-user-caf\xe9", b"plain"),
    "both": (b"-home-\xff\xfe", b"caf\xe9\\x41"),  # a backslash too: escaped as well
}


def put(home: Home, folder: bytes, stem: bytes, lines: list[bytes]) -> Path:
    """A transcript ``<folder>/<stem>.jsonl`` under the projects root, made with bytes."""
    where = os.fsencode(home.projects) + b"/" + folder
    os.makedirs(where, exist_ok=True)
    path = Path(os.fsdecode(where + b"/" + stem + b".jsonl"))
    path.write_bytes(b"".join(lines))
    return path


def shown(stem: bytes) -> str:
    """The session id as memd shows it and takes it back."""
    return escape_name(os.fsdecode(stem))


def followed(home: Home, stem: bytes, path: Path) -> bool:
    try:
        row = call(home, "session", {"session": shown(stem)})
    except RemoteError:  # not known yet
        return False
    return (row["message_count"], row["context_tokens"]) == expected(path) and row[
        "offset"
    ] == path.stat().st_size


def check_memdctl(home: Home, folder: bytes, stem: bytes) -> None:
    """Text and JSON show the names escaped; the escaped id finds the session."""
    listing = memdctl(home, "--json", "sessions")
    assert listing.returncode == 0, listing.stderr
    rows = json.loads(listing.stdout)
    row = next(r for r in rows if r["session_id"] == shown(stem))
    assert row["project"] == escape_name(os.fsdecode(folder))
    assert row["path"].endswith(escape_name(os.fsdecode(folder + b"/" + stem + b".jsonl")))
    one = memdctl(home, "session", shown(stem))
    assert one.returncode == 0, one.stderr
    assert shown(stem) in one.stdout and escape_name(os.fsdecode(folder)) in one.stdout
    text = memdctl(home, "sessions")
    assert text.returncode == 0 and shown(stem)[:8] in text.stdout, text


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.timeout(300)
def test_names_that_are_not_utf8_never_stop_the_daemon(tmp_path: Path, variant: str) -> None:
    folder, stem = VARIANTS[variant]
    lines = GOOD.read_bytes().splitlines(keepends=True)
    with fake_home(tmp_path) as home:
        at_start = put(home, folder, stem + b"-1", lines[:6])
        good = put(home, b"-home-user-good", b"good", lines[:6])
        proc = start_memd(home)
        try:
            wait_for(lambda: followed(home, stem + b"-1", at_start), timeout=60, what="at start")
            # While running: a new folder (of the variant's kind) and file; both grow.
            later = put(home, folder + b"-later", stem + b"-2", lines[:4])
            wait_for(lambda: followed(home, stem + b"-2", later), timeout=60, what="made later")
            for path in (at_start, later, good):
                with path.open("ab") as f:
                    f.write(b"".join(lines[6:12]))
            wait_for(lambda: followed(home, stem + b"-1", at_start), timeout=60, what="growth")
            wait_for(lambda: followed(home, stem + b"-2", later), timeout=60, what="growth 2")
            wait_for(lambda: followed(home, b"good", good), timeout=60, what="the good one")
            status: dict[str, Any] = call(home, "status")
            assert status["ingest"]["watcher"]["mode"] == "inotify"
            assert status["daemon"]["pid"] == proc.pid
            check_memdctl(home, folder, stem + b"-1")
            assert memdctl(home, "status").returncode == 0
        finally:
            code = stop_memd(proc, timeout=30)
        assert code == 0, read_log(home)

        proc = start_memd(home)  # the names are still there: it starts, and follows them
        try:
            with later.open("ab") as f:
                f.write(b"".join(lines[12:]))
            wait_for(lambda: followed(home, stem + b"-2", later), timeout=60, what="restarted")
            assert followed(home, stem + b"-1", at_start)
        finally:
            code = stop_memd(proc, timeout=30)
        assert code == 0, read_log(home)


@pytest.mark.timeout(300)
def test_links_under_the_projects_root_cost_no_watch_and_are_named(tmp_path: Path) -> None:
    """``projects/x -> /usr`` cost 15,451 watches: a project folder linked to a tree of 400
    folders (at start, and one more while running) costs none and is not read; a linked
    session folder neither; ``status`` and ``memdctl status`` name what was skipped."""
    big = tmp_path / "big"
    for i in range(200):
        (big / f"d{i}" / "e").mkdir(parents=True)
    (big / "linked.jsonl").write_bytes(GOOD.read_bytes())  # a session if the link were read
    lines = GOOD.read_bytes().splitlines(keepends=True)
    with fake_home(tmp_path / "home") as home:
        good = put(home, b"-p", b"good", lines[:6])
        (home.projects / "x").symlink_to(big)
        (home.projects / "-p" / "alias.jsonl").symlink_to(good)
        proc = start_memd(home)
        try:
            wait_for(lambda: followed(home, b"good", good), timeout=60, what="the good session")
            assert inotify_watches(proc.pid) == 2  # the root and -p
            x = str(home.projects / "x")
            watcher = call(home, "status")["ingest"]["watcher"]
            assert watcher["skipped"] == [{"path": x, "reason": LINK}], watcher
            (home.projects / "y").symlink_to(big)  # while running: at the root, in a project
            (home.projects / "-p" / "session").symlink_to(big)
            wait_for(
                lambda: call(home, "status")["ingest"]["watcher"]["skipped_count"] == 3,
                timeout=60,
                what="the links made while running",
            )
            with good.open("ab") as f:
                f.write(b"".join(lines[6:]))
            wait_for(lambda: followed(home, b"good", good), timeout=60, what="growth")
            assert inotify_watches(proc.pid) == 2
            assert not [r for r in call(home, "sessions") if r["session_id"] == "linked"]
            alias = call(home, "session", {"session": "alias"})
            assert alias["unreadable"]["reason"].startswith("a symbolic link (not followed)")
            text = memdctl(home, "status")
            assert "skipped   3 under the projects root" in text.stdout, text.stdout
            assert f"{x}: {LINK}" in text.stdout
        finally:
            code = stop_memd(proc, timeout=30)
        assert code == 0, read_log(home)
