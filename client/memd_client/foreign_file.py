"""The one door for files other tools write: git's pointers, the agents' settings and configs.

memd reads files it does not own: a work tree's ``.git`` file and the gitdir's ``commondir``
and ``gitdir``, Claude Code's settings and ``~/.claude.json``, Codex's ``config.toml`` and
``hooks.json``, Gemini's ``settings.json``, ``projects.json`` and ``.project_root``. Anyone
who can write a repository or an agent's folder chooses their bytes, so every read goes
through here and holds the same promises (stdlib only: the daemon and ``memdctl`` share it):

- the open never blocks and never follows a link unless the caller says the file is the
  user's own (``links="follow"``: a dotfiles repository's ``settings.json`` is read where it
  points, still as a regular file with a cap); a link elsewhere is refused as a link;
- only a regular file is read (``fstat`` on the opened descriptor: a FIFO, a device, a
  socket or a folder swapped in after a check is still refused), and at most ``cap`` bytes
  of it (``cap + 1`` are asked for, to tell a larger file);
- text is UTF-8 (a leading byte order mark dropped); a NUL byte or a byte that is not UTF-8
  is a problem named with its offset, never an exception;
- JSON and TOML are judged for nesting before they are decoded (both decoders recurse, and
  tomllib takes time and memory quadratic in a dotted key's parts: a 200 KB key held 40 GB),
  so what is decoded is bounded by the cap; JSON's ``NaN`` and numbers past a float's range
  are refused (they would not survive being written back).

Every failure is an :class:`Unusable`: which file, what is wrong with it, and the fix, in one
line; a missing file is ``None``. :class:`UnusableFile` carries one as a ``ValueError`` for
the installers, which refuse to edit such a file.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, Final, Literal

from memd_client.names import escape_name

Links = Literal["follow", "refuse"]
MAX_DEPTH: Final = 64  # nesting of JSON or TOML, and the parts of one dotted TOML key
BOM: Final = "\ufeff"
_OPEN: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_BLOCK: Final = 1 << 20


@dataclass(frozen=True)
class Unusable:
    """A file memd does not use: ``problem`` says what is wrong with it, ``fix`` what to do."""

    path: str
    problem: str
    fix: str

    def message(self) -> str:
        return f"{escape_name(self.path)} {self.problem}; {self.fix}"

    def __str__(self) -> str:
        return self.message()


class UnusableFile(ValueError):
    """An :class:`Unusable` file where the caller cannot go on without it (an installer)."""

    def __init__(self, unusable: Unusable) -> None:
        super().__init__(unusable.message())
        self.unusable = unusable


def read_bytes(path: str | os.PathLike[str], cap: int, *, links: Links) -> bytes | Unusable | None:
    """At most ``cap`` bytes: the whole regular file ``path``; ``None`` when there is none."""
    name = os.fspath(path)
    flags = _OPEN if links == "follow" else _OPEN | os.O_NOFOLLOW
    try:
        fd = os.open(name, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return _open_failed(name, exc, links)
    except ValueError:
        return Unusable(name, "has a NUL byte in its name", "rename it")
    try:
        return read_fd(name, fd, cap)
    except OSError as exc:
        return Unusable(name, f"cannot be read ({_why(exc)})", "check the disk, then retry")
    finally:
        os.close(fd)


def read_fd(name: str, fd: int, cap: int) -> bytes | Unusable:
    """The bytes of the open file ``fd`` (named ``name``) if it is a regular file of at most
    ``cap`` bytes (``fstat``, then ``cap + 1`` asked for). Raises ``OSError`` as ``read``."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        what = f"is {kind_of(info.st_mode)}, not a regular file"
        return Unusable(name, what, "replace it with a file, or remove it")
    if info.st_size > cap:
        return _too_large(name, cap)
    parts: list[bytes] = []
    left = cap + 1
    while left > 0:
        block = os.read(fd, min(left, _BLOCK))
        if not block:
            break
        parts.append(block)
        left -= len(block)
    if left <= 0:
        return _too_large(name, cap)
    return b"".join(parts)


def _open_failed(name: str, exc: OSError, links: Links) -> Unusable:
    try:  # what it is, said plainly (opening a socket fails with "no such device")
        mode = os.stat(name, follow_symlinks=links == "follow").st_mode
    except OSError:
        mode = stat.S_IFREG
    if not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
        what = f"is {kind_of(mode)}, not a regular file"
        return Unusable(name, what, "replace it with a file, or remove it")
    if exc.errno == errno.ELOOP:
        return Unusable(
            name,
            "is a symbolic link, which memd does not follow here",
            "replace the link with the file it names",
        )
    if isinstance(exc, PermissionError):
        return Unusable(name, "cannot be read (permission denied)", "let your user read it")
    return Unusable(name, f"cannot be opened ({_why(exc)})", "check the file, then retry")


