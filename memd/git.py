"""memd's own git calls on a user's repository: read-only, bounded, and unable to run a program.

Memories cite the code of the repository a session works in (:mod:`memd.memory.verify`), and
checking them asks git four questions: where is the work tree, which commit and branch is it
at, did a commit rename or touch a file, is a commit known. That repository is the user's
(or anyone's: a clone of a hostile project), so its config is hostile input: every call runs
with the sandbox's pinning (:func:`memd.agent.vcs.pinned_config_environment`, in an
environment built from nothing by :func:`memd.agent.process.shell_environment`): no system or
global config, the settings that name a program (``core.fsmonitor``, ``core.pager``, hooks,
``gpg.program``, ssh, askpass, credential helpers …) overridden in the command-line scope,
which beats the repository's config and anything it includes, no protocol (nothing is
fetched, not even a partial clone's lazy objects) and no optional locks (a read never
rewrites the index). What cannot be overridden by name (``diff.<driver>.textconv``,
``filter.<driver>.clean``, ``diff.external``) is never reached: memd runs only plumbing that
reads commits and trees (``rev-parse``, ``rev-list``, ``log --name-status`` with
``--no-ext-diff --no-textconv``, ``cat-file --batch-check``), never a command that compares
the work tree (``status``, ``diff-files``), and hashes file content itself.

Each call has a timeout (:data:`GIT_TIMEOUT_S`) and runs in a session of its own, killed
with it on any way out; its output is read as it comes and cut at :data:`MAX_OUTPUT_BYTES`,
where git is killed (a repository cannot make memd hold more). A folder
that is not a work tree (or that git refuses: another user's repository) is reported as
:class:`NotAWorkTree` and recorded in :data:`skipped`, which ``status`` shows; git never runs
with a memory dir as its work tree (:func:`find_work_tree` takes the dir to avoid).

Blocking: call from a worker thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import select
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from memd import git_index
from memd.agent.process import SAFE_PATH, shell_environment
from memd.agent.vcs import pinned_config_environment
from memd.git_index import IndexEntry

GIT_TIMEOUT_S = 5.0
MIN_CALL_S = 0.02
MAX_OUTPUT_BYTES = 4 * 1024 * 1024
_MAX_STDERR_BYTES = 64 * 1024
_READ_CHUNK = 64 * 1024
_SKIPPED_LIMIT = 64


@dataclass(frozen=True)
class WorkTree:
    """A git work tree: its top folder and its git dir (absolute, as git named them)."""

    root: Path
    git_dir: Path


@dataclass(frozen=True)
class NotAWorkTree:
    folder: str
    reason: str


@dataclass(frozen=True)
class GitFailed:
    """A git call that did not answer: its words, or the timeout, or a missing git."""

    reason: str


class Skipped:
    """Folders memd's git calls were skipped in, and why (newest kept, bounded); ``status``
    shows them. A folder leaves when it becomes a work tree."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[str, float]] = {}

    def record(self, folder: str, reason: str) -> None:
        with self._lock:
            self._rows.pop(folder, None)
            self._rows[folder] = (reason, time.time())
            while len(self._rows) > _SKIPPED_LIMIT:
                self._rows.pop(next(iter(self._rows)))

    def clear(self, folder: str) -> None:
        with self._lock:
            self._rows.pop(folder, None)

    def as_rows(self) -> list[dict[str, object]]:
        with self._lock:
            items = list(self._rows.items())
        return [{"folder": f, "reason": r, "since": round(t, 3)} for f, (r, t) in items]


skipped = Skipped()


_LIMIT = threading.local()


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Every git call this thread makes inside the block ends within ``seconds`` from now
    (a call with no time left is not started): a recall's deadline covers its git calls."""
    previous = getattr(_LIMIT, "until", None)
    _LIMIT.until = time.monotonic() + max(0.0, seconds)
    try:
        yield
    finally:
        _LIMIT.until = previous


def _time_left(timeout_s: float) -> float:
    until = getattr(_LIMIT, "until", None)
    return timeout_s if until is None else min(timeout_s, until - time.monotonic())


def git_executable() -> str | None:
    """The git program on the safe path, or ``None``."""
    return shutil.which("git", path=SAFE_PATH)


