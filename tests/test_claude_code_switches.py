"""The switches that decide "is Claude Code's auto memory on, and where is its dir" (issue 25),
each checked against the real CLI (``NEWEST_VERSION``): ``claude -p`` runs against a loopback
model, and the memory dir its system prompt names (or no memory section at all) is what memd
must decide from the same settings and environment."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memd.memory.claude_code import decide, moved_memory_dir, read_settings
from memd.memory.paths import memory_dir
from memd.testing.loopback import LoopbackAPI
from tests.claude_cli import NEWEST_VERSION, ClaudeCLI

_NAMED_DIR = re.compile(r"persistent file-based memory at `([^`]+)`")


@dataclass(frozen=True)
class Case:
    env: dict[str, str] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    local: dict[str, Any] = field(default_factory=dict)
    args: tuple[str, ...] = ()


CASES = {
    "default": Case(),
    "settings off": Case(user={"autoMemoryEnabled": False}),
    "DISABLE=0 forces on": Case(
        env={"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "0"}, user={"autoMemoryEnabled": False}
    ),
    "DISABLE=1": Case(env={"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"}),
    "SIMPLE over DISABLE=0": Case(
        env={"CLAUDE_CODE_SIMPLE": "1", "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "0"}
    ),
    "--bare": Case(args=("--bare",)),
    "user autoMemoryDirectory": Case(user={"autoMemoryDirectory": "~/mem-user"}),
    "local over user": Case(
        user={"autoMemoryDirectory": "~/mem-user"}, local={"autoMemoryDirectory": "~/mem-local"}
    ),
    "cowork over settings": Case(
        env={"CLAUDE_COWORK_MEMORY_PATH_OVERRIDE": "{root}/cowork"},
        user={"autoMemoryDirectory": "~/mem-user"},
    ),
    "cowork ~ not expanded": Case(env={"CLAUDE_COWORK_MEMORY_PATH_OVERRIDE": "~/cowork"}),
    "dir name without config dir": Case(env={"CLAUDE_CODE_PROJECT_DIR_NAME": "shared-name"}),
    "dir name": Case(
        env={"CLAUDE_CODE_PROJECT_DIR_NAME": "shared-name", "CLAUDE_CONFIG_DIR": "{root}/cfg"}
    ),
    "config dir": Case(env={"CLAUDE_CONFIG_DIR": "{root}/cfg"}),
    "dir name not plain": Case(
        env={"CLAUDE_CODE_PROJECT_DIR_NAME": "a.b", "CLAUDE_CONFIG_DIR": "{root}/cfg"}
    ),
}


def claude_says(cli: ClaudeCLI, root: Path, case: Case) -> tuple[str | None, dict[str, str]]:
    """The memory dir the real CLI's system prompt names (``None``: no auto memory), and the
    environment it ran with."""
    home, project = root / "home", root / "proj"
    for folder in (home / ".claude", project / ".claude"):
        folder.mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(json.dumps(case.user))
    (project / ".claude" / "settings.local.json").write_text(json.dumps(case.local))
    env = {k: v.replace("{root}", str(root)) for k, v in case.env.items()}
    with LoopbackAPI(profile="real_client", default_text="OK") as api:
        base = {"HOME": str(home), "PATH": os.environ.get("PATH", ""), **env}
        cli.run([*case.args, "-p", "hi"], cwd=project, env=cli.env(base, api.url), timeout=60)
        asked = [r.body for r in api.requests if isinstance(r.body, dict)]
        main = next(body for body in asked if body.get("tools"))
    named = _NAMED_DIR.search(json.dumps(main.get("system")))
    return (named.group(1).rstrip("/") if named else None), env


@pytest.mark.parametrize("name", CASES)
def test_memd_decides_as_the_real_cli(
    claude_cli_newest: ClaudeCLI, tmp_path: Path, name: str
) -> None:
    case = CASES[name]
    claude, env = claude_says(claude_cli_newest, tmp_path, case)
    home, project = tmp_path / "home", tmp_path / "proj"
    # What memd decides from the same files and the environment the hook forwards (--bare
    # sets CLAUDE_CODE_SIMPLE=1 in the environment its hooks would see).
    seen = {**env, **({"CLAUDE_CODE_SIMPLE": "1"} if "--bare" in case.args else {})}
    settings = read_settings(str(home / ".claude"), str(project))
    default = memory_dir(home / ".claude" / "projects", project)
    facts = decide(settings, seen, NEWEST_VERSION, str(home), default.parent.name)
    moved = moved_memory_dir(settings, seen, str(home), default.parent.name)
    ours = (moved[0] if moved else str(default)) if facts.auto_memory else None
    assert ours == claude, (name, facts)
