"""A workflow's one-line summary, read from its docstring without running the file."""

from __future__ import annotations

from pi_workflows.sources import resolve, summary_line

from .conftest import Project


def test_the_summary_is_the_docstrings_first_line_without_the_name(project: Project) -> None:
    """The first non-blank docstring line is the summary; a leading ``NAME:``, ``NAME -`` or
    ``builtin:NAME -`` is dropped, a longer line is cut; a file is never executed for it."""
    cases = {
        "plain": ('"""Poll CI every 5 minutes."""', "Poll CI every 5 minutes."),
        "named": ('"""\n\nnamed: poll CI.\n\nMore text."""', "poll CI."),
        "dashed": ('"""dashed - a tour."""', "a tour."),
        "other": ('"""plain: not this name."""', "plain: not this name."),
        "long": (f'"""{"x" * 300}"""', "x" * 159 + "…"),
        "none": ("x = 1", None),
        "broken": ('"""A summary."""\ndef (', None),
    }
    for name, (source, expected) in cases.items():
        path = project.write(f"{name}.workflow.py", f"{source}\nraise SystemExit('ran')\n")
        assert summary_line(resolve(str(path), None)) == expected, name
    assert (
        summary_line(resolve("builtin:demo", None)) == "a tour of pi-workflows that needs no model."
    )
    watch = summary_line(resolve("builtin:watch", None))
    assert watch is not None
    assert watch.startswith("run a command every interval")
