"""Recall without a model (lexical ranker) and the model selector's pure parts (R-M6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from memd.memory.rank import (
    LexicalIndex,
    RankDoc,
    doc_from_header,
    is_tool_usage_reference,
    rank,
    rank_headers,
    selection_candidates,
)
from memd.memory.scan import MemoryHeader, scan_memories
from memd.memory.selector import build_selector_prompt, parse_selection, selector_system
from memd.memory.terms import analyze, mentions_warning, split_identifier, stem

BENCH = Path(__file__).resolve().parents[1] / "bench" / "data" / "recall"


def test_identifiers_split_into_parts_and_keep_the_compound() -> None:
    assert split_identifier("parseHTTPHeader_v2") == ["parse", "HTTP", "Header", "v", "2"]
    terms = analyze("getUserName")
    assert {stem("user"), stem("name"), stem("getusername")} <= set(terms)
    assert set(analyze("get_user_name")) >= {stem("user"), stem("name")}
    assert set(analyze("src/memd/config.py")) >= {"src", "memd", "config", "py"}


@pytest.mark.parametrize(
    "forms",
    [
        ("cache", "caches", "cached", "caching"),
        ("migrate", "migrated", "migrations", "migration"),
        ("test", "tests", "tested", "testing"),
        ("run", "runs", "running"),
        ("configure", "configured", "configuration"),
        ("deploy", "deploys", "deployment", "deployments"),
        ("use", "used", "uses", "using"),
    ],
)
def test_stemming_conflates_word_forms(forms: tuple[str, ...]) -> None:
    assert len({stem(f) for f in forms}) == 1


def test_stopwords_go_and_abbreviations_match_their_long_form() -> None:
    assert analyze("what is the and of") == ()
    assert set(analyze("db")) & set(analyze("database"))
    assert set(analyze("k8s")) & set(analyze("Kubernetes"))


def _doc(key: str, name: str = "", description: str = "", body: str = "", **kw: Any) -> RankDoc:
    return RankDoc(key, name, description, body, **kw)


def test_what_kind_of_asks_about_the_word_after_of() -> None:
    index = LexicalIndex.build(
        [
            _doc("thanks.md", "Thanks", "Tim thanked Maria for her kind words"),
            _doc("band.md", "Band", "John played music in a band at college"),
            _doc("festival.md", "Festival", "a music festival in June"),
            _doc("lessons.md", "Lessons", "piano and music lessons"),
        ]
    )
    got = [r.key for r in rank(index, "What kind of music does John like?")]
    assert got[0] == "band.md"
    assert "thanks.md" not in got
    assert "kind" in " ".join(analyze("kind words"))  # a kind word still counts


DOCS = [
    _doc("flaky.md", "Known flaky tests", "test_refund_webhook fails intermittently in CI"),
    _doc("deploy.md", "Deploy pipeline", "Argo CD promotes staging to production"),
    _doc("pnpm.md", "Use pnpm", "never npm in the web workspace", type="feedback"),
    _doc("body.md", "Misc", "assorted", "the refund webhook is retried three times"),
]


def test_the_matching_memory_ranks_first_and_unrelated_ones_are_absent() -> None:
    index = LexicalIndex.build(DOCS)
    got = [r.key for r in rank(index, "why does the refund webhook test keep failing in CI?")]
    assert got[0] == "flaky.md"
    assert "deploy.md" not in got and "pnpm.md" not in got
    assert rank(index, "kubernetes ingress certificates") == []


def test_name_and_description_outweigh_the_body() -> None:
    docs = [
        _doc("a.md", "Redis eviction", "sessions dropped"),
        _doc("b.md", "Misc", "notes", "redis eviction " * 3),
    ]
    assert rank(LexicalIndex.build(docs), "redis eviction")[0].key == "a.md"


def test_limit_exclusions_and_deterministic_ties() -> None:
    docs = [_doc(f"m{i}.md", "same words", "identical", mtime_ms=i) for i in range(8)]
    index = LexicalIndex.build(docs)
    got = [r.key for r in rank(index, "same words", limit=5, exclude={"m7.md"})]
    assert got == ["m6.md", "m5.md", "m4.md", "m3.md", "m2.md"]  # newest first among equals


def test_tool_rule_drops_usage_references_but_keeps_warnings() -> None:
    usage = _doc("gh.md", "Using the gh CLI", "how to open PRs with gh", type="reference")
    gotcha = _doc("gh-warn.md", "gh CLI gotcha", "gh pr merge deletes the branch", type="reference")
    advice = _doc(
        "gh-fb.md", "gh CLI preference", "user likes gh pr create --fill", type="feedback"
    )
    mcp = _doc(
        "lin.md", "Linear MCP usage", "create issues with the linear tools", type="reference"
    )
    assert is_tool_usage_reference(usage, ["gh"])
    assert not is_tool_usage_reference(gotcha, ["gh"])
    assert not is_tool_usage_reference(advice, ["gh"])
    assert not is_tool_usage_reference(usage, ["Bash"])
    assert is_tool_usage_reference(mcp, ["mcp__linear__create_issue"])
    index = LexicalIndex.build([usage, gotcha, advice])
    assert {r.key for r in rank(index, "open a PR with gh", recent_tools=["gh"])} == {
        "gh-warn.md",
        "gh-fb.md",
    }


def test_warning_detection() -> None:
    assert mentions_warning("Never run integration tests with -n")
    assert mentions_warning("Gotcha: sed -i differs on macOS")
    assert not mentions_warning("How to run the test suites")
    assert not mentions_warning("label bug or chore", strong_only=True)


# ---------------------------------------------------------------------------------------------
# Quality on the fixed benchmark set (bench/data/recall)


def _bench() -> tuple[list[MemoryHeader], list[dict[str, Any]]]:
    headers = scan_memories(BENCH / "memories")
    queries: list[dict[str, Any]] = yaml.safe_load((BENCH / "queries.yaml").read_text())
    return headers, queries


def test_ranker_quality_on_the_benchmark_set() -> None:
    headers, queries = _bench()
    assert len(headers) >= 50 and len(queries) >= 30
    assert {h.type for h in headers} == {"user", "feedback", "project", "reference"}
    index = LexicalIndex.build(doc_from_header(h) for h in headers)
    recall = reciprocal = 0.0
    for q in queries:
        got = [r.key for r in rank(index, q["query"], recent_tools=q.get("recent_tools", ()))]
        expected = q["expected"]
        recall += sum(k in got for k in expected) / len(expected)
        first = next((i for i, k in enumerate(got, 1) if k in expected), None)
        reciprocal += 1 / first if first else 0
        assert not set(q.get("must_not", ())) & set(got), q["query"]
    assert recall / len(queries) >= 0.9
    assert reciprocal / len(queries) >= 0.8


def test_rank_headers_excludes_surfaced_memories_by_relative_or_absolute_path() -> None:
    headers, _ = _bench()
    query = "redis memory keeps growing and users get logged out"
    first = rank_headers(headers, query)
    assert first and first[0].relative == "project_incident_2025_09.md"
    again = rank_headers(headers, query, already_surfaced=[str(first[0].path)])
    assert first[0].relative not in [h.relative for h in again]


# ---------------------------------------------------------------------------------------------
# Model selector


def test_selector_prompt_has_query_tools_and_only_unsurfaced_memories() -> None:
    headers, _ = _bench()
    candidates = selection_candidates(headers, {"feedback_async.md"})
    prompt = build_selector_prompt(
        "fetch rates with key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA",
        candidates,
        ["Bash", "Bash", "Edit"],
    )
    assert "fetch rates" in prompt and "sk-ant-api03-AAAA" not in prompt
    assert "Tools in active use: Bash, Edit" in prompt
    assert "feedback_async.md" not in prompt
    assert "- [reference] reference_grafana.md (" in prompt
    system = selector_system(5)
    assert "5" in system and "JSON" in system and "warn" in system


KNOWN = ["a.md", "team/deploy.md", "notes/x.md", "other/x.md"]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('["a.md", "team/deploy.md"]', ["a.md", "team/deploy.md"]),
        ('```json\n["team/deploy.md"]\n```', ["team/deploy.md"]),
        ('I would pick these: ["a.md"] because…', ["a.md"]),
        ('{"memories": ["./a.md", "memory/team/deploy.md"]}', ["a.md", "team/deploy.md"]),
        ("The useful ones are `a.md` and team/deploy.md.", ["a.md", "team/deploy.md"]),
        ('["/home/u/.claude/projects/p/memory/team/deploy.md"]', ["team/deploy.md"]),
        ('["deploy.md"]', ["team/deploy.md"]),  # unique file name
        ('["x.md"]', []),  # ambiguous file name
        ('["ghost.md", "a.md", "a.md"]', ["a.md"]),
        ("[]", []),
        ("none of them", []),
    ],
)
def test_parse_selection(answer: str, expected: list[str]) -> None:
    assert parse_selection(answer, KNOWN) == expected


def test_parse_selection_keeps_at_most_the_limit() -> None:
    known = [f"m{i}.md" for i in range(10)]
    assert parse_selection(str(known).replace("'", '"'), known) == known[:5]


@given(st.text(max_size=300))
def test_parse_selection_never_raises_and_only_returns_known_paths(answer: str) -> None:
    got = parse_selection(answer, KNOWN)
    assert set(got) <= set(KNOWN) and len(got) <= 5 and len(set(got)) == len(got)


def test_short_numbers_are_terms_and_leading_zeros_do_not_matter() -> None:
    docs = [
        RankDoc("a.md", description="Caroline moved on 14 December"),
        RankDoc("b.md", description="Caroline moved house on 4 December"),
    ]
    index = LexicalIndex.build(docs)
    assert rank(index, "Did Caroline move on December 04?")[0].key == "b.md"


def test_a_name_in_the_query_outweighs_a_rarer_word_in_someone_elses_memory() -> None:
    """Issue 27: a person's name is in half the memories, so its idf is low; a memory about
    someone else that shares an incidental word must not win."""
    docs = [
        RankDoc("mel_pottery.md", description="Melanie took a pottery class with her kids"),
        RankDoc("car_1.md", description="Caroline joined a counseling workshop"),
        RankDoc("car_2.md", description="Caroline is researching adoption agencies"),
        RankDoc("mel_1.md", description="Melanie went camping at the beach"),
        RankDoc("car_3.md", description="Caroline painted a sunset with her kids"),
    ]
    ranked = rank(LexicalIndex.build(docs), "What did Caroline do with her kids at the class?")
    assert ranked[0].key == "car_3.md"


def test_terms_that_keep_company_with_the_query_in_the_memories_break_a_tie() -> None:
    """Issue 27, "no shared words": where other memories say "injury" beside "knee", a memory
    about Evan's knee outranks an equally matching one about his groceries (newer, so the tie
    would go to it)."""
    docs = [
        RankDoc("a.md", description="Evan wears a knee brace after the injury", mtime_ms=1),
        RankDoc("b.md", description="the knee injury needs physiotherapy", mtime_ms=2),
        RankDoc("knee.md", description="Evan twisted his knee last Friday", mtime_ms=3),
        RankDoc("groceries.md", description="Evan buys groceries on Sunday", mtime_ms=4),
        *(RankDoc(f"filler_{n}.md", description=f"notes on topic {n} alpha") for n in range(30)),
    ]
    got = [r.key for r in rank(LexicalIndex.build(docs), "What injury did Evan suffer?")]
    assert got.index("knee.md") < got.index("groceries.md")
