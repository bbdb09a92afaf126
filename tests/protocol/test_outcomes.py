"""Outcomes and wire errors: the outcome spellings, `safe_message` and `ErrorInfo`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_workflows.protocol import MAX_ERROR_MESSAGE_CHARS, ErrorInfo, Outcome, safe_message

from .strategies import SETTINGS


def test_outcome_wire_values_are_the_documented_spellings() -> None:
    """The seven outcomes travel as the camelCase strings of DESIGN.md section 6."""
    assert [outcome.value for outcome in Outcome] == [
        "accepted",
        "adopted",
        "rejected",
        "conflict",
        "notFound",
        "claimLost",
        "unavailable",
    ]


def test_safe_message_collapses_newlines_and_control_characters() -> None:
    """Newlines, tabs, runs of spaces and control characters become single spaces."""
    text = "first line\n\tsecond\r\nthird\x00\x1b[31m  red\u2028end  "
    assert safe_message(text) == "first line second third [31m red end"


def test_safe_message_keeps_short_clean_text_unchanged() -> None:
    """A short single line passes through as it is."""
    assert safe_message("run r-1 is at revision 5, not 3") == "run r-1 is at revision 5, not 3"


def test_safe_message_truncates_long_text_with_an_ellipsis() -> None:
    """Text over the bound is cut to exactly the bound, ending with an ellipsis."""
    line = safe_message("word " * 1_000)
    assert len(line) == MAX_ERROR_MESSAGE_CHARS
    assert line.endswith("…")


@SETTINGS
@given(st.text(), st.integers(min_value=1, max_value=600))
def test_safe_message_always_returns_one_printable_bounded_line(text: str, limit: int) -> None:
    """Whatever the input, the result is printable, has no line breaks and fits the limit."""
    line = safe_message(text, limit)
    assert len(line) <= limit
    assert line.isprintable()
    assert line == line.strip()


def test_error_info_sanitises_its_message_on_construction() -> None:
    """An ErrorInfo built from raw text carries a safe one-line message."""
    error = ErrorInfo(code="sourceChanged", message="workflow changed:\n" + "x" * 1_000)
    assert "\n" not in error.message
    assert len(error.message) == MAX_ERROR_MESSAGE_CHARS


@pytest.mark.parametrize("code", ["", "Bad", "has space", "trailing.", "line\n", "a" * 65])
def test_error_info_refuses_a_code_that_is_not_a_dotted_camel_case_name(code: str) -> None:
    """Error codes are stable machine names, so a malformed one fails at construction."""
    with pytest.raises(ValueError, match="not a dotted camelCase name"):
        ErrorInfo(code=code, message="m")
