"""The layout of a JSON file an installer edits, so the edit keeps it (stdlib only).

memdctl's installers (``hooks_install``) and ``memd/install`` (the MCP entries) write agents'
JSON files back in the layout they found: a user's two-space, four-space or tab indent, a
one-line file and a missing final newline stay as they were.
"""

from __future__ import annotations

import re


def json_layout(text: str) -> tuple[int | str | None, str]:
    """(indent, ending) of an existing JSON text, for ``json.dumps(..., indent=indent) +
    ending``: the indent of its first member (tabs kept as tabs; 2 when none shows), ``None``
    for a one-line file, and a final newline if it had one or was empty."""
    match = re.search(r"^\{\s*\n([ \t]+)\S", text, re.MULTILINE)
    indent: int | str | None = 2
    if match:
        lead = match.group(1)
        indent = lead if "\t" in lead else len(lead)
    elif text.strip() and "\n" not in text.strip():
        indent = None  # a one-line file stays on one line
    ending = "\n" if text.endswith("\n") or not text else ""
    return indent, ending
