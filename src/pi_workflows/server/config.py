"""Server settings, read once from the environment at start-up.

Every limit the server enforces is named here with its environment variable and default,
and documented in ``docs/server.md``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _number(environ: dict[str, str], name: str, default: float, minimum: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise ValueError(f"{name}={raw!r} must be at least {minimum:g}")
    return value


@dataclass(frozen=True)
class ServerConfig:
    """The server's limits. Times are seconds unless the name says otherwise."""

    home: Path
    max_runners: int = 4  # PI_WORKFLOWS_MAX_RUNNERS: starting + live runner children
    lease_seconds: float = 30.0  # PI_WORKFLOWS_LEASE_SECONDS: claim lifetime after a write
    idle_exit_seconds: float = 600.0  # PI_WORKFLOWS_IDLE_EXIT_SECONDS: 0 disables idle exit
    kill_grace_seconds: float = 5.0  # PI_WORKFLOWS_KILL_GRACE_SECONDS: SIGTERM to SIGKILL
    runner_startup_seconds: float = 20.0  # PI_WORKFLOWS_RUNNER_STARTUP_SECONDS: until ready
    node_grace_seconds: float = 10.0  # PI_WORKFLOWS_NODE_GRACE_SECONDS: after a node deadline
    resolve_seconds: float = 30.0  # PI_WORKFLOWS_RESOLVE_SECONDS: resolver child limit
    receipt_days: float = 30.0  # PI_WORKFLOWS_RECEIPT_DAYS: receipts of ended runs kept
    retention_days: float = 30.0  # PI_WORKFLOWS_RETENTION_DAYS: ended runs kept; 0 keeps all
    prune_interval_seconds: float = 3600.0  # PI_WORKFLOWS_PRUNE_INTERVAL_SECONDS: between prunes
    submit_wait_seconds: float = 30.0  # PI_WORKFLOWS_SUBMIT_WAIT_SECONDS: reply held for
    validate_seconds: float = 120.0  # PI_WORKFLOWS_VALIDATE_SECONDS: a validation runner's limit
    # PI_WORKFLOWS_DRAIN_SECONDS: how long `server stop` and `run pause` let a running node
    # reach its boundary before parking at once (0: park at once)
    drain_seconds: float = 10.0
    runner_template: bool = True  # PI_WORKFLOWS_RUNNER_TEMPLATE=0: spawn every child instead
    pi_command: str = "pi"  # PI_WORKFLOWS_PI: the pi of detached runs' headless agents
    pi_extension: str | None = None  # PI_WORKFLOWS_PI_EXTENSION: the extension it loads
    max_agents: int = 4  # PI_WORKFLOWS_MAX_AGENTS: starting + live headless agents
    # PI_WORKFLOWS_AGENT_STALL_SECONDS: a headless agent that works on none of its run's step
    # for this long is prompted again, then replaced (store/delivery.py, server/agents.py)
    agent_stall_seconds: float = 60.0
    # PI_WORKFLOWS_TURN_RETRIES and PI_WORKFLOWS_TURN_RETRY_SECONDS: a step whose model turn
    # ends with a provider error is presented again this many times, the first after this
    # long (doubling), before its run pauses agentUnavailable
    turn_retries: int = 3
    turn_retry_seconds: float = 10.0
    client_write_buffer_bytes: int = 4 * 1024 * 1024  # a slower reader is disconnected
    runner_output_tail_bytes: int = 64 * 1024  # kept of each runner's stdout and stderr

    @property
    def lease_ms(self) -> int:
        """The lease in milliseconds."""
        return int(self.lease_seconds * 1000)

    @classmethod
    def from_environment(cls, home: Path, environ: dict[str, str] | None = None) -> ServerConfig:
        """Read the settings; a malformed value raises ``ValueError`` naming the variable."""
        env = dict(os.environ if environ is None else environ)
        return cls(
            home=home,
            max_runners=int(_number(env, "PI_WORKFLOWS_MAX_RUNNERS", 4, 1)),
            max_agents=int(_number(env, "PI_WORKFLOWS_MAX_AGENTS", 4, 1)),
            lease_seconds=_number(env, "PI_WORKFLOWS_LEASE_SECONDS", 30.0, 0.5),
            idle_exit_seconds=_number(env, "PI_WORKFLOWS_IDLE_EXIT_SECONDS", 600.0, 0),
            kill_grace_seconds=_number(env, "PI_WORKFLOWS_KILL_GRACE_SECONDS", 5.0, 0.1),
            runner_startup_seconds=_number(env, "PI_WORKFLOWS_RUNNER_STARTUP_SECONDS", 20.0, 1),
            node_grace_seconds=_number(env, "PI_WORKFLOWS_NODE_GRACE_SECONDS", 10.0, 0.1),
            resolve_seconds=_number(env, "PI_WORKFLOWS_RESOLVE_SECONDS", 30.0, 1),
            receipt_days=_number(env, "PI_WORKFLOWS_RECEIPT_DAYS", 30.0, 0),
            retention_days=_number(env, "PI_WORKFLOWS_RETENTION_DAYS", 30.0, 0),
            prune_interval_seconds=_number(env, "PI_WORKFLOWS_PRUNE_INTERVAL_SECONDS", 3600.0, 1),
            submit_wait_seconds=_number(env, "PI_WORKFLOWS_SUBMIT_WAIT_SECONDS", 30.0, 0),
            validate_seconds=_number(env, "PI_WORKFLOWS_VALIDATE_SECONDS", 120.0, 1),
            drain_seconds=_number(env, "PI_WORKFLOWS_DRAIN_SECONDS", 10.0, 0),
            runner_template=env.get("PI_WORKFLOWS_RUNNER_TEMPLATE", "1")
            not in ("0", "false", "no"),
            pi_command=env.get("PI_WORKFLOWS_PI") or "pi",
            pi_extension=env.get("PI_WORKFLOWS_PI_EXTENSION") or None,
            agent_stall_seconds=_number(env, "PI_WORKFLOWS_AGENT_STALL_SECONDS", 60.0, 0.5),
            turn_retries=int(_number(env, "PI_WORKFLOWS_TURN_RETRIES", 3, 0)),
            turn_retry_seconds=_number(env, "PI_WORKFLOWS_TURN_RETRY_SECONDS", 10.0, 0.05),
        )
