"""Which project an MCP call is about: argument, roots, CLAUDE_PROJECT_DIR, cwd; HOME and /
refused with the way to name one."""

from __future__ import annotations

from pathlib import Path

from memd.mcp.project import HOW_TO_NAME, NoProject, Project, path_from_root, resolve_project


def test_order_argument_roots_env_cwd(tmp_path: Path) -> None:
    dirs = {n: tmp_path / n for n in ("arg", "root", "env", "cwd")}
    for d in dirs.values():
        d.mkdir()
    roots = [f"file://{dirs['root']}"]
    home = str(tmp_path)
    args = (str(dirs["arg"]), roots, str(dirs["env"]), str(dirs["cwd"]), home)
    assert resolve_project(*args) == Project(str(dirs["arg"]), "argument")
    assert resolve_project(None, *args[1:]) == Project(str(dirs["root"]), "roots")
    assert resolve_project(None, [], *args[2:]) == Project(str(dirs["env"]), "CLAUDE_PROJECT_DIR")
    assert resolve_project(None, [], None, *args[3:]) == Project(
        str(dirs["cwd"]), "working directory"
    )


def test_home_and_root_are_refused_with_how_to_name_the_project(tmp_path: Path) -> None:
    home = str(tmp_path)
    for cwd in (home, home + "/", "/", "//"):
        found = resolve_project(None, [], None, cwd, home)
        assert isinstance(found, NoProject) and HOW_TO_NAME in found.reason
    link = tmp_path / "proj" / "home-link"
    link.parent.mkdir()
    link.symlink_to(tmp_path)
    assert isinstance(resolve_project(str(link), [], None, None, home), NoProject)
    assert isinstance(resolve_project(None, ["file:///"], None, str(link.parent), home), NoProject)


def test_bad_values_are_refused(tmp_path: Path) -> None:
    for value in ("relative/dir", str(tmp_path / "missing"), "/tmp/\x00x"):
        found = resolve_project(value, [], None, None, None)
        assert isinstance(found, NoProject) and HOW_TO_NAME in found.reason
    assert isinstance(resolve_project(None, [], None, None, None), NoProject)


def test_root_uris() -> None:
    assert path_from_root("file:///home/u/my%20repo") == "/home/u/my repo"
    assert path_from_root("file://localhost/x") == "/x"
    for uri in ("https://example.com/x", "file://otherhost/x", "file:relative", "x"):
        assert path_from_root(uri) is None
    # Non-file roots are skipped, not fatal.
    assert isinstance(resolve_project(None, ["https://x"], None, None, None), NoProject)


def test_the_server_imports_no_daemon_internals() -> None:
    """memd-mcp starts with the SDK and the msgpack client only (R-I4: a thin face)."""
    import subprocess
    import sys

    code = (
        "import sys, memd.mcp.server; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('anthropic', 'tiktoken', 'yaml', 'tomlkit') or m.startswith("
        "('memd.daemon', 'memd.memory', 'memd.ipc', 'memd.llm', 'memd.config')))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
