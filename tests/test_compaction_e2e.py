"""Compaction served by the real daemon: should_compact, compact (levels 1–3), microcompact,
and ``memdctl compact --dry-run``, against a loopback Messages-API server process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from memd.testing.api_rules import request_problems
from memd.testing.loopback_process import LoopbackProcess
from memd_client.errors import RemoteError
from tests.conftest import CORPUS
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

pytestmark = pytest.mark.slow

SLUG = "-home-user-proj"
BIG = CORPUS / "napoli-matcha" / "05_a737f62fb9_0_full.jsonl"


def install_session(home: Home, source: Path, sid: str) -> Path:
    project = home.projects / SLUG
    project.mkdir(parents=True, exist_ok=True)
    target = project / f"{sid}.jsonl"
    shutil.copyfile(source, target)
    return target


def wait_ingested(home: Home, sid: str, size: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        rows = call(home, "sessions")
        row = next((r for r in rows if r["session_id"] == sid), None)
        return row if row and row["offset"] == size else None

    return wait_for(done, timeout=10, what=f"{sid} ingested")


def valid(messages: list[dict[str, Any]]) -> list[str]:
    return request_problems(
        {"model": "m", "max_tokens": 10, "messages": messages}, strict_alternation=True
    )


def test_should_compact_and_microcompact_without_a_key(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        target = install_session(home, BIG, "s1")
        proc = start_memd(home)
        try:
            row = wait_ingested(home, "s1", target.stat().st_size)
            answer = call(home, "should_compact", {"session": "s1"})
            assert answer["threshold"] == 200_000 - 20_000 - 13_000
            assert answer["tokens"] == row["context_tokens"]
            assert answer["compact"] is (row["context_tokens"] >= answer["threshold"])
            small = call(
                home,
                "should_compact",
                {"session": "s1", "tokens": 150_000, "context_window": 160_000},
            )
            assert small["compact"] is True and small["threshold"] == 160_000 - 20_000 - 13_000

            micro = call(home, "microcompact", {"session": "s1", "keep_recent": 2})
            assert micro["api_calls"] == 0
            assert micro["tokens_after"] < micro["tokens_before"]
            assert valid(micro["messages"]) == []

            with pytest.raises(RemoteError) as info:
                call(home, "compact", {"session": "s1"})
            assert info.value.code == "disabled"
            assert "model" in info.value.message

            with pytest.raises(RemoteError) as bad:
                call(home, "compact", {"messages": [{"role": "robot", "content": "x"}]})
            assert bad.value.code == "invalid_params" and "messages[0]" in bad.value.message
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_full_compaction_through_the_daemon(tmp_path: Path) -> None:
    with LoopbackProcess() as api:
        api.add_script(
            json.dumps(
                {
                    "reply": {
                        "text": "<analysis>private</analysis>"
                        "<summary>1. Primary request: x</summary>"
                    }
                }
            )
        )
        with fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=api.url) as home:
            target = install_session(home, BIG, "s2")
            plan = home.root / ".claude" / "plans" / "squishy-launching-pelican.md"
            plan.parent.mkdir(parents=True)
            plan.write_text("# Plan\n1. match names\n")
            proc = start_memd(home)
            try:
                wait_ingested(home, "s2", target.stat().st_size)
                wait_for(
                    lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="model client"
                )
                result = call(home, "compact", {"session": "s2", "trigger": "manual"})
                assert result["level"] == 2
                assert result["api_calls"] == 1
                assert result["tokens_after"] < result["tokens_before"]
                assert valid(result["messages"]) == []
                text = json.dumps(result["messages"])
                assert "Primary request" in text and "private" not in text
                sent = api.requests()
                assert len(sent) == 1 and not sent[0]["body"].get("tools")
                assert result["restore"]["plan"] == {
                    "path": str(plan),
                    "content": "# Plan\n1. match names\n",
                }
                usage = call(home, "status")["usage"]
                assert usage["by_kind"]["compact"]["calls"] == 1
            finally:
                assert stop_memd(proc) == 0, read_log(home)


def test_memdctl_compact_dry_run(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        target = install_session(home, BIG, "s3")
        proc = start_memd(home)
        try:
            wait_ingested(home, "s3", target.stat().st_size)
            wait_for(
                lambda: call(home, "status")["llm"]["reason"].startswith("disabled"),
                timeout=10,
                what="the model client to be set up",
            )
            done = memdctl(home, "compact", "s3", "--dry-run")
            assert done.returncode == 0, done.stderr
            # No notes and no key: it used to promise level 2, which needs the key.
            assert "would not compact" in done.stdout and "would use level" not in done.stdout
            assert "no notes" in done.stdout and "no API key" in done.stdout
            assert "ms of it getting the session's messages)" in done.stdout
            with pytest.raises(RemoteError) as refused:  # what the dry run said would happen
                call(home, "compact", {"session": "s3", "trigger": "manual"})
            assert refused.value.code == "disabled"
            notes = memdctl(home, "notes", "s3")
            assert notes.returncode == 4, notes.stderr  # no notes: not found, said in $? too
            assert "session notes are disabled: no API key" in notes.stdout
        finally:
            assert stop_memd(proc) == 0


def seed_notes(home: Home, sid: str, source: Path, fraction: float) -> str:
    """Notes and an extraction record as a past extraction would have left them."""
    from memd.compaction.service import messages_of
    from memd.session.store import ExtractionRecord
    from memd.session.template import DEFAULT_TEMPLATE
    from memd.transcript.conversation import Conversation

    conv = Conversation()
    conv.add_lines(source.read_bytes().splitlines())
    msgs = messages_of(conv)
    anchor = msgs[int(len(msgs) * fraction)].uuid
    assert anchor is not None
    notes = home.projects / SLUG / sid / "session-memory" / "summary.md"
    notes.parent.mkdir(parents=True)
    notes.write_text(
        DEFAULT_TEMPLATE.replace(
            "_What is being done right now, what is half-finished, and the very next step._\n",
            "_What is being done right now, what is half-finished, and the very next step._\n"
            "Wiring the matcher into the CLI; tests pass except test_cli_flags.\n",
        )
    )
    record = ExtractionRecord(
        sid, SLUG, last_summarized_id=anchor, covered_id=anchor, tokens_at_extraction=1
    )
    records = home.state_dir / "session-notes"
    records.mkdir(parents=True)
    (records / f"{sid}.json").write_text(json.dumps(record.to_json()))
    return anchor


def test_level1_compaction_needs_no_model(tmp_path: Path) -> None:
    """No API key at all: the notes replace the old messages with zero API calls."""
    with fake_home(tmp_path) as home:
        target = install_session(home, BIG, "s4")
        seed_notes(home, "s4", BIG, 0.7)
        proc = start_memd(home)
        try:
            wait_ingested(home, "s4", target.stat().st_size)
            dry = call(home, "compact", {"session": "s4", "dry_run": True, "trigger": "auto"})
            assert dry["level"] == 1, dry
            result = call(home, "compact", {"session": "s4", "trigger": "auto"})
            assert result["level"] == 1 and result["api_calls"] == 0
            assert result["tokens_after"] < result["tokens_before"]
            assert result["tokens_after"] == dry["tokens_after"]
            assert valid(result["messages"]) == []
            assert "test_cli_flags" in json.dumps(result["messages"][0])
            assert call(home, "status")["usage"]["total"]["calls"] == 0
            took = result["server_ms"]  # what bench/compact_restart.py reports
            assert 0 <= took["input"] <= took["total"]
            assert 0 <= dry["server_ms"]["input"] <= dry["server_ms"]["total"]
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_circuit_breaker_stops_auto_after_three_failures(tmp_path: Path) -> None:
    """Three failed auto compactions stop auto-compaction for the session; a manual one
    still runs, and its success resets the count (persisted across a restart)."""
    with LoopbackProcess() as api:
        api.add_script(
            "\n".join(
                json.dumps({"reply": {"error": {"status": 400, "message": "bad"}}})
                for _ in range(3)
            )
        )
        with fake_home(tmp_path, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=api.url) as home:
            target = install_session(home, BIG, "s5")
            proc = start_memd(home)
            try:
                wait_ingested(home, "s5", target.stat().st_size)
                wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="llm")
                for _ in range(3):
                    with pytest.raises(RemoteError):
                        call(home, "compact", {"session": "s5", "trigger": "auto"})
                stopped = call(home, "compact", {"session": "s5", "trigger": "auto"})
                assert stopped["compacted"] is False and "3 failures" in stopped["reason"]
                assert call(home, "should_compact", {"session": "s5"})["circuit_open"] is True
                assert len(api.requests()) == 3  # the stopped one made no call
            finally:
                assert stop_memd(proc) == 0, read_log(home)
            api.add_script(json.dumps({"reply": {"text": "<summary>ok</summary>"}}))
            proc = start_memd(home)
            try:
                wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="llm")
                assert call(home, "should_compact", {"session": "s5"})["circuit_open"] is True
                manual = call(home, "compact", {"session": "s5", "trigger": "manual"})
                assert manual["level"] == 2
                assert call(home, "should_compact", {"session": "s5"})["circuit_open"] is False
            finally:
                assert stop_memd(proc) == 0, read_log(home)
