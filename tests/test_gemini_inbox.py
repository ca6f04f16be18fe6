"""Propose, don't write (issue 35, item 5): memd's new memories from a Gemini CLI session go
to Gemini's memory inbox (``agents.gemini.propose_memories``) instead of memd's memory.

The patch: one new file per memory, absolute paths, a later proposal of the same memory
replacing the older, one for a file that exists already dropped (Gemini applies a patch whole
or not at all), hostile names made plain. The run: the extraction's files are read, memd's
memory dir rolled back, the files proposed. End to end, with the real Gemini 0.61.0: a fact
stated in a real ``gemini -p`` is extracted by memd at its turn end, and is not in memd's
memory but in Gemini's inbox, which Gemini's own inbox code (its bundle's
``listInboxMemoryPatches`` and ``applyInboxMemoryPatch``, what ``/memory inbox`` calls) lists
and applies."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from memd.config import load_config
from memd.memory.extract import take_snapshot
from memd.memory.paths import memory_dir
from memd.memory.propose import AgentFiles, take_back
from memd.sources.gemini import ROOM
from memd.sources.gemini.inbox import PATCH, file_name, hunks_of, merged
from memd.state import SessionState
from memd.testing.loopback_agents import LoopbackAgentAPI
from memd.testing.loopback_process import LoopbackProcess
from tests.daemon_harness import call, fake_home, memdctl, read_log, start_memd, stop_memd, wait_for
from tests.other_cli import AgentCLI
from tests.test_agents_real_memory import repository, turn_ends_only
from tests.test_source_memory_e2e import FACT, LEARNT

FOLDER = "/home/u/.gemini/tmp/proj/memory"


def test_one_new_file_per_memory_the_latest_proposal_wins() -> None:
    first = merged(None, FOLDER, [("deploy.md", "one\r\ntwo\n")], lambda name: False)
    assert first == (
        f"--- /dev/null\n+++ {FOLDER}/memd-deploy.md\n@@ -0,0 +1,2 @@\n+one\n+two\n".encode()
    )
    again = merged(first, FOLDER, [("deploy.md", "three"), ("a/B c.md", "x")], lambda n: False)
    assert again is not None
    assert list(hunks_of(again)) == [f"{FOLDER}/memd-deploy.md", f"{FOLDER}/memd-b-c.md"]
    assert b"+three\n" in again and b"+one" not in again
    assert merged(again, FOLDER, [("deploy.md", "three")], lambda n: False) is None
    taken = merged(again, FOLDER, [], lambda name: name == "memd-deploy.md")
    assert taken is not None and list(hunks_of(taken)) == [f"{FOLDER}/memd-b-c.md"]
    assert merged(taken, FOLDER, [], lambda name: True) == b""


def test_hostile_names_become_plain_file_names() -> None:
    for name in ("../../x.md", "..md", "a\nb.md", "ünï.md", "-.md", "x" * 300 + ".md"):
        made = file_name(name)
        assert re.fullmatch(r"memd-[a-z0-9_-]{1,80}\.md", made), made


def test_a_run_is_taken_back_and_proposed(tmp_path: Path) -> None:
    memories = tmp_path / "memory"
    memories.mkdir()
    (memories / "MEMORY.md").write_text("- [old](old.md)\n")
    before = take_snapshot(memories)
    (memories / "MEMORY.md").write_text("- [old](old.md)\n- [deploy](deploy.md)\n")
    (memories / "deploy.md").write_text(LEARNT)
    asked: list[tuple[str, list[tuple[str, str]]]] = []

    def propose(cwd: str, found: object) -> str:
        asked.append((cwd, list(found)))  # type: ignore[call-overload]
        return "proposed"

    touched = [str(memories / "deploy.md"), str(memories / "MEMORY.md")]
    assert take_back(memories, before, touched, propose, "/work/p") == "proposed"
    assert asked == [("/work/p", [("deploy.md", LEARNT)])]
    assert sorted(p.name for p in memories.iterdir()) == ["MEMORY.md"]
    assert (memories / "MEMORY.md").read_text() == "- [old](old.md)\n"


def test_proposals_only_when_asked_and_only_where_the_agent_has_an_inbox(
    tmp_path: Path,
) -> None:
    state = SessionState(session_id="s", project="p", agent="gemini", path="/x", cwd="/p")
    env = {"HOME": str(tmp_path)}
    off = load_config(env=env)
    on = load_config(overrides={"agents.gemini.propose_memories": "true"}, env=env)
    assert AgentFiles([ROOM], lambda s: ROOM, lambda: off).propose_for(state) is None
    assert AgentFiles([ROOM], lambda s: ROOM, lambda: on).propose_for(state) is not None
    assert AgentFiles([ROOM], lambda s: None, lambda: on).propose_for(state) is None


# ---------------------------------------------------------------------------------------------
# The real CLI


def inbox_code(cli: AgentCLI) -> Path:
    """The module of Gemini's own bundle, reached from its entry point, that holds the
    inbox's functions."""
    bundle = cli.command.resolve().parent
    seen, todo = set(), ["gemini.js"]
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        text = (bundle / name).read_text()
        if "listInboxMemoryPatches," in text and "applyInboxMemoryPatch," in text:
            return bundle / name
        todo += re.findall(r'from "\./([\w-]+\.js)"', text)
        todo += re.findall(r'import\("\./([\w-]+\.js)"\)', text)
    raise AssertionError("no inbox code in Gemini's bundle")


NODE_INBOX = """
const inbox = await import(process.argv[1]);
const config = { storage: { getProjectMemoryTempDir: () => process.argv[2] } };
const listed = await inbox.listInboxMemoryPatches(config);
const applied = await inbox.applyInboxMemoryPatch(config, "private", "private");
console.log(JSON.stringify({ listed, applied }));
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_real_gemini_session_memories_wait_in_its_inbox(
    gemini_cli: AgentCLI, tmp_path: Path
) -> None:
    with (
        fake_home(tmp_path) as home,
        LoopbackProcess() as memd_api,
        LoopbackAgentAPI("gemini", text="Understood: `make ship`.") as gemini_api,
    ):
        turn_ends_only(home, memd_api)  # memd's model writes the fact when it extracts
        config = home.root / "memd.yaml"
        config.write_text(config.read_text() + "agents:\n  gemini:\n    propose_memories: true\n")
        repo = repository(home)
        proc = start_memd(home)
        try:
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=30, what="the model")
            assert memdctl(home, "install-hooks", "--agent", "gemini").returncode == 0
            env = gemini_cli.env(home.env, gemini_api.url)
            done = gemini_cli.run(
                gemini_cli.prompt_args(f"Note for later: {FACT}"), cwd=repo, env=env
            )
            assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
            tmp = home.root / ".gemini" / "tmp"
            wait_for(lambda: any(tmp.glob(f"*/memory/{PATCH}")), timeout=60, what="the proposal")
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        assert not (memory_dir(home.projects, repo) / "deploy_command.md").exists()
        (patch,) = tmp.glob(f"*/memory/{PATCH}")
        folder = patch.parents[2]
        args = [str(inbox_code(gemini_cli)), str(folder)]
        run = subprocess.run(
            ["node", "--input-type=module", "-e", NODE_INBOX, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        seen = json.loads(run.stdout.strip().splitlines()[-1])
        (kind,) = seen["listed"]
        made = folder / "memd-deploy_command.md"
        assert [e["targetPath"] for e in kind["entries"]] == [str(made)]
        assert seen["applied"]["success"], seen["applied"]
        assert made.read_text().strip() == LEARNT.strip()
        assert str(made) in (folder / "MEMORY.md").read_text()  # Gemini's own pointer
