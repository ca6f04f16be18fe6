"""What changed in a project's synced memories, and a removed one brought back.

Both read the private store (:mod:`memd.team.store`): the commits the syncs fetched and
made, as far as the ref the last sync agreed on. :func:`log` lists them newest first with
their author, time and the files each added, changed or removed; :func:`restore` finds the
last version of a memory before the commit that removed it (or the version at a commit
given) and writes it back here, where the next sync shares it again. A restored file comes
from the remote, so it passes the same checks as any file that arrives
(:func:`memd.team.gates.incoming`, the size and name rules). Blocking.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memd.team import gates
from memd.team.entries import Limits, name_problem
from memd.team.local import Scope, opened, write
from memd.team.store import GitError, Store

MAX_LOG = 200
MAX_FILES_SHOWN = 100
_HEX = re.compile(r"[0-9a-f]{4,64}")


class HistoryProblem(Exception):
    """Why the log or a restore cannot be done, in words."""


@dataclass(frozen=True)
class Restored:
    path: str
    commit: str


def log(
    store: Store, tip: str | None, *, folder: str = "", limit: int = 20
) -> list[dict[str, Any]]:
    """The commits up to ``tip``, newest first (at most ``limit``, up to :data:`MAX_LOG`)."""
    if tip is None:
        return []
    count = max(1, min(limit, MAX_LOG))
    fmt = "--format=%x01%H%x00%an <%ae>%x00%at%x00%s"
    args = ["log", "-z", "--name-status", "--no-renames", fmt, f"-n{count}", tip]
    if folder:
        args += ["--", folder]
    out = store.local(args)
    prefix = f"{folder.rstrip('/')}/" if folder else ""
    return [row for chunk in out.split(b"\x01") if (row := _commit(chunk, prefix)) is not None]


def _commit(chunk: bytes, prefix: str) -> dict[str, Any] | None:
    fields = chunk.split(b"\0")
    if len(fields) < 4:
        return None
    commit, author, at, subject = (f.decode("utf-8", "replace") for f in fields[:4])
    rest = [f for f in fields[4:] if f.strip(b"\n")]
    changes = []
    for status, name in zip(rest[0::2], rest[1::2], strict=False):
        path = os.fsdecode(name.strip(b"\n")).removeprefix(prefix)
        changes.append({"status": status.strip(b"\n").decode("ascii", "replace"), "path": path})
    moment = datetime.fromtimestamp(int(at), tz=UTC) if at.isdigit() and len(at) < 12 else None
    return {
        "commit": commit.strip(),
        "author": author,
        "at": moment.isoformat().replace("+00:00", "Z") if moment else None,
        "subject": subject,
        "changes": changes[:MAX_FILES_SHOWN],
        "more_changes": max(0, len(changes) - MAX_FILES_SHOWN),
    }


def restore(
    store: Store,
    tip: str | None,
    scope: Scope,
    path: str,
    *,
    commit: str | None = None,
    folder: str = "",
    limits: Limits,
) -> Restored:
    """Write the last version of ``path`` (before its removal, or at ``commit``) here."""
    problem = name_problem(os.fsencode(path))
    if problem is not None:
        raise HistoryProblem(f"{path!r} is not a memory's name: {problem}")
    if tip is None:
        raise HistoryProblem("this project has not been synced yet: nothing to restore from")
    where = f"{folder.rstrip('/')}/{path}" if folder else path
    source = commit or _before_removal(store, tip, where, path)
    if not _HEX.fullmatch(source.split("^")[0]):
        raise HistoryProblem(f"{commit!r} is not a commit id")
    data = _version(store, source, where, path, limits)
    with opened(scope, create=True) as area:
        assert area is not None
        if not write(area, path, data, None):
            raise HistoryProblem(f"{scope.root / path} exists here; move it away to restore")
    return Restored(path, source.removesuffix("^"))


def _before_removal(store: Store, tip: str, where: str, path: str) -> str:
    if store.local(["ls-tree", "--name-only", tip, "--", where]).strip():
        raise HistoryProblem(f"{path} is there in the last sync; nothing to restore")
    out = store.local(["log", "-1", "--format=%H", "--diff-filter=D", tip, "--", where])
    removed = out.decode("ascii", "replace").strip()
    if not _HEX.fullmatch(removed):
        raise HistoryProblem(f"{path} was never in the synced history")
    return f"{removed}^"


def _version(store: Store, source: str, where: str, path: str, limits: Limits) -> bytes:
    try:
        head = store.local(["cat-file", "--batch-check"], stdin=f"{source}:{where}\n".encode())
    except GitError as exc:
        raise HistoryProblem(f"{path} cannot be read at {source}: {exc.reason}") from None
    fields = head.split()
    if len(fields) != 3 or fields[1] != b"blob" or not fields[2].isdigit():
        raise HistoryProblem(f"{path} is not a file at {source.removesuffix('^')}")
    if int(fields[2]) > limits.max_file_bytes:
        raise HistoryProblem(f"{path} is {int(fields[2])} bytes there, over team.max_file_bytes")
    oid = fields[0].decode("ascii")
    data = store.read_blobs({oid: int(fields[2])}).get(oid)
    if data is None:
        raise HistoryProblem(f"{path} cannot be read at {source}")
    verdict = gates.incoming(data)
    if verdict.kind != "take":
        raise HistoryProblem(f"{path} is not restored: {verdict.reason}")
    return data
