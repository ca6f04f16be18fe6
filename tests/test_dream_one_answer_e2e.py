"""A dream on a local model asked for one answer (issue 34), on the real daemon: with no key
anywhere and only an OpenAI-compatible server on its port, the dream's route is the local
server's small model (protocol ``whole``); the scripted weak model's bad answers (cut short,
not JSON, a path outside the memory dir, everything deleted) each fail the run having changed
nothing and are counted; a good one merges the duplicates and fixes the index, and
``dream --log`` and ``dream --restore`` work on it as on any dream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memd.dream.lock import LOCK_NAME
from memd.testing.loopback import LoopbackAPI
from memd.testing.weak_model import WeakModel
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.test_dream_e2e import PRIOR_NS, memdctl, setup_project, tree

pytestmark = pytest.mark.slow


def bad_answers_change_nothing(home: Home, cwd: Path, mdir: Path, before: dict[str, str]) -> None:
    """The weak model's four bad answers in turn: each run fails, changing nothing, counted;
    the dream is then parked (not run again by itself)."""
    for fault in ("cut short", "not valid JSON", "'../../outside.md'", "topic files deleted"):
        done = memdctl(home, "dream", str(cwd), "--force", "--wait", "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        run = json.loads(done.stdout)
        assert run["state"] == "failed" and fault in run["reason"], run
        assert tree(mdir) == before
        assert (mdir / LOCK_NAME).stat().st_mtime_ns == PRIOR_NS
    guard = call(home, "status")["guard"]
    assert guard["malformed_answers"] == {"dream": 4}, guard
    plain = memdctl(home, "dream", str(cwd))
    assert "cost guard" in plain.stdout, plain.stdout


@pytest.fixture
def server() -> Iterator[LoopbackAPI]:
    with LoopbackAPI(context_limit=1_000_000) as api:
        api.models = ("qwen2.5-coder:7b",)
        yield api


def test_a_local_model_asked_for_one_answer_dreams_and_its_bad_answers_lose_nothing(
    tmp_path: Path, server: LoopbackAPI
) -> None:
    model = WeakModel(fault_every=1)
    server.set_handler(model)
    port = server.url.rsplit(":", 1)[1]
    with fake_home(tmp_path) as home:
        cwd, mdir = setup_project(home, tmp_path, sessions=5)
        before = tree(mdir)
        proc = start_memd(
            home,
            "--set",
            f"llm.local_ports=['127.0.0.1:{port}']",
            "--set",
            "dream.scan_throttle_minutes=0",
        )
        try:
            llm = wait_for(
                lambda: (s := call(home, "status")["llm"])["enabled"] and s,
                timeout=30,
                what="the local server found on its port",
            )
            route = llm["jobs"]["dream"]
            assert (route["backend"], route["protocol"]) == ("local", "whole"), route
            bad_answers_change_nothing(home, cwd, mdir, before)
            assert not (tmp_path / ".claude" / "projects" / "outside.md").exists()

            model.fault_every = 0
            done = memdctl(home, "dream", str(cwd), "--force", "--wait", "--json")
            assert done.returncode == 0, done.stdout + done.stderr
            run = json.loads(done.stdout)
            assert run["state"] == "completed" and run["turns"] == 1, run
            assert not (mdir / "feedback_testing.md").exists()
            merged = (mdir / "feedback_tests.md").read_text()
            assert "Use scripts/check" in merged and "runs ruff, mypy and pytest" in merged
            index = (mdir / "MEMORY.md").read_text()
            assert "(feedback_testing.md)" not in index and "(project_release.md)" in index
            assert "cut on 20" in (mdir / "project_release.md").read_text()
            log = memdctl(home, "dream", str(cwd), "--log", run["run_id"])
            assert log.returncode == 0, log.stderr
            assert "deleted feedback_testing.md (merged into feedback_tests.md)" in log.stdout
            assert "-The release branch was cut yesterday" in log.stdout
            usage = call(home, "status")["usage"]["by_backend"]["local"]
            assert usage["calls"] >= 5 and usage["billed"] == 0
            restored = memdctl(home, "dream", str(cwd), "--restore", run["run_id"], "--json")
            assert restored.returncode == 0, restored.stderr
            assert tree(mdir) == before
        finally:
            assert stop_memd(proc) == 0, read_log(home)
