"""Live settings: each run's settings document, its numbered changes, and what attempts see.

Owns ``runs.settings_json`` / ``runs.settings_change`` and the ``run_settings`` table. A
run whose workflow declares settings (its definition snapshot's ``settingsSchema``) starts
with the snapshot's ``settingsDefaults`` as change 0; every change is an RFC 6902 JSON
Patch, applied in one transaction with its number (the next one), its ``run_settings`` row
and its ``settings.changed`` event, after the result is checked against the schema: a bad
patch or an invalid result changes nothing. An attempt records the change number the run
had when the attempt started (``attempts.start``), so a change reaches only attempts that
start after it. A settings change never moves the run's execution revision (the revision
rule, ``store/runs.py``): a runner reads settings only from its own fenced proposals'
replies, never from state it keeps, so a change made while it works cannot make its next
proposal conflict.

Restart, fork and upgrade carry settings by ``carried``: settings someone chose (``chosen``)
stay when the code they run next accepts them; otherwise a restart and a fork start from
that code's defaults, and an upgrade is refused (``upgrade_problem``); settings nobody chose
follow the code's defaults. Never runs workflow code.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from pi_workflows.protocol.canonical import canonical_json
from pi_workflows.protocol.json_patch import PatchError, apply_patch
from pi_workflows.protocol.json_schema import value_problem
from pi_workflows.store import faults, jsoncol
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.errors import SettingsConflictError, SettingsRefusedError
from pi_workflows.store.runs import RunRow, read_run, write_run

MAX_SETTINGS_BYTES: Final = 16 * 1024
"""The largest settings document, in bytes of canonical JSON (as ``authoring.settings``)."""

MAX_CHANGES: Final = 1000
"""The most changes one run's settings may have (each keeps its whole document)."""

CHANGED_EVENT: Final = "settings.changed"
"""The event of a change; in ``runs.SETTINGS_EVENTS`` (it leaves the execution revision)."""

CHANGERS: Final = ("person", "model")
"""Who may send a change; a workflow's ``settingsChangedBy`` names which of them it allows."""

faults.declare("settings.change", "a run's settings change: its document, number, row, event")
faults.declare(
    "settings.reevaluate", "a settings_route attempt takes the run's newer settings to decide"
)


@dataclass(frozen=True)
class Declared:
    """What a definition snapshot declares about settings."""

    schema: dict[str, Any]
    defaults: Any
    changed_by: tuple[str, ...]


def declared(definition: dict[str, Any]) -> Declared | None:
    """The settings a definition snapshot declares, or ``None``."""
    schema = definition.get("settingsSchema")
    if not isinstance(schema, dict):
        return None
    who = definition.get("settingsChangedBy")
    changed_by = tuple(str(w) for w in who) if isinstance(who, list) else ("person",)
    return Declared(schema, definition.get("settingsDefaults"), changed_by)


@dataclass(frozen=True)
class Change:
    """One ``run_settings`` row: change ``number`` made ``settings`` (``None``: none declared)."""

    number: int
    settings: Any
    patch: Any
    changed_by: str
    client_id: str | None
    at: int

    def to_json(self) -> dict[str, Any]:
        return {
            "change": self.number,
            "settings": self.settings,
            "patch": self.patch,
            "changedBy": self.changed_by,
            "at": self.at,
        }


def _insert(
    tx: Transaction,
    run_id: str,
    number: int,
    document: Any,
    changed_by: str,
    *,
    patch: Any = None,
    client_id: str | None = None,
) -> None:
    text = None if document is None else jsoncol.dumps(document)
    tx.conn.execute(
        "UPDATE runs SET settings_json = ?, settings_change = ? WHERE run_id = ?",
        (text, number, run_id),
    )
    tx.conn.execute(
        "INSERT INTO run_settings (run_id, change_no, settings_json, patch_json, changed_by,"
        " client_id, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            run_id, number, text, None if patch is None else jsoncol.dumps(patch), changed_by,
            client_id, tx.now,
        ),
    )  # fmt: skip


