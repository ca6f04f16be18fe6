"""Config files are edited where they live (issue 33, item 2): a linked config is edited at
its target and stays a link, the backup is memd's own file and nothing else at its name is
ever copied into the config, uninstall gives the exact bytes back, and a config memd cannot
use is refused with one line naming it (no traceback, an exit code that tells the truth)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.install import codex_hooks
from memd.install.agents import apply
from memd_client import hook as hook_module
from memd_client.agents import named
from memd_client.agents.claude_code import HOOKS as CLAUDE_HOOKS
from memd_client.agents.claude_code import TAKEOVER_HOOKS as CLAUDE_TAKEOVER_HOOKS
from memd_client.config_backup import Original, backup_bytes, read_backup
from memd_client.hooks_install import (
    hook_command,
    install_hooks,
    uninstall_hooks,
)
from tests.daemon_harness import run_memdctl
from tests.uid_support import IS_ROOT, NOBODY, run_forked

ORIGINAL = b'{\n  "theme": "dark",\n  "hooks": {}\n}\n'


def command(agent: str = "claude") -> str:
    table = named(agent)
    assert table is not None
    return hook_command(sys.executable, hook_module.__file__, table.hook_name)


def cli_env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join(sys.path),
    }


# ---------------------------------------------------------------------------------------------
# Links


def test_a_linked_claude_settings_file_is_edited_at_its_target_and_stays_a_link(
    tmp_path: Path,
) -> None:
    """Issue 33: install-hooks turned a symlinked settings.json (a dotfiles repository's
    layout) into a regular file, and uninstall never gave the link back."""
    dotfiles = tmp_path / "dotfiles" / "claude.json"
    dotfiles.parent.mkdir()
    dotfiles.write_bytes(ORIGINAL)
    settings_file = tmp_path / ".claude" / "settings.json"
    settings_file.parent.mkdir()
    settings_file.symlink_to("../dotfiles/claude.json")
    install_hooks(settings_file, command(), CLAUDE_HOOKS)
    assert os.readlink(settings_file) == "../dotfiles/claude.json"
    assert "SessionStart" in json.loads(dotfiles.read_text())["hooks"]
    assert read_backup(dotfiles.with_name("claude.json.memd-backup")) == Original(ORIGINAL)
    uninstall_hooks(settings_file)
    assert os.readlink(settings_file) == "../dotfiles/claude.json"
    assert dotfiles.read_bytes() == ORIGINAL
    assert sorted(p.name for p in dotfiles.parent.iterdir()) == ["claude.json"]


def test_linked_codex_files_are_edited_at_their_targets_and_stay_links(tmp_path: Path) -> None:
    home = tmp_path / ".codex"
    home.mkdir()
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    before = {"config.toml": b'model = "o3"\n', "hooks.json": b'{"hooks": {}}'}
    for name, data in before.items():
        (dotfiles / name).write_bytes(data)
        (home / name).symlink_to(dotfiles / name)
    codex_hooks.install(home, command("codex"))
    apply(["codex"], "user", "install", tmp_path, {"HOME": str(tmp_path), "PATH": "/none"})
    assert all((home / name).is_symlink() for name in before)
    assert "trusted_hash" in (dotfiles / "config.toml").read_text()
    assert "[mcp_servers.memd]" in (dotfiles / "config.toml").read_text()
    codex_hooks.uninstall(home)
    apply(["codex"], "user", "uninstall", tmp_path, {"HOME": str(tmp_path), "PATH": "/none"})
    assert {name: (dotfiles / name).read_bytes() for name in before} == before
    assert all((home / name).is_symlink() for name in before)
    assert sorted(p.name for p in dotfiles.iterdir()) == sorted(before)


# ---------------------------------------------------------------------------------------------
# The backup is memd's own


def planted(kind: str, backup: Path, outside: Path, original: bytes) -> None:
    """Something at the backup's name that memd did not write: each says the same as
    ``original`` when parsed, in bytes of its own (``outside``'s)."""
    if kind == "symlink":
        backup.symlink_to(outside)
    elif kind == "hardlink":
        os.link(outside, backup)
    elif kind == "forged digest":
        backup.write_bytes(b"memd-backup 1 sha256=" + b"0" * 64 + b"\n" + outside.read_bytes())
    elif kind == "plain copy":
        backup.write_bytes(outside.read_bytes())


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "forged digest", "plain copy"])
def test_a_planted_backup_is_never_copied_into_the_config(tmp_path: Path, kind: str) -> None:
    """Issue 33: a planted ``<config>.memd-backup`` symlink to an outside file: uninstall
    copied that file's bytes into the config when they parsed alike."""
    settings_file = tmp_path / "settings.json"
    settings_file.write_bytes(ORIGINAL)
    outside = tmp_path / "elsewhere" / "secret.json"
    outside.parent.mkdir()
    outside.write_bytes(b'{"hooks":{},  "theme":"dark"}  \n\n  ')  # parses as ORIGINAL does
    backup = tmp_path / "settings.json.memd-backup"
    planted(kind, backup, outside, ORIGINAL)
    before = backup.lstat()
    done = install_hooks(settings_file, command(), CLAUDE_HOOKS)
    assert any(line.startswith(f"left {backup} alone") for line in done), done
    done = uninstall_hooks(settings_file)
    assert any(line.startswith(f"left {backup} alone") for line in done), done
    assert settings_file.read_bytes() != outside.read_bytes()
    assert json.loads(settings_file.read_bytes()) == {"theme": "dark"}
    assert outside.read_bytes() == b'{"hooks":{},  "theme":"dark"}  \n\n  '
    after = backup.lstat()
    assert (after.st_ino, after.st_mode, after.st_size) == (
        before.st_ino,
        before.st_mode,
        before.st_size,
    )


