"""The restricted sub-agent runner (R-A1): one Messages-API tool-use loop for every job.

:func:`run_agent` calls the model, runs the tools it asks for, sends all results back in one
user message (in the order the calls were made), and repeats until the model answers without
calling a tool, the turn limit is reached, or the overall timeout passes. Tools enforce their
own permissions; the runner adds the one check only it can make (is there a tool of that
name?) and turns every refusal or crash of a tool into an error ``tool_result`` the model can
read, never into a failed run.

Turn limit: a turn is one model call. When the last allowed call still asks for tools, those
calls are run (their edits are the work) but their results are not sent back; the outcome is
:class:`TurnLimit`.

Prompt caching: the system prompt, the last block of the caller's messages (the stable
prefix: conversation and instructions) and the newest user message carry an ephemeral
``cache_control`` breakpoint, three at most; breakpoints in the caller's messages are removed
so the API's limit of four can never be exceeded (:func:`with_cache_breakpoints`).

Model errors end the run with :class:`Failed` holding the :class:`memd.errors.LLMError`
(:meth:`AgentRun.raise_for_outcome` raises it), so the record of what already happened — files
touched before the failure — is not lost; so does a tool's write the disk refuses
(:class:`memd.errors.WriteFailed`: full, read-only, no descriptor left), which no later turn
could do better. Every call's usage goes to the ledger.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

import anyio

from memd.agent.tools import Tool
from memd.clock import Clock
from memd.errors import AgentError, LLMError, Unavailable, WriteFailed
from memd.llm.client import LLM, LLMReply, Usage
from memd.llm.ledger import JobKind, Ledger
from memd.writes import DISK_FAULTS

log = logging.getLogger(__name__)

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4
_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})


@dataclass(frozen=True)
class AgentSpec:
    kind: JobKind
    model: str
    system: str
    tools: Mapping[str, Tool]
    max_turns: int
    timeout_s: float
    max_tokens: int
    project: str
    session: str = ""


@dataclass(frozen=True)
class ToolCall:
    turn: int
    name: str
    allowed: bool  # False: no such tool, or the tool's permission check refused it
    is_error: bool
    touched: tuple[str, ...] = ()


@dataclass(frozen=True)
class Completed:
    pass


@dataclass(frozen=True)
class TurnLimit:
    pass


@dataclass(frozen=True)
class TimedOut:
    pass


@dataclass(frozen=True)
class Failed:
    error: LLMError | WriteFailed


Outcome = Completed | TurnLimit | TimedOut | Failed


@dataclass(frozen=True)
class AgentProgress:
    """A snapshot after each turn (dream progress in ``memdctl status`` shows it)."""

    kind: JobKind
    turns: int
    tool_calls: tuple[ToolCall, ...]
    files_touched: tuple[str, ...]
    usage: Usage
    latest_text: str
    started_at: float


@dataclass(frozen=True)
class AgentRun:
    kind: JobKind
    outcome: Outcome
    turns: int
    tool_calls: tuple[ToolCall, ...]
    files_touched: tuple[str, ...]  # in the order first touched
    usage: Usage  # summed over every call
    final_text: str  # the text of the last reply
    stop_reason: str | None
    started_at: float
    ended_at: float

    @property
    def denied_calls(self) -> tuple[ToolCall, ...]:
        return tuple(c for c in self.tool_calls if not c.allowed)

    def raise_for_outcome(self) -> None:
        """Return on :class:`Completed`; otherwise raise (``AgentError`` or the model error)."""
        match self.outcome:
            case Completed():
                return
            case TurnLimit():
                raise AgentError(f"the {self.kind} agent used all {self.turns} turns")
            case TimedOut():
                took = self.ended_at - self.started_at
                raise AgentError(f"the {self.kind} agent did not finish in time ({took:.0f} s)")
            case Failed(error=error):
                raise error
            case unreachable:
                assert_never(unreachable)


ProgressCallback = Callable[[AgentProgress], None]


# ---------------------------------------------------------------------------------------------
# Pure parts


def with_cache_breakpoints(
    system: str, messages: Sequence[Mapping[str, Any]], prefix_len: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The request's system blocks and messages with at most three cache breakpoints.

    Marks the system prompt, the last message of the stable prefix (``messages[:prefix_len]``)
    and the newest user message. ``messages`` is not modified; breakpoints it carried are
    dropped.
    """
    system_blocks: list[dict[str, Any]] = []
    if system:
        system_blocks.append({"type": "text", "text": system, "cache_control": dict(EPHEMERAL)})
    out = [_without_breakpoints(m) for m in messages]
    marks = {prefix_len - 1} if 0 < prefix_len <= len(out) else set()
    newest_user = next((i for i in range(len(out) - 1, -1, -1) if out[i]["role"] == "user"), None)
    if newest_user is not None:
        marks.add(newest_user)
    assert len(system_blocks) + len(marks) <= MAX_BREAKPOINTS
    for index in marks:
        out[index] = _marked(out[index])
    return system_blocks, out


