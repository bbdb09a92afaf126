"""Source identity: which exact workflow code a run started from.

A file source is ``(absolute path, sha256 of its bytes)``; a built-in is
``(builtin:NAME, revision)`` where the revision is the sha256 of the shipped file's bytes.
Together with the mounted-source map (helper file -> sha256) it is recorded when a run
starts and checked before any code runs again. Pure values; reading files is the loader's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pi_workflows.authoring import JsonObject


class SourceKind(StrEnum):
    """Whether a workflow came from a file on disk or ships with pi-workflows."""

    FILE = "file"
    BUILTIN = "builtin"


@dataclass(frozen=True)
class SourceIdentity:
    """The identity of a workflow's root source.

    ``locator`` is the absolute path (``FILE``) or ``builtin:NAME`` (``BUILTIN``);
    ``sha256`` is the hex digest of the exact bytes compiled.
    """

    kind: SourceKind
    locator: str
    sha256: str

    @property
    def revision(self) -> str:
        """The built-in revision (the sha256 of its file); the same value for files."""
        return self.sha256

    def to_json(self) -> JsonObject:
        """``{"kind", "locator", "sha256"}`` for the launch envelope and the store."""
        return {"kind": self.kind.value, "locator": self.locator, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: JsonObject) -> SourceIdentity:
        """The inverse of ``to_json``; raises ``ValueError`` for a malformed object."""
        kind, locator, digest = data.get("kind"), data.get("locator"), data.get("sha256")
        if not isinstance(kind, str) or not isinstance(locator, str) or not isinstance(digest, str):
            raise ValueError("a source identity needs string kind, locator and sha256")
        return cls(SourceKind(kind), locator, digest)
