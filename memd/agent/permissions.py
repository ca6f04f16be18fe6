"""What a sub-agent may touch (R-A1, R-A2): path policies as pure decisions.

A policy is one of a closed set of frozen dataclasses:

* :class:`EditOnlyFile` — session notes: the Edit tool on exactly one file, nothing else;
* :class:`MemoryDirPolicy` — memory extraction and dream: read, search and run the read-only
  shell inside the memory dir and some read-only roots; Edit/Write only inside the memory dir;
  deleting only when ``allow_delete``;
* :class:`ReadOnly` — read, search and the read-only shell inside some roots.

Decisions are made on resolved paths by the pure :func:`decide`. Resolution is the only I/O
and lives in :func:`resolve_policy` and :func:`resolve_target`: ``~`` is expanded, a
relative path is taken relative to the policy's own directory (never the daemon's cwd), and
symbolic links and ``..`` are resolved the way the kernel would (a path that does not exist
yet is resolved through its nearest existing parent). On a case-insensitive filesystem names
are compared casefolded. Writes never go through a symbolic link at the last component, nor
into a file with other hard links (that would change a file elsewhere).

A decision here is made on a path and is only words for the model: it may be stale by the time
a tool acts. The tools never act on the path the decision saw; they act beneath the area's
directory descriptor (:mod:`memd.agent.places`, :mod:`memd.confined`), so nothing that changes
meanwhile can lead them outside.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, assert_never

from memd.agent.decision import Allow, Decision, Deny
from memd.agent.shell import Pipeline, parse_command
from memd.agent.vcs import vcs_part

__all__ = [
    "Allow",
    "Decision",
    "Deny",
    "EditOnlyFile",
    "MemoryDirPolicy",
    "Policy",
    "ReadOnly",
    "Target",
    "allowed_tools",
    "authorize",
    "base_dir",
    "check",
    "check_shell",
    "decide",
    "describe",
    "expand_home",
    "may_create_dir",
    "resolve_policy",
    "resolve_target",
    "within",
]

Access = Literal["read", "write", "delete"]
TOOL_ACCESS: Mapping[str, Access] = {
    "Read": "read",
    "Grep": "read",
    "Glob": "read",
    "Edit": "write",
    "Write": "write",
    "Delete": "delete",
}
PATH_ARGUMENT: Mapping[str, str] = {
    "Read": "file_path",
    "Edit": "file_path",
    "Write": "file_path",
    "Delete": "file_path",
    "Grep": "path",
    "Glob": "path",
}


@dataclass(frozen=True)
class EditOnlyFile:
    """Only the Edit tool, only on ``path``. ``casefold``: compare names case-insensitively
    (detected by :func:`resolve_policy`; set it by hand only in tests)."""

    path: Path
    casefold: bool = False

    def check(self, tool: str, args: Mapping[str, Any]) -> Decision:
        return check(self, tool, args)


@dataclass(frozen=True)
class MemoryDirPolicy:
    """Read anywhere in ``write_root`` and ``read_roots``; write only in ``write_root``."""

    write_root: Path
    read_roots: tuple[Path, ...] = ()
    allow_delete: bool = False
    casefold: bool = False

    def check(self, tool: str, args: Mapping[str, Any]) -> Decision:
        return check(self, tool, args)


@dataclass(frozen=True)
class ReadOnly:
    """Read, search and the read-only shell inside ``roots``; no writes at all."""

    roots: tuple[Path, ...]
    casefold: bool = False

    def check(self, tool: str, args: Mapping[str, Any]) -> Decision:
        return check(self, tool, args)


Policy = EditOnlyFile | MemoryDirPolicy | ReadOnly

Kind = Literal["file", "dir", "other", "missing"]


@dataclass(frozen=True)
class Target:
    """A path after resolution. ``path`` is absolute with every symbolic link resolved;
    ``link`` says the last component *as named* is a symbolic link."""

    path: str
    kind: Kind
    nlink: int = 1
    link: bool = False
    # The absolute path as named, ``..`` folded, links not followed (not part of equality).
    named: str = dataclasses.field(default="", compare=False)


# ---------------------------------------------------------------------------------------------
# Pure decisions


def within(path: str, root: str, *, casefold: bool = False) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute and normalised)."""
    if casefold:
        path, root = path.casefold(), root.casefold()
    return path == root or path.startswith(root.rstrip("/") + "/")


