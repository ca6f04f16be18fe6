"""The Claude Code hook command fails open, and install-hooks merges idempotently."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import memd_client
from memd.memory.paths import memory_dir
from memd.sources.claude_code import ROOM as CLAUDE_CODE
from memd.sources.hooks import PromptSubmit, SessionStart, TurnEnd
from memd_client import hook
from memd_client.agents.claude_code import HOOKS as CLAUDE_HOOKS
from memd_client.config_backup import Original, read_backup
from memd_client.hooks_install import (
    HOOK_CODE,
    detached,
    hook_command,
    install_hooks,
    merge_hooks,
    parse_memd_hook,
    uninstall_hooks,
    waited_for,
)
from tests.daemon_harness import fake_home, start_memd, stop_memd

EVENTS = [
    {"hook_event_name": "SessionStart", "source": "startup", "session_id": "s", "cwd": "/x"},
    {"hook_event_name": "UserPromptSubmit", "prompt": "how do I run the tests?", "session_id": "s"},
    {"hook_event_name": "Stop", "stop_hook_active": False, "session_id": "s"},
]


def run_hook(stdin: bytes, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[bytes], float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "memd_client.hook"],
        input=stdin,
        env=env,
        capture_output=True,
        timeout=30,
    )
    return done, time.monotonic() - start


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e["hook_event_name"])
def test_daemon_down_exits_zero_quickly_with_no_output(
    tmp_path: Path, event: dict[str, Any]
) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "MEMD_SOCKET": str(tmp_path / "nothing.sock"),
        "HOME": str(tmp_path),
    }
    done, elapsed = run_hook(json.dumps(event).encode(), env)
    assert done.returncode == 0
    assert done.stdout == b"" and done.stderr == b""
    assert elapsed < 0.3 * 5  # generous on a loaded CI box; bench/hook.py measures it properly


@pytest.mark.parametrize("stdin", [b"", b"not json", b"[1,2]", b'{"hook_event_name": "Nope"}'])
def test_garbage_stdin_is_ignored(tmp_path: Path, stdin: bytes) -> None:
    env = {"PATH": "/usr/bin:/bin", "MEMD_SOCKET": str(tmp_path / "nothing.sock")}
    done, _ = run_hook(stdin, env)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_the_daemon_renders_the_hooks_json_format() -> None:
    output = CLAUDE_CODE.hooks.output
    out = output(PromptSubmit("UserPromptSubmit", "s1"), "remember: tests use pytest")
    assert out is not None
    assert json.loads(out) == {
        "hookSpecificOutput": {
            "hookEventName": "UserPromptSubmit",
            "additionalContext": "remember: tests use pytest",
        }
    }
    assert output(TurnEnd("Stop", "s1"), "anything") is None
    assert output(SessionStart("SessionStart", "s1"), "") is None


def test_the_hook_imports_no_heavy_module() -> None:
    """Its import graph is os, sys, _socket and msgpack (issue 12): no pathlib, socket,
    json or typing, measured in a fresh interpreter that has not imported them."""
    code = (
        "import sys; before = set(sys.modules); import memd_client.hook as h; "
        "h.request(b'{}', {}); import _socket; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    packages = str(Path(msgpack.__file__).parents[1])
    client = str(Path(memd_client.__file__).parents[1])
    env = {"PYTHONPATH": f"{client}:{packages}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    heavy = {"pathlib", "socket", "json", "typing", "re", "msgpack", "memd_client.client"}
    assert not loaded & heavy


VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.text()
    | st.binary(),
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(), inner, max_size=20),
    max_leaves=60,
)


@given(VALUES)
def test_the_hooks_msgpack_subset_reads_what_msgpack_writes(value: Any) -> None:
    body = msgpack.packb(value, use_bin_type=True)
    assert hook.unpack(body) == (value, len(body))


@given(
    st.dictionaries(
        st.text(),
        st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text() | st.binary(),
    )
)
def test_msgpack_reads_what_the_hook_writes(value: dict[str, Any]) -> None:
    assert msgpack.unpackb(hook.pack({"params": value}), raw=False) == {"params": value}


@pytest.mark.parametrize("body", [b"", b"\x81", b"\xd9\x05ab", b"\xc7\x01\x01x", b"\x91" * 100])
def test_the_hooks_reader_refuses_what_it_cannot_read(body: bytes) -> None:
    with pytest.raises(ValueError):
        hook.unpack(body)


def test_install_hooks_keeps_user_hooks_and_is_idempotent(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    mine = {"matcher": "Bash", "hooks": [{"type": "command", "command": "my-linter"}]}
    settings.write_text(json.dumps({"model": "opus", "hooks": {"PreToolUse": [mine]}}))
    done = install_hooks(settings, "/bin/memd-hook", CLAUDE_HOOKS)
    assert any("backed up" in line for line in done)
    data = json.loads(settings.read_text())
    assert data["model"] == "opus"
    assert data["hooks"]["PreToolUse"] == [mine]
    for event in ("SessionStart", "UserPromptSubmit", "SessionEnd"):
        commands = [h["command"] for g in data["hooks"][event] for h in g["hooks"]]
        assert commands == [
            detached("/bin/memd-hook") if event == "SessionEnd" else "/bin/memd-hook"
        ]
    assert data["hooks"]["SessionStart"][0]["matcher"] == "resume|clear|compact"
    before = settings.read_text()
    assert install_hooks(settings, "/bin/memd-hook", CLAUDE_HOOKS) == [
        f"memd hooks already present in {settings}"
    ]
    assert settings.read_text() == before
    saved = read_backup(tmp_path / "settings.json.memd-backup")
    assert isinstance(saved, Original) and saved.data is not None
    backup = json.loads(saved.data)
    assert backup == {"model": "opus", "hooks": {"PreToolUse": [mine]}}


def test_install_hooks_refuses_broken_settings(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text("{broken")
    with pytest.raises(ValueError, match="not valid JSON"):
        install_hooks(settings, "/bin/memd-hook", CLAUDE_HOOKS)
    assert settings.read_text() == "{broken"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(st.dictionaries(st.sampled_from(["model", "env", "permissions", "x"]), json_values))
def test_merge_keeps_everything_else(settings: dict[str, Any]) -> None:
    merged, changed = merge_hooks(settings, "/bin/memd-hook", CLAUDE_HOOKS)
    assert changed == ["SessionStart", "UserPromptSubmit", "SessionEnd"]
    assert {k: v for k, v in merged.items() if k != "hooks"} == settings
    again, changed_again = merge_hooks(merged, "/bin/memd-hook", CLAUDE_HOOKS)
    assert again == merged and changed_again == []


def test_session_end_waits_at_most_a_second_within_claude_codes_budget() -> None:
    end = json.dumps({"hook_event_name": "SessionEnd", "reason": "other"}).encode()
    assert hook.hook_timeout({}, end) == hook.SESSION_END_TIMEOUT_S < 1.5
    prompt = json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": '"SessionEnd"'})
    assert hook.hook_timeout({}, prompt.encode()) == hook.DEFAULT_TIMEOUT_S


OLD_FORMS = [
    "/usr/local/bin/memd-hook",
    "'/home/a b/.venv/bin/memd-hook'",
    "/usr/bin/python3 -m memd_client.hook",
    "/v/bin/python /v/lib/python3.11/site-packages/memd_client/hook.py",
    # what install-hooks wrote before issue 25: with site, which cost more than the rest
    f"/usr/bin/python3 -I -c {shlex.quote(HOOK_CODE)} /v/site-packages/memd_client/hook.py",
]


def memd_commands(settings: Path, event: str) -> list[str]:
    groups = json.loads(settings.read_text())["hooks"].get(event, [])
    return [h["command"] for g in groups for h in g["hooks"] if parse_memd_hook(h["command"])]


@pytest.mark.parametrize("old", OLD_FORMS)
def test_install_hooks_replaces_an_older_memd_entry(tmp_path: Path, old: str) -> None:
    """An upgrade from the console script (or -m, or the script by path) to the interpreter
    form leaves one memd entry per event, and the user's hooks where they were."""
    settings = tmp_path / "settings.json"
    theirs = {"type": "command", "command": "my-linter --fix"}
    old_entry = {"type": "command", "command": old, "timeout": 10}
    groups = {"Stop": [{"hooks": [theirs, old_entry]}], "SessionEnd": [{"hooks": [old_entry]}]}
    settings.write_text(json.dumps({"hooks": groups}))
    new = hook_command("/opt/py/bin/python3", "/opt/py/lib/site-packages/memd_client/hook.py")
    done = install_hooks(settings, new, CLAUDE_HOOKS)
    assert "removed memd's older hook command for Stop, SessionEnd" in done
    for event in ("SessionStart", "UserPromptSubmit"):
        assert memd_commands(settings, event) == [new]
    assert memd_commands(settings, "SessionEnd") == [detached(new)]
    stop = json.loads(settings.read_text())["hooks"]["Stop"]
    assert stop[0] == {"hooks": [theirs]}
    assert install_hooks(settings, new, CLAUDE_HOOKS) == [
        f"memd hooks already present in {settings}"
    ]


