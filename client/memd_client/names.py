"""File and folder names as text on the wire, on screen and in JSON. Pure, stdlib only.

A name on disk is bytes. memd holds it as Python does (``os.fsdecode``: a byte that is not
UTF-8 becomes a lone surrogate, U+DC80-U+DCFF), which msgpack and JSON cannot carry. So
every name memd replies with is escaped, and every name a request gives is unescaped:

    \\       a backslash
    \\xNN    the byte NN: one that is not UTF-8 (U+DC80+NN), or a control character (< 0x20, 0x7f)
    \\uNNNN  any other lone surrogate

``caf\\xe9.jsonl`` on disk is ``caf\\xe9.jsonl`` in ``memdctl sessions`` and in its JSON, and
``memdctl session 'caf\\xe9'`` finds it. A backslash followed by anything else stays as typed.
"""

from __future__ import annotations

import re
from typing import Any

_NEEDS = re.compile(r"[\\\x00-\x1f\x7f\ud800-\udfff]")
_ESCAPE = re.compile(r"\\(\\|x[0-9a-fA-F]{2}|u[dD][89a-fA-F][0-9a-fA-F]{2})")


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char == "\\":
        return "\\\\"
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if code < 0xD800:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def escape_name(name: str) -> str:
    """``name`` as text any encoder takes: see the module's table."""
    if name.isprintable() and "\\" not in name:  # nearly every name: no regex
        return name
    return _NEEDS.sub(_escape_one, name)


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """Free text that may hold a name as Python read it from disk (a message, a rendered
    table): its lone surrogates escaped as :func:`escape_name` does, the rest as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(_escape_one, text)
    return text


def _unescape_one(match: re.Match[str]) -> str:
    body = match.group(1)
    if body == "\\":
        return "\\"
    code = int(body[1:], 16)
    if body[0] == "x" and code >= 0x80:
        return chr(0xDC00 + code)
    return chr(code)


def unescape_name(text: str) -> str:
    """The name ``text`` (from :func:`escape_name`, or typed by a user) stands for."""
    return _ESCAPE.sub(_unescape_one, text) if "\\" in text else text


def encodable(value: Any) -> Any:
    """``value`` with each str that UTF-8 cannot encode (map keys too) escaped: the last
    word before a reply is packed, for a name no handler escaped."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return escape_name(value)
        return value
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encodable(v) for v in value]
    return value
