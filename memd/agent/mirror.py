"""The read-only shell runs over a private copy of its areas, made through the confined walk.

A program such as ``cat``, ``grep -r``, ``find`` or ``git`` opens paths by itself, and no
check made before it runs can stop a folder in a memory dir from turning into a link to
``~/.ssh`` while it reads. So the Shell tool never lets a program see an area at all: each call
copies the areas it reads into a fresh private folder (``mkdtemp``: owner-only, a random
name), file by file through :func:`memd.confined.tree` and :meth:`memd.confined.Area.open_file`
(every folder opened beneath the root without following a link, every file checked on its
descriptor: a regular file with one link, the user's), and runs the programs there. What a
program can read is then by construction what the confined walk opened: the copy holds
folders memd made and regular files memd wrote, no link, no hard link, no special file.

The copy mirrors absolute paths (``<copy>/home/u/…/memory/a.md``), so relative names, ``..``
between two areas of a policy and absolute names all keep their meaning. The argv is
rewritten: every path a program reads (:attr:`memd.agent.shell.Command.reads`) that is
absolute or holds ``..`` becomes its place in the copy, and the rewritten argv is parsed
again and refused unless every path it reads is a plain relative name (beneath a working
directory inside the copy) or an absolute one inside the copy. Output is mapped back
(``<copy>`` removed), so the model sees the area's own paths.

Cost is bounded: at most :attr:`ShellLimits.copy_max_files` files and
:attr:`ShellLimits.copy_max_bytes` bytes per call (what is left out is said in the output);
``.git`` is copied only for a pipeline that runs git. The copy is removed when the call ends.
The copy is private to memd's user: it guards against what lands in a shared memory folder
(a commit, a sync, an agent's write), not against a process of the same user, which could
read the user's files itself.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.to_thread

from memd.agent.decision import Deny
from memd.agent.places import Place, Root, locate
from memd.agent.process import ShellLimits
from memd.agent.shell import Command, Pipeline, parse_argv, run_readonly
from memd.confined import Area, Entry, Folder, Refused, Skipped, tree

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
_CHUNK = 1 << 20
_MAX_DEPTH = 32


@dataclass
class Mirror:
    """A private copy of some areas: ``top`` + an area's absolute path is its copy."""

    top: str
    refused: dict[str, str] = field(default_factory=dict)  # original path -> why not copied
    left_out: int = 0  # files past the copy's limits
    files: int = 0
    size: int = 0

    def inside(self, place: Place) -> str:
        return self.top + place.path

    def unmap(self, text: str) -> str:
        """``text`` with the copy's paths turned back into the areas' own."""
        return text.replace(self.top, "")

    def remove(self) -> None:
        shutil.rmtree(self.top, ignore_errors=True)


def make_mirror(roots: Iterable[Path], *, git: bool, limits: ShellLimits) -> Mirror:
    """Copy ``roots`` (resolved areas) into a new private folder (blocking)."""
    areas = sorted(set(roots), key=lambda r: len(str(r)))
    mirror = Mirror(os.path.realpath(tempfile.mkdtemp(prefix="memd-shell-")))
    try:
        for root in areas:
            if any(root.is_relative_to(other) for other in areas if other != root):
                continue  # inside another area copied whole
            _copy_area(root, mirror, git=git, limits=limits)
    except BaseException:
        mirror.remove()
        raise
    return mirror


def _copy_area(root: Path, mirror: Mirror, *, git: bool, limits: ShellLimits) -> None:
    into = mirror.top + str(root)
    os.makedirs(into, mode=0o700, exist_ok=True)
    try:
        area = Area.open(root)
    except FileNotFoundError:
        return  # not made yet: an empty area
    except (OSError, ValueError) as exc:
        mirror.refused[str(root)] = exc.kind if isinstance(exc, Refused) else "not readable"
        return
    with area:
        skip = frozenset() if git else frozenset({".git"})
        for item in tree(area, skip=skip, max_depth=_MAX_DEPTH):
            match item:
                case Folder():
                    os.makedirs(os.path.join(into, item.relative), mode=0o700, exist_ok=True)
                case Skipped():
                    mirror.refused[str(area.path(item.relative))] = item.kind
                case Entry():
                    _copy_file(area, item, os.path.join(into, item.relative), mirror, limits)


def _copy_file(area: Area, entry: Entry, dest: str, mirror: Mirror, limits: ShellLimits) -> None:
    if mirror.files >= limits.copy_max_files or mirror.size + entry.info.st_size > (
        limits.copy_max_bytes
    ):
        mirror.left_out += 1
        return
    try:
        fd = area.open_file(entry.relative)
    except (OSError, ValueError) as exc:
        if isinstance(exc, Refused):
            mirror.refused[str(area.path(entry.relative))] = exc.kind
        return
    try:
        info = os.fstat(fd)
        out = os.open(dest, _WRITE_FLAGS, 0o600)
        try:
            left = limits.copy_max_bytes - mirror.size
            while left > 0 and (block := os.read(fd, min(_CHUNK, left))):
                os.write(out, block)
                left -= len(block)
                mirror.size += len(block)
            os.fchmod(out, info.st_mode & 0o777)
            os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(fd)
    mirror.files += 1


