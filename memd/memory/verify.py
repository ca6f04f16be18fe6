"""Checking a memory's citations against the code before an agent trusts it (issue 26).

:class:`Verifier` answers, for the citations of one memory (:mod:`memd.memory.citations`),
what no longer holds, each as a sentence an agent can act on:

* the cited path is gone (and, when git saw a rename after the memory's commit, where to);
* a cited symbol is no longer in the file;
* the cited lines changed (or moved: the same lines are now elsewhere in the file);
* the cited file changed, and how many commits have touched it since the memory's commit
  (none: the change is not committed yet);
* the commit the memory was written at is not in the repository (rebased away, another
  clone), or the work tree is on another branch than the memory was written on.

A citation *fails* when its path, lines, content or a symbol no longer hold; a moved range,
another branch or an unknown commit are warnings that leave it verified. A memory whose
citations all fail ranks below the others in recall.

Costs are bounded and cached by file state. The repository's state (work tree, HEAD commit
and branch) is kept while ``HEAD``, the index and HEAD's reflog keep their ``stat``; each
citation's check is kept while its file's ``stat`` and the HEAD commit are the same, so a
warm check is one ``stat`` per cited file, and git runs only for a citation that fails (the
commit count, the rename) or a commit not seen before. Memories without recorded citations
get them inferred from their text on first read, with what the file holds then as their
baseline (cached by the memory's mtime; the memory file is not written). A check stops at
its deadline: what is left is reported unchecked, not waited for.

Blocking: call from a worker thread. Files of the work tree are read beneath its root's
directory descriptor (:class:`memd.confined.Area`), regular one-link files only, no link
followed on the way (a cited path through a link counts as gone), at most
:data:`MAX_FILE_BYTES` each.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from memd import git
from memd.confined import Area
from memd.git_index import IndexEntry
from memd.memory.citations import Citation, content_hash, symbol_in

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_MOVED_SEARCH_LINES = 200_000  # file lines x cited lines searched for a moved range
REPO_REFRESH_S = 30.0
NOT_A_TREE_REFRESH_S = 10.0
CACHE_ENTRIES = 20_000
INDEX_FROM_CITATIONS = 32  # a check of this many reads git's index first (one call)
FileSig = tuple[int, int, int, int]
_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass(frozen=True)
class CitationCheck:
    citation: Citation
    warnings: tuple[str, ...]
    fails: bool


@dataclass(frozen=True)
class MemoryCheck:
    """The checks of one memory's citations; ``notes`` are the repository's (another branch,
    an unknown commit, not a work tree, checks cut by the deadline)."""

    checks: tuple[CitationCheck, ...]
    notes: tuple[str, ...] = ()

    @property
    def warnings(self) -> tuple[str, ...]:
        found = [w for check in self.checks for w in check.warnings]
        return tuple(dict.fromkeys([*found, *self.notes]))

    @property
    def failing(self) -> bool:
        """All of its citations fail (a memory without citations never does)."""
        return bool(self.checks) and all(c.fails for c in self.checks)

    @property
    def verified(self) -> bool:
        return bool(self.checks) and not any(c.fails for c in self.checks)


@dataclass(frozen=True)
class Repository:
    """Where citations are read: a work tree (with its HEAD) or a plain folder."""

    root: Path
    tree: git.WorkTree | None
    head: git.Head | None
    skipped: str | None  # why git does not run here


@dataclass(frozen=True)
class _File:
    data: bytes


class Verifier:
    """Checks and the caches behind them; one per daemon, shared by threads."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._repos: dict[str, tuple[tuple[FileSig | None, ...], float, Repository]] = {}
        self._checks: OrderedDict[tuple[object, ...], CitationCheck] = OrderedDict()
        self._inferred: OrderedDict[tuple[str, int], tuple[Citation, ...]] = OrderedDict()
        self._known: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._index_cache: tuple[tuple[str, FileSig], _Index] | None = None

    # -- the repository ------------------------------------------------------------------------

    def repository(self, folder: Path, *, avoid: Path | None = None) -> Repository:
        """The repository of ``folder`` (a session's cwd), from the cache while its state
        files keep their ``stat``."""
        key = str(folder)
        now = self._clock()
        with self._lock:
            cached = self._repos.get(key)
        if cached is not None:
            sigs, at, repo = cached
            fresh = now - at < (REPO_REFRESH_S if repo.tree else NOT_A_TREE_REFRESH_S)
            if fresh and sigs == _state_sigs(repo.tree):
                return repo
        repo = _open_repository(folder, avoid)
        with self._lock:
            self._repos[key] = (_state_sigs(repo.tree), now, repo)
            if len(self._repos) > 256:
                self._repos.pop(next(iter(self._repos)))
        return repo

    # -- citations -----------------------------------------------------------------------------

    def baseline(self, repo: Repository, cited: Sequence[Citation]) -> tuple[Citation, ...]:
        """``cited`` as seen now: the file's hash (of the cited lines), the HEAD commit and
        branch, and of the candidate symbols those the file holds. A path that is not a file
        of the work tree, or lines past its end, are left out (nothing to check them by)."""
        out: list[Citation] = []
        for citation in cited:
            loaded = _read(repo.root, citation.path)
            if loaded is None:
                continue
            lines = loaded.data.split(b"\n")
            if citation.lines is not None and citation.lines[1] > len(lines):
                continue
            symbols = tuple(s for s in citation.symbols if symbol_in(s, loaded.data))[:8]
            out.append(
                replace(
                    citation,
                    symbols=symbols,
                    hash=content_hash(_cited(lines, citation.lines)),
                    blob=git.blob_id(loaded.data) if len(loaded.data) < MAX_FILE_BYTES else None,
                    commit=repo.head.commit if repo.head else None,
                    branch=repo.head.branch if repo.head else None,
                )
            )
        return tuple(out)

    def inferred(
        self, repo: Repository, key: tuple[str, int], infer: Callable[[], Sequence[Citation]]
    ) -> tuple[Citation, ...]:
        """Citations inferred from a memory's text (``key``: its path and mtime), with their
        baseline taken on first read and kept while the memory is unchanged."""
        with self._lock:
            found = self._inferred.get(key)
        if found is None:
            found = self.baseline(repo, infer())
            with self._lock:
                self._inferred[key] = found
                _trim(self._inferred)
        return found

    def check(
        self, repo: Repository, cited: Sequence[Citation], *, deadline: float | None = None
    ) -> MemoryCheck:
        """What no longer holds of ``cited`` in ``repo``; see the module docstring."""
        checks: list[CitationCheck] = []
        notes: list[str] = []
        if repo.skipped is not None and cited:
            notes.append(f"commits were not checked: {repo.skipped}")
        index = self._index(repo) if len(cited) >= INDEX_FROM_CITATIONS else None
        for citation in cited:
            if deadline is not None and self._clock() > deadline:
                notes.append("some citations were not checked (the recall's time ran out)")
                break
            checks.append(self._check_one(repo, citation, index))
            notes.extend(self._history_notes(repo, citation))
        return MemoryCheck(tuple(checks), tuple(dict.fromkeys(notes)))

    def _check_one(
        self, repo: Repository, citation: Citation, index: _Index | None = None
    ) -> CitationCheck:
        sig = _sig(repo.root, citation.path)
        key = (str(repo.root), citation, sig, repo.head.commit if repo.head else None)
        with self._lock:
            found = self._checks.get(key)
            if found is not None:
                self._checks.move_to_end(key)
                return found
        if index is not None and _staged_unchanged(index, citation, sig):
            checked = CitationCheck(citation, (), False)  # the blob seen at write: no read
        else:
            checked = _check_file(repo, citation)
        with self._lock:
            self._checks[key] = checked
            _trim(self._checks)
        return checked

    def _index(self, repo: Repository) -> _Index | None:
        """Git's index of ``repo`` (its entries and its own mtime), kept while its ``stat``
        is the same."""
        if repo.tree is None:
            return None
        path = repo.tree.git_dir / "index"
        sig = _sig(repo.tree.git_dir, "index")
        if sig is None:
            return None
        with self._lock:
            if self._index_cache is not None and self._index_cache[0] == (str(path), sig):
                return self._index_cache[1]
        oid_size = len(repo.head.commit) // 2 if repo.head is not None else None
        entries = git.index_entries(repo.tree, oid_size=oid_size)
        if isinstance(entries, git.GitFailed):
            return None
        index = _Index(entries, sig[1])
        with self._lock:
            self._index_cache = ((str(path), sig), index)
        return index

    def _history_notes(self, repo: Repository, citation: Citation) -> list[str]:
        if repo.tree is None or repo.head is None:
            return []
        notes: list[str] = []
        seen_at = citation.commit  # HEAD's own commit is known without asking git
        if seen_at not in (None, repo.head.commit) and not self._commit_known(repo.tree, seen_at):
            notes.append(
                f"the commit this memory was written at ({seen_at[:10]}) is not in this "
                "repository (rebased away, or another clone): its citations were checked "
                "against the files only"
            )
        if citation.branch is not None and citation.branch != repo.head.branch:
            now = f"on branch {repo.head.branch}" if repo.head.branch else "at a detached HEAD"
            notes.append(
                f"this memory was written on branch {citation.branch}; the repository is now {now}"
            )
        return notes

    def _commit_known(self, tree: git.WorkTree, commit: str) -> bool:
        key = (str(tree.git_dir), commit)
        with self._lock:
            known = self._known.get(key)
        if known is None:
            answer = git.known_commits(tree, [commit])
            if isinstance(answer, git.GitFailed):
                return True  # not known to be unknown: say nothing
            known = commit in answer
            with self._lock:
                self._known[key] = known
                _trim(self._known)
        return known


