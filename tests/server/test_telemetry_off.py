"""No cost when off: without export, neither the server nor a runner imports OpenTelemetry.

The server runs under a probe that writes the names of every module it imported when it
exits; a node callback reports the OpenTelemetry modules its runner has loaded. Off (no
OTLP endpoint set) and disabled (``OTEL_SDK_DISABLED=true`` beside an endpoint), neither
imports any; with export on, both do (the check can fail). Without the extra installed
(its import refused), the server says so in its log once and runs workflows as usual.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.otlp import Receiver
from support.server import ServerProcess

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

PROBE = """
import atexit, os, sys
atexit.register(
    lambda: open(os.environ["MODULES_OUT"], "w").write("\\n".join(sorted(sys.modules)))
)
if os.environ.get("HIDE_OTEL"):
    sys.modules["opentelemetry"] = None  # as if the extra were not installed
from pi_workflows.server.main import main
sys.exit(main(sys.argv[1:]))
"""

WORKFLOW = """
import sys
from pi_workflows import Workflow, compute

def loaded(ctx):
    return {"otel": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")}

workflow = Workflow("loaded", start="a", nodes={"a": compute(loaded)}, edges=[])
"""

OTEL_PACKAGES = ("opentelemetry", "pi_workflows.otel.sdk", "pi_workflows.server.telemetry")


class ProbedServer(ServerProcess):
    """A server started under ``PROBE``."""

    python_args = ("-c", PROBE)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def run_probed(tmp_path: Path, env: dict[str, str]) -> tuple[set[str], list[str], str]:
    """Run one workflow on a probed server with ``env``; (the server's modules, the
    runner's OpenTelemetry modules, the server log)."""
    out = tmp_path / "modules.txt"
    server = ProbedServer(tmp_path, {**env, "MODULES_OUT": str(out)})
    try:
        server.write_workflow("loaded", WORKFLOW)
        server.start()
        run_id = server.start_run("loaded")
        done = server.wait_status(run_id, {"completed", "failed"})
        assert done["status"] == "completed", done
        server.stop()
        log = server.log.read_text()
    finally:
        server.cleanup()
    return set(out.read_text().split()), list(done["output"]["otel"]), log


def otel_modules(modules: set[str]) -> set[str]:
    return {
        name
        for name in modules
        if any(name == root or name.startswith(f"{root}.") for root in OTEL_PACKAGES)
    }


@pytest.mark.parametrize("disabled", [False, True], ids=["no endpoint", "OTEL_SDK_DISABLED"])
def test_without_export_neither_server_nor_runner_imports_opentelemetry(
    tmp_path: Path, receiver: Receiver, disabled: bool
) -> None:
    """No endpoint, or an endpoint with ``OTEL_SDK_DISABLED=true``: no OpenTelemetry module
    in the server or in the runner, and nothing reaches the receiver."""
    env = receiver.env(OTEL_SDK_DISABLED="true") if disabled else {}
    server_modules, runner_modules, _ = run_probed(tmp_path, env)
    assert "pi_workflows.server.app" in server_modules
    assert otel_modules(server_modules) == set()
    assert runner_modules == []
    assert receiver.requests == 0


def test_with_export_on_both_import_it(tmp_path: Path, receiver: Receiver) -> None:
    """The control: with an endpoint set, the server loads its exporter and the runner the
    API (so the checks above can fail)."""
    server_modules, runner_modules, _ = run_probed(tmp_path, receiver.env())
    assert {"opentelemetry", "pi_workflows.server.telemetry"} <= otel_modules(server_modules)
    assert "opentelemetry.trace" in runner_modules


def test_without_the_extra_the_server_says_so_once_and_runs_as_usual(
    tmp_path: Path, receiver: Receiver
) -> None:
    """An endpoint is set but OpenTelemetry cannot be imported: one warning line names the
    extra to install, and the run completes."""
    _, _, log = run_probed(tmp_path, receiver.env(HIDE_OTEL="1"))
    warnings = [line for line in log.splitlines() if "otel extra is not installed" in line]
    assert len(warnings) == 1
    assert "pi-workflows[otel]" in warnings[0]