def test_claude_code_waits_only_for_the_hooks_whose_answer_it_reads(tmp_path: Path) -> None:
    """SessionEnd only tells memd the session ended: its command starts the hook in the
    background, so Claude Code waits for a shell alone, and memd's Stop hook is gone (turn
    ends come from the transcript and from SessionEnd); SessionStart and UserPromptSubmit
    stay waited for. An install from before (Stop, and SessionEnd waited for) is brought to
    that; uninstall removes every form."""
    settings = tmp_path / "settings.json"
    new = hook_command("/usr/bin/python3", "/x/memd_client/hook.py")
    waited = {"type": "command", "command": new, "timeout": 10}
    old: dict[str, list[dict[str, Any]]] = {
        e: [{"hooks": [waited]}] for e in ("Stop", "SessionEnd")
    }
    old["SessionStart"] = [{"matcher": "startup|resume|clear|compact", "hooks": [waited]}]
    settings.write_text(json.dumps({"hooks": old}))
    assert waited_for(json.loads(settings.read_text()), CLAUDE_HOOKS) == ["Stop", "SessionEnd"]
    done = install_hooks(settings, new, CLAUDE_HOOKS)
    assert "removed memd's older hook command for Stop, SessionEnd, SessionStart" in done
    hooks = json.loads(settings.read_text())["hooks"]
    entries = {e: [h for g in hooks[e] for h in g["hooks"]] for e in hooks}
    assert hooks["SessionStart"][0]["matcher"] == "resume|clear|compact"  # not at a startup
    assert entries == {
        "SessionStart": [waited],
        "UserPromptSubmit": [waited],
        "SessionEnd": [{**waited, "command": detached(new)}],
    }
    assert waited_for(json.loads(settings.read_text()), CLAUDE_HOOKS) == []
    assert install_hooks(settings, new, CLAUDE_HOOKS) == [
        f"memd hooks already present in {settings}"
    ]
    settings.write_text(json.dumps({"hooks": {**hooks, **old}}))
    uninstall_hooks(settings)
    assert not settings.exists() or "hook.py" not in settings.read_text()


