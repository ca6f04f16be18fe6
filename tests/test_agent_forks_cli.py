"""Compaction with zero model calls in the other agents (issue 35, item 4), with each real CLI
pinned (tests/other_cli.py) against its loopback model server: a session of a few real
turns gets notes as an extraction leaves them, ``memdctl compact --fork`` writes a new
session in the agent's own format and place (no model call), and the CLI resumes it by the
id memd printed: its first request carries the notes exactly once (memd's hooks installed,
so the hook sees the fork already holds them), the turns kept after them and the new prompt
last, and not the turns the notes stand for.

One test per agent (each costs a few real CLI runs); what a fork holds, turn by turn and for
every sample, is proved without the CLIs (tests/test_codex_fork.py, tests/test_gemini_fork.py).
Gemini CLI takes ~4 s a run (node's start), so its test is the slower (~18 s)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from memd.compaction.service import messages_of
from memd.memory.paths import project_slug
from memd.session.notes import notes_path
from memd.session.store import ExtractionRecord
from memd.sources.codex.reader import CodexReader
from memd.sources.gemini.reader import GeminiReader
from memd.testing.loopback_agents import AgentRequest, LoopbackAgentAPI
from memd.transcript.conversation import Conversation
from memd.transcript.tail import TailPosition, read_appended
from tests.daemon_harness import Home, fake_home, read_log, start_memd, stop_memd, wait_for
from tests.daemon_harness import memdctl as run_memdctl
from tests.other_cli import AgentCLI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NOTES_LINE = "Half of the billing canary rollout is done; next: widen it to eu-west"
PROMPTS = [f"step {k}: tell me about part {k} of the rollout plan" for k in range(3)]
CONFIG = (
    "memory:\n  extraction_quiet_s: 600\n"
    "session_notes:\n  init_tokens: 100000000\n  update_tokens: 100000000\n"
    "compaction:\n  keep_min_tokens: 10\n  keep_min_text_messages: 1\n"
)


def memdctl(home: Home, *args: str) -> dict[str, Any]:
    done = run_memdctl(home, "--json", *args)
    assert done.returncode == 0, (done.stdout, done.stderr, read_log(home))
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def ran(cli: AgentCLI, args: Sequence[str], project: Path, env: dict[str, str]) -> None:
    done: subprocess.CompletedProcess[str] = cli.run(args, cwd=project, env=env)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])


def conversation(path: Path, reader: Callable[[str, int], Any]) -> Conversation:
    got = read_appended(path, TailPosition(0, 0, 0), max_bytes=1 << 30)
    read = reader(str(path), got.position.inode)
    read.feed(zip(got.offsets, got.lines, strict=True))
    conv: Conversation = read.conversation
    return conv


def plant_notes(home: Home, sid: str, project: Path, conv: Conversation, covered: int) -> None:
    """Notes covering the session's first ``covered`` prompts, as an extraction leaves them."""
    msgs = messages_of(conv)
    asked = [i for i, m in enumerate(msgs) if any(p in str(m.content) for p in PROMPTS)]
    anchor = msgs[asked[covered] - 1].uuid
    slug = project_slug(str(project))
    notes = notes_path(home.projects, slug, sid)
    notes.parent.mkdir(parents=True)
    notes.write_text(f"# Current State\n{NOTES_LINE}\n")
    record = ExtractionRecord(
        sid, slug, last_summarized_id=anchor, covered_id=anchor, tokens_at_extraction=1
    )
    records = home.state_dir / "session-notes"
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{sid}.json").write_text(json.dumps(record.to_json()))


def gemini_reader(project: Path) -> Callable[[str, int], GeminiReader]:
    return lambda path, inode: GeminiReader(path, inode, str(project), None)


def ingested(home: Home, sid: str, path: Path) -> Callable[[], bool]:
    size = path.stat().st_size
    return lambda: bool(memdctl(home, "session", sid)["offset"] == size)


def fork_and_resume(
    home: Home, sid: str, resume: Callable[[str], None], requests: Callable[[], list[Any]]
) -> tuple[dict[str, Any], Any]:
    """``compact --fork`` of ``sid`` once memd has read the fork, then the CLI's resume of it:
    the fork's result and the first request the CLI sent."""
    fork = memdctl(home, "compact", sid, "--fork")
    assert fork["forked"] and fork["api_calls"] == 0, fork
    wait_for(ingested(home, fork["session"], Path(fork["path"])), timeout=20, what="the fork")
    since = len(requests())
    resume(fork["session"])
    return fork, requests()[since]


def codex_compact(cli: AgentCLI, project: Path, env: dict[str, str], sid: str) -> list[Any]:
    """``/compact`` of thread ``sid`` as the real Codex runs it, through its app server's
    ``thread/compact/start`` (what the TUI's ``/compact`` sends): the server's messages until
    that turn completes."""
    server = subprocess.Popen(
        [str(cli.command), "app-server"],
        cwd=project,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    calls = [
        ("initialize", {"clientInfo": {"name": "memd-test", "version": "0"}}),
        ("thread/resume", {"threadId": sid}),
        ("thread/compact/start", {"threadId": sid}),
    ]
    seen: list[Any] = []
    with server as proc:
        assert proc.stdin is not None and proc.stdout is not None
        for n, (method, params) in enumerate(calls, 1):
            proc.stdin.write(
                json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n"
            )
            proc.stdin.flush()
            if n == 1:
                proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "initialized"}) + "\n")
            while not seen or seen[-1].get("id") != n:  # its answer
                seen.append(json.loads(proc.stdout.readline()))
        while seen[-1].get("method") != "turn/completed":
            seen.append(json.loads(proc.stdout.readline()))
        proc.kill()
    return seen


