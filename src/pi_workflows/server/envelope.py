"""A runner's launch envelope: what the server sends a new runner about its run.

``envelope_builder`` gives the function ``store.runners.launch`` calls inside the launch
transaction (what is kept in ``run_runners.launch_json``); ``environment`` adds the run's
recorded working directory and variables, which are sent but never stored per runner.
Reads only; never writes the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pi_workflows.otel import ids
from pi_workflows.protocol import PROTOCOL_VERSION
from pi_workflows.server.config import ServerConfig
from pi_workflows.server.evidence import evidence_dir
from pi_workflows.store import jsoncol, run_rows
from pi_workflows.store.database import Database, Transaction


def envelope_builder(
    config: ServerConfig, server_epoch: int
) -> Callable[[Transaction, int, int], dict[str, Any]]:
    def build(tx: Transaction, runner_epoch: int, generation: int) -> dict[str, Any]:
        row = tx.conn.execute(
            "SELECT r.run_id, r.workflow_name, r.definition_digest, r.input_hash, s.source_kind,"
            " s.source_ref, s.source_revision, s.project_dir, s.mounted_json,"
            " COALESCE(r.root_run_id, r.run_id)"
            " FROM runs r JOIN run_sources s USING (run_id) WHERE r.run_id = (SELECT run_id"
            " FROM run_runners WHERE runner_epoch = ?)",
            (runner_epoch,),
        ).fetchone()
        return {
            "runId": row[0],
            "generation": generation,
            "runnerEpoch": runner_epoch,
            "serverEpoch": server_epoch,
            "protocolVersion": PROTOCOL_VERSION,
            "workflowName": row[1],
            "projectDir": row[7],
            "source": {
                "kind": row[4],
                "ref": row[5],
                "revision": row[6],
                "mounted": jsoncol.loads(row[8]),
            },
            "definitionDigest": row[2],
            "inputHash": row[3],
            "leaseMs": config.lease_ms,
            # How long the runner lets a wait_event node's validate run on one event.
            "validateMs": int(config.validate_seconds * 1000),
            # The run tree's OpenTelemetry trace id: a node's ``ctx.trace_id``, and the
            # parent of what workflow code traces while export is on (otel.ids).
            "traceId": ids.trace_hex(ids.trace_id(row[9])),
            # Where the runner keeps an effect body's outcome until this server has it
            # (runner/evidence.py; server/evidence.py reads what a lost report left).
            "evidenceDir": str(evidence_dir(config.home, row[0])),
        }

    return build


def environment(db: Database, run_id: str) -> dict[str, Any]:
    """The run's recorded environment for its launch envelope (``workingDirectory`` and
    ``environment``). It is sent to the child but not kept in ``run_runners.launch_json``:
    it never changes for a run, and a copy per runner would store its values again."""
    recorded = run_rows.read_environment(db.conn, run_id)
    return {"workingDirectory": recorded.working_dir, "environment": recorded.variables}
