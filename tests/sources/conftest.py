"""Fixtures for source tests: a throwaway project and user workflow directory."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Project:
    """A project directory with ``.pi/workflows`` and a separate user workflow dir."""

    root: Path
    user_dir: Path

    @property
    def workflows(self) -> Path:
        return self.root / ".pi" / "workflows"

    def write(self, relative: str, text: str, *, base: Path | None = None) -> Path:
        """Write dedented ``text`` to ``relative`` under ``base`` (default the workflows dir)."""
        path = (base if base is not None else self.workflows) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    def workflow(self, name: str, value: str = "1", *, base: Path | None = None) -> Path:
        """Write a minimal valid ``NAME.workflow.py`` whose single node returns ``value``."""
        return self.write(
            f"{name}.workflow.py",
            f"""
            from pi_workflows import Workflow, compute

            workflow = Workflow({name!r}, "a", {{"a": compute(lambda ctx: {value})}})
            """,
            base=base,
        )


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """An empty project and user workflow directory inside the test's temp dir."""
    root = tmp_path / "project"
    user_dir = tmp_path / "home" / ".pi" / "agent" / "workflows"
    (root / ".pi" / "workflows").mkdir(parents=True)
    user_dir.mkdir(parents=True)
    return Project(root, user_dir)
