"""memdctl as a person and a script use it: the real ``memdctl`` process against the real
daemon (issue 13). Each test names the problem it pins."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memd.memory.paths import project_slug
from memd.testing.loopback import LoopbackAPI
from tests.conftest import CORPUS
from tests.daemon_harness import (
    Home,
    call,
    fake_home,
    memdctl,
    run_memdctl,
    start_memd,
    stop_memd,
    wait_for,
)

pytestmark = pytest.mark.slow

SOURCE = CORPUS / "spotter" / "short.jsonl"
SLUG = "-tmp-demo"
CLOSED_PORT_URL = "http://127.0.0.1:9"  # discard port: nothing listens, connect is refused


def add_session(home: Home, session_id: str, project: str = SLUG) -> Path:
    path = home.projects / project / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(SOURCE.read_bytes())
    return path


def wait_sessions(home: Home, count: int) -> list[dict[str, Any]]:
    def parsed() -> list[dict[str, Any]] | None:
        rows: list[dict[str, Any]] = call(home, "sessions")
        return rows if len(rows) >= count and all(s["parsed"] for s in rows) else None

    found: list[dict[str, Any]] = wait_for(parsed, timeout=20, what=f"{count} parsed sessions")
    return found


def write_env_file(home: Home, text: str, mode: int = 0o600) -> Path:
    path = home.root / ".config" / "memd" / "env"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_options_before_the_command_and_dash_projects(tmp_path: Path) -> None:
    """`memdctl --json status` printed text; `--socket` before the command was ignored;
    `memories -tmp-demo` failed; `memories .` did not take a path."""
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            add_session(home, "aaaa1111-2222")
            wait_sessions(home, 1)
            elsewhere = {**home.env, "XDG_RUNTIME_DIR": str(tmp_path / "nowhere")}
            done = run_memdctl(elsewhere, "--json", "--socket", str(home.socket), "status")
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["daemon"]["socket"] == str(home.socket)
            done = memdctl(home, "sessions", "--project", SLUG, "--json")
            assert done.returncode == 0, done.stderr
            assert [r["session_id"] for r in json.loads(done.stdout)] == ["aaaa1111-2222"]
            done = memdctl(home, "memories", SLUG)
            assert done.returncode == 0, done.stderr
            assert f"{SLUG}/memory" in done.stdout
            repo = tmp_path / "repo"
            repo.mkdir()
            done = memdctl(home, "memories", ".", "--json", cwd=repo)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["memory_dir"].endswith("-repo/memory")
            add_session(home, "dddd4444", project=project_slug(str(repo.resolve())))
            wait_sessions(home, 2)
            done = memdctl(home, "sessions", "--project", ".", "--json", cwd=repo)
            assert done.returncode == 0, done.stderr
            assert [r["session_id"] for r in json.loads(done.stdout)] == ["dddd4444"]
        finally:
            assert stop_memd(proc) == 0


def test_ambiguous_id_exits_2_with_candidates_and_ids_are_unique(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            add_session(home, "aaaa1111-2222")
            add_session(home, "aaaa1111-3333")
            wait_sessions(home, 2)
            done = memdctl(home, "session", "aaaa1111", "--json")
            assert done.returncode == 2
            error = json.loads(done.stdout)["error"]
            assert error["code"] == "ambiguous"
            assert sorted(error["candidates"]) == ["aaaa1111-2222", "aaaa1111-3333"]
            assert "aaaa1111-2222" in done.stderr and "aaaa1111-3333" in done.stderr
            listing = memdctl(home, "sessions").stdout
            assert "aaaa1111-2 " in listing and "aaaa1111-3 " in listing
            row = listing.split("\n")[1]  # relative time ("just now" within a second)
            assert ("just now" in row or " ago" in row) and not re.search(r"\d{4}-\d\d-\d\dT", row)
            done = memdctl(home, "session", "aaaa1111-3")
            assert done.returncode == 0, done.stderr
            assert "notes" in done.stdout and "False" not in done.stdout
        finally:
            assert stop_memd(proc) == 0


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`memdctl status | head -1` ended in a BrokenPipeError traceback."""
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            buffered = {k: v for k, v in home.env.items() if k != "PYTHONUNBUFFERED"}
            for command in ("status", "sessions", "config"):  # long and one-line outputs
                reader = subprocess.Popen(
                    [sys.executable, "-m", "memd_client.cli", command],
                    env=buffered,  # as a user runs it: stdout into a pipe is block-buffered
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                assert reader.stdout is not None and reader.stderr is not None
                reader.stdout.close()  # the reader went away before memdctl printed
                assert reader.wait(timeout=30) == 141
                assert reader.stderr.read() == b""
                reader.stderr.close()
        finally:
            assert stop_memd(proc) == 0


def test_extract_against_an_unreachable_api_fails_fast_and_says_where(tmp_path: Path) -> None:
    """`extract` sat 60 s and exited 0; status said `errors 0` and `model enabled`."""
    with fake_home(tmp_path) as home:
        write_env_file(home, f"ANTHROPIC_API_KEY=k\nANTHROPIC_BASE_URL={CLOSED_PORT_URL}\n")
        proc = start_memd(home)
        try:
            add_session(home, "bbbb2222")
            wait_sessions(home, 1)
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="model")
            started = time.monotonic()
            done = memdctl(home, "extract", "bbbb2222")
            assert done.returncode == 1, done.stdout + done.stderr
            assert time.monotonic() - started < 30
            assert "the extraction failed" in done.stderr and CLOSED_PORT_URL in done.stderr
            assert "\r" not in done.stderr  # no spinner into a pipe
            status = json.loads(memdctl(home, "status", "--json").stdout)
            assert status["llm"]["unreachable_since"] is not None
            assert status["llm"]["base_url"] == CLOSED_PORT_URL
            assert status["errors_last_hour"] >= 1
            text = memdctl(home, "status").stdout
            assert "unreachable since" in text and CLOSED_PORT_URL in text
        finally:
            assert stop_memd(proc) == 0


