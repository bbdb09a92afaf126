"""``run retry``: a failed run runs again from the node whose failure ended it, as a fork,
through a real server, runners, the CLI and the client.

The workflow pays (an idempotent effect that writes a witness line), then checks a flag
file and fails while it is missing. After the failure the test writes the flag and retries:
the new run carries what came before the failed node (the payment is not made again) and
runs the failed node with the same input.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

CHECKOUT = """
from pathlib import Path

from pi_workflows import Workflow, action, compute, edge, idempotent_effect

WITNESS = Path({witness!r})


def pay(ctx):
    with WITNESS.open("a") as out:
        out.write(f"{{ctx.run_id}} pay\\n")
    return {{"paid": ctx.input["amount"]}}


def check(ctx):
    if not Path(ctx.input["flag"]).exists():
        raise RuntimeError("the warehouse is closed")
    return {{"shipped": ctx.outputs["pay"]["paid"]}}


workflow = Workflow(
    "checkout",
    start="pay",
    nodes={{
        "pay": action(pay, effect=idempotent_effect("pay")),
        "ship": compute(check),
        "done": compute(lambda ctx: {{"total": ctx.outputs["ship"]["shipped"]}}),
    }},
    edges=[edge("pay", "ship"), edge("ship", "done")],
)
"""


def _failed(server: ServerProcess, tmp_path: Path) -> tuple[str, Path, Path]:
    witness = tmp_path / "witness.log"
    flag = tmp_path / "open.flag"
    server.write_workflow("checkout", CHECKOUT.format(witness=str(witness)))
    run_id = server.start_run("checkout", {"amount": 7, "flag": str(flag)})
    failed = server.wait_status(run_id, {"failed", "completed"}, 60)
    assert failed["status"] == "failed", failed
    return run_id, witness, flag


def test_run_retry_forks_from_the_failed_node_with_the_same_input(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``pi-workflows run retry RUN``: a new run at the failed node's visit with RUN's
    input; the payment before it is carried (made once in all), the failed node and what
    follows run again and complete; ``run.forked`` records that it was a retry."""
    run_id, witness, flag = _failed(server, tmp_path)
    flag.write_text("open")
    shown = server.cli("run", "retry", run_id)
    assert shown.returncode == 0, shown.stderr
    assert f"from run {run_id} at node ship (visit 1)" in shown.stdout
    [(fork_id,)] = server.query("SELECT run_id FROM runs WHERE forked_from = ?", run_id)
    assert f"run show {fork_id}" in shown.stdout
    done = server.wait_status(fork_id, {"completed", "failed"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"total": 7}
    assert witness.read_text().splitlines() == [f"{run_id} pay"]  # carried, not paid again
    [(same_input,)] = server.query(
        "SELECT a.input_json = b.input_json FROM runs a, runs b WHERE a.run_id = ?"
        " AND b.run_id = ?",
        run_id,
        fork_id,
    )
    assert same_input == 1
    [(retry, node)] = server.query(
        "SELECT json_extract(data_json, '$.retry'), json_extract(data_json, '$.nodeId')"
        " FROM events WHERE run_id = ? AND type = 'run.forked'",
        fork_id,
    )
    assert (retry, node) == (1, "ship")
    assert server.diagnose() == []


def test_the_client_retries_and_a_repeated_key_adopts_the_same_fork(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``Client.retry`` with an idempotency key: sent twice, one fork, the second receipt
    adopted."""
    run_id, _, flag = _failed(server, tmp_path)
    flag.write_text("open")
    with server.client() as client:
        first = client.retry(run_id, idempotency_key="retry-1")
        again = client.retry(run_id, idempotency_key="retry-1")
    assert again.adopted
    assert again.get("runId") == first.get("runId")
    assert first.get("nodeId") == "ship"
    assert server.query("SELECT count(*) FROM runs WHERE forked_from = ?", run_id) == [(1,)]
    done = server.wait_status(str(first.get("runId")), {"completed", "failed"}, 60)
    assert done["status"] == "completed"


def test_a_run_that_did_not_fail_is_refused_with_what_to_use_instead(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Retrying a completed run is refused in one line that names ``run fork``; nothing is
    stored (no new run, no receipt)."""
    run_id, _, flag = _failed(server, tmp_path)
    flag.write_text("open")
    ok_id = server.start_run("checkout", {"amount": 1, "flag": str(flag)})
    assert server.wait_status(ok_id, {"completed", "failed"}, 60)["status"] == "completed"
    before = server.query("SELECT count(*) FROM runs")
    receipts = server.query("SELECT count(*) FROM server_commands")
    refused = server.cli("run", "retry", ok_id)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "it completed" in lines[0]
    assert f"run fork {ok_id} --from NODE" in lines[0]
    with server.client() as client, pytest.raises(RejectedError) as err:
        client.retry(ok_id)
    assert err.value.code == "invalidTransition"
    assert server.query("SELECT count(*) FROM runs") == before
    assert server.query("SELECT count(*) FROM server_commands") == receipts
    assert run_id != ok_id


LIMITED = """
from pi_workflows import Workflow, compute, edge

workflow = Workflow(
    "limited",
    start="a",
    max_steps=1,
    nodes={"a": compute(lambda ctx: {}), "b": compute(lambda ctx: {})},
    edges=[edge("a", "b")],
)
"""


def test_a_run_that_failed_with_no_failed_node_is_refused(server: ServerProcess) -> None:
    """A run that ran out of steps failed after its last node succeeded: there is no failed
    node to retry from, and the refusal names ``run restart`` and ``run fork``."""
    server.write_workflow("limited", LIMITED)
    run_id = server.start_run("limited", {})
    assert server.wait_status(run_id, {"failed", "completed"}, 60)["status"] == "failed"
    refused = server.cli("run", "retry", run_id)
    assert refused.returncode != 0
    assert "no node failed" in refused.stderr
    assert f"run restart {run_id}" in refused.stderr
    assert server.query("SELECT count(*) FROM runs WHERE forked_from = ?", run_id) == [(0,)]
