"""The read-only shell's program table: which programs exist and which of their options.

The list is an allow-list on purpose. A program is on it only when, with the options listed,
it reads and never writes, never runs another program, and never follows a symbolic link found
while walking a directory. Programs run over a private copy of the areas that holds no link at
all (:mod:`memd.agent.mirror`): the allow-list keeps them to what they are told to read, the
copy keeps what they can read to what the confined walk opened.
Options are allow-listed too, because GNU tools accept abbreviated long options (``--out``
means ``--output``): an option that is not spelled out here is refused, which closes that door.

Left out on purpose, with the reason the model is given:

* ``awk``, ``xargs``, ``env``, interpreters: they run programs or code (``awk``'s
  ``system()`` and pipes), or (``xargs``) take the paths they read from data, so those paths
  cannot be checked before the command runs;
* ``tee``, ``dd``, ``cp``, ``mv``, ``rm``, ``touch``, ``tar`` …: they write;
* ``tail -f``, ``less``: they wait for input that never comes (``less`` also runs
  ``LESSOPEN`` and reads ``~/.lesskey``).

``find`` and ``git`` have grammars of their own and are parsed in :mod:`memd.agent.shell`;
``sed`` is limited to printing line ranges (``sed -n 5,20p``).

What each program reads besides its operands (R-A6 audit)
---------------------------------------------------------
Every program runs with an environment built from nothing
(:func:`memd.agent.process.shell_environment`): ``PATH`` of system directories, the C.UTF-8
locale from the system's locale files, ``HOME``, every ``XDG_*`` directory and ``TMPDIR``
set to an empty read-only directory outside every writable area. No variable the daemon
has reaches it, so none of ``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ``LOCPATH``, ``GCONV_PATH``,
``NLSPATH``, ``GREP_OPTIONS``, ``GREP_COLORS``, ``LS_COLORS``, ``TZ``, ``POSIXLY_CORRECT``,
``MAGIC``, ``RIPGREP_CONFIG_PATH``, ``TREE_COLORS``, ``LESSOPEN``, ``SHELL`` or an API key
applies. Programs are found on that fixed ``PATH`` only; a program named by path is refused.
System files (``/etc/passwd``, ``/etc/localtime``, ``/usr/share/misc/magic``, locale data)
are not writable by the agent. Per program:

* ``ls``: ``/etc/passwd`` and ``/etc/group`` for ``-l`` names; ``LS_COLORS``,
  ``QUOTING_STYLE``, ``TIME_STYLE``, ``COLUMNS`` unset; ``--color``/``--hyperlink`` not
  allowed. Safe.
* ``cat``, ``head``, ``tail``, ``nl``, ``wc``, ``cut``, ``tr``, ``uniq``, ``echo``, ``pwd``,
  ``basename``, ``dirname``: operands (or stdin) and the locale only. ``uniq``'s second
  operand (an output file) is refused; ``tail -f``/``--pid``/``---presume-input-pipe`` are not
  allowed. Safe.
* ``stat``, ``realpath``, ``readlink``: metadata of the named paths (checked by the policy);
  ``realpath --relative-to/--relative-base`` values are checked as reads. Safe.
* ``file``: its magic database. ``MAGIC`` is unset, ``~/.magic`` and ``~/.magic.mgc`` are
  looked up in the empty home, ``-m`` (another database), ``-f`` (a list of names), ``-C``
  (compile: writes) and ``-z``/``-Z`` (decompressors) are not allowed. Safe.
* ``du``: metadata only; ``-X``/``--exclude-from`` and ``--files0-from`` (read a named file)
  are not allowed; ``BLOCK_SIZE`` variables unset. Safe.
* ``sort``: ``-o`` (output file), ``-T`` (temp dir), ``--compress-program`` (runs a
  program), ``--files0-from`` and ``--random-source`` (read a named file) are not allowed;
  its temporary files, if any, go to ``TMPDIR``, the empty read-only home. Safe.
* ``diff``: only two files (directories refused: ``-r`` is not allowed anyway);
  ``--from-file``/``--to-file``, ``-X``/``--exclude-from`` and ``-l`` (runs ``pr``) are not
  allowed. Safe.
* ``grep``: ``-f`` files are checked as reads; ``--exclude-from``, ``-R`` (follows links) and
  ``--color`` are not allowed; ``GREP_OPTIONS``/``GREP_COLORS`` unset. With ``-r`` it skips
  devices and FIFOs met while walking. Safe.
* ``rg`` (when installed): reads ``.gitignore``/``.ignore``/``.rgignore`` inside the area —
  ignore patterns, which only narrow what it searches there — and a global gitignore from
  git's config in the empty home (none). ``RIPGREP_CONFIG_PATH`` unset; ``--pre`` (runs a
  program), ``-z`` (decompressors), ``-L`` (follows links), ``--ignore-file`` not allowed;
  ``-f`` files are checked as reads. Safe.
* ``tree`` (when installed): ``-o``/``-R`` (write), ``--fromfile``, ``-l`` (follows links),
  ``--gitignore`` not allowed; ``TREE_COLORS``/``LS_COLORS`` unset. Safe.
* ``date``: ``-f`` (reads a file) and setting the clock are not allowed; ``TZ`` is unset
  (``/etc/localtime``), and a ``TZ="…"`` inside a ``-d`` string, which would read any zone
  file named there, is refused. Safe.
* ``sed``: only ``Np``/``q`` scripts, so no ``w``/``r``/``e`` command and no ``-i``. Safe.
* ``find``: ``-fprint*``/``-fls`` (write), ``-exec*``/``-ok*`` (run), ``-delete``,
  ``-L``/``-H``/``-follow`` (links) and ``-files0-from`` are refused; ``-newer`` and the like
  are checked as reads. Safe.
* ``git``: the most configurable of all; see :mod:`memd.agent.vcs`. It runs only on a
  repository the area has of its own, pinned by ``GIT_DIR``/``GIT_WORK_TREE``, with system,
  global and XDG config off, a checked repository config, and every program-running setting
  overridden in ``GIT_CONFIG_COUNT``. Options before the subcommand (``-c``,
  ``--config-env``, ``-C``, ``--git-dir``, ``--exec-path``) are refused, and so are
  ``--output``, ``--ext-diff``, ``--textconv``, ``--show-signature``, ``%G`` formats,
  ``--no-index``, ``--recurse-submodules`` and ``describe --dirty``.
* Refused outright: everything in :data:`REFUSED_PROGRAMS` (``awk`` for ``system()``,
  ``tar`` for ``--to-command`` and writing, ``less`` for ``LESSOPEN``, and so on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Operands = Literal["paths", "pattern_paths", "strings", "none", "date", "sed"]


def _opts(text: str) -> frozenset[str]:
    return frozenset(text.split())


@dataclass(frozen=True)
class ProgramSpec:
    """How one program's arguments are read.

    ``operands`` says what its non-option arguments are: files it reads (``paths``), a
    pattern followed by files (``pattern_paths``, unless a ``pattern_opts`` option supplied
    the pattern), plain strings, nothing, ``+FORMAT`` strings (``date``), or a sed script.
    """

    flags: frozenset[str] = frozenset()
    valued: frozenset[str] = frozenset()  # options that take a value
    path_valued: frozenset[str] = frozenset()  # valued options whose value is a file it reads
    operands: Operands = "paths"
    max_operands: int | None = None
    cwd_default: bool = False  # reads the working directory when no path is named
    cwd_when: frozenset[str] = frozenset()  # ... only when one of these options is given
    pattern_opts: frozenset[str] = frozenset()
    numeric_count: bool = False  # accepts ``-NUM`` (head -5)
    files_only: bool = False  # directory operands would make it follow links inside them
    # Text refused inside option values (casefolded), with the reason.
    refused_in_values: tuple[tuple[str, str], ...] = ()


_HEAD_TAIL = ProgramSpec(
    flags=_opts("-q -v -z --quiet --silent --verbose --zero-terminated"),
    valued=_opts("-n -c --lines --bytes"),
    numeric_count=True,
)

PROGRAMS: dict[str, ProgramSpec] = {
    "ls": ProgramSpec(
        flags=_opts(
            "-a -A -l -h -R -r -t -S -1 -d -F -p -i -s -n -g -o -G -U -X -v -c -u -C -m -x"
            " -Q -N -B --all --almost-all --human-readable --recursive --reverse --size"
            " --classify --directory --inode --numeric-uid-gid --no-group --full-time"
        ),
        valued=_opts("-I -w --ignore --sort --time-style --width"),
        cwd_default=True,
    ),
    "cat": ProgramSpec(
        flags=_opts(
            "-n -b -s -A -E -T -v -e -t -u --number --number-nonblank --squeeze-blank"
            " --show-all --show-ends --show-tabs --show-nonprinting"
        )
    ),
    "head": _HEAD_TAIL,
    "tail": _HEAD_TAIL,
    "nl": ProgramSpec(valued=_opts("-b -n -w -s -v -i -h -f -d")),
    "wc": ProgramSpec(
        flags=_opts("-l -w -c -m -L --lines --words --bytes --chars --max-line-length")
    ),
    "stat": ProgramSpec(
        flags=_opts("-L -t -f --dereference --terse --file-system"),
        valued=_opts("-c --format --printf"),
    ),
    "file": ProgramSpec(
        flags=_opts(
            "-b -i -k -L -h -E -N --brief --mime --mime-type --mime-encoding --keep-going"
            " --dereference --no-dereference"
        )
    ),
    "du": ProgramSpec(
        flags=_opts(
            "-s -h -a -c -b -k -m -x -S -l --summarize --human-readable --all --total"
            " --bytes --apparent-size --one-file-system --separate-dirs --count-links"
        ),
        valued=_opts("-d --max-depth --exclude"),
        cwd_default=True,
    ),
    "sort": ProgramSpec(
        flags=_opts(
            "-r -n -u -f -h -V -b -d -g -M -s -z -c -C --reverse --numeric-sort --unique"
            " --ignore-case --human-numeric-sort --version-sort --ignore-leading-blanks"
            " --dictionary-order --general-numeric-sort --month-sort --stable --check"
            " --zero-terminated"
        ),
        valued=_opts("-k -t --key --field-separator"),
    ),
    "uniq": ProgramSpec(
        # A second operand would be uniq's OUTPUT file.
        flags=_opts("-c -d -D -u -i -z --count --repeated --unique --ignore-case"),
        valued=_opts("-f -s -w --skip-fields --skip-chars --check-chars"),
        max_operands=1,
    ),
    "cut": ProgramSpec(
        flags=_opts("-s -z -n --only-delimited --complement --zero-terminated"),
        valued=_opts("-d -f -c -b --delimiter --fields --characters --bytes --output-delimiter"),
    ),
    "diff": ProgramSpec(
        flags=_opts(
            "-u -q -y -w -b -B -i -a -t -T -s -p --brief --side-by-side --ignore-all-space"
            " --ignore-space-change --ignore-blank-lines --ignore-case --text"
            " --report-identical-files --show-c-function --expand-tabs --initial-tab"
            " --strip-trailing-cr"
        ),
        valued=_opts("-U -W --label --width --unified"),
        max_operands=2,
        files_only=True,
    ),
    "grep": ProgramSpec(
        flags=_opts(
            "-i -v -n -c -l -L -h -H -r -w -x -E -F -G -P -o -s -q -a -I -b -z -Z"
            " --ignore-case --invert-match --line-number --count --files-with-matches"
            " --files-without-match --no-filename --with-filename --recursive"
            " --word-regexp --line-regexp --extended-regexp --fixed-strings --basic-regexp"
            " --perl-regexp --only-matching --no-messages --quiet --silent --text --null"
            " --null-data --byte-offset"
        ),
        valued=_opts(
            "-e -f -m -A -B -C --regexp --file --max-count --after-context"
            " --before-context --context --include --exclude --exclude-dir --label"
        ),
        path_valued=_opts("-f --file"),
        operands="pattern_paths",
        cwd_when=_opts("-r --recursive"),
        pattern_opts=_opts("-e -f --regexp --file"),
        numeric_count=True,
    ),
    "rg": ProgramSpec(
        flags=_opts(
            "-i -S -s -n -N -l -c -v -w -x -F -u -H -I -o -U -a --hidden --no-ignore"
            " --files --files-with-matches --count --ignore-case --smart-case"
            " --case-sensitive --line-number --no-line-number --invert-match --word-regexp"
            " --line-regexp --fixed-strings --no-heading --heading --with-filename"
            " --no-filename --only-matching --multiline --text --null"
        ),
        valued=_opts(
            "-e -f -g -t -T -m -A -B -C -d --regexp --file --glob --iglob --type"
            " --type-not --max-count --after-context --before-context --context"
            " --max-depth --sort --sortr --max-filesize"
        ),
        path_valued=_opts("-f --file"),
        operands="pattern_paths",
        cwd_default=True,
        pattern_opts=_opts("-e -f --regexp --file --files"),
    ),
    "tree": ProgramSpec(
        # Not -l (follows links), -o and -R (write files), --fromfile (reads a list).
        flags=_opts(
            "-a -d -f -i -s -h -D -F -n -p -u -g -Q -N -r -t -v -x -J -X --noreport --dirsfirst"
        ),
        valued=_opts("-L -I -P --filelimit"),
        cwd_default=True,
    ),
    "echo": ProgramSpec(flags=_opts("-n -e -E"), operands="strings"),
    "pwd": ProgramSpec(flags=_opts("-L -P"), operands="none"),
    "date": ProgramSpec(
        flags=_opts("-u -R --utc --universal --rfc-email"),
        valued=_opts("-d --date"),
        operands="date",
        refused_in_values=(("tz=", 'TZ="…" in a date string reads that zone file'),),
    ),
    "basename": ProgramSpec(
        flags=_opts("-a -z --multiple --zero"), valued=_opts("-s --suffix"), operands="strings"
    ),
    "dirname": ProgramSpec(flags=_opts("-z --zero"), operands="strings"),
    "realpath": ProgramSpec(
        flags=_opts(
            "-e -m -s -q -z -L -P --canonicalize-existing --canonicalize-missing"
            " --no-symlinks --quiet --strip --zero"
        ),
        valued=_opts("--relative-to --relative-base"),
        path_valued=_opts("--relative-to --relative-base"),
    ),
    "readlink": ProgramSpec(flags=_opts("-f -e -m -n -q -s -v -z")),
    "tr": ProgramSpec(
        flags=_opts("-d -s -c -C -t --delete --squeeze-repeats --complement --truncate-set1"),
        operands="strings",
    ),
    "sed": ProgramSpec(
        flags=_opts("-n -E -r -s -z -u --quiet --silent --regexp-extended --separate"),
        valued=_opts("-e --expression"),
        operands="sed",
        pattern_opts=_opts("-e --expression"),
    ),
}

# Parsed by hand in memd.agent.shell; listed here so the program list in messages is complete.
SPECIAL_PROGRAMS = ("find", "git")

FIND_NO_ARG = _opts(
    "-print -print0 -ls -empty -prune -quit -true -false -not -a -and -o -or -depth -xdev"
    " -mount -noleaf -readable -executable -writable -nouser -nogroup ( ) ! ,"
)
FIND_ONE_ARG = _opts(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -regextype -type -xtype"
    " -maxdepth -mindepth -size -mtime -mmin -atime -amin -ctime -cmin -perm -user -group"
    " -uid -gid -links -inum -printf -lname -ilname -used -newer -anewer -cnewer -samefile"
)
FIND_PATH_ARG = _opts("-newer -anewer -cnewer -samefile")
FIND_REFUSED: dict[str, str] = {
    **dict.fromkeys(_opts("-delete"), "it deletes files"),
    **dict.fromkeys(_opts("-exec -execdir -ok -okdir"), "it runs other programs"),
    **dict.fromkeys(_opts("-fprint -fprint0 -fprintf -fls"), "it writes to a file"),
    **dict.fromkeys(_opts("-follow -L -H"), "it follows symbolic links out of the tree"),
}

GIT_SUBCOMMANDS = _opts(
    "log show diff status blame ls-files ls-tree rev-parse shortlog describe cat-file"
)
# Long options refused in any git subcommand, also when abbreviated (git accepts prefixes).
GIT_REFUSED_LONG: dict[str, str] = {
    "--output": "it writes to a file",
    "--ext-diff": "it runs an external program",
    "--textconv": "it runs a conversion program",
    "--filters": "it runs filter programs",
    "--open-files-in-pager": "it runs a pager",
    "--exec": "it runs a program",
    "--show-signature": "it runs the signature program named in the repository's config",
    "--no-index": "it reads files outside the repository",
    "--contents": "it reads another file",
    "--ignore-revs-file": "it reads another file",
    "--exclude-from": "it reads another file",
    "--git-dir": "it points git at another repository",
    "--work-tree": "it points git at another tree",
    "--recurse-submodules": "it reads other repositories",
    "--dirty": "it refreshes (writes) the index",
    "--broken": "it refreshes (writes) the index",
}
# Short options refused per subcommand (they read or write a named file).
GIT_REFUSED_SHORT: dict[str, frozenset[str]] = {
    "diff": frozenset("O"),
    "log": frozenset("O"),
    "show": frozenset("O"),
    "blame": frozenset("S"),
    "ls-files": frozenset("X"),
}

REFUSED_PROGRAMS: dict[str, str] = {
    **dict.fromkeys(
        _opts(
            "rm rmdir mv cp tee dd touch mkdir ln chmod chown chgrp truncate install shred"
            " patch tar zip unzip gzip gunzip split csplit mkfifo mknod"
        ),
        "it changes files",
    ),
    **dict.fromkeys(
        _opts(
            "sh bash zsh dash fish env xargs nohup timeout nice sudo su exec eval command"
            " builtin source awk gawk mawk nawk perl python python3 ruby node php lua"
            " watch parallel"
        ),
        "it runs other programs or code",
    ),
    **dict.fromkeys(
        _opts("curl wget nc ncat ssh scp sftp rsync ftp telnet"), "it uses the network"
    ),
    **dict.fromkeys(_opts("vi vim nano emacs less more man top"), "it is interactive"),
    **dict.fromkeys(_opts("kill pkill killall shutdown reboot"), "it acts on other processes"),
}


def program_names() -> tuple[str, ...]:
    """Every program the read-only shell accepts, sorted."""
    return tuple(sorted((*PROGRAMS, *SPECIAL_PROGRAMS)))


def hardened_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The argv actually executed. Git's config overrides travel in the environment
    (:func:`memd.agent.vcs.git_environment`); here it gets ``--no-pager`` and the options
    that keep a repository's config from running programs (external diff, text conversion)
    or looking into submodules (each is a repository of its own)."""
    if argv[0] != "git":
        return argv
    args = [arg for arg in argv[1:] if arg != "--no-pager"]
    subcommand, rest = args[0], args[1:]
    extra: tuple[str, ...] = ()
    if subcommand in ("diff", "log", "show"):
        extra = ("--no-ext-diff", "--no-textconv")
    elif subcommand == "blame":
        extra = ("--no-textconv",)
    if subcommand in ("diff", "status"):
        extra = (*extra, "--ignore-submodules=all")
    return ("git", "--no-pager", subcommand, *extra, *rest)