@pytest.mark.skipif(not IS_ROOT, reason="needs root to give the backup to another user")
def test_a_backup_of_another_user_is_not_trusted(tmp_path: Path) -> None:
    """Run as an unprivileged user whose folder holds a well-formed backup that root owns:
    it is not the user's, so it is never put back."""
    work = Path(tempfile.mkdtemp(prefix="memd-backup-owner-"))
    try:
        work.chmod(0o755)
        settings_file = work / "settings.json"
        settings_file.write_bytes(ORIGINAL)
        os.chown(work, NOBODY, NOBODY)
        os.chown(settings_file, NOBODY, NOBODY)
        backup = work / "settings.json.memd-backup"
        backup.write_bytes(backup_bytes(b'{"hooks": {}, "theme": "dark"}'))  # root's

        def child() -> int:
            install_hooks(settings_file, command(), CLAUDE_HOOKS)
            done = uninstall_hooks(settings_file)
            sys.stderr.write("\n".join(done))
            return 0 if settings_file.read_bytes() != backup.read_bytes()[86:] else 1

        exited = run_forked(child, uid=NOBODY)
        assert exited.code == 0, exited.stderr
        assert "it belongs to another user" in exited.stderr
    finally:
        shutil.rmtree(work)


def test_every_shape_of_hooks_comes_back_byte_for_byte(tmp_path: Path) -> None:
    """Issue 33: ``"hooks": {}`` was not given back byte for byte; nor were an event's empty
    list, a user's empty group, CRLF line ends or a byte order mark."""
    shapes = [
        ORIGINAL,
        b'{"hooks": {"Stop": []}}',
        b'{"hooks": {"SessionStart": [{"matcher": "x", "hooks": []}]}}',
        b'{\r\n\t"model": "x"\r\n}\r\n',
        b'\xef\xbb\xbf{"model": "\xc3\xa9"}\n',
        b"",
        b"   \n",
    ]
    for i, original in enumerate(shapes):
        settings_file = tmp_path / f"{i}.json"
        settings_file.write_bytes(original)
        install_hooks(settings_file, command(), CLAUDE_TAKEOVER_HOOKS)
        assert settings_file.read_bytes() != original
        uninstall_hooks(settings_file)
        assert settings_file.read_bytes() == original, original
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{i}.json" for i in range(len(shapes))]


# ---------------------------------------------------------------------------------------------
# A config memd cannot use: one line, the truth in the exit code, nothing written


def unusable_configs(tmp_path: Path) -> Iterator[tuple[str, Path, bytes, str]]:
    """(agent, file, bytes, what the line says) for each refusal."""
    deep_json = b"{" + b'"a": [' * 100_000 + b"]" * 100_000 + b"}"
    yield "claude", tmp_path / ".claude" / "settings.json", deep_json, "nests deeper than 64"
    yield "gemini", tmp_path / ".gemini" / "settings.json", deep_json, "nests deeper than 64"
    big = b'{"a": "' + b"x" * (9 * 1024 * 1024) + b'"}'
    yield "claude", tmp_path / ".claude" / "settings.json", big, "is larger than"
    yield "claude", tmp_path / ".claude" / "settings.json", b'{"a": "\xff"}', "is not UTF-8"
    deep_toml = b"a = " + b"[" * 100_000 + b"]" * 100_000 + b"\n"
    yield "codex", tmp_path / ".codex" / "config.toml", deep_toml, "nests deeper than 64"
    dotted = b"a" + b".a" * 100_000 + b" = 1\n"
    yield "codex", tmp_path / ".codex" / "config.toml", dotted, "dotted key of more than 64"


