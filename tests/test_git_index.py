"""git's index file read by memd (issue 26's cold check): every entry as ``git ls-files -s
--debug`` gives it, for index versions 2, 3 and 4 and SHA-1 and SHA-256 repositories; what is
not parsed (a split or sparse index) or does not add up (any mutation of the bytes, a link, a
FIFO, an oversized file) is ``None`` and the caller asks git, never an exception or a hang."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd import git, git_index
from memd.git_index import parse_index, read_index
from tests.citation_support import Repo


def tree_of(repo: Repo) -> git.WorkTree:
    tree = git.find_work_tree(repo.root)
    assert isinstance(tree, git.WorkTree)
    return tree


def assert_parsed_as_git_lists(repo: Repo, oid_size: int = 20) -> None:
    tree = tree_of(repo)
    read = read_index(tree.git_dir, oid_size)
    assert read is not None, "memd did not parse this index"
    assert read.entries == git.git_index_entries(tree)
    assert git.index_entries(tree, oid_size=oid_size) == read.entries


def busy_repo(root: Path) -> Repo:
    """Nested folders, many files, a rename, a deletion, a name that is not UTF-8, a name
    longer than the index's 12-bit length field, an intent-to-add file (v3's extended flags),
    a skip-worktree file and a file staged with other content than the work tree's."""
    repo = Repo(root)
    for i in range(300):
        repo.write(f"src/pkg{i % 7}/sub{i % 3}/mod{i}.py", f"def f{i}():\n    return {i}\n")
    (root / os.fsdecode(b"caf\xe9.py")).write_bytes(b"def cafe():\n    pass\n")
    repo.commit("start")
    blob = repo.git("rev-parse", "HEAD:src/pkg0/sub0/mod0.py")
    long_name = "/".join(f"{i:03d}" + "x" * 200 for i in range(22))  # over 4095 bytes
    repo.git("update-index", "--add", "--cacheinfo", f"100644,{blob.strip()},{long_name}")
    repo.git("mv", "src/pkg0/sub0/mod0.py", "src/moved.py")
    repo.git("rm", "-q", "src/pkg1/sub1/mod1.py")
    repo.write("later.py", "def later():\n    pass\n")
    repo.git("add", "-N", "later.py")
    repo.git("update-index", "--skip-worktree", "src/pkg2/sub2/mod2.py")
    repo.write("src/pkg3/sub0/mod3.py", "staged\n")
    repo.git("add", "src/pkg3/sub0/mod3.py")
    repo.write("src/pkg3/sub0/mod3.py", "edited after staging\n")
    return repo


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_every_version_parses_as_git_lists_it(tmp_path: Path, version: str) -> None:
    repo = busy_repo(tmp_path / "proj")
    repo.git("update-index", "--index-version", version)
    assert_parsed_as_git_lists(repo)
    if version == "4":  # and after more renames, with prefixes shared differently
        repo.git("mv", "src/pkg4", "src/pkg4b")
        repo.commit("move a package")
        assert_parsed_as_git_lists(repo)


