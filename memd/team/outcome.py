"""Where a sync goes and what came of it (pure data)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from memd.team.entries import Limits
from memd.team.store import Identity

DEFAULT_REF = "refs/memd/team"


@dataclass(frozen=True)
class Target:
    """The remote and its refs. Ref mode: ``read_ref`` and ``write_ref`` are one ref of memd's
    own, never checked out. Folder mode: the memories are ``folder`` of the branch
    ``read_ref``, and a sync proposes this machine's changes on ``write_ref``, a branch of
    its own that the team reviews and merges like any other."""

    url: str
    read_ref: str = DEFAULT_REF
    write_ref: str = DEFAULT_REF
    folder: str = ""

    @property
    def proposing(self) -> bool:
        return self.read_ref != self.write_ref


@dataclass(frozen=True)
class Settings:
    """How a sync runs: limits, who commits, retries, and what it asks memd."""

    identity: Identity
    limits: Limits = field(default_factory=Limits)
    retries: int = 5  # pushes that lost a race, each followed by a fetch and a merge
    allow_deletes: bool = False  # past the mass-deletion guard
    agent_of: Callable[[str], str | None] = lambda session: None
    # The cited paths the repository has at HEAD (None: no repository; not checked).
    present: Callable[[Sequence[str]], Collection[str]] | None = None
    now: Callable[[], float] = lambda: 0.0


@dataclass
class Outcome:
    """What a sync did, in words and lists (``status``, ``memdctl team sync``)."""

    ok: bool = False
    message: str = ""
    nothing_new: bool = False
    commit: str | None = None
    attempts: int = 0
    pushed: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)
    removed_here: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    lines_merged: list[str] = field(default_factory=list)
    changed_meanwhile: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    quarantined: dict[str, str] = field(default_factory=dict)
    refused: list[tuple[str, str]] = field(default_factory=list)
    git_calls: int = 0
    network_calls: int = 0

    def as_dict(self) -> dict[str, Any]:
        row = dict(vars(self))
        row["refused"] = [{"name": n, "reason": r} for n, r in self.refused]
        return row
