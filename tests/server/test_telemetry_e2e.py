"""OpenTelemetry export, end to end: real servers export to a real OTLP/HTTP receiver.

The receiver (``support.otlp``) decodes what arrives with the official protobuf messages.
Each test runs real server processes and real runner children, and checks the span tree
and the metrics a collector would get: one trace per run across parks, a server SIGKILL
and the recovery after it; an agent step answered through the CLI; a node callback whose
own span nests under its node. Spans are built from committed rows only, so every check
compares them with the database.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_workflows.otel import ids

from support.otlp import Receiver, Span
from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver on 127.0.0.1 for one test."""
    found = Receiver()
    yield found
    found.close()


@pytest.fixture
def server(tmp_path: Path, receiver: Receiver) -> Iterator[ServerProcess]:
    """A server (not started) that exports to ``receiver``."""
    process = ServerProcess(tmp_path, receiver.env())
    yield process
    process.cleanup()


def trace_of(run_id: str) -> str:
    return ids.trace_hex(ids.trace_id(run_id))


def caught_up(server: ServerProcess) -> bool:
    """The exporter's cursor has passed every committed event."""
    rows = server.query(
        "SELECT (SELECT event_id FROM telemetry_cursors WHERE name = 'otlp'),"
        " (SELECT MAX(event_id) FROM events)"
    )
    return bool(rows and rows[0][0] is not None and rows[0][0] == rows[0][1])


def by_name(spans: list[Span], name: str) -> list[Span]:
    return [span for span in spans if span.name == name]


def assert_settlements_match_events(server: ServerProcess) -> None:
    """Every settled attempt names the event that settled it, committed at its finish time
    (what lets the exporter find the attempts a batch of events settled)."""
    wrong = server.query(
        "SELECT a.attempt_id FROM node_attempts a LEFT JOIN events e ON e.run_id = a.run_id"
        " AND e.revision = a.finished_revision WHERE a.finished_at IS NOT NULL"
        " AND (e.at IS NULL OR e.at != a.finished_at)"
    )
    assert wrong == []


PARKS = """
import pathlib
from pi_workflows import Workflow, action, checkpoint, compute, edge, idempotent_effect

HERE = pathlib.Path(__file__).parent

def body(ctx):
    (HERE / f"b-{ctx.attempt_id}.pid").write_text(str(__import__("os").getpid()))
    while not (HERE / "go").exists():
        ctx.cancellation.wait(0.05)
    return {"done": True}

workflow = Workflow(
    "parks",
    start="a",
    nodes={
        "a": compute(lambda ctx: {"x": 1}),
        "b": action(body, effect=idempotent_effect("deploy")),
        "c": checkpoint(lambda ctx: {"question": "ship it?"}),
    },
    edges=[edge("a", "b"), edge("b", "c")],
)
"""


