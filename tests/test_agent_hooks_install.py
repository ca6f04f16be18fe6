"""memd's hooks in Codex's and Gemini's files (issue 24): what install writes, that uninstall
gives the user's files back byte for byte when memd's install was their only change, and what
``memdctl doctor`` says of each agent it finds. The real CLIs run these files in
``tests/test_agent_hooks_cli.py``."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import stat
import sys
import tomllib
from pathlib import Path

import pytest

from memd.install.agents import apply
from memd.install.codex_hooks import install, uninstall
from memd.install.config_files import ConfigFileError
from memd_client import hook as hook_module
from memd_client.agents import named
from memd_client.agents.gemini import HOOKS as GEMINI_HOOKS
from memd_client.cli_doctor import Check, Facts, check_agent
from memd_client.config_backup import Original, read_backup
from memd_client.hooks_codex import trust_entries, trust_hash
from memd_client.hooks_install import (
    hook_command,
    install_hooks,
    is_memd_hook,
    parse_memd_hook,
    uninstall_hooks,
)
from tests.daemon_harness import run_memdctl
from tests.fifo_support import waited_on_fifos
from tests.uid_support import IS_ROOT, NOBODY, run_forked

CODEX_CONFIG = (
    '# my Codex config\nmodel = "o3"   # the one I like\n\n[features]\nweb_search = true\n\n'
    '[mcp_servers.docs]\ncommand = "docs-mcp"\n'
)
USER_HOOK = {"type": "command", "command": "/usr/local/bin/audit", "timeout": 5}


def command(agent: str) -> str:
    table = named(agent)
    assert table is not None
    return hook_command(sys.executable, hook_module.__file__, table.hook_name)


def check_codex(facts: Facts) -> Check:
    return check_agent(facts, "codex")


def check_gemini(facts: Facts) -> Check:
    return check_agent(facts, "gemini")


def test_gemini_gets_its_events_in_milliseconds_and_its_file_back(tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    original = b'{\n  "hooks": {\n    "BeforeTool": [\n      {\n        "hooks": [\n' + (
        b'          {"type": "command", "command": "/usr/local/bin/audit"}\n        ]\n'
        b'      }\n    ]\n  },\n  "theme": "dark"\n}\n'
    )
    settings.write_bytes(original)
    settings.chmod(0o600)
    install_hooks(settings, command("gemini"), GEMINI_HOOKS)
    data = json.loads(settings.read_text())
    assert sorted(data["hooks"]) == ["AfterAgent", "BeforeAgent", "BeforeTool", "SessionStart"]
    (entry,) = data["hooks"]["BeforeAgent"][0]["hooks"]
    assert entry["timeout"] == 10_000  # Gemini's timeouts are milliseconds
    hook = parse_memd_hook(entry["command"])
    assert hook is not None and hook.agent == "gemini" and hook.form == "interpreter"
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    uninstall_hooks(settings)
    assert settings.read_bytes() == original
    assert not settings.with_name("settings.json.memd-backup").exists()


@pytest.mark.parametrize("agent", ["claude", "gemini", "qwen"])
def test_a_file_memd_created_goes_again_even_after_a_reinstall(tmp_path: Path, agent: str) -> None:
    settings = tmp_path / "settings.json"
    table = named(agent)
    assert table is not None and table.hooks is not None
    spec = table.hooks.spec
    install_hooks(settings, f"/old/bin/memd-hook {agent}", spec)
    install_hooks(settings, command(agent), spec)  # memd's own file: no copy of it is kept
    assert read_backup(settings.with_name("settings.json.memd-backup")) == Original(None)
    assert uninstall_hooks(settings)[0] == f"removed {settings}, which held only memd's entries"
    assert not settings.exists()


def codex_home(tmp_path: Path, hooks: dict[str, object] | None = None) -> Path:
    home = tmp_path / ".codex"
    home.mkdir()
    (home / "config.toml").write_text(CODEX_CONFIG)
    if hooks is not None:
        (home / "hooks.json").write_text(json.dumps({"hooks": hooks}, indent=2) + "\n")
    return home


def test_codex_hooks_are_trusted_keeping_the_config_and_given_back(tmp_path: Path) -> None:
    home = codex_home(tmp_path, {"UserPromptSubmit": [{"hooks": [USER_HOOK]}]})
    before = {name: (home / name).read_bytes() for name in ("config.toml", "hooks.json")}
    install(home, command("codex"))
    config = (home / "config.toml").read_text()
    assert config.startswith(CODEX_CONFIG)  # comments and layout kept, the trust appended
    state = tomllib.loads(config)["hooks"]["state"]
    hooks = json.loads((home / "hooks.json").read_text())
    assert [len(hooks["hooks"][e]) for e in ("SessionStart", "UserPromptSubmit")] == [1, 2]
    key = f"{home / 'hooks.json'}:user_prompt_submit:1:0"  # after the user's own group
    mine = hooks["hooks"]["UserPromptSubmit"][1]
    assert state[key] == {"trusted_hash": trust_hash("UserPromptSubmit", mine, mine["hooks"][0])}
    assert set(state) == set(trust_entries(home / "hooks.json", hooks, is_memd_hook))
    uninstall(home)
    assert {name: (home / name).read_bytes() for name in before} == before
    assert not list(home.glob("*.memd-backup"))


def test_codex_reinstall_replaces_the_trust_of_memds_older_command(tmp_path: Path) -> None:
    home = codex_home(tmp_path)
    install(home, "/old/python -I -c 'from memd_client.hook import main' /old/hook.py codex")
    install(home, command("codex"))
    state = tomllib.loads((home / "config.toml").read_text())["hooks"]["state"]
    hooks = json.loads((home / "hooks.json").read_text())
    assert state == {
        k: {"trusted_hash": v}
        for k, v in trust_entries(home / "hooks.json", hooks, is_memd_hook).items()
    }
    assert [[g["hooks"][0]["command"] for g in groups] for groups in hooks["hooks"].values()] == [
        [command("codex")],
        [command("codex")],
        [command("codex")],  # SessionStart, UserPromptSubmit, Stop
    ]
    uninstall(home)
    assert (home / "config.toml").read_text() == CODEX_CONFIG
    assert not (home / "hooks.json").exists()


def test_codex_install_says_when_codex_hooks_are_off_and_refuses_a_broken_config(
    tmp_path: Path,
) -> None:
    home = codex_home(tmp_path)
    (home / "config.toml").write_text("[features]\nhooks = false\n")
    done = install(home, command("codex"))
    assert any("[features] hooks = false" in line for line in done)
    (home / "config.toml").write_text("[hooks\nbroken")
    (home / "hooks.json").unlink()
    with pytest.raises(ValueError, match="not valid TOML"):
        install(home, command("codex"))
    assert not (home / "hooks.json").exists()  # nothing written before the refusal
    (home / "config.toml").write_text('hooks = "not a table"\n')
    with pytest.raises(ConfigFileError):
        install(home, command("codex"))


def test_doctor_checks_codex_and_gemini_where_it_finds_them(tmp_path: Path) -> None:
    facts = Facts({}, tmp_path)
    assert check_codex(facts).verdict == check_gemini(facts).verdict == "ok"  # not found
    home = codex_home(tmp_path)
    (tmp_path / ".gemini").mkdir()
    missing = [check_codex(facts), check_gemini(facts)]
    assert [c.verdict for c in missing] == ["warn", "warn"]
    assert missing[0].fix == "run `memdctl install-hooks --agent codex`"
    install(home, command("codex"))
    settings = tmp_path / ".gemini" / "settings.json"
    install_hooks(settings, command("gemini"), GEMINI_HOOKS)
    assert [check_codex(facts).verdict, check_gemini(facts).verdict] == ["ok", "ok"]

    trusted = (home / "config.toml").read_text()
    (home / "config.toml").write_text(CODEX_CONFIG)  # the trust gone: Codex skips the hooks
    untrusted = check_codex(facts)
    assert untrusted.verdict == "fail" and "trust" in untrusted.detail
    (home / "config.toml").write_text(trusted + "\n[features]\nhooks = false\n")
    assert check_codex(facts).verdict == "fail"

    data = json.loads(settings.read_text())
    settings.write_text(json.dumps({**data, "hooksConfig": {"enabled": False}}))
    assert check_gemini(facts).verdict == "fail"
    settings.write_text(json.dumps({"mcpServers": {"memd": {"command": "memd-mcp"}}}))
    over_mcp = check_gemini(facts)
    assert over_mcp.verdict == "ok" and "MCP" in over_mcp.detail


def test_codex_hooks_and_mcp_share_one_backup_of_config_toml(tmp_path: Path) -> None:
    """install-hooks and install-mcp both edit Codex's config.toml: the backup stays the
    user's original whichever runs first, and undoing both, in any order, gives it back."""
    orders = [("hooks", "mcp"), ("mcp", "hooks")]
    for installs, removals in itertools.product(orders, orders):
        root = tmp_path / f"{'-'.join(installs)}_{'-'.join(removals)}"
        root.mkdir()
        home = codex_home(root)
        env = {"HOME": str(root), "PATH": "/nonexistent"}
        for step in installs:
            if step == "hooks":
                install(home, command("codex"))
            else:
                apply(["codex"], "user", "install", root, env)
        backup = home / "config.toml.memd-backup"
        assert read_backup(backup) == Original(CODEX_CONFIG.encode())
        for step in removals:
            if step == "hooks":
                uninstall(home)
            else:
                apply(["codex"], "user", "uninstall", root, env)
        assert (home / "config.toml").read_text() == CODEX_CONFIG
        assert not backup.exists()


