"""Where a path the model names lies: which area of a policy, and the name beneath it (pure).

The tools act on an area through :class:`memd.confined.Area`, never on a path: a path is
turned, without looking at the disk, into a :class:`Place`: the area's root (resolved once,
by :func:`memd.agent.permissions.resolve_policy`; the path *up to* it may be a link the user
made) and a plain relative name beneath it (no ``..``, no ``.``, no empty part), which the
confined walk then opens without following anything. ``..`` is folded lexically: beneath a
root nothing is followed, so a folder on the way that is a link is refused, never
resolved, and ``a/../b`` can only be ``b``.

A path may name an area by its resolved root or by the root as the policy was given (a
symlinked ``~/.claude``); a path that only *resolves* into an area through a link elsewhere is
not in it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memd.agent.decision import Deny
from memd.agent.permissions import (
    EditOnlyFile,
    MemoryDirPolicy,
    Policy,
    expand_home,
    readable_roots,
    within,
)


@dataclass(frozen=True)
class Root:
    """One area of a policy: its root resolved, and as the policy named it."""

    resolved: Path
    given: Path


@dataclass(frozen=True)
class Place:
    """A plain name beneath an area's resolved root; ``relative`` is ``""`` for the root."""

    root: Path
    relative: str

    @property
    def path(self) -> str:
        """The absolute path, for messages and records (never opened)."""
        return str(self.root / self.relative) if self.relative else str(self.root)


def read_roots(given: Policy, resolved: Policy) -> tuple[Root, ...]:
    """The areas the policy reads, each with its resolved and its given root."""
    return tuple(
        Root(r, _absolute(g))
        for r, g in zip(readable_roots(resolved), readable_roots(given), strict=True)
    )


def write_root(given: Policy, resolved: Policy) -> Root | None:
    """The area the policy writes, if any (the folder of an :class:`EditOnlyFile`'s file)."""
    if isinstance(given, MemoryDirPolicy) and isinstance(resolved, MemoryDirPolicy):
        return Root(resolved.write_root, _absolute(given.write_root))
    if isinstance(given, EditOnlyFile) and isinstance(resolved, EditOnlyFile):
        return Root(resolved.path.parent, _absolute(given.path.parent))
    return None


def locate(raw: str, *, base: Path, roots: tuple[Root, ...], casefold: bool) -> Place | Deny:
    """The place ``raw`` names (relative paths from ``base``, itself resolved), or why none.

    The innermost root that holds the path wins (a read root may lie inside the write root).
    """
    if not raw.strip() or "\0" in raw:
        return Deny("denied: the path is empty or holds a NUL character")
    path = os.path.normpath(os.path.join(str(base), expand_home(raw)))
    best: Place | None = None
    for root in roots:
        for named in (root.resolved, root.given):
            if within(path, str(named), casefold=casefold):
                relative = path[len(str(named)) :].lstrip("/")
                if best is None or len(str(root.resolved)) > len(str(best.root)):
                    best = Place(root.resolved, relative)
                break
    if best is None:
        return Deny(
            f"denied: {path} is not inside the area by its own path (a path through a link "
            "elsewhere does not count); name it beneath the area"
        )
    return best


def _absolute(path: Path) -> Path:
    return Path(os.path.normpath(os.path.abspath(expand_home(str(path)))))
