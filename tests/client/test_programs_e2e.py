"""`Client.start/wait/result`, the `AsyncClient` and the example programs, on a real server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import (
    AsyncClient,
    Client,
    NotFoundError,
    RunFailedError,
    WaitTimeoutError,
)

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "programs"

FLOW = """
from pi_workflows import Workflow, checkpoint, compute, edge

def finish(ctx):
    if ctx.outputs["ask"] == "fail":
        raise RuntimeError("asked to fail")
    return {"answer": ctx.outputs["ask"], "big": "y" * 100000}

workflow = Workflow("flow", start="ask", nodes={
    "ask": checkpoint(lambda ctx: {"question": "How?"}),
    "finish": compute(finish),
}, edges=[edge("ask", "finish")])
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server whose project has the `flow` workflow."""
    process = ServerProcess(tmp_path)
    process.write_workflow("flow", FLOW)
    process.start()
    yield process
    process.cleanup()


def test_start_wait_and_result_follow_a_run_to_its_output(server: ServerProcess) -> None:
    """`wait` returns the view where the run needs someone; `result` the (large) output."""
    with server.client() as client:
        run_id = client.start("flow", project=server.project)
        waiting = client.wait(run_id, timeout=60)
        assert waiting["status"] == "waiting"
        assert waiting["waitingOn"]["request"] == {"question": "How?"}
        with pytest.raises(WaitTimeoutError) as timed_out:
            client.result(run_id, timeout=0.3)
        assert timed_out.value.status == "waiting"
        client.answer_checkpoint(run_id, "slowly")
        output = client.result(run_id, timeout=60)
        assert output == {"answer": "slowly", "big": "y" * 100000}
        assert client.wait(run_id, timeout=5)["status"] == "completed"


def test_result_raises_for_a_run_that_failed_and_wait_for_an_unknown_run(
    server: ServerProcess,
) -> None:
    """A failed run is `RunFailedError` with its error; an unknown run is `NotFoundError`."""
    with server.client() as client:
        run_id = client.start("flow", project=server.project, idempotency_key="once")
        assert client.start("flow", project=server.project, idempotency_key="once") == run_id
        client.wait(run_id, timeout=60)
        client.answer_checkpoint(run_id, "fail")
        with pytest.raises(RunFailedError) as failed:
            client.result(run_id, timeout=60)
        assert failed.value.status == "failed"
        assert "asked to fail" in str(failed.value.error)
        with pytest.raises(NotFoundError):
            client.wait("run_missing", timeout=5)


def test_the_async_client_has_the_same_surface(server: ServerProcess) -> None:
    """start, wait, answer, result, history and logs through `AsyncClient`."""

    async def scenario() -> tuple[str, object, list[str], list[str]]:
        async with AsyncClient(server.home, autostart=False) as client:
            run_id = await client.start("flow", project=server.project)
            waiting, listed = await asyncio.gather(
                client.wait(run_id, timeout=60), client.list_runs(limit=5)
            )
            assert waiting["status"] == "waiting"
            assert run_id in [run["runId"] for run in listed]
            await client.answer_checkpoint(run_id, "together")
            output = await client.result(run_id, timeout=60)
            events = [event["type"] for event in await client.history(run_id)]
            nodes = [log["nodeId"] for log in await client.logs(run_id)]
            return run_id, output, events, nodes

    run_id, output, events, nodes = asyncio.run(scenario())
    assert output == {"answer": "together", "big": "y" * 100000}
    assert events[0] == "run.reserved"
    assert events[-1] == "run.completed"
    assert nodes == ["ask", "finish"]
    assert server.run(run_id)["status"] == "completed"


def _example(server: ServerProcess, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**server.env, "PI_WORKFLOWS_HOME": str(server.home)}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=env,
        cwd=os.fspath(server.root),
    )


def test_the_example_programs_run_against_a_server(server: ServerProcess) -> None:
    """The two example programs complete their runs and print the documented lines."""
    countdown = _example(server, "run_countdown.py", "2")
    assert countdown.returncode == 0, countdown.stderr
    assert "output: {'ticks': 3}" in countdown.stdout
    assert "run.completed" in countdown.stdout
    answers = _example(server, "async_answers.py")
    assert answers.returncode == 0, answers.stderr
    assert "asks: What should the demo report say?" in answers.stdout
    assert "answered by a program" in answers.stdout
    with Client(server.home, autostart=False) as client:
        assert {run["status"] for run in client.list_runs()} == {"completed"}


LOCAL = """
from pi_workflows import Workflow, compute