def _too_large(name: str, cap: int) -> Unusable:
    return Unusable(
        name,
        f"is larger than {cap:,} bytes, more than memd reads of it",
        "shrink it (look at what wrote it), or remove it",
    )


def _why(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def kind_of(mode: int) -> str:
    """What a ``st_mode`` other than a regular file's or a link's describes, in words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


# ---------------------------------------------------------------------------------------------
# Text


def decode_text(data: bytes, *, nul: bool = False) -> str:
    """``data`` as UTF-8 text, a leading byte order mark dropped. Raises ``ValueError``
    naming the offset of the first byte that is not UTF-8, or of a NUL unless ``nul``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start
        raise ValueError(f"is not UTF-8 text (byte 0x{data[at]:02x} at offset {at})") from None
    if not nul and "\x00" in text:
        raise ValueError(f"holds a NUL byte (at offset {data.index(0)})")
    return text.removeprefix(BOM)


def read_text(
    path: str | os.PathLike[str], cap: int, *, links: Links, nul: bool = False
) -> str | Unusable | None:
    """:func:`read_bytes` as UTF-8 text (see :func:`decode_text`)."""
    data = read_bytes(path, cap, links=links)
    if not isinstance(data, bytes):
        return data
    try:
        return decode_text(data, nul=nul)
    except ValueError as exc:
        return Unusable(os.fspath(path), str(exc), "save it as UTF-8 text")


def read_name(path: str | os.PathLike[str], cap: int, *, links: Links) -> str | Unusable | None:
    """:func:`read_bytes` of a file that holds a path (git's ``commondir``, Gemini's
    ``.project_root``): a name is bytes, so a byte that is not UTF-8 is kept as
    ``os.fsdecode`` keeps it; a NUL byte, which no path holds, is a problem."""
    data = read_bytes(path, cap, links=links)
    if isinstance(data, Unusable) and not data.problem.endswith("(permission denied)"):
        return Unusable(data.path, data.problem, _NAME_FIX)
    if not isinstance(data, bytes):
        return data
    if b"\x00" in data:
        where = data.index(0)
        return Unusable(os.fspath(path), f"holds a NUL byte (at offset {where})", _NAME_FIX)
    return os.fsdecode(data)


_NAME_FIX: Final = "it should hold one path: repair it (git: `git worktree repair`), or remove it"


def read_json_object(
    path: str | os.PathLike[str], cap: int, *, links: Links, depth: int = MAX_DEPTH
) -> dict[str, Any] | Unusable | None:
    """:func:`read_bytes` decoded as a JSON object (see :func:`decode_json_object`)."""
    found: dict[str, Any] | Unusable | None
    found = _read_decoded(path, cap, links, lambda text: decode_json_object(text, depth), "JSON")
    return found


def read_toml(
    path: str | os.PathLike[str], cap: int, *, links: Links, depth: int = MAX_DEPTH
) -> dict[str, Any] | Unusable | None:
    """:func:`read_bytes` decoded as TOML (see :func:`decode_toml`)."""
    found: dict[str, Any] | Unusable | None
    found = _read_decoded(path, cap, links, lambda text: decode_toml(text, depth), "TOML")
    return found


def _read_decoded(
    path: str | os.PathLike[str], cap: int, links: Links, decode: Any, kind: str
) -> Any:
    data = read_bytes(path, cap, links=links)
    if not isinstance(data, bytes):
        return data
    try:
        return decode(decode_text(data, nul=True))
    except ValueError as exc:
        fix = f"repair it (it must be {kind}), or move it away"
        return Unusable(os.fspath(path), str(exc), fix)


# ---------------------------------------------------------------------------------------------
# JSON


def decode_json(text: str, depth: int = MAX_DEPTH) -> Any:
    """``text`` decoded as JSON, once its nesting is known to be at most ``depth``. Raises
    ``ValueError`` saying what is wrong in a few words: nested too deep, not JSON (with the
    line and column), ``NaN``/``Infinity`` or a number past a float's range."""
    nesting = json_bracket_depth(text.encode("utf-8", "surrogatepass"))
    if nesting > depth:
        raise ValueError(f"nests deeper than {depth} levels ({nesting})")
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise ValueError(f"is not valid JSON ({exc.msg}: {where})") from None
    except RecursionError:  # judged above; a guard for a limit set lower than ``depth``
        raise ValueError(f"nests deeper than {depth} levels") from None
    except ValueError as exc:  # ours below, or an integer of more digits than Python takes
        raise ValueError(f"is not valid JSON ({exc})") from None


def decode_json_object(text: str, depth: int = MAX_DEPTH) -> dict[str, Any]:
    """:func:`decode_json`, and an object (an empty or blank text is ``{}``)."""
    if not text.strip():
        return {}
    value = decode_json(text, depth)
    if not isinstance(value, dict):
        raise ValueError(f"holds a JSON {_JSON_KINDS.get(type(value), 'value')}, not an object")
    return value


_JSON_KINDS: Final[dict[type, str]] = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "true or false",
    type(None): "null",
}


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is past a float's range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def json_bracket_depth(raw: bytes) -> int:
    """The nesting of JSON judged on its bytes: strings taken out, then the running depth of
    the brackets left. For text that is not valid JSON it is at least the depth a decoder
    reaches before it stops (it stops at the first byte a valid prefix cannot continue with,
    and up to there the two agree)."""
    return _depth(_outside_strings(raw).translate(None, _NOT_BRACKETS))


