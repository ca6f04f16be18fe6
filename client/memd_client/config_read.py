"""Reading an agent's config file that memd edits or checks (``settings.json``,
``hooks.json``, Codex's ``config.toml``), for ``install-hooks`` and ``doctor``.

It is the user's own file and often a link into a dotfiles repository, so links are followed;
but the agent (and whatever it runs) can write its folder, so the open never blocks (a FIFO
planted there would hold the command forever), anything but a regular file is refused before
a byte is read, and no more than :data:`MAX_CONFIG_BYTES` are read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_CONFIG_BYTES = 8 * 1024 * 1024
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def read_config_bytes(path: Path) -> bytes:
    """The bytes of the config file ``path`` (links followed).

    Raises ``FileNotFoundError`` when there is none, ``ValueError`` naming the file when it
    is not a regular file or is larger than :data:`MAX_CONFIG_BYTES`, ``OSError`` as
    ``open`` does."""
    fd = os.open(path, _FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file; replace it with one (or remove it)")
        chunks: list[bytes] = []
        left = MAX_CONFIG_BYTES + 1
        while left > 0:
            block = os.read(fd, min(left, 1 << 20))
            if not block:
                break
            chunks.append(block)
            left -= len(block)
    finally:
        os.close(fd)
    if left <= 0:
        raise ValueError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes; memd does not edit it")
    return b"".join(chunks)


def read_config_text(path: Path, errors: str = "strict") -> str:
    """The UTF-8 text of the config file ``path``, line ends read as ``open`` in text mode
    reads them (``\\r\\n`` and ``\\r`` as ``\\n``). Raises as :func:`read_config_bytes`, and
    ``UnicodeDecodeError`` (a ``ValueError``) for bytes that are not UTF-8 unless ``errors``
    replaces them."""
    text = read_config_bytes(path).decode("utf-8", errors)
    return text.replace("\r\n", "\n").replace("\r", "\n")
