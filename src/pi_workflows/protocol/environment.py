"""A run's environment: the variables a client records by default, their bounds, one check.

Owns the rule's shared parts (docs/authoring.md, "Environment"): which variables of the
starting client's environment `run.start` records by default (`DEFAULT_VARIABLES`, and every
name starting with one of `DEFAULT_PREFIXES`), the bounds on a recorded environment, and
`environment_problem`, the one check both the clients (before anything is sent) and the
server (before anything is stored) apply. Pure: it reads only the mappings it is given,
never `os.environ` itself, and never logs a value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = [
    "DEFAULT_PREFIXES",
    "DEFAULT_VARIABLES",
    "MAX_ENVIRONMENT_BYTES",
    "MAX_VARIABLES",
    "RESERVED_PREFIX",
    "environment_problem",
    "snapshot",
]

DEFAULT_VARIABLES: Final = (
    "HOME",
    "LANG",
    "LANGUAGE",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "TMPDIR",
    "TZ",
    "USER",
    "VIRTUAL_ENV",
)
"""Variables `run.start` records from the starting client's environment when they are set:
what a program needs to find its tools, its home, its language and its time zone."""

DEFAULT_PREFIXES: Final = ("LC_",)
"""Every variable whose name starts with one of these is recorded too (the locale's)."""

RESERVED_PREFIX: Final = "PI_WORKFLOWS_"
"""The server's own settings: never recorded, never passed to a run."""

MAX_VARIABLES: Final = 128
"""Most variables one run's environment may hold."""

MAX_ENVIRONMENT_BYTES: Final = 64 * 1024
"""Largest environment, counted as the UTF-8 bytes of every `NAME=VALUE`."""

MAX_NAME_CHARS: Final = 128
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _recorded_by_default(name: str) -> bool:
    return name in DEFAULT_VARIABLES or name.startswith(DEFAULT_PREFIXES)


def snapshot(environ: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a client records for a run: the default variables set in `environ`,
    then `extra` (a caller's own names and values) over them."""
    recorded = {
        name: value
        for name, value in environ.items()
        if _recorded_by_default(name) and not name.startswith(RESERVED_PREFIX)
    }
    recorded.update(extra or {})
    return dict(sorted(recorded.items()))


def name_problem(name: object) -> str | None:
    """Why `name` cannot be an environment variable of a run, or None."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > MAX_NAME_CHARS:
        shown = name if isinstance(name, str) else type(name).__name__
        return (
            f"{str(shown)[:40]!r} is not an environment variable name (letters, digits and _,"
            f" not starting with a digit, at most {MAX_NAME_CHARS} characters)"
        )
    if name.startswith(RESERVED_PREFIX):
        return (
            f"{name} is one of the server's own PI_WORKFLOWS_* settings; those are never"
            " passed to a run"
        )
    return None


def environment_problem(variables: Mapping[str, object]) -> str | None:
    """One line saying what is wrong with a run's environment, or None when it may be kept:
    every name valid and not the server's, every value a string without NUL, at most
    `MAX_VARIABLES` variables and `MAX_ENVIRONMENT_BYTES` bytes in all."""
    if len(variables) > MAX_VARIABLES:
        return (
            f"the run's environment has {len(variables)} variables; the limit is"
            f" {MAX_VARIABLES}: pass fewer variables"
        )
    size = 0
    for name, value in variables.items():
        problem = name_problem(name)
        if problem is not None:
            return problem
        if not isinstance(value, str):
            return f"the value of the environment variable {name} must be a string"
        if "\0" in value:
            return f"the value of the environment variable {name} contains a NUL character"
        size += len(name.encode()) + len(value.encode("utf-8", "surrogateescape")) + 1
    if size > MAX_ENVIRONMENT_BYTES:
        return (
            f"the run's environment is {size} bytes; the limit is"
            f" {MAX_ENVIRONMENT_BYTES // 1024} KiB ({MAX_ENVIRONMENT_BYTES} bytes):"
            " pass fewer or shorter variables"
        )
    return None