# ---------------------------------------------------------------------------------------------
# The argv, mapped into the copy


@dataclass(frozen=True)
class Plan:
    """What one pipeline reads, placed in its areas, and where it runs."""

    cwd: Place
    reads: tuple[tuple[str, Place], ...]  # (path as written, its place)

    @property
    def roots(self) -> set[Path]:
        return {self.cwd.root, *(place.root for _, place in self.reads)}


def plan(pipeline: Pipeline, *, cwd: Path, roots: tuple[Root, ...], casefold: bool) -> Plan | Deny:
    """Place the working directory and every path the pipeline reads in an area (pure)."""
    where = locate(str(cwd), base=cwd, roots=roots, casefold=casefold)
    if isinstance(where, Deny):
        return Deny("denied: the shell's working directory is not inside an area")
    base = Path(where.path)
    reads: list[tuple[str, Place]] = []
    for read in pipeline.reads:
        place = locate(read.path, base=base, roots=roots, casefold=casefold)
        if isinstance(place, Deny):
            return Deny(f"denied: the command reads {read.path}: {place.reason[8:]}")
        reads.append((read.path, place))
    return Plan(where, tuple(reads))


def map_pipeline(pipeline: Pipeline, plan: Plan, mirror: Mirror) -> Pipeline | Deny:
    """The pipeline with its paths in the copy, parsed again; refused unless every path it
    reads lies in the copy."""
    places = dict(plan.reads)
    commands: list[Command] = []
    for command in pipeline.commands:
        reads = {read.path for read in command.reads}
        argv = tuple(_map_token(token, reads, places, mirror) for token in command.argv)
        parsed = parse_argv(argv)
        if isinstance(parsed, Deny):
            return parsed
        for read in parsed.reads:
            if not _contained(read.path, mirror):
                return Deny(
                    f"denied: the shell cannot tell where {mirror.unmap(read.path)} lies; "
                    "name each path as an argument of its own"
                )
        commands.append(parsed)
    return Pipeline(tuple(commands))


def _map_token(token: str, reads: set[str], places: dict[str, Place], mirror: Mirror) -> str:
    if token in reads:
        return _mapped(token, places, mirror)
    if token.startswith("--") and "=" in token:
        name, _, value = token.partition("=")
        if value in reads:
            return f"{name}={_mapped(value, places, mirror)}"
    elif token.startswith("-") and len(token) > 2 and token[2:] in reads:
        return token[:2] + _mapped(token[2:], places, mirror)
    return token


def _mapped(path: str, places: dict[str, Place], mirror: Mirror) -> str:
    if not path.startswith("/") and ".." not in path.split("/"):
        return path  # beneath the working directory, which is in the copy
    place = places.get(path)
    return mirror.inside(place) if place is not None else path


def _contained(path: str, mirror: Mirror) -> bool:
    if ".." in path.split("/"):
        return False
    if path.startswith("/"):
        return path == mirror.top or path.startswith(mirror.top + "/")
    return True


def refused_reads(plan: Plan, mirror: Mirror, *, git: bool) -> Deny | None:
    """A path the pipeline names that the copy left out as a link, a hard link or a special
    file (or, for git, anything of ``.git`` left out), said plainly instead of 'not found'."""
    for written, place in plan.reads:
        for original, kind in mirror.refused.items():
            if place.path == original or place.path.startswith(original + "/"):
                return Deny(
                    f"denied: {written} ({original}) is {kind}; the shell sees no links, "
                    "hard-linked files or special files of the area"
                )
    if git:
        git_dir = plan.cwd.path.rstrip("/") + "/.git"
        for original, kind in mirror.refused.items():
            if original == git_dir or original.startswith(git_dir + "/"):
                return Deny(
                    f"denied: git here: {original} is {kind}, so the repository would be "
                    "read in part from elsewhere"
                )
    return None


# ---------------------------------------------------------------------------------------------
# One call


@dataclass(frozen=True)
class Ran:
    """What the model sees of a command that ran over the copy."""

    text: str
    failed: bool


async def run_over_copy(pipeline: Pipeline, planned: Plan, *, limits: ShellLimits) -> Ran | Deny:
    """Copy the areas ``planned`` reads, run ``pipeline`` over the copy, remove it."""
    git = any(command.argv[0] == "git" for command in pipeline.commands)
    mirror = await anyio.to_thread.run_sync(
        lambda: make_mirror(planned.roots, git=git, limits=limits)
    )
    try:
        refused = refused_reads(planned, mirror, git=git)
        mapped = map_pipeline(pipeline, planned, mirror) if refused is None else refused
        if isinstance(mapped, Deny):
            return Deny(mirror.unmap(mapped.reason))
        cwd = Path(mirror.inside(planned.cwd))
        outcome = await run_readonly(mapped, cwd=cwd, limits=limits)
        if isinstance(outcome, Deny):
            return Deny(mirror.unmap(outcome.reason))
        text = mirror.unmap(outcome.render())
        if mirror.left_out:
            text += (
                f"\n[the command ran over a copy of the area that left out {mirror.left_out} "
                f"file(s) past its limits ({limits.copy_max_files} files, "
                f"{limits.copy_max_bytes} bytes); use Read or Grep for those]"
            )
        return Ran(text, outcome.failed)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(mirror.remove)