def _without_breakpoints(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    blocks = []
    for block in content:
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        if isinstance(clean.get("content"), list):
            clean["content"] = [
                {k: v for k, v in inner.items() if k != "cache_control"}
                for inner in clean["content"]
            ]
        blocks.append(clean)
    return {**message, "content": blocks}


def _marked(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return message
        block = {"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}
        return {**message, "content": [block]}
    if not isinstance(content, list) or not content:
        return message
    last = content[-1]
    if last.get("type") in _UNCACHEABLE or (last.get("type") == "text" and not last.get("text")):
        return message
    return {**message, "content": [*content[:-1], {**last, "cache_control": dict(EPHEMERAL)}]}


def tool_definitions(tools: Mapping[str, Tool]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
        for t in tools.values()
    ]


def unknown_tool_text(name: object, allowed: Sequence[str]) -> str:
    offered = ", ".join(sorted(allowed)) if allowed else "none"
    return f"There is no tool called {name!r} in this task. The tools you can use are: {offered}."


# ---------------------------------------------------------------------------------------------
# The loop


@dataclass
class _Recorder:
    spec: AgentSpec
    started_at: float
    turns: int = 0
    calls: list[ToolCall] = field(default_factory=list)
    touched: dict[str, None] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    latest_text: str = ""
    final_text: str = ""
    stop_reason: str | None = None

    def reply(self, reply: LLMReply) -> None:
        self.turns += 1
        self.usage += reply.usage
        self.final_text = reply.text
        self.stop_reason = reply.stop_reason
        if reply.text:
            self.latest_text = reply.text

    def call(self, call: ToolCall) -> None:
        self.calls.append(call)
        for path in call.touched:
            self.touched.setdefault(path, None)

    def progress(self) -> AgentProgress:
        return AgentProgress(
            self.spec.kind,
            self.turns,
            tuple(self.calls),
            tuple(self.touched),
            self.usage,
            self.latest_text,
            self.started_at,
        )

    def finish(self, outcome: Outcome, ended_at: float) -> AgentRun:
        return AgentRun(
            self.spec.kind,
            outcome,
            self.turns,
            tuple(self.calls),
            tuple(self.touched),
            self.usage,
            self.final_text,
            self.stop_reason,
            self.started_at,
            ended_at,
        )


async def run_agent(
    llm: LLM,
    spec: AgentSpec,
    messages: Sequence[Mapping[str, Any]],
    *,
    ledger: Ledger,
    clock: Clock,
    on_progress: ProgressCallback | None = None,
) -> AgentRun:
    """Run the tool-use loop on ``messages`` (the stable prefix); see the module docstring.

    Raises only for bugs and cancellation: model errors, timeouts and turn limits are
    outcomes.
    """
    recorder = _Recorder(spec, clock.now())
    history: list[dict[str, Any]] = [copy.deepcopy(dict(m)) for m in messages]
    outcome: Outcome = TimedOut()
    with anyio.move_on_after(spec.timeout_s):
        outcome = await _loop(llm, spec, history, recorder, ledger, on_progress)
    run = recorder.finish(outcome, clock.now())
    log.debug(
        "%s agent: %s after %d turns, %d tool calls",
        spec.kind,
        type(outcome).__name__,
        run.turns,
        len(run.tool_calls),
    )
    return run


async def _loop(
    llm: LLM,
    spec: AgentSpec,
    history: list[dict[str, Any]],
    recorder: _Recorder,
    ledger: Ledger,
    on_progress: ProgressCallback | None,
) -> Outcome:
    prefix_len = len(history)
    tools = tool_definitions(spec.tools)
    for turn in range(1, spec.max_turns + 1):
        system, request = with_cache_breakpoints(spec.system, history, prefix_len)
        try:
            reply = await llm.create_message(
                model=spec.model,
                system=system,
                messages=request,
                max_tokens=spec.max_tokens,
                tools=tools or None,
            )
        except LLMError as exc:
            return Failed(exc)
        ledger.record_reply(spec.kind, reply, project=spec.project, session=spec.session)
        recorder.reply(reply)
        history.append({"role": "assistant", "content": reply.content})
        uses = reply.tool_uses
        if uses:
            try:
                results = [await _call_tool(spec.tools, use, turn, recorder) for use in uses]
            except WriteFailed as exc:  # the disk refused: no later turn can do better
                return Failed(exc)
            history.append({"role": "user", "content": results})
        if on_progress is not None:
            on_progress(recorder.progress())
        if not uses:
            return Completed()
    return TurnLimit()


async def _call_tool(
    tools: Mapping[str, Tool], use: Mapping[str, Any], turn: int, recorder: _Recorder
) -> dict[str, Any]:
    name = use.get("name")
    args = use.get("input")
    tool = tools.get(name) if isinstance(name, str) else None
    if tool is None:
        recorder.call(ToolCall(turn, str(name), allowed=False, is_error=True))
        return _result(use, unknown_tool_text(name, list(tools)), is_error=True)
    if not isinstance(args, dict):
        recorder.call(ToolCall(turn, tool.name, allowed=True, is_error=True))
        return _result(use, f"The input of {tool.name} must be a JSON object.", is_error=True)
    try:
        output = await tool.run(args)
    except Exception as exc:  # the isolation boundary: a crashing tool is told to the model
        if (
            isinstance(exc, OSError)
            and exc.errno in DISK_FAULTS
            and not isinstance(exc, WriteFailed)
        ):
            exc = WriteFailed(exc.filename or tool.name, exc)  # a write memd did not name
        if isinstance(exc, WriteFailed):
            recorder.call(ToolCall(turn, tool.name, allowed=True, is_error=True))
            raise exc
        log.warning("tool %s failed: %s", tool.name, exc, exc_info=True)
        recorder.call(ToolCall(turn, tool.name, allowed=True, is_error=True))
        return _result(use, f"{tool.name} failed: {type(exc).__name__}: {exc}", is_error=True)
    recorder.call(ToolCall(turn, tool.name, not output.denied, output.is_error, output.touched))
    return _result(use, output.content, is_error=output.is_error)


def _result(use: Mapping[str, Any], content: str, *, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": use.get("id"),
        "content": content or "(no output)",
    }
    if is_error:
        block["is_error"] = True
    return block


async def ask_once(
    llm: LLM, spec: AgentSpec, messages: Sequence[Mapping[str, Any]], *, ledger: Ledger
) -> LLMReply:
    """The whole-answer protocol's one call (issue 34): no tools, the answer is the work, which
    the job checks and applies itself. Usage goes to the ledger; a model failure, or no answer
    within ``spec.timeout_s``, raises (:class:`LLMError`)."""
    system, request = with_cache_breakpoints(spec.system, messages, len(messages))
    with anyio.move_on_after(spec.timeout_s) as scope:
        reply = await llm.create_message(
            model=spec.model, system=system, messages=request, max_tokens=spec.max_tokens
        )
    if scope.cancelled_caught:
        raise Unavailable(f"the {spec.kind} answer did not come within {spec.timeout_s:g} s")
    ledger.record_reply(spec.kind, reply, project=spec.project, session=spec.session)
    return reply
