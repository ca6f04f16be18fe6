"""The dream agent's tools (R-D3): the memory-dir tools, journaled, plus a narrow transcript
search.

* Read, Grep, Glob, Shell: :class:`~memd.agent.permissions.MemoryDirPolicy` on the memory dir
  only (so a Read of a transcript is denied), outputs scrubbed of secrets and private spans.
* Edit, Write: inside the memory dir; every change they make (a folder a Write makes too) is
  recorded in the run's journal before it is made (:class:`~memd.dream.recorder.Recorder`,
  the guard of their areas), so the run can be undone exactly; when the state disk refuses
  the record, the change is not made and the run ends failed. The lock files and ``.git``
  are refused.
* Delete: only with ``merged_into`` naming a topic file this run already wrote — a memory is
  deleted only when its content was merged into another one (R-M8 holds for the rest).
* ``team/`` (shared with the repository's collaborators) is treated conservatively, here in
  the tools and not only in the prompt (:func:`team_denial`): a team memory is never
  deleted, a personal one is never promoted into it (no new file under ``team/``, no merge
  of a personal memory into a team one); a team memory already there may be edited.
* TranscriptGrep (:mod:`memd.dream.transcripts`): a regex over this project's transcripts,
  returning at most a few dozen clipped, scrubbed excerpts — never a whole transcript.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread

from memd.agent.decision import Deny
from memd.agent.permissions import MemoryDirPolicy, authorize
from memd.agent.places import Root, locate
from memd.agent.tools import Tool, ToolResult, denial, make_tools
from memd.confined import Area, kind_of
from memd.dream import snapshot
from memd.dream.recorder import Recorder
from memd.dream.transcripts import TranscriptGrep
from memd.memory.extract import ScrubbedTool
from memd.memory.frontmatter import parse_document
from memd.memory.paths import TEAM_DIRNAME
from memd.sources.base import DreamScope
from memd.team.provenance import provenance

READ_TOOLS = ("Read", "Grep", "Glob", "Shell")
WRITE_TOOLS = ("Edit", "Write", "Delete")


@dataclass
class Written:
    """The files this run wrote (relative paths), shared by the journaled tools."""

    paths: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class JournaledTool:
    """Edit, Write or Delete on the memory dir, its changes recorded by ``recorder`` (the
    guard of the inner tool's areas); a Delete names the file it was merged into."""

    inner: Tool
    memory_dir: Path  # resolved
    policy: MemoryDirPolicy
    recorder: Recorder
    written: Written

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def description(self) -> str:
        if self.inner.name != "Delete":
            return self.inner.description
        return (
            "Delete one memory file whose content you have merged into another file in this "
            "run. merged_into must name that file (one you already wrote with Edit or Write)."
        )

    @property
    def input_schema(self) -> dict[str, Any]:
        schema = dict(self.inner.input_schema)
        if self.inner.name == "Delete":
            props = {**schema["properties"], "merged_into": {"type": "string"}}
            schema = {**schema, "properties": props, "required": ["file_path", "merged_into"]}
        return schema

    async def run(self, args: Mapping[str, Any]) -> ToolResult:
        raw = args.get("file_path")
        if not isinstance(raw, str):
            return await self.inner.run(args)
        relative = await anyio.to_thread.run_sync(self._relative, raw)
        if isinstance(relative, Deny):
            return denial(relative.reason)
        exists = await anyio.to_thread.run_sync(_is_file, self.memory_dir, relative)
        team = team_denial(self.inner.name, relative, exists=exists)
        if team is not None and not await anyio.to_thread.run_sync(
            self._reconciled, args, relative
        ):
            return denial(team.reason)
        if self.inner.name == "Delete":
            into = await anyio.to_thread.run_sync(self._merge_target, args, relative)
            if isinstance(into, Deny):
                return denial(into.reason)
            self.recorder.merges[relative] = into
            args = {"file_path": raw}
        result = await self.inner.run(args)
        if result.touched:
            self.written.paths.add(relative)
        return result

    def _reconciled(self, args: Mapping[str, Any], relative: str) -> bool:
        """Whether a Delete of the team memory ``relative`` removes a conflict copy (issue
        37: ``metadata.reconcile_with``) merged into the memory it names."""
        into = args.get("merged_into")
        if self.inner.name != "Delete" or not isinstance(into, str):
            return False
        with Area.open(self.memory_dir) as area:
            text = area.read_text(relative, max_bytes=64 * 1024)
        if text is None:
            return False
        marked = provenance(parse_document(text).meta).reconcile_with
        return marked is not None and self._relative(into) == marked

    def _relative(self, raw: str) -> str | Deny:
        """The memory-dir-relative path the call would act on, or why it may not."""
        checked = authorize(self.policy, self.inner.name, raw)
        if isinstance(checked, Deny):
            return checked
        # The place the tool acts on: named beneath the memory dir, never through a link.
        root = Root(self.memory_dir, self.memory_dir)
        place = locate(raw, base=self.memory_dir, roots=(root,), casefold=checked[1].casefold)
        if isinstance(place, Deny):
            return place
        target, relative = place.path, place.relative
        parts = Path(relative).parts
        if (
            snapshot.is_lock_file(relative)
            or ".git" in parts
            or not snapshot.safe_relative(relative)
        ):
            return Deny(f"denied: {target} is memd's or git's own file; leave it alone")
        return relative

    def _merge_target(self, args: Mapping[str, Any], relative: str) -> str | Deny:
        into = args.get("merged_into")
        if not isinstance(into, str) or not into.strip():
            return Deny("denied: Delete needs merged_into: the file that now holds this content")
        checked = self._relative(into)
        if isinstance(checked, Deny):
            return checked
        if checked == relative:
            return Deny("denied: a file cannot be merged into itself")
        if _in_team(checked) and not _in_team(relative):
            return Deny(
                f"denied: {checked} is a team memory, shared with the repository's "
                f"collaborators; a personal memory ({relative}) is never promoted into team/"
            )
        if checked not in self.written.paths or not _is_file(self.memory_dir, checked):
            return Deny(
                f"denied: merge the content into {checked} with Edit or Write first; memories "
                "are deleted only once their content lives in another file"
            )
        return checked


def _in_team(relative: str) -> bool:
    return Path(relative).parts[:1] == (TEAM_DIRNAME,)


def team_denial(tool: str, relative: str, *, exists: bool) -> Deny | None:
    """Why the dream may not act on ``relative`` for ``team/``'s sake, else ``None``: a team
    memory is never deleted (unfamiliar is not wrong: collaborators wrote it), and no file is
    created under ``team/`` (that would promote a personal memory to everyone)."""
    if not _in_team(relative):
        return None
    if tool == "Delete":
        return Deny(
            f"denied: {relative} is a team memory, shared with the repository's "
            "collaborators; the dream never deletes one. Leave it as it is"
        )
    if tool == "Write" and not exists:
        return Deny(
            f"denied: {relative} would be a new team memory; the dream never promotes a "
            "personal memory into team/ (only its collaborators add team memories)"
        )
    return None


def _is_file(memory_dir: Path, relative: str) -> bool:
    """Whether ``relative`` is a regular file of its own beneath the memory dir."""
    try:
        with Area.open(memory_dir) as area:
            info = area.lstat(relative)
    except (OSError, ValueError):
        return False
    return info is not None and kind_of(info) is None


def dream_tools(
    memory_dir: Path,
    recorder: Recorder,
    transcripts: Sequence[DreamScope],
    *,
    secrets: bool = True,
    exclude_session: str = "",
) -> tuple[dict[str, Tool], Written]:
    """The tools of one dream run and the record of what it wrote."""
    resolved = Path(os.path.realpath(memory_dir))
    policy = MemoryDirPolicy(resolved, allow_delete=True)
    base = make_tools(policy, (*READ_TOOLS, *WRITE_TOOLS), cwd=resolved, guard=recorder)
    written = Written()
    tools: dict[str, Tool] = {}
    for name in READ_TOOLS:
        tools[name] = ScrubbedTool(base[name], secrets)
    for name in WRITE_TOOLS:
        tools[name] = ScrubbedTool(
            JournaledTool(base[name], resolved, policy, recorder, written), secrets
        )
    grep = TranscriptGrep(tuple(transcripts), secrets=secrets)
    tools[grep.name] = grep
    return tools, written
