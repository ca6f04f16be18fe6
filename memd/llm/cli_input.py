"""What an agent's CLI is given when memd runs it as its model (issue 34): its environment,
built from nothing, its executable, and memd's request as one prompt. Pure but for the PATH
lookup and a stat; :mod:`memd.llm.cli_run` runs the CLI with them.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from memd_client.hook import MODEL_CALL_ENV

KEPT_ENV: tuple[str, ...] = (
    "HOME",
    "PATH",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",  # a login the CLI keeps in the desktop's keyring
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
)


def printable(text: str, limit: int = 300) -> str:
    """``text`` on one line, without control characters, at most ``limit`` characters."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    return flat[:limit]


def file_present(path: Path) -> bool:
    """A regular, non-empty file at ``path`` (a login's file: its bytes are not read)."""
    try:
        info = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size > 0


def cli_env(env: Mapping[str, str], own: Sequence[str]) -> dict[str, str]:
    """The CLI's environment, from nothing: the kept variables and the CLI's own, as memd's
    process has them; never an API key of another backend."""
    kept = {k: env[k] for k in (*KEPT_ENV, *own) if env.get(k)}
    kept[MODEL_CALL_ENV] = "1"
    return kept


def find_command(command: str, env: Mapping[str, str], program: str) -> Path | None:
    """The CLI's executable: ``command`` (a path, or a name looked up on PATH), else
    ``program`` on memd's PATH; None when there is none."""
    wanted = command or program
    if "/" in wanted:
        path = Path(wanted).expanduser()
        return path if os.access(path, os.X_OK) and path.is_file() else None
    found = shutil.which(wanted, path=env.get("PATH") or os.defpath)
    return Path(found) if found else None


def text_of(content: Any) -> str:
    """A message's content as plain text (tool calls and results named, media as a word)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            args = json.dumps(block.get("input"), ensure_ascii=False)
            parts.append(f"[tool call {block.get('name')}: {args}]")
        elif kind == "tool_result":
            parts.append(f"[tool result: {text_of(block.get('content'))}]")
        elif kind in ("image", "document"):
            parts.append(f"[{kind}]")
    return "\n\n".join(p for p in parts if p)


def prompt_of(
    system: str | list[dict[str, Any]], messages: Sequence[Mapping[str, Any]]
) -> tuple[str, str]:
    """The system prompt and the one prompt a CLI is given for memd's request: a single user
    message as its text; a conversation as its turns, each in a tag naming its role."""
    system_text = system if isinstance(system, str) else text_of(system)
    if len(messages) == 1 and messages[0].get("role") == "user":
        return system_text, text_of(messages[0].get("content"))
    turns = [
        f"<{m.get('role')}>\n{text_of(m.get('content'))}\n</{m.get('role')}>"
        for m in messages
        if m.get("role") in ("user", "assistant")
    ]
    return system_text, "\n\n".join(turns)
