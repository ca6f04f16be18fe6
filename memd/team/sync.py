"""One sync of a project's memories with a remote: fetch, merge, push, then change here.

Under the project's lock (:func:`memd.team.record.locked`), a round:

1. scans the scope (:mod:`memd.team.local`) and asks the remote which commit its ref names
   (``ls-remote``: one round trip). Nothing new on either side: done, no other git call.
2. fetches that commit into the private store and reads its tree as hostile input
   (:mod:`memd.team.entries`); what is refused stays on the remote, untouched.
3. gates what may leave (:func:`memd.team.gates.outgoing`, the citations) and merges per
   file (:mod:`memd.team.merge`); what arrives is read with bounded ``cat-file`` calls and
   gated (:func:`memd.team.gates.incoming`) before anything of it is written here.
4. stamps the provenance of what it shares (:mod:`memd.team.provenance`: a write of the
   user's own file, compare-and-swap), builds one commit on the remote's tip and pushes it
   as a fast-forward. A push that lost a race is followed by a new round (at most
   ``retries``), from the remote's new tip.
5. only then writes here (conflict copies first, then the remote's versions, then
   removals), each compare-and-swap, and records the new agreement
   (:mod:`memd.team.record`).

A kill at any instant leaves the previous record and a memory dir that is either unchanged
or partly brought to the pushed commit; the next sync merges that to the same commit again
(a file here that already holds what the remote holds is agreed; a conflict copy is named by
its content, so it is found, not made twice). Nothing of the user's branches, index or work
tree is touched: git runs only on memd's private store.

Blocking: call from a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from memd.errors import WriteFailed
from memd.git import blob_id
from memd.team import gates, merge
from memd.team.entries import Listing, read_listing
from memd.team.lines import conflict_name, mark_conflict, merge_lines
from memd.team.local import Ident, LocalScan, Scope, opened, read, scan, write
from memd.team.outcome import Outcome, Settings, Target
from memd.team.provenance import stamped
from memd.team.record import STORE, Busy, Passing, Record, load, locked, save
from memd.team.store import Calls, GitError, Store

log = logging.getLogger(__name__)
Known = tuple[Ident, str]

UNKNOWN_IDENT: Ident = (0, 0, 0)  # a file this sync wrote: read again next time, never trusted


def is_index(path: str) -> bool:
    return path == "MEMORY.md" or path.endswith("/MEMORY.md")


def sync(
    folder: Path,
    scope: Scope,
    target: Target,
    settings: Settings,
    user_env: Mapping[str, str],
    *,
    timeout_s: float = 120.0,
) -> Outcome:
    """Sync ``scope`` with ``target`` (see the module docstring); never raises for git, the
    disk or a busy lock: the outcome says what happened."""
    outcome = Outcome()
    calls = Calls()
    problem = None
    try:
        with locked(folder) as lock:
            store = Store(folder / STORE, user_env, timeout_s=timeout_s, calls=calls, lock_fd=lock)
            store.ensure()
            _Sync(folder, store, scope, target, settings, load(folder), outcome).run()
    except Busy as exc:
        problem = str(exc)
    except GitError as exc:
        problem = exc.reason
    except (WriteFailed, OSError) as exc:
        problem = f"a file could not be read or written ({exc})"
    if problem is not None:
        outcome.ok, outcome.message = False, problem
    outcome.git_calls, outcome.network_calls = calls.total, calls.network
    return outcome


@dataclass
class _Round:
    """What one round decided: the commit's changes, the writes here, the new agreement."""

    changes: dict[str, bytes | None] = field(default_factory=dict)
    before: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)
    after: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)
    passing: dict[str, Passing] = field(default_factory=dict)
    copies: set[str] = field(default_factory=set)  # conflict copies written here