def initial(tx: Transaction, run_id: str, definition: dict[str, Any], carried: Any = None) -> None:
    """Give a new run (inside its insert) its first settings, change 0: ``carried`` (a
    fork's, already checked by ``carried``) or the definition's defaults. A run whose
    workflow declares no settings gets no row and ``settings_json`` NULL."""
    decl = declared(definition)
    if decl is None:
        return
    document = decl.defaults if carried is None else carried
    _insert(tx, run_id, 0, document, "defaults" if carried is None else "fork")


def current(conn: sqlite3.Connection, run_id: str) -> tuple[Any, int]:
    """The run's settings document (``None``: none declared) and its change number."""
    row = conn.execute(
        "SELECT settings_json, settings_change FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    if row is None:
        return None, 0
    return jsoncol.loads(row[0]), int(row[1])


def of_change(conn: sqlite3.Connection, run_id: str, number: int | None) -> Any:
    """The settings document change ``number`` of the run made (``None`` when the run has no
    such change: its workflow declares no settings, or a fork's carried attempt)."""
    if number is None:
        return None
    row = conn.execute(
        "SELECT settings_json FROM run_settings WHERE run_id = ? AND change_no = ?",
        (run_id, number),
    ).fetchone()
    return None if row is None else jsoncol.loads(row[0])


def history(conn: sqlite3.Connection, run_id: str, limit: int = 20) -> list[Change]:
    """The run's newest ``limit`` changes, oldest first."""
    rows = conn.execute(
        "SELECT change_no, settings_json, patch_json, changed_by, client_id, at"
        " FROM run_settings WHERE run_id = ? ORDER BY change_no DESC LIMIT ?",
        (run_id, limit),
    ).fetchall()
    return [
        Change(row[0], jsoncol.loads(row[1]), jsoncol.loads(row[2]), row[3], row[4], row[5])
        for row in reversed(rows)
    ]


def definition_of(conn: sqlite3.Connection, run: RunRow) -> dict[str, Any]:
    """The definition snapshot the run executes now (``{}`` when it is not stored)."""
    row = conn.execute(
        "SELECT data FROM blobs WHERE digest = ?", (run.definition_digest,)
    ).fetchone()
    value = None if row is None else jsoncol.loads(bytes(row[0]).decode("utf-8"))
    return value if isinstance(value, dict) else {}


def problem(decl: Declared, document: Any) -> str | None:
    """Why ``document`` cannot be the settings of ``decl`` (one line), or ``None``."""
    size = len(canonical_json(document))
    if size > MAX_SETTINGS_BYTES:
        return f"the settings would be {size} bytes of JSON; the limit is {MAX_SETTINGS_BYTES}"
    return value_problem(decl.schema, document, "settings")


@dataclass(frozen=True)
class Changed:
    """A committed change: its number, the new document and the run's revision."""

    run_id: str
    change: int
    settings: Any
    revision: int


def change(
    db: Database,
    run_id: str,
    patch: Any,
    *,
    changed_by: str = "person",
    expected_change: int | None = None,
    client_id: str | None = None,
) -> Changed:
    """Apply ``patch`` to the run's settings as change number ``current + 1``, in one
    transaction with its row and its ``settings.changed`` event.

    Refused (``SettingsRefusedError``, nothing changed) when the workflow declares no
    settings, ``changed_by`` is not allowed by its ``settingsChangedBy``, the patch is
    malformed or does not apply, the result breaks the schema or the size bound, or the run
    already has ``MAX_CHANGES`` changes; ``SettingsConflictError`` when ``expected_change``
    is not the current number. Any run status is allowed: a change to an ended run is what
    its restart or fork starts from.
    """
    if changed_by not in CHANGERS:
        raise ValueError(f"changed_by must be one of {CHANGERS}, not {changed_by!r}")
    made: list[Changed] = []
    data: dict[str, Any] = {"changedBy": changed_by}

    def apply(tx: Transaction, run: RunRow) -> None:
        decl = declared(definition_of(tx.conn, run))
        document, number = current(tx.conn, run_id)
        if decl is None:
            raise SettingsRefusedError(
                run_id,
                f"workflow {run.workflow_name!r} declares no settings, so run {run_id} has none"
                " to change (a workflow declares them with Workflow(settings=...))",
            )
        if changed_by not in decl.changed_by:
            allowed = " and ".join(decl.changed_by) or "nobody"
            raise SettingsRefusedError(
                run_id,
                f"workflow {run.workflow_name!r} lets {allowed} change its settings, not the"
                f" {changed_by} (Workflow(settings_changed_by=...))",
            )
        if expected_change is not None and expected_change != number:
            raise SettingsConflictError(run_id, expected_change, number)
        if number >= MAX_CHANGES:
            raise SettingsRefusedError(
                run_id,
                f"run {run_id}'s settings changed {number} times; the limit is {MAX_CHANGES}"
                " (fork or restart it to go on changing them)",
            )
        try:
            after = apply_patch(document, patch)
        except PatchError as exc:
            raise SettingsRefusedError(run_id, f"the settings patch is refused: {exc}") from None
        wrong = problem(decl, after)
        if wrong is not None:
            raise SettingsRefusedError(
                run_id,
                f"the settings patch is refused: the result does not match the settings schema"
                f" of workflow {run.workflow_name!r}: {wrong}",
            )
        _insert(tx, run_id, number + 1, after, changed_by, patch=patch, client_id=client_id)
        data.update({"change": number + 1, "patch": patch})
        made.append(Changed(run_id, number + 1, after, 0))

    result = write_run(
        db,
        run_id,
        name="settings.change",
        event_type=CHANGED_EVENT,
        event_data=data,
        claim=None,
        apply=apply,
    )
    return Changed(run_id, made[0].change, made[0].settings, result.revision)


CHOSEN_BY: Final = ("person", "model", "fork")
"""Who makes a run's settings its own choice (a fork's carry is its source's choice): such
settings stay through a restart, a fork and an upgrade while the code accepts them."""


def chosen(conn: sqlite3.Connection, run_id: str) -> bool:
    """Whether anyone chose the run's settings (a change by a person or the model, or a
    fork's carry), rather than their being a workflow's defaults."""
    marks = ",".join("?" * len(CHOSEN_BY))
    row = conn.execute(
        f"SELECT 1 FROM run_settings WHERE run_id = ? AND changed_by IN ({marks}) LIMIT 1",
        (run_id, *CHOSEN_BY),
    ).fetchone()
    return row is not None


def carried(
    conn: sqlite3.Connection, run_id: str, definition: dict[str, Any]
) -> tuple[Any, str | None]:
    """The settings run ``run_id``'s next code (``definition``) starts from, and a note when
    chosen settings are not kept: settings someone chose (``chosen``) when that code
    declares settings and accepts them, else that code's defaults (``None`` when it
    declares none)."""
    decl = declared(definition)
    document, number = current(conn, run_id)
    if decl is None:
        return None, None if document is None else "the workflow declares no settings now"
    if document is None or not chosen(conn, run_id):
        return decl.defaults, None
    wrong = problem(decl, document)
    if wrong is None:
        return document, None
    return decl.defaults, (
        f"the settings of change {number} do not match the workflow's settings schema ({wrong});"
        " its defaults are used"
    )


def for_fork(
    conn: sqlite3.Connection, source_id: str, definition: dict[str, Any]
) -> tuple[Any, str | None]:
    """What a fork of ``source_id`` running ``definition`` starts with: the source's chosen
    settings (``carried``), or ``None`` for the definition's defaults; and the note."""
    document, note = carried(conn, source_id, definition)
    if note is not None or not chosen(conn, source_id):
        return None, note
    return document, None


def rebase(tx: Transaction, run_id: str, definition: dict[str, Any], why: str) -> str | None:
    """Inside a restart's or an upgrade's run write: make the run's settings the ones its new
    code (``definition``) starts from (``carried``), as a new change by ``why`` when they
    differ; return the note (``None`` when they were kept as they are)."""
    document, number = current(tx.conn, run_id)
    after, note = carried(tx.conn, run_id, definition)
    if after is None and document is None:
        return None
    if (
        after is not None
        and document is not None
        and canonical_json(after) == canonical_json(document)
    ):
        return note
    _insert(tx, run_id, number + 1, after, why)
    return note or "the settings changed with the workflow's code"


def upgrade_problem(
    conn: sqlite3.Connection, run_id: str, definition: dict[str, Any]
) -> str | None:
    """Why an upgrade to ``definition`` cannot carry the run's settings, or ``None``: changed
    settings that the new settings schema refuses are the person's choice, never dropped."""
    decl = declared(definition)
    document, number = current(conn, run_id)
    if decl is None or document is None or not chosen(conn, run_id):
        return None
    wrong = problem(decl, document)
    if wrong is None:
        return None
    return (
        f"the run's settings (change {number}) do not match the new settings schema: {wrong};"
        f" change them first (pi-workflows run settings {run_id} --patch ...)"
    )


def run_view(conn: sqlite3.Connection, run_id: str, *, full: bool = False) -> dict[str, Any] | None:
    """The settings of a run's view: document, change number, who may change them and the
    newest changes (who, when, the patch; with ``full`` each one's document and the
    schema, as ``run.settings`` answers); ``None`` when the workflow declares no settings
    and the run never had any."""
    run = read_run(conn, run_id)
    document, number = current(conn, run_id)
    decl = declared(definition_of(conn, run))
    if decl is None and document is None and number == 0:
        return None
    changes = [c.to_json() for c in history(conn, run_id, 20 if full else 5)]
    if not full:
        for entry in changes:
            entry.pop("settings")
    view: dict[str, Any] = {
        "settings": document,
        "change": number,
        "declared": decl is not None,
        "changedBy": [] if decl is None else list(decl.changed_by),
        "history": changes,
    }
    if full:
        view["schema"] = None if decl is None else decl.schema
    return view


__all__ = [
    "CHANGED_EVENT",
    "MAX_CHANGES",
    "MAX_SETTINGS_BYTES",
    "Change",
    "Changed",
    "Declared",
    "carried",
    "change",
    "chosen",
    "for_fork",
    "current",
    "declared",
    "history",
    "initial",
    "of_change",
    "rebase",
    "run_view",
    "upgrade_problem",
]


REEVALUATED_EVENT: Final = "node.reevaluated"
"""A ``settings_route`` attempt's route was not committed: the settings changed since it
started, so its runner evaluates it again with the new ones (``reevaluate``)."""


def stale_route(conn: sqlite3.Connection, run_id: str, attempt_id: str) -> bool:
    """Whether ``attempt_id`` (the run's running attempt) started with settings older than
    the run's: a ``settings_route`` attempt's route then waits for a new evaluation."""
    row = conn.execute(
        "SELECT a.settings_change, r.settings_change FROM node_attempts a"
        " JOIN runs r ON r.run_id = a.run_id"
        " WHERE a.attempt_id = ? AND a.run_id = ? AND a.status = 'running'",
        (attempt_id, run_id),
    ).fetchone()
    return row is not None and row[0] is not None and row[0] != row[1]


def reevaluate(
    db: Database, claim: Any, attempt_id: str, *, expected_revision: int | None = None
) -> tuple[int, Any]:
    """Record, under the runner's ``claim``, that its running ``settings_route`` attempt is
    evaluated again with the run's current settings (the attempt's ``settings_change``
    becomes the current number; event ``node.reevaluated``); the number and document."""
    run_id = claim.run_id
    found: list[tuple[int, Any]] = []
    data: dict[str, Any] = {"attemptId": attempt_id}

    def apply(tx: Transaction, run: RunRow) -> None:
        row = tx.conn.execute(
            "SELECT settings_change, node_id FROM node_attempts WHERE attempt_id = ?"
            " AND run_id = ? AND status = 'running'",
            (attempt_id, run_id),
        ).fetchone()
        if row is None:
            raise SettingsRefusedError(run_id, f"attempt {attempt_id} is not running")
        document, number = current(tx.conn, run_id)
        tx.conn.execute(
            "UPDATE node_attempts SET settings_change = ? WHERE attempt_id = ?",
            (number, attempt_id),
        )
        data.update({"nodeId": row[1], "from": row[0], "to": number})
        found.append((number, document))

    write_run(
        db,
        run_id,
        name="settings.reevaluate",
        event_type=REEVALUATED_EVENT,
        event_data=data,
        claim=claim,
        expected_revision=expected_revision,
        apply=apply,
    )
    return found[0]
