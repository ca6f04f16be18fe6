"""`reload` reloads (issue 23): after `memdctl reload` or SIGHUP, every feature that depends on
the config or the env file is on or off exactly as after a restart with the same files. The
real daemon, the real `memdctl`, the loopback Messages API in its own process."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import pytest

from memd.testing.loopback_process import LoopbackProcess
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
from tests.test_memdctl_e2e import write_env_file
from tests.test_notes_e2e import SOURCE, notes_requests, script

pytestmark = pytest.mark.slow

SLUG = "-home-user-reload"


def model_off(home: Home) -> bool:
    return "no API key" in str(call(home, "status")["llm"]["reason"])


def write_session(home: Home, session_id: str) -> Path:
    """A session written now, well over the notes threshold (10K tokens to start)."""
    path = home.projects / SLUG / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(SOURCE.read_bytes())
    return path


@pytest.mark.parametrize("how", ["memdctl", "SIGHUP"])
def test_a_key_added_then_reloaded_starts_notes_runs(tmp_path: Path, how: str) -> None:
    """Started without a key, then the key in the env file and a reload: `status` said the
    model was on, and no notes run ever started (0 model requests on a 77K-token session)."""
    with LoopbackProcess() as api, fake_home(tmp_path) as home:
        api.add_script(script())
        proc = start_memd(home)
        try:
            wait_for(lambda: model_off(home), timeout=20, what="the model to be off")
            write_env_file(home, f"ANTHROPIC_API_KEY=k\nANTHROPIC_BASE_URL={api.url}\n")
            if how == "memdctl":
                done = memdctl(home, "reload")
                assert done.returncode == 0, done.stdout + done.stderr
            else:
                proc.send_signal(signal.SIGHUP)
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="model on")
            write_session(home, "r1")
            wait_for(lambda: notes_requests(api) > 0, timeout=30, what="a notes run")
            row = call(home, "session", {"session": "r1"})
            assert row["notes"] is not None
        finally:
            assert stop_memd(proc) == 0, read_log(home)


MODEL_OFF = """\
session_notes:
  enabled: false
memory:
  auto_memory: false
dream:
  auto_dream: false
budget:
  tokens_per_hour: 1000
compaction:
  buffer_tokens: 20000
"""
MODEL_ON = """\
session_notes:
  init_tokens: 20000
privacy:
  ignore_projects: ["-nowhere-*"]
budget:
  tokens_per_day: 5000000
"""
# What differs between two processes whatever they do: the process, the clock, what this one
# happens to hold in memory.
VOLATILE = re.compile(
    r"daemon\.(pid|started_at|uptime_s|rss_bytes|gc|reloads|last_reload)\b"
    r"|(guard|usage)\.at$|pipeline\.last_progress_at$|ingest\.(in_memory|bytes_rehydrated)$"
    r"|memory\.archive\.(sweeps|last_sweep)$"  # a reload wakes a sweep: counts of this run
)


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b": 1}`` for ``{"a": {"b": 1}}`` (lists as ``a.0``, ``a.1``)."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in items:
        out.update(flat(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


def comparable(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flat(status).items() if not VOLATILE.match(k)}


def settle(home: Home) -> dict[str, Any]:
    """``status`` once the model client is opened and the session is read."""

    def ready() -> dict[str, Any] | None:
        status: dict[str, Any] = call(home, "status")
        loading = "starting" in str(status["llm"]["reason"])
        return None if loading or status["ingest"]["parsed"] < 1 else status

    found: dict[str, Any] = wait_for(ready, timeout=30, what="the model client and the session")
    return found


@pytest.mark.parametrize("direction", ["on", "off"])
def test_status_after_a_reload_is_status_after_a_restart(tmp_path: Path, direction: str) -> None:
    """Every feature that depends on the config or the env file is on or off as after a
    restart with the same files: the two `status` answers match but for the process's own
    figures."""
    config = tmp_path / ".config" / "memd" / "config.yaml"
    config.parent.mkdir(parents=True)
    with LoopbackProcess() as api, fake_home(tmp_path) as home:
        env_on = f"ANTHROPIC_API_KEY=k\nANTHROPIC_BASE_URL={api.url}\n"
        before, after = (MODEL_OFF, MODEL_ON) if direction == "on" else (MODEL_ON, MODEL_OFF)
        config.write_text(before)
        write_env_file(home, env_on if direction == "off" else "")
        write_session(home, "s1")
        proc = start_memd(home)
        try:
            settle(home)
            config.write_text(after)
            write_env_file(home, env_on if direction == "on" else "")
            proc.send_signal(signal.SIGHUP)
            wait_for(lambda: call(home, "status")["daemon"]["reloads"], timeout=20, what="reload")
            reloaded = settle(home)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        proc = start_memd(home)
        try:
            restarted = settle(home)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
    a, b = comparable(reloaded), comparable(restarted)
    differing = {
        k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)
    }
    assert differing == {}, "after the reload vs after a restart"


def test_a_reload_says_which_changes_wait_for_a_restart(tmp_path: Path) -> None:
    """The watcher is started with its timing: a reload that changes it said `reloaded` as if
    it applied; it waits for a restart, and says so beside the paths and IPC limits."""
    config = tmp_path / ".config" / "memd" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("transcripts:\n  poll_interval_ms: 1000\n")
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            config.write_text("transcripts:\n  poll_interval_ms: 250\n")
            done = memdctl(home, "reload")
            assert done.returncode == 0, done.stdout + done.stderr
            assert "after a restart: transcripts.poll_interval_ms" in done.stdout
            last = call(home, "status")["daemon"]["last_reload"]
            assert last["restart_needed"] == ["transcripts.poll_interval_ms"]
        finally:
            assert stop_memd(proc) == 0, read_log(home)
