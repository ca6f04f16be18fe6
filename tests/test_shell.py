"""The read-only shell: the classifier (pure) and the runner (real processes)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.agent.decision import Allow, Deny
from memd.agent.process import SAFE_PATH, ShellLimits, ShellOutcome, shell_environment
from memd.agent.programs import hardened_argv, program_names
from memd.agent.shell import Pipeline, classify, parse_command, run_readonly
from memd.agent.vcs import NO_PROGRAM, Repository, git_environment

ALLOWED = [
    "ls",
    "ls -la sub",
    "ls -l --human-readable",
    "cat notes.md",
    "cat -n notes.md | head -n 20",
    "head -5 notes.md",
    "head -n5 notes.md",
    "tail -n 20 notes.md",
    "wc -l notes.md other.md",
    "stat -c '%s %y' notes.md",
    "file notes.md",
    "du -sh .",
    "sort -u notes.md | uniq -c | sort -rn",
    "cut -d , -f 1,2 data.csv",
    "diff -u a.md b.md",
    "grep -rn 'TODO' .",
    "grep -e foo -e bar notes.md",
    "grep -i 'a|b' notes.md",
    "grep -C 2 foo notes.md",
    "rg -n foo sub",
    "rg --files sub",
    "find . -name '*.md' -type f",
    "find sub -maxdepth 2 \\( -name a -o -name b \\) -print",
    "find . '(' -name a ')'",
    "find . -newer notes.md -mmin -5",
    "git log --oneline -n 5",
    "git show HEAD:notes.md",
    "git diff HEAD~1 -- notes.md",
    "git status --porcelain",
    "git blame notes.md",
    "git --no-pager ls-files",
    "echo 'hello world'",
    'echo "a b"',
    "pwd",
    "date +%Y-%m-%d",
    "date -u",
    "basename /a/b.md .md",
    "dirname /a/b.md",
    "realpath notes.md",
    "readlink -f notes.md",
    "nl notes.md",
    "tr a-z A-Z",
    "sed -n 5,20p notes.md",
    "sed -n '1p;$p' notes.md",
    "tree -L 2",
    "cat 'file with spaces.md'",
    "cat file\\ with\\ spaces.md",
    "grep 'x$' notes.md",
    "grep '*' notes.md",
    "find . -name '[ab]*'",
    "cat -- -dash.md",
    "ls | wc -l",
]

DENIED = [
    ("ls > out", "redirection"),
    ("ls >> out", "redirection"),
    ("cat < notes.md", "redirection"),
    ("ls 2> err", "redirection"),
    ("ls &> out", "&"),
    ("cat <<EOF", "redirection"),
    ("echo $(id)", "$"),
    ("echo `id`", "backticks"),
    ('echo "$(id)"', "double quotes"),
    ('echo "`id`"', "double quotes"),
    ("cat <(ls)", "redirection"),
    ("(ls)", "subshell"),
    ("ls; rm x", ";"),
    ("ls && rm x", "&"),
    ("ls || rm x", "||"),
    ("ls & rm x", "&"),
    ("ls |& cat", "|&"),
    ("echo $HOME", "variables"),
    ("echo ${HOME}", "variables"),
    ('echo "$HOME"', "double quotes"),
    ("ls *.md", "glob"),
    ("cat note?.md", "glob"),
    ("cat [ab].md", "glob"),
    ("cat {a,b}.md", "brace"),
    ("cat ~/.ssh/id_rsa", "~"),
    ("ls # comment", "comment"),
    ("ls\nrm x", "line"),
    ("ls \\\nrm", "backslash"),
    ("echo 'unterminated", "unterminated"),
    ("ls |", "empty"),
    ("| ls", "empty"),
    ("", "empty"),
    ("rm -rf /", "changes files"),
    ("tee out", "changes files"),
    ("dd if=a of=b", "changes files"),
    ("awk '{print}' notes.md", "runs other programs"),
    ("xargs cat", "runs other programs"),
    ("env cat notes.md", "runs other programs"),
    ("bash -c ls", "runs other programs"),
    ("ls | sh", "runs other programs"),
    ("curl http://x", "network"),
    ("frobnicate", "not a known"),
    ("/bin/cat notes.md", "without a directory"),
    ("./ls", "without a directory"),
    ("find . -delete", "deletes"),
    ("find . -exec cat '{}' +", "runs other programs"),
    ("find . -execdir ls ';'", "runs other programs"),
    ("find . -ok rm '{}' ';'", "runs other programs"),
    ("find . -fprint out", "writes"),
    ("find . -fprintf out %p", "writes"),
    ("find . -fls out", "writes"),
    ("find -L . -name x", "symbolic links"),
    ("find . -follow", "symbolic links"),
    ("find . -name", "without its argument"),
    ("find . -frobnicate", "not on the read-only list"),
    ("sed -i s/a/b/ notes.md", "option -i"),
    ("sed --in-place s/a/b/ notes.md", "--in-place"),
    ("sed -n 'w out' notes.md", "printing lines"),
    ("sed -n '1e id' notes.md", "printing lines"),
    ("sed 's/a/b/w out' notes.md", "printing lines"),
    ("sed -f script.sed notes.md", "option -f"),
    ("sort -o out notes.md", "option -o"),
    ("sort --output=out notes.md", "--output"),
    ("sort --out=out notes.md", "--out"),
    ("sort -T /tmp notes.md", "option -T"),
    ("sort --compress-program=sh notes.md", "--compress-program"),
    ("uniq notes.md out", "more than 1"),
    ("tail -f notes.md", "option -f"),
    ("tail --follow notes.md", "--follow"),
    ("grep -R x .", "option -R"),
    ("grep --dereference-recursive x .", "dereference"),
    ("rg -L x", "option -L"),
    ("rg --pre sh x", "--pre"),
    ("rg -z x", "option -z"),
    ("tree -o out", "option -o"),
    ("tree -R", "option -R"),
    ("tree -l", "option -l"),
    ("du -L .", "option -L"),
    ("diff -r a b", "option -r"),
    ("diff --to-file=x a", "--to-file"),
    ("file -C", "option -C"),
    ("date -s 2020-01-01", "option -s"),
    ("date 010100002020", "clock"),
    ("pwd extra", "operands"),
    ("git -c core.pager=id log", "before the subcommand"),
    ("git -C /etc log", "before the subcommand"),
    ("git --git-dir=/x log", "before the subcommand"),
    ("git --no-pager", "before the subcommand"),
    ("git commit -m x", "read-only git subcommands"),
    ("git push", "read-only git subcommands"),
    ("git config user.name x", "read-only git subcommands"),
    ("git diff --output=x", "writes"),
    ("git log --out=x", "writes"),
    ("git diff --ext-diff", "external"),
    ("git log --textconv", "conversion"),
    ("git diff --no-index a b", "outside the repository"),
    ("git blame --contents /etc/passwd x", "another file"),
    ("git blame -S revs x", "names a file"),
    ("git diff -Oorder", "names a file"),
    ("git ls-files -X ex", "names a file"),
    ("git cat-file --filters HEAD:x", "filter"),
    ("git log --show-signature", "signature"),
    ("cat 'a\0b'", "NUL"),
    ("head --lines", "option --lines"),
]


@pytest.mark.parametrize("command", ALLOWED)
def test_allowed_commands(command: str) -> None:
    assert classify(command) == Allow(), parse_command(command)


@pytest.mark.parametrize(("command", "why"), DENIED)
def test_denied_commands(command: str, why: str) -> None:
    decision = classify(command)
    assert isinstance(decision, Deny), command
    assert decision.reason.startswith("denied:")
    assert why in decision.reason


def test_general_denial_lists_the_programs() -> None:
    decision = classify("ls > x")
    assert isinstance(decision, Deny)
    for name in ("cat", "grep", "find", "git"):
        assert name in decision.reason


def test_option_denial_lists_the_options() -> None:
    decision = classify("sort -o x y")
    assert isinstance(decision, Deny)
    assert "-k" in decision.reason and "-r" in decision.reason


def reads(command: str) -> list[str]:
    pipeline = parse_command(command)
    assert isinstance(pipeline, Pipeline), pipeline
    return [read.path for read in pipeline.reads]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat a b", ["a", "b"]),
        ("head -n 5 a", ["a"]),
        ("head -5 a", ["a"]),
        ("grep -n foo a b", ["a", "b"]),
        ("grep -e foo a", ["a"]),
        ("grep -f pats a", ["pats", "a"]),
        ("grep foo", []),
        ("grep -r foo", ["."]),
        ("grep -rn foo sub", ["sub"]),
        ("rg foo", ["."]),
        ("rg --files sub", ["sub"]),
        ("find x y -newer z -name '*.md'", ["x", "y", "z"]),
        ("find -name x", ["."]),
        ("ls", ["."]),
        ("ls -l d", ["d"]),
        ("du", ["."]),
        ("sort -k 2 -t , f", ["f"]),
        ("cut -d , -f 1 f", ["f"]),
        ("sed -n 2p f", ["f"]),
        ("sed -n -e 2p f g", ["f", "g"]),
        ("echo a /etc/passwd", []),
        ("basename /etc/passwd", []),
        ("realpath --relative-to=/etc x", ["/etc", "x"]),
        ("git log", ["."]),
        ("git diff a b", [".", "a", "b"]),
        ("git log -- x", [".", "x"]),
        ("cat -- -a", ["-a"]),
        ("cat a | grep x b", ["a", "b"]),
    ],
)
def test_reads_are_listed(command: str, expected: list[str]) -> None:
    assert reads(command) == expected


def test_diff_reads_are_files_only() -> None:
    pipeline = parse_command("diff a b")
    assert isinstance(pipeline, Pipeline)
    assert all(read.files_only for read in pipeline.reads)


def test_pipeline_is_split_into_commands() -> None:
    pipeline = parse_command("cat a | grep 'x|y' | wc -l")
    assert isinstance(pipeline, Pipeline)
    assert [c.argv for c in pipeline.commands] == [
        ("cat", "a"),
        ("grep", "x|y"),
        ("wc", "-l"),
    ]


@given(st.text(st.characters(exclude_characters="\0"), max_size=60))
def test_quoted_text_is_one_literal_argument(text: str) -> None:
    pipeline = parse_command("grep -e " + shlex.quote(text) + " notes.md")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:  # a lone surrogate: no argv can carry it, so it is refused
        assert isinstance(pipeline, Deny) and "lone surrogate" in pipeline.reason
        return
    assert isinstance(pipeline, Pipeline)
    assert pipeline.commands[0].argv == ("grep", "-e", text, "notes.md")


@given(st.text(alphabet="ab |;&<>$`()'\"\\*?~#{}-\n", max_size=30))
def test_classifier_never_raises(command: str) -> None:
    parsed = parse_command(command)
    if isinstance(parsed, Pipeline):
        for item in parsed.commands:
            assert item.argv[0] in program_names()


META = [";", "&", "&&", "||", ">", ">>", "<", "2>", "$(x)", "`x`", "$X", "${X}", "*", "?"]


@given(
    st.lists(st.sampled_from(["ls", "cat a", "wc -l"]), min_size=1, max_size=3),
    st.sampled_from(META),
    st.integers(min_value=0, max_value=20),
)
def test_unquoted_metacharacters_are_always_denied(
    words: list[str], meta: str, position: int
) -> None:
    command = " | ".join(words)
    position = min(position, len(command))
    while 0 < position < len(command) and command[position - 1] != " ":
        position -= 1
    attacked = command[:position] + meta + " " + command[position:]
    assert isinstance(classify(attacked), Deny), attacked


def test_git_is_hardened() -> None:
    argv = hardened_argv(("git", "--no-pager", "diff", "HEAD"))
    assert argv[:3] == ("git", "--no-pager", "diff")
    assert "--no-ext-diff" in argv and "--no-textconv" in argv
    assert "--ignore-submodules=all" in argv
    assert argv[-1] == "HEAD"
    assert hardened_argv(("ls", "-l")) == ("ls", "-l")
    env = git_environment({"PATH": SAFE_PATH}, Repository("/a/.git", "/a"))
    pairs = {
        env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
        for i in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert pairs["core.fsmonitor"] == "false" and pairs["gpg.program"] == NO_PROGRAM
    assert (env["GIT_DIR"], env["GIT_WORK_TREE"]) == ("/a/.git", "/a")


def test_environment_is_minimal(tmp_path: Path) -> None:
    env = shell_environment(tmp_path)
    assert env["GIT_CEILING_DIRECTORIES"] == str(tmp_path.parent)
    assert env["GIT_OPTIONAL_LOCKS"] == "0"
    assert not any("ANTHROPIC" in key or "SECRET" in key for key in env)
    home = Path(env["HOME"])
    assert not home.is_relative_to(tmp_path) and list(home.iterdir()) == []
    assert all(env[key] == env["HOME"] for key in env if key.startswith("XDG_"))


# ---------------------------------------------------------------------------------------------
# Running


async def run(command: str, cwd: Path, limits: ShellLimits | None = None) -> ShellOutcome:
    with anyio.fail_after(30):
        outcome = await run_readonly(command, cwd=cwd, limits=limits or ShellLimits())
    assert isinstance(outcome, ShellOutcome), outcome
    return outcome


@pytest.mark.anyio
async def test_runs_a_pipeline(tmp_path: Path) -> None:
    (tmp_path / "n.md").write_text("b\na\nb\n")
    outcome = await run("sort n.md | uniq -c | sort -rn | head -n 1", tmp_path)
    assert outcome.stdout.split() == ["2", "b"]
    assert outcome.exit_code == 0 and not outcome.failed
    assert outcome.render() == outcome.stdout.rstrip("\n")


@pytest.mark.anyio
async def test_quoted_arguments_reach_the_program_unchanged(tmp_path: Path) -> None:
    (tmp_path / "a b.md").write_text("x $HOME y\n")
    outcome = await run("grep -F '$HOME' 'a b.md'", tmp_path)
    assert outcome.stdout == "x $HOME y\n"


@pytest.mark.anyio
async def test_failure_reports_exit_code_and_stderr(tmp_path: Path) -> None:
    outcome = await run("cat missing.md", tmp_path)
    assert outcome.exit_code == 1 and outcome.failed
    text = outcome.render()
    assert "[stderr]" in text and "missing.md" in text and "[exit code 1]" in text


@pytest.mark.anyio
async def test_stdin_is_closed(tmp_path: Path) -> None:
    outcome = await run("cat", tmp_path, ShellLimits(timeout_s=20))
    assert (outcome.exit_code, outcome.stdout, outcome.timed_out) == (0, "", False)


@pytest.mark.anyio
async def test_output_is_capped(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 300_000)
    outcome = await run("cat big", tmp_path, ShellLimits(max_output_bytes=1000))
    assert outcome.output_cut and len(outcome.stdout) == 1000
    assert "[output cut at 1000 bytes" in outcome.render()


@pytest.mark.anyio
async def test_time_limit_kills_the_process_group(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    started = time.monotonic()
    outcome = await run("cat fifo | wc -c", tmp_path, ShellLimits(timeout_s=0.5))
    assert outcome.timed_out and outcome.exit_code is None
    assert time.monotonic() - started < 10
    assert "killed" in outcome.render()


@pytest.mark.anyio
async def test_refused_command_is_not_run(tmp_path: Path) -> None:
    outcome = await run_readonly("ls > out", cwd=tmp_path)
    assert isinstance(outcome, Deny)
    assert not (tmp_path / "out").exists()


@pytest.mark.anyio
async def test_missing_program_is_reported(tmp_path: Path) -> None:
    if shutil.which("rg") is not None:
        pytest.skip("rg is installed here")
    outcome = await run("rg foo", tmp_path)
    assert outcome.exit_code == 127 and "not installed" in outcome.render()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.md").write_text("one\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=m"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "a.md"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "first"], cwd=root, check=True)
    return root


@pytest.mark.anyio
async def test_git_reads_a_repository(repo: Path) -> None:
    outcome = await run("git log --format=%s", repo)
    assert outcome.stdout == "first\n"
    (repo / "a.md").write_text("two\n")
    index = (repo / ".git" / "index").read_bytes()
    diff = await run("git diff", repo)
    assert "+two" in diff.stdout
    await run("git status --porcelain", repo)
    assert (repo / ".git" / "index").read_bytes() == index


@pytest.mark.anyio
async def test_git_does_not_look_above_the_working_directory(repo: Path) -> None:
    (repo / "sub").mkdir()
    outcome = await run_readonly("git status", cwd=repo / "sub")
    assert isinstance(outcome, Deny) and "has no git repository of its own" in outcome.reason
