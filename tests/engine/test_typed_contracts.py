"""Typed contracts in the engine: the schemas the definition snapshot carries to the
server, and the step contract the model reads."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from pi_workflows.authoring import Workflow, agent, checkpoint, compute, edge
from pi_workflows.authoring.contracts import SCHEMA_NOTE
from pi_workflows.engine import agent_prompt, definition_digest, snapshot

pytestmark = pytest.mark.timeout(60)


class Order(BaseModel):
    sku: str
    count: int


def _workflow(*, typed: bool) -> Workflow:
    return Workflow(
        "orders",
        start="plan",
        nodes={
            "plan": agent("Plan", "An order", output=Order if typed else None),
            "ask": checkpoint("Ship?", answer={"type": "boolean"} if typed else None),
            "done": compute(lambda ctx: 1),
        },
        edges=[edge("plan", "ask"), edge("ask", "done")],
        input={"type": "object", "required": ["orders"]} if typed else None,
    )


def test_the_snapshot_carries_each_schema_where_it_applies() -> None:
    """`inputSchema` at the top, `outputSchema` on the agent, `answerSchema` on the
    checkpoint: the JSON Schemas the server and the clients show and check."""
    shot = snapshot(_workflow(typed=True))
    assert shot["inputSchema"] == {"type": "object", "required": ["orders"]}
    nodes = shot["nodes"]
    assert isinstance(nodes, dict)
    assert nodes["plan"]["outputSchema"] == Order.model_json_schema()  # type: ignore[index]
    assert nodes["ask"]["answerSchema"] == {"type": "boolean"}  # type: ignore[index]
    expected = nodes["plan"]["expectedOutput"]  # type: ignore[index]
    assert expected.startswith("An order\n" + SCHEMA_NOTE)


def test_a_workflow_without_contracts_has_the_snapshot_and_digest_it_had_before() -> None:
    """No schema keys appear without contracts, so digests recorded before typed contracts
    existed stay valid; adding a contract changes the digest."""
    plain = snapshot(_workflow(typed=False))
    assert "inputSchema" not in plain
    nodes = plain["nodes"]
    assert isinstance(nodes, dict)
    assert "outputSchema" not in nodes["plan"]  # type: ignore[operator]
    assert "answerSchema" not in nodes["ask"]  # type: ignore[operator]
    assert definition_digest(plain) != definition_digest(snapshot(_workflow(typed=True)))


def test_the_step_contract_shows_the_schema_the_output_must_match() -> None:
    """The text sent to the model ends with the generated expected output and the schema."""
    node = agent("Order something", output=Order)
    text = agent_prompt(
        workflow="orders", node_id="plan", node=node, prompt="Order", request_id="r"
    )
    expected = text.split("Expected output:\n", 1)[1]
    assert expected.startswith('A JSON object "Order" with these fields:\n- sku (string, required)')
    assert json.loads(expected.splitlines()[-1].removeprefix(SCHEMA_NOTE)) == (
        Order.model_json_schema()
    )
