"""install-mcp / uninstall-mcp on existing config files of each agent: the result parses,
other servers are untouched, a second run changes nothing, uninstall restores the bytes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from memd.install.agents import AGENTS, Action, apply
from memd_client.config_backup import Original, read_backup
from tests.daemon_harness import run_memdctl
from tests.fifo_support import waited_on_fifos

CLAUDE_JSON = """{
    "numStartups": 12,
    "theme": "dark — ünïcode",
    "mcpServers": {
        "github": {
            "type": "stdio",
            "command": "gh-mcp",
            "args": [],
            "env": {"GITHUB_TOKEN": "x"}
        }
    },
    "projects": {}
}
"""
CURSOR_JSON = '{"mcpServers": {"linear": {"url": "https://mcp.linear.app/sse"}}}'
GEMINI_JSON = """{
\t"theme": "GitHub",
\t"mcpServers": {
\t\t"fs": {
\t\t\t"command": "npx",
\t\t\t"args": ["-y", "@modelcontextprotocol/server-filesystem"]
\t\t}
\t}
}"""
QWEN_JSON = """{
  "security": {"auth": {"selectedType": "openai"}},
  "mcpServers": {"pg": {"command": "pg-mcp", "args": ["--ro"], "trust": false}},
  "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}
}
"""
CODEX_TOML = """# my codex settings
model = "o3"  # the default model

[mcp_servers.docs]
command = "docs-mcp"
args = ["--port", "0"]   # keep this comment

