"""The real daemon against a loopback API that is overloaded or rate-limited, and the notes
IPC methods (``extract``, ``wait_extraction``) called as a client would call them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memd.testing.loopback_process import LoopbackProcess
from memd_client.errors import RemoteError
from tests.conftest import CORPUS
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.disk_support import faulty_disk

pytestmark = pytest.mark.slow

SLUG = "-home-user-faults"
SOURCE = CORPUS / "napoli-matcha" / "05_a737f62fb9_4_full.jsonl"
WORKLOG = "_One terse line per step: what was tried and what came of it._\n"
PATH_RE = "The notes file is (?P<path>/\\S+?summary\\.md)"
FAST_BACKOFF = ("--set", "budget.backoff_initial_s=0.2", "--set", "budget.backoff_max_s=1")


def rules(*first_answers: dict[str, Any]) -> str:
    """Notes requests get ``first_answers`` in order (one each), then a real Edit."""
    edit = {
        "tool_use": {
            "name": "Edit",
            "input": {
                "file_path": "{path}",
                "old_string": WORKLOG,
                "new_string": WORKLOG + "- progress noted\n",
            },
        }
    }
    first = {"tool": "Edit", "turn": "first", "match": PATH_RE}
    entries: list[dict[str, Any]] = [
        {"when": first, "reply": answer, "times": 1} for answer in first_answers
    ]
    entries += [
        {"when": first, "reply": edit},
        {"when": {"turn": "after_tool"}, "reply": {"text": "Done."}},
    ]
    return "\n".join(json.dumps(e) for e in entries)


def notes_requests(api: LoopbackProcess) -> list[dict[str, Any]]:
    return [
        r
        for r in api.requests()
        if [t.get("name") for t in r["body"].get("tools") or []] == ["Edit"]
        and not any(
            isinstance(m.get("content"), list)
            and any(b.get("type") == "tool_result" for b in m["content"])
            for m in r["body"]["messages"][-1:]
        )
    ]


def notes_kind(home: Home) -> dict[str, Any]:
    kinds: dict[str, Any] = call(home, "status")["guard"]["kinds"]
    return kinds.get("session_notes") or next((v for k, v in kinds.items() if "notes" in k), {})


def seed_session(home: Home, sid: str) -> Path:
    project = home.projects / SLUG
    project.mkdir(parents=True, exist_ok=True)
    target = project / f"{sid}.jsonl"
    target.write_bytes(SOURCE.read_bytes())
    return project / sid / "session-memory" / "summary.md"


@pytest.mark.parametrize(
    "faults",
    [
        pytest.param([{"error": {"status": 529}}], id="overloaded-529"),
        pytest.param([{"error": {"status": 429, "retry_after": 1}}], id="rate-limited-429"),
        pytest.param(
            [{"error": {"status": 529}}, {"error": {"status": 429, "retry_after": 1}}],
            id="529-then-429",
        ),
    ],
)
def test_transient_api_errors_back_off_then_the_notes_get_written(
    tmp_path: Path, faults: list[dict[str, Any]]
) -> None:
    with (
        LoopbackProcess() as api,
        fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=api.url) as home,
    ):
        api.add_script(rules(*faults))
        proc = start_memd(home, *FAST_BACKOFF)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="llm")
            notes = seed_session(home, "f1")
            wait_for(lambda: _listed(home, "f1"), timeout=60, what="the session listed")
            wait_for(
                lambda: _notes_status(home, "f1")["extractions"] >= 1,
                timeout=60,
                what="a notes run that succeeds after the faults",
            )
            assert "- progress noted" in notes.read_text()
            # One request per fault, then the one that succeeded: retried, never looped.
            assert len(notes_requests(api)) == len(faults) + 1
            kind = notes_kind(home)
            assert kind["total_failures"] == len(faults)
            assert kind["consecutive_failures"] == 0  # the success reset the streak
            assert str(faults[-1]["error"]["status"]) in (kind["last_error"] or "")
            assert call(home, "hello")  # serving throughout
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_a_notes_write_the_disk_refuses_fails_the_job_until_the_disk_is_back(
    tmp_path: Path,
) -> None:
    """Issue 23: the session's notes folder is on a full disk. The notes job fails (recorded,
    named in ``status`` with its path and error), memd serves on, and the job's own
    scheduling writes the notes once the disk has room again."""
    with (
        LoopbackProcess() as api,
        fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=api.url) as home,
        faulty_disk(home.projects / SLUG / "n1") as disk,
    ):
        home.env.update(disk.env)
        api.add_script(rules())
        proc = start_memd(home, *FAST_BACKOFF)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="llm")
            disk.fault("ENOSPC")
            notes = seed_session(home, "n1")

            def refused() -> dict[str, Any] | None:
                rows = call(home, "status").get("writes", {}).get("paths", [])
                return next((r for r in rows if r["path"] == str(notes)), None)

            row = wait_for(refused, timeout=60, what="status to name the notes file")
            assert row["error"] == "ENOSPC" and row["retried_by"] == "its job"
            wait_for(
                lambda: notes_kind(home).get("total_failures"),
                timeout=30,
                what="the notes job to fail",
            )
            assert _notes_status(home, "n1")["extractions"] == 0
            assert call(home, "hello") and proc.poll() is None
            disk.heal()
            wait_for(
                lambda: _notes_status(home, "n1")["extractions"] >= 1,
                timeout=60,
                what="the notes job to succeed on its own",
            )
            assert "- progress noted" in notes.read_text()
            assert refused() is None
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_extract_and_wait_extraction_over_ipc(tmp_path: Path) -> None:
    with (
        LoopbackProcess() as api,
        fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=api.url) as home,
    ):
        api.add_script(rules())
        proc = start_memd(home, "--set", "session_notes.init_tokens=100000000")
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="llm")
            notes = seed_session(home, "w1")
            size = (home.projects / SLUG / "w1.jsonl").stat().st_size
            wait_for(lambda: _listed(home, "w1"), timeout=60, what="the session listed")
            wait_for(
                lambda: call(home, "session", {"session": "w1"})["offset"] == size,
                timeout=20,
                what="the session ingested",
            )
            # Under the init threshold nothing runs by itself: idle, nothing to wait for.
            assert call(home, "wait_extraction", {"session": "w1"}) == {"outcome": "idle"}
            assert not notes.exists()
            for bad in (-1, 301, "soon", True, [1]):
                with pytest.raises(RemoteError) as err:
                    call(home, "extract", {"session": "w1", "wait": bad})
                assert err.value.code == "invalid_params", bad
            with pytest.raises(RemoteError) as err:
                call(home, "extract", {"session": "no-such-session"})
            assert err.value.code == "not_found"
            # Manual extraction bypasses the thresholds (R-S9) and waits for its run.
            with home.client(timeout=60) as c:
                result = c.call("extract", {"session": "w1", "wait": 30})
            assert result["phase"] == "idle", result
            assert "- progress noted" in notes.read_text()
            assert call(home, "wait_extraction", {"session": "w1"})["outcome"] in {
                "idle",
                "finished",
            }
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_extract_is_refused_for_an_opted_out_project(tmp_path: Path) -> None:
    with (
        LoopbackProcess() as api,
        fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=api.url) as home,
    ):
        proc = start_memd(home, "--set", "privacy.ignore_projects=['*napoli-matcha*']")
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="llm")
            seed_session(home, "o1")
            wait_for(
                lambda: _listed(home, "o1"),
                timeout=60,
                what="the session listed",
            )
            with pytest.raises(RemoteError) as err:
                call(home, "extract", {"session": "o1", "wait": 0})
            assert err.value.code == "invalid_params"
            assert "memory work is off for this project" in str(err.value)
            assert api.requests() == []
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_extract_without_a_key_says_disabled(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            seed_session(home, "d1")
            wait_for(lambda: _listed(home, "d1"), timeout=60, what="the session listed")
            # Until the model client is set up the answer is "starting" (true, but not this).
            wait_for(
                lambda: "no API key" in str(call(home, "status")["llm"]["reason"]),
                timeout=30,
                what="the model client to be set up",
            )
            with pytest.raises(RemoteError) as err:
                call(home, "extract", {"session": "d1"})
            assert err.value.code == "disabled"
            assert "ANTHROPIC_API_KEY" in str(err.value)
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def _listed(home: Home, sid: str) -> bool:
    try:
        call(home, "session", {"session": sid})
    except RemoteError:
        return False
    return True


def _notes_status(home: Home, sid: str) -> dict[str, Any]:
    notes: dict[str, Any] = call(home, "session", {"session": sid})["notes"] or {}
    return {"extractions": 0, **notes}