def test_uninstall_hooks_removes_every_form(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    theirs = {"type": "command", "command": "python3 -c 'print(1)' memd_client/hook.txt"}
    new = hook_command("/usr/bin/python3", "/x/memd_client/hook.py")
    entries = [{"type": "command", "command": c} for c in [*OLD_FORMS, new]]
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [theirs, *entries]}]}}))
    uninstall_hooks(settings)
    assert json.loads(settings.read_text()) == {"hooks": {"Stop": [{"hooks": [theirs]}]}}


@given(st.text(min_size=1).filter(lambda t: "\x00" not in t), st.text(min_size=1))
def test_the_hook_command_names_its_paths_whatever_they_hold(folder: str, name: str) -> None:
    python = f"/{folder}/bin/python3"
    hook_file = f"/{folder}/{name.replace('/', '_')}/memd_client/hook.py"
    command = hook_command(python, hook_file)
    assert shlex.split(command) == [python, "-I", "-S", "-c", HOOK_CODE, hook_file]
    parsed = parse_memd_hook(command)
    assert parsed is not None and parsed.form == "interpreter"
    assert (parsed.program, parsed.module_file) == (python, hook_file)


def loaded_modules(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[set[str], bytes]:
    """The modules ``argv`` (an interpreter and its arguments) imports, by ``-X importtime``,
    and what it printed."""
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], input=stdin, env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.decode().splitlines()
    return {line.rsplit("|", 1)[1].strip() for line in lines[1:]}, done.stdout


