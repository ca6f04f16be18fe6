"""Privacy filters (R-B4): private spans and likely secrets never leave the machine."""

from __future__ import annotations

import copy
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.privacy import (
    PRIVATE_PLACEHOLDER,
    redact_secrets,
    scrub_content,
    scrub_messages,
    scrub_report,
    scrub_text,
    strip_private,
)

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits

# (kind, text containing the secret, the secret part that must disappear)
EXAMPLES: list[tuple[str, str, str]] = [
    (
        "anthropic_key",
        "ANTHROPIC_API_KEY sk-ant-api03-Xy7_Qz9-aBcDeFgHiJkLmNoP",
        "Xy7_Qz9-aBcDeFgHiJkLmNoP",
    ),
    ("openai_key", "key is sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e8f7a", "4f9a8b7c6d5e4f3a2b1c0d9e8f7a"),
    ("openai_key", "export OPENAI=sk-1234567890abcdefghijKLMNOP", "1234567890abcdefghijKLMNOP"),
    (
        "github_token",
        "token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
        "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    ),
    (
        "github_token",
        "gho_1234567890abcdefghijABCDEFGHIJ1234 used",
        "1234567890abcdefghijABCDEFGHIJ1234",
    ),
    (
        "github_token",
        "github_pat_11AAAAAAA0abcdefghij_KLMNOPqrstuvwxyz012345",
        "0abcdefghij_KLMNOP",
    ),
    ("slack_token", "SLACK=xoxb-2048-4096-aBcDeFgHiJkL", "2048-4096-aBcDeFgHiJkL"),
    (
        "google_api_key",
        "maps key AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
        "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    ),
    ("aws_access_key_id", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    (
        "aws_secret_key",
        "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    (
        "jwt",
        "Cookie: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    ),
    ("url_password", "DATABASE_URL=postgres://app:hunter2secret@db:5432/shop", "hunter2secret"),
    ("url_password", "git clone https://bob:p%40ss@github.com/o/r.git", "p%40ss"),
    ("password", "password=correct-horse-battery", "correct-horse-battery"),
    ("password", 'db_password: "s3cr3t value"', "s3cr3t value"),
    ("password", '{"password": "hunter22"}', "hunter22"),
    ("password", "API_KEY='abcdef123456'", "abcdef123456"),
    ("password", 'if pwd == "letmein99":', "letmein99"),
    (
        "bearer_token",
        "Authorization: Bearer abcdefghijklmnop1234567890",
        "abcdefghijklmnop1234567890",
    ),
]


@pytest.mark.parametrize(("kind", "text", "secret"), EXAMPLES)
def test_each_kind_of_secret_is_replaced_by_its_marker(kind: str, text: str, secret: str) -> None:
    report = scrub_report(text)
    assert secret not in report.text
    assert f"[REDACTED:{kind}]" in report.text
    assert report.secrets.get(kind, 0) >= 1


def test_private_key_blocks_are_redacted_whole_even_without_an_end_line() -> None:
    body = "MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
    closed = (
        f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{body}\nabcd==\n-----END RSA PRIVATE KEY-----\nok"
    )
    assert scrub_text(closed) == "key:\n[REDACTED:private_key]\nok"
    truncated = f"$ head key\n-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n{body}\nthat was it"
    out = scrub_text(truncated)
    assert body not in out
    assert out.endswith("[REDACTED:private_key]\nthat was it")
    escaped = f'"-----BEGIN PRIVATE KEY-----\\n{body}\\n-----END PRIVATE KEY-----\\n"'
    assert body not in scrub_text(escaped)


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens: 8192 and input_tokens=123",
        "task-management-system-update-handler",
        "password: None",
        "password = ${DB_PASSWORD}",
        "api_key: get_api_key(),",
        'password: "<your password here>"',
        "see https://example.com:8080/path@v2 and git@github.com:org/repo.git",
        "scikit-learn sk-learn is a library",
        "PASSWORD_MIN_LENGTH=8",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert scrub_text(text) == text


def test_private_spans_are_removed_including_an_unterminated_tail() -> None:
    text = "a <private>one</private> b <PRIVATE>two\nlines</Private> c <private>rest of it"
    out = strip_private(text)
    assert out == f"a {PRIVATE_PLACEHOLDER} b {PRIVATE_PLACEHOLDER} c {PRIVATE_PLACEHOLDER}"
    assert scrub_report(text).private_spans == 3
    assert strip_private("no tags at all </private>") == "no tags at all </private>"


def test_scrub_content_covers_every_block_kind_and_leaves_the_input_alone() -> None:
    secret = "sk-ant-api03-" + "Q" * 30
    message: dict[str, Any] = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": f"using {secret}"},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "Bash",
                "input": {"command": f"curl -H 'x-api-key: {secret}'", "env": [{"K": secret}]},
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "<private>diary</private> ok"}],
            },
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "AKIA" + "A" * 16},
            },
        ],
    }
    original = copy.deepcopy(message)
    [out] = scrub_messages([message])
    assert message == original
    flat = repr(out)
    assert secret not in flat and "diary" not in flat
    assert out["content"][1]["id"] == "toolu_1" and out["content"][1]["name"] == "Bash"
    assert out["content"][3] == original["content"][3]  # base64 payloads are not text
    assert scrub_content("plain") == "plain"
    assert scrub_content(42) == 42


