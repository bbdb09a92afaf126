"""Headless Pi agents for detached runs: spawn, supervise and stop ``pi --mode rpc``.

Runs in the server. A detached run (``run start --detached``) has no person's Pi session:
its session is a headless Pi the server runs in the run's working directory, with the run's
recorded environment (``agent_environment``), the pi-workflows extension loaded and the
user's own Pi model configuration, on the session id ``detached-<run id>``. The extension
in it attaches to that session like any origin session and presents and submits the run's
steps.

The agent is a supervised process like a runner: its own process group; its pid and start
time committed right after the exec, before the server handles anything from it (the
extension can do nothing for the run without the server; an agent whose server died before
that commit reads the end of its stdin, which only the server held, and shuts down);
bounded output; and stopped (SIGTERM, grace, SIGKILL, then reaped) when its run finishes,
is cancelled or paused, or no longer needs it. A missing ``pi`` or an agent that dies while
its run waits parks the run ``agentUnavailable`` with the reason; ``run resume`` retries.
What is kept of its output: only the end of its stderr (``AGENT_ERROR_TAIL_BYTES``), in its
record and (the last line) in the park detail; its stdout is never logged or stored.

Its tools: one agent serves every step of its run, so it starts with Pi's ``--tools`` set to
the union of what the run's model-facing steps allow (``tool_flags``, from the run's stored
definition), never Pi's default set unless a step without a limit needs it; the extension in
it narrows each step to that step's own ``allowed_tools`` through Pi's ``tool_call`` hook.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_workflows import pi_package
from pi_workflows.protocol.process_start import process_start
from pi_workflows.server import children
from pi_workflows.server.children import Process
from pi_workflows.server.config import ServerConfig
from pi_workflows.store import agents, delivery, interactions, jsoncol, lifecycle, run_rows
from pi_workflows.store.database import Database
from pi_workflows.store.errors import StoreError
from pi_workflows.store.states import ParkReason

log = logging.getLogger(__name__)


@dataclass
class Agent:
    """One live headless Pi."""

    agent_id: str
    run_id: str
    process: Process
    definition_digest: str = ""  # the run's code when it started (its tools come from it)
    started_ms: int = 0  # store clock: no stall of its step is counted from before this
    stopping: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)


def pi_command(config: ServerConfig) -> list[str]:
    """The ``pi`` to run: ``PI_WORKFLOWS_PI`` (a path or a name on PATH), else ``pi``."""
    return [config.pi_command]


def extension_path(config: ServerConfig) -> str | None:
    """The extension to load: ``PI_WORKFLOWS_PI_EXTENSION``, else this installation's (the
    wheel's copy, or the source checkout's: ``pi_package``)."""
    if config.pi_extension:
        return config.pi_extension
    entry = pi_package.extension_entry()
    return None if entry is None else str(entry)


def _cli_path() -> str | None:
    beside = Path(sys.executable).parent / "pi-workflows"
    return str(beside) if beside.exists() else shutil.which("pi-workflows")


WORKFLOW_TOOL = "workflow"
"""The extension's tool: every step may call it, so every ``--tools`` list names it."""

TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*")
"""A tool name ``--tools`` can carry as itself (no ``,`` separator, ``*`` pattern, ``+``/``-``
edit or blank)."""


def tool_flags(definition: Any) -> list[str]:
    """Pi's tool flags for the headless agent of a run whose definition snapshot is
    ``definition``: ``["--tools", "a,b,workflow"]`` with the union of the tools its agent
    steps allow, or ``[]`` (Pi's own default tools) when any step the model answers has no
    limit: an agent step without ``allowed_tools``, or a checkpoint (not one for a person,
    which the model never answers). The union, because one
    agent serves all the run's steps; the extension enforces each step's own set.

    Raises ``ValueError`` for an unreadable definition or a name ``--tools`` cannot carry
    (the agent is then not started and the run parks with that reason)."""
    nodes = definition.get("nodes") if isinstance(definition, dict) else None
    if not isinstance(nodes, dict):
        raise ValueError("the run's definition has no nodes to read its tool limits from")
    allowed: set[str] = {WORKFLOW_TOOL}
    for node_id, node in nodes.items():
        kind = node.get("kind") if isinstance(node, dict) else None
        if kind == "checkpoint" and node.get("forPerson") is not True:
            return []
        if kind != "agent":
            continue
        tools = node.get("allowedTools")
        if tools is None:
            return []
        if not isinstance(tools, list):
            raise ValueError(f"node {node_id!r} has allowedTools that are not a list")
        for name in tools:
            if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
                raise ValueError(
                    f"node {node_id!r} allows the tool {name!r}, which is not a tool name"
                    " Pi's --tools can carry"
                )
            allowed.add(name)
    return ["--tools", ",".join(sorted(allowed))]