@pytest.mark.parametrize("case", range(6))
def test_a_config_too_deep_or_too_large_is_refused_in_one_line(tmp_path: Path, case: int) -> None:
    """Issue 33: a 100k-deep JSON or TOML config gave a Python traceback."""
    agent, path, data, said = list(unusable_configs(tmp_path))[case]
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    for args in (["install-hooks", "--agent", agent], ["uninstall-hooks", "--agent", agent]):
        done = run_memdctl(cli_env(tmp_path), *args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, done
        assert len(lines) == 1 and lines[0].startswith(f"memdctl: {path} "), lines
        assert said in lines[0] and "Traceback" not in done.stderr, lines
    assert path.read_bytes() == data
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    mcp_file = tmp_path / ".claude.json" if agent == "claude" else path
    mcp_file.write_bytes(data)
    mcp = run_memdctl(cli_env(tmp_path), "install-mcp", "--agent", agent)
    assert mcp.returncode == 1 and "Traceback" not in mcp.stderr + mcp.stdout, mcp
    assert f"failed    {mcp_file} ({mcp_file}" in mcp.stdout and said in mcp.stdout, mcp.stdout
    assert mcp_file.read_bytes() == data
    assert not mcp_file.with_name(mcp_file.name + ".memd-backup").exists()


# ---------------------------------------------------------------------------------------------
# Generated shapes: install, then uninstall, gives the bytes back


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=8),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
USER_GROUP = {"hooks": [{"type": "command", "command": "/usr/local/bin/audit", "timeout": 5}]}
HOOKS: st.SearchStrategy[dict[str, Any] | None] = st.sampled_from(
    [
        None,
        {},
        {"Stop": []},
        {"SessionStart": []},
        {"PreToolUse": [USER_GROUP]},
        {"SessionStart": [{"matcher": "startup", **USER_GROUP}]},
        {"UserPromptSubmit": [{"hooks": []}]},
    ]
)
SERVERS = st.sampled_from([None, {}, {"github": {"command": "gh-mcp", "args": []}}])


@st.composite
def json_configs(draw: st.DrawFn) -> bytes:
    names = st.text(max_size=6).filter(lambda k: k not in ("hooks", "mcpServers"))
    data: dict[str, Any] = draw(st.dictionaries(names, JSON_VALUES, max_size=4))
    for key, values in (("hooks", HOOKS), ("mcpServers", SERVERS)):
        value = draw(values)
        if value is not None:
            data[key] = value
    keys = draw(st.permutations(list(data)))
    data = {k: data[k] for k in keys}
    indent = draw(st.sampled_from([None, 2, 4, "\t"]))
    compact = indent is None and draw(st.booleans())
    text = json.dumps(
        data,
        indent=indent,
        ensure_ascii=draw(st.booleans()),
        separators=(",", ":") if compact else None,
    )
    text += draw(st.sampled_from(["", "\n", "\n\n", "  "]))
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    raw = text.encode("utf-8", "surrogatepass")
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + raw


TOML_PIECES = st.sampled_from(
    [
        "# my codex settings\n",
        'model = "o3"  # the default\n',
        "[features]\nweb_search = true\n",
        "[hooks]\n",
        "[hooks.state]\n",
        "[mcp_servers]\n",
        '[mcp_servers.docs]\ncommand = "docs-mcp"\nargs = ["--port", "0"]\n',
        '[profiles.fast]\nmodel = "o4-mini"\n',
        "a.b.c = 1\n",
        'inline = { x = 1, y = [1, 2, { z = "w" }] }\n',
        "\n",
        'text = """\nlines\n[not a table]\n"""\n',
    ]
)


@st.composite
def toml_configs(draw: st.DrawFn) -> bytes:
    pieces = draw(st.lists(TOML_PIECES, max_size=6, unique=True))
    top = [p for p in pieces if not p.startswith("[")]  # keys before any table
    text = "".join(top + [p for p in pieces if p.startswith("[")])
    if text and draw(st.booleans()):
        text = text.rstrip("\n")
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + text.encode()


LINKS = st.sampled_from(["none", "absolute", "relative", "chain", "dangling"])


