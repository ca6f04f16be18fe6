"""The sub-agent tools (R-A1): Read, Edit, Write, Grep, Glob, Shell (and Delete).

``make_tools(policy, names, cwd=…)`` builds the tools a runner offers the model. Each call
asks the policy first (:func:`memd.agent.permissions.authorize`: its denial says what is
allowed, so the model can correct itself), then acts on what it names by construction, not
by a check made before the use: the path becomes a place beneath an area
(:mod:`memd.agent.places`, lexically), and files are opened, listed, written and deleted
beneath the area's directory descriptor (:class:`memd.confined.Area`), never through a link;
read-only programs run over a private copy of the areas made the same way
(:mod:`memd.agent.mirror`). A folder that turns into a link at any instant changes nothing:
what a tool reads or writes is only ever what the confined walk opened.

Writes have a size limit per file and per run (:class:`memd.agent.files.WriteBudget`: one
``make_tools`` call is one run). Every fault inside a tool comes back as an error result
(``is_error``), never as an exception out of it; blocking file work runs in a worker thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio.to_thread
import regex

from memd.agent import files, mirror, places, search
from memd.agent.decision import Deny
from memd.agent.files import FileLimits, Problem, WriteBudget
from memd.agent.permissions import (
    Policy,
    allowed_tools,
    authorize,
    base_dir,
    check_shell,
    describe,
    resolve_policy,
)
from memd.agent.places import Place
from memd.agent.process import ShellLimits
from memd.agent.shell import DEFAULT_LIMITS
from memd.agent.vcs import vcs_part
from memd.confined import Area, ChangeGuard
from memd.errors import WriteFailed

log = logging.getLogger(__name__)

DEFAULT_FILE_LIMITS = FileLimits()
_T = TypeVar("_T")


@dataclass(frozen=True)
class ToolResult:
    """What goes back to the model as a tool_result."""

    content: str
    is_error: bool = False
    touched: tuple[str, ...] = ()  # resolved paths this call created, modified or deleted
    denied: bool = False  # the policy refused the call (for run records)


class Tool(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> dict[str, Any]: ...
    async def run(self, args: Mapping[str, Any]) -> ToolResult: ...


@dataclass(frozen=True)
class ToolContext:
    policy: Policy
    cwd: Path
    shell_limits: ShellLimits
    file_limits: FileLimits
    budget: WriteBudget = field(compare=False)  # shared by the tools of one run
    guard: ChangeGuard | None = None  # told every change before it is made (a dream's journal)


Handler = Callable[[ToolContext, Mapping[str, Any]], Awaitable[ToolResult]]


class _BadArgument(ValueError):
    """The model passed an argument of the wrong shape; reported back, never raised out."""


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    context: ToolContext
    handler: Handler

    async def run(self, args: Mapping[str, Any]) -> ToolResult:
        """The handler's result; a bad argument or any fault inside it is an error result."""
        try:
            return await self.handler(self.context, args)
        except _BadArgument as exc:
            return error(f"{self.name}: {exc}")
        except WriteFailed:
            raise  # the disk refuses: no later turn can fix it, the run ends failed
        except Exception as exc:  # the last resort: a fault in memd, told to the model, logged
            log.warning("tool %s failed unexpectedly", self.name, exc_info=True)
            return error(f"{self.name} failed inside memd ({type(exc).__name__}); try again")


def make_tools(
    policy: Policy,
    names: Iterable[str],
    *,
    cwd: Path,
    limits: ShellLimits = DEFAULT_LIMITS,
    file_limits: FileLimits = DEFAULT_FILE_LIMITS,
    guard: ChangeGuard | None = None,
) -> dict[str, Tool]:
    """The named tools bound to ``policy``. ``cwd`` is where Shell commands run (use the
    policy's own directory); file tools take relative paths from the policy's directory.
    ``guard`` is told every change the file tools make, before it is made (and may stop it):
    they then never create a missing area."""
    context = ToolContext(policy, cwd, limits, file_limits, WriteBudget(file_limits), guard)
    tools: dict[str, Tool] = {}
    for name in names:
        if name not in _DEFINITIONS:
            raise ValueError(f"unknown tool {name!r}; known: {', '.join(_DEFINITIONS)}")
        description, schema, handler = _DEFINITIONS[name]
        tools[name] = FunctionTool(name, description, schema, context, handler)
    return tools


