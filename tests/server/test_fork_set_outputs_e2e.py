"""``run fork --set NODE=JSON``: a fork whose carried outputs a person replaced (LangGraph's
``update_state``), checked by each node's output contract, through a real server, runners,
the CLI and the client.

The workflow computes ``a``, asks a checkpoint ``ask`` whose answer has a JSON Schema, and
``report`` combines both. The tests fork from ``report`` with edited outputs of the two
carried nodes and check what the fork's later node read, what the store recorded, and
that a refused value stores nothing.
"""

from __future__ import annotations

import json

import pytest

from pi_workflows.client import RejectedError

from support.server import ServerProcess

pytestmark = pytest.mark.timeout(120)

ROUTE = """
from pi_workflows import Workflow, checkpoint, compute, edge

ANSWER = {
    "type": "object",
    "properties": {"route": {"enum": ["fix", "ignore"]}},
    "required": ["route"],
}

workflow = Workflow(
    "route",
    start="a",
    nodes={
        "a": compute(lambda ctx: {"n": 1}),
        "ask": checkpoint("fix or ignore?", answer=ANSWER),
        "report": compute(lambda ctx: {"n": ctx.outputs["a"]["n"],
                                       "route": ctx.outputs["ask"]["route"]}),
    },
    edges=[edge("a", "ask"), edge("ask", "report")],
)
"""


def _completed(server: ServerProcess) -> str:
    server.write_workflow("route", ROUTE)
    run_id = server.start_run("route", {})
    server.wait_status(run_id, "waiting", 60)
    with server.client() as client:
        client.answer_checkpoint(run_id, {"route": "fix"})
    done = server.wait_status(run_id, {"completed", "failed"}, 60)
    assert done["output"] == {"n": 1, "route": "fix"}, done
    return run_id


def test_set_outputs_replace_what_later_nodes_read_and_are_recorded_as_a_persons(
    server: ServerProcess,
) -> None:
    """``--set a=... --set ask=...`` from ``report``: the fork's ``report`` reads the set
    values; the carried attempts keep their source ids and say ``outputSetBy: person``; the
    source is unchanged; ``run.forked`` lists what was set; ``run show`` says so."""
    run_id = _completed(server)
    shown = server.cli(
        "run", "fork", run_id, "--from", "report",
        "--set", 'a={"n": 5}', "--set", 'ask={"route": "ignore"}',
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "output of node a (visit 1) set by you" in shown.stdout
    [(fork_id,)] = server.query("SELECT run_id FROM runs WHERE forked_from = ?", run_id)
    done = server.wait_status(fork_id, {"completed", "failed"}, 60)
    assert done["output"] == {"n": 5, "route": "ignore"}, done
    carried = server.query(
        "SELECT node_id, output_json, output_set_by, carried_from IS NOT NULL FROM node_attempts"
        " WHERE run_id = ? AND carried_from IS NOT NULL ORDER BY rowid",
        fork_id,
    )
    assert [(n, json.loads(o), s, c) for n, o, s, c in carried] == [
        ("a", {"n": 5}, "person", 1),
        ("ask", {"route": "ignore"}, "person", 1),
    ]
    source = server.query(
        "SELECT node_id, output_json FROM node_attempts WHERE run_id = ? ORDER BY rowid", run_id
    )
    assert [(n, json.loads(o)) for n, o in source] == [
        ("a", {"n": 1}),
        ("ask", {"route": "fix"}),
        ("report", {"n": 1, "route": "fix"}),
    ]
    [(data,)] = server.query(
        "SELECT data_json FROM events WHERE run_id = ? AND type = 'run.forked'", fork_id
    )
    assert json.loads(data)["outputsSet"] == [
        {"nodeId": "a", "visit": 1, "setBy": "person"},
        {"nodeId": "ask", "visit": 1, "setBy": "person"},
    ]
    show = server.cli("run", "show", fork_id)
    assert show.returncode == 0, show.stderr
    assert "output set by a person" in show.stdout
    assert server.diagnose() == []


def test_a_value_that_breaks_the_contract_is_refused_in_one_line_and_stores_nothing(
    server: ServerProcess,
) -> None:
    """``--set ask={"route": "maybe"}`` breaks the checkpoint's answer schema: one line
    naming the node and the schema's message; no fork, no receipt."""
    run_id = _completed(server)
    before = server.query("SELECT count(*) FROM runs")
    receipts = server.query("SELECT count(*) FROM server_commands")
    refused = server.cli(
        "run", "fork", run_id, "--from", "report", "--set", 'ask={"route": "maybe"}'
    )
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "node ask" in lines[0]
    assert "output.route" in lines[0]
    assert "'maybe'" in lines[0]
    assert server.query("SELECT count(*) FROM runs") == before
    assert server.query("SELECT count(*) FROM server_commands") == receipts


def test_only_carried_nodes_may_be_set(server: ServerProcess) -> None:
    """The fork node itself is not carried: ``Client.fork(..., outputs={"report": ...})``
    is refused (``outputRefused``) naming the node and the carried ones; so is a node the
    workflow lacks. Nothing is stored."""
    run_id = _completed(server)
    before = server.query("SELECT count(*) FROM runs")
    with server.client() as client:
        with pytest.raises(RejectedError) as err:
            client.fork(run_id, "report", outputs={"report": {"n": 0}})
        assert err.value.code == "outputRefused"
        assert "node report: it is not carried" in str(err.value)
        assert "carried: a, ask" in str(err.value)
        with pytest.raises(RejectedError) as err:
            client.fork(run_id, "ask", outputs={"ask": {"route": "fix"}})
        assert "node ask: it is not carried" in str(err.value)
        with pytest.raises(RejectedError) as missing:
            client.fork(run_id, "report", outputs={"nope": 1})
        assert missing.value.code == "outputRefused"
        assert "no such node" in str(missing.value)
    assert server.query("SELECT count(*) FROM runs") == before


def test_a_malformed_set_option_is_a_usage_error(server: ServerProcess) -> None:
    """``--set`` without ``=`` or with bad JSON, or one node set twice, is refused before
    the server is asked."""
    run_id = _completed(server)
    for bad in (["--set", "a"], ["--set", "a={nope"], ["--set", "a=1", "--set", "a=2"]):
        refused = server.cli("run", "fork", run_id, "--from", "report", *bad)
        assert refused.returncode == 2, refused.stderr
        assert "--set" in refused.stderr