[profiles.fast]
model = "o4-mini"
"""
FILES = {
    "claude_code": (".claude.json", CLAUDE_JSON),
    "codex": (".codex/config.toml", CODEX_TOML),
    "cursor": (".cursor/mcp.json", CURSOR_JSON),
    "gemini": (".gemini/settings.json", GEMINI_JSON),
    "qwen": (".qwen/settings.json", QWEN_JSON),
}
OTHER = {"claude_code": "github", "codex": "docs", "cursor": "linear", "gemini": "fs", "qwen": "pg"}


def env_for(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": str(home / "bin")}  # no `claude` CLI on this PATH


def servers(agent: str, path: Path) -> dict[str, Any]:
    if agent == "codex":
        data: dict[str, Any] = tomllib.loads(path.read_text())["mcp_servers"]
        return data
    return json.loads(path.read_text())["mcpServers"]  # type: ignore[no-any-return]


def plant(home: Path, agent: str) -> tuple[Path, bytes]:
    relative, text = FILES[agent]
    path = home / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o640)
    return path, path.read_bytes()


@pytest.mark.parametrize("agent", AGENTS)
def test_install_is_idempotent_and_uninstall_restores_the_bytes(tmp_path: Path, agent: str) -> None:
    path, original = plant(tmp_path, agent)
    other_before = servers(agent, path)[OTHER[agent]]
    env = env_for(tmp_path)

    [first] = apply([agent], "user", "install", tmp_path, env)
    assert first.result == "installed", first
    entries = servers(agent, path)
    assert entries[OTHER[agent]] == other_before
    assert entries["memd"]["command"] == sys.executable
    assert entries["memd"]["args"] == ["-P", "-m", "memd.mcp"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert read_backup(Path(str(path) + ".memd-backup")) == Original(original)
    installed = path.read_bytes()

    [second] = apply([agent], "user", "install", tmp_path, env)
    assert second.result == "unchanged" and path.read_bytes() == installed

    [removed] = apply([agent], "user", "uninstall", tmp_path, env)
    assert removed.result == "removed"
    assert path.read_bytes() == original
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert not Path(str(path) + ".memd-backup").exists()
    [again] = apply([agent], "user", "uninstall", tmp_path, env)
    assert again.result == "absent" and path.read_bytes() == original


def test_json_formatting_is_kept_outside_memds_entry(tmp_path: Path) -> None:
    path, _ = plant(tmp_path, "claude_code")
    apply(["claude"], "user", "install", tmp_path, env_for(tmp_path))  # its older name
    text = path.read_text()
    assert text.startswith('{\n    "numStartups": 12,\n    "theme": "dark — ünïcode",')
    assert text.endswith("}\n")
    # The user edits something else after installing: uninstall keeps that edit.
    data = json.loads(text)
    data["theme"] = "light"
    path.write_text(json.dumps(data, indent=4, ensure_ascii=False) + "\n")
    apply(["claude"], "user", "uninstall", tmp_path, env_for(tmp_path))
    after = json.loads(path.read_text())
    assert after["theme"] == "light" and "memd" not in after["mcpServers"]
    assert "github" in after["mcpServers"]


def test_codex_comments_survive_install(tmp_path: Path) -> None:
    path, _ = plant(tmp_path, "codex")
    apply(["codex"], "user", "install", tmp_path, env_for(tmp_path))
    text = path.read_text()
    for kept in ("# my codex settings", "# the default model", "# keep this comment"):
        assert kept in text
    assert "[mcp_servers.memd]" in text and "[profiles.fast]" in text


def test_missing_files_are_created_and_bad_files_are_left_alone(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    outcomes = apply(AGENTS, "user", "install", tmp_path, env)
    assert [o.result for o in outcomes] == ["installed"] * len(AGENTS)
    for agent in AGENTS:
        path = tmp_path / FILES[agent][0]
        assert "memd" in servers(agent, path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    bad = {
        ".claude.json": "{not json",
        ".cursor/mcp.json": '{"mcpServers": []}',
        ".gemini/settings.json": "[1, 2]",
        ".codex/config.toml": "mcp_servers = 3\n",
        ".qwen/settings.json": '{"mcpServers": "pg"}',
    }
    for relative, text in bad.items():
        (tmp_path / relative).write_text(text)
    failed = apply(AGENTS, "user", "install", tmp_path, env)
    assert [o.result for o in failed] == ["failed"] * len(AGENTS)
    for relative, text in bad.items():
        assert (tmp_path / relative).read_text() == text
        # no copy of a file memd did not change: only the mark that memd created it
        assert read_backup(tmp_path / (relative + ".memd-backup")) == Original(None)


def test_a_fifo_as_an_agents_config_fails_that_agent_instead_of_waiting(tmp_path: Path) -> None:
    """An agent writes its own folder: a FIFO planted where its config is fails that agent's
    install as not a regular file, and is left as it is, instead of waiting for a writer."""
    fifos = [tmp_path / relative for relative, _ in FILES.values()]
    for fifo in fifos:
        fifo.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(fifo)
    outcomes: list[Any] = []

    def install() -> None:
        outcomes.extend(apply(AGENTS, "user", "install", tmp_path, env_for(tmp_path)))

    assert not waited_on_fifos(install, fifos)
    assert [o.result for o in outcomes] == ["failed"] * len(AGENTS)
    assert all("not a regular file" in o.detail for o in outcomes), outcomes
    assert all(stat.S_ISFIFO(fifo.lstat().st_mode) for fifo in fifos)


def test_a_symlinked_config_stays_a_symlink(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "cursor-mcp.json"
    real.write_text(CURSOR_JSON)
    (tmp_path / ".cursor").mkdir()
    (tmp_path / ".cursor" / "mcp.json").symlink_to(real)
    apply(["cursor"], "user", "install", tmp_path, env_for(tmp_path))
    assert (tmp_path / ".cursor" / "mcp.json").is_symlink()
    assert "memd" in json.loads(real.read_text())["mcpServers"]


def test_project_scope_writes_the_projects_files_with_the_portable_command(
    tmp_path: Path,
) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memd.install",
            "install",
            "--scope",
            "project",
            "--project",
            str(project),
            "--json",
        ],
        env={**os.environ, **env_for(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert {o["result"] for o in json.loads(done.stdout)} == {"installed"}
    for relative in (".mcp.json", ".cursor/mcp.json", ".gemini/settings.json"):
        entry = json.loads((project / relative).read_text())["mcpServers"]["memd"]
        assert entry["command"] == "memd-mcp" and entry["args"] == []
    codex = tomllib.loads((project / ".codex" / "config.toml").read_text())
    assert codex["mcp_servers"]["memd"]["command"] == "memd-mcp"
    assert stat.S_IMODE((project / ".mcp.json").stat().st_mode) == 0o644
    assert not (tmp_path / ".claude.json").exists()


def test_claude_cli_is_preferred_when_on_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "claude-calls"
    fake = bin_dir / "claude"
    # A stand-in for the external CLI: records its arguments and edits ~/.claude.json as the
    # real one does (tests/test_mcp_claude_code.py runs the real one when it is installed).
    fake.write_text(
        f"""#!{sys.executable}