def error(message: str) -> ToolResult:
    return ToolResult(message, is_error=True)


def denial(message: str) -> ToolResult:
    return ToolResult(message, is_error=True, denied=True)


# ---------------------------------------------------------------------------------------------
# Arguments


def _string(args: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    value = args.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise _BadArgument(f"{key} must be a string")
    return value


def _integer(args: Mapping[str, Any], key: str, default: int) -> int:
    value = args.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _BadArgument(f"{key} must be a whole number of at least 1")
    return value


def _flag(args: Mapping[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if not isinstance(value, bool):
        raise _BadArgument(f"{key} must be true or false")
    return value


async def _thread(func: Callable[[], _T]) -> _T:
    return await anyio.to_thread.run_sync(func)


def _problem(problem: Problem) -> ToolResult:
    return denial(problem.message) if problem.denied else error(problem.message)


async def _placed(
    context: ToolContext, tool: str, raw: str, *, write: bool = False
) -> tuple[Place, Policy] | ToolResult:
    """The policy's decision on ``raw`` (its words go to the model), then the place the tool
    acts on: found lexically beneath an area, never by following a link."""
    result = await _thread(partial(authorize, context.policy, tool, raw))
    if isinstance(result, Deny):
        return denial(result.reason)
    resolved = result[1]
    if write:
        root = places.write_root(context.policy, resolved)
        roots: tuple[places.Root, ...] = () if root is None else (root,)
    else:
        roots = places.read_roots(context.policy, resolved)
    where = places.locate(raw, base=base_dir(resolved), roots=roots, casefold=resolved.casefold)
    if isinstance(where, Deny):
        return denial(f"{where.reason}; {describe(context.policy)}")
    if write and (not where.relative or vcs_part(where.relative.split("/")) is not None):
        return denial(
            f"denied: {where.path} may not be written (the area itself, or version-control "
            f"metadata); {describe(context.policy)}"
        )
    return where, resolved


def _open_area(
    root: Path, *, create: bool = False, guard: ChangeGuard | None = None
) -> Area | Problem:
    """The area at ``root``; with ``create`` and no ``guard``, made when its parent exists
    (never above)."""
    try:
        return Area.open(root, guard=guard)
    except FileNotFoundError:
        if not create or guard is not None:
            return Problem(f"{root} does not exist")
    except (OSError, ValueError) as exc:
        return Problem(f"denied: {root} cannot be opened as an area ({exc})", denied=True)
    try:
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return Problem(f"denied: Write may not create the directory {root} ({exc.strerror})", True)
    return _open_area(root)


def _in_area(
    place: Place,
    work: Callable[[Area], _T | Problem],
    *,
    create: bool = False,
    guard: ChangeGuard | None = None,
) -> _T | Problem:
    """Run ``work`` on the place's area (blocking)."""
    area = _open_area(place.root, create=create, guard=guard)
    if isinstance(area, Problem):
        return area
    with area:
        return work(area)


# ---------------------------------------------------------------------------------------------
# Handlers


async def _read(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    raw = _string(args, "file_path")
    limits = context.file_limits
    offset = _integer(args, "offset", 1)
    limit = min(_integer(args, "limit", limits.read_max_lines), limits.read_max_lines)
    placed = await _placed(context, "Read", raw)
    if isinstance(placed, ToolResult):
        return placed
    place = placed[0]

    def work(area: Area) -> str | Problem:
        return files.read_window(area, place.relative, offset=offset, limit=limit, limits=limits)

    text = await _thread(partial(_in_area, place, work))
    return _problem(text) if isinstance(text, Problem) else ToolResult(text)


async def _edit(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    raw = _string(args, "file_path")
    old = _string(args, "old_string")
    new = _string(args, "new_string")
    replace_all = _flag(args, "replace_all")
    placed = await _placed(context, "Edit", raw, write=True)
    if isinstance(placed, ToolResult):
        return placed
    place = placed[0]

    def work(area: Area) -> files.Edited | Problem:
        return files.edit_file(
            area,
            place.relative,
            old,
            new,
            replace_all=replace_all,
            max_bytes=context.file_limits.edit_max_bytes,
            budget=context.budget,
        )

    result = await _thread(partial(_in_area, place, work, guard=context.guard))
    if isinstance(result, Problem):
        return _problem(replace(result, message=f"{place.path}: {result.message}"))
    what = "created" if result.created else f"replaced {result.replacements} occurrence(s) in"
    return ToolResult(f"{what} {place.path}", touched=(place.path,))


async def _write(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    raw = _string(args, "file_path")
    data = _string(args, "content").encode("utf-8", errors="replace")
    placed = await _placed(context, "Write", raw, write=True)
    if isinstance(placed, ToolResult):
        return placed
    place = placed[0]

    def work(area: Area) -> Problem | None:
        return files.write_bytes(area, place.relative, data, context.budget)

    result = await _thread(partial(_in_area, place, work, create=True, guard=context.guard))
    if isinstance(result, Problem):
        return _problem(result)
    return ToolResult(f"wrote {len(data)} bytes to {place.path}", touched=(place.path,))


async def _delete(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    placed = await _placed(context, "Delete", _string(args, "file_path"), write=True)
    if isinstance(placed, ToolResult):
        return placed
    place = placed[0]
    result = await _thread(
        partial(
            _in_area,
            place,
            lambda area: files.delete_file(area, place.relative),
            guard=context.guard,
        )
    )
    if isinstance(result, Problem):
        return _problem(result)
    return ToolResult(f"deleted {place.path}", touched=(place.path,))


async def _glob(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    pattern = _string(args, "pattern")
    fixed, pattern = search.split_glob_root(pattern)
    raw = fixed or _string(args, "path", required=False) or "."
    if not pattern or ".." in pattern.split("/"):
        return denial("denied: a Glob pattern must stay below its path (no '..' parts)")
    placed = await _placed(context, "Glob", raw)
    if isinstance(placed, ToolResult):
        return placed
    place, resolved = placed

    def work(area: Area) -> str | Problem:
        if not files.is_dir(area, place.relative):
            return Problem(f"{place.path} is not a directory; Glob searches below a directory")
        try:
            return search.glob_files(
                area,
                place.relative,
                pattern,
                limits=context.file_limits,
                ignore_case=resolved.casefold,
            )
        except (OSError, ValueError) as exc:
            return files.open_problem(area, place.relative, exc)

    found = await _thread(partial(_in_area, place, work))
    return _problem(found) if isinstance(found, Problem) else ToolResult(found)


async def _grep(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    pattern = _string(args, "pattern")
    glob = _string(args, "glob", required=False)
    mode = args.get("output_mode") or "files_with_matches"
    if mode not in search.GREP_MODES:
        return error(f"Grep: output_mode must be one of {', '.join(search.GREP_MODES)}")
    ignore_case = _flag(args, "case_insensitive")
    try:
        compiled = search.compile_grep(pattern, ignore_case=ignore_case)
    except regex.error as exc:
        return error(f"Grep: the pattern is not a valid regular expression: {exc}")
    placed = await _placed(context, "Grep", _string(args, "path", required=False) or ".")
    if isinstance(placed, ToolResult):
        return placed
    place, resolved = placed
    limits = context.file_limits

    def work(area: Area) -> str | Problem:
        found = search.grep_targets(area, place.relative, limits)
        if isinstance(found, Problem):
            return found
        if glob:
            try:
                found = search.filter_glob(
                    found, glob, ignore_case=resolved.casefold, limits=limits
                )
            except search.TooSlow:
                return search.too_slow_note(limits)
        return search.grep_files(area, found, compiled, mode=mode, limits=limits)

    result = await _thread(partial(_in_area, place, work))
    return _problem(result) if isinstance(result, Problem) else ToolResult(result)


async def _shell(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    command = _string(args, "command")
    pipeline = await _thread(partial(check_shell, context.policy, command, cwd=context.cwd))
    if isinstance(pipeline, Deny):
        return denial(pipeline.reason)
    resolved = await _thread(partial(resolve_policy, context.policy))
    planned = mirror.plan(
        pipeline,
        cwd=context.cwd,
        roots=places.read_roots(context.policy, resolved),
        casefold=resolved.casefold,
    )
    if isinstance(planned, Deny):
        return denial(planned.reason)
    ran = await mirror.run_over_copy(pipeline, planned, limits=context.shell_limits)
    if isinstance(ran, Deny):
        return denial(ran.reason)
    return ToolResult(ran.text, is_error=ran.failed)


# ---------------------------------------------------------------------------------------------
# Definitions: what the model sees


def _schema(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_PATH = {"type": "string", "description": "Absolute path, or relative to the working area"}

_DEFINITIONS: dict[str, tuple[str, dict[str, Any], Handler]] = {
    "Read": (
        "Read a text file. Lines come numbered like `cat -n`. Use offset (first line, "
        "1-based) and limit (number of lines) for long files.",
        _schema(
            ["file_path"],
            file_path=_PATH,
            offset={"type": "integer", "minimum": 1},
            limit={"type": "integer", "minimum": 1},
        ),
        _read,
    ),
    "Edit": (
        "Replace an exact piece of text in a file. old_string must match the file exactly "
        "(whitespace included) and only once, unless replace_all is true. An empty "
        "old_string creates a file that does not exist yet.",
        _schema(
            ["file_path", "old_string", "new_string"],
            file_path=_PATH,
            old_string={"type": "string"},
            new_string={"type": "string"},
            replace_all={"type": "boolean", "default": False},
        ),
        _edit,
    ),
    "Write": (
        "Write a whole file, replacing it if it exists. Missing parent directories are "
        "created. Prefer Edit for changing part of an existing file.",
        _schema(["file_path", "content"], file_path=_PATH, content={"type": "string"}),
        _write,
    ),
    "Delete": (
        "Delete one file.",
        _schema(["file_path"], file_path=_PATH),
        _delete,
    ),
    "Grep": (
        "Search file contents with a Python regular expression. path is a file or a "
        "directory (searched recursively; default: the working area); glob filters file "
        "names (e.g. '*.md'). output_mode: files_with_matches (default), content "
        "(path:line:text) or count.",
        _schema(
            ["pattern"],
            pattern={"type": "string"},
            path=_PATH,
            glob={"type": "string"},
            case_insensitive={"type": "boolean", "default": False},
            output_mode={"type": "string", "enum": list(search.GREP_MODES)},
        ),
        _grep,
    ),
    "Glob": (
        "List files whose path below `path` (default: the working area) matches a glob, "
        "newest first. '*' stays within one directory, '**' spans directories: "
        "'**/*.md' finds Markdown files at any depth, '*.md' only at the top.",
        _schema(["pattern"], pattern={"type": "string"}, path=_PATH),
        _glob,
    ),
    "Shell": (
        "Run one read-only command, or a pipeline of them, without a shell: ls, cat, head, "
        "tail, wc, grep, find, stat, du, sort, uniq, cut, diff, git log/show/diff/status, and "
        "similar. No redirection, variables, substitution, unquoted globs, ';' or '&&'. "
        "Output and run time are limited.",
        _schema(["command"], command={"type": "string"}),
        _shell,
    ),
}


def policy_tools(
    policy: Policy, *, cwd: Path, limits: ShellLimits = DEFAULT_LIMITS
) -> dict[str, Tool]:
    """Every tool ``policy`` can allow (a convenience for runners)."""
    return make_tools(policy, allowed_tools(policy), cwd=cwd, limits=limits)
