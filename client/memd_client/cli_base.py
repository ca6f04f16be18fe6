"""What every ``memdctl`` command shares: the parser, the registrar, the context, exit codes.

A command is a function ``run(ctx: Ctx) -> int`` added with :meth:`Registrar.add`. The
options every command takes (``--json``, ``--socket``, ``--timeout``) are accepted before and
after the command name: the top-level parser holds their defaults, and each subcommand's copy
has ``argparse.SUPPRESS`` as its default, so a copy only sets a value the user typed after the
command and never overwrites one typed before it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from memd_client.client import Client
from memd_client.names import encodable, escape_surrogates
from memd_client.textfmt import Style

EXIT_OK, EXIT_REMOTE, EXIT_USAGE, EXIT_DOWN, EXIT_NOT_FOUND = 0, 1, 2, 3, 4
EXIT_PIPE = 141  # 128 + SIGPIPE, what a shell reports for any tool whose reader went away
DEFAULT_TIMEOUT_S = 10.0


class MemdctlParser(argparse.ArgumentParser):
    """An argparse parser that takes ``-home-user-proj`` (a Claude Code project folder, or any
    value with a leading dash) as a value instead of an unknown option.

    memdctl has no short option that takes a value and no bundled short flags, so a token of
    one dash and more than one letter that is not an option of this parser is a value.
    """

    def _parse_optional(self, arg_string: str) -> Any:
        if (
            len(arg_string) > 2
            and arg_string[0] == "-"
            and arg_string[1] != "-"
            and arg_string not in self._option_string_actions
        ):
            return None
        return super()._parse_optional(arg_string)


class CliFailure(Exception):
    """A command's failure: the message for people, the exit code, and data for ``--json``."""

    def __init__(
        self, message: str, code: int = EXIT_REMOTE, kind: str = "failed", **data: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = code
        self.kind = kind  # the ``code`` of the JSON error
        self.data = data


Run = Callable[["Ctx"], int]


def bounded(
    kind: type[int] | type[float], low: float, high: float, what: str
) -> Callable[[str], float]:
    """An argparse ``type`` for a number from ``low`` (exclusive for floats, inclusive for
    whole numbers) to ``high``: a negative timeout or window is a usage error, not a wait."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        too_low = value <= low if kind is float else value < low
        if too_low or value > high or value != value:  # NaN is never in range
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: {what}")
        return value

    return parse


SECONDS = bounded(float, 0.0, 7 * 86400.0, "a number of seconds above 0 (at most a week)")
COUNT = bounded(int, 0, 10**9, "a whole number from 0 (no limit) up")
TOKENS = bounded(int, 1, 10**9, "a whole number of tokens from 1 up")


def add_common_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--json``, ``--socket``, ``--timeout``: real defaults on top, SUPPRESS on copies."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument(
        "--json", action="store_true", default=default(False), help="print JSON instead of text"
    )
    parser.add_argument(
        "--socket",
        metavar="PATH",
        default=default(None),
        help="daemon socket (default: $MEMD_SOCKET or the standard path)",
    )
    parser.add_argument(
        "--timeout",
        type=SECONDS,
        metavar="S",
        default=default(None),
        help="seconds to wait for the daemon (default 10; extract and compact wait longer)",
    )


@dataclass
class Registrar:
    """Adds subcommands to ``memdctl``; modules of other features get one in :func:`cli.main`."""

    sub: Any  # argparse._SubParsersAction, private in typeshed

    def add(
        self, name: str, run: Run, help_text: str, *, timeout: float | None = None
    ) -> argparse.ArgumentParser:
        """A subcommand ``name`` running ``run``; ``timeout`` is its default daemon timeout."""
        parser: argparse.ArgumentParser = self.sub.add_parser(
            name, help=help_text, description=help_text
        )
        add_common_options(parser, top=False)
        parser.set_defaults(run=run, default_timeout=timeout or DEFAULT_TIMEOUT_S)
        return parser


@dataclass
class Ctx:
    """One command's invocation: its arguments, the output streams and a lazy daemon client."""

    args: argparse.Namespace
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    _client: Client | None = None

    @property
    def json(self) -> bool:
        return bool(self.args.json)

    @property
    def timeout(self) -> float:
        return float(self.args.timeout or self.args.default_timeout)

    def client(self, timeout: float | None = None) -> Client:
        """The daemon client (connected on its first call), closed when the command ends."""
        if self._client is None:
            path = Path(self.args.socket) if self.args.socket else None
            self._client = Client(path, timeout=self.timeout)
        if timeout is not None and not self.args.timeout:
            self._client.timeout = timeout
        return self._client

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.client().call(method, params or {})

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def emit(self, data: Any, render: Callable[[Any], str]) -> int:
        """Print ``data`` as JSON or through ``render``; the exit code is 0."""
        if self.json:
            self.print(json.dumps(encodable(data), indent=2, sort_keys=True, default=str))
        else:
            self.print(render(data))
        return EXIT_OK

    def print(self, text: str) -> None:
        """``text`` on stdout; a local path that is not UTF-8 shown escaped, as memd shows
        names (memd_client.names), never as raw bytes."""
        print(escape_surrogates(text), file=self.out)

    def warn(self, text: str) -> None:
        print(f"memdctl: {escape_surrogates(text)}", file=self.err)

    def style(self) -> Style:
        return Style(use_colour(self.out, self.env))

    @property
    def interactive(self) -> bool:
        """Progress is drawn only for a person watching stderr, never into a pipe."""
        return not self.json and _isatty(self.err)

    @contextmanager
    def progress(self, label: str) -> Iterator[None]:
        from memd_client.progress import Spinner

        if not self.interactive:
            yield
            return
        with Spinner(self.err, label):
            yield


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def use_colour(stream: TextIO, env: dict[str, str]) -> bool:
    """Colour only on a terminal, never with ``NO_COLOR`` set (https://no-color.org)."""
    return _isatty(stream) and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


def run_memd_module(argv: list[str], what: str, install: str) -> int:
    """Run ``python -m <memd module>`` (``argv``, with this interpreter) for a command whose
    work lives in the ``memd`` package (``memd_client`` stays msgpack-only), relaying its
    output; its exit code when it is one of memdctl's (0, 1, 2), else 1. Without memd in
    this interpreter, says so: ``what`` needs it, ``install`` is how to get it."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    sys.stdout.write(done.stdout)
    if "No module named memd" in done.stderr:
        print(
            f"memdctl: {what} needs the memd package in {sys.executable}; install memd "
            f"there{install}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    sys.stderr.write(done.stderr)
    return done.returncode if done.returncode in (EXIT_OK, EXIT_REMOTE, EXIT_USAGE) else EXIT_REMOTE
