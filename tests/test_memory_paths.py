"""Memory dir location (R-M1): slugs, canonical git roots, worktrees, opt-out (R-B4)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.memory.paths import (
    OptedOut,
    check_opt_out,
    find_git_root,
    match_ignore_globs,
    memory_dir,
    project_root,
    project_slug,
    team_dir,
)


@pytest.mark.parametrize(
    ("path", "slug"),
    [
        ("/Users/alex/workspace/cli/.worktrees/1", "-Users-alex-workspace-cli--worktrees-1"),
        (
            "/home/USER/projects/spotter-worktrees/spotter-a0y",
            "-home-USER-projects-spotter-worktrees-spotter-a0y",
        ),
        ("C:\\Users\\x", "C--Users-x"),
        ("/a b/c_d~e", "-a-b-c-d-e"),
        ("/a/é😀b", "-a----b"),  # é is one UTF-16 unit, the emoji two
    ],
)
def test_slug_replaces_every_non_alphanumeric_utf16_unit(path: str, slug: str) -> None:
    assert project_slug(path) == slug


def test_long_slug_is_cut_at_200_and_suffixed_with_the_portable_hash() -> None:
    path = "/home/user/" + "very-long-directory-name-" * 10 + "/projet-é-😀"
    # Computed with Node: sanitized.slice(0, 200) + "-" + Math.abs(djb2(path)).toString(36)
    expected = (
        "-home-user-very-long-directory-name-very-long-directory-name-very-long-directory-name-"
        "very-long-directory-name-very-long-directory-name-very-long-directory-name-"
        "very-long-directory-name-very-long-dire-72m63g"
    )
    assert project_slug(path) == expected
    exactly = "/" + "a" * 199
    assert project_slug(exactly) == "-" + "a" * 199
    assert project_slug(path + "x") != project_slug(path)


@given(st.text(max_size=300))
def test_slug_is_alphanumeric_and_dashes_only(path: str) -> None:
    slug = project_slug(path)
    assert all(c.isascii() and (c.isalnum() or c == "-") for c in slug)
    units = len(path.encode("utf-16-le", "surrogatepass")) // 2
    if units <= 200:
        assert len(slug) == units


def _git(cwd: Path, *args: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture
def repo_with_worktree(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    main = tmp_path / "shop"
    main.mkdir()
    _git(main, "init", "-q")
    (main / "README").write_text("x")
    _git(main, "add", "README")
    _git(main, "commit", "-q", "-m", "init")
    worktree = tmp_path / "shop-feature"
    _git(main, "worktree", "add", "-q", str(worktree))
    return main, worktree


def test_worktree_and_subfolder_share_the_main_checkouts_memory_dir(
    repo_with_worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    main, worktree = repo_with_worktree
    sub = main / "services" / "api"
    sub.mkdir(parents=True)
    deep_in_worktree = worktree / "web"
    deep_in_worktree.mkdir()
    projects = tmp_path / "projects"
    dirs = {memory_dir(projects, p) for p in (main, sub, worktree, deep_in_worktree)}
    expected = projects / project_slug(os.path.realpath(main)) / "memory"
    assert dirs == {expected}
    assert (worktree / ".git").is_file()  # really a linked worktree, not a copy
    assert team_dir(expected) == expected / "team"


def test_outside_a_repository_the_cwd_is_the_project(tmp_path: Path) -> None:
    folder = tmp_path / "scratch"
    folder.mkdir()
    if find_git_root(folder) is not None:
        pytest.skip("the temp dir is inside a git repository")
    assert project_root(folder) == folder
    assert (
        memory_dir(tmp_path / "p", folder) == tmp_path / "p" / project_slug(str(folder)) / "memory"
    )


def test_a_submodule_is_its_own_project(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    modules = outer / ".git" / "modules" / "lib"
    modules.mkdir(parents=True)
    lib = outer / "lib"
    lib.mkdir()
    (lib / ".git").write_text("gitdir: ../.git/modules/lib\n")
    (outer / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    inside = lib / "src"
    inside.mkdir()
    assert find_git_root(inside) == lib
    assert find_git_root(outer) == outer


def test_a_worktree_pointer_without_a_matching_back_reference_is_not_trusted(
    repo_with_worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    main, worktree = repo_with_worktree
    impostor = tmp_path / "impostor"
    impostor.mkdir()
    pointer = (worktree / ".git").read_text()
    (impostor / ".git").write_text(pointer)  # claims the real worktree's admin dir
    assert find_git_root(impostor) == impostor
    assert find_git_root(worktree) == Path(os.path.realpath(main))


def test_ignore_globs_match_paths_and_slugs_with_home_expansion() -> None:
    paths = ["/home/u/clients/acme", project_slug("/home/u/clients/acme")]
    assert match_ignore_globs(paths, ["/home/u/clients/*"]) == "/home/u/clients/*"
    assert match_ignore_globs(paths, ["~/clients/*"], home="/home/u") == "~/clients/*"
    assert match_ignore_globs(paths, ["*-clients-acme"]) == "*-clients-acme"
    assert match_ignore_globs(paths, ["/home/u/work/*", "~/clients/*"]) is None


def test_opt_out_by_marker_file_in_the_project_root(
    repo_with_worktree: tuple[Path, Path],
) -> None:
    main, worktree = repo_with_worktree
    sub = main / "pkg"
    sub.mkdir()
    assert check_opt_out(sub, ()) is None
    (main / ".memd-ignore").write_text("")
    outcome = check_opt_out(sub, ())
    assert isinstance(outcome, OptedOut) and ".memd-ignore" in outcome.reason
    assert isinstance(check_opt_out(worktree, ()), OptedOut)  # same project


def test_opt_out_by_config_glob(tmp_path: Path) -> None:
    project = tmp_path / "secret-client"
    project.mkdir()
    outcome = check_opt_out(project, [str(tmp_path / "secret-*")])
    assert isinstance(outcome, OptedOut) and "secret-*" in outcome.reason
    assert check_opt_out(project, [str(tmp_path / "public-*")]) is None


def test_a_checkout_reached_through_a_symlink_shares_memory_with_its_worktree(
    repo_with_worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    main, worktree = repo_with_worktree
    link = tmp_path / "link-to-shop"
    link.symlink_to(main)
    projects = tmp_path / "projects"
    assert memory_dir(projects, link / "") == memory_dir(projects, worktree)