def _same(a: str, b: str, *, casefold: bool) -> bool:
    return a.casefold() == b.casefold() if casefold else a == b


def allowed_tools(policy: Policy) -> tuple[str, ...]:
    """The tool names a policy can ever allow, for building the model's tool list."""
    match policy:
        case EditOnlyFile():
            return ("Edit",)
        case MemoryDirPolicy():
            delete = ("Delete",) if policy.allow_delete else ()
            return ("Read", "Grep", "Glob", "Shell", "Edit", "Write", *delete)
        case ReadOnly():
            return ("Read", "Grep", "Glob", "Shell")
        case _:
            assert_never(policy)


def base_dir(policy: Policy) -> Path:
    """The directory relative paths are taken from."""
    match policy:
        case EditOnlyFile():
            return policy.path.parent
        case MemoryDirPolicy():
            return policy.write_root
        case ReadOnly():
            return policy.roots[0] if policy.roots else Path("/nonexistent")
        case _:
            assert_never(policy)


def describe(policy: Policy) -> str:
    """What the policy allows, in words for the model."""
    match policy:
        case EditOnlyFile():
            return f"you may only use the Edit tool on {policy.path}"
        case MemoryDirPolicy():
            reads = ", ".join(str(p) for p in (policy.write_root, *policy.read_roots))
            delete = ", and delete files there" if policy.allow_delete else ""
            return (
                f"you may read, search and run read-only commands inside {reads}; "
                f"you may create and edit files only inside {policy.write_root}{delete}"
            )
        case ReadOnly():
            roots = ", ".join(str(p) for p in policy.roots) or "nothing"
            return f"you may only read, search and run read-only commands inside {roots}"
        case _:
            assert_never(policy)


def readable_roots(policy: Policy) -> tuple[Path, ...]:
    """The folders ``policy`` lets the agent read in (the write root first), as it names
    them; :mod:`memd.agent.places` pairs them with their resolved form."""
    match policy:
        case EditOnlyFile():
            return ()
        case MemoryDirPolicy():
            return (policy.write_root, *policy.read_roots)
        case ReadOnly():
            return policy.roots
        case _:
            assert_never(policy)


def _write_root(policy: Policy) -> Path | None:
    return policy.write_root if isinstance(policy, MemoryDirPolicy) else None


def decide(policy: Policy, tool: str, target: Target | None) -> Decision:
    """The pure decision, on a policy from :func:`resolve_policy` and a resolved target.

    ``target`` is ``None`` only for the Shell tool, whose paths are checked one by one as
    reads (see :func:`check_shell`).
    """
    if tool not in allowed_tools(policy):
        return Deny(f"denied: the {tool} tool is not available here; {describe(policy)}")
    if target is None:
        if tool == "Shell":
            return Allow()
        return Deny(f"denied: {tool} needs a path; {describe(policy)}")
    match TOOL_ACCESS.get(tool, "read"):
        case "read":
            return _decide_read(policy, target)
        case "write":
            return _decide_write(policy, target)
        case "delete":
            return _decide_delete(policy, target)
        case other:
            assert_never(other)


def _decide_read(policy: Policy, target: Target) -> Decision:
    roots = readable_roots(policy)
    if any(within(target.path, str(root), casefold=policy.casefold) for root in roots):
        return Allow()
    return Deny(f"denied: {target.path} is outside the area you may read; {describe(policy)}")


def _decide_write(policy: Policy, target: Target) -> Decision:
    if isinstance(policy, EditOnlyFile):
        allowed = _same(target.path, str(policy.path), casefold=policy.casefold)
    else:
        root = _write_root(policy)
        allowed = root is not None and within(target.path, str(root), casefold=policy.casefold)
        allowed = allowed and target.path.rstrip("/") != str(root).rstrip("/")
    if not allowed:
        return Deny(f"denied: {target.path} may not be written; {describe(policy)}")
    return _vcs_denial(policy, target) or _writable_kind(policy, target)


