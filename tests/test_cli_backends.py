"""The agents' own CLIs as memd's model (issue 34), each room against its real CLI at the
pinned version (Claude Code, Codex, Gemini CLI), the CLI's model at a loopback server:

- the CLI answers on its own login, and the usage it reports is what the server billed;
- memd stays the sandbox: the request offers no tool that can write or run, a tool the model
  calls anyway does nothing, the user's hooks, MCP servers and ``notify`` do not run, no
  transcript of the call is left where memd's watcher looks, memd's own keys never reach the
  CLI;
- not logged in, it is refused with the way to log in, and memd's stop at shutdown ends a call
  in flight with the CLI's whole process group (the other faults, on the real daemon:
  ``tests/test_cli_backends_e2e.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.config import parse_config_text
from memd.errors import AuthenticationFailed, LLMError, Unavailable
from memd.llm.backends import BACKENDS, open_backend
from memd.llm.cli_run import CLIBackend
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from tests.claude_cli import CLAUDE_CODE_VERSION, NEWEST_VERSION
from tests.cli_backend_support import (
    AGENTS,
    MEMD_SECRET,
    CLIHome,
    daemon_env,
    installed,
    logged_in,
    login_credential,
)
from tests.daemon_harness import wait_for

pytestmark = pytest.mark.slow

SYSTEM = "You write the complete, updated notes file of a coding session (memd's test)."
ANSWER = "<notes>\n# Current State\nAll good.\n</notes>"
RUNS_OR_WRITES = {
    "shell",
    "exec_command",
    "local_shell",
    "apply_patch",
    "write_stdin",
    "shell_command",
}
PATCH = "*** Begin Patch\n*** Add File: {path}\n+written by the model\n*** End Patch\n"


@pytest.fixture(params=AGENTS)
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> CLIHome:
    """Each CLI at its pin (Claude Code: the newest; ``claude@<version>`` another)."""
    agent, _, version = str(request.param).partition("@")
    command = installed(agent, version or NEWEST_VERSION)
    if command is None:
        pytest.skip(f"npm is not installed: cannot install the {agent} CLI")
    home = tmp_path / "home"
    home.mkdir()
    return logged_in(agent, command, home, version or NEWEST_VERSION)


@pytest.fixture
def runtime() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="memd-cli-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def opened(cli: CLIHome, api: LoopbackAPI, runtime: Path, **extra: str) -> CLIBackend:
    config = parse_config_text(cli.config(api, **extra)).llm
    env = {"HOME": str(cli.home), "PATH": os.environ["PATH"], "XDG_RUNTIME_DIR": str(runtime)}
    backend = open_backend(cli.backend, config, {**env, **daemon_env()})
    assert isinstance(backend, CLIBackend), backend
    return backend


def ask(backend: CLIBackend, model: str = "", text: str = "Update the notes.") -> Any:
    named = model or BACKENDS[backend.name].models["session_notes"]

    async def call() -> Any:
        return await backend.create_message(
            model=named,
            system=SYSTEM,
            messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
            max_tokens=2_000,
        )

    return anyio.run(call)


def harmful_calls(cli: CLIHome, target: Path) -> replies.Message:
    """A model that tries to write ``target`` and run a command, with each tool of the CLI."""
    touch = f"touch {target}.ran"
    if cli.agent == "claude":
        calls = [
            ("Write", {"file_path": str(target), "content": "x"}),
            ("Bash", {"command": touch}),
        ]
    elif cli.agent == "codex":
        calls = [
            ("exec_command", {"cmd": touch}),
            ("apply_patch", {"__freeform__": PATCH.format(path=target)}),
            ("exec", {"__freeform__": f"await tools.exec_command({{cmd: {json.dumps(touch)}}})"}),
        ]
    else:
        calls = [
            ("write_file", {"file_path": str(target), "content": "x"}),
            ("run_shell_command", {"command": touch}),
        ]
    reply = replies.tool_uses(calls)
    assert isinstance(reply, replies.Message)
    return reply


def offered_tools(agent: str, body: Any) -> list[str]:
    """The names of the tools a request offers the model."""
    if agent == "claude":
        return [t.get("name") for t in body.get("tools") or []]
    if agent == "gemini":
        return [
            d.get("name")
            for t in body.get("tools") or []
            for d in t.get("functionDeclarations") or []
        ]
    tools = list(body.get("tools") or [])
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            tools += item.get("tools") or []
    names = []
    while tools:
        tool = tools.pop()
        names.append(str(tool.get("name") or tool.get("type")))
        tools += tool.get("tools") or []  # a namespace's own
    return names


def left_processes(runtime: Path) -> list[int]:
    """Processes still working in memd's folder for its CLI calls."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if cwd.startswith(str(runtime)):
                found.append(int(entry))
    return found