def test_codex_resumes_memds_fork_with_the_notes_once(codex_cli: AgentCLI, tmp_path: Path) -> None:
    cli = codex_cli
    with (
        fake_home(tmp_path) as home,
        LoopbackAgentAPI("responses", text="Noted, carrying on.") as api,
    ):
        project = home.root / "proj"
        project.mkdir()
        (home.root / "memd.yaml").write_text(CONFIG)
        home.env["MEMD_CONFIG"] = str(home.root / "memd.yaml")
        env = cli.env(home.env, api.url)
        ran(cli, cli.prompt_args(PROMPTS[0]), project, env)
        (rollout,) = (home.root / ".codex" / "sessions").rglob("rollout-*.jsonl")
        sid = rollout.stem[-36:]
        for prompt in PROMPTS[1:]:
            ran(cli, ["exec", "--skip-git-repo-check", "resume", sid, prompt], project, env)
        plant_notes(home, sid, project, conversation(rollout, CodexReader), covered=1)
        proc = start_memd(home)
        try:
            done = run_memdctl(home, "install-hooks", "--agent", "codex")
            assert done.returncode == 0, done.stderr
            wait_for(ingested(home, sid, rollout), timeout=20, what="the session")

            def resume(new: str) -> None:
                args = ["exec", "--skip-git-repo-check", "resume", new, "what next?"]
                ran(cli, args, project, env)

            def requests() -> list[AgentRequest]:
                return [r for r in api.requests if r.path.endswith("/responses")]

            fork, first = fork_and_resume(home, sid, resume, requests)
            assert fork["resume"] == f"codex resume {fork['session']}"
            assert Path(fork["path"]).parent == rollout.parent
            # Everything before the model (its hooks' developer messages too): the notes once.
            everything = json.dumps(first.body, ensure_ascii=False)
            assert everything.count(NOTES_LINE) == 1, everything[-3000:]
            inputs = [i for i in first.body["input"] if i.get("role") in ("user", "assistant")]
            said = json.dumps(inputs, ensure_ascii=False)
            assert PROMPTS[0] not in said  # the notes stand for it
            assert (
                PROMPTS[1] in said and PROMPTS[2] in said and "what next?" in json.dumps(inputs[-1])
            )
            assert json.dumps(inputs[0]).count(NOTES_LINE) == 1  # the notes come first
            # /compact taken over: memd forks the session in Codex's PreCompact hook, and
            # Codex stops its compaction (no model call) with the line to go on with.
            done = run_memdctl(home, "install-hooks", "--agent", "codex", "--compact-takeover")
            assert done.returncode == 0, done.stderr
            known = set(rollout.parent.glob("rollout-*.jsonl"))
            since = len(requests())
            seen = codex_compact(cli, project, env, sid)
            assert seen[-1]["params"]["turn"]["status"] == "interrupted", seen[-1]
            assert requests()[since:] == []  # no compaction call
            (taken,) = set(rollout.parent.glob("rollout-*.jsonl")) - known
            (hook,) = [m for m in seen if m.get("method") == "hook/completed"]
            assert hook["params"]["run"]["status"] == "stopped", hook
            assert f"codex resume {taken.stem[-36:]}" in json.dumps(
                hook["params"]["run"]["entries"]
            )
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def test_gemini_resumes_memds_fork_with_the_notes_once(
    gemini_cli: AgentCLI, tmp_path: Path
) -> None:
    cli = gemini_cli
    with (
        fake_home(tmp_path) as home,
        LoopbackAgentAPI("gemini", text="Noted, carrying on.") as api,
    ):
        project = home.root / "proj"
        project.mkdir()
        (home.root / "memd.yaml").write_text(CONFIG)
        home.env["MEMD_CONFIG"] = str(home.root / "memd.yaml")
        env = cli.env(home.env, api.url)
        first = cli.run(cli.prompt_args(PROMPTS[0]), cwd=project, env=env)
        assert first.returncode == 0, (first.stdout[-2000:], first.stderr[-2000:])
        sid = json.loads(first.stdout)["session_id"]
        for prompt in PROMPTS[1:]:
            ran(cli, ["--resume", sid, *cli.prompt_args(prompt)], project, env)
        chats = list((home.root / ".gemini" / "tmp").glob(f"*/chats/session-*-{sid[:8]}.jsonl"))
        chat = max(chats, key=lambda p: p.stat().st_size)
        plant_notes(home, sid, project, conversation(chat, gemini_reader(project)), covered=1)
        proc = start_memd(home)
        try:
            done = run_memdctl(home, "install-hooks", "--agent", "gemini")
            assert done.returncode == 0, done.stderr
            wait_for(ingested(home, sid, chat), timeout=20, what="the session")

            def resume(new: str) -> None:
                ran(cli, ["--resume", new, *cli.prompt_args("what next?")], project, env)

            def requests() -> list[AgentRequest]:
                calls = (":generateContent", ":streamGenerateContent")
                return [r for r in api.requests if r.path.endswith(calls)]

            fork, first_request = fork_and_resume(home, sid, resume, requests)
            assert fork["resume"] == f"gemini --resume {fork['session']}"
            assert Path(fork["path"]).parent == chat.parent
            everything = json.dumps(first_request.body, ensure_ascii=False)
            assert everything.count(NOTES_LINE) == 1, everything[-3000:]
            contents = first_request.body["contents"]
            said = json.dumps(contents, ensure_ascii=False)
            assert PROMPTS[0] not in said  # the notes stand for it
            assert (
                PROMPTS[1] in said
                and PROMPTS[2] in said
                and "what next?" in json.dumps(contents[-1])
            )
        finally:
            assert stop_memd(proc) == 0, read_log(home)