def test_reload_outcomes_are_in_status(tmp_path: Path) -> None:
    """A failed SIGHUP reload was only in the log; a path change said `reloaded`."""
    cfg = tmp_path / ".config" / "memd" / "config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("session_notes:\n  init_tokens: 11111\n")
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            cfg.write_text("session_notes:\n  init_tokens: nope\n")
            proc.send_signal(signal.SIGHUP)
            last = wait_for(
                lambda: call(home, "status")["daemon"]["last_reload"],
                timeout=10,
                what="the reload outcome",
            )
            assert last["outcome"] == "failed" and "init_tokens" in last["message"]
            assert "init_tokens" in memdctl(home, "status").stdout
            cfg.write_text(f"paths:\n  projects_root: {tmp_path / 'other'}\n")
            done = memdctl(home, "reload")
            assert done.returncode == 0, done.stderr
            assert "paths.projects_root" in done.stdout and "after a restart" in done.stdout
            text = memdctl(home, "status").stdout
            assert "restart   paths.projects_root changed" in text
        finally:
            assert stop_memd(proc) == 0


def test_env_file_feeds_the_model_is_reloaded_and_refused_when_open(tmp_path: Path) -> None:
    with LoopbackAPI() as api, fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            wait_for(
                lambda: "no API key" in str(call(home, "status")["llm"]["reason"]),
                timeout=20,
                what="the model to be off",
            )
            env = write_env_file(
                home, f"ANTHROPIC_API_KEY=k\nANTHROPIC_BASE_URL={api.url}\nMARKER=zq81\n"
            )
            assert memdctl(home, "reload").returncode == 0
            wait_for(lambda: call(home, "status")["llm"]["enabled"], timeout=20, what="model on")
            doctor = memdctl(home, "doctor", "--json")
            model = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "model")
            assert model["verdict"] == "ok" and api.url in model["detail"]
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
            assert b"zq81" not in environ and b"ANTHROPIC_API_KEY" not in environ
            env.chmod(0o644)
            done = memdctl(home, "reload")
            assert (
                done.returncode == 1 and "env file: " in done.stdout and "chmod 600" in done.stdout
            )
            status = call(home, "status")
            assert not status["llm"]["enabled"]
            assert "chmod 600" in status["daemon"]["env_file"]["problem"]
            assert "can be read or written by others" in memdctl(home, "status").stdout
        finally:
            assert stop_memd(proc) == 0


