"""Start a workflow from a program, follow it, and use its result (the blocking client).

Run it from the repository root (a server starts on demand; set PI_WORKFLOWS_HOME to use a
private state directory):

    python examples/programs/run_countdown.py 3

It starts `examples/workflows/countdown.workflow.py`, waits for the run to end, prints its
output and then the run's history, one event per line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pi_workflows.client import Client, RunFailedError

WORKFLOW = Path(__file__).resolve().parents[1] / "workflows" / "countdown.workflow.py"


def main(start: int) -> int:
    """Run the countdown from `start`; 0 when it completed."""
    with Client() as client:
        run_id = client.start(str(WORKFLOW), {"from": start})
        print(f"started {run_id}")
        try:
            output = client.result(run_id, timeout=120)
        except RunFailedError as failure:
            print(f"the run ended {failure.status}: {failure.error}")
            return 1
        print(f"output: {output}")
        for event in client.history(run_id):
            print(f"  {event['revision']:>3}  {event['type']:<16} {event['nodeId'] or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