def test_a_run_that_crashes_parks_and_resumes_is_one_trace_with_no_span_twice(
    server: ServerProcess, receiver: Receiver
) -> None:
    """Crash window: the server is SIGKILLed while node b runs (its attempt never commits),
    after the exporter caught up. The new server's recovery settles that attempt
    ``interrupted``; its span ends at that recovery with an error status saying so, no span
    claims it completed, the run's one root span spans the whole life (start to terminal
    commit) with the recovery and the pause on it, and no span id arrives twice."""
    server.write_workflow("parks", PARKS)
    server.start()
    run_id = server.start_run("parks")
    workflows = server.project / ".pi" / "workflows"
    wait_for(lambda: list(workflows.glob("b-*.pid")), 30, "node b to run")
    receiver.wait_spans(lambda s: bool(by_name(s, "node a")), what="node a's span")
    wait_for(lambda: caught_up(server), 30, "the exporter to catch up")
    server.kill()
    (workflows / "go").write_text("")
    server.start()
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.pause(run_id)
        server.wait_status(run_id, "paused")
        client.resume(run_id)
        server.wait_status(run_id, "waiting")
        client.answer_checkpoint(run_id, {"ship": True})
    server.wait_status(run_id, "completed")
    spans = receiver.wait_spans(lambda s: bool(by_name(s, "run parks")), what="the run span")
    wait_for(lambda: caught_up(server), 30, "the exporter to catch up")
    spans = receiver.spans()

    assert [n for n, c in Counter(s.span_id for s in spans).items() if c > 1] == []
    assert {s.trace_id for s in spans} == {trace_of(run_id)}
    (root,) = by_name(spans, "run parks")
    created, finished = server.query(
        "SELECT created_at, finished_at FROM runs WHERE run_id = ?", run_id
    )[0]
    assert (root.start_ns, root.end_ns) == (created * 1_000_000, finished * 1_000_000)
    assert root.parent_id == ""
    assert root.status_code == 1
    assert root.attributes["pi_workflows.run.recoveries"] == 1
    assert root.attributes["pi_workflows.run.parks"] == 1
    assert root.attributes["pi_workflows.run.generations"] >= 3
    assert root.resource["service.name"] == "otel-test"
    names = [name for name, _, _ in root.events]
    assert {"run.recovered", "run.paused", "run.resumed", "run.claimed"} <= set(names)

    nodes = [s for s in spans if s.name.startswith("node ")]
    assert all(s.parent_id == root.span_id for s in nodes)
    attempts = server.query(
        "SELECT attempt_id, node_id, status, started_at, finished_at FROM node_attempts"
        " WHERE run_id = ? ORDER BY started_at, rowid",
        run_id,
    )
    assert [(a[1], a[2]) for a in attempts] == [
        ("a", "completed"), ("b", "interrupted"), ("b", "completed"), ("c", "completed"),
    ]  # fmt: skip
    span_of = {s.attributes["pi_workflows.node.attempt_id"]: s for s in nodes}
    assert set(span_of) == {a[0] for a in attempts}
    for attempt_id, node_id, status, started, ended in attempts:
        span = span_of[attempt_id]
        assert span.span_id == ids.span_hex(ids.attempt_span_id(attempt_id))
        assert span.attributes["pi_workflows.node.id"] == node_id
        assert span.attributes["pi_workflows.node.outcome"] == status
        assert (span.start_ns, span.end_ns) == (started * 1_000_000, ended * 1_000_000)
    crashed = span_of[attempts[1][0]]
    assert crashed.status_code == 2
    assert "interrupted" in crashed.status_message
    assert crashed.attributes["pi_workflows.node.settled_by"] == "run.recovered"
    recovered_at = server.query(
        "SELECT at FROM events WHERE run_id = ? AND type = 'run.recovered'", run_id
    )[0][0]
    assert crashed.end_ns == recovered_at * 1_000_000
    redone = span_of[attempts[2][0]]
    assert redone.status_code == 1
    assert redone.attributes["pi_workflows.node.attempt"] == 2
    assert redone.attributes["pi_workflows.effect.kind"] == "idempotent"
    assert redone.attributes["pi_workflows.effect.type"] == "deploy"
    (key,) = server.query("SELECT effect_key FROM effects WHERE run_id = ?", run_id)
    assert redone.attributes["pi_workflows.effect.key"] == key[0]
    asked = span_of[attempts[3][0]]
    assert asked.attributes["pi_workflows.interaction.kind"] == "checkpoint"
    assert asked.attributes["pi_workflows.interaction.wait_ms"] > 0
    assert "pi_workflows.interaction.answer" not in asked.attributes  # no payloads by default
    assert "pi_workflows.node.output" not in asked.attributes
    assert_settlements_match_events(server)
    applied = "pi_workflows.effect.outcome"
    wait_for(
        lambda: any(
            p.attributes.get(applied) == "applied" and p.value == 1
            for p in receiver.points("pi_workflows.effects.outcomes")
        ),
        30, "the effect outcome metric",
    )  # fmt: skip


STEP = """
from pi_workflows import Rejected, Workflow, agent, compute, edge

def check(output, ctx):
    if output.get("route") not in ("fix", "skip"):
        raise Rejected("route must be fix or skip")

workflow = Workflow(
    "step",
    start="classify",
    nodes={
        "classify": agent(prompt="Classify the report", expected_output='{"route": "fix"}',
                          validate=check),
        "done": compute(lambda ctx: {"route": ctx.outputs["classify"]["route"]}),
    },
    edges=[edge("classify", "done")],
)
"""


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return server.cli(*args)