def test_env_file_values_never_reach_a_sandboxed_program(tmp_path: Path) -> None:
    """The env file feeds the model client only: a program the agents run sees none of it."""
    import anyio

    from memd.agent.process import ShellOutcome
    from memd.agent.shell import run_readonly
    from memd.config import load_config
    from memd.daemon.service import Daemon

    with fake_home(tmp_path) as home:
        write_env_file(home, "ANTHROPIC_API_KEY=secret-zq81\nMARKER=zq81\n")
        env = {**home.env, "MEMD_RUNTIME_DIR": str(home.runtime / "memd")}
        daemon = Daemon.load(load_config(env=env), env=env)
        assert daemon.llm_env["MARKER"] == "zq81" and "MARKER" not in daemon.env
        outcome = anyio.run(lambda: run_readonly("cat /proc/self/environ", cwd=tmp_path))
        assert isinstance(outcome, ShellOutcome), outcome
        seen = outcome.stdout
        assert "PATH=" in seen and "zq81" not in seen and "ANTHROPIC" not in seen
        assert "zq81" not in json.dumps(dict(os.environ))


def test_doctor_verdicts(tmp_path: Path) -> None:
    """No key: model warns; hooks missing: fail with the fix; after install-hooks: ok."""
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        try:
            wait_for(
                lambda: "no API key" in str(call(home, "status")["llm"]["reason"]),
                timeout=20,
                what="the model to be off",
            )
            done = memdctl(home, "doctor", "--json")
            assert done.returncode == 1  # the hooks are missing
            checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
            assert checks["daemon"]["verdict"] == "ok"
            assert checks["model"]["verdict"] == "warn"
            assert "ANTHROPIC_API_KEY" in checks["model"]["fix"]
            assert checks["claude_code hooks"]["verdict"] == "fail"
            assert checks["claude_code hooks"]["fix"] == "run `memdctl install-hooks`"
            assert checks["directories"]["verdict"] == "ok"
            # A user who reaches memd over MCP only: the hooks are optional, not a failure.
            mcp = memdctl(home, "install-mcp", "--agent", "codex")
            assert mcp.returncode == 0, mcp.stderr
            done = memdctl(home, "doctor", "--json")
            assert done.returncode == 0, done.stdout
            checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
            assert checks["claude_code hooks"]["verdict"] == "ok", checks["claude_code hooks"]
            assert "over MCP (codex)" in checks["claude_code hooks"]["detail"]
            assert memdctl(home, "uninstall-mcp", "--agent", "codex").returncode == 0
            assert memdctl(home, "doctor").returncode == 1  # neither hooks nor MCP: a failure
            settings = home.root / ".claude" / "settings.json"
            hook = Path(sys.executable).parent / "memd-hook"
            settings.write_text(
                json.dumps(
                    {
                        "hooks": {
                            event: [{"hooks": [{"type": "command", "command": str(hook)}]}]
                            for event in ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd")
                        }
                    }
                )
            )
            done = memdctl(home, "doctor", "--json")
            assert done.returncode == 0, done.stdout
            checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
            assert checks["claude_code hooks"]["verdict"] == "warn", checks["claude_code hooks"]
            assert "console script" in checks["claude_code hooks"]["detail"]
            assert memdctl(home, "install-hooks").returncode == 0
            done = memdctl(home, "doctor")
            assert "ok    claude_code hooks" in done.stdout, done.stdout
            assert done.returncode == 0, done.stdout
        finally:
            assert stop_memd(proc) == 0


def test_doctor_with_an_unsafe_runtime_dir_and_no_daemon(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        runtime = home.runtime / "memd"
        runtime.mkdir(mode=0o777)
        runtime.chmod(0o777)
        done = memdctl(home, "doctor", "--json")
        assert done.returncode == 1
        checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
        assert checks["daemon"]["verdict"] == "fail"
        assert "systemctl --user start memd" in checks["daemon"]["fix"]
        assert checks["directories"]["verdict"] == "fail"
        assert checks["directories"]["fix"] == f"chmod 700 {runtime}"
        assert "mode 0777" in checks["directories"]["detail"]


def test_install_and_uninstall_service_without_a_user_bus(tmp_path: Path) -> None:
    with fake_home(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "xdg")) as home:
        unit = tmp_path / "xdg" / "systemd" / "user" / "memd.service"
        done = memdctl(home, "install-service")
        assert done.returncode == 1
        assert "no systemd user bus" in done.stderr and "--no-start" in done.stderr
        assert "Traceback" not in done.stderr and unit.exists()
        done = memdctl(home, "install-service", "--no-start")
        assert done.returncode == 0, done.stderr
        assert oct(unit.stat().st_mode & 0o777) == "0o644"
        done = memdctl(home, "uninstall-service")
        assert done.returncode == 0, done.stderr
        assert not unit.exists()