def test_install_refuses_a_gemini_settings_file_with_comments_and_says_why(
    tmp_path: Path,
) -> None:
    """Gemini reads comments in settings.json; memd does not rewrite the file without them."""
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    original = '{\n  // my theme\n  "theme": "dark"\n}\n'
    settings.write_text(original)
    env = {
        "HOME": str(tmp_path),
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    done = run_memdctl(env, "install-hooks", "--agent", "gemini")
    assert done.returncode == 2
    assert "comments" in done.stderr and str(settings) in done.stderr
    assert settings.read_text() == original


def test_a_fifo_as_an_agents_config_is_refused_by_doctor_and_install_never_waited_on(
    tmp_path: Path,
) -> None:
    """An agent writes its own folder: a FIFO planted as its ``config.toml`` or
    ``settings.json`` is refused as not a regular file, and ``doctor`` says so, instead of
    both waiting forever for a writer."""
    facts = Facts({}, tmp_path)
    home = codex_home(tmp_path)
    (tmp_path / ".gemini").mkdir()
    fifos = [home / "config.toml", tmp_path / ".gemini" / "settings.json"]
    for fifo in fifos:
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
    seen: dict[str, object] = {}

    def run() -> None:
        seen["codex"], seen["gemini"] = check_codex(facts), check_gemini(facts)
        try:
            install(home, command("codex"))
        except (OSError, ValueError) as exc:
            seen["install"] = exc

    assert not waited_on_fifos(run, fifos)
    for name in ("codex", "gemini"):
        check = seen[name]
        assert isinstance(check, Check) and check.verdict == "fail", (name, check)
        assert "not a regular file" in check.detail
    assert "not a regular file" in str(seen["install"])
    assert all(stat.S_ISFIFO(fifo.lstat().st_mode) for fifo in fifos)  # nothing written


@pytest.mark.skipif(not IS_ROOT, reason="needs root to hand the files to another user")
@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_codex_config_the_disk_refuses_leaves_hooks_json_as_it_was(action: str) -> None:
    """config.toml cannot be replaced (a sticky folder, root's file) after hooks.json was
    rewritten: hooks.json and its backup come back as they were (no hook without its trust,
    no trust without its hook), and the exit code and message say which file and why."""
    import tempfile

    from memd.install import codex_hooks

    work = Path(tempfile.mkdtemp(prefix="memd-codex-"))  # not tmp_path: nobody must enter
    try:
        work.chmod(0o755)
        home = codex_home(work, {"UserPromptSubmit": [{"hooks": [USER_HOOK]}]})
        if action == "uninstall":
            install(home, command("codex"))
        home.chmod(0o1777)  # anyone may create; only a file's owner may replace or remove it
        for name in ("hooks.json", "hooks.json.memd-backup"):
            if (home / name).exists():
                os.chown(home / name, NOBODY, NOBODY)
        before = {p.name: p.read_bytes() for p in home.iterdir()}
        argv = [action, f"--command={command('codex')}"] if action == "install" else [action]

        exited = run_forked(
            lambda: codex_hooks.main(argv),
            uid=NOBODY,
            env={"CODEX_HOME": str(home), "HOME": str(work)},
        )
        assert exited.code == codex_hooks.EXIT_FAILED, exited
        assert exited.stderr.startswith(f"cannot write {home / 'config.toml'}: Operation not")
        assert {p.name: p.read_bytes() for p in home.iterdir()} == before
    finally:
        shutil.rmtree(work)