import json, sys
from pathlib import Path
with open({str(log)!r}, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
path = Path({str(tmp_path / ".claude.json")!r})
data = json.loads(path.read_text()) if path.exists() else {{}}
servers = data.setdefault("mcpServers", {{}})
if sys.argv[2] == "add":
    servers[sys.argv[5]] = {{"type": "stdio", "command": sys.argv[7], "args": sys.argv[8:],
                             "env": {{}}}}
elif sys.argv[2] == "remove":
    servers.pop(sys.argv[3])
path.write_text(json.dumps(data))
"""
    )
    fake.chmod(0o755)
    env = env_for(tmp_path)
    assert apply(["claude"], "user", "install", tmp_path, env)[0].result == "installed"
    assert apply(["claude"], "user", "install", tmp_path, env)[0].result == "unchanged"
    assert apply(["claude"], "user", "uninstall", tmp_path, env)[0].result == "removed"
    assert apply(["claude"], "user", "uninstall", tmp_path, env)[0].result == "absent"
    calls = log.read_text().splitlines()
    assert calls == [
        f"mcp add -s user memd -- {sys.executable} -P -m memd.mcp",
        "mcp remove memd -s user",
    ]
    assert json.loads((tmp_path / ".claude.json").read_text())["mcpServers"] == {}


def memdctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_memdctl({**os.environ, **env_for(home)}, *args)


def test_memdctl_install_and_uninstall_mcp(tmp_path: Path) -> None:
    originals = {agent: plant(tmp_path, agent) for agent in AGENTS}
    done = memdctl(tmp_path, "install-mcp")
    assert done.returncode == 0, done.stderr
    assert [line.split()[1] for line in done.stdout.splitlines()] == ["installed"] * len(AGENTS)
    for agent, (path, _) in originals.items():
        assert "memd" in servers(agent, path) and OTHER[agent] in servers(agent, path)
    again = memdctl(tmp_path, "install-mcp", "--agent", "codex", "--json")
    assert [o["result"] for o in json.loads(again.stdout)] == ["unchanged"]
    removed = memdctl(tmp_path, "uninstall-mcp")
    assert removed.returncode == 0, removed.stderr
    for path, original in originals.values():
        assert path.read_bytes() == original
    (tmp_path / ".cursor" / "mcp.json").write_text("{broken")
    broken = memdctl(tmp_path, "install-mcp", "--agent", "cursor")
    assert broken.returncode == 1 and "not valid JSON" in broken.stdout
    usage = memdctl(tmp_path, "install-mcp", "--agent", "vim")
    assert usage.returncode == 2


@pytest.mark.parametrize("agent", AGENTS)
def test_uninstall_removes_the_containers_it_emptied(tmp_path: Path, agent: str) -> None:
    """`uninstall-mcp` left `{"mcpServers": {}}` behind in a file memd had created; the file
    memd created goes altogether (as `uninstall-hooks` does), even after a reinstall."""
    env = env_for(tmp_path)
    apply([agent], "user", "install", tmp_path, env)
    path = tmp_path / FILES[agent][0]
    text = path.read_text()
    path.write_text(text.replace(sys.executable, "/old/python"))  # an older install of memd's
    apply([agent], "user", "install", tmp_path, env)
    apply([agent], "user", "uninstall", tmp_path, env)
    assert not path.exists()
    assert not list(path.parent.glob("*.memd-backup"))


@pytest.mark.parametrize("action", ["install", "uninstall"])
@pytest.mark.parametrize("fault", ["ENOSPC", "EROFS"])
def test_a_disk_that_refuses_one_agents_file_fails_that_agent_only(
    tmp_path: Path, action: Action, fault: str
) -> None:
    """Codex's folder is on a disk that fills up or turns read-only between the runs: its
    result says so and its file is as it was; Gemini's, on a healthy disk, is still done."""
    from tests.disk_support import faulty_disk

    env = env_for(tmp_path)
    gemini, _ = plant(tmp_path, "gemini")
    with faulty_disk(tmp_path / ".codex", in_process=True) as disk:
        codex, _ = plant(tmp_path, "codex")
        if action == "uninstall":
            apply(["codex", "gemini"], "user", "install", tmp_path, env)
        before = codex.read_bytes()
        disk.fault(fault)
        failed, done = apply(["codex", "gemini"], "user", action, tmp_path, env)
        assert failed.agent == "codex" and failed.result == "failed", failed
        assert failed.detail.startswith(f"cannot write {codex}")  # or its backup
        assert "it is unchanged" in failed.detail
        assert codex.read_bytes() == before
        assert not Path(f"{codex}.memd-backup").exists() or action == "uninstall"
        assert done.agent == "gemini" and done.result in {"installed", "removed"}, done
        assert ("memd" in servers("gemini", gemini)) == (action == "install")
        disk.heal()
        [again] = apply(["codex"], "user", action, tmp_path, env)
        assert again.result in {"installed", "removed"}, again