def _environment(tree: WorkTree | None, cwd: Path) -> dict[str, str]:
    env = pinned_config_environment(shell_environment(cwd))
    env.pop("GIT_CEILING_DIRECTORIES", None)
    if tree is not None:
        env.update(GIT_DIR=str(tree.git_dir), GIT_WORK_TREE=str(tree.root))
    return env


def run_git(
    tree: WorkTree | None,
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    stdin: bytes = b"",
    timeout_s: float = GIT_TIMEOUT_S,
) -> bytes | GitFailed:
    """git's stdout for ``args`` on ``tree`` (pinned with ``GIT_DIR``/``GIT_WORK_TREE``), or
    why not. ``tree=None`` only for discovery, from ``cwd``."""
    git = git_executable()
    if git is None:
        return GitFailed("git is not installed")
    timeout_s = _time_left(timeout_s)
    if timeout_s < MIN_CALL_S:
        return GitFailed("no time was left for git")
    folder = cwd if cwd is not None else tree.root if tree is not None else None
    if folder is None:
        raise ValueError("run_git needs a tree or a cwd")
    try:
        done = run_bounded(
            [git, "--no-pager", *args], folder, _environment(tree, folder), stdin, timeout_s
        )
    except OSError as exc:
        return GitFailed(f"git could not run ({exc.strerror or exc})")
    if done is None:
        return GitFailed(f"git {args[0]} did not answer within {timeout_s:g} s")
    code, out, err = done
    if code not in (0, None):
        words = err.decode("utf-8", errors="replace").strip().splitlines()
        return GitFailed(words[0][:300] if words else f"git exited with {code}")
    return out


