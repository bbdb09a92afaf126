"""Drive a workflow that asks a question from an asyncio program (the async client).

    python examples/programs/async_answers.py

It starts the built-in `demo`, waits until the run asks its checkpoint question, answers
it, and prints the run's final output: the same surface as the blocking `Client`.
"""

from __future__ import annotations

import asyncio
import sys

from pi_workflows.client import AsyncClient


async def main() -> int:
    """Run the demo and answer its question; 0 when it completed."""
    async with AsyncClient() as client:
        run_id = await client.start("builtin:demo", {"items": [3, 1, 2]})
        view = await client.wait(run_id, timeout=120)
        if view["status"] != "waiting":
            print(f"the run is {view['status']}, not waiting")
            return 1
        print(f"{run_id} asks: {view['waitingOn']['request']['question']}")
        await client.answer_checkpoint(run_id, "answered by a program")
        output = await client.result(run_id, timeout=120)
        print(f"output: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