workflow = Workflow("local", start="a", nodes={"a": compute(lambda ctx: {"here": True})}, edges=[])
"""


def test_relative_workflow_paths_and_the_project_resolve_from_the_working_directory(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a project subdirectory, `./local.workflow.py` is that file and a bare name is a
    workflow of the nearest `.pi/workflows` upwards, for both clients, as in the CLI."""
    below = server.project / "src" / "deep"
    below.mkdir(parents=True)
    (below / "local.workflow.py").write_text(LOCAL)
    monkeypatch.chdir(below)
    with server.client() as client:
        local = client.start("./local.workflow.py")
        assert client.result(local, timeout=60) == {"here": True}
        named = client.start("flow")  # found in <project>/.pi/workflows, two levels up
        assert client.wait(named, timeout=60)["status"] == "waiting"
        assert "flow" in {w["name"] for w in client.list_workflows()}
        assert client.show_workflow("local.workflow.py")["workflow"] == "local"

    async def scenario() -> tuple[object, str]:
        async with AsyncClient(server.home, autostart=False) as client:
            run_id = await client.start("local.workflow.py")
            named = await client.start("flow")
            return await client.result(run_id, timeout=60), (await client.wait(named))["workflow"]

    assert asyncio.run(scenario()) == ({"here": True}, "flow")
    sources = server.query("SELECT source_ref, project_dir FROM run_sources")
    assert (str(below / "local.workflow.py"), str(server.project)) in sources
    assert all(project == str(server.project) for _, project in sources)


def test_the_async_client_answers_every_read_as_the_blocking_client_does(
    server: ServerProcess,
) -> None:
    """Each read method of `AsyncClient` returns what the same method of `Client` returns
    for the same run (history limits, pages, node outputs, workflows, effects, state)."""
    with server.client() as client:
        run_id = client.start("flow", project=server.project)
        client.wait(run_id, timeout=60)
        client.answer_checkpoint(run_id, "compared")
        client.result(run_id, timeout=60)
        # A completed run's runner exits a moment later: compare the reads once it is gone.
        wait_for(lambda: client.get_run_complete(run_id)["runner"] is None, 30, "the runner")
        calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
            ("get_run_complete", (run_id,), {}),
            ("list_runs", (), {"limit": 5}),
            ("list_runs_page", ("completed",), {"limit": 1}),
            ("history", (run_id,), {"after": 1, "limit": 3}),
            ("logs", (run_id,), {"node": "finish"}),
            ("node_output", (run_id, "finish"), {}),
            ("list_effects", (run_id,), {}),
            ("list_interactions", (), {}),
            ("list_workflows", (server.project,), {}),
            ("show_workflow", ("flow",), {"project": server.project}),
            ("check_workflow", (server.project / ".pi" / "workflows" / "flow.workflow.py",), {}),
            ("diagnose", (), {}),
        ]
        expected = {name: getattr(client, name)(*args, **kw) for name, args, kw in calls}
        every = list(client.iter_runs())

    async def scenario() -> tuple[dict[str, Any], list[Any]]:
        async with AsyncClient(server.home, autostart=False) as client:
            got = {name: await getattr(client, name)(*args, **kw) for name, args, kw in calls}
            return got, [run async for run in client.iter_runs()]

    got, iterated = asyncio.run(scenario())
    for name, value in expected.items():
        assert got[name] == value, name
    assert iterated == every
    assert [e["revision"] for e in got["history"]] == [2, 3, 4]
    assert got["node_output"]["output"]["big"] == "y" * 100000
    assert got["list_runs_page"][0][0]["runId"] == run_id


GATE = """
from pi_workflows import Workflow, compute, edge, wait_event

workflow = Workflow("gate", start="go", nodes={
    "go": wait_event("go"),
    "done": compute(lambda ctx: {"got": ctx.outputs["go"]}),
}, edges=[edge("go", "done")])
"""


def test_the_async_client_signals_a_run_and_manages_a_schedule(server: ServerProcess) -> None:
    """`AsyncClient.signal` wakes a waiting run (a repeated key adopts); `add_schedule`,
    `list_schedules`, `get_schedule`, `pause_schedule`, `resume_schedule` and
    `delete_schedule` drive a schedule whose fires start runs."""
    server.write_workflow("gate", GATE)

    async def scenario() -> tuple[object, list[str], int]:
        async with AsyncClient(server.home, autostart=False) as client:
            run_id = await client.start("gate", project=server.project)
            assert (await client.wait(run_id, timeout=60))["status"] == "waiting"
            sent = await client.signal(run_id, "go", {"n": 1}, idempotency_key="k1")
            again = await client.signal(run_id, "go", {"n": 1}, idempotency_key="k1")
            assert again.body["signalId"] == sent.body["signalId"]
            output = await client.result(run_id, timeout=60)
            added = await client.add_schedule(
                "often", "flow", every="1s", project=server.project, input=None
            )
            assert added.body["schedule"]["name"] == "often"
            names = [s["name"] for s in await client.list_schedules()]
            paused = await client.pause_schedule("often")
            resumed = await client.resume_schedule("often")
            statuses = [paused.body["schedule"]["status"], resumed.body["schedule"]["status"]]
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                shown = await client.get_schedule("often")
                started = [f for f in shown["fires"] if f.get("runId")]
                if started or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.1)
            deleted = await client.delete_schedule("often")
            assert deleted.body["schedule"]["status"] == "deleted"
            assert await client.list_schedules() == []
            return output, [*names, *statuses], len(started)

    output, seen, fired = asyncio.run(scenario())
    assert output == {"got": {"n": 1}}
    assert seen == ["often", "paused", "active"]
    assert fired >= 1
    assert server.diagnose() == []
