"""Token estimates for text and API content."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd import tokens
from memd.tokens import IMAGE_TOKENS, estimate_content, estimate_text


def test_text_is_counted_with_the_cl100k_tokenizer() -> None:
    assert tokens.using_tokenizer()
    assert estimate_text("") == 0
    assert estimate_text("hello world") == 2
    assert 200 <= estimate_text("The quick brown fox jumps over the lazy dog. " * 25) <= 260


def test_special_token_text_is_plain_text() -> None:
    assert estimate_text("<|endoftext|> and <|fim_prefix|>") > 2


def test_a_string_content_counts_like_its_text() -> None:
    assert estimate_content("some prompt text") == estimate_text("some prompt text")
    assert estimate_content(None) == estimate_content([]) == 0


def test_each_block_kind_counts_what_the_model_reads() -> None:
    thought = "Let me look at the failing test first."
    assert estimate_content(
        [{"type": "thinking", "thinking": thought, "signature": "x" * 500}]
    ) == estimate_text(thought)
    call = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest -q"}}
    assert estimate_content([call]) == estimate_text("Bash") + estimate_text(
        '{"command":"pytest -q"}'
    )
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR" * 10_000},
    }
    assert estimate_content([image]) == IMAGE_TOKENS
    nested = [{"type": "text", "text": "file contents here"}, image]
    result = {"type": "tool_result", "tool_use_id": "t1", "content": nested}
    assert estimate_content([result]) == estimate_content(nested)
    plain = {"type": "tool_result", "tool_use_id": "t1", "content": "exit code 0"}
    assert estimate_content([plain]) == estimate_text("exit code 0")
    doc = {"type": "document", "source": {"type": "text", "data": "a short text document"}}
    assert estimate_content([doc]) == estimate_text("a short text document")


def test_an_unknown_block_is_not_free() -> None:
    assert estimate_content([{"type": "future_block", "payload": "some words in it"}]) > 3


_block = st.one_of(
    st.builds(lambda s: {"type": "text", "text": s}, st.text(max_size=60)),
    st.builds(
        lambda s: {"type": "tool_result", "tool_use_id": "t", "content": s}, st.text(max_size=60)
    ),
    st.just({"type": "image", "source": {}}),
)


@settings(deadline=None)
@given(first=st.lists(_block, max_size=5), second=st.lists(_block, max_size=5))
def test_estimates_add_up_over_blocks(first: list[Any], second: list[Any]) -> None:
    assert estimate_content(first + second) == estimate_content(first) + estimate_content(second)
    assert estimate_content(first) >= 0


def test_concurrent_first_callers_all_get_the_same_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "_counter", None)
    barrier = threading.Barrier(6)
    results: list[int] = []

    def estimate() -> None:
        barrier.wait()
        results.append(estimate_text("concurrent first use of the tokenizer"))

    threads = [threading.Thread(target=estimate) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 6 and len(set(results)) == 1
    assert tokens.using_tokenizer()


def test_without_the_tokenizer_package_estimates_fall_back_to_chars_over_4() -> None:
    script = (
        "import sys, json; sys.modules['tiktoken'] = None\n"
        "from memd import tokens\n"
        "print(json.dumps([tokens.using_tokenizer(), tokens.estimate_text('x' * 41),"
        " tokens.estimate_content([{'type': 'text', 'text': 'abcd' * 10}])]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [False, 11, 10]
    assert "fall back" in done.stderr


_LOAD_RSS = """
from memd import tokens
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
before = rss()
assert tokens.estimate_text("hello world") == 2
print(rss() - before)
"""


def test_the_loaded_tokenizer_costs_the_daemon_its_core_not_a_second_copy() -> None:
    """The tokenizer is a fixed cost of every daemon with a session to estimate: its Rust core
    (~30 MiB), not also the 100k-entry Python dict it was built from (~16 MiB more)."""
    out = subprocess.run(
        [sys.executable, "-c", _LOAD_RSS], capture_output=True, text=True, check=True
    )
    assert int(out.stdout) < 38 * 1024  # KiB: 45 MiB with the dict kept