def test_secrets_can_be_kept_while_private_spans_still_go() -> None:
    text = "<private>x</private> sk-ant-api03-" + "Z" * 30
    out = scrub_text(text, secrets=False)
    assert "sk-ant-api03-" in out and "<private>" not in out


# ---------------------------------------------------------------------------------------------
# Properties

_noise = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)  # no lone surrogates
_sep = st.sampled_from([" ", "\n", "\t", '"', "'", "=", ": ", ",", "(", "`"])


def _tokens(alphabet: str, size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=size, max_size=size + 8)


_planted = st.one_of(
    st.builds(lambda s: ("sk-ant-api03-" + s, s), _tokens(ALNUM, 24)),
    st.builds(lambda s: ("sk-proj-" + s + "7", s), _tokens(ALNUM, 24)),
    st.builds(lambda s: ("ghp_" + s, s), _tokens(ALNUM, 36)),
    st.builds(lambda s: ("github_pat_" + s, s), _tokens(ALNUM, 30)),
    st.builds(lambda s: ("xoxp-" + s, s), _tokens(ALNUM, 20)),
    st.builds(lambda s: ("AIza" + s, s), _tokens(ALNUM, 35)),
    st.builds(lambda s: ("AKIA" + s, s), _tokens(UPPER_DIGITS, 16)),
    st.builds(lambda a, b: (f"eyJ{a}.eyJ{b}.sig", a + b), _tokens(ALNUM, 12), _tokens(ALNUM, 12)),
    st.builds(lambda s: (f"https://me:{s}@host.example/x", s), _tokens(ALNUM, 10)),
    # a space ends the value: ``password=name(`` reads as code calling a function
    st.builds(lambda s: (f"password={s} ", s), _tokens(ALNUM, 10)),
)


@settings(deadline=None, max_examples=300)
@given(before=_noise, after=_noise, planted=_planted, left=_sep, right=_sep)
def test_planted_secrets_never_survive(
    before: str, after: str, planted: tuple[str, str], left: str, right: str
) -> None:
    token, core = planted
    out = scrub_text(before + left + token + right + after)
    assert out.count(core) <= (before + after).count(core)


@settings(deadline=None, max_examples=300)
@given(before=_noise, hidden=_tokens(ALNUM, 12), after=_noise, closed=st.booleans())
def test_private_content_never_survives(before: str, hidden: str, after: str, closed: bool) -> None:
    tail = "</private>" + after if closed else ""
    out = scrub_text(before + "<private>" + hidden + tail)
    assert out.count(hidden) <= (before + (after if closed else "")).count(hidden)


@settings(deadline=None, max_examples=300)
@given(parts=st.lists(st.one_of(_noise, _planted.map(lambda p: p[0]), _sep), max_size=8))
def test_scrubbing_is_idempotent(parts: list[str]) -> None:
    text = "".join(parts)
    once = scrub_text(text)
    assert scrub_text(once) == once
    assert redact_secrets(redact_secrets(text)) == redact_secrets(text)
