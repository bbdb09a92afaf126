"""Fixtures for runner tests: a throwaway project and HOME in the test's temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from .peer import Project, make_project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """An empty project (with ``.pi/workflows``) and a HOME for the child."""
    return make_project(tmp_path)
