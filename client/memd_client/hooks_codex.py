"""Codex CLI's hook trust, as memd's installer writes it and ``memdctl doctor`` checks it.

Codex (0.169.0) runs a hook from the user's ``$CODEX_HOME/hooks.json`` only once it is
trusted: ``config.toml`` must hold ``[hooks.state."<key>"] trusted_hash = "<hash>"`` for it,
else Codex skips it without a word (its TUI offers to trust new hooks; ``codex exec`` never
does). The key is positional, ``<hooks.json path>:<event label>:<group>:<handler>``; the hash
is Codex's fingerprint of the entry (``codex-rs/hooks/src/engine/discovery.rs``,
``command_hook_hash``): the SHA-256 of the compact, key-sorted JSON of ``{"event_name":
label, "matcher"?: …, "hooks": [{"type": "command", "command", "timeout", "async":
false}]}``. Checked against the real CLI in ``tests/test_agent_hooks_cli.py``: a hook with
this hash runs, one without does not.

Codex's ``[features] hooks`` (``codex_hooks``, its older name, now warned about at every
start) is on by default; memd writes neither, and says so when the user turned it off.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd_client.config_read import parse_toml, read_config_text

# Codex's snake-case labels of the events memd may register (HookEventName).
LABELS = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "user_prompt_submit",
    "Stop": "stop",
    "PreCompact": "pre_compact",
    "PostCompact": "post_compact",
}
MATCHER_IGNORED = ("UserPromptSubmit", "Stop")  # Codex hashes these without their matcher


def codex_home(env: Mapping[str, str], home: Path) -> Path:
    """Codex's home as Codex resolves it: ``$CODEX_HOME`` (its real path) or ``~/.codex``."""
    given = env.get("CODEX_HOME")
    return Path(os.path.realpath(given)) if given else home / ".codex"


def trust_hash(event: str, group: Mapping[str, Any], handler: Mapping[str, Any]) -> str:
    """Codex's fingerprint of one command handler of ``group`` under ``event``."""
    entry: dict[str, Any] = {
        "type": "command",
        "command": handler.get("command"),
        "timeout": max(1, _int(handler.get("timeout"), 600)),
        "async": handler.get("async") is True,
    }
    identity: dict[str, Any] = {"event_name": LABELS.get(event, event), "hooks": [entry]}
    matcher = group.get("matcher")
    if isinstance(matcher, str) and event not in MATCHER_IGNORED:
        identity["matcher"] = matcher
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def trust_entries(hooks_file: Path, settings: Mapping[str, Any], is_mine: Any) -> dict[str, str]:
    """``{state key: trusted hash}`` for each handler in ``settings`` (hooks.json's data)
    whose command ``is_mine(command)`` says is memd's."""
    found: dict[str, str] = {}
    hooks = settings.get("hooks")
    for event, groups in hooks.items() if isinstance(hooks, dict) else ():
        if event not in LABELS or not isinstance(groups, list):
            continue
        for g, group in enumerate(groups):
            inner = group.get("hooks") if isinstance(group, dict) else None
            for h, handler in enumerate(inner if isinstance(inner, list) else []):
                if isinstance(handler, dict) and is_mine(handler.get("command")):
                    key = f"{hooks_file}:{LABELS[event]}:{g}:{h}"
                    found[key] = trust_hash(event, group, handler)
    return found


def read_config(path: Path) -> dict[str, Any]:
    """``config.toml``'s data; ``{}`` when it is missing. Raises ValueError naming the file
    when memd cannot use it (not TOML, nested too deep, too large: :mod:`.config_read`)."""
    try:
        return parse_toml(path, read_config_text(path))
    except FileNotFoundError:
        return {}


def trusted_state(config: Mapping[str, Any]) -> dict[str, str]:
    """``{key: trusted_hash}`` of ``[hooks.state]`` in ``config.toml``'s data."""
    hooks = config.get("hooks")
    state = hooks.get("state") if isinstance(hooks, dict) else None
    return {
        key: value["trusted_hash"]
        for key, value in (state.items() if isinstance(state, dict) else ())
        if isinstance(value, dict) and isinstance(value.get("trusted_hash"), str)
    }


def hooks_turned_off(config: Mapping[str, Any]) -> str | None:
    """The setting that turns Codex's hooks off, or None."""
    features = config.get("features")
    for name in ("hooks", "codex_hooks"):
        if isinstance(features, dict) and features.get(name) is False:
            return f"[features] {name} = false"
    return None
