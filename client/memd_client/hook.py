"""``memd-hook``: the Claude Code hook command.

Claude Code runs it with the hook's JSON on stdin (FORMAT.md §10). It asks the daemon for the
context to inject and prints it in the hooks JSON format:

- ``SessionStart``: the project's memory index (and, on ``resume``/``compact``, the notes);
- ``UserPromptSubmit``: memories recalled for the prompt, with their age;
- ``Stop``: tells the daemon a turn ended (prints nothing).

It fails open: when the daemon is down, slow or confused, the hook prints nothing and exits 0,
so it never blocks the agent and never puts an error into its context. Its import graph is the
standard library plus msgpack, so it starts about as fast as Python itself.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from memd_client.client import Client

EVENTS = frozenset({"SessionStart", "UserPromptSubmit", "Stop", "SessionEnd", "PreCompact"})
MAX_STDIN_BYTES = 4 * 1024 * 1024
DEFAULT_TIMEOUT_S = 3.0


def hook_timeout(env: dict[str, str] | os._Environ[str]) -> float:
    raw = env.get("MEMD_HOOK_TIMEOUT_MS", "")
    return int(raw) / 1000.0 if raw.isdigit() and int(raw) > 0 else DEFAULT_TIMEOUT_S


def render(event: str, result: Any) -> str | None:
    """The hook's stdout for a daemon answer, or None to print nothing."""
    if not isinstance(result, dict):
        return None
    context = result.get("additionalContext")
    if not isinstance(context, str) or not context:
        return None
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}},
        ensure_ascii=False,
    )


def run(stdin: bytes, env: dict[str, str] | os._Environ[str]) -> str | None:
    try:
        data = json.loads(stdin)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    event = data.get("hook_event_name")
    if event not in EVENTS:
        return None
    with Client(timeout=hook_timeout(env)) as client:
        result = client.call("hook", {"event": event, "input": data})
    return render(event, result)


def main() -> int:
    try:
        out = run(sys.stdin.buffer.read(MAX_STDIN_BYTES), os.environ)
    except Exception:  # noqa: BLE001 - fail open: the agent must never see a hook error
        return 0
    if out:
        sys.stdout.write(out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
