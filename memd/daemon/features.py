"""What the daemon's features need to load: the feature modules imported and their state read
in a worker thread (:func:`load_features`), and the session notes' settings from the config
(:func:`notes_settings`, again at each reload). :class:`memd.daemon.service.Daemon` builds the
features from these after READY.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from memd.clock import Clock
from memd.config import LoadedConfig

if TYPE_CHECKING:
    from memd.compaction.tokencache import TokenCache
    from memd.llm.ledger import Ledger
    from memd.session.extract import NotesSettings
    from memd.session.store import ExtractionStore

NOTES_RUN_TIMEOUT_S = 300.0


Loaded = tuple["Ledger", "ExtractionStore", "TokenCache"]


def load_features(state_dir: Path, clock: Clock) -> Loaded:
    """Import the feature modules and read their state (blocking: run in a worker thread).
    Everything the loop uses of them afterwards must be imported here: an import on the loop
    stops it serving for as long as the import takes."""
    import msgspec.msgpack  # noqa: F401  (the IPC server's encoder, from then on)

    import memd.compaction.service
    import memd.dream.service
    import memd.ipc.compaction_methods
    import memd.ipc.doctor_methods
    import memd.ipc.dream_methods
    import memd.ipc.mcp_methods
    import memd.ipc.memory_methods
    import memd.ipc.notes_methods  # the feature methods' table (memd.ipc.handlers)
    import memd.ipc.team_methods
    import memd.llm.guard
    import memd.memory.service
    import memd.session.scheduler
    import memd.team.service  # noqa: F401
    from memd.compaction.tokencache import TOKENS_FILE, TokenCache
    from memd.llm.ledger import Ledger
    from memd.session.store import ExtractionStore

    tokens = TokenCache.load(state_dir / TOKENS_FILE)
    return Ledger.load(state_dir, clock), ExtractionStore.load(state_dir), tokens


def notes_settings(loaded: LoadedConfig) -> NotesSettings:
    from memd.session.extract import NotesSettings

    cfg = loaded.config
    return NotesSettings(
        cfg.session_notes,
        loaded.paths.projects_root,
        loaded.paths.claude_dir,
        cfg.llm.models.session_notes,
        cfg.llm.max_output_tokens,
        timeout_s=NOTES_RUN_TIMEOUT_S,
        redact_secrets=cfg.privacy.redact_secrets,
    )