def test_an_agent_step_answered_through_the_cli_carries_its_wait_for_the_model(
    server: ServerProcess, receiver: Receiver
) -> None:
    """An agent step started and answered with the CLI (one rejected answer, then a valid
    one): its node span records the wait, the submissions and the rejection; a child span
    in the GenAI conventions (``invoke_agent``, a client span) covers the wait for the
    model; the metrics count the run, its nodes and the rejection."""
    server.write_workflow("step", STEP)
    server.start()
    run_id = cli(server, "run", "start", "step").stdout.strip()
    server.wait_status(run_id, "waiting")
    refused = cli(server, "interaction", "submit", run_id, "--output", '{"route": "maybe"}')
    assert refused.returncode == 1
    accepted = cli(server, "interaction", "submit", run_id, "--output", '{"route": "fix"}')
    assert accepted.returncode == 0, accepted.stderr
    server.wait_status(run_id, "completed")
    spans = receiver.wait_spans(lambda s: bool(by_name(s, "run step")), what="the run span")
    (step,) = by_name(spans, "node classify")
    assert step.attributes["pi_workflows.node.kind"] == "agent"
    assert step.attributes["pi_workflows.interaction.kind"] == "agent"
    assert step.attributes["pi_workflows.interaction.waited_for"] == "model"
    assert step.attributes["pi_workflows.interaction.submissions"] == 2
    assert step.attributes["pi_workflows.interaction.rejections"] == 1
    (request_id,) = server.query("SELECT request_id, created_at FROM interactive_requests")
    accepted_at = server.query(
        "SELECT submitted_at FROM interactive_submissions WHERE status = 'accepted'"
    )[0][0]
    assert step.attributes["pi_workflows.interaction.wait_ms"] == accepted_at - request_id[1]
    (model,) = by_name(spans, "invoke_agent pi")
    assert model.parent_id == step.span_id
    assert model.kind == 3  # SPAN_KIND_CLIENT
    assert model.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert model.attributes["gen_ai.agent.name"] == "pi"
    assert model.attributes["pi_workflows.agent.detached"] is False
    assert (model.start_ns, model.end_ns) == (request_id[1] * 1_000_000, accepted_at * 1_000_000)

    def metric(name: str, **attrs: str) -> float | None:
        points = [
            p
            for p in receiver.points(name)
            if all(p.attributes.get(k) == v for k, v in attrs.items())
        ]
        return points[-1].value if points else None

    key = "pi_workflows.interaction.kind"
    wait_for(
        lambda: metric("pi_workflows.validation.rejections", **{key: "agent"}) == 1,
        30, "the rejection metric",
    )  # fmt: skip
    wait_for(
        lambda: metric("pi_workflows.runs.finished", **{"pi_workflows.run.status": "completed"})
        == 1,
        30, "the finished-runs metric",
    )  # fmt: skip
    assert metric("pi_workflows.runs.started") == 1
    durations = receiver.points("pi_workflows.node.duration")
    assert {p.attributes["pi_workflows.node.kind"] for p in durations} >= {"agent", "compute"}
    assert receiver.points("pi_workflows.runners.live")
    assert receiver.points("pi_workflows.queue.wait")


GATE = """
from pi_workflows import Rejected, Workflow, compute, edge, wait_event

def check(data, ctx):
    if data.get("ok") is not True:
        raise Rejected("not ok")

workflow = Workflow(
    "gate",
    start="deployed",
    nodes={
        "deployed": wait_event("deployed", validate=check),
        "done": compute(lambda ctx: ctx.outputs["deployed"]),
    },
    edges=[edge("deployed", "done")],
)
"""


