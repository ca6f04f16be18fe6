"""Issue 34's acceptance for the agents' own CLIs, on the real daemon: with no Anthropic, OpenAI
or Gemini key anywhere (memd's environment holds none; each CLI has its own login), each real
CLI as memd's only model (``claude -p``, ``codex exec``, ``gemini -p``, itself driven against
the loopback server) keeps real Claude Code, Codex and Gemini sessions' notes and memories,
and ``compact --fork`` serves from those notes with no call; a dream on those memories is
one answer through the CLI. The CLI's own call leaves no session memd follows and runs none
of the user's hooks; its tokens and time reach the ledger.

Then the faults, each ending in a state ``status`` shows, nothing changed wrongly: the CLI
exits non-zero (the server's 500), hangs (memd's deadline kills it with its process group),
prints JSON cut short, and answers with a write outside the memory dir.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import Reply, system_text
from memd.testing.weak_model import WeakModel
from tests.cli_backend_support import AGENTS, CLIHome, installed, logged_in, login_credential
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
from tests.other_cli import NO_EGRESS
from tests.session_support import TranscriptBuilder, work_session, write_work_session
from tests.test_backends_e2e import (
    TUNING,
    forked_from_notes,
    memories,
    memory_of,
    notes_saying,
    real_sessions,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FAULTY = "7e6d5c4b-3a29-4817-8f6e-5d4c3b2a1908"  # a session written for the faults
TIMEOUT_S = 60  # a call, the CLI's start included (slow on a busy machine)
HANG_S = 12  # the deadline while the server hangs


@dataclass
class Scripted:
    """The weak model, with faults queued for the next notes or memory request."""

    weak: WeakModel = field(default_factory=lambda: WeakModel(fault_every=0))
    notes: list[Reply] = field(default_factory=list)
    memory: list[Reply] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        system = system_text(body)
        with self.lock:
            if "complete, updated notes file" in system and self.notes:
                return self.notes.pop(0)
            if "answer with a list of operations" in system and self.memory:
                return self.memory.pop(0)
        return self.weak(body)


def model_calls(home: Home) -> list[int]:
    """Processes working in memd's folder for its CLI calls."""
    root = str(home.runtime)
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd").startswith(root):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def extract(home: Home, grown: int) -> dict[str, Any]:
    """The faulty session grown by one turn (so there is something to note), its notes run
    now; the session's notes status once that run has ended (the CLI's own deadline bounds
    the wait)."""
    path = home.projects / "-work-project" / f"{FAULTY}.jsonl"
    builder = TranscriptBuilder(FAULTY, count=100 * grown)
    work_session(builder, turns=1, context=20_000 + 1_000 * grown)
    with path.open("ab") as out:
        out.write(builder.jsonl())
    with home.client(timeout=3 * TIMEOUT_S) as client:
        done: dict[str, Any] = client.call("extract", {"session": FAULTY, "wait": 2 * TIMEOUT_S})
    return done


def fails_saying(home: Home, grown: int, words: str) -> dict[str, Any]:
    """The faulty session's notes run now (:func:`extract`) fails saying ``words``, in the
    session's own status and in the notes job's row of ``status``; that row. Checked once
    the run has ended: whatever else it says, it says it at once."""
    done = extract(home, grown)
    assert done["phase"] != "running" and words in str(done["last_error"]), done
    row: dict[str, Any] = guard(home)["kinds"].get("session_notes") or {}
    assert words in str(row.get("last_error")), row
    return row


def first_notes_ended(home: Home) -> None:
    """The faulty session's first notes run has ended (its notes file is made as it starts:
    a fault queued before it ends could be its answer)."""
    wait_for(
        partial(notes_saying, home, FAULTY, "Step "), timeout=90, what="the faulty session's notes"
    )
    wait_for(
        lambda: (
            (s := call(home, "notes", {"session": FAULTY})["status"])["extractions"] >= 1
            and s["phase"] == "idle"
        ),
        timeout=30,
        what="the faulty session's first notes run to end",
    )


def guard(home: Home) -> dict[str, Any]:
    status: dict[str, Any] = call(home, "status")["guard"]
    return status


