"""Shared pieces of the session-notes tests: transcript builders, a session source, and a
loopback handler that plays a well-behaved notes agent."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio

from memd.config import SessionNotesConfig
from memd.llm.backends import CLAUDE
from memd.session.extract import NotesSettings
from memd.session.template import DEFAULT_SECTIONS
from memd.state import SessionState
from memd.testing import loopback_replies as replies
from memd.testing.loopback_replies import Reply
from memd.transcript.conversation import Conversation

T = TypeVar("T")

MODEL = CLAUDE["session_notes"]
CURRENT_STATE_LINE = f"_{DEFAULT_SECTIONS[1][1]}_"


@dataclass
class TranscriptBuilder:
    """Writes Claude Code-shaped JSONL lines, each chained to the previous one."""

    session_id: str = "sess-1"
    lines: list[dict[str, Any]] = field(default_factory=list)
    parent: str | None = None
    count: int = 0

    def _next(self, kind: str, message: dict[str, Any], **extra: Any) -> str:
        self.count += 1
        uuid = f"{self.session_id}-u{self.count:04d}"
        line = {
            "type": kind,
            "uuid": uuid,
            "parentUuid": self.parent,
            "sessionId": self.session_id,
            "timestamp": f"2025-01-01T00:{self.count // 60:02d}:{self.count % 60:02d}.000Z",
            "cwd": "/work/project",
            "isSidechain": False,
            "message": message,
            **extra,
        }
        self.lines.append(line)
        self.parent = uuid
        return uuid

    def user(self, text: str) -> str:
        return self._next("user", {"role": "user", "content": text})

    def assistant(
        self,
        text: str = "",
        calls: tuple[tuple[str, dict[str, Any]], ...] = (),
        *,
        prompt_tokens: int = 1_000,
        output_tokens: int = 50,
    ) -> tuple[str, list[str]]:
        """One response; returns its line uuid and the ids of its tool calls."""
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        ids: list[str] = []
        for name, args in calls:
            ids.append(f"toolu_{self.session_id}_{self.count}_{len(ids)}")
            blocks.append({"type": "tool_use", "id": ids[-1], "name": name, "input": args})
        message = {
            "id": f"msg_{self.session_id}_{self.count}",
            "role": "assistant",
            "model": MODEL,
            "content": blocks,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": output_tokens},
        }
        return self._next("assistant", message), ids

    def results(self, ids: list[str], text: str = "ok") -> str:
        content = [{"type": "tool_result", "tool_use_id": i, "content": text} for i in ids]
        return self._next("user", {"role": "user", "content": content})

    def jsonl(self) -> bytes:
        return b"".join(json.dumps(line).encode() + b"\n" for line in self.lines)

    def conversation(self) -> Conversation:
        conv = Conversation()
        conv.add_lines(self.jsonl().splitlines())
        return conv


def work_session(
    builder: TranscriptBuilder, *, turns: int, context: int, tools_per_turn: int = 1
) -> None:
    """A stretch of work: each turn a prompt, tool calls with results, and an answer."""
    for turn in range(turns):
        builder.user(f"Step {turn}: please continue with the parser refactoring.")
        _, ids = builder.assistant(
            f"Looking at step {turn}.",
            tuple(
                ("Read", {"file_path": f"/work/project/f{turn}_{k}.py"})
                for k in range(tools_per_turn)
            ),
            prompt_tokens=context,
        )
        builder.results(ids, f"contents of step {turn}")
        builder.assistant(f"Step {turn} is done.", prompt_tokens=context)


def write_work_session(folder: Path, session_id: str, turns: int = 2) -> Path:
    """A :func:`work_session` of ``turns`` written as ``<folder>/<session_id>.jsonl`` (the
    folder made), as Claude Code leaves one in its projects folder."""
    builder = TranscriptBuilder(session_id)
    work_session(builder, turns=turns, context=20_000)
    path = folder / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(builder.jsonl())
    return path


def append_work_turn(path: Path) -> None:
    """One more turn appended to a session :func:`write_work_session` wrote (new uuids: the
    builder counts on from 100; the session id is the file's stem)."""
    builder = TranscriptBuilder(path.stem, count=100)
    work_session(builder, turns=1, context=21_000)
    with path.open("ab") as f:
        f.write(builder.jsonl())


class FakeSessions:
    """A :class:`memd.session.scheduler.SessionSource` over in-memory conversations."""

    def __init__(self) -> None:
        self.states: dict[str, SessionState] = {}
        self.convs: dict[str, Conversation] = {}
        self.locks: dict[str, anyio.Lock] = {}

    def publish(
        self, builder: TranscriptBuilder, *, project: str = "proj", mtime: float = 1.0
    ) -> SessionState:
        conv = builder.conversation()
        state = SessionState(
            builder.session_id,
            project,
            f"/transcripts/{project}/{builder.session_id}.jsonl",
            mtime=mtime,
            context_tokens=conv.context().tokens,
            tool_uses=conv.tool_use_count,
            last_uuid=conv.last_uuid or "",
            offset=len(builder.jsonl()),
        )
        self.states[state.session_id] = state
        self.convs[state.session_id] = conv
        return state

    def get(self, session_id: str) -> SessionState | None:
        return self.states.get(session_id)

    async def read(self, state: SessionState, fn: Callable[[Conversation], T]) -> T:
        async with self.locks.setdefault(state.path, anyio.Lock()):
            return await anyio.to_thread.run_sync(fn, self.convs[state.session_id])


def settings_for(tmp: Path, **config: Any) -> NotesSettings:
    return NotesSettings(
        config=SessionNotesConfig(**config),
        projects_root=tmp / "projects",
        claude_dir=tmp / "claude",
        model=MODEL,
        max_tokens=1_024,
        timeout_s=30.0,
    )


_NOTES_PATH = re.compile(r"The notes file is (\S+?)\. ")


def notes_path_in(body: Mapping[str, Any]) -> str:
    text = "\n".join(
        replies.message_text(m) for m in body.get("messages", ()) if m.get("role") == "user"
    )
    found = _NOTES_PATH.search(text)
    assert found is not None, "the request names no notes file"
    return found.group(1)


def after_tool(body: Mapping[str, Any]) -> bool:
    content = replies.last_user_message(body).get("content")
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


def scripted_agent(
    first: Callable[[Mapping[str, Any]], Reply], *, then: str = "Notes updated."
) -> Callable[[dict[str, Any]], Reply | None]:
    """A handler: ``first(body)`` answers a fresh request, later turns get plain text."""

    def handle(body: dict[str, Any]) -> Reply | None:
        return replies.text(then) if after_tool(body) else first(body)

    return handle


def edit_current_state(line: str) -> Callable[[Mapping[str, Any]], Reply]:
    """The model adds ``line`` under "Current State" with one valid Edit."""

    def first(body: Mapping[str, Any]) -> Reply:
        return replies.tool_use(
            "Edit",
            {
                "file_path": notes_path_in(body),
                "old_string": CURRENT_STATE_LINE + "\n",
                "new_string": f"{CURRENT_STATE_LINE}\n{line}\n",
            },
        )

    return first


def request_texts(bodies: list[Any]) -> str:
    """Everything a list of request bodies sent, as one string to search."""
    return "\n".join(json.dumps(body, ensure_ascii=False) for body in bodies)
