"""Memory files as Claude Code 2.1.331 itself writes them (issue 25), read by memd.

The real CLI (``NEWEST_VERSION``) runs ``claude -p`` against a loopback model scripted to call
its Write tool on the memory dir its system prompt names: two linked memories (one pinned),
and an index with an HTML comment block. The CLI stamps what it stamps (``metadata.modified``,
``originSessionId``); memd then reads those files as they are on disk: the type under
``metadata``, the ISO ``modified``, ``pinned``, the ``[[name]]`` link, the index counted
without its comment, and a ``remember`` update that keeps every key the CLI wrote.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from memd.memory.frontmatter import links, modified_ms, parse_document
from memd.memory.index import load_index, parse_index
from memd.memory.pinned import linked_headers, pinned_headers
from memd.memory.recall import load_memory
from memd.memory.remember import Limits, MemoryDraft, write_memory
from memd.memory.scan import opened_area, scan_memories
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.loopback_replies import When
from tests.claude_cli import ClaudeCLI

DEPLOY = (
    "---\nname: deploy-flow\ndescription: how deploys go out\nmetadata:\n  type: project\n"
    "  pinned: true\n---\n\nDeploys use the 10 minute canary; see [[canary-dashboard]].\n"
)
DASHBOARD = (
    "---\nname: canary-dashboard\ndescription: where the canary's graphs are\nmetadata:\n"
    "  type: reference\n---\n\nThe canary dashboard is grafana/d/canary.\n"
)
INDEX = (
    "<!--\nKept by Claude Code.\nOne line per memory.\n-->\n"
    "- [Deploy flow](deploy-flow.md) — how deploys go out\n"
    "- [Canary dashboard](canary-dashboard.md) — where the canary's graphs are\n"
)


def written_by_claude(cli: ClaudeCLI, root: Path) -> Path:
    """The memory dir after the real CLI wrote the three files into it."""
    home, project = root / "home", root / "proj"
    project.mkdir(parents=True)
    home.mkdir()
    with LoopbackAPI(profile="real_client", default_text="Saved.") as api:
        env = cli.env({"HOME": str(home), "PATH": os.environ.get("PATH", "")}, api.url)
        first = cli.run(["-p", "hi"], cwd=project, env=env, timeout=60)  # learn the dir
        assert first.returncode == 0, first.stderr
        system = json.dumps(next(r.body for r in api.requests if r.body.get("tools"))["system"])
        named = re.search(r"persistent file-based memory at `([^`]+)`", system)
        assert named is not None, "2.1.331 names its memory dir in the system prompt"
        mdir = Path(named.group(1))
        calls = [
            ("Write", {"file_path": str(mdir / "deploy-flow.md"), "content": DEPLOY}),
            ("Write", {"file_path": str(mdir / "canary-dashboard.md"), "content": DASHBOARD}),
            ("Write", {"file_path": str(mdir / "MEMORY.md"), "content": INDEX}),
        ]
        api.add_rule(When(turn="first", tool="Write"), replies.tool_uses(calls), times=1)
        done = cli.run(
            ["-p", "remember how deploys go", "--permission-mode", "acceptEdits"],
            cwd=project,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    return mdir


def test_memd_reads_the_memories_claude_code_writes(
    claude_cli_newest: ClaudeCLI, tmp_path: Path
) -> None:
    mdir = written_by_claude(claude_cli_newest, tmp_path)
    deploy = parse_document((mdir / "deploy-flow.md").read_text())
    meta = deploy.meta
    assert deploy.problems == (), deploy.problems
    assert (meta.name, meta.type, meta.pinned) == ("deploy-flow", "project", True)
    stamped = modified_ms(meta)  # Claude Code stamps an ISO modified of its own
    assert stamped is not None
    mtime_ms = (mdir / "deploy-flow.md").stat().st_mtime_ns // 1_000_000
    assert abs(stamped - mtime_ms) < 60_000
    assert links(deploy.body) == ("canary-dashboard",)

    headers = scan_memories(mdir)
    assert [h.relative for h in pinned_headers(headers, ())] == ["deploy-flow.md"]
    with opened_area(mdir) as area:
        assert area is not None
        picked = [load_memory(area, h, mtime_ms) for h in headers if h.relative == "deploy-flow.md"]
    hop = linked_headers([m for m in picked if m is not None], headers, ())
    assert [(h.relative, via) for h, via in hop] == [("canary-dashboard.md", "deploy-flow.md")]

    index = (mdir / "MEMORY.md").read_text()
    loaded = load_index(index, max_lines=2)  # the comment block is not loaded nor counted
    assert not loaded.truncated and "Kept by Claude Code" not in loaded.text
    assert [e.file for e in parse_index(loaded.text)] == ["deploy-flow.md", "canary-dashboard.md"]

    draft = MemoryDraft("project", "deploy-flow", "how deploys go out", "Canary is 15 min.")
    updated = write_memory(mdir, draft, Limits(index_max_lines=2))  # the index still fits
    assert (updated.relative, updated.created) == ("deploy-flow.md", False)
    after = parse_document((mdir / "deploy-flow.md").read_text()).meta
    assert after.pinned and after.type == "project"
    nested = dict(after.extra)["metadata"]
    before = dict(meta.extra)["metadata"]
    assert "originSessionId" in before
    kept = {k: v for k, v in before.items() if k != "modified"}
    assert {k: nested[k] for k in kept} == kept  # Claude Code's own keys survive