def keeps_notes_and_memories(cli: CLIHome, home: Home, api: LoopbackAPI, repo: Path) -> None:
    llm = wait_for(
        lambda: (s := call(home, "status")["llm"])["enabled"] and s, timeout=30, what="the model"
    )
    notes = llm["jobs"]["session_notes"]
    assert (notes["backend"], notes["protocol"]) == (cli.backend, "whole"), llm
    assert llm["jobs"]["memory_extract"]["backend"] == cli.backend
    assert "llm.models.recall names it" in str(llm["jobs"]["recall"]["reason"])
    assert (llm["jobs"]["dream"]["backend"], llm["jobs"]["dream"]["protocol"]) == (
        cli.backend,
        "whole",
    )
    assert llm["clis"][cli.backend]["on"] and llm["clis"][cli.backend]["login"], llm["clis"]
    ids = real_sessions(home.root, home, repo)  # written while memd runs, as agents do
    for agent, session in ids.items():
        wait_for(
            partial(notes_saying, home, session, "Step "),
            timeout=90,
            what=f"the {agent} session's notes through {cli.backend}",
        )
        where = wait_for(partial(memory_of, home, session), timeout=30, what="its cwd")
        wait_for(partial(memories, where), timeout=90, what=f"{agent}'s memories")
    fork = forked_from_notes(home, ids["claude"])
    assert fork["forked"] and fork["api_calls"] == 0, fork
    dreamt = memdctl(home, "dream", str(repo), "--force", "--wait", "--json", timeout=TIMEOUT_S * 2)
    assert dreamt.returncode == 0, dreamt.stdout + dreamt.stderr  # one answer, through the CLI
    run = json.loads(dreamt.stdout)
    assert run["state"] == "completed" and run["turns"] == 1, run
    spent = call(home, "status")["usage"]["by_backend"][cli.backend]
    assert spent["calls"] >= 5 and spent["billed"] > 0 and spent["ms"] > 0, spent
    posts = [r for r in api.requests if r.method == "POST"]
    assert len(posts) >= spent["calls"]
    assert all(login_credential(cli.agent) in json.dumps(dict(r.headers)) for r in posts)
    assert [c.name for c in cli.canaries if c.exists()] == []
    followed = [s for s in call(home, "sessions", {}) if "model-calls" in str(s.get("cwd"))]
    assert all(s.get("ignored") for s in followed), followed
    with home.client(timeout=90) as client:  # the CLI's start: slow on a busy machine
        probe = client.call("probe_api")
    assert probe["ok"] and "logged in" in probe["detail"], probe
    shown = memdctl(home, "status").stdout
    assert f"agent CLI {cli.backend}: {cli.command}, logged in" in shown and "; on" in shown, shown


def ends_each_fault_in_a_state_status_shows(
    cli: CLIHome, home: Home, script: Scripted, config: Path, tmp_path: Path
) -> None:
    """Each fault, one after the other, on a session written for them."""
    folder = home.projects / "-work-project"
    outside = tmp_path / "outside.md"
    write = {"op": "write", "path": str(outside), "content": "written by the model"}
    script.memory.append(replies.text(json.dumps({"operations": [write]})))
    write_work_session(folder, FAULTY, turns=3)
    wait_for(
        lambda: guard(home)["malformed_answers"].get("memory_extract"),
        timeout=90,
        what="the answer that writes outside the memory dir, refused",
    )
    assert not outside.exists() and not (folder / "memory" / "outside.md").exists()
    first_notes_ended(home)
    notes = folder / FAULTY / "session-memory" / "summary.md"
    before = notes.read_text()

    script.notes.append(replies.server_error(500))
    failed = fails_saying(home, 1, cli.agent)  # in the CLI's words (Codex hides the 500)
    assert failed["total_failures"] >= 1 and not script.notes, failed

    config.write_text(config.read_text().replace(f"timeout_s: {TIMEOUT_S}", f"timeout_s: {HANG_S}"))
    assert "reloaded" in json.dumps(call(home, "reload"))
    script.notes.append(replies.Message(({"type": "text", "text": "late"},), delay_s=HANG_S + 30))
    fails_saying(home, 2, f"within {HANG_S:g} s")
    assert not script.notes, "the CLI asked the hung server before the deadline"
    wait_for(
        lambda: model_calls(home) == [], timeout=10, what="the hung CLI's process group killed"
    )

    wrapper = tmp_path / f"{cli.agent}-cut"
    wrapper.write_text(f'#!/bin/sh\n"{cli.command}" "$@" | head -c 80\n')
    wrapper.chmod(0o700)
    config.write_text(
        config.read_text()
        .replace(str(cli.command), str(wrapper))
        .replace(f"timeout_s: {HANG_S}", f"timeout_s: {TIMEOUT_S}")
    )
    assert "reloaded" in json.dumps(call(home, "reload"))
    fails_saying(home, 3, "MalformedAnswer")
    assert guard(home)["malformed_answers"].get("session_notes", 0) >= 1
    after = notes.read_text()  # no fault took anything from the notes, nor put its text in
    assert set(before.splitlines()) <= set(after.splitlines()) and "late" not in after


@pytest.mark.parametrize("agent", AGENTS)
def test_an_agents_own_cli_as_memds_model_keeps_every_agents_notes_and_memories(
    agent: str, tmp_path: Path
) -> None:
    command = installed(agent)
    if command is None:
        pytest.skip(f"npm is not installed: cannot install the {agent} CLI")
    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    script = Scripted()
    with LoopbackAPI(profile="real_client", context_limit=1_000_000) as api:
        api.set_handler(script)
        cli = logged_in(agent, command, tmp_path)
        config = tmp_path / "memd.yaml"
        config.write_text(
            cli.config(api, timeout_s=str(TIMEOUT_S))
            + "budget:\n  backoff_initial_s: 0.01\n  backoff_max_s: 0.05\n"
        )
        with fake_home(
            tmp_path, CLAUDE_CODE_DISABLE_AUTO_MEMORY="1", MEMD_CONFIG=str(config), **NO_EGRESS
        ) as home:
            assert not {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"} & set(home.env)
            proc = start_memd(home, *TUNING)
            try:
                keeps_notes_and_memories(cli, home, api, repo)
                ends_each_fault_in_a_state_status_shows(cli, home, script, config, tmp_path)
            except AssertionError as failed:
                failed.add_note(f"memd's log, its end:\n{read_log(home)}")
                raise
            finally:
                assert stop_memd(proc) == 0, read_log(home)
