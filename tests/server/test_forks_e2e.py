"""Forks and upgrades through a real server: the crossings of issue 23.

A workflow writes a line to a file from each managed effect it applies, so the file is the
witness of how many times an effect really ran. Each test drives real runners, a real
server (killed with SIGKILL where a crash is the point) and real clients; ``state
diagnose`` is clean at the end of every test.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pi_workflows.client import (
    AsyncClient,
    ConnectionLostError,
    NotFoundError,
    RejectedError,
    ServerUnavailableError,
)

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

LEDGER = """
from pathlib import Path

from pi_workflows import Workflow, action, compute, edge, idempotent_effect, manual_effect

WITNESS = Path({witness!r})


def write(name):
    def run(ctx):
        with WITNESS.open("a") as out:
            out.write(f"{{ctx.run_id}} {{name}}\\n")
        return {{"wrote": name}}

    return run


workflow = Workflow(
    "ledger",
    start="a",
    nodes={{
        "a": compute(lambda ctx: {{"n": ctx.input["n"]}}),
        "pay": action(write("pay"), effect=idempotent_effect("pay")),
        "c": compute(lambda ctx: {{"total": ctx.outputs["a"]["n"] + {bonus}}}),
        "ship": action(write("ship"), effect=manual_effect("ship")),
        "done": compute(lambda ctx: {{"total": ctx.outputs["c"]["total"], "v": {bonus}}}),
    }},
    edges=[edge("a", "pay"), edge("pay", "c"), edge("c", "ship"), edge("ship", "done")],
)
"""

ASK = """
from pi_workflows import Workflow, agent, compute, edge

