"""The read-only shell (R-A3): a pure command classifier and a runner that never uses a shell.

:func:`parse_command` turns a command line into a :class:`Pipeline` of argument vectors, or a
:class:`~memd.agent.decision.Deny` that says what the shell accepts. It is pure: the text is
scanned for shell syntax first (anything a shell would treat specially outside quotes is
refused: redirection, substitution, variables, globs, command lists, background jobs), then
each ``|``-separated part is split with :mod:`shlex` and checked against the program table in
:mod:`memd.agent.programs`. Every file a command would read is listed in :attr:`Command.reads`
so the caller can check it against the policy before anything runs.

Unquoted glob characters are refused rather than expanded: expansion would be a second way to
name paths, and the Glob tool and ``find -name '…'`` already cover the need.

:func:`run_readonly` executes a parsed pipeline with ``subprocess`` pipes, a minimal
environment, stdin closed, every process in its own process group, an output cap and a wall
time limit that kills the groups (see :mod:`memd.agent.process`). It runs in the folder it is
given: the Shell tool gives it a private copy of the areas (:mod:`memd.agent.mirror`), never
an area others can write.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from memd.agent.decision import Allow, Deny
from memd.agent.process import (
    SAFE_PATH,
    ShellLimits,
    ShellOutcome,
    run_pipeline,
    shell_environment,
)
from memd.agent.programs import (
    FIND_NO_ARG,
    FIND_ONE_ARG,
    FIND_PATH_ARG,
    FIND_REFUSED,
    GIT_REFUSED_LONG,
    GIT_REFUSED_SHORT,
    GIT_SUBCOMMANDS,
    PROGRAMS,
    REFUSED_PROGRAMS,
    ProgramSpec,
    hardened_argv,
    program_names,
)
from memd.agent.vcs import git_environment, git_repository


@dataclass(frozen=True)
class PathRead:
    """A path a command reads, as written (relative paths are relative to its cwd)."""

    path: str
    files_only: bool = False  # a directory here would make the program follow links inside


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    reads: tuple[PathRead, ...]


@dataclass(frozen=True)
class Pipeline:
    commands: tuple[Command, ...]

    @property
    def reads(self) -> tuple[PathRead, ...]:
        return tuple(read for command in self.commands for read in command.reads)


DEFAULT_LIMITS = ShellLimits()

_UNQUOTED_REASONS = {
    ";": "`;` (command lists)",
    "&": "`&`, `&&` and `&>` (background jobs, command lists, redirection)",
    "<": "redirection from files and here-documents (`<`, `<<`)",
    ">": "redirection to files (`>`, `>>`, `2>`)",
    "`": "command substitution (backticks)",
    "$": "variables and substitution (`$…`)",
    "(": "subshells and process substitution (`(…)`, `<(…)`)",
    ")": "subshells and process substitution (`(…)`, `<(…)`)",
    "{": "brace expansion (`{a,b}`)",
    "}": "brace expansion (`{a,b}`)",
    "\n": "more than one line",
    "\r": "more than one line",
    "*": "unquoted glob characters (quote them, or use the Glob tool or find -name '…')",
    "?": "unquoted glob characters (quote them, or use the Glob tool or find -name '…')",
    "[": "unquoted glob characters (quote them, or use the Glob tool or find -name '…')",
}
_WORD_START_REASONS = {
    "~": "`~` expansion (write the full path)",
    "#": "comments (`#`)",
}
_SED_SCRIPT = re.compile(r"\s*(?:(?:\d+|\$)(?:\s*,\s*(?:\d+|\$))?)?\s*[pq]\s*")


def refusal(what: str) -> Deny:
    """A denial naming the refused construct and what the shell does accept."""
    return Deny(
        f"denied: the read-only shell does not allow {what}. It runs one program, or a "
        f"pipeline (a | b), from: {', '.join(program_names())}; with read-only options and "
        "quoted arguments, without redirection, substitution, variables or globs"
    )


def classify(command: str) -> Allow | Deny:
    """``Allow`` if ``command`` is a read-only command this shell runs, else why not."""
    parsed = parse_command(command)
    return parsed if isinstance(parsed, Deny) else Allow()


def parse_command(command: str) -> Pipeline | Deny:
    """Parse ``command`` into argument vectors and the paths they read, or refuse it."""
    if "\0" in command:
        return refusal("a NUL character")
    try:
        os.fsencode(command)
    except UnicodeEncodeError:
        return refusal("a character no argument can hold (a lone surrogate)")
    segments = split_pipeline(command)
    if isinstance(segments, Deny):
        return segments
    commands: list[Command] = []
    for segment in segments:
        try:
            argv = tuple(shlex.split(segment, comments=False, posix=True))
        except ValueError as exc:
            return refusal(f"this quoting ({exc})")
        parsed = parse_argv(argv)
        if isinstance(parsed, Deny):
            return parsed
        commands.append(parsed)
    return Pipeline(tuple(commands))


def split_pipeline(command: str) -> list[str] | Deny:
    """Split at unquoted ``|``; refuse every other piece of shell syntax outside quotes."""
    segments: list[str] = []
    start = 0
    quote = ""
    word_start = True
    i = 0
    while i < len(command):
        char = command[i]
        if quote:
            if char == quote:
                quote = ""
            elif quote == '"' and char in "$`":
                return refusal(_UNQUOTED_REASONS[char] + " inside double quotes")
            elif quote == '"' and char == "\\":
                i += 1
        elif char == "|":
            if command[i + 1 : i + 2] in ("|", "&"):
                return refusal("`||` and `|&`")
            segments.append(command[start:i])
            start = i + 1
        elif problem := _unquoted_problem(command, i, word_start):
            return refusal(problem)
        elif char in "'\"":
            quote = char
        elif char == "\\":
            i += 1
        word_start = not quote and (char.isspace() or char == "|")
        i += 1
    if quote:
        return refusal("an unterminated quote")
    segments.append(command[start:])
    if any(not segment.strip() for segment in segments):
        return refusal("an empty command")
    return segments


def _unquoted_problem(command: str, i: int, word_start: bool) -> str | None:
    char = command[i]
    if char == "\\":
        following = command[i + 1 : i + 2]
        if following in ("", "\n", "\r"):
            return "a trailing backslash or line continuation"
        return None
    if char in _UNQUOTED_REASONS:
        return _UNQUOTED_REASONS[char]
    if word_start and char in _WORD_START_REASONS:
        return _WORD_START_REASONS[char]
    return None


def parse_argv(argv: tuple[str, ...]) -> Command | Deny:
    """Check one program invocation and list the paths it reads."""
    if not argv:
        return refusal("an empty command")
    program, args = argv[0], argv[1:]
    if "/" in program:
        return refusal(f"a program named by path ({program}); name it without a directory")
    if program in REFUSED_PROGRAMS:
        return refusal(f"`{program}`, because {REFUSED_PROGRAMS[program]}")
    match program:
        case "find":
            return _parse_find(argv)
        case "git":
            return _parse_git(argv)
        case _:
            spec = PROGRAMS.get(program)
            if spec is None:
                return refusal(f"`{program}`, which is not a known read-only program")
            return _parse_generic(program, spec, args)


@dataclass(frozen=True)
class _Args:
    options: tuple[tuple[str, str | None], ...]
    operands: tuple[str, ...]


def _parse_options(program: str, spec: ProgramSpec, args: tuple[str, ...]) -> _Args | Deny:
    options: list[tuple[str, str | None]] = []
    operands: list[str] = []
    rest = list(args)
    while rest:
        token = rest.pop(0)
        if token == "--":
            operands.extend(rest)
            break
        if token == "-" or not token.startswith("-"):
            operands.append(token)
        elif token.startswith("--"):
            name, eq, value = token.partition("=")
            if name in spec.valued and (eq or rest):
                options.append((name, value if eq else rest.pop(0)))
            elif name in spec.flags and not eq:
                options.append((name, None))
            else:
                return _option_refusal(program, spec, token)
        elif spec.numeric_count and token[1:].isdigit():
            options.append(("-n", token[1:]))
        else:
            problem = _parse_cluster(program, spec, token, rest, options)
            if problem is not None:
                return problem
    return _Args(tuple(options), tuple(operands))


def _parse_cluster(
    program: str,
    spec: ProgramSpec,
    token: str,
    rest: list[str],
    options: list[tuple[str, str | None]],
) -> Deny | None:
    for j in range(1, len(token)):
        option = "-" + token[j]
        if option in spec.flags:
            options.append((option, None))
        elif option in spec.valued and (token[j + 1 :] or rest):
            options.append((option, token[j + 1 :] or rest.pop(0)))
            return None
        else:
            return _option_refusal(program, spec, option)
    return None


def _option_refusal(program: str, spec: ProgramSpec, option: str) -> Deny:
    allowed = " ".join(sorted(spec.flags | spec.valued)) or "none"
    return Deny(
        f"denied: option {option} of {program} is not allowed in the read-only shell (it "
        f"writes, runs programs, follows links, or is not on the list). Options {program} "
        f"accepts here: {allowed}"
    )


def _parse_generic(program: str, spec: ProgramSpec, args: tuple[str, ...]) -> Command | Deny:
    parsed = _parse_options(program, spec, args)
    if isinstance(parsed, Deny):
        return parsed
    for _, value in parsed.options:
        for text, why in spec.refused_in_values:
            if value is not None and text in value.casefold():
                return refusal(f"{program} option values with {text.upper()!r} ({why})")
    given = {name for name, _ in parsed.options}
    operands = parsed.operands
    if spec.max_operands is not None and len(operands) > spec.max_operands:
        return refusal(f"more than {spec.max_operands} operand(s) for {program}")
    paths = _operand_paths(program, spec, operands, given, parsed.options)
    if isinstance(paths, Deny):
        return paths
    reads = [value for name, value in parsed.options if name in spec.path_valued and value]
    reads.extend(paths)
    if not paths and (spec.cwd_default or given & spec.cwd_when):
        reads.append(".")
    return Command((program, *args), tuple(PathRead(path, spec.files_only) for path in reads))


def _operand_paths(
    program: str,
    spec: ProgramSpec,
    operands: tuple[str, ...],
    given: set[str],
    options: tuple[tuple[str, str | None], ...],
) -> tuple[str, ...] | Deny:
    match spec.operands:
        case "paths":
            return operands
        case "pattern_paths":
            return operands if given & spec.pattern_opts else operands[1:]
        case "strings":
            return ()
        case "none":
            return refusal(f"operands for {program}") if operands else ()
        case "date":
            if any(not operand.startswith("+") for operand in operands):
                return refusal("date operands other than +FORMAT (they would set the clock)")
            return ()
        case "sed":
            scripts = [v or "" for name, v in options if name in spec.pattern_opts]
            if not scripts:
                scripts, operands = list(operands[:1]), operands[1:]
            if not scripts or not all(_safe_sed(script) for script in scripts):
                return refusal("sed scripts other than printing lines (sed -n '5,20p' FILE)")
            return operands


def _safe_sed(script: str) -> bool:
    parts = script.split(";")
    return all(_SED_SCRIPT.fullmatch(part) for part in parts if part.strip()) and any(
        part.strip() for part in parts
    )


def _parse_find(argv: tuple[str, ...]) -> Command | Deny:
    args = list(argv[1:])
    while args and args[0] == "-P":
        args.pop(0)
    roots: list[str] = []
    while args and not (args[0].startswith("-") or args[0] in ("(", ")", "!", ",")):
        roots.append(args.pop(0))
    reads = list(roots) or ["."]
    while args:
        token = args.pop(0)
        if token in FIND_REFUSED:
            return refusal(f"find {token}, because {FIND_REFUSED[token]}")
        if token in FIND_ONE_ARG:
            if not args:
                return refusal(f"find {token} without its argument")
            value = args.pop(0)
            if token in FIND_PATH_ARG:
                reads.append(value)
        elif token not in FIND_NO_ARG:
            return refusal(f"find expression {token!r} (not on the read-only list)")
    return Command(argv, tuple(PathRead(path) for path in reads))


def _parse_git(argv: tuple[str, ...]) -> Command | Deny:
    args = list(argv[1:])
    while args and args[0] == "--no-pager":
        args.pop(0)
    if not args or args[0].startswith("-"):
        return refusal(
            "git options before the subcommand (-c, -C, --git-dir …); run e.g. git log "
            "in the working directory"
        )
    subcommand = args.pop(0)
    if subcommand not in GIT_SUBCOMMANDS:
        return refusal(
            f"git {subcommand}; read-only git subcommands: {', '.join(sorted(GIT_SUBCOMMANDS))}"
        )
    operands: list[str] = []
    for index, token in enumerate(args):
        if token == "--":
            operands.extend(args[index + 1 :])
            break
        if "%G" in token:
            return refusal(f"git {subcommand} {token}, because %G formats run the gpg program")
        problem = _git_option_problem(subcommand, token)
        if problem is not None:
            return refusal(problem)
        if not token.startswith("-"):
            operands.append(token)
    # Operands may be paths (git diff A B even reads files outside any repository).
    reads = [".", *operands]
    return Command(argv, tuple(PathRead(path) for path in reads))


def _git_option_problem(subcommand: str, token: str) -> str | None:
    if token.startswith("--"):
        name = token.partition("=")[0]
        for refused, why in GIT_REFUSED_LONG.items():
            if len(name) > 2 and (refused.startswith(name) or name.startswith(refused)):
                return f"git {subcommand} {name}, because {why}"
        return None
    if token.startswith("-") and set(token[1:]) & GIT_REFUSED_SHORT.get(subcommand, set()):
        return f"git {subcommand} {token}, because it names a file to read or write"
    return None


async def run_readonly(
    command: str | Pipeline, *, cwd: Path, limits: ShellLimits = DEFAULT_LIMITS
) -> ShellOutcome | Deny:
    """Classify ``command`` (unless already parsed) and run it in ``cwd`` without a shell.

    Path checks against a policy are the caller's job (the Shell tool does them with
    :attr:`Pipeline.reads`); this function refuses anything :func:`parse_command` refuses.
    """
    pipeline = parse_command(command) if isinstance(command, str) else command
    if isinstance(pipeline, Deny):
        return pipeline
    env = await anyio.to_thread.run_sync(shell_environment, cwd)
    argvs: list[tuple[str, ...]] = []
    for item in pipeline.commands:
        argv = hardened_argv(item.argv)
        executable = shutil.which(argv[0], path=SAFE_PATH)
        if executable is None:
            return ShellOutcome(127, "", f"{argv[0]} is not installed here", False, False, limits)
        argvs.append((executable, *argv[1:]))
        if argv[0] == "git":
            repo = await anyio.to_thread.run_sync(git_repository, cwd, env, executable)
            if isinstance(repo, str):
                return refusal(f"git here: {repo}")
            env = git_environment(env, repo)
    return await run_pipeline(argvs, cwd=cwd, env=env, limits=limits)
