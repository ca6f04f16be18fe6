"""Config wiring through the in-process daemon's IPC methods (the method table a client
reaches over the socket): the compaction threshold and circuit, micro-compaction and the
hook's injection budget, each on both sides of its boundary. See tests/test_config_wiring.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memd.config import load_config
from memd.daemon.service import Daemon
from memd.ipc.handlers import method_table
from memd.ipc.server import Handler
from memd.memory.paths import memory_dir
from tests.conftest import CORPUS, on_a_gateway_model

pytestmark = pytest.mark.anyio

# -- compaction: the auto-compaction threshold and micro-compaction, through the IPC methods --

SID = "ecbb2992-88e0-44e2-9bcc-0f916dd8be4f"  # the session of the transcript below


async def _daemon_methods(
    tmp_path: Path, *sets: str, model_known: bool = False
) -> dict[str, Handler]:
    """The in-process daemon's method table over one corpus transcript, with ``--set``s; its
    model is one memd knows no window of (so the config's decides) unless ``model_known``."""
    source = (CORPUS / "napoli-matcha" / "05_a737f62fb9_4_full.jsonl").read_bytes()
    project = tmp_path / ".claude" / "projects" / "-home-u-p"
    project.mkdir(parents=True)
    (project / f"{SID}.jsonl").write_bytes(source if model_known else on_a_gateway_model(source))
    env = {"HOME": str(tmp_path), "MEMD_RUNTIME_DIR": str(tmp_path / "run")}
    overrides = dict(s.split("=", 1) for s in sets)
    daemon = Daemon.load(load_config(env=env, overrides=overrides), env=env)
    await daemon.build_features()
    table = method_table(daemon)
    await table["session"]({"session": SID})  # read from disk: no watcher runs here
    return table


@pytest.mark.parametrize(
    ("sets", "threshold"),
    [
        # the reply's room is the smaller of max_output_tokens and max_output_reserve
        (("compaction.default_max_output_tokens=4000", "compaction.buffer_tokens=3000"), 93_000),
        (("compaction.default_max_output_tokens=9000", "compaction.buffer_tokens=2000"), 92_000),
    ],
)
async def test_the_compaction_threshold_comes_from_the_window_reserve_and_buffer(
    tmp_path: Path, sets: tuple[str, ...], threshold: int
) -> None:
    table = await _daemon_methods(
        tmp_path,
        "compaction.default_context_window=100000",
        "compaction.max_output_reserve=6000",
        *sets,
    )
    below = await table["should_compact"]({"session": SID, "tokens": threshold - 1})
    at = await table["should_compact"]({"session": SID, "tokens": threshold})
    assert (below["threshold"], below["compact"], at["compact"]) == (threshold, False, True)


async def test_a_session_of_a_known_model_has_its_window_whatever_the_configs(
    tmp_path: Path,
) -> None:
    sets = ("compaction.default_context_window=100000", "compaction.buffer_tokens=3000")
    table = await _daemon_methods(tmp_path, *sets, model_known=True)
    verdict = await table["should_compact"]({"session": SID, "tokens": 100_000})
    assert (verdict["context_window"], verdict["threshold"]) == (200_000, 177_000)
    assert verdict["window_source"].startswith("transcript: claude-sonnet-4-5-20250929: 200K")
    assert not verdict["compact"]
    row = await table["session"]({"session": SID})
    assert (row["model"], row["compact_threshold"]) == ("claude-sonnet-4-5-20250929", 177_000)


async def test_microcompact_keeps_the_configured_number_of_recent_results(
    tmp_path: Path,
) -> None:
    table = await _daemon_methods(tmp_path, "compaction.microcompact_keep_recent=2")
    default = await table["microcompact"]({"session": SID})
    cleared = {
        keep: (await table["microcompact"]({"session": SID, "keep_recent": keep}))[
            "cleared_tool_use_ids"
        ]
        for keep in (1, 2, 3)
    }
    assert len(set(map(tuple, cleared.values()))) == 3  # each keep clears a different set
    assert default["cleared_tool_use_ids"] == cleared[2]


@pytest.mark.parametrize(("failures", "stopped"), [(1, False), (2, True)])
async def test_max_consecutive_failures_opens_the_sessions_circuit(
    tmp_path: Path, failures: int, stopped: bool
) -> None:
    state = tmp_path / ".local" / "state" / "memd"
    state.mkdir(parents=True)
    (state / "compaction-breakers.json").write_text(f'{{"{SID}": {failures}}}')  # as recorded
    table = await _daemon_methods(tmp_path, "compaction.max_consecutive_failures=2")
    answer = await table["should_compact"]({"session": SID, "tokens": 10**6})
    assert (answer["compact"], answer["circuit_open"]) == (not stopped, stopped), answer


# -- hook.injection_max_bytes: what the hook injects, through the daemon's ``hook`` method ------


async def _session_start_context(home: Path, budget: int) -> str:
    env = {"HOME": str(home), "MEMD_RUNTIME_DIR": str(home / "run")}
    overrides = {"hook.injection_max_bytes": str(budget)}
    daemon = Daemon.load(load_config(env=env, overrides=overrides), env=env)
    await daemon.build_features()
    event = {"hook_event_name": "SessionStart", "session_id": "s1", "cwd": str(home / "proj")}
    reply = await method_table(daemon)["hook"]({"event": "SessionStart", "input": event})
    text: str = reply["additionalContext"]
    return text


async def test_hook_injection_max_bytes_bounds_the_context_the_hook_injects(
    tmp_path: Path,
) -> None:
    (tmp_path / "proj").mkdir()
    claude = tmp_path / ".claude"
    claude.mkdir()
    (claude / "settings.json").write_text('{"autoMemoryEnabled": false}')  # memd injects it
    memory = memory_dir(claude / "projects", tmp_path / "proj")
    memory.mkdir(parents=True)
    index = "".join(f"- [Note {n}](note_{n}.md) — something worth keeping {n}\n" for n in range(40))
    (memory / "MEMORY.md").write_text(index)
    whole = await _session_start_context(tmp_path, 100_000)
    assert index.rstrip("\n") in whole
    size = len(whole.encode())
    assert await _session_start_context(tmp_path, size) == whole  # exactly fits
    cut = await _session_start_context(tmp_path, size - 1)
    assert len(cut.encode()) <= size - 1 and "- [Note 0]" in cut and index.rstrip("\n") not in cut