def _vcs_denial(policy: Policy, target: Target) -> Deny | None:
    """Refuse version-control metadata below the write root, as named or as resolved (R-A6).

    Only the part below the root counts: the root is memd's choice, the rest the agent's.
    """
    root = _write_root(policy)
    if root is None:
        return None
    for path in (target.path, target.named):
        if not path or not within(path, str(root), casefold=policy.casefold):
            continue
        part = vcs_part(Path(os.path.relpath(path, root)).parts)
        if part is not None:
            return Deny(
                f"denied: {path} is version-control metadata ({part}); the agent never "
                f"writes or deletes it; {describe(policy)}"
            )
    return None


def _writable_kind(policy: Policy, target: Target) -> Decision:
    if target.link:
        return Deny(
            f"denied: the name you gave is a symbolic link (to {target.path}); writes never "
            f"follow links; {describe(policy)}"
        )
    if target.kind in ("dir", "other"):
        what = "a directory" if target.kind == "dir" else "not a regular file"
        return Deny(f"denied: {target.path} is {what}; {describe(policy)}")
    if target.kind == "file" and target.nlink > 1:
        return Deny(
            f"denied: {target.path} has other hard links, so writing it would change a file "
            f"elsewhere; {describe(policy)}"
        )
    return Allow()


def _decide_delete(policy: Policy, target: Target) -> Decision:
    root = _write_root(policy)
    inside = root is not None and within(target.path, str(root), casefold=policy.casefold)
    if not inside or target.path.rstrip("/") == str(root).rstrip("/"):
        return Deny(f"denied: {target.path} may not be deleted; {describe(policy)}")
    if (vcs := _vcs_denial(policy, target)) is not None:
        return vcs
    if target.link:
        return Deny(f"denied: the name you gave is a symbolic link; {describe(policy)}")
    if target.kind in ("dir", "other"):
        return Deny(f"denied: only regular files may be deleted; {describe(policy)}")
    return Allow()


def may_create_dir(policy: Policy, path: str) -> bool:
    """Whether a missing directory may be created (Write makes parents inside the area)."""
    root = _write_root(policy)
    if root is None or not within(path, str(root), casefold=policy.casefold):
        return False
    return vcs_part(Path(os.path.relpath(path, root)).parts) is None


# ---------------------------------------------------------------------------------------------
# Resolution (the I/O) and the composed checks


def resolve_policy(policy: Policy) -> Policy:
    """Resolve the policy's own paths and detect a case-insensitive filesystem."""
    match policy:
        case EditOnlyFile():
            # The file itself is not followed: if it is a link, every write is refused.
            path = Path(_realpath(str(policy.path.parent))) / policy.path.name
            return EditOnlyFile(path, policy.casefold or _casefolds(str(path.parent)))
        case MemoryDirPolicy():
            root = Path(_realpath(str(policy.write_root)))
            return dataclasses.replace(
                policy,
                write_root=root,
                read_roots=tuple(Path(_realpath(str(p))) for p in policy.read_roots),
                casefold=policy.casefold or _casefolds(str(root)),
            )
        case ReadOnly():
            roots = tuple(Path(_realpath(str(p))) for p in policy.roots)
            fold = policy.casefold or any(_casefolds(str(p)) for p in roots)
            return ReadOnly(roots, fold)
        case _:
            assert_never(policy)


def resolve_target(raw: str, *, base: Path) -> Target | Deny:
    """Resolve a path named by the model, relative to ``base``.

    A link that changes while it is resolved (``realpath`` reads it after its ``lstat``)
    is a denial to retry, never an exception.
    """
    if not raw.strip():
        return Deny("denied: the path is empty")
    if "\0" in raw:
        return Deny("denied: the path contains a NUL character")
    try:
        os.fsencode(raw)
    except UnicodeEncodeError:
        return Deny("denied: the path holds a character no file name can (a lone surrogate)")
    try:
        return _resolve_target(raw, base)
    except OSError as exc:
        return Deny(f"denied: {raw} changed while it was checked ({exc.strerror}); try again")


