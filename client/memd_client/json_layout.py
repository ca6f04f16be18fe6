"""The layout of a JSON file an installer edits, so the edit keeps it (stdlib only).

memdctl's installers (``hooks_install``) and ``memd/install`` (the MCP entries) write agents'
JSON files back in the layout they found: a user's two-space, four-space or tab indent, a
one-line file, CRLF line ends and a missing final newline stay as they were (a byte order
mark is kept by :mod:`memd_client.config_read`).
"""

from __future__ import annotations

import json
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


def dump_like(data: object, like: str) -> str:
    """``data`` as JSON in the layout of ``like`` (:func:`json_layout`), with its line ends
    (``\\r\\n`` when it used them) and non-ASCII text escaped only where ``like`` had none
    (or where it cannot be written as UTF-8: a lone surrogate a ``\\ud800`` escape gave)."""
    indent, ending = json_layout(like)
    out = json.dumps(data, indent=indent, ensure_ascii=like.isascii())
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        out = json.dumps(data, indent=indent)
    out += ending
    return out.replace("\n", "\r\n") if "\r\n" in like else out
