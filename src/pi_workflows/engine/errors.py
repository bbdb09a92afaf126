"""Errors of the pure engine.

Each is raised for a caller mistake or a bad value, never for a run outcome: a failed or
timed-out run is a ``Fail`` or ``TimeOut`` transition, not an exception.
"""

from __future__ import annotations


class NotJsonError(TypeError, ValueError):
    """A value that must be JSON (an output, an answer, the run input) is not.

    Raised by ``check_json``. ``where`` says whose value it is (``output of node 'x'``) and
    ``problem`` what is wrong and where inside it (``$.items[2] is a set``). The runner turns
    it into a ``failed`` node result; it is both a TypeError and a ValueError so callers may
    catch either. Distinct from the protocol's error of the same name, which knows nothing
    of nodes.
    """

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where} is not JSON: {problem}")


class UnknownNodeError(KeyError):
    """The caller named a node the workflow does not have.

    A runner bug or a run whose stored state belongs to another definition; never a
    workflow outcome. ``workflow`` and ``node`` name both.
    """

    def __init__(self, workflow: str, node: str) -> None:
        self.workflow = workflow
        self.node = node
        super().__init__(f"workflow {workflow!r} has no node {node!r}")

    def __str__(self) -> str:
        return str(self.args[0])


class NodeValueError(ValueError):
    """A value given to or produced for a node does not fit that node.

    Raised by the helpers of ``outcomes.py``: a ``human_decision`` answer naming an
    undeclared choice, a checkpoint request that is not a question, a prompt or title
    callback that returned something other than text. ``node`` names the node; the message
    is one line and safe to show. The runner fails the node (or, for an answer, rejects it).
    """

    def __init__(self, node: str, problem: str) -> None:
        self.node = node
        self.problem = problem
        super().__init__(f"node {node!r}: {problem}")
