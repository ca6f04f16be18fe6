"""A repository with memories whose use a real agent's session shows, one way each (issue 36,
item 2): what the usage tests of every agent share.

:data:`MEMORIES` are five memories a prompt (:data:`PROMPT`) recalls together, lexically (no
model key reaches the test's daemon): the agent quotes the deploy memory's command, opens the
file the settings memory cites, reads the release memory over memd's MCP server, cites the
style memory in a citation tag (Codex's), and leaves the coffee memory alone.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from memd.memory.paths import memory_dir
from tests.daemon_harness import Home, call, memdctl, wait_for

MEMORIES = {
    "deploy_command.md": (
        "deploy command",
        "How this repository is deployed to production",
        "Deploys go out with `make ship`, never by hand.",
    ),
    "settings_file.md": (
        "settings file",
        "Where the service reads its settings",
        "The service reads conf/settings.toml at start; the listening port is set there.",
    ),
    "release_train.md": (
        "release train",
        "When releases leave",
        "Releases are cut every Thursday at 10:00 UTC by the release captain.",
    ),
    "style_guide.md": (
        "style guide",
        "How code is written here",
        "Indent with four spaces, never tabs; line length is 100.",
    ),
    "coffee_machine.md": (
        "coffee machine",
        "Where the office coffee machine is",
        "The coffee machine sits on the second floor, next to the printers.",
    ),
}
PROMPT = (
    "Before the release: the deploy command, the settings file, the release train, the style "
    "guide and the coffee machine. What do we do?"
)
# The agent's last words: the deploy memory's command, nothing of the coffee machine's.
ANSWER = "Run `make ship` once the checks pass."
CITATION = (
    "\n\n<oai-mem-citation>\n<citation_entries>\nstyle_guide.md:6-6|note=[indentation]\n"
    "</citation_entries>\n<rollout_ids>\n</rollout_ids>\n</oai-mem-citation>"
)
SETTINGS = "conf/settings.toml"


def repository(home: Home) -> Path:
    """A git repository with the settings file, and its memory dir with :data:`MEMORIES`."""
    repo = home.root / "work" / "repo"
    (repo / "conf").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / SETTINGS).write_text("port = 8080\n")
    folder = memory_dir(home.projects, repo)
    folder.mkdir(parents=True)
    for file, (name, description, body) in MEMORIES.items():
        text = f"---\nname: {name}\ndescription: {description}\ntype: project\n---\n\n{body}\n"
        (folder / file).write_text(text)
    return repo


def install_mcp(home: Home, agent: str) -> None:
    """memd's MCP server for ``agent`` (with this checkout's tree when the tests run from
    one: the agent does not pass ``PYTHONPATH`` on by itself)."""
    done = memdctl(home, "install-mcp", "--agent", agent)
    assert done.returncode == 0, done.stderr
    extra = os.environ.get("PYTHONPATH")
    if agent == "codex" and extra:
        config = home.root / ".codex" / "config.toml"
        text = config.read_text() + f"\n[mcp_servers.memd.env]\nPYTHONPATH = {json.dumps(extra)}\n"
        config.write_text(text)


def usage_rows(home: Home, repo: Path) -> dict[str, dict[str, Any]]:
    """``memdctl memories --json``'s rows, by file."""
    done = memdctl(home, "memories", "--json", str(repo))
    assert done.returncode == 0, done.stderr
    return {row["relative"]: row for row in json.loads(done.stdout)["memories"]}


def wait_judged(home: Home, repo: Path, used: set[str]) -> dict[str, dict[str, Any]]:
    """Wait until every memory in ``used`` shows a use; the rows then."""

    def judged() -> dict[str, dict[str, Any]] | None:
        rows = usage_rows(home, repo)
        return rows if all(rows[f]["used"] for f in used) else None

    try:
        return wait_for(judged, timeout=60, what=f"the uses of {sorted(used)}")
    except AssertionError:
        raise AssertionError(
            (usage_rows(home, repo), call(home, "status")["memory"]["usage"])
        ) from None