@contextmanager
def scratch() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="memd-shapes-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def place(path: Path, data: bytes | None, link: str, root: Path) -> Path:
    """Put ``data`` at ``path`` (none: no file), through ``link``; the file it lands in."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if link == "none":
        if data is not None:
            path.write_bytes(data)
        return path
    target = root / "dotfiles" / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if data is not None and link != "dangling":
        target.write_bytes(data)
    if link == "chain":
        middle = root / "middle" / path.name
        middle.parent.mkdir(parents=True, exist_ok=True)
        middle.symlink_to(target)
        path.symlink_to(middle)
    elif link == "relative":
        path.symlink_to(os.path.relpath(target, path.parent))
    else:
        path.symlink_to(target)
    return target


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry below ``root``: links by their target, files by their bytes."""
    seen: dict[str, tuple[str, bytes]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                seen[rel] = ("link", os.readlink(path).encode())
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    seen[rel] = ("file", f.read())
            else:
                seen[rel] = ("dir", b"")
    return seen


def round_trip(root: Path, steps: list[Callable[[], object]]) -> None:
    """Run ``steps`` (installs, then uninstalls) from ``root``'s state; it comes back."""
    before = snapshot(root)
    for step in steps:
        step()
    assert snapshot(root) == before


@settings(max_examples=80)
@given(
    original=st.one_of(st.none(), json_configs()),
    agent=st.sampled_from(["claude", "takeover", "gemini"]),
    link=LINKS,
    twice=st.booleans(),
)
def test_json_hooks_files_come_back_byte_for_byte(
    original: bytes | None, agent: str, link: str, twice: bool
) -> None:
    table = named("claude" if agent == "takeover" else agent)
    assert table is not None and table.hooks is not None
    spec = CLAUDE_TAKEOVER_HOOKS if agent == "takeover" else table.hooks.spec
    name = "gemini" if agent == "gemini" else "claude"
    with scratch() as root:
        path = root / "home" / "settings.json"
        place(path, original, link, root)
        steps: list[Callable[[], object]] = []
        if twice:
            steps.append(lambda: install_hooks(path, f"/old/bin/memd-hook {name}", spec))
        steps += [lambda: install_hooks(path, command(name), spec), lambda: uninstall_hooks(path)]
        round_trip(root, steps)


@settings(max_examples=60)
@given(
    original=st.one_of(st.none(), json_configs()),
    agent=st.sampled_from(["claude", "gemini", "cursor"]),
    link=LINKS,
)
def test_json_mcp_files_come_back_byte_for_byte(
    original: bytes | None, agent: str, link: str
) -> None:
    with scratch() as root:
        home = root / "home"
        relative = {"claude": ".claude.json", "gemini": ".gemini/settings.json"}
        path = home / relative.get(agent, ".cursor/mcp.json")
        place(path, original, link, root)
        env = {"HOME": str(home), "PATH": "/nonexistent"}
        outcomes: list[str] = []

        def run(action: str) -> None:
            outcomes.extend(o.result for o in apply([agent], "user", action, home, env))  # type: ignore[arg-type]

        round_trip(root, [lambda: run("install"), lambda: run("uninstall")])
        assert outcomes == ["installed", "removed"]


@settings(max_examples=60)
@given(
    config=st.one_of(st.none(), toml_configs()),
    hooks=st.one_of(st.none(), json_configs()),
    config_link=LINKS,
    hooks_link=st.sampled_from(["none", "absolute"]),
    order=st.permutations(["hooks", "mcp"]),
    undo=st.permutations(["hooks", "mcp"]),
)
def test_codex_files_come_back_byte_for_byte(
    config: bytes | None,
    hooks: bytes | None,
    config_link: str,
    hooks_link: str,
    order: list[str],
    undo: list[str],
) -> None:
    """Codex's config.toml, shared by the hooks' trust and the MCP entry, and hooks.json,
    installed and uninstalled in any order."""
    with scratch() as root:
        home = root / "home" / ".codex"
        place(home / "config.toml", config, config_link, root)
        place(home / "hooks.json", hooks, hooks_link, root / "h")
        env = {"HOME": str(root / "home"), "PATH": "/nonexistent"}
        actions: dict[tuple[str, str], Callable[[], object]] = {
            ("hooks", "install"): lambda: codex_hooks.install(home, command("codex")),
            ("hooks", "uninstall"): lambda: codex_hooks.uninstall(home),
            ("mcp", "install"): lambda: apply(["codex"], "user", "install", root, env),
            ("mcp", "uninstall"): lambda: apply(["codex"], "user", "uninstall", root, env),
        }
        steps = [actions[(what, "install")] for what in order]
        steps += [actions[(what, "uninstall")] for what in undo]
        round_trip(root, steps)