def test_an_event_a_wait_refuses_is_counted_as_a_rejection_of_kind_event(
    server: ServerProcess, receiver: Receiver
) -> None:
    """A wait_event's validate refuses one event and takes the next: the rejections metric
    counts exactly that one, of kind ``event``."""
    server.write_workflow("gate", GATE)
    server.start()
    run_id = cli(server, "run", "start", "gate").stdout.strip()
    server.wait_status(run_id, "waiting")
    refused = cli(server, "run", "signal", run_id, "deployed", "--data", '{"ok": false}')
    assert refused.returncode == 1
    assert "not ok" in refused.stderr
    taken = cli(server, "run", "signal", run_id, "deployed", "--data", '{"ok": true}')
    assert taken.returncode == 0, taken.stderr
    server.wait_status(run_id, "completed")

    def rejections(kind: str) -> float | None:
        points = [
            p
            for p in receiver.points("pi_workflows.validation.rejections")
            if p.attributes.get("pi_workflows.interaction.kind") == kind
        ]
        return points[-1].value if points else None

    wait_for(lambda: rejections("event") == 1, 30, "the event rejection metric")
    wait_for(lambda: caught_up(server), 30, "the exporter to catch up")
    assert rejections("event") == 1
    assert [
        p
        for p in receiver.points("pi_workflows.validation.rejections")
        if p.attributes.get("pi_workflows.interaction.kind") != "event"
    ] == []


OWN_SPAN = """
import asyncio
from opentelemetry import trace
from pi_workflows import Workflow, compute, edge

def traced(ctx):
    with trace.get_tracer("user-code").start_as_current_span("fetch the page") as span:
        inner = format(span.get_span_context().trace_id, "032x")
    return {"trace": ctx.trace_id, "inner": inner}

async def traced_async(ctx):
    with trace.get_tracer("user-code").start_as_current_span("ask the model"):
        await asyncio.sleep(0)
    return {"ok": True}

workflow = Workflow(
    "own",
    start="fetch",
    nodes={"fetch": compute(traced), "ask": compute(traced_async)},
    edges=[edge("fetch", "ask")],
)
"""


def test_a_span_a_node_callback_makes_nests_under_its_node(
    server: ServerProcess, receiver: Receiver
) -> None:
    """Workflow code that traces with the OpenTelemetry API (sync and async callbacks) gets
    the node attempt's span as its parent, in the run's trace; ``ctx.trace_id`` is that
    trace's id."""
    server.write_workflow("own", OWN_SPAN)
    server.start()
    run_id = server.start_run("own")
    done = server.wait_status(run_id, "completed")
    spans = receiver.wait_spans(
        lambda s: bool(by_name(s, "run own") and by_name(s, "ask the model")), what="spans"
    )
    trace = trace_of(run_id)
    (fetch,) = by_name(spans, "node fetch")
    (ask,) = by_name(spans, "node ask")
    (mine,) = by_name(spans, "fetch the page")
    (mine_async,) = by_name(spans, "ask the model")
    assert (mine.trace_id, mine.parent_id, mine.scope) == (trace, fetch.span_id, "user-code")
    assert (mine_async.trace_id, mine_async.parent_id) == (trace, ask.span_id)
    output = server.query(
        "SELECT output_json FROM node_attempts WHERE run_id = ? AND node_id = 'fetch'", run_id
    )[0][0]
    assert json.loads(output) == {"trace": trace, "inner": trace}
    assert done["status"] == "completed"


PLAIN = """
from pi_workflows import Workflow, compute, edge

workflow = Workflow(
    "plain",
    start="fetch",
    nodes={"fetch": compute(lambda ctx: {"n": 1}), "ask": compute(lambda ctx: {"ok": True})},
    edges=[edge("fetch", "ask")],
)
"""


def test_export_waits_out_a_collector_that_refuses_and_loses_nothing(
    server: ServerProcess, receiver: Receiver
) -> None:
    """While the collector answers 503 the cursor stays where it is; once it takes
    requests again every span of the run arrives, each exactly once."""
    receiver.refusing = True
    server.write_workflow("plain", PLAIN)
    server.env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    server.start()
    run_id = server.start_run("plain")
    server.wait_status(run_id, {"completed", "failed"})
    wait_for(lambda: receiver.requests >= 2, 30, "refused export attempts")
    cursor = server.query("SELECT event_id FROM telemetry_cursors WHERE name = 'otlp'")[0][0]
    assert cursor < server.query("SELECT MAX(event_id) FROM events")[0][0]
    receiver.refusing = False
    spans = receiver.wait_spans(lambda s: bool(by_name(s, "run plain")), 90, "the run span")
    wait_for(lambda: caught_up(server), 30, "the exporter to catch up")
    spans = receiver.spans()
    assert [n for n, c in Counter(s.span_id for s in spans).items() if c > 1] == []
    attempts = server.query("SELECT COUNT(*) FROM node_attempts WHERE run_id = ?", run_id)[0][0]
    assert len([s for s in spans if s.name.startswith("node ")]) == attempts


