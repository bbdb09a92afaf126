"""The `pi-workflows` command line (click + rich) and the `make demo` tour.

Layout:

- `main`: the root command group, the global `--home` option, and the one error boundary that
  turns every failure into one `pi-workflows: error: ...` line and an exit code.
- `errors`: the CLI's own errors and the exit-code table (`exit_code_for`).
- `options`: shared option types (JSON values, project directories) and client construction.
- `output`: `--json` printing and the rich renderers for run lists, status and problems.
- `show`: `run show` (one run: attempts, tracebacks, messages, effects, what it waits on).
- `timeline`: `run history` lines and `run logs` output, also streamed for `--follow`.
- `graph`: a workflow's graph as text and Mermaid, and one run's graph view.
- `watch_app/`: the Textual live view of `pi-workflows watch` (imported only by it).
- `waiting`: polling a run until it settles (`run start --wait`, the demo).
- `commands/`: one module per command group (`server`, `workflows`, `run` with
  `run_history` for `run history|logs`, `checkpoint` and `decision`, `state`, `watch`).
- `demo`: `python -m pi_workflows.cli.demo`.

It talks to the server only through `pi_workflows.client`; the one exception is `server run`,
which imports `pi_workflows.server.main` lazily to run the server in this process.

The public entry point is `pi_workflows.cli.main:main` (the `pi-workflows` console script).
Nothing is re-exported here, so that `python -m pi_workflows.cli.main` and
`python -m pi_workflows.cli.demo` run their module exactly once.
"""

__all__: list[str] = []