class _Sync:
    def __init__(
        self,
        folder: Path,
        store: Store,
        scope: Scope,
        target: Target,
        settings: Settings,
        record: Record,
        outcome: Outcome,
    ) -> None:
        self.folder, self.store, self.scope = folder, store, scope
        self.target, self.settings, self.record = target, settings, record
        self.outcome = outcome
        self.limits = settings.limits

    def run(self) -> None:
        for attempt in range(self.settings.retries + 1):
            self.outcome.attempts = attempt + 1
            if self._round():
                return
        self.outcome.message = (
            f"the remote moved during each of {self.settings.retries + 1} tries; nothing "
            "was changed here, and the next sync tries again"
        )

    # -- one round ---------------------------------------------------------------------

    def _round(self) -> bool:
        """One fetch-merge-push; False when the push lost a race (then nothing changed
        here but provenance stamps)."""
        local = scan(self.scope, self.record.known, self.limits)
        tip = self.store.remote_tip(self.target.url, self.target.read_ref)
        if self._nothing_new(local, tip):
            self.outcome.ok, self.outcome.nothing_new = True, True
            self.outcome.message = "nothing new on either side"
            self.outcome.held = {**self.record.held}
            self._learn_identities(local)
            return True
        if tip is not None and tip != self.record.tip:
            tip = self.store.fetch(self.target.url, self.target.read_ref)
        listing = self._listing(tip)
        base = self.record.base if tip is not None else {}  # a ref that vanished: re-made
        remote = {path: blob.oid for path, blob in listing.blobs.items()}
        mine = self._local_map(local, base)
        held = self._held(mine, base, local)
        plan = merge.plan(
            base, mine, remote, held=held, passthrough=self._passthrough(), is_index=is_index
        )
        if not self.settings.allow_deletes:
            stop = merge.mass_deletion(plan, len(base))
            if stop is not None:
                self.outcome.message = f"{stop}: run with --allow-deletes to go ahead"
                return True
        chosen = self._decide(plan, listing, local, held)
        commit = self._commit(tip, chosen, remote)
        if commit is not None:
            rejected = self._push(commit)
            if rejected:
                return False
        self._finish(tip, commit, base, remote, chosen, plan, local, listing)
        return True

    def _nothing_new(self, local: LocalScan, tip: str | None) -> bool:
        if tip != self.record.tip or not self.record.last:
            return False
        known = {path: oid for path, (_, oid) in self.record.known.items()}
        return local.oids == known

    def _learn_identities(self, local: LocalScan) -> None:
        """Files this machine's last sync wrote are read once more to learn their identity
        (trusted from then on), so the next look for changes does not take them for new."""
        known = self.record.known
        if any(ident == UNKNOWN_IDENT for ident, _ in known.values()):
            self.record.known = {p: (local.idents[p], oid) for p, oid in local.oids.items()}
            save(self.folder, self.record)

    def _listing(self, tip: str | None) -> Listing:
        if tip is None:
            return Listing({}, ())
        out, cut = self.store.listing(tip, self.target.folder)
        return read_listing(out, cut=cut, limits=self.limits)

    def _local_map(self, local: LocalScan, base: Mapping[str, str]) -> dict[str, str]:
        """The local side: the files' ids; a file the scan could not take (a link, too
        big) counts as unchanged where the base has it, so it is never pushed as removed."""
        mine = dict(local.oids)
        for path in local.held:
            if path in base:
                mine[path] = base[path]
        return mine

    def _passthrough(self) -> dict[str, str | None]:
        return {path: passing.local for path, passing in self.record.passing.items()}

    def _held(
        self, mine: Mapping[str, str], base: Mapping[str, str], local: LocalScan
    ) -> dict[str, str]:
        """Why each changed local file may not leave (the scan's reasons too, for status)."""
        held = dict(local.held)
        passing = self._passthrough()
        changed = {
            p: self._bytes(local, p, oid)
            for p, oid in mine.items()
            if base.get(p) != oid and not (p in passing and passing[p] == oid)
        }
        cited: dict[str, tuple[str, ...]] = {}
        check = self.settings.present
        for path, data in changed.items():
            reason = "it changed while memd read it" if data is None else None
            reason = reason or gates.outgoing(data or b"", max_bytes=self.limits.max_file_bytes)
            if reason is not None:
                held[path] = reason
            elif data is not None and check is not None and not is_index(path):
                cited[path] = gates.cited_paths(data)
        if cited and check is not None:
            present = check(sorted({c for cs in cited.values() for c in cs}))
            for path, paths in cited.items():
                reason = gates.citations_problem(paths, present)
                if reason is not None:
                    held[path] = reason
        self.outcome.held = held
        return {p: r for p, r in held.items() if p in changed}

    def _bytes(self, local: LocalScan, path: str, oid: str) -> bytes | None:
        """The local file's bytes as of its id ``oid`` (``None``: it changed meanwhile)."""
        data = local.read.get(path)
        if data is None:
            with opened(self.scope) as area:
                data = None if area is None else read(area, path, self.limits.max_file_bytes)
        return data if data is not None and blob_id(data) == oid else None

    # -- deciding ------------------------------------------------------------------------

    def _decide(
        self, plan: merge.Plan, listing: Listing, local: LocalScan, held: Mapping[str, str]
    ) -> _Round:
        chosen = _Round()
        wanted = {
            d.remote: listing.blobs[d.path].size
            for d in plan.decisions
            if d.kind in ("take", "conflict", "lines") and d.remote is not None
        }
        arrived = self.store.read_blobs(wanted) if wanted else {}
        for decision in plan.decisions:
            verdict = None
            if decision.remote is not None and decision.kind in ("take", "conflict", "lines"):
                data = arrived.get(decision.remote)
                verdict = gates.incoming(data) if data is not None else None
                if verdict is None or verdict.kind != "take":
                    self._pass(chosen, decision, verdict)
                    continue
            self._choose(chosen, decision, arrived, local, held)
        return chosen

    def _pass(self, chosen: _Round, d: merge.Decision, verdict: gates.Verdict | None) -> None:
        """The remote's version of ``d.path`` is not taken here: it stays on the remote."""
        assert d.remote is not None
        kind = "refused" if verdict is None or verdict.kind == "refuse" else "quarantined"
        reason = verdict.reason if verdict is not None else "git did not give its content"
        chosen.passing[d.path] = Passing(d.remote, d.local, reason, kind)
        if kind == "quarantined":
            self.outcome.quarantined[d.path] = reason
        else:
            self.outcome.refused.append((d.path, reason))

    def _choose(
        self,
        chosen: _Round,
        d: merge.Decision,
        arrived: Mapping[str, bytes],
        local: LocalScan,
        held: Mapping[str, str],
    ) -> None:
        mine = None if d.local is None else self._bytes(local, d.path, d.local)
        if d.local is not None and mine is None:
            self.outcome.changed_meanwhile.append(d.path)
            return
        theirs = None if d.remote is None else arrived.get(d.remote)
        if d.kind == "take":
            chosen.after.append((d.path, theirs, mine))
        elif d.kind == "push":
            self._share(chosen, d.path, mine)
        elif d.kind == "conflict":
            assert mine is not None and theirs is not None
            self._conflict(chosen, d.path, mine, theirs, shared=d.path not in held)
        elif d.kind == "lines":
            assert mine is not None and theirs is not None
            self._lines(chosen, d, mine, theirs)

    def _share(self, chosen: _Round, path: str, mine: bytes | None) -> None:
        if mine is None or is_index(path):  # an index is a list of pointers: not stamped
            chosen.changes[path] = mine
            return
        text = stamped(mine.decode("utf-8"), self.settings.identity.line, self.settings.agent_of)
        sent = text.encode("utf-8")
        if sent != mine:
            chosen.before.append((path, sent, mine))
        chosen.changes[path] = sent

    def _conflict(
        self, chosen: _Round, path: str, mine: bytes, theirs: bytes, *, shared: bool
    ) -> None:
        """The remote's version keeps ``path``; this machine's is kept beside it."""
        text = stamped(mine.decode("utf-8"), self.settings.identity.line, self.settings.agent_of)
        marked = f"{self.scope.folder}/{path}" if self.scope.folder else path
        copy = mark_conflict(text, marked).encode("utf-8")
        name = conflict_name(path, blob_id(copy))
        chosen.copies.add(name)
        if shared:
            chosen.changes[name] = copy
        chosen.after.append((name, copy, None))
        chosen.after.append((path, theirs, mine))
        self.outcome.conflicts.append(path)

    def _lines(self, chosen: _Round, d: merge.Decision, mine: bytes, theirs: bytes) -> None:
        base = b""
        if d.base is not None:
            base = self.store.read_blobs({d.base: self.limits.max_file_bytes}).get(d.base, b"")
        merged = merge_lines(base, mine, theirs)
        reason = gates.outgoing(merged, max_bytes=self.limits.max_file_bytes)
        if reason is not None:
            self.outcome.held[d.path] = reason
            return
        chosen.changes[d.path] = merged
        chosen.after.append((d.path, merged, mine))
        self.outcome.lines_merged.append(d.path)

    # -- pushing and changing here ---------------------------------------------------------

    def _commit(self, tip: str | None, chosen: _Round, remote: Mapping[str, str]) -> str | None:
        """Apply the provenance stamps, then make the commit of what changes on the remote
        (``None``: nothing does)."""
        with opened(self.scope, create=bool(chosen.before)) as area:
            for path, data, expected in chosen.before:
                if area is None or not write(area, path, data, expected):
                    chosen.changes.pop(path, None)
                    self.outcome.changed_meanwhile.append(path)
        changes = {
            path: data
            for path, data in chosen.changes.items()
            if (path in remote if data is None else remote.get(path) != blob_id(data))
        }
        chosen.changes = changes
        if not changes:
            return None
        if self.target.proposing and self.record.settings.get("proposal_key") == _key(tip, changes):
            return None  # the same proposal as last time: already on the remote
        prefix = f"{self.target.folder.rstrip('/')}/" if self.target.folder else ""
        return self.store.commit(
            tip,
            {prefix + path: data for path, data in changes.items()},
            message=_message(changes, self.scope),
            identity=self.settings.identity,
            when=int(self.settings.now()),
        )

    def _push(self, commit: str) -> bool:
        """Push ``commit``; True when the remote moved meanwhile (a new round follows)."""
        target = self.target
        if not target.proposing:
            return self.store.push(target.url, commit, target.write_ref) is not None
        lease = str(self.record.settings.get("proposal") or "")
        rejected = self.store.push(target.url, commit, target.write_ref, lease=lease)
        if rejected is not None:
            self.outcome.message = (
                f"{target.write_ref} changed on the remote since memd last proposed on it; "
                "memd leaves it as it is (delete it there to propose again)"
            )
            return False
        self.record.settings["proposal"] = commit
        return False

    def _finish(
        self,
        tip: str | None,
        commit: str | None,
        base: Mapping[str, str],
        remote: Mapping[str, str],
        chosen: _Round,
        plan: merge.Plan,
        local: LocalScan,
        listing: Listing,
    ) -> None:
        failed = self._apply(chosen)
        pushed = commit is not None and not self.target.proposing
        agreed = dict(remote)
        if pushed:
            for path, data in chosen.changes.items():
                _put(agreed, path, None if data is None else blob_id(data))
        for path in failed:
            _put(agreed, path, base.get(path))
        record = self.record
        record.known = self._known(local, chosen, failed)
        decided = {d.path for d in plan.decisions}
        record.passing = {
            p: x
            for p, x in record.passing.items()
            if remote.get(p) == x.remote and p not in decided
        } | chosen.passing
        record.base, record.tip = agreed, commit if pushed else tip
        if self.target.proposing and commit is not None:
            record.settings["proposal_key"] = _key(tip, chosen.changes)
        self._summarise(chosen, commit, listing, failed)
        record.held = dict(self.outcome.held)
        record.refused = list(self.outcome.refused)
        record.last = {"at": self.settings.now(), "ok": True, "message": self.outcome.message}
        save(self.folder, record)

    def _apply(self, chosen: _Round) -> set[str]:
        """The writes here, in order; the paths whose write was refused (changed meanwhile)."""
        failed: set[str] = set()
        if not chosen.after:
            return failed
        with opened(self.scope, create=True) as area:
            assert area is not None
            skip_next = False
            for path, data, expected in chosen.after:
                if skip_next:
                    skip_next = False
                    failed.add(path)
                    continue
                # a conflict copy is on the disk before the file it keeps is replaced
                durable = path in chosen.copies
                if not write(area, path, data, expected, durable=durable):
                    failed.add(path)
                    self.outcome.changed_meanwhile.append(path)
                    skip_next = path in chosen.copies  # the original waits for its copy
            area.flush()  # on the disk before the record says so
        return failed

    def _known(self, local: LocalScan, chosen: _Round, failed: set[str]) -> dict[str, Known]:
        known = {p: (local.idents[p], oid) for p, oid in local.oids.items()}
        for path, data, _ in [*chosen.before, *chosen.after]:
            if path in failed:
                if path in known:
                    known[path] = (UNKNOWN_IDENT, known[path][1])
            elif data is None:
                known.pop(path, None)
            else:
                known[path] = (UNKNOWN_IDENT, blob_id(data))
        return known

    def _summarise(
        self, chosen: _Round, commit: str | None, listing: Listing, failed: set[str]
    ) -> None:
        outcome = self.outcome
        outcome.ok, outcome.commit = True, commit
        outcome.pushed = sorted(chosen.changes) if commit is not None else []
        written = [(p, d) for p, d, _ in chosen.after if p not in failed]
        outcome.taken = sorted(p for p, d in written if d is not None and p not in chosen.copies)
        outcome.removed_here = sorted(p for p, d in written if d is None)
        outcome.refused = [*((r.name, r.reason) for r in listing.refused), *outcome.refused]
        if listing.cut:
            outcome.refused.append(("…", "git's listing of the tree was cut at its limit"))
        words = [
            f"{'proposed' if self.target.proposing else 'pushed'} {len(outcome.pushed)}",
            f"took {len(outcome.taken)}",
            f"removed {len(outcome.removed_here)} here",
        ]
        if outcome.conflicts:
            words.append(f"{len(outcome.conflicts)} conflicts (both versions kept)")
        if outcome.changed_meanwhile:
            words.append(f"{len(outcome.changed_meanwhile)} changed meanwhile (next sync)")
        if outcome.held:
            words.append(f"{len(outcome.held)} held back")
        if outcome.quarantined:
            words.append(f"{len(outcome.quarantined)} quarantined")
        outcome.message = outcome.message or ", ".join(words)


def _put(tree: dict[str, str], path: str, oid: str | None) -> None:
    if oid is None:
        tree.pop(path, None)
    else:
        tree[path] = oid


def _key(tip: str | None, changes: Mapping[str, bytes | None]) -> str:
    """What a proposal is made of: the branch's tip and the changes on it."""
    parts = [tip or ""]
    parts += [f"{p}\0{'' if d is None else blob_id(d)}" for p, d in sorted(changes.items())]
    return blob_id("\n".join(parts).encode("utf-8", "surrogateescape"))


def _message(changes: Mapping[str, bytes | None], scope: Scope) -> str:
    added = sorted(p for p, d in changes.items() if d is not None)
    removed = sorted(p for p, d in changes.items() if d is None)
    what = "team memories" if scope.folder else "memories"
    lines = [f"memd: {len(added)} {what} written, {len(removed)} removed", ""]
    lines += [f"M {p}" for p in added[:50]] + [f"D {p}" for p in removed[:50]]
    if len(changes) > 100:
        lines.append(f"… and {len(changes) - 100} more")
    return "\n".join(lines) + "\n"
