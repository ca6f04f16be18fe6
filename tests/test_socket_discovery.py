"""Clients find the daemon whatever environment their agent gives them (issue 24).

Codex CLI starts MCP servers with a short list of variables and no ``XDG_RUNTIME_DIR``; the
daemon under systemd listens in ``/run/user/<uid>/memd``. A client looks in every place the
daemon may be, and never uses a folder someone else made or can write.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from memd_client import hook, paths
from tests.daemon_harness import Home, start_memd, stop_memd
from tests.mcp_support import call, mcp_session, text_of

# What Codex CLI passes to an MCP server (its default env whitelist, seen in 0.169.0 and 0.171.0;
# never XDG_RUNTIME_DIR), and nothing else.
CODEX_ENV_KEYS = ("HOME", "PATH", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR", "TZ")


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    """Stand-ins for /run/user and /tmp/memd-<uid> (both real folders under tmp_path)."""
    run_user = tmp_path / "run" / "user"
    monkeypatch.setattr(paths, "RUN_USER", run_user)
    monkeypatch.setattr(hook, "RUN_USER", str(run_user))
    yield {"systemd": run_user / str(os.getuid()) / "memd", "xdg": tmp_path / "xdg" / "memd"}


def listen(folder: Path, mode: int = 0o700) -> socket.socket:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(mode)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "memd.sock"))
    return sock


def both(env: dict[str, str]) -> str:
    found = str(paths.socket_path(env))
    assert hook.socket_path(env) == found  # the hook's copy agrees
    return found


def test_a_client_without_xdg_runtime_dir_finds_the_systemd_socket(
    places: dict[str, Path],
) -> None:
    with listen(places["systemd"]):
        assert both({}) == str(places["systemd"] / "memd.sock")
        # A shell whose XDG_RUNTIME_DIR names another (empty) place still finds it.
        assert both({"XDG_RUNTIME_DIR": str(places["xdg"].parent)}) == str(
            places["systemd"] / "memd.sock"
        )
    assert both({"MEMD_SOCKET": "/x/s.sock"}) == "/x/s.sock"


@pytest.mark.parametrize("problem", ["open to others", "a link", "another user's"])
def test_a_folder_others_made_or_can_write_is_never_used(
    places: dict[str, Path], tmp_path: Path, problem: str
) -> None:
    folder = places["systemd"]
    if problem == "open to others":
        sock = listen(folder, 0o777)
    elif problem == "a link":
        sock = listen(tmp_path / "elsewhere")
        folder.parent.mkdir(parents=True)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        if os.getuid() != 0:
            pytest.skip("giving a folder to another uid needs root")
        sock = listen(folder)
        os.chown(folder, 65534, 65534)
    with sock:
        found = both({})
    assert found == f"/tmp/memd-{os.getuid()}/memd.sock"  # the daemon's default, not the plant


@pytest.mark.slow
@pytest.mark.anyio
async def test_mcp_answers_under_codexs_environment_from_a_folder_holding_memd(
    tmp_path: Path, systemd_runtime: Path
) -> None:
    """The daemon as systemd starts it; memd-mcp as install-mcp registers it, with only the
    variables Codex passes, started in a folder whose ``memd/`` would shadow the package."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    for shadow in (repo / "memd" / "__init__.py", repo / "memd.py"):
        shadow.parent.mkdir(exist_ok=True)
        shadow.write_text("raise ImportError('the working dir shadowed memd')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMD_"))}
    env.update(HOME=str(tmp_path), XDG_RUNTIME_DIR=str(systemd_runtime))
    home = Home(tmp_path, systemd_runtime, env)
    codex_env = {k: env[k] for k in CODEX_ENV_KEYS if k in env}
    if "PYTHONPATH" in os.environ:  # a development checkout's own tree, not part of the test
        codex_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    assert "XDG_RUNTIME_DIR" not in codex_env
    proc = start_memd(home)
    try:
        async with mcp_session(home, repo, exact_env=codex_env) as session:
            status = await call(session, "memory_status", {})
            assert not status.is_error, text_of(status)
            assert f"project root: {repo}" in text_of(status)
    finally:
        assert stop_memd(proc) == 0
    assert stat.S_ISDIR(os.lstat(systemd_runtime).st_mode)
