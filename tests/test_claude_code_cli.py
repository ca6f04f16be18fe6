"""memd beside the real Claude Code CLI 2.1.197 (issue 10), through ``claude -p``, ``-c`` and
``--resume`` with memd's hooks installed. Claude Code talks to a loopback Messages-API server
in its "real client" profile (streaming, ``role: "system"`` messages); memd's own requests go
to a second one in the strict profile."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from memd.memory.paths import memory_dir
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI, RecordedRequest
from memd.testing.loopback_replies import When
from memd_client import hook as hook_module
from memd_client.agents.claude_code import HOOKS as CLAUDE_HOOKS
from memd_client.hooks_install import hook_command, install_hooks
from tests.claude_cli import ClaudeCLI
from tests.daemon_harness import Home, call, fake_home, read_log, start_memd, stop_memd, wait_for

INDEX_LINE = "- [Deploy](deploy.md) — how deploys work"
DEPLOY_BODY = "Deploys go through scripts/bg-deploy.sh with a 10 minute canary."
NOTES_LINE = "Canary rollout of the billing service is half done"
DEPLOY = (
    "---\nname: Deploy\ndescription: how deploys work\nmetadata:\n  type: project\n---\n\n"
    + DEPLOY_BODY
    + "\n"
)


def setup(home: Home, memd_api: LoopbackAPI, settings: dict[str, Any]) -> Path:
    """A project with one memory, memd's hooks installed, memd's config; the project dir."""
    project = home.root / "proj"
    project.mkdir()
    user_settings = home.root / ".claude" / "settings.json"
    user_settings.parent.mkdir(parents=True, exist_ok=True)
    user_settings.write_text(json.dumps(settings))
    # The form memdctl install-hooks registers, run by the real CLI through its shell.
    install_hooks(user_settings, hook_command(sys.executable, hook_module.__file__), CLAUDE_HOOKS)
    mdir = memory_dir(home.projects, project)
    mdir.mkdir(parents=True)
    (mdir / "MEMORY.md").write_text(INDEX_LINE + "\n")
    (mdir / "deploy.md").write_text(DEPLOY)
    config = home.root / "memd.yaml"
    # memd's own notes runs stay out of these tests (Claude Code's prompt alone passes the
    # 10K init threshold): the notes the resume test expects are planted by the test itself.
    config.write_text(
        "memory:\n  extraction_quiet_s: 600\nsession_notes:\n  init_tokens: 100000000\n"
    )
    home.env.update(
        MEMD_CONFIG=str(config), ANTHROPIC_BASE_URL=memd_api.url, ANTHROPIC_API_KEY="test"
    )
    return project


def texts(request: RecordedRequest) -> str:
    """Everything a request puts before the model (system prompt and messages)."""
    return json.dumps(
        [request.body.get("system"), request.body.get("messages")], ensure_ascii=False
    )


def main_requests(api: LoopbackAPI, since: int) -> list[RecordedRequest]:
    return [
        r
        for r in api.requests[since:]
        if r.path == "/v1/messages" and isinstance(r.body, dict) and r.body.get("tools")
    ]


def run_claude(
    cli: ClaudeCLI, api: LoopbackAPI, home: Home, project: Path, *args: str
) -> list[RecordedRequest]:
    since = len(api.requests)
    done = cli.run(list(args), cwd=project, env=cli.env(home.env, api.url))
    assert done.returncode == 0, (done.stdout, done.stderr, read_log(home))
    assert "OK from stub" in done.stdout
    requests = main_requests(api, since)
    assert requests, [r.path for r in api.requests[since:]]
    return requests


def session_of(home: Home) -> str:
    (transcript,) = (p for p in home.projects.glob("*/*.jsonl"))
    return transcript.stem


def test_nothing_is_injected_twice_across_print_continue_and_resume(
    claude_cli: ClaudeCLI, claude_api: LoopbackAPI, memd_api: LoopbackAPI, tmp_path: Path
) -> None:
    with fake_home(tmp_path) as home:
        project = setup(home, memd_api, {})  # Claude Code's own auto memory: on (default)
        proc = start_memd(home)
        try:
            first = run_claude(
                claude_cli, claude_api, home, project, "-p", "how do we deploy this service?"
            )
            assert DEPLOY_BODY in texts(first[0])  # recalled on the first prompt
            sid = session_of(home)
            wait_for(lambda: call(home, "session", {"session": sid}), timeout=20, what="ingest")
            notes = home.projects / project_slug_of(home) / sid / "session-memory" / "summary.md"
            notes.parent.mkdir(parents=True)
            notes.write_text(f"# Current State\n{NOTES_LINE}\n")
            later = run_claude(
                claude_cli, claude_api, home, project, "-c", "-p", "and how do we deploy again?"
            )
            # A restarted daemon rebuilds what the session holds from its transcript.
            assert stop_memd(proc) == 0, read_log(home)
            proc = start_memd(home)
            later += run_claude(
                claude_cli,
                claude_api,
                home,
                project,
                "-p",
                "--resume",
                sid,
                "where is the deploy script?",
            )
            for request in first + later:
                text = texts(request)
                assert text.count(INDEX_LINE) <= 1, "the index twice"
                assert text.count(DEPLOY_BODY) <= 1, "a recalled memory twice"
                assert text.count(NOTES_LINE) <= 1, "the notes twice"
            assert NOTES_LINE in texts(later[-1])  # the resume notes reached the model
            facts = call(home, "session", {"session": sid})["claude_code"]
            assert facts["auto_memory"] and facts["version"] == "2.1.197"
            rows = call(home, "memories", {"cwd": str(project)})["memories"]
            assert [r["type"] for r in rows] == ["project"]  # metadata.type is typed
            # memd extracts beside Claude Code's own memory, what that memory did not write
            assert facts["memd_extraction"].startswith("on: beside Claude Code's auto memory")
        finally:
            assert stop_memd(proc) == 0, read_log(home)


def project_slug_of(home: Home) -> str:
    (folder,) = (p.name for p in home.projects.iterdir() if p.is_dir())
    return folder


def test_print_mode_stop_extracts_at_once_beside_claude_code_without_auto_memory(
    claude_cli: ClaudeCLI, claude_api: LoopbackAPI, memd_api: LoopbackAPI, tmp_path: Path
) -> None:
    extract_model = "claude-sonnet-4-6"
    memd_api.add_rule(When(model=extract_model), replies.text("Nothing to save."))
    with fake_home(tmp_path) as home:
        project = setup(home, memd_api, {"autoMemoryEnabled": False})
        proc = start_memd(home)
        try:
            started = time.monotonic()
            requests = run_claude(
                claude_cli, claude_api, home, project, "-p", "how do we deploy this service?"
            )
            text = texts(requests[0])
            assert text.count(INDEX_LINE) == 1 and text.count(DEPLOY_BODY) == 1

            def extracted() -> bool:
                return bool(call(home, "status")["memory"]["runs"].get("extracted"))

            wait_for(extracted, timeout=60, what="the Stop-triggered extraction")
            assert time.monotonic() - started < 300  # the quiet period is 600 s
            status = call(home, "status")
            assert status["memory"]["last_error"] is None and status["last_error"] is None
            # Memory extraction's requests; a session-notes run (Edit as its only tool) may
            # also start, since Claude Code's own prompt puts the context past the notes
            # threshold, and it uses the same model.
            (asked,) = (
                r
                for r in memd_api.requests
                if r.body["model"] == extract_model
                and [t["name"] for t in r.body.get("tools") or []] != ["Edit"]
            )
            system = "".join(block["text"] for block in asked.body["system"])
            assert "metadata:\n  type: user | feedback" in system  # the form 2.1.197 writes
        finally:
            assert stop_memd(proc) == 0, read_log(home)
