"""The agents' tools while another process flips a folder of the area to a link out (issue 22).

A separate process swaps ``mem/sub`` (a real folder) with a symbolic link to an outside
folder of canaries, as fast as it can (``renameat2(RENAME_EXCHANGE)``: one instant the name
is the folder, the next the link). Meanwhile every tool kind is called on paths through
``sub``: Read, Shell with ``cat``/``grep``/``ls``, Glob, Grep, Write and Edit. Not one
result may hold an outside byte (the canary's text or a canary's name), nothing outside may
change, and no call may raise out of its tool.

CI runs :data:`CALLS` calls per kind (300); ``MEMD_FLIPPER_CALLS=2000`` (``scripts/flipper``)
runs the acceptance count.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from memd.agent.files import FileLimits
from memd.agent.permissions import MemoryDirPolicy
from memd.agent.process import ShellLimits
from memd.agent.tools import Tool, make_tools

CALLS = int(os.environ.get("MEMD_FLIPPER_CALLS", "300"))
CANARY = "OUTSIDE-CANARY-4b7e"

FLIPPER = r"""
import ctypes, os, sys
name, spare = (os.fsencode(a) for a in sys.argv[1:3])
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
print("ready", flush=True)
while True:
    if libc.renameat2(AT_FDCWD, name, AT_FDCWD, spare, RENAME_EXCHANGE) != 0:
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
"""


@contextmanager
def flipping(name: Path, spare: Path) -> Iterator[None]:
    """Inside, :data:`FLIPPER` swaps ``name`` and ``spare`` as fast as it can (started and
    ready first); it must still be flipping at the end, and is killed on any way out."""
    flipper = subprocess.Popen(
        [sys.executable, "-c", FLIPPER, str(name), str(spare)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert flipper.stdout is not None and flipper.stdout.readline() == "ready\n"
        yield
        assert flipper.poll() is None, "the flipper stopped"
    finally:
        flipper.send_signal(signal.SIGKILL)
        flipper.wait()
        if flipper.stdout is not None:
            flipper.stdout.close()


def tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


CALLS_BY_KIND: dict[str, tuple[str, dict[str, Any]]] = {
    "Read": ("Read", {"file_path": "sub/inner.md"}),
    "Shell cat": ("Shell", {"command": "cat sub/inner.md"}),
    "Shell grep": ("Shell", {"command": "grep -r -e inside -e CANARY ."}),
    "Shell ls": ("Shell", {"command": "ls -R sub"}),
    "Glob": ("Glob", {"pattern": "**/*.md"}),
    "Grep": ("Grep", {"pattern": "inside|CANARY", "output_mode": "content"}),
    "Write": ("Write", {"file_path": "sub/written.md", "content": "inside, written\n"}),
    "Edit": ("Edit", {"file_path": "sub/inner.md", "old_string": "", "new_string": ""}),
}


def edit_args(i: int) -> dict[str, Any]:
    """Edits that toggle the inside file between two states (through a link they would
    change the outside file, which holds the same text)."""
    old, new = ("state A", "state B") if i % 2 == 0 else ("state B", "state A")
    return {"file_path": "sub/inner.md", "old_string": old, "new_string": new}


def test_no_tool_reads_or_writes_outside_through_a_flipping_folder(tmp_path: Path) -> None:
    mem, outside = tmp_path / "mem", tmp_path / "outside"
    (mem / "sub").mkdir(parents=True)
    outside.mkdir()
    (mem / "top.md").write_text("inside top\n")
    (mem / "sub" / "inner.md").write_text("inside state A\n")
    (outside / "inner.md").write_text(f"{CANARY} state A\n")
    (outside / f"{CANARY}.md").write_text(f"{CANARY}\n")
    spare = tmp_path / "spare"
    spare.symlink_to(outside)
    before = tree_hash(outside)
    tools = make_tools(
        MemoryDirPolicy(mem),
        ["Read", "Shell", "Glob", "Grep", "Write", "Edit"],
        cwd=mem,
        limits=ShellLimits(timeout_s=30),
        file_limits=FileLimits(write_max_run_bytes=1 << 30),
    )
    with flipping(mem / "sub", spare):
        seen = anyio.run(call_every_kind, tools)
    print(f"\n{CALLS} calls a kind while flipping: {dict(sorted(seen.items()))}")
    assert seen["leaked"] == 0, seen
    assert seen["raised"] == 0, seen
    assert tree_hash(outside) == before, "a write went through the link"
    # The race was real: calls met the folder, and calls met the link.
    assert seen["inside"] > 0 and seen["refused"] > 0, seen


async def call_every_kind(tools: dict[str, Tool]) -> Counter[str]:
    seen: Counter[str] = Counter()
    for kind, (name, args) in CALLS_BY_KIND.items():
        for i in range(CALLS):
            call_args = edit_args(i) if kind == "Edit" else args
            try:
                with anyio.fail_after(60):
                    result = await tools[name].run(call_args)
            except Exception:
                seen["raised"] += 1
                continue
            seen["leaked"] += CANARY in result.content
            seen["inside"] += "inside" in result.content or not result.is_error
            seen["refused"] += result.is_error
            seen[kind] += 1
    return seen
