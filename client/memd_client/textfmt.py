"""Pure text helpers for memdctl's output: tables, relative times, figures with units, colour."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

RESET = "\x1b[0m"
COLOURS = {"bad": "\x1b[31m", "warn": "\x1b[33m", "ok": "\x1b[32m", "dim": "\x1b[2m"}


@dataclass(frozen=True)
class Style:
    """Colour when ``colour`` is on (a terminal without ``NO_COLOR``), plain text otherwise."""

    colour: bool = False

    def paint(self, kind: str, text: str) -> str:
        return f"{COLOURS[kind]}{text}{RESET}" if self.colour and text else text

    def bad(self, text: str) -> str:
        return self.paint("bad", text)

    def warn(self, text: str) -> str:
        return self.paint("warn", text)

    def ok(self, text: str) -> str:
        return self.paint("ok", text)

    def dim(self, text: str) -> str:
        return self.paint("dim", text)


def tokens(n: int | float | None) -> str:
    """``12.3k tok``: token counts always carry their unit."""
    if n is None:
        return "-"
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M tok"
    return f"{n / 1000:.1f}k tok" if n >= 1000 else f"{int(n)} tok"


def tokens_bare(n: int | float | None) -> str:
    """``12.3k``: for a column whose header names the unit."""
    return tokens(n).removesuffix(" tok")


def size(n: int | float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def duration(seconds: float | None) -> str:
    """``42 s``, ``3 min``, ``2 h 5 min``, ``3 d``."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s // 60:.0f} min"
    if s < 86400:
        h, m = divmod(int(s) // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    return f"{s / 86400:.0f} d"


def to_epoch(when: float | str | None) -> float | None:
    """A timestamp as the daemon sends it (epoch seconds or ISO 8601) as epoch seconds."""
    if when is None or when == "":
        return None
    if isinstance(when, int | float):
        return float(when) if when > 0 else None
    try:
        return datetime.fromisoformat(str(when).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def ago(when: float | str | None, now: float | None = None) -> str:
    """``3 min ago``, ``in 20 s`` for the future, ``-`` for never."""
    at = to_epoch(when)
    if at is None:
        return "-"
    delta = (time.time() if now is None else now) - at
    if -1.0 < delta < 1.0:
        return "just now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(-delta)}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """Columns padded to their widest cell; the columns in ``right`` aligned right; the last
    column is not padded (no trailing blanks)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            if i == len(cells) - 1 and i not in right:
                out.append(cell)
            elif i in right:
                out.append(cell.rjust(widths[i]))
            else:
                out.append(cell.ljust(widths[i]))
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def unique_prefixes(ids: Sequence[str], minimum: int = 8) -> dict[str, str]:
    """The shortest prefix of each id (at least ``minimum`` characters) that no other id in
    ``ids`` shares, so every short id shown can be typed back."""
    out: dict[str, str] = {}
    ordered = sorted(set(ids))
    for i, ident in enumerate(ordered):
        need = minimum
        for other in (
            ordered[i - 1] if i else None,
            ordered[i + 1] if i + 1 < len(ordered) else None,
        ):
            if other is not None:
                common = 0
                for a, b in zip(ident, other, strict=False):
                    if a != b:
                        break
                    common += 1
                need = max(need, common + 1)
        out[ident] = ident[:need]
    return out


def bar(value: float, limit: float, width: int, marks: Sequence[float] = ()) -> str:
    """``[#####.....|...]``: ``value`` of ``limit`` in ``width`` cells; ``marks`` (e.g. the
    notes trigger) drawn as ``|`` where they fall."""
    if width <= 0:
        return ""
    filled = 0 if limit <= 0 else min(width, round(width * value / limit))
    cells = ["#"] * filled + ["."] * (width - filled)
    for mark in marks:
        if 0 < mark < limit:
            cells[min(width - 1, int(width * mark / limit))] = "|"
    return "[" + "".join(cells) + "]"
