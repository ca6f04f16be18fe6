"""The archive of unused memories through the real daemon (issue 36, item 3): at its start memd
moves the memories no agent used and no check verified for ``memory.archive_unused_days`` out
of the memory dir, beside it, with their lines in ``MEMORY.md``; pinned, team, used, verified
and fresh memories stay; ``memdctl memories --archived`` lists what moved,
``memdctl memories --restore`` puts one back, lines and all, and the next sweep leaves it
there. The number of days is read from the config, and again at a reload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.archive_support import (
    FRESH,
    KEPT,
    STALE,
    index_line,
    stale_world,
    tree,
    wait_swept,
)
from tests.daemon_harness import call, fake_home, memdctl, read_log, start_memd, stop_memd

pytestmark = pytest.mark.slow


def test_unused_memories_are_archived_listed_and_restored(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        world = stale_world(home)
        before = tree(world.memory)
        proc = start_memd(home)
        try:
            swept = wait_swept(home)
            assert swept["last_archived"] == len(STALE) and swept["last_error"] is None, swept
            assert swept["archived"] == len(STALE) and swept["unused_days"] == 28
            # moved whole, nothing else touched
            assert tree(world.archive) == {r: before[r] for r in STALE}
            assert tree(world.memory) == {
                **{r: before[r] for r in {**KEPT, **FRESH}},
                "MEMORY.md": tree(world.memory)["MEMORY.md"],
            }
            index = world.index()
            assert all(index_line(r) not in index for r in STALE), index
            assert all(index_line(r) in index for r in {**KEPT, **FRESH} if "/" not in r)

            shown = memdctl(home, "--json", "memories", str(world.repo))
            assert shown.returncode == 0, shown.stderr
            rows = {r["relative"] for r in json.loads(shown.stdout)["memories"]}
            assert rows == set(KEPT) | set(FRESH)
            # out of the recall set: its own words find it no more
            asked = {"query": "deploys make ship-old", "cwd": str(world.repo)}
            recalled = {m["relative"] for m in call(home, "recall", asked)["memories"]}
            assert "stale_deploy.md" not in recalled, recalled
            archived = memdctl(home, "--json", "memories", "--archived", str(world.repo))
            assert archived.returncode == 0, archived.stderr
            answer = json.loads(archived.stdout)
            assert answer["archive_dir"] == str(world.archive)
            assert {r["archived"] for r in answer["archived"]} == set(STALE)
            assert all(r["archived_at"] for r in answer["archived"])
            text = memdctl(home, "memories", "--archived", str(world.repo)).stdout
            assert "stale_deploy.md" in text and "--restore" in text

            back = memdctl(home, "memories", "--restore", "stale_deploy", str(world.repo))
            assert back.returncode == 0, back.stderr
            assert "stale_deploy.md" in back.stdout and "MEMORY.md" in back.stdout
            assert tree(world.memory)["stale_deploy.md"] == before["stale_deploy.md"]
            assert index_line("stale_deploy.md") in world.index()
            assert not (world.archive / "stale_deploy.md").exists()
            recalled = {m["relative"] for m in call(home, "recall", asked)["memories"]}
            assert "stale_deploy.md" in recalled, recalled

            missing = memdctl(home, "memories", "--restore", "no-such.md", str(world.repo))
            assert missing.returncode == 4 and "no-such.md" in missing.stderr, missing

            # the next sweep (a reload wakes one) leaves the restored memory where it is
            assert memdctl(home, "reload").returncode == 0
            again = wait_swept(home, after=swept["sweeps"])
            assert again["last_archived"] == 0 and again["archived"] == len(STALE) - 1
            assert (world.memory / "stale_deploy.md").exists()
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_the_days_are_read_from_the_config_and_a_reload(tmp_path: Path) -> None:
    """Idle 40 days: nothing moves while the setting says 41; a reload to 39 moves them."""
    with fake_home(tmp_path) as home:
        world = stale_world(home)
        before = tree(world.memory)
        config = home.root / ".config" / "memd" / "config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text("memory:\n  archive_unused_days: 41\n")
        proc = start_memd(home)
        try:
            swept = wait_swept(home)
            assert (swept["unused_days"], swept["last_archived"]) == (41, 0), swept
            assert tree(world.memory) == before and not world.archive.exists()
            config.write_text("memory:\n  archive_unused_days: 39\n")
            assert memdctl(home, "reload").returncode == 0, read_log(home)
            again = wait_swept(home, after=swept["sweeps"])
            assert (again["unused_days"], again["last_archived"]) == (39, len(STALE)), again
            assert tree(world.archive) == {r: before[r] for r in STALE}
        finally:
            assert stop_memd(proc) == 0, read_log(home)