def _outside_strings(json_bytes: bytes) -> bytes:
    """The bytes of JSON that are not inside a string: escaped backslashes and quotes out
    first, so every quote left opens or closes a string (C-speed passes, no regex)."""
    if b"\\" in json_bytes:
        json_bytes = json_bytes.replace(b"\\\\", b"")
    parts = json_bytes.replace(b'\\"', b"").split(b'"')
    return b"".join(parts[0::2])


_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_STEP: Final = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def _depth(brackets: bytes) -> int:
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def nesting_over(value: Any, limit: int) -> bool:
    """Whether decoded JSON or TOML nests its lists and objects deeper than ``limit``
    (level by level, no recursion)."""
    level: list[Any] = [value] if isinstance(value, list | dict) else []
    depth = 0
    while level and depth <= limit:
        depth += 1
        inner: list[Any] = []
        for container in level:
            items = container.values() if isinstance(container, dict) else container
            inner += [item for item in items if isinstance(item, list | dict)]
        level = inner
    return depth > limit


# ---------------------------------------------------------------------------------------------
# TOML

# Strings and comments, leftmost first: what is inside them is no structure. An unterminated
# string runs to the end of its line (or of the text): the decoder stops there anyway.
_TOML_OPAQUE: Final = re.compile(
    r'"""(?:[^"\\]|\\.|"(?!""))*(?:"""|\Z)"{0,2}'
    r"|'''(?:[^']|'(?!''))*(?:'''|\Z)'{0,2}"
    r'|"(?:[^"\\\n]|\\[^\n])*(?:"|$)'
    r"|'[^'\n]*(?:'|$)"
    r"|#[^\n]*",
    re.DOTALL | re.MULTILINE,
)
# A dotted key (or a float, or a time's seconds: one dot each) once strings are one letter.
_TOML_DOTTED: Final = re.compile(r"[\w-]+(?:[ \t]*\.[ \t]*[\w-]+)+")


def toml_shape(text: str) -> tuple[int, int]:
    """(bracket nesting, most parts of a dotted key) of TOML ``text``, judged on the text
    with its strings and comments taken out: at least what tomllib or tomlkit meet."""
    plain = _TOML_OPAQUE.sub(lambda m: "" if m.group().startswith("#") else "s", text)
    brackets = plain.encode().translate(None, _NOT_BRACKETS)
    parts = max((m.group().count(".") + 1 for m in _TOML_DOTTED.finditer(plain)), default=1)
    return _depth(brackets), parts


def check_toml(text: str, depth: int = MAX_DEPTH) -> None:
    """Raise ``ValueError`` when TOML ``text`` nests deeper than ``depth`` or spells a key
    in more than ``depth`` parts (before any parser sees it)."""
    nesting, parts = toml_shape(text)
    if nesting > depth:
        raise ValueError(f"nests deeper than {depth} levels ({nesting})")
    if parts > depth:
        raise ValueError(f"has a dotted key of more than {depth} parts ({parts})")


def decode_toml(text: str, depth: int = MAX_DEPTH) -> dict[str, Any]:
    """``text`` decoded as TOML once :func:`check_toml` passed; the tables a chain of
    nested dotted keys builds are counted too. Raises ``ValueError`` saying what is wrong."""
    check_toml(text, depth)
    try:
        value = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"is not valid TOML ({exc})") from None
    except RecursionError:
        raise ValueError(f"nests deeper than {depth} levels") from None
    if nesting_over(value, depth):
        raise ValueError(f"nests deeper than {depth} levels")
    return value


def config_path(path: Path) -> Path:
    """Where the user's config file ``path`` really is: a link (a dotfiles repository's
    usual layout) is resolved, so an edit goes to the file it names and the link stays."""
    return Path(os.path.realpath(path))
