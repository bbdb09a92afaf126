"""The runner and resolver children: where workflow code runs, one process per job.

Imports only ``engine``, ``sources``, ``authoring`` and ``protocol`` (import-linter forbids
the store, server, client and cli); never opens the database and never knows its path.
Every state change is a proposal sent to the server over an inherited socketpair
(``docs/protocol.md``, "Runner protocol v1").

Entry points: ``python -m pi_workflows.runner`` (one run generation: ``main.py``) and
``python -m pi_workflows.runner.resolve`` (describe or list workflows: ``resolve.py``).

Modules: ``main`` (lifecycle and exit codes), ``channel`` (fd, framing, message ids,
revisions), ``envelope`` (launch envelope and state read), ``load`` (verified loading),
``loop`` (execution loop), ``nodes`` (per-kind execution), ``waits`` (interactive
requests and answers), ``effects`` (managed effects for actions and shells), ``shell``
(commands in their own process group), ``callbacks`` (sync/async callbacks with
deadlines), ``termination`` (SIGTERM), ``runtime``, ``values``, ``limits``, ``errors``,
``describe`` (what the resolver answers).

This package deliberately imports none of its modules here, so ``-m`` entry points do not
run twice.
"""

__all__: list[str] = []