def test_version_config_check_and_logs(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        done = memdctl(home, "--version")
        assert done.returncode == 0 and done.stdout.startswith("memdctl ")
        good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
        good.write_text("session_notes:\n  init_tokens: 12000\n")
        bad.write_text("session_notes:\n  init_tokens: soon\n")
        done = memdctl(home, "config", "--check", str(good))
        assert done.returncode == 0, done.stderr
        assert "ok:" in done.stdout
        done = memdctl(home, "config", "--check", str(bad))
        assert done.returncode == 1 and "session_notes.init_tokens" in done.stderr
        proc = start_memd(home)
        try:
            assert str(home.root / "memd.log") in memdctl(home, "status").stdout
            done = memdctl(home, "logs")
            assert done.returncode == 0 and "ready on" in done.stdout
        finally:
            assert stop_memd(proc) == 0


def test_top_in_a_real_terminal(tmp_path: Path) -> None:
    """`memdctl top` in tmux at 80x24: a session's row with its bar appears once its
    transcript is written, and `q` exits 0."""
    with fake_home(tmp_path) as home:
        proc = start_memd(home)
        server = f"memd-top-{os.getpid()}"
        rc_file = tmp_path / "top.rc"
        tmux = ["tmux", "-L", server]
        env = {**home.env, "TERM": "xterm-256color"}
        command = f"{sys.executable} -m memd_client.cli top; echo $? > {rc_file}; sleep 30"
        try:
            subprocess.run(
                [*tmux, "-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "24", command],
                env=env,
                check=True,
                timeout=30,
            )

            def screen() -> str:
                return subprocess.run(
                    [*tmux, "capture-pane", "-p"], capture_output=True, text=True, timeout=30
                ).stdout

            wait_for(lambda: "(q quits)" in screen(), timeout=20, what="top to draw")
            add_session(home, "cccc3333-4444")
            row = wait_for(
                lambda: next(
                    (line for line in screen().splitlines() if line.startswith("cccc3333")), None
                ),
                timeout=20,
                what="the session's row",
            )
            assert "[#" in row and "k/" in row
            assert all(len(line) <= 80 for line in screen().splitlines())
            subprocess.run([*tmux, "send-keys", "q"], check=True, timeout=30)
            wait_for(
                lambda: rc_file.exists() and rc_file.read_text().strip(),
                timeout=20,
                what="top to exit",
            )
            assert rc_file.read_text().strip() == "0"
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
            assert stop_memd(proc) == 0


def test_install_and_uninstall_hooks_keep_mode_and_other_hooks(tmp_path: Path) -> None:
    """install-hooks turned a 0644 settings.json into 0600; there was no uninstall-hooks."""
    with fake_home(tmp_path) as home:
        settings = home.root / ".claude" / "settings.json"
        settings.parent.mkdir(parents=True)
        theirs = {"matcher": "Bash", "hooks": [{"type": "command", "command": "/bin/true"}]}
        original = json.dumps({"hooks": {"PreToolUse": [theirs]}, "theme": "dark"}).encode()
        settings.write_bytes(original)
        settings.chmod(0o644)
        done = memdctl(home, "install-hooks")
        assert done.returncode == 0, done.stderr
        assert stat.S_IMODE(settings.stat().st_mode) == 0o644
        assert set(json.loads(settings.read_text())["hooks"]) == {
            "PreToolUse",
            "SessionStart",
            "UserPromptSubmit",
            "SessionEnd",
        }
        done = memdctl(home, "uninstall-hooks", "--json")
        assert done.returncode == 0, done.stderr
        assert settings.read_bytes() == original  # memd's install was its only change
        assert stat.S_IMODE(settings.stat().st_mode) == 0o644
        assert not settings.with_name("settings.json.memd-backup").exists()
