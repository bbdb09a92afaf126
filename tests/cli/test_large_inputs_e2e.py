"""Inputs up to the 16 MiB run-state bound, sent in slices through the 1 MiB frame.

Through the real CLI in a child process and a real server: a 10 MiB input reaches the node
whole, one byte over 16 MiB is one line naming the bound, and a client killed in the middle
of an upload leaves the state as it was (nothing written, nothing held, nothing diagnosed).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import AsyncClient, RejectedError
from pi_workflows.protocol import MAX_INPUT_BYTES, UPLOAD_CHUNK_BYTES, canonical_json

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(180)

WHOLE = """
import hashlib, json
from pi_workflows import Workflow, compute

def measure(ctx):
    data = json.dumps(ctx.input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {"bytes": len(data.encode()), "sha256": hashlib.sha256(data.encode()).hexdigest()}

workflow = Workflow("whole", start="measure", nodes={"measure": compute(measure)}, edges=[])
"""

HALF_UPLOAD = """
import base64, sys, time
from pathlib import Path
from pi_workflows.client import Connection
from pi_workflows.client.sync_client import request_for

data = b'"' + b"z" * (4 * {chunk}) + b'"'
import hashlib
digest = hashlib.sha256(data).hexdigest()
connection = Connection.open(Path({socket!r}), timeout=10)
for offset in (0, {chunk}):
    payload = {{"digest": digest, "bytes": len(data), "offset": offset,
               "data": base64.b64encode(data[offset:offset + {chunk}]).decode()}}
    request = request_for("half", "upload.put", payload, run_id=None, idempotency_key=None,
                          expected_revision=None)
    connection.exchange(request, timeout=10)
print("sent", flush=True)
time.sleep(600)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path)
    process.write_workflow("whole", WHOLE)
    process.start()
    yield process
    process.cleanup()


def pw(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`pi-workflows --home HOME ARGS` in a child process, from the project directory."""
    return server.cli(*args, timeout=150)


def _measure(value: Any) -> dict[str, Any]:
    data = canonical_json(value)
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_a_10_mib_input_from_a_file_reaches_its_node_whole(
    server: ServerProcess, tmp_path: Path
) -> None:
    """`run start --input @file` with 10 MiB of JSON completes, and the node measured the
    very input that was sent (its canonical bytes and their sha256)."""
    items = [{"n": n, "text": f"item {n} " + "abcdefghij" * 10} for n in range(80_000)]
    value = {"items": items, "note": "ünïcode"}
    assert 10 * 1024 * 1024 < len(canonical_json(value)) < 11 * 1024 * 1024
    source = tmp_path / "input.json"
    source.write_text(json.dumps(value, indent=1), encoding="utf-8")
    result = pw(server, "run", "start", "whole", "--input", f"@{source}", "--wait", "--json")
    assert result.returncode == 0, result.stderr
    run = json.loads(result.stdout)["run"]
    assert run["status"] == "completed", run
    assert run["output"] == _measure(value)
    assert server.query("SELECT COUNT(*) FROM blobs WHERE size > 10485760") == [(1,)]


def test_an_input_one_byte_over_16_mib_is_one_line_naming_the_bound(
    server: ServerProcess, tmp_path: Path
) -> None:
    """16 MiB + 1 byte of canonical JSON is refused by the CLI in one line naming 16 MiB, and
    by the server itself when a client declares it; nothing is stored."""
    source = tmp_path / "huge.json"
    source.write_text(json.dumps("h" * (MAX_INPUT_BYTES - 1)))  # quotes: the bound + 1
    result = pw(server, "run", "start", "whole", "--input", f"@{source}")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("pi-workflows: error: the input is 16777217 bytes of JSON;")
    assert "the limit is 16 MiB (16777216 bytes" in line
    with server.client() as client:
        for operation, payload in (
            ("upload.put", {"bytes": MAX_INPUT_BYTES + 1, "offset": 0, "data": "aA=="}),
            ("run.start", {"workflow": "whole", "inputRef": {"bytes": MAX_INPUT_BYTES + 1}}),
        ):
            body = payload if operation == "run.start" else {**payload, "digest": "a" * 64}
            if operation == "run.start":
                body["inputRef"]["digest"] = "a" * 64
            with pytest.raises(RejectedError) as refused:
                client.call(operation, body)
            assert refused.value.code == "inputTooLarge"
            assert "the limit is 16 MiB (16777216 bytes" in refused.value.message
    assert server.query("SELECT COUNT(*) FROM runs") == [(0,)]


def test_a_client_killed_mid_upload_leaves_the_state_clean(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Crash window: the client dies after two of five slices. The server forgets the
    upload with the connection, nothing was written (no run, no blob), and diagnose finds
    nothing to report."""
    blobs_before = server.query("SELECT COUNT(*) FROM blobs")
    script = tmp_path / "half.py"
    script.write_text(
        HALF_UPLOAD.format(chunk=UPLOAD_CHUNK_BYTES, socket=str(server.home / "server.sock"))
    )
    uploader = subprocess.Popen(
        [sys.executable, str(script)], env=server.env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert uploader.stdout is not None
        assert uploader.stdout.readline().strip() == "sent"
        with server.client() as client:
            held = client.status()["uploads"]
        assert held == {"count": 1, "bytes": 2 * UPLOAD_CHUNK_BYTES}
        uploader.send_signal(signal.SIGKILL)
        uploader.wait(timeout=30)
    finally:
        if uploader.poll() is None:
            uploader.kill()
            uploader.wait(timeout=30)
        if uploader.stdout is not None:
            uploader.stdout.close()

    def forgotten() -> bool:
        with server.client() as client:
            return bool(client.status()["uploads"] == {"count": 0, "bytes": 0})

    wait_for(forgotten, 30, "the server to forget the killed client's upload")
    assert server.diagnose() == []
    diagnosed = pw(server, "state", "diagnose")
    assert diagnosed.returncode == 0, diagnosed.stderr
    assert "no problems found" in diagnosed.stdout
    assert server.query("SELECT COUNT(*) FROM runs") == [(0,)]
    assert server.query("SELECT COUNT(*) FROM blobs") == blobs_before


def test_the_async_client_uploads_a_large_input_the_same_way(server: ServerProcess) -> None:
    """`AsyncClient.start_run` with an input over the inline bound completes like the CLI's."""
    value = {"text": "q" * (3 * 1024 * 1024)}

    async def start() -> str:
        async with AsyncClient(server.home, autostart=False, timeout=30) as client:
            receipt = await client.start_run("whole", value, project_dir=server.project)
            return str(receipt["runId"])

    run_id = asyncio.run(start())
    view = server.wait_status(run_id, "completed")
    assert view["output"] == _measure(value)


def test_a_fork_takes_a_new_input_over_one_frame(server: ServerProcess, tmp_path: Path) -> None:
    """`run fork --input @file` with 2 MiB of JSON (over the 1 MiB frame) uploads it as
    `run start` does: the fork runs on it whole."""
    source = server.start_run("whole", {"small": True})
    server.wait_status(source, "completed")
    value = {"items": ["fork " + "y" * 100 for _ in range(20_000)]}
    assert len(canonical_json(value)) > 2 * 1024 * 1024
    path = tmp_path / "fork-input.json"
    path.write_text(json.dumps(value), encoding="utf-8")
    result = pw(server, "run", "fork", source, "--from", "measure", "--input", f"@{path}",
                "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    fork = json.loads(result.stdout)["runId"]
    assert server.wait_status(fork, "completed")["output"] == _measure(value)
    assert server.diagnose() == []
