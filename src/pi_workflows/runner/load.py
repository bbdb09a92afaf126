"""Loading the run's workflow in the runner child, only if its sources are the recorded ones.

Runs in the runner child; never opens the database. ``load_recorded`` rebuilds the
``WorkflowRef`` from the launch envelope's source record (a file path or ``builtin:NAME``)
and calls ``sources.verify_and_load`` with the recorded root revision and mounted map, which
refuses changed code before it executes. It then compares the loaded definition's digest
with the recorded one. Every refusal is a ``Park`` (reason and one-line detail) for
``run.park``; nothing here talks to the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pi_workflows.engine import definition_digest, snapshot
from pi_workflows.runner.envelope import LaunchEnvelope
from pi_workflows.runner.errors import one_line
from pi_workflows.sources import (
    LoadedWorkflow,
    SourceIdentity,
    SourceKind,
    WorkflowLoadError,
    WorkflowNotFoundError,
    WorkflowSourceChanged,
    WorkflowSourceError,
    ref_for_identity,
    verify_and_load,
)

SOURCE_CHANGED: Final = "workflowSourceChanged"
LOAD_FAILED: Final = "workflowLoadFailed"

_CHANGE_WORDS: Final = {
    "changed": "changed",
    "missing": "is missing",
    "added": "was added (imported now, not when the run started)",
    "dropped": "was dropped (imported when the run started, not now)",
    "moved": "moved",
}


@dataclass(frozen=True)
class Park:
    """Why the run cannot continue with this code: the ``run.park`` payload."""

    reason: str
    detail: str

    def payload(self) -> dict[str, str]:
        """``{reason, detail}``."""
        return {"reason": self.reason, "detail": self.detail}


def _project(envelope: LaunchEnvelope) -> Path | None:
    return Path(envelope.project_dir) if envelope.project_dir else None


def load_recorded(envelope: LaunchEnvelope) -> LoadedWorkflow | Park:
    """The verified workflow of the envelope, or why the run must park."""
    record = envelope.source
    try:
        kind = SourceKind(record.kind)
    except ValueError:
        return Park(LOAD_FAILED, one_line(f"unknown source kind {record.kind!r}"))
    identity = SourceIdentity(kind, record.ref, record.revision)
    try:
        ref = ref_for_identity(identity, _project(envelope))
        loaded = verify_and_load(ref, identity, record.mounted)
    except WorkflowSourceChanged as exc:
        word = _CHANGE_WORDS.get(exc.reason, exc.reason)
        return Park(SOURCE_CHANGED, one_line(f"{exc.file} {word}"))
    except WorkflowNotFoundError:
        return Park(SOURCE_CHANGED, one_line(f"{record.ref} is missing"))
    except WorkflowLoadError as exc:
        return Park(LOAD_FAILED, one_line(str(exc)))
    except WorkflowSourceError as exc:
        return Park(LOAD_FAILED, one_line(f"{record.ref}: {exc}"))
    digest = definition_digest(snapshot(loaded.workflow))
    if digest != envelope.definition_digest:
        return Park(
            SOURCE_CHANGED,
            one_line(
                f"{record.ref} changed: the definition of workflow {loaded.workflow.name!r} "
                "differs from the one recorded when the run started"
            ),
        )
    return loaded
