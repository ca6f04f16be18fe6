"""Reading an agent's config file that memd edits or checks (``settings.json``,
``hooks.json``, Codex's ``config.toml``, ``~/.claude.json``), for the installers and
``doctor``, through the one door (:mod:`memd_client.foreign_file`).

It is the user's own file and often a link into a dotfiles repository: a link is followed,
and every installer edits the file it names (:func:`config_path`), so the link stays. The
rest is as for any other tool's file: the open never blocks, only a regular file is read, no
more than :data:`MAX_CONFIG_BYTES`, as UTF-8 (a byte order mark is kept aside to be written
back), and its nesting is judged before a decoder (or tomlkit) sees it. A file that fails
any of this raises :class:`~memd_client.foreign_file.UnusableFile`, a ``ValueError`` whose
one line names the file, what is wrong and the fix; the installers then write nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memd_client import foreign_file
from memd_client.foreign_file import BOM, Unusable, UnusableFile, config_path

MAX_CONFIG_BYTES = 8 * 1024 * 1024
__all__ = ["MAX_CONFIG_BYTES", "config_path"]


def read_config_bytes(path: Path) -> bytes:
    """The bytes of the config file ``path`` (links followed). Raises ``FileNotFoundError``
    when there is none, :class:`UnusableFile` when it cannot be used."""
    found = foreign_file.read_bytes(path, MAX_CONFIG_BYTES, links="follow")
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", str(path))
    if isinstance(found, Unusable):
        raise UnusableFile(found)
    return found


def config_text(path: Path, data: bytes) -> str:
    """``data`` (the bytes of ``path``) as text, a leading byte order mark dropped; line ends
    as they are. Raises :class:`UnusableFile` for bytes that are not UTF-8."""
    try:
        return foreign_file.decode_text(data, nul=True)
    except ValueError as exc:
        raise UnusableFile(Unusable(str(path), str(exc), "save it as UTF-8 text")) from None


def read_config_text(path: Path) -> str:
    """:func:`read_config_bytes` as text (:func:`config_text`)."""
    return config_text(path, read_config_bytes(path))


def has_bom(data: bytes) -> bool:
    return data.startswith(BOM.encode())


def with_bom(text: str, bom: bool) -> bytes:
    """``text`` as the bytes to write, with the byte order mark the file had."""
    return ((BOM if bom else "") + text).encode("utf-8")


def parse_json(path: Path, text: str) -> dict[str, Any]:
    """The object of a JSON config's text (blank: ``{}``). Raises :class:`UnusableFile`
    naming ``path`` when it is not a JSON object, nests too deep, or holds what would not
    survive being written back (``NaN``, a number past a float's range)."""
    try:
        return foreign_file.decode_json_object(text)
    except ValueError as exc:
        raise _unusable(path, exc, "JSON") from None


def check_toml(path: Path, text: str) -> None:
    """Raise :class:`UnusableFile` naming ``path`` when its TOML nests too deep or spells a
    key in too many parts (before tomllib or tomlkit, which recurse and are quadratic in a
    key's parts, see it)."""
    try:
        foreign_file.check_toml(text)
    except ValueError as exc:
        raise _unusable(path, exc, "TOML") from None


def parse_toml(path: Path, text: str) -> dict[str, Any]:
    """The data of a TOML config's text. Raises :class:`UnusableFile` naming ``path``."""
    try:
        return foreign_file.decode_toml(text)
    except ValueError as exc:
        raise _unusable(path, exc, "TOML") from None


def _unusable(path: Path, exc: ValueError, kind: str) -> UnusableFile:
    fix = f"fix it (it must be {kind}), or move it away; memd changes nothing until then"
    return UnusableFile(Unusable(str(path), str(exc), fix))
