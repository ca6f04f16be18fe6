"""The per-file three-way merge of a sync (pure).

Each memory is one file, merged on its own, by object id: ``base`` is what this machine and
the remote last agreed on for the path, ``local`` what the memory dir holds now, ``remote``
what the remote's tree holds now (``None``: no such file).

=====================================  ====================================================
local == remote                        nothing to do
local == base                          take the remote's (write it here, or remove it here)
remote == base                         push the local one (or push its removal)
local removed, remote changed          take the remote's: an edit beats a removal
remote removed, local changed          push the local one: an edit beats a removal
both changed an index (``MEMORY.md``)  merge by lines (:mod:`memd.team.lines`)
both changed a memory                  a conflict: the remote's keeps the name, the local
                                       one is kept beside it as a copy marked for the next
                                       dream to reconcile
=====================================  ====================================================

A path whose local file may not leave (``held``: a secret, a ``<private>`` span …) is never
pushed: with the remote unchanged nothing happens; with the remote changed it is a conflict
whose copy stays here. A path in ``passthrough`` (the remote's version was refused or
quarantined here, and the local file is what it was then) counts as unchanged locally.

:func:`mass_deletion` says when a sync would remove more than half of the memories from the
remote (and more than :data:`MASS_DELETE_MIN`): the sync stops there until the user confirms,
as a folder that vanished here would otherwise empty everyone's. What the remote removed is
removed here without asking: whoever removed it confirmed it, and every removed memory stays
in the ref's history (``memdctl team restore``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal

Kind = Literal["take", "push", "lines", "conflict", "hold"]
MASS_DELETE_MIN = 5


@dataclass(frozen=True)
class Decision:
    """What the merge decided for one path whose sides differ (``local``: the file's id
    as it is here, even where the merge counted it as unchanged)."""

    path: str
    kind: Kind
    base: str | None
    local: str | None
    remote: str | None


@dataclass(frozen=True)
class Plan:
    """Every path the sync must act on, in name order."""

    decisions: tuple[Decision, ...]

    def of(self, kind: Kind) -> list[Decision]:
        return [d for d in self.decisions if d.kind == kind]

    @property
    def removes_here(self) -> int:
        return sum(1 for d in self.decisions if d.kind == "take" and d.remote is None)

    @property
    def removes_there(self) -> int:
        return sum(1 for d in self.decisions if d.kind == "push" and d.local is None)


def plan(
    base: Mapping[str, str],
    local: Mapping[str, str],
    remote: Mapping[str, str],
    *,
    held: Collection[str] = (),
    passthrough: Mapping[str, str | None] | None = None,
    is_index: Callable[[str], bool] = lambda path: False,
) -> Plan:
    """The decisions for every path of the three sides (see the module docstring).
    ``passthrough``: path → the local object id (``None``: no file) it had when the remote's
    version was refused here."""
    passing = passthrough or {}
    decisions: list[Decision] = []
    for path in sorted(base.keys() | local.keys() | remote.keys()):
        b, here, r = base.get(path), local.get(path), remote.get(path)
        seen = b if path in passing and passing[path] == here else here
        kind = _decide(b, seen, r, held=path in held, index=is_index(path))
        if kind is not None:
            decisions.append(Decision(path, kind, b, here, r))
    return Plan(tuple(decisions))


def _decide(
    b: str | None, here: str | None, r: str | None, *, held: bool, index: bool
) -> Kind | None:
    if here == r:
        return None
    if here == b:
        return "take"
    if r == b:
        return "hold" if held else "push"
    if here is None:  # removed here, changed there: the edit wins
        return "take"
    if r is None:  # removed there, changed here: the edit wins
        return "hold" if held else "push"
    if index:
        return "hold" if held else "lines"
    return "conflict"


def mass_deletion(plan: Plan, base_count: int) -> str | None:
    """Why the sync must not go ahead without the user's word, else ``None``."""
    bound = max(MASS_DELETE_MIN, base_count // 2)
    if plan.removes_there > bound:
        return (
            f"{plan.removes_there} of {base_count} memories are gone from this machine; "
            "nothing was removed from the remote"
        )
    return None