# ---------------------------------------------------------------------------------------------
# One citation


def _check_file(repo: Repository, citation: Citation) -> CitationCheck:
    loaded = _read(repo.root, citation.path)
    if loaded is None:
        return CitationCheck(citation, (_gone(repo, citation),), True)
    lines = loaded.data.split(b"\n")
    warnings: list[str] = []
    fails = False
    if citation.lines is not None and citation.lines[1] > len(lines):
        start, end = citation.lines
        warnings.append(
            f"the cited lines {start}-{end} of {citation.path} are past its end "
            f"(it has {len(lines)} lines now)"
        )
        fails = True
    elif citation.hash is not None and content_hash(_cited(lines, citation.lines)) != citation.hash:
        moved = _moved(lines, citation)
        if moved is not None:
            warnings.append(f"the cited lines of {citation.label} are now at lines {moved}")
        else:
            warnings.append(_changed(repo, citation))
            fails = True
    for symbol in citation.symbols:
        if not symbol_in(symbol, loaded.data):
            warnings.append(f"{symbol} is no longer in {citation.path}")
            fails = True
    return CitationCheck(citation, tuple(warnings), fails)


def _gone(repo: Repository, citation: Citation) -> str:
    text = f"{citation.path} (cited) no longer exists"
    if repo.tree is None:
        return text
    moved = git.renamed_to(repo.tree, citation.commit, citation.path)
    if isinstance(moved, git.GitFailed):
        return f"{text} (whether git saw it renamed is unknown: {moved.reason})"
    if moved is not None:
        return f"{text}; git saw it renamed to {moved}"
    return f"{text} (deleted or moved; git saw no rename)"