def run_bounded(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    stdin: bytes,
    timeout_s: float,
    *,
    pass_fds: Sequence[int] = (),
) -> tuple[int | None, bytes, bytes] | None:
    """Run ``argv`` in a session of its own: its exit code, stdout and stderr, read as they
    come; ``None`` when it did not end within ``timeout_s``. At :data:`MAX_OUTPUT_BYTES` of
    stdout it is killed and what it wrote so far is its output (exit code ``None``): memory
    stays bounded whatever a repository makes git print. Its process group is killed on any
    way out, so no git outlives the call. ``pass_fds``: descriptors git inherits (a lock
    it then holds for as long as it runs, even past a kill of the caller)."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    try:
        deadline = time.monotonic() + timeout_s
        read = _communicate(proc, stdin, deadline)
        if read is None:
            return None
        out, err, cut = read
        if cut:
            return None, out, err
        return proc.wait(max(0.0, deadline - time.monotonic())), out, err
    except subprocess.TimeoutExpired:
        return None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _communicate(
    proc: subprocess.Popen[bytes], stdin: bytes, deadline: float
) -> tuple[bytes, bytes, bool] | None:
    """``proc``'s stdout and stderr (``stdin`` fed meanwhile) up to their ends, or until
    stdout reaches :data:`MAX_OUTPUT_BYTES` (then ``True``: cut); ``None`` at the deadline."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out: list[bytes] = []
    err: list[bytes] = []
    sizes = {proc.stdout.fileno(): 0, proc.stderr.fileno(): 0}
    pending = memoryview(stdin)
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        if pending:
            selector.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for key, _ in selector.select(left):
                if key.fileobj is proc.stdin:
                    pending = _feed(selector, proc.stdin, pending)
                    continue
                fd = key.fd
                chunk = os.read(fd, _READ_CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                room = (MAX_OUTPUT_BYTES if key.data is out else _MAX_STDERR_BYTES) - sizes[fd]
                if room > 0:
                    key.data.append(chunk[:room])
                sizes[fd] += len(chunk)
                if key.data is out and sizes[fd] >= MAX_OUTPUT_BYTES:
                    return b"".join(out), b"".join(err), True
    return b"".join(out), b"".join(err), False


def _feed(selector: selectors.BaseSelector, pipe: IO[bytes], pending: memoryview) -> memoryview:
    """Write what the pipe takes now of ``pending`` (a pipe that is writable takes
    ``PIPE_BUF`` bytes without blocking); closed once all is written or git stopped reading."""
    try:
        pending = pending[os.write(pipe.fileno(), pending[: select.PIPE_BUF]) :]
    except BrokenPipeError:
        pending = pending[:0]
    if not pending:
        selector.unregister(pipe)
        pipe.close()
    return pending


def find_work_tree(folder: Path, *, avoid: Path | None = None) -> WorkTree | NotAWorkTree:
    """The work tree ``folder`` is in, or why memd does not run git there (recorded in
    :data:`skipped`). ``avoid``: a memory dir, never taken as (or inside) the work tree."""
    found = _discover(folder, avoid)
    if isinstance(found, NotAWorkTree):
        skipped.record(found.folder, found.reason)
    else:
        skipped.clear(str(folder))
    return found


def _discover(folder: Path, avoid: Path | None) -> WorkTree | NotAWorkTree:
    name = str(folder)
    if avoid is not None and _within(folder, avoid):
        return NotAWorkTree(name, "it is a memory dir; memd runs no git there")
    if not folder.is_absolute() or not folder.is_dir():
        return NotAWorkTree(name, "not an existing absolute folder")
    out = run_git(None, ["rev-parse", "--show-toplevel", "--absolute-git-dir"], cwd=folder)
    if isinstance(out, GitFailed):
        return NotAWorkTree(name, f"not a git work tree ({out.reason})")
    lines = out.rstrip(b"\n").split(b"\n")
    if len(lines) != 2 or not all(lines):
        return NotAWorkTree(name, "not a git work tree (a bare repository or a git dir)")
    root, git_dir = (Path(os.fsdecode(line)) for line in lines)
    if avoid is not None and _within(root, avoid):
        return NotAWorkTree(name, "its work tree is a memory dir; memd runs no git there")
    return WorkTree(root, git_dir)


def open_work_tree(
    folder: Path, *, avoid: Path | None = None
) -> tuple[WorkTree, Head | GitFailed] | NotAWorkTree:
    """The work tree ``folder`` is in and its HEAD (as :func:`find_work_tree` and
    :func:`head` give them), in one git call when the repository has commits."""
    if folder.is_absolute() and (avoid is None or not _within(folder, avoid)):
        args = ["rev-parse", "--show-toplevel", "--absolute-git-dir"]
        out = run_git(None, [*args, "HEAD", "--symbolic-full-name", "HEAD"], cwd=folder)
        lines = out.rstrip(b"\n").split(b"\n") if isinstance(out, bytes) else []
        if len(lines) == 4 and all(lines) and _is_hex(lines[2].decode("ascii", "replace")):
            root, git_dir = (Path(os.fsdecode(line)) for line in lines[:2])
            if avoid is None or not _within(root, avoid):
                skipped.clear(str(folder))
                return WorkTree(root, git_dir), _head(lines[2:])
    found = find_work_tree(folder, avoid=avoid)  # no commits, or not a work tree: say which
    return found if isinstance(found, NotAWorkTree) else (found, head(found))


def _within(path: Path, folder: Path) -> bool:
    try:
        return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class Head:
    """The commit a work tree is at and its branch (``None`` when detached)."""

    commit: str
    branch: str | None


def head(tree: WorkTree) -> Head | GitFailed:
    """The commit and branch of ``tree``; a repository without commits is a failure."""
    out = run_git(tree, ["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"])
    if isinstance(out, GitFailed):
        return out
    return _head(out.split(b"\n"))


def _head(lines: Sequence[bytes]) -> Head | GitFailed:
    """The Head in ``rev-parse HEAD --symbolic-full-name HEAD``'s lines."""
    commit = lines[0].decode("utf-8", errors="replace") if lines else ""
    if not commit:
        return GitFailed("the repository has no commits")
    ref = lines[1].decode("utf-8", errors="replace") if len(lines) > 1 else ""
    branch = ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None
    return Head(commit, branch)


def known_commits(tree: WorkTree, commits: Sequence[str]) -> frozenset[str] | GitFailed:
    """Those of ``commits`` (hex ids) that name a commit in ``tree``'s repository, one call."""
    wanted = [c for c in dict.fromkeys(commits) if _is_hex(c)]
    if not wanted:
        return frozenset()
    batch = "".join(f"{c}^{{commit}}\n" for c in wanted).encode()
    out = run_git(tree, ["cat-file", "--batch-check=%(objecttype)"], stdin=batch)
    if isinstance(out, GitFailed):
        return out
    answers = out.decode("utf-8", errors="replace").split("\n")
    return frozenset(c for c, a in zip(wanted, answers, strict=False) if a == "commit")


def commits_touching(tree: WorkTree, since: str, path: str) -> int | GitFailed:
    """How many commits after ``since`` up to HEAD changed ``path``."""
    if not _is_hex(since):
        return GitFailed("not a commit id")
    out = run_git(tree, ["rev-list", "--count", f"{since}..HEAD", "--", f":(literal){path}"])
    if isinstance(out, GitFailed):
        return out
    text = out.strip()
    return int(text) if text.isdigit() and len(text) < 12 else GitFailed("unreadable count")


RENAME_SEARCH_COMMITS = 500


def renamed_to(tree: WorkTree, since: str | None, path: str) -> str | GitFailed | None:
    """Where ``path`` went through the renames git detects in the commits after ``since``
    (the last :data:`RENAME_SEARCH_COMMITS` when ``since`` is unknown), then in the index;
    ``None`` when it was not renamed."""
    span = [f"{since}..HEAD"] if since and _is_hex(since) else ["-n", str(RENAME_SEARCH_COMMITS)]
    args = ["log", "-z", "-M", "--diff-filter=R", "--name-status", "--format=", "--reverse"]
    out = run_git(tree, [*args, "--no-ext-diff", "--no-textconv", *span])
    if isinstance(out, GitFailed):
        return out
    staged = run_git(tree, ["diff-index", "-z", "--cached", "-M", "--name-status", "HEAD"])
    current, moved = path, False
    for old, new in _renames(out) + _renames(staged if isinstance(staged, bytes) else b""):
        if old == current:
            current, moved = new, True
    return current if moved else None


def _renames(out: bytes) -> list[tuple[str, str]]:
    """The (old, new) pairs in ``--name-status -z`` output."""
    tokens = [t for t in out.split(b"\0") if t.strip(b"\n")]
    pairs: list[tuple[str, str]] = []
    at = 0
    while at < len(tokens):
        status = tokens[at].strip(b"\n")
        if status[:1] in (b"R", b"C") and at + 2 < len(tokens):
            if status[:1] == b"R":
                pairs.append((os.fsdecode(tokens[at + 1]), os.fsdecode(tokens[at + 2])))
            at += 3
        else:
            at += 2
    return pairs


_INDEX_ENTRY = re.compile(
    rb"\d+ ([0-9a-f]{40,64}) 0\t([^\0]*)\0  ctime: (\d+):(\d+)\n  mtime: (\d+):(\d+)\n"
    rb"  dev: \d+\tino: (\d+)\n  uid: \d+\tgid: \d+\n  size: (\d+)\tflags: [0-9a-f]+\n"
)
_NS = 1_000_000_000


def index_entries(
    tree: WorkTree, *, oid_size: int | None = None
) -> dict[str, IndexEntry] | GitFailed:
    """The index's stage-0 entries by path: read from the index file itself
    (:func:`memd.git_index.read_index`; ``oid_size``: the repository's object id length in
    bytes, when known), else from ``ls-files --debug`` (reads the index, never the work tree;
    cut at :data:`MAX_OUTPUT_BYTES` of output, the rest left out)."""
    if oid_size is not None:
        read = git_index.read_index(tree.git_dir, oid_size)
        if read is not None:
            return read.entries
    return git_index_entries(tree)


def git_index_entries(tree: WorkTree) -> dict[str, IndexEntry] | GitFailed:
    """The index's stage-0 entries by path as ``git ls-files -s --debug`` gives them."""
    out = run_git(tree, ["ls-files", "-s", "--debug", "-z"])
    if isinstance(out, GitFailed):
        return out
    return {
        os.fsdecode(path): IndexEntry(
            blob.decode(), int(cs) * _NS + int(cn), int(ms) * _NS + int(mn), int(ino), int(size)
        )
        for blob, path, cs, cn, ms, mn, ino, size in _INDEX_ENTRY.findall(out)
    }


def blob_id(data: bytes) -> str:
    """The id git gives ``data`` as a blob (SHA-1 object format)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _is_hex(text: str) -> bool:
    return 4 <= len(text) <= 64 and all(c in "0123456789abcdef" for c in text)
