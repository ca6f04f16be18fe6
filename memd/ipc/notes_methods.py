"""IPC methods for session notes: ``notes``, ``extract``, ``wait_extraction``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memd.errors import LLMDisabled
from memd.ipc.params import find_session, opt_str
from memd.ipc.server import Handler, InvalidParams

if TYPE_CHECKING:
    from memd.ipc.face import NotesFace

EXTRACT_WAIT_S = 20.0
MAX_EXTRACT_WAIT_S = 300.0


def notes_methods(daemon: NotesFace) -> dict[str, Handler]:
    async def notes(params: dict[str, Any]) -> Any:
        """Params: ``session``. Result: the notes text (None before the first extraction),
        path, template, the last summarized message id and the session's notes status."""
        state = find_session(daemon, opt_str(params, "session"))
        view = (await daemon.notes.read_notes(state.session_id)).as_dict()
        return {**view, "disabled": daemon.notes.disabled_reason}

    async def extract(params: dict[str, Any]) -> Any:
        """Params: ``session``, ``wait`` (seconds to wait for the run, default 20; 0 = queue
        only). Runs an extraction now, bypassing the thresholds (R-S9). Errors: disabled."""
        state = find_session(daemon, opt_str(params, "session"))
        unkept = daemon.notes.unkept(state)
        if unkept is not None:
            raise InvalidParams(f"memd keeps no notes for this session: {unkept}")
        reason = daemon.notes.disabled_reason
        if reason is not None:
            raise LLMDisabled(f"session notes are {reason}")
        opted = daemon.optouts.reason(state.cwd)
        if opted is not None:
            raise InvalidParams(f"memory work is off for this project: {opted}")
        wait = params.get("wait", EXTRACT_WAIT_S)
        if not isinstance(wait, int | float) or isinstance(wait, bool) or not 0 <= wait <= 300:
            raise InvalidParams(f"'wait' must be 0 to {MAX_EXTRACT_WAIT_S:g} seconds")
        status = await daemon.notes.extract(state.session_id, wait_s=float(wait) or None)
        return status.as_dict()

    async def wait_extraction(params: dict[str, Any]) -> Any:
        """Params: ``session``. Waits up to 15 s for an in-flight extraction; one running
        longer than 60 s is stale and not waited for (R-S8). Result: idle, finished, timeout
        or stale."""
        state = find_session(daemon, opt_str(params, "session"))
        return {"outcome": await daemon.notes.wait_extraction(state.session_id)}

    return {"notes": notes, "extract": extract, "wait_extraction": wait_extraction}