def test_the_registered_command_loads_the_hook_and_a_socket_and_nothing_else(
    tmp_path: Path,
) -> None:
    """Claude Code waits for the registered command on every prompt: past what the
    interpreter loads to start (``-I -S``), it loads the hook, its package and ``_socket``,
    nothing else (``os`` was a sixth of the start, ``__future__`` a few percent more), and
    a real daemon's recalled memory still comes back."""
    with fake_home(tmp_path) as home:
        project = tmp_path / "proj"
        folder = memory_dir(home.projects, project)
        folder.mkdir(parents=True)
        (folder / "deploy.md").write_text(
            "---\nname: deploy\ndescription: how deploys work\nmetadata:\n  type: project\n"
            "---\n\nDeploys go through scripts/bg-deploy.sh.\n"
        )
        (folder / "MEMORY.md").write_text("- [deploy](deploy.md) — how deploys work\n")
        command = shlex.split(hook_command(sys.executable, hook.__file__))
        prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s", "cwd": str(project)}
        prompt["prompt"] = "how do we deploy?"
        daemon = start_memd(home)
        try:
            loaded, out = loaded_modules(command, json.dumps(prompt).encode(), home.env)
        finally:
            stop_memd(daemon)
        start, _ = loaded_modules([sys.executable, "-I", "-S", "-c", "pass"], b"", home.env)
    assert b"scripts/bg-deploy.sh" in out
    assert loaded - start == {"memd_client", "memd_client.hook", "_socket"}


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_the_registered_command_runs_from_an_awkward_path(tmp_path: Path, shell: str) -> None:
    """Claude Code hands the command to a shell: a path with a space, quotes and a dollar
    sign reaches Python whole, and the hook runs (no daemon: exit 0, nothing printed; an
    import that failed would exit 1 with a traceback)."""
    awkward = tmp_path / 'it\'s a "$HOME" dir'
    awkward.mkdir()
    (awkward / "python3").symlink_to(sys.executable)
    (awkward / "memd_client").symlink_to(Path(memd_client.__file__).parent)
    command = hook_command(str(awkward / "python3"), str(awkward / "memd_client" / "hook.py"))
    env = {"PATH": "/usr/bin:/bin", "MEMD_SOCKET": str(tmp_path / "nothing.sock")}
    stdin = json.dumps(EVENTS[1]).encode()
    done = subprocess.run(
        [shell, "-c", command], input=stdin, env=env, capture_output=True, timeout=30
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_the_hook_file_runs_as_a_script() -> None:
    """``python …/memd_client/hook.py`` puts the package dir first on sys.path: no file
    beside the hook may shadow a standard-library module, and the file imports nothing of
    its own package."""
    package = Path(memd_client.__file__).parent
    beside = {p.stem for p in package.iterdir() if p.suffix == ".py" or p.is_dir()}
    assert not beside & set(sys.stdlib_module_names)
    env = {"PATH": "/usr/bin:/bin", "MEMD_SOCKET": "/nonexistent/memd.sock"}
    for argv in (
        [sys.executable, str(package / "hook.py")],
        [sys.executable, "-I", "-S", str(package / "hook.py")],
    ):
        done = subprocess.run(
            argv, input=json.dumps(EVENTS[0]).encode(), env=env, capture_output=True, timeout=30
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