def _resolve_target(raw: str, base: Path) -> Target:
    named = os.path.join(_realpath(str(base)), expand_home(raw))
    resolved = _realpath(named)
    link = os.path.islink(named.rstrip("/") or "/")
    folded = os.path.normpath(named)
    try:
        st = os.stat(resolved)
    except (FileNotFoundError, NotADirectoryError):
        return Target(resolved, "missing", 0, link, folded)
    except OSError:  # a link loop, a name too long, no permission: never writable
        return Target(resolved, "other", 0, link, folded)
    if stat.S_ISREG(st.st_mode):
        kind: Kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    else:
        kind = "other"
    return Target(resolved, kind, st.st_nlink, link, folded)


def authorize(
    policy: Policy, tool: str, raw: str, *, base: Path | None = None
) -> tuple[Target, Policy] | Deny:
    """Resolve ``raw`` and decide; on success return the target and the resolved policy,
    so the tool acts on exactly the path that was checked."""
    resolved = resolve_policy(policy)
    target = resolve_target(raw, base=base_dir(resolved) if base is None else base)
    if isinstance(target, Deny):
        return Deny(f"{target.reason}; {describe(policy)}")
    decision = decide(resolved, tool, target)
    return decision if isinstance(decision, Deny) else (target, resolved)


def check(policy: Policy, tool: str, args: Mapping[str, Any]) -> Decision:
    """The runner's permission function: may this tool call go ahead?"""
    if tool == "Shell":
        command = args.get("command")
        if not isinstance(command, str):
            return Deny("denied: Shell needs a command string")
        shell = check_shell(policy, command, cwd=base_dir(policy))
        return shell if isinstance(shell, Deny) else Allow()
    key = PATH_ARGUMENT.get(tool)
    if key is None:
        return decide(resolve_policy(policy), tool, None)
    raw = args.get(key)
    if raw is None and key == "path":
        raw = "."
    if not isinstance(raw, str):
        return Deny(f"denied: {tool} needs {key} as a string; {describe(policy)}")
    result = authorize(policy, tool, raw)
    return result if isinstance(result, Deny) else Allow()


def check_shell(policy: Policy, command: str, *, cwd: Path) -> Pipeline | Deny:
    """Classify a shell command and check every path it reads, relative to ``cwd``."""
    resolved = resolve_policy(policy)
    allowed = decide(resolved, "Shell", None)
    if isinstance(allowed, Deny):
        return allowed
    pipeline = parse_command(command)
    if isinstance(pipeline, Deny):
        return pipeline
    for read in pipeline.reads:
        target = resolve_target(read.path, base=cwd)
        if isinstance(target, Deny):
            return Deny(f"{target.reason}; {describe(policy)}")
        if isinstance(decide(resolved, "Read", target), Deny):
            return Deny(
                f"denied: the command reads {read.path} ({target.path}), outside the area you "
                f"may read; {describe(policy)}"
            )
        if read.files_only and target.kind == "dir":
            return Deny(f"denied: {read.path} is a directory; name files to compare instead")
    return pipeline


def _realpath(path: str) -> str:
    return os.path.realpath(path)


def expand_home(raw: str) -> str:
    if raw == "~" or raw.startswith("~/"):
        try:
            return pwd.getpwuid(os.getuid()).pw_dir + raw[1:]
        except KeyError:  # no passwd entry: the name stays literal, relative to the base
            return raw
    return raw


def _casefolds(path: str) -> bool:
    """Whether the filesystem holding ``path`` ignores case: look up an existing component
    with its case swapped and see whether it is the same file."""
    current = path
    while current not in ("", "/"):
        name = os.path.basename(current)
        swapped = name.swapcase()
        if swapped != name and os.path.lexists(current):
            try:
                return os.path.samefile(current, os.path.join(os.path.dirname(current), swapped))
            except OSError:
                return False
        current = os.path.dirname(current)
    return False
