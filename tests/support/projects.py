"""Tiny real projects for the built-in workflows' tests: git repositories in a temp dir.

``calc_project`` writes a Python project whose ``make test`` fails twice over (``add``
subtracts, and ``describe`` uses the wrong word) until both are fixed; ``FIRST_FIX`` and
``fix_from_failure`` are the edits the tests' model makes. ``git`` runs git in a directory
with a fixed identity, so commits work on any machine.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

CALC = """
def add(a, b):
    return a - b


WORD = "difference"


def describe(a, b):
    return f"{WORD} of {a} and {b} is {add(a, b)}"
"""

CHECK = """
import sys

from calc import add, describe

if add(2, 3) != 5:
    sys.exit(f"FAIL: add(2, 3) should be 5, got {add(2, 3)}")
first = describe(2, 3).split()[0]
if first != "sum":
    sys.exit(f"FAIL: describe(2, 3) starts with {first!r}; expected the word 'sum'")
print("ok: 2 checks passed")
"""

MAKEFILE = "test:\n\tpython3 check.py\n"

FIRST_FIX = ("return a - b", "return a + b")
"""The implementing step's edit (old text, new text): it fixes ``add`` only."""

_FAILURE = re.compile(r"starts with '(\w+)'; expected the word '(\w+)'")


def fix_from_failure(text: str) -> tuple[str, str]:
    """The fix round's edit, read from the failure output it was sent: the wrong word (in
    quotes, as in the file) and the right one. Fails when the text has no such failure."""
    match = _FAILURE.search(text)
    assert match, f"no describe failure in {text[-2000:]!r}"
    return f'"{match.group(1)}"', f'"{match.group(2)}"'


def git(directory: Path, *args: str) -> str:
    """Run git in ``directory`` with a fixed author; returns its stdout."""
    done = subprocess.run(
        [
            "git", "-c", "user.name=Test", "-c", "user.email=test@example.invalid",
            "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args,
        ],
        cwd=directory, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout


def calc_project(directory: Path) -> Path:
    """Write the calc project into ``directory`` and commit it; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "calc.py").write_text(textwrap.dedent(CALC).lstrip())
    (directory / "check.py").write_text(textwrap.dedent(CHECK).lstrip())
    (directory / "Makefile").write_text(MAKEFILE)
    (directory / ".gitignore").write_text("__pycache__/\n")  # as a real project keeps it
    git(directory, "init", "-q")
    git(directory, "add", "-A")
    git(directory, "commit", "-q", "-m", "calc")
    return directory


def apply_edit(path: Path, old: str, new: str) -> None:
    """Replace the one occurrence of ``old`` in ``path`` by ``new`` (as Pi's edit tool)."""
    text = path.read_text()
    assert text.count(old) == 1, (old, text)
    path.write_text(text.replace(old, new))


REVIEWED = {
    "alpha.py": ("def alpha():\n    return 1\n", "def alpha():\n    return 1  # TODO alpha\n"),
    "beta.py": (
        "def beta():\n    return 2\n",
        "def beta():\n    x = 2\n    return x  # TODO beta\n",
    ),
    "gamma.py": (None, "def gamma():\n\n    return 3  # TODO gamma\n"),
}
"""Three files and their change: two edited, one new; each new version has one TODO line."""


def review_project(directory: Path) -> Path:
    """A repository whose work tree changes three files against HEAD (``REVIEWED``) and
    deletes a fourth; the new file is staged so ``git diff HEAD`` shows it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, (before, _) in REVIEWED.items():
        if before is not None:
            (directory / name).write_text(before)
    (directory / "old.py").write_text("OLD = True\n")
    git(directory, "init", "-q")
    git(directory, "add", "-A")
    git(directory, "commit", "-q", "-m", "before")
    for name, (_, after) in REVIEWED.items():
        (directory / name).write_text(after)
    (directory / "old.py").unlink()
    git(directory, "add", "gamma.py")
    return directory


def todo_line(diff: str) -> tuple[str, int]:
    """The reviewed file and the new-file line number of the one added ``TODO`` line in a
    unified diff of one file (what the tests' model reports)."""
    file = ""
    line = 0
    for text in diff.splitlines():
        if text.startswith("+++ "):
            file = text[len("+++ b/") :]
        elif text.startswith("@@"):
            match = re.search(r"\+(\d+)", text)
            assert match, text
            line = int(match.group(1)) - 1
        elif text.startswith("+"):
            line += 1
            if "TODO" in text:
                return file, line
        elif not text.startswith("-"):
            line += 1
    raise AssertionError(f"no added TODO line in {diff!r}")