def run_tool_flags(db: Database, run_id: str) -> list[str]:
    """``tool_flags`` of the run's stored definition snapshot."""
    with db.read() as conn:
        row = conn.execute(
            "SELECT b.data FROM runs r JOIN blobs b ON b.digest = r.definition_digest"
            " WHERE r.run_id = ?",
            (run_id,),
        ).fetchone()
    if row is None:
        raise ValueError(f"run {run_id} has no stored definition")
    return tool_flags(jsoncol.loads(bytes(row[0]).decode("utf-8")))


def agent_environment(
    variables: dict[str, str], home: Path, cli: str | None, environ: dict[str, str] | None = None
) -> dict[str, str]:
    """A headless Pi's environment (docs/authoring.md, "Environment"): Pi's own settings
    from the server's environment (every ``PI_*`` variable but the server's own
    ``PI_WORKFLOWS_*``: ``PI_CODING_AGENT_DIR``, ``PI_OFFLINE``, ...), the run's recorded
    variables over them, then what its pi-workflows extension needs to reach this server
    (``PI_WORKFLOWS_HOME``, and ``PI_WORKFLOWS_CLI`` when the CLI is found)."""
    server = os.environ if environ is None else environ
    env = {
        name: value
        for name, value in server.items()
        if name.startswith("PI_") and not name.startswith("PI_WORKFLOWS_")
    }
    env.update(variables)
    env["PI_WORKFLOWS_HOME"] = str(home)
    if cli is not None:
        env["PI_WORKFLOWS_CLI"] = cli
    return env


AGENTS_DIR = "agents"

MAX_REPLACEMENTS = 2
"""New headless agents started for a step no turn works on, before its run is paused."""

AGENT_ERROR_TAIL_BYTES = 2000
"""What the server keeps of a headless Pi's output, for diagnosis: the end of its stderr
(Pi's own errors). Its stdout is the RPC stream (the conversation, tool output, file
contents): read and dropped, never logged or stored."""
"""Under the state directory: one session directory per detached run's headless Pi."""