def test_payloads_are_exported_only_when_asked(server: ServerProcess, receiver: Receiver) -> None:
    """With ``PI_WORKFLOWS_OTEL_PAYLOADS=true`` the run's input and output and a node's
    output are attributes (bounded); the default run above exports none of them."""
    server.write_workflow("plain", PLAIN)
    server.start(PI_WORKFLOWS_OTEL_PAYLOADS="true")
    run_id = server.start_run("plain", {"topic": "cats"})
    server.wait_status(run_id, {"completed", "failed"})
    spans = receiver.wait_spans(lambda s: bool(by_name(s, "run plain")), what="the run span")
    (root,) = by_name(spans, "run plain")
    assert json.loads(root.attributes["pi_workflows.run.input"]) == {"topic": "cats"}
    (ask,) = by_name(spans, "node ask")
    assert json.loads(ask.attributes["pi_workflows.node.output"]) == {"ok": True}


PARENT = """
from pi_workflows import Workflow, compute, edge, subworkflow

workflow = Workflow(
    "parent",
    start="plan",
    nodes={
        "plan": subworkflow("child", input=lambda ctx: {"n": 2}),
        "done": compute(lambda ctx: {"child": ctx.outputs["plan"]}),
    },
    edges=[edge("plan", "done")],
)
"""

CHILD = """
from pi_workflows import Workflow, compute

def traced(ctx):
    return {"trace": ctx.trace_id}

workflow = Workflow("child", start="work", nodes={"work": compute(traced)}, edges=[])
"""


def test_a_child_run_is_in_its_root_runs_trace_under_the_node_that_started_it(
    server: ServerProcess, receiver: Receiver
) -> None:
    """A subworkflow's child run: its run span is a child of the parent's ``plan`` attempt
    span, in the parent's trace, and its node callbacks see that trace id."""
    server.write_workflow("parent", PARENT)
    server.write_workflow("child", CHILD)
    server.start()
    run_id = server.start_run("parent")
    done = server.wait_status(run_id, "completed")
    spans = receiver.wait_spans(
        lambda s: bool(by_name(s, "run parent") and by_name(s, "run child")), what="both runs"
    )
    trace = trace_of(run_id)
    assert {s.trace_id for s in spans} == {trace}
    (plan,) = by_name(spans, "node plan")
    (child,) = by_name(spans, "run child")
    (parent,) = by_name(spans, "run parent")
    assert child.parent_id == plan.span_id
    assert child.attributes["pi_workflows.run.parent_id"] == run_id
    assert by_name(spans, "node work")[0].parent_id == child.span_id
    assert plan.parent_id == parent.span_id
    assert done["output"] == {"child": {"trace": trace}}


HEADLESS = """#!{python}
# Stands in for the headless `pi --mode rpc` of a detached run: it plays the extension (the
# session's coordinator) and a model whose first turn ends without submitting.
import os, sys, time
from pi_workflows.client import Client

session = sys.argv[sys.argv.index("--session-id") + 1]
with Client(os.environ["PI_WORKFLOWS_HOME"], autostart=False, timeout=30) as client:
    epoch = client.attach_session(session)
    while not (view := client.get_session(session))["activeRequest"]:
        time.sleep(0.02)
    active = view["activeRequest"]
    present = {{m["workflowMessageId"]: f"entry-{{i}}" for i, m in enumerate(view["messages"])}}
    client.report_messages(session, epoch, present)
    message = active["workflowMessageId"]
    client.report_turn(session, epoch, "started", workflow_message_id=message)
    time.sleep(0.05)
    client.report_turn(session, epoch, "ended", stop_reason="completed")
    client.report_turn(session, epoch, "started", workflow_message_id=message)
    client.submit(active["requestId"], {{"route": "fix"}}, run_id=active["runId"])
    client.report_turn(session, epoch, "ended", stop_reason="completed")
while True:
    time.sleep(0.05)
"""


