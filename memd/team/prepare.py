"""A sync request made concrete: which files, which remote and refs, who commits (blocking).

A team sync (``scope="team"``) exchanges a project's ``team/`` with its repository's remote
(``team.remote``): on memd's ref (``team.ref``), or in folder mode on a folder of a branch
with this user's changes proposed on a branch of theirs. A personal sync
(``scope="personal"``) exchanges the rest of the memory dir with a remote the user names
(``memdctl sync --remote URL``, remembered): on ``refs/memd/mine/<project>``, where the
project is named by its repository's first commit, the same on every clone.

Each project's state lives in ``<state>/team/<project folder>/`` or
``<state>/sync/<project folder>/`` (:mod:`memd.team.record`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from memd import git
from memd.config import TeamConfig
from memd.team import project
from memd.team.entries import Limits
from memd.team.local import Scope
from memd.team.outcome import Settings, Target
from memd.team.project import ProjectProblem
from memd.team.record import load, locked, save
from memd.team.store import url_problem

ScopeName = Literal["team", "personal"]
FOLDERS: dict[str, str] = {"team": "team", "personal": "sync"}


@dataclass(frozen=True)
class Request:
    """What one sync is asked to do."""

    scope: ScopeName
    memory_dir: Path
    cwd: str  # the repository's folder (or the project's, outside a repository)
    remote: str | None = None  # personal: the URL given
    mode: str | None = None  # team: "ref" or "folder", remembered once given
    allow_deletes: bool = False


@dataclass(frozen=True)
class Prepared:
    folder: Path
    scope: Scope
    target: Target
    settings: Settings
    remembered: dict[str, Any]


def state_folder(state_dir: Path, scope: ScopeName, memory_dir: Path) -> Path:
    return state_dir / FOLDERS[scope] / memory_dir.parent.name


def limits_of(config: TeamConfig) -> Limits:
    return Limits(config.max_files, config.max_file_bytes, config.max_total_bytes)


def prepare(
    request: Request,
    config: TeamConfig,
    state_dir: Path,
    user_env: Mapping[str, str],
    *,
    agent_of: Callable[[str], str | None],
    now: Callable[[], float],
) -> Prepared:
    """The scope, target and settings of ``request``; :class:`ProjectProblem` when the
    project cannot be synced, saying why and what to do."""
    folder = state_folder(state_dir, request.scope, request.memory_dir)
    known = load(folder).settings
    tree: git.WorkTree | None
    if request.scope == "team":
        target, tree, remembered = _team_target(request, config, known)
        scope = Scope(request.memory_dir, "team")
    else:
        target, tree, remembered = _personal_target(request, known)
        scope = Scope(request.memory_dir, "")
    who = project.identity(tree, user_env)
    if target.proposing:
        target = Target(target.url, target.read_ref, project.proposal_ref(who), target.folder)
    settings = Settings(
        identity=who,
        limits=limits_of(config),
        retries=config.push_retries,
        allow_deletes=request.allow_deletes,
        agent_of=agent_of,
        present=partial(project.present_paths, tree) if tree is not None else None,
        now=now,
    )
    remembered.update(cwd=request.cwd, memory_dir=str(request.memory_dir))
    return Prepared(folder, scope, target, settings, remembered)


def _team_target(
    request: Request, config: TeamConfig, known: Mapping[str, Any]
) -> tuple[Target, git.WorkTree, dict[str, Any]]:
    repo = project.repository(Path(request.cwd), config.remote)
    mode = request.mode or str(known.get("mode") or config.mode)
    if mode not in ("ref", "folder"):
        raise ProjectProblem(f"mode {mode!r} is not ref or folder")
    remembered: dict[str, Any] = {"mode": mode, "repo": str(repo.tree.root)}
    if mode == "ref":
        return Target(repo.url, config.ref, config.ref), repo.tree, remembered
    branch = project.default_branch(repo.tree, config.remote, config.branch)
    read_ref = f"refs/heads/{branch}"
    # the proposal branch is named after the identity, once it is known (prepare)
    target = Target(repo.url, read_ref, "refs/heads/memd/team/", config.folder.strip("/"))
    return target, repo.tree, remembered


def _personal_target(
    request: Request, known: Mapping[str, Any]
) -> tuple[Target, git.WorkTree | None, dict[str, Any]]:
    url = request.remote or str(known.get("url") or "")
    if not url:
        raise ProjectProblem(
            "name the private remote the first time: memdctl sync --remote URL "
            "(a bare repository of yours; memd remembers it)"
        )
    problem = url_problem(url) or project.credentials_problem(url)
    if problem is not None:
        raise ProjectProblem(problem)
    found = git.find_work_tree(Path(request.cwd))
    tree = found if isinstance(found, git.WorkTree) else None
    key = project.project_key(tree, request.memory_dir.parent.name)
    ref = f"refs/memd/mine/{key}"
    return Target(url, ref, ref), tree, {"url": url}


def remember(folder: Path, values: Mapping[str, Any]) -> None:
    """Keep ``values`` in the project's record (under its lock)."""
    with locked(folder):
        record = load(folder)
        if all(record.settings.get(k) == v for k, v in values.items()):
            return
        record.settings.update(values)
        save(folder, record)
