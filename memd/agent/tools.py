"""The sub-agent tools (R-A1): Read, Edit, Write, Grep, Glob, Shell (and Delete).

``make_tools(policy, names, cwd=…)`` builds the tools a runner offers the model. Every tool
checks the policy on the resolved path before acting and then acts on exactly that resolved
path; a denial or a bad argument comes back as ``ToolResult(is_error=True)`` whose text says
what is allowed, so the model can correct itself. Blocking file work runs in a worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio.to_thread
import regex

from memd.agent import files, search
from memd.agent.decision import Deny
from memd.agent.files import FileLimits, Problem
from memd.agent.permissions import (
    Policy,
    Target,
    allowed_tools,
    authorize,
    check_shell,
    decide,
    may_create_dir,
    resolve_target,
)
from memd.agent.process import ShellLimits
from memd.agent.shell import DEFAULT_LIMITS, run_readonly

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
        try:
            return await self.handler(self.context, args)
        except _BadArgument as exc:
            return error(f"{self.name}: {exc}")


def make_tools(
    policy: Policy,
    names: Iterable[str],
    *,
    cwd: Path,
    limits: ShellLimits = DEFAULT_LIMITS,
    file_limits: FileLimits = DEFAULT_FILE_LIMITS,
) -> dict[str, Tool]:
    """The named tools bound to ``policy``. ``cwd`` is where Shell commands run (use the
    policy's own directory); file tools take relative paths from the policy's directory."""
    context = ToolContext(policy, cwd, limits, file_limits)
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


async def _authorized(
    context: ToolContext, tool: str, raw: str
) -> tuple[Target, Policy] | ToolResult:
    result = await _thread(partial(authorize, context.policy, tool, raw))
    return denial(result.reason) if isinstance(result, Deny) else result


def _outcome(result: Problem | None, success: str, touched: str) -> ToolResult:
    if isinstance(result, Problem):
        return error(result.message)
    return ToolResult(success, touched=(touched,))


# ---------------------------------------------------------------------------------------------
# Handlers


async def _read(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    raw = _string(args, "file_path")
    limits = context.file_limits
    offset = _integer(args, "offset", 1)
    limit = min(_integer(args, "limit", limits.read_max_lines), limits.read_max_lines)
    allowed = await _authorized(context, "Read", raw)
    if isinstance(allowed, ToolResult):
        return allowed
    target, _ = allowed
    if target.kind == "dir":
        return error(f"{target.path} is a directory; list it with Glob or Shell (ls)")
    text = await _thread(
        partial(files.read_window, target.path, offset=offset, limit=limit, limits=limits)
    )
    return error(text.message) if isinstance(text, Problem) else ToolResult(text)


async def _edit(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    raw = _string(args, "file_path")
    old = _string(args, "old_string")
    new = _string(args, "new_string")
    replace_all = _flag(args, "replace_all")
    allowed = await _authorized(context, "Edit", raw)
    if isinstance(allowed, ToolResult):
        return allowed
    path = allowed[0].path
    edit = partial(
        files.edit_file,
        path,
        old,
        new,
        replace_all=replace_all,
        max_bytes=context.file_limits.edit_max_bytes,
    )
    try:
        result = await _thread(edit)
    except OSError as exc:
        return error(f"could not write {path}: {exc.strerror}")
    if isinstance(result, Problem):
        return error(f"{path}: {result.message}")
    what = "created" if result.created else f"replaced {result.replacements} occurrence(s) in"
    return ToolResult(f"{what} {path}", touched=(path,))


async def _write(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    raw = _string(args, "file_path")
    content = _string(args, "content")
    allowed = await _authorized(context, "Write", raw)
    if isinstance(allowed, ToolResult):
        return allowed
    target, resolved = allowed
    new_dirs = await _thread(partial(files.missing_dirs, os.path.dirname(target.path)))
    outside = [d for d in new_dirs if not may_create_dir(resolved, d)]
    if outside:
        return denial(f"denied: Write may not create the directory {outside[0]}")
    write = partial(files.write_file, target.path, content, new_dirs=new_dirs)
    try:
        result = await _thread(write)
    except OSError as exc:
        return error(f"could not write {target.path}: {exc.strerror}")
    size = len(content.encode("utf-8"))
    return _outcome(result, f"wrote {size} bytes to {target.path}", target.path)


async def _delete(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    raw = _string(args, "file_path")
    allowed = await _authorized(context, "Delete", raw)
    if isinstance(allowed, ToolResult):
        return allowed
    path = allowed[0].path
    try:
        result = await _thread(partial(files.delete_file, path))
    except OSError as exc:
        return error(f"could not delete {path}: {exc.strerror}")
    return _outcome(result, f"deleted {path}", path)


def _follower(policy: Policy) -> search.Follow:
    """Resolve a link met during a walk; keep it only if the policy lets the agent read it."""

    def follow(link: str) -> str | None:
        target = resolve_target(link, base=Path("/"))
        if isinstance(target, Deny) or isinstance(decide(policy, "Read", target), Deny):
            return None
        return target.path

    return follow


async def _glob(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    pattern = _string(args, "pattern")
    fixed, pattern = search.split_glob_root(pattern)
    raw = fixed or _string(args, "path", required=False) or "."
    if not pattern or ".." in pattern.split("/"):
        return denial("denied: a Glob pattern must stay below its path (no '..' parts)")
    allowed = await _authorized(context, "Glob", raw)
    if isinstance(allowed, ToolResult):
        return allowed
    target, resolved = allowed
    if target.kind != "dir":
        return error(f"{target.path} is not a directory; Glob searches below a directory")
    found = partial(
        search.glob_files,
        target.path,
        pattern,
        follow=_follower(resolved),
        limits=context.file_limits,
        ignore_case=resolved.casefold,
    )
    return ToolResult(await _thread(found))


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
    allowed = await _authorized(context, "Grep", _string(args, "path", required=False) or ".")
    if isinstance(allowed, ToolResult):
        return allowed
    target, resolved = allowed
    if target.kind == "missing":
        return error(f"{target.path} does not exist")
    limits = context.file_limits

    def run() -> str:
        if target.kind == "file":
            found: tuple[search.Found, ...] = (search.Found(target.path, target.path),)
        else:
            found = search.walk(
                target.path, follow=_follower(resolved), max_entries=limits.grep_max_files
            ).found
        if glob:
            try:
                found = search.filter_glob(
                    found, glob, root=target.path, ignore_case=resolved.casefold, limits=limits
                )
            except search.TooSlow:
                return search.too_slow_note(limits)
        return search.grep_files(found, compiled, mode=mode, limits=limits)

    return ToolResult(await _thread(run))


async def _shell(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    command = _string(args, "command")
    pipeline = await _thread(partial(check_shell, context.policy, command, cwd=context.cwd))
    if isinstance(pipeline, Deny):
        return denial(pipeline.reason)
    outcome = await run_readonly(pipeline, cwd=context.cwd, limits=context.shell_limits)
    if isinstance(outcome, Deny):
        return denial(outcome.reason)
    return ToolResult(outcome.render(), is_error=outcome.failed)


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