def test_a_detached_agent_step_follows_the_genai_conventions_with_its_model_turns(
    server: ServerProcess, receiver: Receiver, tmp_path: Path
) -> None:
    """A detached run's headless agent (a stand-in playing the extension and the model):
    the step's ``invoke_agent`` span names the session as the conversation, says it was
    detached, and carries the model turns the session reported, with their time."""
    program = tmp_path / "fake-pi"
    program.write_text(HEADLESS.format(python=sys.executable))
    program.chmod(0o755)
    server.write_workflow("step", STEP)
    server.start(PI_WORKFLOWS_PI=str(program))
    run_id = server.start_run("step", detached=True)
    server.wait_status(run_id, "completed")
    spans = receiver.wait_spans(lambda s: bool(by_name(s, "run step")), what="the run span")
    (model,) = by_name(spans, "invoke_agent pi")
    assert model.attributes["gen_ai.conversation.id"] == f"detached-{run_id}"
    assert model.attributes["pi_workflows.agent.detached"] is True
    assert model.attributes["pi_workflows.agent.turns"] == 2
    assert "completed" in model.attributes["gen_ai.response.finish_reasons"]
    assert model.attributes["pi_workflows.agent.model_ms"] >= 50
    turns = [event for event in model.events if event[0] == "pi_workflows.model_turn"]
    assert len(turns) == 2
    (root,) = by_name(spans, "run step")
    assert root.attributes["pi_workflows.run.detached"] is True


def test_a_fork_exports_only_the_nodes_it_ran_in_its_own_trace(
    server: ServerProcess, receiver: Receiver
) -> None:
    """A fork of a completed run from its second node: the fork's trace has its own run span
    and the node it ran; the node it carried from the source ran in the source, whose trace
    already has its span, and is never exported again."""
    server.write_workflow("plain", PLAIN)
    server.start()
    source = server.start_run("plain")
    server.wait_status(source, "completed")
    with server.client() as client:
        fork = str(client.fork(source, "ask")["runId"])
    server.wait_status(fork, "completed")
    wait_for(lambda: caught_up(server), 60, "the exporter to catch up")
    spans = receiver.wait_spans(
        lambda s: len(by_name(s, "run plain")) == 2, what="both runs' spans"
    )
    mine = [s for s in spans if s.trace_id == trace_of(fork)]
    assert sorted(s.name for s in mine) == ["node ask", "run plain"]
    theirs = [s for s in spans if s.trace_id == trace_of(source)]
    assert sorted(s.name for s in theirs) == ["node ask", "node fetch", "run plain"]
    assert [n for n, c in Counter(s.span_id for s in spans).items() if c > 1] == []


ASKS = """
from pi_workflows import Workflow, checkpoint, compute, edge

workflow = Workflow(
    "asks",
    start="ask",
    nodes={"ask": checkpoint(lambda ctx: {"question": "go?"}),
           "done": compute(lambda ctx: ctx.outputs["ask"])},
    edges=[edge("ask", "done")],
)
"""


def test_a_round_restarted_while_waiting_ends_its_own_run_span(
    server: ServerProcess, receiver: Receiver
) -> None:
    """Restarting a waiting run ends its round: that round's run span arrives (status
    unset, `restarted`), and the next round's span, which completes, links to it."""
    server.write_workflow("asks", ASKS)
    server.start()
    run_id = server.start_run("asks")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.restart(run_id)
        server.wait_status(run_id, "waiting")
        client.answer_checkpoint(run_id, {"yes": True})
    server.wait_status(run_id, "completed")
    spans = receiver.wait_spans(lambda s: len(by_name(s, "run asks")) == 2, what="both rounds")
    first, second = sorted(by_name(spans, "run asks"), key=lambda s: s.start_ns)
    assert first.attributes["pi_workflows.run.status"] == "restarted"
    assert (first.status_code, second.status_code) == (0, 1)
    assert second.links == [(first.trace_id, first.span_id)]
    nodes = [s for s in spans if s.name == "node ask"]
    assert {s.parent_id for s in nodes} == {first.span_id, second.span_id}
