"""Printing results as `--json` and values as plain one-line strings, without rich.

Owns `print_json` (the server's camelCase data with sorted keys, two-space indents and a
trailing newline) and `plain` (a value as one string: `-` for None, strings as they are,
else compact JSON). `output.py` re-exports both beside the rich renderers; a command imports
them from here so that printing JSON never imports rich (docs/performance.md, "CLI start").
Never contacts a server.
"""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ["plain", "print_json"]


def print_json(value: Any) -> None:
    """Print `value` as JSON: sorted keys, indented, UTF-8."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def plain(value: Any) -> str:
    """A value as one plain string: `-` for None, strings as they are, else compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
