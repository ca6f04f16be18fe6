"""The ``dream`` rows of ``memdctl status``: per memory dir, each gate's state and why it is
closed, the lock as last seen, a running dream's live progress, and the last runs. Pure: it
formats what the service already knows and never touches the disk."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from memd.dream import gates
from memd.dream.gates import GATE_ORDER, Go, NeedScan, Skip, Verdict
from memd.llm.ledger import billed_tokens
from memd_client.names import encodable

if TYPE_CHECKING:
    from memd.dream.dirs import DreamDir, Running

LATEST_TEXT_CHARS = 400
MAX_SESSIONS_SHOWN = 50


def gate_states(verdict: Verdict | None) -> list[dict[str, str]]:
    """Every gate in order: ``open``, ``closed`` (with the reason) or ``not reached``."""
    if verdict is None:
        return [{"gate": g, "state": "unchecked", "reason": ""} for g in GATE_ORDER]
    if isinstance(verdict, Go):
        forced = {"time", "throttle", "sessions"} if verdict.forced else set()
        return [
            {"gate": g, "state": "skipped (forced)" if g in forced else "open", "reason": ""}
            for g in GATE_ORDER
        ]
    closed = verdict.gate if isinstance(verdict, Skip) else "sessions"
    reason = verdict.reason if isinstance(verdict, Skip) else "counting"
    rows: list[dict[str, str]] = []
    reached = True
    for gate in GATE_ORDER:
        if gate == closed:
            rows.append({"gate": gate, "state": "closed", "reason": reason})
            reached = False
        else:
            rows.append({"gate": gate, "state": "open" if reached else "not reached", "reason": ""})
    return rows


def progress_row(running: Running) -> dict[str, Any]:
    record = running.record
    row: dict[str, Any] = {
        "run_id": record.run_id,
        "started_at": record.started_at,
        "sessions": list(record.sessions[:MAX_SESSIONS_SHOWN]),
        "session_count": len(record.sessions),
        "turns": 0,
        "tool_calls": 0,
        "files_touched": [],
        "latest_text": "",
        "tokens": 0,
        "aborting": running.abort.is_set(),
    }
    progress = running.progress
    if progress is not None:
        row.update(
            turns=progress.turns,
            tool_calls=len(progress.tool_calls),
            files_touched=list(progress.files_touched),
            latest_text=progress.latest_text[-LATEST_TEXT_CHARS:],
            tokens=billed_tokens(progress.usage),
        )
    return row


def dir_row(found: DreamDir, now: float) -> dict[str, Any]:
    verdict = found.verdict
    if isinstance(verdict, NeedScan):
        verdict = None
    lock_row: dict[str, Any] = {"mtime": found.lock_mtime, "holder_pid": None, "holder": None}
    if found.running is not None:
        lock_row.update(holder_pid=os.getpid(), holder="this daemon")
    elif found.busy is not None:
        lock_row.update(holder_pid=found.busy.pid, holder=found.busy.reason)
    return {
        "memory_dir": str(found.memory_dir),
        "gates": gates.verdict_row(found.verdict, found.verdict_at),
        "gate_states": gate_states(verdict),
        "last_scan_at": found.last_scan_at,
        "lock": lock_row,
        "running": progress_row(found.running) if found.running else None,
        "last_runs": [_brief(r.as_dict()) for r in found.history],
        "folders": sorted({str(scope.folder) for scope in found.scopes}),
    }


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    """A past run for status: the session list cut (a run may review thousands)."""
    sessions = run.get("sessions") or []
    return {**run, "sessions": sessions[:MAX_SESSIONS_SHOWN], "session_count": len(sessions)}


def printable(value: Any) -> Any:
    """``value`` with every string made encodable: a file name that is not UTF-8 (its bytes
    come back as lone surrogates) is shown escaped, as every name in a reply is
    (:mod:`memd_client.names`), and must not make a status or log answer unencodable."""
    return encodable(value)