def test_a_sha256_repository_parses_as_git_lists_it(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    repo = Repo.__new__(Repo)
    repo.root = root
    repo.git("init", "-q", "-b", "main", "--object-format=sha256")
    for key, value in (("user.email", "t@example.invalid"), ("user.name", "t")):
        repo.git("config", key, value)
    repo.write("src/a.py", "def a():\n    pass\n")
    repo.commit()
    assert_parsed_as_git_lists(repo, oid_size=32)
    tree = tree_of(repo)
    assert read_index(tree.git_dir, 20) is None  # the wrong id length never adds up


def test_a_merge_conflicts_stages_are_left_out_as_git_leaves_them(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "proj")
    repo.write("a.py", "base\n")
    repo.commit()
    repo.git("checkout", "-q", "-b", "other")
    repo.write("a.py", "other\n")
    repo.commit()
    repo.git("checkout", "-q", "main")
    repo.write("a.py", "main\n")
    repo.commit()
    with pytest.raises(subprocess.CalledProcessError):
        repo.git("merge", "-q", "other")  # a conflict: a.py is at stages 1, 2 and 3
    tree = tree_of(repo)
    read = read_index(tree.git_dir, 20)
    assert read is not None and "a.py" not in read.entries
    assert read.entries == git.git_index_entries(tree)


@pytest.mark.parametrize("mode", ["split", "sparse"])
def test_a_split_or_sparse_index_is_left_to_git(tmp_path: Path, mode: str) -> None:
    repo = busy_repo(tmp_path / "proj")
    repo.commit("all")
    if mode == "split":
        repo.git("update-index", "--split-index")
        repo.write("new.py", "new\n")
        repo.git("add", "new.py")
    else:
        repo.git("sparse-checkout", "set", "--cone", "--sparse-index", "src/pkg5")
    tree = tree_of(repo)
    assert read_index(tree.git_dir, 20) is None
    assert git.index_entries(tree, oid_size=20) == git.git_index_entries(tree)


def test_a_link_a_fifo_or_an_oversized_index_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = busy_repo(tmp_path / "proj")
    tree = tree_of(repo)
    index = tree.git_dir / "index"
    monkeypatch.setattr(git_index, "MAX_INDEX_BYTES", index.stat().st_size - 1)
    assert read_index(tree.git_dir, 20) is None
    monkeypatch.undo()
    index.rename(tree.git_dir / "real-index")
    index.symlink_to(tree.git_dir / "real-index")
    assert read_index(tree.git_dir, 20) is None
    index.unlink()
    os.mkfifo(index)  # opened without blocking, refused on its fstat
    assert read_index(tree.git_dir, 20) is None


_INDEXES: dict[str, bytes] = {}


def sample_index(version: int) -> bytes:
    """A small real index of ``version`` (made once per run)."""
    key = str(version)
    if key not in _INDEXES:
        with tempfile.TemporaryDirectory() as folder:
            repo = Repo(Path(folder) / "r")
            for i in range(6):
                repo.write(f"d{i % 2}/sub/f{i}.py", f"{i}\n")
            repo.commit()
            if version > 2:
                repo.git("add", "-N", "d0/sub/f0.py")
            repo.git("update-index", "--index-version", str(version))
            _INDEXES[key] = (tree_of(repo).git_dir / "index").read_bytes()
    return _INDEXES[key]


def resealed(body: bytes) -> bytes:
    """``body`` with a checksum that holds: a lying index, not a torn one."""
    return body + hashlib.sha1(body, usedforsecurity=False).digest()


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 20), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.integers(0, 255)),
    st.tuples(st.just("count"), st.just(8), st.integers(0, (1 << 32) - 1)),
)


@given(
    version=st.sampled_from([2, 3, 4]),
    edits=st.lists(mutation, min_size=1, max_size=4),
    reseal=st.booleans(),
)
def test_mutated_index_bytes_parse_or_give_none_never_raise(
    version: int, edits: list[tuple[str, int, int]], reseal: bool
) -> None:
    body = bytearray(sample_index(version)[:-20])
    for kind, at, value in edits:
        at %= max(1, len(body))
        if kind == "flip" and body:
            body[at] ^= value
        elif kind == "cut":
            del body[at:]
        elif kind == "insert":
            body.insert(at, value)
        elif len(body) >= 12:
            body[8:12] = struct.pack(">I", value)
    data = resealed(bytes(body)) if reseal else bytes(body) + sample_index(version)[-20:]
    parsed = parse_index(data, 20)
    if parsed is not None:
        assert all(isinstance(k, str) and len(v.blob) == 40 for k, v in parsed.items())
    if not reseal and bytes(body) != sample_index(version)[:-20]:
        assert parsed is None  # the checksum no longer holds


@given(data=st.binary(max_size=400), oid_size=st.sampled_from([20, 32, 0]))
def test_any_bytes_parse_or_give_none(data: bytes, oid_size: int) -> None:
    parse_index(b"DIRC" + data, oid_size)
    parse_index(data, oid_size)


def test_a_v4_index_spelling_ever_longer_paths_is_left_to_git() -> None:
    """v4 spells each path as the one before plus a byte: 1.3 MB of index would spell 200 MB
    of paths (the 32 MB cap, a hundred gigabytes); past :data:`MAX_NAME_BYTES` of paths
    together it is not read here, and git is asked."""
    body = bytearray(struct.pack(">4sII", b"DIRC", 4, 20_000))
    for number in range(20_000):
        flags = min(number + 1, 0xFFF)
        body += git_index._ENTRY_20.pack(0, 0, 0, 0, 0, 1, 0o100644, 0, 0, 0, bytes(20), flags)
        body += b"\x00a\x00"  # drop nothing of the path before, add "a"
    assert parse_index(resealed(bytes(body)), 20) is None
