"""Where this installation's Pi package is: the pi-workflows extension and skill for Pi.

The Pi package (docs/pi.md) is a directory holding a `package.json` whose `pi` manifest names
the extension (`extension/index.ts`) and the skills (`skills/`), as Pi's docs/packages.md
describes. An installed wheel ships it as package data, `pi_workflows/integrations/pi`; a
source checkout (and an editable install of one) has it at `integrations/pi`. Used by the
CLI (`pi install`, `pi doctor`) and by the server (the extension its headless agents load).

Pure lookups on the file system: this module never writes, starts or connects to anything,
and imports nothing else of pi_workflows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final

__all__ = [
    "PACKAGE_NAME",
    "bundled_cli",
    "extension_entry",
    "is_pi_workflows_package",
    "package_dir",
    "skill_file",
]

PACKAGE_NAME: Final = "pi-workflows-pi-extension"
"""The `name` in the Pi package's `package.json`: how a registered package is recognised."""

_HERE: Final = Path(__file__).resolve().parent
_SHIPPED: Final = _HERE / "integrations" / "pi"
"""In an installed wheel: the package data beside this module."""
_CHECKOUT: Final = _HERE.parents[1] / "integrations" / "pi"
"""In a source checkout: `<checkout>/integrations/pi` (this module is `src/pi_workflows/`)."""
_SITE_DIRS: Final = frozenset({"site-packages", "dist-packages"})


def is_pi_workflows_package(path: Path) -> bool:
    """Whether the directory `path` is a pi-workflows Pi package (its `package.json` names
    `PACKAGE_NAME`). False for anything missing or unreadable."""
    try:
        manifest = json.loads((path / "package.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("name") == PACKAGE_NAME


def package_dir() -> Path | None:
    """This installation's Pi package directory: the wheel's copy, else the source
    checkout's; None when neither is there (a broken installation)."""
    for candidate in (_SHIPPED, _CHECKOUT):
        if is_pi_workflows_package(candidate) and (candidate / "extension" / "index.ts").is_file():
            return candidate
    return None


def extension_entry() -> Path | None:
    """The extension's entry point (`<package>/extension/index.ts`), or None."""
    package = package_dir()
    return None if package is None else package / "extension" / "index.ts"


def skill_file() -> Path | None:
    """The skill's `SKILL.md` (`<package>/skills/pi-workflows/SKILL.md`), or None."""
    package = package_dir()
    if package is None:
        return None
    path = package / "skills" / "pi-workflows" / "SKILL.md"
    return path if path.is_file() else None


def bundled_cli(package: Path) -> Path | None:
    """The `pi-workflows` of the Python installation the Pi package `package` belongs to: the
    CLI the extension runs when `PI_WORKFLOWS_CLI` names none (the extension's `bundledCli`
    in `paths.ts` is the same rule).

    - A wheel's copy, `<prefix>/lib/pythonX.Y/site-packages/pi_workflows/integrations/pi`:
      `<prefix>/bin/pi-workflows` (a virtual environment, pipx, `uv tool`, `pip --user`).
    - A source checkout's, `<checkout>/integrations/pi`: the Makefile's virtual environment's
      `<checkout>/.venv/bin/pi-workflows`.

    Only an executable file counts; None when there is none (the extension then looks for
    `pi-workflows` on PATH).
    """
    pkg = Path(os.path.abspath(package))
    candidates: list[Path] = []
    is_package_dir = pkg.name == "pi" and pkg.parent.name == "integrations"
    site = pkg.parents[2] if len(pkg.parents) > 2 else pkg
    if is_package_dir and pkg.parent.parent.name == "pi_workflows" and site.name in _SITE_DIRS:
        prefix = site.parents[2] if len(site.parents) > 2 else site
        candidates.append(prefix / "bin" / "pi-workflows")
    if is_package_dir:
        candidates.append(pkg.parent.parent / ".venv" / "bin" / "pi-workflows")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None