def remove_pruned_session_dirs(home: Path, db: Database) -> int:
    """Delete the headless Pi session directories (``<home>/agents/<run id>``: the agent's
    conversation) of runs that no longer exist, so pruning a run removes its transcript too;
    also those left by a prune whose server stopped before it got here. Returns how many.

    A run's row exists before its directory is made, so a directory without a run is never
    one that is about to be used."""
    folder = home / AGENTS_DIR
    try:
        names = [entry.name for entry in os.scandir(folder) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return 0
    if not names:
        return 0
    with db.read() as conn:
        gone = agents.runs_gone(conn, names)
    for name in gone:
        shutil.rmtree(folder / name, ignore_errors=True)
    if gone:
        log.info("removed the headless Pi sessions of %d pruned runs", len(gone))
    return len(gone)


class HeadlessAgents:
    """Every headless agent of this server."""

    def __init__(
        self,
        db: Database,
        config: ServerConfig,
        server_epoch: int,
        on_change: Callable[[str], None] = lambda _run_id: None,
    ) -> None:
        self.db = db
        self.config = config
        self.server_epoch = server_epoch
        # Told the run id of every change this supervisor commits (a step presented again,
        # a run paused): the server's wake, so watchers (the agent's own session watch
        # first) see it now, not at the next unrelated commit.
        self.on_change = on_change
        self.agents: dict[str, Agent] = {}
        self._starting: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def _spawn_task(self, coroutine: Any, name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def count(self) -> int:
        """Live and starting agents."""
        return len(self.agents) + len(self._starting)

    def reconcile(self) -> None:
        """Start the agents detached runs need now, stop the ones no run needs (a tick).

        At most ``PI_WORKFLOWS_MAX_AGENTS`` agents start or live at once; the oldest runs
        that want one get the free places, the others' steps wait for an agent to stop (a
        fan_out of detached children shares the agents like runners)."""
        wanted = {w.run_id: w for w in agents.wanted(self.db.conn)}
        for run_id, want in wanted.items():
            if self.count >= self.config.max_agents:
                break
            if run_id not in self.agents and run_id not in self._starting:
                self._starting.add(run_id)
                self._spawn_task(self._start(want), f"agent-{run_id}")
        for run_id, agent in list(self.agents.items()):
            needed = wanted.get(run_id)
            # An agent no run needs stops; so does one whose run now runs other code (an
            # upgrade): its tools and steps come from that code, so a new one starts.
            stale = needed is not None and needed.definition_digest != agent.definition_digest
            if (needed is None or stale) and not agent.stopping:
                agent.stopping = True
                self._spawn_task(self._stop(agent), f"agent-stop-{run_id}")
            elif not agent.stopping:
                self._watch_stall(agent)

    def _watch_stall(self, agent: Agent) -> None:
        """An agent whose run's step no turn of it works on (not presented, delivered and
        left, its seat gone) for ``PI_WORKFLOWS_AGENT_STALL_SECONDS``: the step is presented
        again; the next time the agent is replaced (a new one attaches and is presented the
        step); after ``MAX_REPLACEMENTS`` replacements the run is paused
        ``agentUnavailable``. A turn that starts on the step starts the count over."""
        stall = delivery.agent_stall(self.db.conn, agent.run_id, agent.started_ms)
        now = self.db.clock.now_ms()
        idle_ms = int(self.config.agent_stall_seconds * 1000)
        if stall is None or now - stall.since < idle_ms:
            return
        node = stall.request.node_id
        if stall.nudges == 0:
            log.info("the headless Pi of run %s works on no turn of step %s (%s for %.0f s):"
                     " presenting it again", agent.run_id, node, stall.state,
                     (now - stall.since) / 1000)  # fmt: skip
            delivery.nudge(self.db, stall.request, prompt=True)
            self.on_change(agent.run_id)
            return
        if stall.nudges <= MAX_REPLACEMENTS:
            log.warning("the headless Pi of run %s still works on no turn of step %s: replacing"
                        " it", agent.run_id, node)  # fmt: skip
            delivery.nudge(self.db, stall.request, prompt=False)
            self.on_change(agent.run_id)
            agent.stopping = True
            self._spawn_task(self._stop(agent), f"agent-replace-{agent.run_id}")
            return
        seconds = self.config.agent_stall_seconds
        self._park(
            agent.run_id,
            f"the headless Pi started no model turn for step {node} within {seconds:g} s, also"
            f" after it was presented again and {MAX_REPLACEMENTS} new agents; check `pi-workflows"
            " pi doctor` and the server log, then 'pi-workflows run resume'",
        )

    async def _start(self, want: agents.Wanted) -> None:
        try:
            await self._spawn(want)
        except Exception as exc:  # a missing pi, a bad directory, a broken install
            log.warning("cannot start the headless Pi of run %s: %s", want.run_id, exc)
            self._park(want.run_id, f"cannot start the headless Pi ({exc}); {self._advice()}")
        finally:
            self._starting.discard(want.run_id)

    def _advice(self) -> str:
        return (
            "install Pi or set PI_WORKFLOWS_PI to its path (and PI_WORKFLOWS_PI_EXTENSION to"
            " the pi-workflows extension), then 'pi-workflows run resume'"
        )

    def _command(self, want: agents.Wanted) -> tuple[list[str], dict[str, str], str | None]:
        """The agent's argument list (with the run's tool flags), environment and working
        directory."""
        extension = extension_path(self.config)
        if extension is None:
            raise FileNotFoundError("the pi-workflows Pi extension is not installed")
        tools = run_tool_flags(self.db, want.run_id)
        session_dir = self.config.home / AGENTS_DIR / want.run_id
        session_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        argv = [
            *pi_command(self.config),
            "--mode",
            "rpc",
            "--session-id",
            want.session_id,
            "--session-dir",
            str(session_dir),
            "--no-extensions",
            "-e",
            extension,
            *tools,
        ]
        recorded = run_rows.read_environment(self.db.conn, want.run_id)
        env = agent_environment(recorded.variables, self.config.home, _cli_path())
        directory = recorded.working_dir or "/"
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"the run's working directory {directory} is gone")
        return argv, env, directory

    async def _spawn(self, want: agents.Wanted) -> None:
        argv, env, cwd = self._command(want)
        recorded: list[str] = []

        def record(pid: int) -> None:
            # Runs between the exec and the server's next await: nothing from the agent
            # (its session attach, a submission) is handled before this commit. If it
            # raises (a full disk), ``spawn_command`` kills and reaps the agent.
            start = process_start(pid)  # an unreaped child always has one
            if start is None:
                raise RuntimeError(f"the headless Pi {pid} has no start time to record")
            recorded.append(
                agents.record_started(
                    self.db, want.run_id, want.session_id, self.server_epoch, pid, start
                )
            )

        process = await children.spawn_command(
            argv,
            cwd=cwd,
            env=env,
            tail_bytes=AGENT_ERROR_TAIL_BYTES,
            spawned=record,
            keep_stdout=False,  # its RPC stream: the conversation, never the server's to keep
        )
        agent = Agent(
            recorded[0], want.run_id, process, want.definition_digest, self.db.clock.now_ms()
        )
        self.agents[want.run_id] = agent
        agent.task = asyncio.create_task(self._watch(agent), name=f"agent-watch-{want.run_id}")
        log.info("started the headless Pi of run %s (pid %d)", want.run_id, process.pid)

    async def _watch(self, agent: Agent) -> None:
        await agent.process.exited.wait()
        if agent.stopping:
            return  # ``_stop`` reaps it
        code = await children.stop(agent.process, 0.1)
        tail = agent.process.error_tail()[-AGENT_ERROR_TAIL_BYTES:]
        self.agents.pop(agent.run_id, None)
        with contextlib.suppress(StoreError):
            agents.record_ended(self.db, agent.agent_id, code, tail)
        last = (tail.strip().splitlines() or ["no error output"])[-1][:200]
        log.warning("the headless Pi of run %s exited with %s", agent.run_id, code)
        log.info("the headless Pi of run %s: last error line: %s", agent.run_id, last)
        self._park(agent.run_id, f"the headless Pi exited with code {code}: {last}")

    def _park(self, run_id: str, detail: str) -> None:
        with self.db.read() as conn:
            row = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            request = interactions.open_request_of(conn, run_id)
        if row is None or row[0] != "waiting" or request is None:
            return  # between steps: the next wait starts a new agent
        with contextlib.suppress(StoreError):
            lifecycle.pause_waiting(self.db, run_id, ParkReason.AGENT_UNAVAILABLE, detail)
            self.on_change(run_id)

    async def _stop(self, agent: Agent) -> None:
        code = await children.stop(agent.process, self.config.kill_grace_seconds)
        self.agents.pop(agent.run_id, None)
        # A full disk must not stop the shutdown: the next server marks the agent orphaned.
        with contextlib.suppress(StoreError, sqlite3.Error):
            agents.record_ended(
                self.db, agent.agent_id, code, agent.process.error_tail()[-AGENT_ERROR_TAIL_BYTES:]
            )
        log.info("stopped the headless Pi of run %s", agent.run_id)

    async def stop_all(self) -> None:
        """Shutdown: stop every agent."""
        for agent in list(self.agents.values()):
            agent.stopping = True
        await asyncio.gather(*(self._stop(a) for a in list(self.agents.values())))
