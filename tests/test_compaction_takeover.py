"""The opt-in takeover of Claude Code's ``/compact`` (issue 25): when the PreCompact hook
blocks with a fork, and when it lets Claude Code compact. The real CLI runs it in
tests/test_claude_code_compact.py."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.atomic import retry_kept
from memd.compaction.takeover import (
    COUNTS_FILE,
    MAX_REASON_CHARS,
    MAX_SESSIONS,
    SAME_COMPACTION_S,
    Pass,
    Take,
    TakeoverRecord,
    decide,
)
from memd.writes import WRITES
from memd_client.agents.claude_code import HOOKS as CLAUDE_HOOKS
from memd_client.agents.claude_code import TAKEOVER_HOOKS as CLAUDE_TAKEOVER
from memd_client.agents.claude_code import TAKEOVER_TIMEOUT_S
from memd_client.hooks_install import (
    install_hooks,
    read_settings,
    uninstall_hooks,
)
from tests.conftest import on_a_gateway_model
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    load_stretch,
    read_log,
    start_memd,
    stop_memd,
)
from tests.test_compaction_e2e import BIG, SLUG, install_session, seed_notes, wait_ingested

MANUAL = {"hook_event_name": "PreCompact", "trigger": "manual", "custom_instructions": None}


def decided(hook_input: dict[str, Any], **facts: Any) -> Take | Pass:
    given = {
        "context_tokens": 50_000,
        "effective_window": 180_000,
        "blocked_last": False,
        "notes_phase": "idle",
        **facts,
    }
    return decide(hook_input, **given)


def test_only_a_plain_manual_compact_with_room_and_idle_notes_is_taken_over() -> None:
    assert decided(MANUAL) == Take()
    assert decided({**MANUAL, "custom_instructions": ""}) == Take()
    assert isinstance(decided({**MANUAL, "trigger": "auto"}), Pass)
    assert isinstance(decided({**MANUAL, "trigger": None}), Pass)
    assert isinstance(decided({**MANUAL, "custom_instructions": "keep the tests"}), Pass)
    assert isinstance(decided(MANUAL, blocked_last=True), Pass)
    assert isinstance(decided(MANUAL, context_tokens=180_000), Pass)
    assert isinstance(decided(MANUAL, context_tokens=2**70), Pass)
    assert isinstance(decided(MANUAL, notes_phase="running"), Pass)


def test_the_record_survives_a_restart_stays_bounded_and_a_failed_write_changes_nothing(
    tmp_path: Path,
) -> None:
    record = TakeoverRecord(tmp_path)
    record.mark("s1", "f1")
    assert TakeoverRecord(tmp_path).blocked_last("s1")
    record.clear("s1")
    assert not TakeoverRecord(tmp_path).blocked_last("s1")
    for n in range(MAX_SESSIONS + 5):
        record.mark(f"s{n}", "f")
    again = TakeoverRecord(tmp_path)
    assert not again.blocked_last("s0") and again.blocked_last(f"s{MAX_SESSIONS + 4}")
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    broken = TakeoverRecord(blocked)
    with pytest.raises(OSError):
        broken.mark("s1", "f1")
    assert not broken.blocked_last("s1") and broken.statistics()["last_error"]
    (tmp_path / "compaction-takeover.json").write_bytes(b'{"blocked": [1, 2]}')
    assert TakeoverRecord(tmp_path).statistics()["blocked_sessions"] == 0


def test_the_counts_survive_a_restart_and_a_failed_write(tmp_path: Path) -> None:
    """Issue 38: taken, passed and the last reason are memd's own state: on disk, read at
    start; a write the disk refuses keeps them in memory, in WRITES, and lands later."""
    record = TakeoverRecord(tmp_path)
    record.count_taken()
    record.count_passed("the context is over the window")
    record.count_passed("x" * (MAX_REASON_CHARS + 5))
    again = TakeoverRecord(tmp_path)
    assert (again.taken, again.passed) == (1, 2)
    assert again.last_pass == "x" * MAX_REASON_CHARS
    counts = tmp_path / COUNTS_FILE
    with ThreadPoolExecutor(8) as pool:  # counted from worker threads, at once
        list(
            pool.map(lambda n: again.count_taken() if n % 2 else again.count_passed("p"), range(40))
        )
    assert TakeoverRecord(tmp_path).statistics()["taken"] == 21
    counts.unlink()
    counts.mkdir()  # cannot be replaced: the write fails
    try:
        again.count_taken()
        assert again.taken == 22 and counts.is_dir()
        assert WRITES.kept(str(counts)) is not None  # status shows it, memd writes it again
        counts.rmdir()
        assert retry_kept(at_exit=True) == 0
        assert TakeoverRecord(tmp_path).taken == 22
    finally:
        WRITES.succeeded(str(counts))


@given(
    st.binary(max_size=200)
    | st.builds(
        json.dumps,
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda kids: (
                st.lists(kids, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["taken", "passed", "last_pass", "x"]), kids, max_size=4
                )
            ),
        ),
    ).map(str.encode)
)
def test_any_counts_file_reads_as_counts(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / COUNTS_FILE).write_bytes(raw)
        record = TakeoverRecord(Path(folder))
    assert isinstance(record.taken, int) and 0 <= record.taken <= 2**53
    assert isinstance(record.passed, int) and 0 <= record.passed <= 2**53
    assert record.last_pass is None or len(record.last_pass) <= MAX_REASON_CHARS


def test_a_compaction_is_claimed_by_its_first_hook_and_no_mark_is_lost(tmp_path: Path) -> None:
    assert SAME_COMPACTION_S >= TAKEOVER_TIMEOUT_S  # Claude Code's wait for the hook
    now = [100.0]
    record = TakeoverRecord(tmp_path, monotonic=lambda: now[0])
    assert record.begin("s1") and not record.begin("s1") and record.begin("s2")
    now[0] += SAME_COMPACTION_S - 0.01
    assert not record.begin("s1")  # a hook of the same compaction, however late
    now[0] += 0.02
    assert record.begin("s1") and not record.begin("s1")  # the next compaction
    with ThreadPoolExecutor(8) as pool:  # marks and clears from worker threads, at once
        list(pool.map(lambda n: record.mark(f"t{n}", "f"), range(48)))
        list(pool.map(lambda n: record.clear(f"t{n}"), range(0, 48, 2)))
    again = TakeoverRecord(tmp_path)
    assert [again.blocked_last(f"t{n}") for n in range(48)] == [n % 2 == 1 for n in range(48)]


def test_install_hooks_adds_the_takeover_only_when_asked_and_uninstall_removes_it(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "settings.json"
    install_hooks(settings, "/bin/memd-hook", CLAUDE_HOOKS)
    assert "PreCompact" not in read_settings(settings)["hooks"]
    install_hooks(settings, "/bin/memd-hook", CLAUDE_TAKEOVER)
    (group,) = read_settings(settings)["hooks"]["PreCompact"]
    assert group["matcher"] == "manual"
    assert group["hooks"] == [
        {"type": "command", "command": "/bin/memd-hook", "timeout": TAKEOVER_TIMEOUT_S}
    ]
    install_hooks(settings, "/bin/memd-hook", CLAUDE_HOOKS)  # without the flag: the takeover goes
    assert "PreCompact" not in read_settings(settings)["hooks"]
    install_hooks(settings, "/bin/memd-hook", CLAUDE_TAKEOVER)
    uninstall_hooks(settings)
    assert "hooks" not in read_settings(settings)


def precompact(home: Home, sid: str, **fields: Any) -> str | None:
    hook_input = {**MANUAL, "session_id": sid, "transcript_path": "", "cwd": "/p", **fields}
    raw = json.dumps(hook_input).encode()
    answer: str | None = call(home, "hook", {"raw": raw})["stdout"]
    return answer


def forks(home: Home) -> list[str]:
    return sorted(p.stem for p in (home.projects / SLUG).glob("*.jsonl") if len(p.stem) == 36)


def test_compact_is_blocked_once_with_the_resume_line_then_let_through(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        target = install_session(home, BIG, "s4")
        seed_notes(home, "s4", BIG, 0.7)
        old = target.read_bytes()
        proc = start_memd(home)
        try:
            wait_ingested(home, "s4", len(old))
            assert precompact(home, "s4", trigger="auto") is None
            assert precompact(home, "s4", custom_instructions="keep the tests") is None
            assert forks(home) == []
            blocked = precompact(home, "s4")
            assert blocked is not None
            (fork,) = forks(home)
            answer = json.loads(blocked)
            assert answer["decision"] == "block"
            assert f"claude --resume {fork}" in answer["reason"]
            assert "\n" not in answer["reason"]
            assert precompact(home, "s4") is None  # another hook of the same /compact
            assert forks(home) == [fork] and target.read_bytes() == old
            stats = call(home, "status")["compaction"]["takeover"]
            assert stats["taken"] == 1 and stats["blocked_sessions"] == 1
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        proc = start_memd(home)  # the record and the counts survive a restart
        try:
            wait_ingested(home, "s4", len(old))
            assert precompact(home, "s4") is None  # never twice in a row
            stats = call(home, "status")["compaction"]["takeover"]
            assert stats["blocked_sessions"] == 0
            assert (stats["taken"], stats["passed"]) == (1, 3)  # auto, instructions, this
            assert "previous compaction" in stats["last_pass"]
            assert call(home, "status")["usage"]["total"]["calls"] == 0
        finally:
            assert stop_memd(proc) == 0, read_log(home)


@pytest.mark.parametrize(
    "config, notes, why",
    [
        ("compaction:\n  default_context_window: 40000\n", 0.7, "over the window"),
        ("compaction:\n  keep_max_tokens: 100\n", 0.2, "tokens behind"),
        ("", None, "no notes"),
    ],
    ids=["over-window", "stale-notes", "no-notes"],
)
def test_compact_is_let_through_when_a_fork_would_not_serve(
    tmp_path: Path, config: str, notes: float | None, why: str
) -> None:
    with fake_home(tmp_path) as home:
        (home.root / "memd.yaml").write_text(config)
        home.env["MEMD_CONFIG"] = str(home.root / "memd.yaml")
        target = install_session(home, BIG, "s4")
        target.write_bytes(on_a_gateway_model(target.read_bytes()))  # the config's window
        if notes is not None:
            seed_notes(home, "s4", BIG, notes)
        proc = start_memd(home)
        try:
            wait_ingested(home, "s4", target.stat().st_size)
            assert precompact(home, "s4") is None
            assert why in call(home, "status")["compaction"]["takeover"]["last_pass"]
            assert precompact(home, "nobody") is None
            assert forks(home) == []
            assert call(home, "status")["compaction"]["takeover"]["taken"] == 0
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_the_window_is_the_sessions_own_not_the_configs(tmp_path: Path) -> None:
    """Issue 38: the context is over the config's window, not over its model's (a Claude
    model of 200K): taken over, in the model's."""
    with fake_home(tmp_path) as home:
        (home.root / "memd.yaml").write_text("compaction:\n  default_context_window: 40000\n")
        home.env["MEMD_CONFIG"] = str(home.root / "memd.yaml")
        target = install_session(home, BIG, "s4")
        seed_notes(home, "s4", BIG, 0.7)
        proc = start_memd(home)
        try:
            wait_ingested(home, "s4", target.stat().st_size)
            row = call(home, "session", {"session": "s4"})
            assert row["context_window"] == 200_000 and row["context_tokens"] > 40_000
            assert row["window_source"].startswith("transcript: claude-")
            assert precompact(home, "s4") is not None and len(forks(home)) == 1
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_compact_is_let_through_when_the_record_cannot_be_written(tmp_path: Path) -> None:
    """Falls open: without a record, memd could block the same session twice, so it blocks
    nothing; the write failure shows in status."""
    with fake_home(tmp_path) as home:
        target = install_session(home, BIG, "s4")
        seed_notes(home, "s4", BIG, 0.7)
        (home.state_dir / "compaction-takeover.json").mkdir(parents=True)  # cannot be replaced
        proc = start_memd(home)
        try:
            wait_ingested(home, "s4", target.stat().st_size)
            assert precompact(home, "s4") is None
            takeover = call(home, "status")["compaction"]["takeover"]
            assert "takeover record" in takeover["last_pass"] and takeover["last_error"]
            assert forks(home) == []
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def concurrent_precompacts(home: Home, sid: str, count: int) -> list[str | None]:
    """``count`` real hook processes (``python -m memd_client.hook``), all started and
    waiting on stdin, then given one PreCompact each at once, as Claude Code runs every
    hook a compaction matches together. Their stdouts."""
    event = json.dumps({**MANUAL, "session_id": sid, "transcript_path": "", "cwd": "/p"})
    env = {**home.env, "MEMD_HOOK_TIMEOUT_MS": str(int(60_000 * load_stretch()))}
    with contextlib.ExitStack() as stack:
        hooks = [
            stack.enter_context(
                subprocess.Popen(
                    [sys.executable, "-m", "memd_client.hook"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=env,
                )
            )
            for _ in range(count)
        ]
        for hook_proc in hooks:
            assert hook_proc.stdin is not None
            hook_proc.stdin.write(event.encode())
        for hook_proc in hooks:
            assert hook_proc.stdin is not None
            hook_proc.stdin.close()
        outs = []
        for hook_proc in hooks:
            assert hook_proc.stdout is not None
            outs.append(hook_proc.stdout.read().decode().strip() or None)
            assert hook_proc.wait(timeout=120) == 0
    return outs


def test_concurrent_precompact_hooks_block_and_fork_once(tmp_path: Path) -> None:
    """Mark, then act: 8 PreCompact hooks of one /compact at once block it once, with one
    fork; every hook of the /compact after it lets it through, and the one after that is
    taken over once again (each round after a restart: the claims are forgotten, the counts
    are not)."""
    with fake_home(tmp_path) as home:
        target = install_session(home, BIG, "s4")
        seed_notes(home, "s4", BIG, 0.7)
        old = target.read_bytes()
        for round_, blocks_wanted in enumerate([1, 0, 1]):
            proc = start_memd(home)
            try:
                wait_ingested(home, "s4", len(old))
                outs = concurrent_precompacts(home, "s4", 8)
                blocks = [json.loads(o) for o in outs if o is not None]
                assert len(blocks) == blocks_wanted, (round_, outs)
                assert all(b["decision"] == "block" for b in blocks)
                assert len(forks(home)) == [1, 1, 2][round_], round_
                stats = call(home, "status")["compaction"]["takeover"]
                assert stats["taken"] == [1, 1, 2][round_]  # counted across restarts
                assert stats["blocked_sessions"] == blocks_wanted
            finally:
                assert stop_memd(proc) == 0, read_log(home)
        assert target.read_bytes() == old
