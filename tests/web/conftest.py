"""Fixtures for the web page's tests: a real server with the tests' workflows, the page
process the real `pi-workflows ui` starts, and a headless Chromium signed in to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.browser import PageUrl, chromium, start_page
from support.server import ServerProcess

ASK = """
from pi_workflows import (Rejected, Workflow, checkpoint, choice, compute, edge, human_decision,
                          switch)


def check(answer, ctx):
    if answer.get("note") == "nope":
        raise Rejected("a note of 'nope' is not an answer: say what you mean")


workflow = Workflow(
    "ask",
    start="prep",
    nodes={
        "prep": compute(lambda ctx: {"ready": True}),
        "question": checkpoint(
            lambda ctx: {"question": "How many reviewers?"},
            answer={"type": "object",
                    "properties": {"count": {"type": "integer", "minimum": 1},
                                   "note": {"type": "string"}},
                    "required": ["count"]},
            validate=check,
        ),
        "decide": human_decision(title="Ship it?",
                                 choices=[choice("yes", "Ship", "merge and release"),
                                          choice("no", "Hold")]),
        "done": compute(lambda ctx: {"count": ctx.outputs["question"]["count"],
                                     "choice": ctx.outputs["decide"]["choice"]}),
    },
    edges=[
        edge("prep", "question"),
        edge("question", "decide"),
        switch("decide", on="$.choice", cases={"yes": "done", "no": "done"}),
    ],
    settings={"type": "object", "properties": {"reviewers": {"type": "integer", "default": 2}}},
)
"""

GATE = """
import os
import time

from pi_workflows import Workflow, compute, edge


def wait_for_gate(ctx):
    print("waiting for", ctx.input["gate"])
    until = time.monotonic() + 60
    while not os.path.exists(ctx.input["gate"]):
        if time.monotonic() > until:
            raise TimeoutError("the gate never opened")
        time.sleep(0.02)
    return {"opened": True}


def fail(ctx):
    if ctx.input.get("fail"):
        print("about to fail")
        raise ValueError("told to fail")
    return {"ok": True}


workflow = Workflow(
    "gate",
    start="start",
    nodes={
        "start": compute(lambda ctx: {"gate": ctx.input["gate"]}),
        "wait": compute(wait_for_gate),
        "finish": compute(fail),
    },
    edges=[edge("start", "wait"), edge("wait", "finish")],
)
"""

QUICK = """
from pi_workflows import Workflow, compute

workflow = Workflow("quick", start="one",
                    nodes={"one": compute(lambda ctx: {"n": ctx.input.get("n")})})
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A started server whose project has the `ask`, `gate` and `quick` workflows."""
    process = ServerProcess(tmp_path)
    process.write_workflow("ask", ASK)
    process.write_workflow("gate", GATE)
    process.write_workflow("quick", QUICK)
    process.start()
    yield process
    process.cleanup()


@pytest.fixture
def page_url(server: ServerProcess) -> PageUrl:
    """The page process `pi-workflows ui --no-browser` started for the server."""
    return start_page(server)


@pytest.fixture
def browser(tmp_path: Path, page_url: PageUrl) -> Iterator[Any]:
    """A Chromium page signed in with the printed URL (the cookie is set)."""
    with chromium(tmp_path) as context:
        tab = context.new_page()
        tab.goto(page_url.url)
        yield tab