def _changed(repo: Repository, citation: Citation) -> str:
    what = (
        f"lines {citation.lines[0]}-{citation.lines[1]} of {citation.path}"
        if citation.lines is not None
        else citation.path
    )
    text = f"{what} changed since this memory was written"
    if repo.tree is None or citation.commit is None:
        return text
    count = git.commits_touching(repo.tree, citation.commit, citation.path)
    if isinstance(count, git.GitFailed):
        return text
    if count == 0:
        return f"{text} (edits not committed yet)"
    noun = "commit has" if count == 1 else "commits have"
    return f"{text}: {count} {noun} touched {citation.path} since {citation.commit[:10]}"


def _cited(lines: Sequence[bytes], span: tuple[int, int] | None) -> Sequence[bytes]:
    return lines if span is None else lines[span[0] - 1 : span[1]]


def _moved(lines: Sequence[bytes], citation: Citation) -> str | None:
    if citation.lines is None:
        return None
    size = citation.lines[1] - citation.lines[0] + 1
    if size * len(lines) > MAX_MOVED_SEARCH_LINES:
        return None
    for start in range(len(lines) - size + 1):
        if content_hash(lines[start : start + size]) == citation.hash:
            return f"{start + 1}-{start + size}"
    return None


# ---------------------------------------------------------------------------------------------
# Files and state


