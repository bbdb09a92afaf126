"""A workflow file's one-line summary: the first line of its module docstring.

``summary_line(ref)`` parses the file (never executes it) and returns the first non-blank
line of its docstring, without a leading ``NAME:``, ``NAME -`` or ``builtin:NAME -`` that
repeats the workflow's name, cut at ``SUMMARY_CHARS``; ``None`` for a file without one or
that does not parse (its load error says why). What ``workflows list`` and ``/workflow
list`` show beside each name.
"""

from __future__ import annotations

import ast
import re
from typing import Final

from pi_workflows.sources.discovery import BUILTIN_PREFIX, WorkflowRef

SUMMARY_CHARS: Final = 160


def summary_line(ref: WorkflowRef) -> str | None:
    """The first line of ``ref``'s module docstring, without a prefix naming the workflow."""
    try:
        docstring = ast.get_docstring(ast.parse(ref.path.read_bytes()), clean=True)
    except (OSError, SyntaxError, ValueError):
        return None
    lines = [line.strip() for line in (docstring or "").splitlines() if line.strip()]
    if not lines:
        return None
    names = "|".join(re.escape(n) for n in (f"{BUILTIN_PREFIX}{ref.name}", ref.name))
    line = re.sub(rf"\A(?:{names})\s*(?::|-|—)\s+", "", lines[0])
    if len(line) > SUMMARY_CHARS:
        line = line[: SUMMARY_CHARS - 1].rstrip() + "…"
    return line or None
