"""What the server knows of one live runner: its identity, child, readiness, why it is being
stopped, what the server refused it, and a pending drain.

Plain records the supervisor and the settlement read and write; they hold no logic and
never touch the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pi_workflows.server.children import Child
from pi_workflows.server.runner_messages import RunnerIdentity
from pi_workflows.store.claims import Claim


@dataclass
class Drain:
    """A request to park a run at its runner's next node boundary (``Supervisor.drain``).

    ``park`` commits the park under the runner's claim (with a command's receipt when a
    command asked for it) and returns what the asker answers; ``done`` receives that answer.
    ``kill_reason`` is how the runner is then stopped (``cancelled`` or ``stopping``).
    """

    park: Callable[[Claim], object]
    done: asyncio.Future[object]
    kill_reason: str


@dataclass
class RunnerHandle:
    """One live runner as the supervisor tracks it."""

    identity: RunnerIdentity
    command: str
    envelope: dict[str, Any]
    child: Child | None = None
    ready: bool = False
    ready_revision: int | None = None
    # cancelled | timedOut | nodeTimeout | stopping | claimLost | validationTimeout | lingered
    kill_reason: str | None = None
    claim_lost: bool = False
    # The server refused one of its proposals (``KIND answered OUTCOME: CODE``): its exit
    # is the server's doing, not a crash (outcome ``refused``).
    refused: str | None = None
    refused_code: str | None = None
    # Set (store clock ms) for a runner launched to validate a submission: its time limit.
    validating_until: int | None = None
    # A pause or a server stop waiting for the runner's next node boundary.
    drain: Drain | None = None
    # When (loop time) the renewal first found the claim released by the runner's own last
    # commit: a runner still alive long after is stopped (``lingered``).
    released_seen: float | None = None
    task: asyncio.Task[None] | None = None
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    # The root of its run's tree (itself for a root run): the scheduler shares capacity
    # between trees.
    root_id: str = ""

    @property
    def run_id(self) -> str:
        """The run this runner executes."""
        return self.identity.run_id

    @property
    def pid(self) -> int | None:
        """The child's pid once spawned."""
        return None if self.child is None else self.child.pid
