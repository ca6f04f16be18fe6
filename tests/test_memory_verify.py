"""Citations checked against real repositories (issue 26): each warning appears exactly when
what the memory cites no longer holds, and never while the cited lines are unchanged."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd import git
from memd.memory.citations import Citation, infer
from memd.memory.verify import MemoryCheck, Verifier
from tests.citation_support import Repo, numbered

RETRY = "def helper():\n    pass\n\n\ndef backoff(n):\n    return min(60, 2**n)\n\nLIMIT = 3\n"


def _cited(repo: Repo, text: str, verifier: Verifier | None = None) -> tuple[Citation, ...]:
    verifier = verifier or Verifier()
    return verifier.baseline(verifier.repository(repo.root), infer(text))


def _check(repo: Repo, cited: tuple[Citation, ...]) -> MemoryCheck:
    verifier = Verifier()  # a fresh one: nothing cached
    return verifier.check(verifier.repository(repo.root), cited)


def _retry_repo(tmp_path: Path) -> tuple[Repo, tuple[Citation, ...]]:
    repo = Repo(tmp_path / "proj")
    repo.write("src/retry.py", RETRY)
    repo.write("README.md", numbered(5))
    repo.commit("start")
    cited = _cited(repo, "The retry logic is `backoff()` in src/retry.py:5-6.")
    return repo, cited


def test_a_memory_is_written_with_what_it_cites_and_where_it_was_seen(tmp_path: Path) -> None:
    repo, cited = _retry_repo(tmp_path)
    head = repo.git("rev-parse", "HEAD").strip()
    assert len(cited) == 1
    (c,) = cited
    assert (c.path, c.lines, c.symbols, c.commit, c.branch) == (
        "src/retry.py",
        (5, 6),
        ("backoff",),
        head,
        "main",
    )
    assert c.hash is not None
    check = _check(repo, cited)
    assert check.warnings == () and check.verified and not check.failing


def test_a_path_that_does_not_exist_or_is_outside_is_not_cited(tmp_path: Path) -> None:
    repo, _ = _retry_repo(tmp_path)
    (tmp_path / "secret.py").write_text("x\n")
    text = "See src/nope.py and ../secret.py and /etc/passwd.py and .git/config.py"
    assert _cited(repo, text) == ()


def test_a_deleted_path_says_it_is_gone_and_that_git_saw_no_rename(tmp_path: Path) -> None:
    repo, cited = _retry_repo(tmp_path)
    (repo.root / "src/retry.py").unlink()
    repo.commit("drop retry")
    check = _check(repo, cited)
    assert check.warnings == (
        "src/retry.py (cited) no longer exists (deleted or moved; git saw no rename)",
    )
    assert check.failing


def test_a_renamed_path_says_where_it_went_committed_or_staged(tmp_path: Path) -> None:
    repo, cited = _retry_repo(tmp_path)
    repo.git("mv", "src/retry.py", "src/backoff.py")
    staged = _check(repo, cited)
    assert staged.warnings == (
        "src/retry.py (cited) no longer exists; git saw it renamed to src/backoff.py",
    )
    repo.commit("rename")
    (repo.root / "lib").mkdir()
    repo.git("mv", "src/backoff.py", "lib/backoff.py")
    repo.commit("move again")
    assert _check(repo, cited).warnings == (
        "src/retry.py (cited) no longer exists; git saw it renamed to lib/backoff.py",
    )


def test_a_symbol_gone_from_the_file_is_named(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "proj")
    repo.write("src/retry.py", RETRY)
    repo.commit()
    cited = _cited(repo, "`backoff()` and `LIMIT` live in src/retry.py")
    assert cited[0].symbols == ("backoff", "LIMIT")
    repo.write("src/retry.py", RETRY.replace("LIMIT = 3", "CAP = 3"))
    repo.commit("rename the constant")
    warnings = _check(repo, cited).warnings
    assert "LIMIT is no longer in src/retry.py" in warnings
    assert not any("backoff" in w for w in warnings)


def test_changed_lines_say_how_many_commits_touched_the_file(tmp_path: Path) -> None:
    repo, cited = _retry_repo(tmp_path)
    start = cited[0].commit
    assert start is not None
    repo.write("src/retry.py", RETRY.replace("min(60", "min(30"))
    assert _check(repo, cited).warnings == (
        "lines 5-6 of src/retry.py changed since this memory was written (edits not committed yet)",
    )
    repo.commit("cap at 30")
    repo.write("README.md", numbered(6))
    repo.commit("unrelated")
    repo.write("src/retry.py", RETRY.replace("min(60", "min(20"))
    repo.commit("cap at 20")
    check = _check(repo, cited)
    assert check.warnings == (
        "lines 5-6 of src/retry.py changed since this memory was written: "
        f"2 commits have touched src/retry.py since {start[:10]}",
    )
    assert check.failing


def test_lines_moved_by_an_insertion_above_are_found_where_they_went(tmp_path: Path) -> None:
    repo, cited = _retry_repo(tmp_path)
    repo.write("src/retry.py", "import math\n\n" + RETRY)
    repo.commit("import")
    check = _check(repo, cited)
    assert check.warnings == ("the cited lines of src/retry.py:5-6 are now at lines 7-8",)
    assert check.verified


def test_lines_past_the_end_of_a_shortened_file(tmp_path: Path) -> None:
    repo, cited = _retry_repo(tmp_path)
    repo.write("src/retry.py", "def backoff(n):\n")
    check = _check(repo, cited)
    assert check.warnings == (
        "the cited lines 5-6 of src/retry.py are past its end (it has 2 lines now)",
    )


def test_a_whole_file_citation_warns_only_when_the_file_changed(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "proj")
    repo.write("docs/setup.md", numbered(10))
    repo.commit()
    cited = _cited(repo, "How to set up: docs/setup.md")
    assert cited[0].lines is None
    repo.write("other.txt", "x\n")
    repo.commit("elsewhere")
    assert _check(repo, cited).warnings == ()
    repo.write("docs/setup.md", numbered(11))
    repo.commit("more setup")
    assert _check(repo, cited).warnings == (
        "docs/setup.md changed since this memory was written: 1 commit has touched "
        f"docs/setup.md since {cited[0].commit and cited[0].commit[:10]}",
    )


def test_another_branch_or_a_detached_head_is_said(tmp_path: Path) -> None:
    repo, cited = _retry_repo(tmp_path)
    repo.git("switch", "-q", "-c", "feature")
    assert _check(repo, cited).warnings == (
        "this memory was written on branch main; the repository is now on branch feature",
    )
    repo.git("switch", "-q", "--detach", "main")
    assert _check(repo, cited).warnings == (
        "this memory was written on branch main; the repository is now at a detached HEAD",
    )
    repo.git("switch", "-q", "main")
    assert _check(repo, cited).warnings == ()


def test_a_commit_the_repository_does_not_know_is_said(tmp_path: Path) -> None:
    _, cited = _retry_repo(tmp_path)
    other = Repo(tmp_path / "clone-of-something-else")
    other.write("src/retry.py", RETRY)
    other.commit("unrelated history")
    check = _check(other, cited)
    commit = cited[0].commit
    assert commit is not None
    assert check.warnings == (
        f"the commit this memory was written at ({commit[:10]}) is not in this repository "
        "(rebased away, or another clone): its citations were checked against the files only",
    )
    assert check.verified  # the cited lines are the same


def test_outside_a_work_tree_files_are_checked_and_git_is_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "notes.md").write_text(numbered(3))
    verifier = Verifier()
    repo = verifier.repository(folder)
    assert repo.tree is None and repo.skipped is not None
    assert any(row["folder"] == str(folder) for row in git.skipped.as_rows())
    cited = verifier.baseline(repo, infer("see notes.md:2"))
    assert cited[0].commit is None and cited[0].hash is not None
    (folder / "notes.md").write_text("changed\n" * 3)
    warnings = Verifier().check(repo, cited).warnings
    assert "lines 2-2 of notes.md changed since this memory was written" in warnings
    assert any(w.startswith("commits were not checked: not a git work tree") for w in warnings)


def test_git_never_takes_a_memory_dir_as_its_work_tree(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "memory")
    found = git.find_work_tree(repo.root, avoid=repo.root)
    assert isinstance(found, git.NotAWorkTree) and "memory dir" in found.reason
    inner = repo.root / "team"
    inner.mkdir()
    assert isinstance(git.find_work_tree(inner, avoid=repo.root), git.NotAWorkTree)


def test_a_warm_check_reads_no_file_and_a_changed_file_is_read_again(tmp_path: Path) -> None:
    repo, cited = _retry_repo(tmp_path)
    verifier = Verifier()
    where = verifier.repository(repo.root)
    assert verifier.check(where, cited).warnings == ()
    repo.write("src/retry.py", RETRY.replace("backoff", "retry_after"))
    warnings = verifier.check(verifier.repository(repo.root), cited).warnings
    assert "backoff is no longer in src/retry.py" in warnings


# ---------------------------------------------------------------------------------------------
# The property: unchanged cited lines never warn, whatever else is edited and committed

CITED = (4, 7)
_edit = st.one_of(
    st.tuples(st.just("edit"), st.integers(0, 40), st.text("abcxyz =()", max_size=12)),
    st.tuples(st.just("append"), st.integers(1, 5), st.text("abc", max_size=5)),
    st.tuples(st.just("cut_tail"), st.integers(1, 5), st.just("")),
    st.tuples(st.just("other"), st.integers(0, 3), st.text("xyz", max_size=5)),
    st.tuples(st.just("commit"), st.just(0), st.just("")),
)


@settings(max_examples=15)
@given(st.lists(_edit, max_size=8))
def test_a_memory_whose_cited_lines_are_unchanged_never_warns(
    edits: list[tuple[str, int, str]],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        repo = Repo(Path(folder) / "proj")
        lines = numbered(12).splitlines()
        lines[4] = "def backoff(n):"
        repo.write("src/retry.py", "\n".join(lines) + "\n")
        repo.commit("start")
        cited = _cited(repo, "`backoff()` is at src/retry.py:4-7")
        assert cited[0].symbols == ("backoff",)
        for op, number, text in edits:
            lines = _apply(repo, lines, op, number, text)
        assert _check(repo, cited).warnings == ()


def _apply(repo: Repo, lines: list[str], op: str, number: int, text: str) -> list[str]:
    after = CITED[1]  # lines at or after this index (0-based) are not cited
    if op == "edit" and len(lines) > after:
        lines[after + number % (len(lines) - after)] = text
    elif op == "append":
        lines = lines + [f"{text} {i}" for i in range(number)]
    elif op == "cut_tail":
        lines = lines[: max(after, len(lines) - number)]
    elif op == "other":
        repo.write(f"other{number}.txt", text)
    elif op == "commit":
        repo.commit()
    repo.write("src/retry.py", "\n".join(lines) + "\n")
    return lines


def test_a_cited_link_out_of_the_work_tree_or_a_fifo_is_never_read(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "proj")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("def token():\n    pass\n")
    (repo.root / "linked").symlink_to(outside)
    (repo.root / "alias.py").symlink_to(outside / "secret.py")
    os.mkfifo(repo.root / "pipe.py")
    repo.write("real.py", "def token():\n    pass\n")
    text = "`token()` in linked/secret.py, alias.py:1, pipe.py and real.py:1-2"
    assert [c.path for c in _cited(repo, text)] == ["real.py"]
    gone = Citation("linked/secret.py", None, ("token",), None, None, "0" * 16)
    check = _check(repo, (gone,))
    assert check.failing
    assert check.warnings[0].startswith("linked/secret.py (cited) no longer exists")


def test_many_citations_of_staged_files_are_checked_from_gits_index(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "proj")
    for i in range(40):
        repo.write(f"m{i}.py", f"def f{i}():\n    return {i}\n")
    repo.commit()
    verifier = Verifier()
    where = verifier.repository(repo.root)
    text = " ".join(f"`f{i}()` in m{i}.py:1-2" for i in range(40))
    cited = verifier.baseline(where, infer(text))
    assert len(cited) == 16  # MAX_CITATIONS per memory: more are split over two checks
    more = verifier.baseline(where, infer(" ".join(f"m{i}.py:1" for i in range(16, 40))))
    everything = (*cited, *more)
    assert _check(repo, everything).warnings == ()
    target = repo.root / "m3.py"
    before = target.stat()
    target.write_text("def g3():\n    return 3\n")  # same size, in place
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the mtime put back
    assert target.stat().st_mtime_ns == before.st_mtime_ns
    assert "f3 is no longer in m3.py" in _check(repo, everything).warnings


def test_git_calls_end_by_the_recalls_deadline_and_say_so(tmp_path: Path) -> None:
    repo, cited = _retry_repo(tmp_path)
    verifier = Verifier()
    where = verifier.repository(repo.root)
    (repo.root / "src/retry.py").unlink()
    with git.time_limit(0.0):
        assert git.head(where.tree) == git.GitFailed("no time was left for git")  # type: ignore[arg-type]
        warnings = verifier.check(where, cited).warnings
    assert warnings == (
        "src/retry.py (cited) no longer exists (whether git saw it renamed is unknown: "
        "no time was left for git)",
    )
    assert isinstance(git.head(where.tree), git.Head)  # type: ignore[arg-type]


def test_a_first_check_of_many_citations_at_head_runs_git_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cold path (bench/citations.py): one call finds the work tree and its HEAD; the
    index is read by memd itself (memd.git_index); citations seen at HEAD's own commit ask
    git nothing more."""
    repo = Repo(tmp_path / "proj")
    for i in range(40):
        repo.write(f"m{i}.py", f"def f{i}():\n    return {i}\n")
    repo.commit()
    text = " ".join(f"`f{i}()` in m{i}.py:1-2" for i in range(40))
    cited = _cited(repo, text) + _cited(repo, " ".join(f"m{i}.py:1" for i in range(16, 40)))
    calls: list[str] = []
    run_git = git.run_git

    def counted(*args: Any, **kwargs: Any) -> bytes | git.GitFailed:
        calls.append(args[1][0])
        return run_git(*args, **kwargs)

    monkeypatch.setattr(git, "run_git", counted)
    verifier = Verifier()
    where = verifier.repository(repo.root)
    assert where.head is not None and where.head.branch == "main"
    assert verifier.check(where, cited).warnings == ()
    assert calls == ["rev-parse"]


def test_a_repository_without_commits_or_in_a_memory_dir_is_still_said(tmp_path: Path) -> None:
    empty = Repo(tmp_path / "empty")
    where = Verifier().repository(empty.root)
    assert where.tree is not None and where.head is None
    assert where.skipped is not None and "HEAD" in where.skipped  # git's words: no commit
    repo, _ = _retry_repo(tmp_path)
    inside = Verifier().repository(repo.root, avoid=repo.root)
    assert inside.tree is None and inside.skipped is not None and "memory dir" in inside.skipped
