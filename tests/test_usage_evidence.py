"""Whether an agent used a memory, from its messages (issue 36, item 2): the pure core
(:mod:`memd.memory.usage_evidence`) and each agent's rules (``memd/sources/<agent>/usage.py``),
every signal in every agent's shape, what must not count, and hostile input."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.mcp.render import render_memory, render_recall, served_files
from memd.memory.session_context import RECALL_MARK
from memd.memory.usage_evidence import (
    Places,
    Step,
    Watched,
    command_paths,
    decoded_args,
    evidence,
    said_again,
    steps_of,
)
from memd.sources.claude_code.usage import RULES as CLAUDE
from memd.sources.codex.usage import RULES as CODEX
from memd.sources.codex.usage import cited_files
from memd.sources.gemini.usage import RULES as GEMINI
from memd.sources.gemini.usage import calls_in_text
from memd.sources.usage import Call, Rules

ROOT = "/work/repo"
PLACES = Places(ROOT, ROOT)
MEMORY = Watched(
    path="/home/u/.claude/projects/-work-repo/memory/deploy_command.md",
    relative="deploy_command.md",
    name="deploy command",
    text="How this repository is deployed to production\n"
    "Deploys go out with `make ship` from the release branch, never by hand; see "
    "scripts/ship.sh for the steps.",
    cited=("scripts/ship.sh",),
)
PROMPT = "How do we deploy this?"
Blocks = list[dict[str, Any]]


def user(text: str) -> tuple[str, Blocks]:
    return "user", [{"type": "text", "text": text}]


def said(text: str) -> tuple[str, Blocks]:
    return "assistant", [{"type": "text", "text": text}]


def called(rules: Rules, name: str, args: dict[str, Any]) -> tuple[str, Blocks]:
    """A tool call as each agent's reader keeps it: Claude Code's input object, Codex's
    arguments text, Gemini's call written into the model's text."""
    if rules is GEMINI:
        return said(f"[called {name}({json.dumps(args)})]")
    if rules is CODEX:
        return "assistant", [
            {"type": "tool_use", "id": "c1", "name": name, "input": {"arguments": json.dumps(args)}}
        ]
    return "assistant", [{"type": "tool_use", "id": "c1", "name": name, "input": args}]


def judge(rules: Rules, *messages: tuple[str, Blocks], memory: Watched = MEMORY) -> str | None:
    return evidence(memory, steps_of([user(PROMPT), *messages], rules), rules, PLACES)


AGENTS = pytest.mark.parametrize(
    "rules", [CLAUDE, CODEX, GEMINI], ids=["claude", "codex", "gemini"]
)


# ---------------------------------------------------------------------------------------------
# Each signal, in each agent's shape


@AGENTS
def test_a_reply_quoting_a_code_span_of_the_memory_is_a_quote(rules: Rules) -> None:
    assert judge(rules, said("Run `make ship` and wait.")) == "quoted"
    assert judge(rules, said("Run make ship and wait.")) == "quoted"  # the span's words


@AGENTS
def test_a_run_of_the_memorys_words_is_a_quote(rules: Rules) -> None:
    reply = said("As noted, deploys go out from the release branch, never by hand.")
    assert judge(rules, reply) == "quoted"


@AGENTS
def test_the_memorys_distinctive_terms_in_other_words_are_a_paraphrase(rules: Rules) -> None:
    reply = said(
        "We ship releases through a script on the release branch; nobody deploys manually."
    )
    assert judge(rules, reply) == "paraphrased"


@pytest.mark.parametrize(
    ("rules", "name", "args"),
    [
        (CLAUDE, "Read", {"file_path": f"{ROOT}/scripts/ship.sh"}),
        (CLAUDE, "Read", {"file_path": "scripts/ship.sh"}),  # relative: from the cwd
        (CLAUDE, "Edit", {"file_path": f"{ROOT}/scripts/ship.sh"}),
        (CLAUDE, "Grep", {"pattern": "x", "path": f"{ROOT}/scripts/ship.sh"}),
        (CLAUDE, "Bash", {"command": "cat scripts/ship.sh | head -5"}),
        (CODEX, "exec_command", {"cmd": "sed -n 1,20p scripts/ship.sh"}),
        (CODEX, "exec_command", {"cmd": "cd /tmp && cat '/work/repo/scripts/ship.sh'"}),
        (CODEX, "shell", {"command": ["bash", "-lc", "cat scripts/ship.sh"]}),
        (CODEX, "shell", {"command": ["cat", "scripts/ship.sh"]}),
        (GEMINI, "read_file", {"file_path": "scripts/ship.sh"}),
        (GEMINI, "read_file", {"absolute_path": f"{ROOT}/scripts/ship.sh"}),
        (GEMINI, "read_many_files", {"paths": ["README.md", "scripts/ship.sh"]}),
        (GEMINI, "run_shell_command", {"command": "less scripts/ship.sh"}),
    ],
)
def test_a_tool_call_opening_the_file_the_memory_cites(
    rules: Rules, name: str, args: dict[str, Any]
) -> None:
    assert judge(rules, called(rules, name, args), said("Done.")) == "opened_cited"


@pytest.mark.parametrize(
    ("rules", "name"),
    [(CLAUDE, "Read"), (CODEX, "exec_command"), (GEMINI, "read_file")],
)
def test_a_tool_call_opening_the_memory_itself(rules: Rules, name: str) -> None:
    args = {"cmd": f"cat {MEMORY.path}"} if rules is CODEX else {"file_path": MEMORY.path}
    assert judge(rules, called(rules, name, args)) == "opened_memory"


@pytest.mark.parametrize(
    ("rules", "name"),
    [
        (CLAUDE, "mcp__memd__read_memory"),
        (CODEX, "mcp__memd__read_memory"),
        (GEMINI, "mcp_memd_read_memory"),
        (GEMINI, "read_memory"),
    ],
)
@pytest.mark.parametrize("wanted", ["deploy_command.md", "Deploy  Command", "deploy command"])
def test_memds_read_memory_over_mcp(rules: Rules, name: str, wanted: str) -> None:
    assert judge(rules, called(rules, name, {"name": wanted})) == "read_over_mcp"


def test_codexs_citation_tag_naming_the_memory() -> None:
    tag = (
        "Done.\n<oai-mem-citation>\n<citation_entries>\n"
        "MEMORY.md:1-2|note=[index]\ndeploy_command.md:6-6|note=[how we ship | today]\n"
        "</citation_entries>\n<rollout_ids>\n</rollout_ids>\n</oai-mem-citation>"
    )
    assert judge(CODEX, said(tag)) == "cited"
    assert judge(CLAUDE, said(tag)) is None  # only Codex writes one


def test_the_strongest_signal_is_given() -> None:
    tag = "<oai-mem-citation><citation_entries>\ndeploy_command.md\n</citation_entries>"
    read = called(CODEX, "mcp__memd__read_memory", {"name": "deploy command"})
    assert judge(CODEX, read, said("Use `make ship`." + tag)) == "cited"
    assert judge(CODEX, read, said("Use `make ship`.")) == "read_over_mcp"


# ---------------------------------------------------------------------------------------------
# What does not count


@AGENTS
def test_no_reply_no_use(rules: Rules) -> None:
    assert judge(rules) is None


@AGENTS
def test_words_the_prompt_gave_are_no_quote(rules: Rules) -> None:
    prompt = user("Should I run `make ship` from the release branch, never by hand?")
    reply = said("Yes: run `make ship` from the release branch, never by hand.")
    steps = steps_of([prompt, reply], rules)
    assert evidence(MEMORY, steps, rules, PLACES) is None


@AGENTS
def test_words_a_tool_result_gave_are_no_quote(rules: Rules) -> None:
    result = ("user", [{"type": "tool_result", "tool_use_id": "c1", "content": MEMORY.text}])
    if rules is GEMINI:
        result = user(f"[read_file returned: {json.dumps({'output': MEMORY.text})}]")
    steps = steps_of([user(PROMPT), result, said(MEMORY.text)], rules)
    assert evidence(MEMORY, steps, rules, PLACES) is None


@AGENTS
def test_memds_injected_text_is_not_the_agents_words(rules: Rules) -> None:
    injected = f"{RECALL_MARK}. ## deploy command\n{MEMORY.text}"
    steps = steps_of([user(PROMPT), said(injected)], rules)
    assert steps[1].words == ""
    assert evidence(MEMORY, steps, rules, PLACES) is None


@AGENTS
def test_an_unrelated_reply_is_no_use(rules: Rules) -> None:
    assert judge(rules, said("The tests pass now; I fixed the parser's off-by-one.")) is None


@AGENTS
def test_opening_other_files_is_no_use(rules: Rules) -> None:
    name = "exec_command" if rules is CODEX else "read_file" if rules is GEMINI else "Read"
    args = {"cmd": "cat scripts/ship.sh.bak"} if rules is CODEX else {"file_path": "ship.sh"}
    assert judge(rules, called(rules, name, args)) is None


def test_a_tool_of_another_name_opens_nothing() -> None:
    other = called(CLAUDE, "mcp__other__read_memory", {"name": "deploy command"})
    assert judge(CLAUDE, other) is None
    assert judge(CLAUDE, called(CLAUDE, "WebFetch", {"url": "scripts/ship.sh"})) is None


def test_a_code_span_of_punctuation_or_a_short_one_says_nothing() -> None:
    memory = "Call `ls` or `--->` first, then the rest."
    assert said_again(memory, "Use `ls` then `--->`.", "") is None


def test_a_run_of_stopwords_is_no_quote() -> None:
    memory = "it is not what it is if it is not so"
    assert said_again(memory, "but it is not what it is if it is not", "") is None


def test_the_prompts_hook_context_is_not_the_users_words_in_gemini() -> None:
    (step,) = steps_of([user("<hook_context>make ship</hook_context>\nhello")], GEMINI)
    assert step.words == "hello"


# ---------------------------------------------------------------------------------------------
# The agents' own shapes


def test_codex_citation_entries_are_read_without_their_lines_and_notes() -> None:
    reply = (
        "x <oai-mem-citation>\n<citation_entries>\n a/b.md:3-9|note=[n]\nc.md|note=[]\n"
        "d.md:12\n\n</citation_entries>\n<rollout_ids>\nnot-a-file\n</rollout_ids>\n"
        "</oai-mem-citation> <oai-mem-citation><citation_entries>e.md</citation_entries>"
    )
    assert cited_files(reply) == ("a/b.md", "c.md", "d.md", "e.md")
    assert cited_files("no tag here: a.md:1-2|note=[x]") == ()


def test_gemini_calls_are_taken_out_of_the_text() -> None:
    text = (
        'Reading. [called read_file({"file_path": "a)].md"})] then '
        '[called x({"k": [1, {"b": "]"}]})][called broken({"a": )] end'
    )
    words, calls = calls_in_text(text)
    assert calls == (Call("read_file", {"file_path": "a)].md"}), Call("x", {"k": [1, {"b": "]"}]}))
    assert words == 'Reading.  then [called broken({"a": )] end'


def test_arguments_are_read_in_the_shape_each_reader_keeps() -> None:
    assert decoded_args({"arguments": '{"cmd": "ls"}'}) == {"cmd": "ls"}
    assert decoded_args({"arguments": "[1]"}) == {}
    assert decoded_args({"arguments": "{nope"}) == {}
    assert decoded_args({"file_path": "a"}) == {"file_path": "a"}
    assert decoded_args("a string") == {}


def test_command_lines_give_their_file_words() -> None:
    line = "cat a.py && grep -n x b.py | head -3 > out.txt"
    assert command_paths(line) == ["a.py", "x", "b.py", "out.txt"]
    assert command_paths(["bash", "-lc", "cat 'a b.py'"]) == ["a b.py"]
    assert command_paths("echo 'unbalanced") == ["'unbalanced"]
    assert command_paths(7) == []


@pytest.mark.parametrize("render", ["recall", "read"])
def test_what_memds_mcp_answers_served_is_found_in_any_agents_result(render: str) -> None:
    rows: list[dict[str, Any]] = [
        {"name": "deploy command", "type": "project", "relative": "deploy_command.md"},
        {"name": "ci (team)", "type": None, "relative": "team/ci.md"},
    ]
    text = (
        render_recall({"memories": rows, "reason": "r"}, 5)
        if render == "recall"
        else render_memory(rows[0])
    )
    files = ("deploy_command.md", "team/ci.md") if render == "recall" else ("deploy_command.md",)
    for rules, message in (
        (CLAUDE, ("user", [{"type": "tool_result", "tool_use_id": "c", "content": text}])),
        (CODEX, ("user", [{"type": "tool_result", "tool_use_id": "c", "content": text}])),
        (
            GEMINI,
            user(f"[mcp_memd_recall returned: {json.dumps({'output': text}, ensure_ascii=False)}]"),
        ),
    ):
        (step,) = steps_of([message], rules)
        assert step.served == files, rules
        assert step.words == ""  # memd's answer is not the others' words either


# ---------------------------------------------------------------------------------------------
# Hostile input


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
BLOCK = st.dictionaries(
    st.sampled_from(["type", "text", "name", "input", "content", "id"]),
    st.sampled_from(["text", "tool_use", "tool_result", "image"]) | JSONISH,
    max_size=5,
)


@given(
    messages=st.lists(
        st.tuples(st.sampled_from(["user", "assistant", "system"]), st.lists(BLOCK, max_size=4)),
        max_size=6,
    ),
    text=st.text(max_size=200),
    relative=st.text(max_size=30),
)
def test_any_messages_and_any_memory_are_judged_without_error(
    messages: Sequence[tuple[str, Blocks]], text: str, relative: str
) -> None:
    memory = Watched("/m/" + relative, relative, text[:20], text, (relative,))
    for rules in (CLAUDE, CODEX, GEMINI):
        steps = steps_of(messages, rules)
        assert all(isinstance(s, Step) for s in steps)
        result = evidence(memory, steps, rules, Places("", ""))
        assert result is None or isinstance(result, str)


@given(st.text(max_size=300))
def test_any_reply_text_reads_as_words_and_calls(text: str) -> None:
    words, calls = calls_in_text(text)
    assert len(words) <= len(text)
    assert all(isinstance(c.args, dict) for c in calls)
    cited_files(text)
    served_files(text)


@given(memory=st.text(max_size=200), prompt=st.text(max_size=200))
def test_a_reply_that_only_repeats_the_prompt_never_counts(memory: str, prompt: str) -> None:
    assert said_again(memory, prompt, prompt) is None