@dataclass(frozen=True)
class _Index:
    entries: dict[str, IndexEntry]
    mtime_ns: int  # of the index file: an entry staged in its last tick may be racy


def _staged_unchanged(index: _Index, citation: Citation, sig: FileSig | None) -> bool:
    """The file is the blob the memory saw, by git's own test: the index holds that blob
    for it, staged with the file's current inode, mtime and size, not in the index's last
    tick (git's "racy" case, where the same stat may hide an edit). The ctime is compared
    too: an edit that puts the mtime back cannot put it back."""
    entry = index.entries.get(citation.path)
    if entry is None or sig is None or citation.blob is None or entry.blob != citation.blob:
        return False
    ino, mtime_ns, size, ctime_ns = sig
    same = (entry.ino, entry.size) == (ino & 0xFFFFFFFF, size & 0xFFFFFFFF)
    times = (entry.mtime_ns, entry.ctime_ns) == (mtime_ns, ctime_ns)
    return same and times and entry.mtime_ns < index.mtime_ns


def _read(root: Path, relative: str) -> _File | None:
    """The file ``relative`` of the work tree, opened beneath the root's descriptor without
    following a link on the way (:class:`memd.confined.Area`: a folder swapped for a link
    between two reads cannot lead outside); a link, a hard-linked or special file is
    ``None``, as a missing one is. Files and folders of any owner are read."""
    try:
        with Area.open(root, any_owner=True, report=False) as area:
            data, _ = area.read(relative, max_bytes=MAX_FILE_BYTES)
    except (OSError, ValueError):
        return None
    return _File(data)


def _sig(root: Path, relative: str) -> FileSig | None:
    try:
        return _stat_sig(os.stat(f"{root}/{relative}", follow_symlinks=False))
    except (OSError, ValueError):
        return None


def _stat_sig(info: os.stat_result) -> FileSig:
    return (info.st_ino, info.st_mtime_ns, info.st_size, info.st_ctime_ns)


def _state_sigs(tree: git.WorkTree | None) -> tuple[FileSig | None, ...]:
    if tree is None:
        return ()
    names = ("HEAD", "index", "logs/HEAD", "packed-refs")
    return tuple(_sig(tree.git_dir, name) for name in names)


def _open_repository(folder: Path, avoid: Path | None) -> Repository:
    found = git.open_work_tree(folder, avoid=avoid)
    if isinstance(found, git.NotAWorkTree):
        return Repository(folder, None, None, found.reason)
    tree, head = found
    if isinstance(head, git.GitFailed):
        return Repository(tree.root, tree, None, head.reason)
    return Repository(tree.root, tree, head, None)


def _trim(cache: OrderedDict[_K, _V]) -> None:
    while len(cache) > CACHE_ENTRIES:
        cache.popitem(last=False)