workflow = Workflow(
    "ask",
    start="a",
    nodes={{
        "a": compute(lambda ctx: {{"topic": "billing"}}),
        "classify": agent(
            prompt=lambda ctx: {prompt!r} + " " + ctx.outputs["a"]["topic"],
            expected_output='{{"route": "fix"}}',
        ),
        {extra}
    }},
    edges=[{edges}],
)
"""


def _ledger(server: ServerProcess, bonus: int = 1) -> Path:
    witness = server.root / "witness.log"
    server.write_workflow("ledger", LEDGER.format(witness=str(witness), bonus=bonus))
    return witness


def _lines(witness: Path) -> list[str]:
    return witness.read_text().splitlines() if witness.exists() else []


def _completed_ledger(server: ServerProcess) -> tuple[str, Path]:
    witness = _ledger(server)
    run_id = server.start_run("ledger", {"n": 41})
    done = server.wait_status(run_id, {"completed", "failed", "paused"})
    assert done["status"] == "completed", done
    assert _lines(witness) == [f"{run_id} pay", f"{run_id} ship"]
    return run_id, witness


def test_a_fork_never_applies_an_effect_before_its_fork_point_and_applies_one_after_it_once(
    server: ServerProcess,
) -> None:
    """Forking a completed run from c on changed code: pay (before c) is carried as a
    receipt and never written again; ship (after c) is written exactly once by the fork,
    which computes c and done on the new code."""
    source, witness = _completed_ledger(server)
    _ledger(server, bonus=100)  # the workflow changed since the source ran
    with server.client() as client:
        receipt = client.fork(source, "c")
    fork = str(receipt["runId"])
    assert (receipt["carriedAttempts"], receipt["carriedEffects"]) == (2, 1)
    assert [(e["nodeId"], e["appliedInSource"]) for e in receipt["effectsAhead"]] == [
        ("ship", True)
    ]
    done = server.wait_status(fork, {"completed", "failed", "paused"})
    assert done["output"] == {"total": 141, "v": 100}
    assert _lines(witness) == [f"{source} pay", f"{source} ship", f"{fork} ship"]
    effects = {(e["nodeId"], e["status"]) for e in done["effects"]}
    assert effects == {("pay", "applied"), ("ship", "applied")}
    carried = [a["nodeId"] for a in done["attempts"] if a["carriedFrom"]]
    assert carried == ["a", "pay"]
    assert done["lineage"]["forkedFrom"]["runId"] == source
    assert [f["runId"] for f in server.run(source)["lineage"]["forks"]] == [fork]
    assert server.diagnose() == []


def test_a_fork_killed_after_its_commit_is_created_once_and_adopted_on_retry(
    server_process: ServerProcess,
) -> None:
    """Window: the server dies (SIGKILL-like exit) right after the fork and its receipt
    commit, before the reply. The retry with the same key, to the next server, adopts the
    receipt: one fork exists, and it runs to its end applying ship once."""
    server_process.start()
    source, witness = _completed_ledger(server_process)
    server_process.stop()
    server_process.start(faults="command.run.fork.after_commit=exit")
    with (
        server_process.client(client_id="forker") as client,
        pytest.raises((ConnectionLostError, ServerUnavailableError)),
    ):
        client.fork(source, "c", idempotency_key="fork-once")
    server_process.wait_exit()
    server_process.start()
    with server_process.client(client_id="forker") as client:
        receipt = client.fork(source, "c", idempotency_key="fork-once")
    assert receipt.adopted
    forks = server_process.query("SELECT run_id FROM runs WHERE forked_from = ?", source)
    assert forks == [(receipt["runId"],)]
    fork = str(receipt["runId"])
    server_process.wait_status(fork, "completed")
    assert _lines(witness) == [f"{source} pay", f"{source} ship", f"{fork} ship"]
    assert server_process.diagnose() == []


def _ask(server: ServerProcess, prompt: str, *, with_done: bool = True) -> None:
    extra = '"done": compute(lambda ctx: ctx.outputs["classify"]),' if with_done else ""
    edges = 'edge("a", "classify")' + (', edge("classify", "done")' if with_done else "")
    server.write_workflow("ask", ASK.format(prompt=prompt, extra=extra, edges=edges))


def test_upgrading_a_run_waiting_on_an_agent_step_presents_the_new_prompt(
    server: ServerProcess,
) -> None:
    """A run waits on an agent step; its prompt changes in the file. The upgrade re-creates
    the step from the new code (the new prompt, a new request), the old request is
    cancelled, and an answer to the new one completes the run on the new code."""
    _ask(server, "Classify v1:")
    run_id = server.start_run("ask")
    first = server.wait_status(run_id, "waiting")["waitingOn"]
    assert first["request"]["prompt"].startswith("Classify v1: billing")
    _ask(server, "Classify v2:")
    with server.client() as client:
        plan = client.upgrade(run_id, dry_run=True)
        assert plan["possible"] is True
        assert plan["recreatesRequest"]["requestId"] == first["requestId"]
        assert server.run(run_id)["waitingOn"]["requestId"] == first["requestId"]  # dry
        done = client.upgrade(run_id)
    assert done["to"]["revision"] != done["from"]["revision"]
    again = server.wait_status(run_id, "waiting")["waitingOn"]
    assert again["requestId"] != first["requestId"]
    assert again["request"]["prompt"].startswith("Classify v2: billing")
    with server.client() as client:
        client.submit(again["requestId"], {"route": "fix"})
    assert server.wait_status(run_id, "completed")["output"] == {"route": "fix"}
    assert server.query(
        "SELECT status FROM interactive_requests WHERE request_id = ?", first["requestId"]
    ) == [("cancelled",)]
    events = server.query("SELECT COUNT(*) FROM events WHERE type = 'run.upgraded'")
    assert events == [(1,)]
    assert server.diagnose() == []


def test_upgrade_is_refused_when_the_node_the_run_waits_at_was_removed(
    server: ServerProcess,
) -> None:
    """The agent node the run waits at is removed from the file: the upgrade (and its dry
    run) is refused in one line naming the node, and the run still waits as it was."""
    _ask(server, "Classify:")
    run_id = server.start_run("ask")
    waiting = server.wait_status(run_id, "waiting")
    server.write_workflow(
        "ask",
        """
        from pi_workflows import Workflow, compute
        workflow = Workflow("ask", start="a", nodes={"a": compute(lambda ctx: 1)}, edges=[])
        """,
    )
    with server.client() as client:
        plan = client.upgrade(run_id, dry_run=True)
        assert plan["possible"] is False
        assert plan["problems"] == ["the run waits at node classify, which the new code removed"]
        with pytest.raises(RejectedError) as refused:
            client.upgrade(run_id)
    assert refused.value.code == "cannotCarry"
    assert "node classify, which the new code removed" in refused.value.message
    assert "\n" not in refused.value.message
    after = server.run(run_id)
    assert (after["status"], after["revision"]) == ("waiting", waiting["revision"])
    assert server.diagnose() == []


def test_fork_of_an_unknown_run_node_or_visit_is_refused_in_one_line(
    server: ServerProcess,
) -> None:
    """An unknown run is notFound; a node the workflow lacks, a node the run never reached
    and a visit it never made are each one rejected line; no run is created."""
    source, _ = _completed_ledger(server)
    before = server.query("SELECT COUNT(*) FROM runs")
    with server.client() as client:
        with pytest.raises(NotFoundError, match="no run with id run_nope"):
            client.fork("run_nope", "c")
        for node, visit, words in [
            ("zz", None, "workflow ledger has no node zz"),
            ("c", 4, "there is no visit 4"),
        ]:
            with pytest.raises(RejectedError) as refused:
                client.fork(source, node, visit=visit)
            assert words in refused.value.message
            assert "\n" not in refused.value.message
    assert server.query("SELECT COUNT(*) FROM runs") == before
    assert server.diagnose() == []


def test_a_fork_with_a_new_input_keeps_the_carried_outputs_and_the_async_client_forks_too(
    server: ServerProcess,
) -> None:
    """`AsyncClient.fork` with another input: the fork's input is the new one, the outputs
    it carried stay as the source computed them (the documented rule), and the nodes after
    the fork point read the new input."""
    source, witness = _completed_ledger(server)

    async def fork() -> dict[str, object]:
        async with AsyncClient(server.home, autostart=False) as client:
            receipt = await client.fork(source, "c", input={"n": 1000})
            return dict(receipt.body)

    receipt = asyncio.run(fork())
    done = server.wait_status(str(receipt["runId"]), "completed")
    assert done["input"] == {"n": 1000}
    assert done["output"] == {"total": 42, "v": 1}  # a (n = 41) was carried, not recomputed
    assert len(_lines(witness)) == 3
    assert server.diagnose() == []