@pytest.mark.parametrize("cli", [*AGENTS, f"claude@{CLAUDE_CODE_VERSION}"], indirect=True)
def test_the_cli_answers_on_its_own_login_and_runs_nothing_of_its_own(
    cli: CLIHome, runtime: Path
) -> None:
    target = cli.home / "written-by-the-model.txt"
    with LoopbackAPI(profile="real_client", context_limit=1_000_000) as api:
        api.push(harmful_calls(cli, target), replies.text(ANSWER))
        reply = ask(opened(cli, api, runtime))
        posts = [r for r in api.requests if r.method == "POST"]
    assert reply.text == ANSWER and reply.backend == cli.backend and reply.priced
    billed = [r.usage for r in posts if r.usage is not None]
    assert len(billed) == 2, [(r.path, r.status) for r in posts]
    assert reply.usage.output_tokens == sum(u.output_tokens for u in billed)
    assert reply.usage.prompt_tokens == sum(u.prompt_tokens for u in billed)
    assert reply.seconds > 0
    # The tools the model tried did nothing; the user's hooks, MCP server and notify did not run.
    assert not target.exists() and not Path(f"{target}.ran").exists()
    assert [c.name for c in cli.canaries if c.exists()] == []
    for request in posts:
        tools = offered_tools(cli.agent, request.body)
        if cli.agent == "codex":  # its model's own set: code mode fails closed (host off)
            assert not RUNS_OR_WRITES & set(tools), tools
        else:
            assert tools == [], tools
        sent = json.dumps(request.body) + json.dumps(dict(request.headers))
        assert MEMD_SECRET not in sent  # memd's keys stay memd's
        assert SYSTEM in sent  # memd's system prompt, in the CLI's own place for one
    assert login_credential(cli.agent) in json.dumps(dict(posts[0].headers))
    # No transcript of the call where memd's watcher looks, no process left behind.
    sessions = [p for p in cli.transcripts.rglob("*.json*") if p.is_file()]
    assert sessions == [], sessions
    # The group got SIGKILL after the CLI exited; a child's death is the kernel's to finish.
    wait_for(lambda: left_processes(runtime) == [], timeout=10, what="the call's group gone")


def test_a_cli_that_is_not_logged_in_is_refused_with_the_way_to_log_in(
    cli: CLIHome, runtime: Path
) -> None:
    cli.logout()
    with LoopbackAPI(profile="real_client") as api:
        api.push(replies.text(ANSWER))
        backend = opened(cli, api, runtime)
        with pytest.raises(AuthenticationFailed) as refused:
            ask(backend)
        with pytest.raises(AuthenticationFailed, match="not logged in"):
            anyio.run(lambda: backend.probe(model="x", timeout=10))
    assert cli.agent in str(refused.value) and "log" in str(refused.value)


def test_memds_stop_ends_a_call_in_flight_with_its_whole_process_group(
    cli: CLIHome, runtime: Path
) -> None:
    # Something the CLI started (a language server, a shell…) dies with it: its whole group.
    wrapper = runtime / f"{cli.agent}-with-a-child"
    wrapper.write_text(f'#!/bin/sh\nsleep 600 &\n"{cli.command}" "$@"\n')
    wrapper.chmod(0o700)
    with LoopbackAPI(profile="real_client") as api:
        api.hold()
        backend = opened(cli, api, runtime, command=str(wrapper))
        outcome: list[BaseException] = []
        ended = anyio.Event()

        async def scenario() -> None:
            async def one() -> None:
                try:
                    await backend.create_message(
                        model=BACKENDS[cli.backend].models["session_notes"],
                        system=SYSTEM,
                        messages=[{"role": "user", "content": "hello"}],
                        max_tokens=100,
                    )
                except LLMError as exc:
                    outcome.append(exc)
                finally:
                    ended.set()

            async def held() -> None:  # the request at the server, or the call's early end
                while not ended.is_set():
                    try:
                        return await anyio.to_thread.run_sync(api.wait_held, 1, 0.2)
                    except TimeoutError:
                        continue
                raise AssertionError(f"the call ended before its request came: {outcome}")

            with anyio.fail_after(90):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(one)
                    await held()
                    assert left_processes(runtime), "the CLI runs while its request is held"
                    backend.stop("memd is stopping")

        anyio.run(scenario)
        api.release()
    assert len(outcome) == 1 and isinstance(outcome[0], Unavailable), outcome
    assert "memd is stopping" in str(outcome[0])
    # SIGKILL is sent to the whole group; the child's death is the kernel's to finish.
    wait_for(lambda: left_processes(runtime) == [], timeout=10, what="the group's end")
